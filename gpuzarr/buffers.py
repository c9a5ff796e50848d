"""Buffers: page-aligned allocation and per-thread scratch buffers reused across chunks.

A fresh chunk-sized buffer per chunk costs an allocation and, above the allocator's mmap
threshold, a page fault per 4 KiB page on first touch: for 512 KiB chunks that is a large part
of decoding them. Each thread keeps one buffer per purpose and size and reuses it; whatever is
read from a scratch buffer must be consumed before the same thread asks for it again.

Every buffer here starts on a page boundary. glibc places large blocks 16 bytes past a page
boundary, and on some x86 CPUs the kernel's copy from the page cache into such a destination
(source and destination 16 bytes apart modulo 4 KiB) runs several times slower: measured here,
a 512 KiB pread took 200 us into a malloc'd buffer and 25 us into a page-aligned one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_state = threading.local()
_MAX_SIZES = 4
PAGE = 4096
#: The largest buffer a thread keeps between uses. Larger ones are made for each use and go with
#: it: kept, a read of a few 64 MiB chunks left 119 MiB a thread allocated after it ended (476
#: MiB with 4 threads, growing with the cores), which no setting bounded. Their page faults
#: cost a few percent of decoding that much.
KEPT_NBYTES = 16 << 20


def aligned_empty(shape: tuple[int, ...] | int, dtype: Any = np.uint8) -> np.ndarray[Any, Any]:
    """``np.empty(shape, dtype)`` whose data starts on a page boundary (C order)."""
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = dt.itemsize
    for n in dims:
        nbytes *= n
    raw = np.empty(nbytes + PAGE, dtype=np.uint8)
    offset = (-raw.ctypes.data) % PAGE
    aligned: np.ndarray[Any, Any] = raw[offset : offset + nbytes].view(dt).reshape(dims)
    return aligned


def scratch(nbytes: int, purpose: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A uint8 buffer of exactly ``nbytes`` for ``purpose`` ("decoded", "encoded", ...)."""
    if nbytes > KEPT_NBYTES:
        return aligned_empty(nbytes)
    buffers: dict[tuple[str, int], np.ndarray[Any, np.dtype[np.uint8]]] | None = getattr(_state, "buffers", None)
    if buffers is None:
        buffers = _state.buffers = {}
    buffer = buffers.get((purpose, nbytes))
    if buffer is None:
        if len(buffers) >= _MAX_SIZES:
            buffers.clear()
        buffer = buffers[(purpose, nbytes)] = aligned_empty(nbytes)
    return buffer


def growable(nbytes: int, purpose: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The first ``nbytes`` of a per-thread buffer that grows to the largest size asked for
    (up to :data:`KEPT_NBYTES`: a larger one is made for this use only)."""
    if nbytes > KEPT_NBYTES:
        return aligned_empty(nbytes)
    key = f"growable:{purpose}"
    buffer: np.ndarray[Any, np.dtype[np.uint8]] | None = getattr(_state, key, None)
    if buffer is None or buffer.size < nbytes:
        buffer = aligned_empty(max(nbytes, 64 * 1024))
        setattr(_state, key, buffer)
    return buffer[:nbytes]


def growable_nbytes(purposes: list[str]) -> int:
    """The bytes this thread's growable buffers for ``purposes`` hold."""
    total = 0
    for purpose in purposes:
        buffer: np.ndarray[Any, Any] | None = getattr(_state, f"growable:{purpose}", None)
        if buffer is not None:
            total += buffer.nbytes
    return total


def release_growable(purposes: list[str]) -> None:
    """Let go of this thread's growable buffers for ``purposes`` (made again when asked for)."""
    for purpose in purposes:
        key = f"growable:{purpose}"
        if hasattr(_state, key):
            delattr(_state, key)
