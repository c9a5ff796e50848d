"""Reads of a few local Blosc chunks (a crop): fetched on the calling thread, decoded on the workers.

A crop touches a handful of chunks. Read the usual way (``read._read_chunks``), every worker
fetches and decodes chunks of its own, and each chunk's Python (opening its file, planning the
part of it the crop needs, the codec's bookkeeping) runs under the GIL while the other workers
wait for it; on 2 cores a crop of 8 Blosc chunks read 1.2 times faster on two threads than on
one. Here the calling thread does all of that Python, and the file reads, one chunk after
another, and the workers only decode and copy, C that lets go of the GIL. Measured on 2 cores,
256 crops of 64^3 from a v2 Blosc array read one by one: 0.30 s before, 0.24 s this way,
TensorStore 0.25-0.27 s in the same runs.

Fetched chunks wait in a few buffers of the calling thread's, lent to a worker with the chunk
and handed back once it is decoded: the calling thread runs at most that far ahead, and the
same memory serves read after read.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import TYPE_CHECKING, NamedTuple

from ... import buffers, config
from ...parallel import cpu_workers

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Future

    from ...codecs.base import BufferFor
    from ...layout import ArrayLayout
    from ...plan.selection import ChunkProjection
    from ...store.base import Buffer, Store

#: The most chunks a read may touch to be read this way: reads of more (a batch of crops, a
#: whole array) keep every worker fetching too, which a single fetching thread would hold back
#: on many cores.
MAX_CHUNKS = 64
#: The largest chunk read this way: the buffers kept for fetched chunks are this size each.
MAX_CHUNK_NBYTES = 16 * 1024 * 1024
#: What the fetch buffers of one thread may hold in all (at least two buffers, whatever the size).
FETCH_BUFFER_BUDGET = 32 * 1024 * 1024


class Fetched(NamedTuple):
    """One chunk fetched: the bytes read (None: the key is absent), the codec's plan for them
    (None: the whole value, for a full decode), and the buffer (slot) that holds them."""

    targets: list[ChunkProjection]
    key: str
    data: Buffer | None
    plan: object | None
    slot: int


_STOP = None  # tells a decoding worker that every chunk has been handed out


def fetches_ahead(layout: ArrayLayout, store: Store, nchunks: int) -> bool:
    """Whether a read of ``nchunks`` chunks of ``layout`` from ``store`` is read this way: a
    few chunks, not too large, of a codec that reads and checks on one thread what another
    then only decodes (Blosc: ``CodecPipeline.reads_part``), from a store whose reads are
    cheap local ones, with more than one worker to decode them.

    Not zstd or gzip: their decoders' own Python (a zstd frame's part, an inflate's bounds)
    stays on the workers, and the hand-over then only added to it (fresh-process A/B on 2
    cores, 256 crops one by one: zstd 0.667 to 0.685 s, float32 zstd stack 0.565 to 0.580 s).
    """
    pipeline = layout.chunk_pipeline
    return (
        store.cheap_ranged_reads
        and 2 <= nchunks <= MAX_CHUNKS
        and pipeline.reads_part
        and pipeline.spec.nbytes <= MAX_CHUNK_NBYTES
        and cpu_workers() > 1
    )


def read_fetching_ahead(
    layout: ArrayLayout,
    groups: list[list[ChunkProjection]],
    *,
    fetch: Callable[[list[ChunkProjection], int, BufferFor], Fetched],
    decode: Callable[[Fetched], None],
) -> None:
    """Fetch every chunk group of ``groups`` on this thread (``fetch(targets, slot,
    buffer_for)``, into ``buffer_for``'s memory, that of fetch buffer ``slot``), and decode each
    on the pool's workers (``decode(fetched)``) as soon as it is fetched.

    This thread decodes too, where no buffer is free and once everything is fetched, inside
    ``CodecPipeline.beside_pool()`` (numcodecs' Blosc without c-blosc's threads on the main
    thread: with them, beside the pool's, 256 crops took 0.318 s against 0.296 s, 2 cores).
    Even where those threads cannot be turned off (the user asked for them) it decodes: here it
    is the last few chunks, and with the fetching thread waiting for them instead, a crop of 8
    Blosc chunks read on 2 cores took 10 % longer. The first error (of a fetch or a decode)
    stops further fetches and decodes and is raised once the workers have stopped.
    """
    workers = cpu_workers()
    chunk_nbytes = max(layout.chunk_pipeline.spec.nbytes, 1)
    nslots = max(2, min(len(groups), 2 * workers, FETCH_BUFFER_BUDGET // chunk_nbytes))
    _release_grown_buffers(nslots)
    run = _FetchAhead(decode, nslots)
    with layout.chunk_pipeline.beside_pool() or contextlib.nullcontext():
        _fetch_and_decode(run, groups, fetch, workers)


def _fetch_and_decode(
    run: _FetchAhead,
    groups: list[list[ChunkProjection]],
    fetch: Callable[[list[ChunkProjection], int, BufferFor], Fetched],
    workers: int,
) -> None:
    """:func:`read_fetching_ahead`'s work on the fetching thread, with ``workers`` decoding."""
    helpers: list[Future[None]] = []
    fetch_error: BaseException | None = None
    try:
        # Submitted in here: a pool replaced or shut down meanwhile (another thread's
        # ``config.set(concurrency=...)``) fails a submit, and the workers already started
        # must still be stopped.
        pool = config.thread_pool()
        for _ in range(min(workers - 1, len(groups))):
            run.helpers_asked += 1  # before the submit: one interrupted after queueing still gets its stop
            helpers.append(pool.submit(run.decode_until_stopped))
        for targets in groups:
            if run.failed.is_set():
                break
            slot = run.take_slot()
            try:
                item = fetch(targets, slot, _slot_buffer(slot))
            except BaseException:
                run.free.put(slot)
                raise
            run.pending.put(item)
    except BaseException as exc:  # raised below, once the workers have stopped
        fetch_error = exc
        run.failed.set()
    finally:
        run.finish(helpers)
    error = fetch_error if fetch_error is not None else (run.errors[0] if run.errors else None)
    if error is not None:
        try:
            raise error
        finally:
            # The error's traceback holds this frame: no reference back to it from here.
            error = fetch_error = None
            run.errors.clear()


class _FetchAhead:
    """The hand-over between the fetching thread and the decoding workers of one read: the
    free fetch buffers, the fetched chunks waiting, and the first errors."""

    def __init__(self, decode: Callable[[Fetched], None], nslots: int) -> None:
        self.decode = decode
        self.free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(nslots):
            self.free.put(slot)
        self.pending: queue.SimpleQueue[Fetched | None] = queue.SimpleQueue()
        self.failed = threading.Event()
        self.errors: list[BaseException] = []
        #: workers asked of the pool, a submit interrupted after queueing its task included
        self.helpers_asked = 0

    def decode_one(self, item: Fetched) -> None:
        try:
            if not self.failed.is_set():
                self.decode(item)
        except BaseException as exc:  # raised by the fetching thread once the workers have stopped
            self.errors.append(exc)
            self.failed.set()
        finally:
            self.free.put(item.slot)

    def decode_until_stopped(self) -> None:
        while (item := self.pending.get()) is not _STOP:
            self.decode_one(item)

    def take_slot(self) -> int:
        """A free fetch buffer; where none is, the fetching thread decodes a fetched chunk
        itself rather than wait for a worker to hand one back."""
        while True:
            try:
                return self.free.get_nowait()
            except queue.Empty:
                pass
            try:
                item = self.pending.get_nowait()
            except queue.Empty:  # every buffer is being decoded: one comes back soon
                return self.free.get()
            assert item is not _STOP  # put only once every chunk is fetched
            self.decode_one(item)

    def finish(self, helpers: list[Future[None]]) -> None:
        """Stop the workers once they have decoded what was fetched (the fetching thread takes
        its share), and wait for them."""
        # One stop for each worker asked for, not only those whose future came back: a worker
        # queued by a submit that an interrupt (Ctrl-C) then left waited for its stop for ever.
        for _ in range(max(self.helpers_asked, len(helpers)) + 1):
            self.pending.put(_STOP)
        self.decode_until_stopped()
        interrupted: BaseException | None = None
        for future in helpers:
            # A worker not started yet (the pool busy, e.g. with this read's own caller inside
            # it) has nothing left to decode: the fetching thread decoded it all above.
            if future.cancel():
                continue
            # The workers decode into the caller's output from its fetch buffers: an interrupt
            # (Ctrl-C) while waiting for them is raised once they have stopped, not before.
            while True:
                try:
                    future.exception()
                    break
                except BaseException as exc:  # keep waiting; raised once they stopped
                    interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted


def _slot_buffer(slot: int) -> BufferFor:
    """The memory of fetch buffer ``slot`` of this thread, ``n`` bytes of it."""
    name = _slot_name(slot)
    return lambda n: buffers.growable(n, name)


def _slot_name(slot: int) -> str:
    return _SLOT_NAMES[slot] if slot < len(_SLOT_NAMES) else f"fetch {slot}"


_SLOT_NAMES = tuple(f"fetch {slot}" for slot in range(64))


#: The most fetch buffers each thread has used (those it may hold memory in).
_slots_used = threading.local()


def _release_grown_buffers(nslots: int) -> None:
    """Let go of this thread's fetch buffers where, grown by reads of other chunk sizes, they
    hold more than the budget and a chunk's worth: each grows to the largest chunk it held, so
    reads of small chunks after large ones would otherwise keep the large ones' memory.

    Only the buffers this thread has used are looked at: checking all 64 names took 37 µs a
    read (4 names: 3 µs), against about 1.1 ms for a whole crop of 8 Blosc chunks (2 cores)."""
    used = max(nslots, getattr(_slots_used, "n", 0))
    _slots_used.n = used
    names = [_slot_name(slot) for slot in range(used)]
    if buffers.growable_nbytes(names) > FETCH_BUFFER_BUDGET + MAX_CHUNK_NBYTES:
        buffers.release_growable(names)

__all__ = ["MAX_CHUNKS", "Fetched", "fetches_ahead", "read_fetching_ahead"]
