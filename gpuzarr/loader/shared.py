"""Batch buffers in shared memory, for batches read by the loader's worker processes.

A buffer is a NumPy array over a named shared-memory segment (``multiprocessing.shared_memory``):
a worker process maps the segment by its name and reads a batch straight into it, and the loader
hands the same memory out without a copy. When nothing refers to an array any more (no batch,
tensor or view of it), its segment serves the next array of its size; segments beyond what a
pass needs, and all of them when the loader closes, are unlinked, and each worker is told with
its next task to unmap them (:meth:`SharedSegments.unmapped_by`).

Only the process that made a segment unlinks it (a fork's copies of the arrays leave them be).
Segments are made by the loader's own process, whose multiprocessing resource tracker the spawned
workers share, so a segment is also unlinked if the process dies before it could do so itself.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import weakref
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

_BYTE = np.dtype(np.uint8)


class _Segment(SharedMemory):
    """A segment whose mapping may outlive this object.

    The arrays over it hold the mapping; closing it while they still do raises ``BufferError``,
    and the mapping then goes with the last of them instead. Its file descriptor is closed as
    soon as it is mapped (the mapping needs none): ``close`` releases the buffer first, and where
    that raised, the descriptor stayed open, and with it the unlinked segment's memory in
    ``/dev/shm``, for the life of the process (32 MiB a loader left with a batch referenced).
    """

    def __init__(self, name: str | None = None, create: bool = False, size: int = 0) -> None:
        super().__init__(name=name, create=create, size=size)
        fd = getattr(self, "_fd", -1)  # POSIX only
        if fd >= 0:
            self._fd = -1
            os.close(fd)

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


class _Idle:
    """Segments whose arrays are gone, kept for the next array of their size (the workers keep
    them mapped, and their pages stay faulted in)."""

    def __init__(self) -> None:
        # Re-entrant: a segment's array may be collected (and its finalizer take this lock) in
        # the middle of a locked section of the same thread.
        self.lock = threading.RLock()
        self.segments: list[_Segment] = []
        self.owner = os.getpid()

    def unlink_all(self) -> list[str]:
        """Unlink every idle segment; their names. Nothing in a fork of the process that made
        them (the segments are that process's)."""
        if os.getpid() != self.owner:
            return []
        with self.lock:
            segments, self.segments = self.segments, []
        for segment in segments:
            with contextlib.suppress(FileNotFoundError):
                segment.unlink()
        return [segment.name for segment in segments]


class SharedSegments:
    """Shared-memory arrays made for ``workers`` worker processes.

    A segment whose array is gone is kept for the next array of its size, up to ``keep`` of
    them (a pass of a loader asks for the same buffer sets again and again); beyond that it is
    unlinked, and each worker is told to unmap it (:meth:`unmapped_by`). :meth:`close` unlinks
    the idle ones, as does the garbage collection of this object.
    """

    def __init__(self, workers: int, keep: int) -> None:
        self._lock = threading.RLock()  # re-entrant, as _Idle.lock
        self._keep = keep
        self._names: dict[int, str] = {}
        self._unmapped: list[list[str]] = [[] for _ in range(workers)]
        self._idle = _Idle()
        self._closed = False
        self._unlink_idle = weakref.finalize(self, self._idle.unlink_all)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """An uninitialised C-order array of ``shape`` in a segment of its own."""
        nbytes = dtype.itemsize * math.prod(shape)
        size = max(nbytes, 1)  # a segment has at least one byte
        segment = self._take_idle(size) or _Segment(create=True, size=size)
        root = np.frombuffer(_mapped(segment), _BYTE, size)
        with self._lock:
            self._names[id(root)] = segment.name
        weakref.finalize(root, self._gone, id(root), segment)
        return root[:nbytes].view(dtype).reshape(shape)

    def _take_idle(self, size: int) -> _Segment | None:
        with self._idle.lock:
            for i, segment in enumerate(self._idle.segments):
                if segment.size == size:  # the size it was made with
                    return self._idle.segments.pop(i)
        return None

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

    def idle(self) -> int:
        """How many segments are kept for reuse."""
        with self._idle.lock:
            return len(self._idle.segments)

    def close(self) -> None:
        """Unlink the idle segments; those with arrays are unlinked when their arrays go."""
        self._closed = True
        self._tell_workers(self._idle.unlink_all())

    def _gone(self, root_id: int, segment: _Segment) -> None:
        # The array is being freed (by whichever thread dropped it last). Kept for reuse, or
        # unlinked: the name goes now, and the mapping with the array (closing it here would
        # fail while the array's export is live). A fork's copy of the array leaves it alone.
        if os.getpid() != self._idle.owner:
            return
        with self._lock:
            del self._names[root_id]
        with self._idle.lock:
            if not self._closed and len(self._idle.segments) < self._keep:
                self._idle.segments.append(segment)
                return
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()
        self._tell_workers([segment.name])

    def _tell_workers(self, names: list[str]) -> None:
        with self._lock:
            for unmapped in self._unmapped:
                unmapped.extend(names)


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
                with contextlib.suppress(BufferError):  # a view still alive: the mapping goes with it
                    segment.close()

    def close(self) -> None:
        self.unmap(list(self._maps))
