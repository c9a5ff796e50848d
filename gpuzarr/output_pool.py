"""Host output buffers taken again once nothing refers to them.

A read returns a new NumPy array. Above glibc's mmap threshold (and for every array NumPy backs
with huge pages) that memory comes fresh from the kernel and goes back to it when the array is
dropped, so every read pays a page fault per 4 KiB page (or the zeroing of each 2 MiB page) on
first touch: a quarter to a half of a crop's read time on the CPU. A training loop or a crop
loop asks for the same sizes again and again, so the pool keeps the buffers it handed out and
gives one out again once its reference count shows that no array, view, memoryview or tensor
refers to it any more (NumPy points every view at the buffer that owns the memory, so one
count covers them all).

What it holds is bounded by the ``host_output_pool_bytes`` setting (default 256 MiB), counting
buffers in use and idle: past the bound the oldest buffers leave the pool. One still in use
leaves only once nothing refers to it any more: until then the pool keeps its own reference, so
the reference count that code holding the buffer sees never changes under it (the data loader's
buffer sets, for one, take a baseline count and reuse a set when the count is back there).
``gpuzarr.config.set(host_output_pool_bytes=0)`` turns it off; a lowered bound is kept from
the next read on (what the pool holds beyond it goes then); :func:`release` frees the idle
buffers now.

The pool is off where a reference count cannot prove that a buffer is free: on interpreters
without ``sys.getrefcount`` and on free-threaded CPython builds.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from . import config
from .buffers import aligned_empty

#: smaller outputs come from the allocator's own free lists without page faults
MIN_POOLED_BYTES = 64 * 1024
_BYTE = np.dtype(np.uint8)
#: buffers of one size checked for reuse per request, oldest first
_CHECKED_PER_REQUEST = 4
#: An idle buffer not handed out in this many requests is let go of (looked for every
#: ``_TRIM_EVERY`` requests): reads of many shapes (random crops, a loader's cache misses) left
#: buffers of sizes never asked for again idle up to the bound, 256 MiB by default.
_IDLE_REQUESTS = 1024
_TRIM_EVERY = 64


class _Buffer:
    """One page-aligned allocation, as the bytes :func:`aligned_empty` gives."""

    __slots__ = ("data", "last")

    def __init__(self, nbytes: int) -> None:
        self.data = aligned_empty(nbytes)
        #: the pool's request count when it was last handed out
        self.last = 0

    @property
    def nbytes(self) -> int:
        return int(self.data.size)

    def view(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        # every view's ``base`` is the array that owns the memory (NumPy collapses chains of
        # views to it), which :func:`_references` counts; the buffer may be larger (a size class)
        nbytes = dtype.itemsize * math.prod(shape)
        return self.data[:nbytes].view(dtype).reshape(shape)


def _references(buffer: _Buffer) -> int:
    return sys.getrefcount(buffer.data.base)


def _idle_references() -> int:
    """The count :func:`_references` reads for a buffer that only the pool holds (measured, not
    assumed: interpreters differ in what a call adds)."""
    probe = _Buffer(1)
    return _references(probe)


def _supported() -> bool:
    if not hasattr(sys, "getrefcount"):
        return False
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return gil_enabled is None or bool(gil_enabled())


class HostOutputPool:
    """Page-aligned host buffers for read outputs, reused once unreferenced (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_size: dict[int, deque[_Buffer]] = {}
        #: every buffer held, oldest hand-out first
        self._order: OrderedDict[_Buffer, None] = OrderedDict()
        #: buffers past the bound, still in use: let go once they are not (see the module)
        self._retiring: list[_Buffer] = []
        self._held = 0
        self._requests = 0
        self._idle_refs = _idle_references() if _supported() else -1

    @property
    def enabled(self) -> bool:
        return self._idle_refs >= 0

    def held_bytes(self) -> int:
        """Bytes of the buffers the pool holds, in use or idle."""
        return self._held

    def idle_bytes(self) -> int:
        """Bytes of the buffers the pool holds that nothing else refers to."""
        with self._lock:
            return sum(b.nbytes for b in self._order if _references(b) <= self._idle_refs)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """An uninitialised C-order array of ``shape`` whose data starts on a page boundary, cut
        from a buffer of :func:`size_class` bytes (so that outputs of sizes a little apart share
        buffers)."""
        nbytes = dtype.itemsize * math.prod(shape)
        limit = config.get("host_output_pool_bytes")
        if self._held > limit:  # the setting was lowered (0: off): what it holds goes now
            with self._lock:
                self._shrink_to(limit)
        if not self.enabled or nbytes < MIN_POOLED_BYTES or nbytes > limit:
            return aligned_empty(shape, dtype)
        size = min(size_class(nbytes), limit)
        with self._lock:
            self._let_go_of_retired()
            self._requests += 1
            if self._requests % _TRIM_EVERY == 0:
                self._let_go_of_unused()
            buffer = self._take_idle(size)
            if buffer is None:
                buffer = _Buffer(size)
                self._add(buffer, limit)
            buffer.last = self._requests
            return buffer.view(shape, dtype)

    def bytes_buffer(self, nbytes: int) -> np.ndarray[Any, Any]:
        """A uint8 buffer of ``nbytes`` (for reads of encoded bytes), cut from a pooled buffer."""
        return self.empty((nbytes,), _BYTE)

    def _let_go_of_unused(self) -> None:
        """Drop the idle buffers not handed out in the last :data:`_IDLE_REQUESTS` requests."""
        since = self._requests - _IDLE_REQUESTS
        for buffer in [b for b in self._order if b.last < since]:
            if _references(buffer) <= self._idle_refs:
                self._drop(buffer)

    def _take_idle(self, nbytes: int) -> _Buffer | None:
        same = self._by_size.get(nbytes)
        if not same:
            return None
        for _ in range(min(len(same), _CHECKED_PER_REQUEST)):
            buffer = same[0]
            same.rotate(-1)  # checked: to the back, whether taken or still in use
            if _references(buffer) <= self._idle_refs:
                self._order.move_to_end(buffer)
                return buffer
        return None

    def _add(self, buffer: _Buffer, limit: int) -> None:
        self._shrink_to(limit - buffer.nbytes)
        self._by_size.setdefault(buffer.nbytes, deque()).append(buffer)
        self._order[buffer] = None
        self._held += buffer.nbytes

    def _shrink_to(self, nbytes: int) -> None:
        """Drop the least recently used buffers until at most ``nbytes`` are held; one still in
        use is only no longer handed out (kept as retiring until its output is let go of)."""
        while self._order and self._held > nbytes:
            oldest = next(iter(self._order))
            self._drop(oldest)
            if _references(oldest) > self._idle_refs:
                self._retiring.append(oldest)

    def _let_go_of_retired(self) -> None:
        if self._retiring:
            self._retiring = [b for b in self._retiring if _references(b) > self._idle_refs]

    def _drop(self, buffer: _Buffer) -> None:
        del self._order[buffer]
        same = self._by_size[buffer.nbytes]
        same.remove(buffer)
        if not same:
            del self._by_size[buffer.nbytes]
        self._held -= buffer.nbytes

    def release(self) -> int:
        """Let go of every idle buffer now; the bytes given back to the allocator."""
        with self._lock:
            self._let_go_of_retired()
            idle = [b for b in self._order if _references(b) <= self._idle_refs]
            for buffer in idle:
                self._drop(buffer)
            return sum(b.nbytes for b in idle)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()


_POOL = HostOutputPool()


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to one of four sizes per doubling (at most a quarter more), above
    :data:`MIN_POOLED_BYTES`; smaller sizes as they are."""
    if nbytes <= MIN_POOLED_BYTES:
        return nbytes
    step = 1 << (nbytes.bit_length() - 3)
    return -(-nbytes // step) * step


def pooled_bytes(nbytes: int) -> np.ndarray[Any, Any]:
    """A uint8 buffer of ``nbytes`` from the process's pool (see :meth:`HostOutputPool.bytes_buffer`)."""
    return _POOL.bytes_buffer(nbytes)


def pooled_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A page-aligned output array from the process's pool (see the module)."""
    return _POOL.empty(shape, dtype)


def pool() -> HostOutputPool:
    """The process's pool of host output buffers."""
    return _POOL


def release() -> int:
    """Free the pool's idle buffers now (e.g. after the last epoch); the bytes freed."""
    return _POOL.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL._after_fork)
