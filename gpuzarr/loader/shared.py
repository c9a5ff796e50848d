"""Batch buffers in shared memory, for batches read by the loader's worker processes.

A buffer is a NumPy array over a named shared-memory segment (``multiprocessing.shared_memory``):
a worker process maps the segment by its name and reads a batch straight into it, and the loader
hands the same memory out without a copy. A segment lives as long as its array: when nothing
refers to the array any more (no batch, tensor or view of it), its name is unlinked, and each
worker is told with its next task to unmap it (:meth:`SharedSegments.unmapped_by`).

Segments are made by the loader's own process, whose multiprocessing resource tracker the spawned
workers share, so a segment is also unlinked if the process dies before it could do so itself.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

_BYTE = np.dtype(np.uint8)


class _Segment(SharedMemory):
    """A segment whose mapping may outlive this object.

    The arrays over it hold the mapping; closing it while they still do raises ``BufferError``,
    and the mapping then goes with the last of them instead.
    """

    def __del__(self) -> None:
        with contextlib.suppress(BufferError, OSError):
            self.close()


def _mapped(segment: SharedMemory) -> memoryview:
    buffer = segment.buf
    assert buffer is not None  # None only after close()
    return buffer


def _root(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The array every view of ``array`` refers to (NumPy points views at it)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class SharedSegments:
    """Shared-memory arrays made for ``workers`` worker processes, and the names of the segments
    each worker should unmap because their arrays are gone."""

    def __init__(self, workers: int) -> None:
        self._lock = threading.Lock()
        self._names: dict[int, str] = {}
        self._unmapped: list[list[str]] = [[] for _ in range(workers)]

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """An uninitialised C-order array of ``shape`` in a segment of its own."""
        nbytes = max(dtype.itemsize * math.prod(shape), 1)
        segment = _Segment(create=True, size=nbytes)
        root = np.frombuffer(_mapped(segment), _BYTE, nbytes)
        with self._lock:
            self._names[id(root)] = segment.name
        weakref.finalize(root, self._gone, id(root), segment)
        return root[: dtype.itemsize * math.prod(shape)].view(dtype).reshape(shape)

    def name_of(self, array: np.ndarray[Any, Any]) -> str:
        """The segment ``array`` (one made by :meth:`empty`, or a view of one) lies in."""
        with self._lock:
            return self._names[id(_root(array))]

    def unmapped_by(self, worker: int) -> list[str]:
        """The segments let go of since worker ``worker`` was last told; it unmaps them."""
        with self._lock:
            names, self._unmapped[worker] = self._unmapped[worker], []
        return names

    def held(self) -> int:
        """How many segments have arrays over them now."""
        with self._lock:
            return len(self._names)

    def _gone(self, root_id: int, segment: _Segment) -> None:
        # The array is being freed (by whichever thread dropped it last): the name goes now, and
        # the mapping goes with the array (closing here would fail while its export is live).
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()
        with self._lock:
            name = self._names.pop(root_id)
            for names in self._unmapped:
                names.append(name)


class SegmentMaps:
    """A worker's mappings of the loader's segments, by name."""

    def __init__(self) -> None:
        self._maps: dict[str, tuple[_Segment, np.ndarray[Any, Any]]] = {}

    def array(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """An array of ``shape`` over segment ``name`` (mapped on first use)."""
        mapped = self._maps.get(name)
        if mapped is None:
            segment = _Segment(name=name)
            mapped = (segment, np.frombuffer(_mapped(segment), _BYTE))
            self._maps[name] = mapped
        nbytes = dtype.itemsize * math.prod(shape)
        return mapped[1][:nbytes].view(dtype).reshape(shape)

    def unmap(self, names: list[str]) -> None:
        """Let go of the segments ``names`` (their arrays in the loader's process are gone)."""
        for name in names:
            mapped = self._maps.pop(name, None)
            if mapped is not None:
                segment = mapped[0]
                del mapped  # the array over the mapping first: closing it needs no export left
                segment.close()

    def close(self) -> None:
        self.unmap(list(self._maps))
