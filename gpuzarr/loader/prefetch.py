"""Batches read ahead on a background thread, into a pool of reused output buffers.

The producer thread reads batch k+1, k+2, ... (at most ``prefetch`` finished batches wait in the
queue) while the consumer works on batch k. On the CPU several producer threads ("lanes") may
each read whole batches at once, every lane on its share of the CPU workers, and hand them over
in order: a lane's batch waits for the batches before it. One batch's reads leave the cores idle
while it is planned, while its shards are fetched and while its last chunks finish; batches read
side by side fill those gaps with each other's work.

Buffers are reused only when that is safe, so a batch stays valid as long as anything refers to
it. A buffer set handed out is lent: it goes back to the pool only once no object refers to its
memory any more (the Batch, its tensors or arrays, any view of them: each keeps a reference to
the object owning the memory, whose reference count the pool reads). A loop that drops each
batch before it takes the one after next reuses ``prefetch + 3`` sets (one held by the loop
variable while the next batch is asked for, one just handed out, ``prefetch`` queued, one being
read); a consumer that keeps batches gets new buffers, and its batches are never overwritten.
On a GPU, the stream the consumer worked on is remembered at hand-over, and when the set is
reused the side stream first waits for an event recorded on it then, so the consumer's queued
work on the batch finishes before the buffer is read into again.

On a GPU the producer also decodes ahead: the chunks of the next batches (up to a byte budget,
at most :data:`MAX_AHEAD_BATCHES`) are read in one go, and each batch is then put together from
them. A batched GPU decode takes about as long as its longest stream whatever their number (each
stream is decoded in order), so decoding the chunks of several batches at once is what keeps a
GPU loader from waiting on that latency batch after batch.

The producer holds no reference to the iterator the consumer holds, so dropping the iterator
(``break`` out of a loop) stops the thread after the batch it is reading.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.cuda.phases import phase
from ..parallel import worker_share

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from concurrent.futures import Future

    from .chunked import DecodedWindow
    from .ordering import HostOrdering
    from .reading import BatchReader
    from .sampling import Crops

#: how often a blocked producer looks whether it was stopped, in seconds
POLL_S = 0.05
#: the most batches whose chunks are decoded together (within the byte budget too)
MAX_AHEAD_BATCHES = 16


def _reference_counts(owners: Sequence[Any]) -> list[int]:
    # One helper for the baseline and every later look, so its own references count the same.
    return [sys.getrefcount(owner) for owner in owners]


@dataclass
class Slot:
    """One set of output buffers (one per field), what owns their memory, and how to reuse it."""

    buffers: dict[str, Any]
    owners: list[Any]
    #: the reference counts of ``owners`` when nothing but the slot refers to them
    baseline: list[int]
    #: the stream the consumer worked on when the set was handed out
    consumer_stream: Any = None
    #: what the next read into the set waits for
    reuse_event: Any = None

    def in_use(self) -> bool:
        """Whether anything outside the slot still refers to its memory."""
        return any(n > b for n, b in zip(_reference_counts(self.owners), self.baseline, strict=True))


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


class BufferPool:
    """Output buffer sets, reused once nothing refers to them; ``size`` is how many it keeps
    (None: a new set for every batch, never reused)."""

    def __init__(self, make: Callable[[], dict[str, Any]], size: int | None, ordering: HostOrdering) -> None:
        self._make = make
        self.size = size
        self._ordering = ordering
        self._free: list[Slot] = []
        self._lent: list[Slot] = []
        self._kept = 0
        self._lock = threading.Lock()

    def _new(self) -> Slot:
        buffers = self._make()
        owners = [self._ordering.memory_owner(b) for b in buffers.values()]
        return Slot(buffers, owners, _reference_counts(owners))

    def acquire(self) -> Slot:
        """A free set: one the consumer has let go of, else a new one."""
        if self.size is None:
            return self._new()
        self._reclaim()
        with self._lock:
            if self._free:
                return self._free.pop()
            self._kept += 1
        return self._new()

    def lend(self, slot: Slot, consumer_stream: Any) -> None:
        """``slot`` was handed to the consumer, who works on ``consumer_stream``."""
        if self.size is not None:
            slot.consumer_stream = consumer_stream
            with self._lock:
                self._lent.append(slot)

    def give_back(self, slot: Slot) -> None:
        """``slot`` is free at once (its batch was copied out, or never handed out)."""
        if self.size is not None:
            with self._lock:
                self._free.append(slot)

    def _reclaim(self) -> None:
        with self._lock:
            lent, self._lent = self._lent, []
            for slot in lent:
                if slot.in_use():
                    self._lent.append(slot)
                    continue
                event = self._ordering.reuse_event(slot.consumer_stream)
                slot.consumer_stream = None
                if self._kept > (self.size or 0):
                    # One made while the consumer kept batches: let it go (after the consumer's
                    # work on it, before its memory may serve another stream).
                    self._kept -= 1
                    self._ordering.settle(event)
                    continue
                slot.reuse_event = event
                self._free.append(slot)

    def settle(self) -> None:
        """Wait for the consumer's queued work on every lent set (before the pool goes)."""
        with self._lock:
            for slot in self._lent:
                self._ordering.settle(self._ordering.reuse_event(slot.consumer_stream))


def lane_shares(workers: int, lanes: int) -> list[int]:
    """``workers`` split between ``lanes`` as evenly as whole workers go, at least one each:
    7 between 4 lanes is 2, 2, 2, 1 (``7 // 4`` each would leave 3 idle)."""
    base, extra = divmod(workers, lanes)
    return [max(base + (lane < extra), 1) for lane in range(lanes)]


def read_one(reader: BatchReader, ordering: HostOrdering, index: int, crops: Crops, slot: Slot) -> Ready:
    """Read batch ``index`` into ``slot`` (after the consumer's last use of it has run)."""
    ordering.wait_before_reuse(slot.reuse_event)
    slot.reuse_event = None
    views = {name: buffer[: len(crops)] for name, buffer in slot.buffers.items()}
    reader.read(crops, views)
    return Ready(index, crops, slot, views, ordering.record())


#: How long :meth:`Background.stop` waits for a thread whose start an interrupt cut short to
#: begin: one that was started begins within milliseconds.
START_WAIT_S = 2.0


class Background:
    """Background threads (``threads`` of them) that queue finished batches for the consumer (at
    most ``depth`` wait): what each thread does is :meth:`_run`'s, handing over with :meth:`_put`."""

    def __init__(self, depth: int, threads: int = 1) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        #: the threads, each with what it sets as it begins (see :meth:`_begin`); listed before
        #: it starts: an interrupt (Ctrl-C) inside ``start()`` usually comes once the thread runs,
        #: and a thread left off the list read on beside the next pass, answering its worker
        #: processes' batches (wrong batches, or a worker killed)
        self._began: dict[threading.Thread, threading.Event] = {}
        try:
            for _ in range(threads):
                thread = threading.Thread(target=self._begin, name="gpuzarr-loader", daemon=True)
                self._began[thread] = threading.Event()
                try:
                    thread.start()
                except RuntimeError:  # "can't start new thread": it never runs
                    del self._began[thread]
                    raise
        except BaseException:
            # The threads already running would otherwise read on with nothing to stop them.
            self.stop()
            raise

    def _begin(self) -> None:
        self._began[threading.current_thread()].set()
        self._run()

    def _run(self) -> None:
        raise NotImplementedError

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
            except queue.Full:
                continue
            return True
        return False

    def _fail(self, error: BaseException) -> None:
        """Hand ``error`` to the consumer, which raises it."""
        self._put(_Failed(error))

    def _end(self) -> None:
        """Tell the consumer the pass is over."""
        self._put(_END)

    def next(self) -> Ready | None:
        """The next finished batch, None at the end (or once stopped, by another thread's
        ``close()`` say); re-raises the producer's error."""
        while True:
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if self._stop.is_set():
                    return None
                continue
            break
        if item is _END:
            return None
        if isinstance(item, _Failed):
            error = item.error
            del item
            try:
                raise error
            finally:
                # No cycle through this frame (error -> traceback -> frame -> error): the failed
                # batch's buffers, which the traceback's frames hold, go when the caller drops it.
                del error
        ready: Ready = item
        return ready

    def stop(self, wait: bool = True) -> None:
        """Stop the threads (each after the batch it is reading) and drop the queued batches."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if wait:
            for thread, began in self._began.items():
                if thread is threading.current_thread():
                    continue
                # A thread whose start() an interrupt cut short begins at once, or never did.
                if began.wait(START_WAIT_S):
                    thread.join()


class Producer(Background):
    """The background threads of one pass over an epoch: batches ``indices`` of ``batches``, read
    into slots of ``pool`` and queued for the consumer in order.

    ``lanes`` threads take the batches one at a time (a GPU loader has one, which decodes
    ahead); with more than one, each reads with its share of the ``workers`` CPU workers (they
    differ by one at most), and a batch read is queued only after every batch before it. A
    failed batch is handed over in its turn as its error, and no batch after it is.

    ``ahead_lanes`` 2 (decoding ahead only): a second thread decodes the chunks of the next
    window of batches while the producer puts together the batches of the current one, each
    window within half of ``ahead_bytes`` (so that two windows held at once keep to it), on the
    ordering's ``decode_lane()`` (on a GPU, a stream of its own).
    """

    def __init__(
        self,
        reader: BatchReader,
        ordering: HostOrdering,
        pool: BufferPool,
        batches: Sequence[Crops],
        indices: Sequence[int],
        prefetch: int,
        ahead_bytes: int = 0,
        lanes: int = 1,
        workers: int | None = None,
        ahead_lanes: int = 1,
    ) -> None:
        if lanes > 1 and ahead_bytes:
            raise ValueError("a producer decoding ahead reads with one lane")
        if ahead_lanes not in (1, 2):
            raise ValueError(f"ahead_lanes must be 1 or 2, got {ahead_lanes}")
        self._reader = reader
        #: the budget of one window decoded ahead (two are held at once with a second lane)
        self._ahead_bytes = max(ahead_bytes // ahead_lanes, 1) if ahead_bytes else 0
        #: the thread that decodes the next window (None: the producer decodes each in turn)
        self._ahead_lane = (
            ThreadPoolExecutor(1, thread_name_prefix="gpuzarr-loader-decode")
            if ahead_bytes and ahead_lanes > 1
            else None
        )
        #: the ordering that thread reads on: on a GPU a stream of its own (``decode_lane``)
        self._lane_ordering = ordering.decode_lane() if self._ahead_lane is not None else None
        self._ordering = ordering
        self._pool = pool
        self._batches = batches
        self._indices = indices
        #: each lane's share of ``workers``, one taken by each lane (None: one lane, with all of them)
        self._shares = iter(lane_shares(workers, lanes)) if lanes > 1 and workers else None
        #: the next position in ``indices`` a lane takes (``next`` is atomic in CPython)
        self._positions = itertools.count()
        #: the position whose batch (or the end, or an error) is handed over next
        self._turn = 0
        self._turn_changed = threading.Condition()
        super().__init__(prefetch, lanes)

    def _run(self) -> None:
        try:
            self._produce()
        finally:
            # Stopped or failed: the chunks decoded ahead go before the thread does.
            self._drop_ahead()

    def _drop_ahead(self) -> None:
        """Let go of the chunks decoded ahead (see ``ChunkAssembler.drop_ahead``: a lane's stream
        then waits for the batches put together from them) on this thread, after its last read
        from them. A new pass starts only once this thread has ended (``stop`` joins it)."""
        if self._ahead_bytes:
            self._reader.drop_ahead()

    def _produce(self) -> None:
        workers = None if self._shares is None else next(self._shares)  # atomic, as for the positions
        decoded_until = 0  # position in ``indices`` up to which chunks are decoded ahead (one lane)
        #: the window the second lane is decoding: (its first position, its future)
        pending: tuple[int, Future[DecodedWindow | None]] | None = None
        while not self._stop.is_set():
            position = next(self._positions)
            if position >= len(self._indices):
                if position == len(self._indices) and self._wait_for_turn(position):
                    self._end()
                return
            index = self._indices[position]
            try:
                if self._ahead_bytes and position >= decoded_until:
                    if pending is not None and pending[0] == position:
                        decoded_until = position + self._reader.use_window(pending[1].result())
                    else:
                        decoded_until = position + self._reader.decode_ahead(self._window(position), self._ahead_bytes)
                    pending = None
                    if self._ahead_lane is not None and decoded_until < len(self._indices):
                        window = self._window(decoded_until)
                        future = self._ahead_lane.submit(
                            self._reader.decode_window, window, self._ahead_bytes, self._lane_ordering
                        )
                        pending = (decoded_until, future)
                with phase("loader-slot"):
                    slot = self._pool.acquire()
                with worker_share(workers) if workers else contextlib.nullcontext():
                    ready = read_one(self._reader, self._ordering, index, self._batches[index], slot)
            except BaseException as exc:  # handed to the consumer, which raises it
                if self._wait_for_turn(position):
                    self._fail(exc)
                return  # the turn stays here: nothing after a failed batch is handed over
            if not self._wait_for_turn(position):
                return
            queued = self._put(ready)
            del ready  # no reference of this thread may keep a lent slot in use
            self._pass_turn()
            if not queued:
                return

    def _window(self, position: int) -> list[Crops]:
        """The batches that a window decoded ahead from ``position`` may hold."""
        return [self._batches[i] for i in self._indices[position : position + MAX_AHEAD_BATCHES]]

    def stop(self, wait: bool = True) -> None:
        super().stop(wait)
        if self._ahead_lane is not None:
            # The window being decoded is dropped once read: nothing else waits for it.
            self._ahead_lane.shutdown(wait=wait, cancel_futures=True)

    def _wait_for_turn(self, position: int) -> bool:
        """Wait until ``position`` is the next to hand over; False once the pass is stopped."""
        with self._turn_changed:
            while self._turn != position:
                if self._stop.is_set():
                    return False
                self._turn_changed.wait(POLL_S)
        return not self._stop.is_set()

    def _pass_turn(self) -> None:
        with self._turn_changed:
            self._turn += 1
            self._turn_changed.notify_all()
