"""Batches read ahead on a background thread, into a small pool of reused output buffers.

The producer thread reads batch k+1, k+2, ... (at most ``prefetch`` finished batches wait in the
queue) while the consumer works on batch k. Output buffers come from a pool of ``prefetch + 2``
sets (one held by the consumer, ``prefetch`` queued, one being read), so a steady loop
allocates nothing.

The reuse rule: a batch's buffer goes back to the pool when the consumer asks for the next batch
(or the iteration ends), and is read into again afterwards. So ``batch.data`` is valid until
the next batch is requested; keep it longer with a copy (``.clone()``, ``.copy()``), or make
the loader with ``reuse_buffers=False``. On a GPU the buffer goes back with an event recorded on
the consumer's stream, and the next read into it waits for that event on the side stream: work
the consumer queued on the batch before moving on finishes first.

The producer holds no reference to the iterator the consumer holds, so dropping the iterator
(``break`` out of a loop) stops the thread after the batch it is reading.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .ordering import HostOrdering
    from .reading import BatchReader
    from .sampling import Crops

#: how often a blocked producer looks whether it was stopped, in seconds
POLL_S = 0.05


@dataclass
class Slot:
    """One set of output buffers (one per field) and the event that guards its reuse."""

    buffers: dict[str, Any]
    reuse_event: Any = None


@dataclass
class Ready:
    """A finished batch: its position in the epoch, crops, slot, the views of the slot that hold
    it, and the event recorded after its reads."""

    index: int
    crops: Crops
    slot: Slot
    views: dict[str, Any]
    event: Any


@dataclass
class _Failed:
    error: BaseException


_END = object()


@dataclass
class BufferPool:
    """Output buffer sets: ``size`` of them, reused; None: a fresh set for every batch."""

    make: Callable[[], dict[str, Any]]
    size: int | None
    _free: queue.Queue[Slot] = field(default_factory=queue.Queue)
    _made: int = 0

    def acquire(self, stop: threading.Event) -> Slot | None:
        """A free slot (made on first use), or None once ``stop`` is set."""
        if self.size is None:
            return Slot(self.make())
        while not stop.is_set():
            try:
                return self._free.get_nowait()
            except queue.Empty:
                pass
            if self._made < self.size:
                self._made += 1
                return Slot(self.make())
            try:
                return self._free.get(timeout=POLL_S)
            except queue.Empty:
                continue
        return None

    def release(self, slot: Slot, event: Any) -> None:
        """Give ``slot`` back; its next read waits for ``event`` first."""
        if self.size is not None:
            slot.reuse_event = event
            self._free.put(slot)


def read_one(reader: BatchReader, ordering: HostOrdering, index: int, crops: Crops, slot: Slot) -> Ready:
    """Read batch ``index`` into ``slot`` (after the consumer's last use of it has run)."""
    ordering.wait_before_reuse(slot.reuse_event)
    slot.reuse_event = None
    views = {name: buffer[: len(crops)] for name, buffer in slot.buffers.items()}
    reader.read(crops, views)
    return Ready(index, crops, slot, views, ordering.record())


class Producer:
    """The background thread of one pass over an epoch: batches ``start, start + step, ...`` of
    ``batches``, read in order into slots of ``pool`` and queued for the consumer."""

    def __init__(
        self,
        reader: BatchReader,
        ordering: HostOrdering,
        pool: BufferPool,
        batches: Sequence[Crops],
        indices: Sequence[int],
        prefetch: int,
    ) -> None:
        self._reader = reader
        self._ordering = ordering
        self._pool = pool
        self._batches = batches
        self._indices = indices
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuzarr-loader", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
            except queue.Full:
                continue
            return True
        return False

    def _run(self) -> None:
        try:
            for index in self._indices:
                slot = self._pool.acquire(self._stop)
                if slot is None:
                    return
                ready = read_one(self._reader, self._ordering, index, self._batches[index], slot)
                if not self._put(ready):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            self._put(_Failed(exc))
            return
        self._put(_END)

    def next(self) -> Ready | None:
        """The next finished batch, None at the end; re-raises the producer's error."""
        item = self._queue.get()
        if item is _END:
            return None
        if isinstance(item, _Failed):
            raise item.error
        ready: Ready = item
        return ready

    def stop(self, wait: bool = True) -> None:
        """Stop the thread (after the batch it is reading) and drop the queued batches."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if wait and self._thread is not threading.current_thread():
            self._thread.join()
