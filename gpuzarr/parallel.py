"""Running many small independent tasks on the shared pool, or inline when that is cheaper."""

from __future__ import annotations

import contextlib
import itertools
import threading
from concurrent.futures import as_completed, wait
from concurrent.futures import thread as _futures_thread
from typing import TYPE_CHECKING, TypeVar

from . import config

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from concurrent.futures import Future
    from contextlib import AbstractContextManager

    from .codecs.pipeline import CodecPipeline
    from .store.base import Store

T = TypeVar("T")
R = TypeVar("R")


_share = threading.local()


#: The parallel passes running now, started by threads of the caller's (not the pool's) outside
#: a :func:`worker_share` block: each takes its share of ``concurrency``.
_running = 0
_running_lock = threading.Lock()


@contextlib.contextmanager
def _passes_running(counted: bool) -> Iterator[int]:
    """How many passes run at once with this one (1: it runs alone), counted while it runs.

    Threads of the caller's that each read (dask's, a web server's) all asked for
    ``concurrency`` workers: their helpers queued behind one another in the shared pool, and
    four threads reading crops together took 2.8-3.2x TensorStore's time, more than reading the
    same crops one after the other (a quarter of the samples in the pool's hand-offs)."""
    global _running
    outer: int | None = getattr(_share, "running", None)
    if outer is not None:  # a pass inside a pass of this thread's: the outer one's share
        yield outer
        return
    if not counted or config.in_pool_thread():
        yield 1
        return
    counted_here = False
    try:
        with _running_lock:
            _running += 1
            counted_here = True
            running = _running
        _share.running = running
        yield running
    finally:
        # Counted down whatever ends the pass (an interrupt among them): a count left up
        # would halve every later pass's workers.
        _share.running = None
        if counted_here:
            with _running_lock:
                _running -= 1


@contextlib.contextmanager
def worker_share(workers: int) -> Iterator[None]:
    """Parallel passes started on this thread while the block runs take at most ``workers`` of
    the CPU workers (the caller included) instead of ``concurrency``.

    For threads that each run whole reads beside others of their kind (a loader reading several
    batches at once): each takes its share of the pool, so that together they keep
    ``concurrency`` threads busy rather than ask for that many each.
    """
    if workers < 1:
        raise ValueError(f"worker_share: expected at least 1 worker, got {workers}")
    before = getattr(_share, "workers", None)
    _share.workers = workers
    try:
        yield
    finally:
        _share.workers = before


def cpu_workers() -> int:
    """The CPU workers a parallel pass started on this thread uses: ``concurrency``, or less
    within a :func:`worker_share` block."""
    if pools_shut_down():
        return 1
    concurrency = int(config.get("concurrency"))
    share: int | None = getattr(_share, "workers", None)
    return concurrency if share is None else min(share, concurrency)


def pools_shut_down() -> bool:
    """Whether the thread pools take no more tasks: the interpreter is exiting, and a thread
    Python waits for (not a daemon) runs on after the main thread returned. Python shuts every
    ``ThreadPoolExecutor`` down before it waits for such threads, and their reads and writes
    failed (``cannot schedule new futures after shutdown``); they run on their own thread."""
    return bool(getattr(_futures_thread, "_shutdown", False))


def io_workers(store: Store) -> int | None:
    """Workers for tasks that fetch from ``store``: None (the CPU ``concurrency``) for local
    stores, ``max(concurrency, store.io_concurrency)`` for remote ones (see ``run_tasks``)."""
    return _io_worker_count(store.io_concurrency)


def _io_worker_count(io_concurrency: int | None) -> int | None:
    return None if io_concurrency is None else max(int(config.get("concurrency")), io_concurrency)


#: Decoded bytes of the small chunks (or inner chunks) one task reads and decodes, or encodes,
#: together (see :func:`chunks_per_task`): at least the first, at most the second.
RUN_MIN_BYTES = 96 * 1024
RUN_MAX_BYTES = 256 * 1024
#: Tasks per worker a pass over small chunks keeps, where there are chunks enough.
RUN_TASKS_PER_WORKER = 64


def chunks_per_task(chunk_nbytes: int, n_wanted: int) -> int:
    """How many of ``n_wanted`` chunks or inner chunks (of ``chunk_nbytes`` decoded) one task
    reads and decodes, or encodes, together: at least :data:`RUN_MIN_BYTES` of them; more where the pass has
    chunks enough for :data:`RUN_TASKS_PER_WORKER` tasks a worker anyway, up to
    :data:`RUN_MAX_BYTES`.

    Measured on 2 cores (128 crops of 64^3 from shards of 128^3, read one by one, batched, and
    whole reads): 16^3 uint16 inner chunks (8 KiB) read fastest in runs of 16-32 (crops one by
    one: 4 a run took 2.0x the time of 16, 8 a run 1.3x); 32^3 (64 KiB) crops one by one and
    16 boxes of 128^3 in runs of one (two and four: 1.1-1.2x; runs of 4 made the boxes 14 %
    slower than before runs, with 16 tasks a worker), batches and whole reads in runs of 2-4
    (one: 1.2x).
    """
    chunk_nbytes = max(chunk_nbytes, 1)
    least = max(1, RUN_MIN_BYTES // chunk_nbytes)
    most = max(1, RUN_MAX_BYTES // chunk_nbytes)
    for_balance = -(-n_wanted // (RUN_TASKS_PER_WORKER * cpu_workers()))
    return min(max(least, for_balance), most)


def run_tasks(
    func: Callable[[T], R],
    items: Sequence[T],
    min_parallel: int = 2,
    workers: int | None = None,
    caller_works: bool = True,
    caller_context: AbstractContextManager[object] | None = None,
) -> list[R]:
    """``[func(x) for x in items]``, shared between the calling thread and the pool.

    The caller and ``concurrency - 1`` pool threads take items one at a time from one counter
    until none are left, so the caller starts work at once instead of waiting on the pool, and
    no thread is left with several items while another has none. Taking an item costs well
    under a microsecond, against tens of microseconds or more for the tasks run here (chunks,
    shards); handing out groups of items instead would leave one thread, say, two shards to
    decode while the others had finished. Small jobs (below ``min_parallel`` items, or one
    worker) run inline. The first exception stops further items from starting and is raised
    once every item in progress has finished.

    ``workers`` (default, and at most: :func:`cpu_workers`, ``concurrency`` outside a
    :func:`worker_share`); above ``concurrency`` it runs the tasks on the I/O pool instead
    (:func:`io_workers`: fetches that wait on a remote store), whatever the share.

    ``caller_context`` is entered by the calling thread around the items it takes while the
    pool's threads take others (not when the tasks run inline): e.g. a codec's library told not
    to start threads of its own there (``CodecPipeline.beside_pool``). ``caller_works=False``
    leaves the tasks to ``workers`` threads of the CPU pool while the caller waits: for tasks
    that should not run on the calling thread (a codec whose own threads cannot be turned off
    there). The caller works anyway where it is one of the pool's threads (waiting there on the
    pool could wait forever) and for the I/O pool (whose size bounds the requests in flight).
    """
    io = workers is not None and workers > config.get("concurrency")
    with _passes_running(counted=not io and getattr(_share, "workers", None) is None) as running:
        return _run_tasks(func, items, min_parallel, workers, caller_works, caller_context, io, running)


def _run_tasks(
    func: Callable[[T], R],
    items: Sequence[T],
    min_parallel: int,
    workers: int | None,
    caller_works: bool,
    caller_context: AbstractContextManager[object] | None,
    io: bool,
    running: int,
) -> list[R]:
    """:func:`run_tasks`, with ``running`` the passes of other threads' calls running now (this
    one's included), which share the pool's workers."""
    if pools_shut_down():
        return [func(x) for x in items]
    share = max(1, cpu_workers() // running)
    # A number of workers that fits the CPU pool (a remote store's fetches where its
    # io_concurrency is no more than concurrency) keeps to this thread's share too.
    workers = share if workers is None else workers if io else min(workers, share)
    if workers <= 1 or len(items) < min_parallel:
        return [func(x) for x in items]
    # Whether the caller takes items too (see ``caller_works``), and so how many helpers.
    caller_drains = caller_works or io or config.in_pool_thread()
    count = len(items)
    results: list[R] = [None] * count  # type: ignore[list-item]  # every slot is set, or an error raised
    next_item = itertools.count()
    failed = threading.Event()

    def drain() -> None:
        while not failed.is_set():
            i = next(next_item)  # atomic in CPython: no two threads get the same item
            if i >= count:
                return
            try:
                results[i] = func(items[i])
            except BaseException:
                failed.set()
                raise

    pool = config.io_thread_pool(workers) if io else config.thread_pool()
    nhelpers = min(workers - 1, count - 1) if caller_drains else min(workers, count)
    helpers: list[Future[None]] = []
    calls: list[_CallOnce] = []
    error: BaseException | None = None
    try:
        for _ in range(nhelpers):
            calls.append(_CallOnce(drain))
            helpers.append(pool.submit(calls[-1]))
    except BaseException as exc:
        # An interrupt (Ctrl-C) inside a submit: the helpers submitted so far are waited for
        # below, and any that a failed submit still queued take no item once ``failed`` is set
        # (they finished every item in the background, overwriting later writes).
        failed.set()
        error = exc
    if caller_drains and error is None:
        try:
            with caller_context or contextlib.nullcontext():
                drain()
        except BaseException as exc:  # re-raised below, after the helpers stop
            failed.set()
            error = exc
    helper_error, interrupted = _first_error(helpers, cancel_queued=caller_drains, stop=failed)
    for call in calls:  # a cancelled helper's call waits in the pool's queue: it holds nothing
        call.fn = None
    if error is None:
        error = interrupted or helper_error
    if error is not None:
        try:
            raise error
        finally:
            # The error's traceback holds this frame: with no reference back to the error (the
            # helpers' futures hold theirs), it and the results it keeps go when the caller drops
            # it, not at a garbage collection.
            error = helper_error = None
            helpers.clear()
    return results


class _CallOnce:
    """``fn`` called once, let go of before the call returns.

    The pool's thread holds the task it ran (this object) a moment after its future is done,
    and a cancelled task stays in the pool's queue until a thread takes it: a task that held
    ``drain`` held, through it, the output the items write into. A loader that reuses its output
    buffers once nothing else holds them then found them still held, and made new ones (48-60 in
    1,000 batches on 2 cores, where 3 were needed).
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn: Callable[[], None] | None = fn

    def __call__(self) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn()


def run_coding_tasks(
    pipeline: CodecPipeline,
    func: Callable[[T], R],
    items: Sequence[T],
    min_parallel: int = 2,
    workers: int | None = None,
) -> list[R]:
    """:func:`run_tasks` for tasks that decode or encode chunks of ``pipeline``: the calling
    thread takes its share inside ``pipeline.beside_pool()``, or leaves them all to the pool
    where that is None."""
    beside = pipeline.beside_pool()
    return run_tasks(
        func, items, min_parallel=min_parallel, workers=workers, caller_works=beside is not None, caller_context=beside
    )


def _first_error(
    helpers: list[Future[None]], *, cancel_queued: bool, stop: threading.Event
) -> tuple[BaseException | None, BaseException | None]:
    """Wait for ``helpers``: the first one's error, if any, and an interrupt (Ctrl-C) raised in
    this thread while it waited.

    With ``cancel_queued`` a helper still queued (the caller drained every item) is cancelled
    instead of waited for: the pool's threads may all be callers like this one, waiting (reads on
    pool threads). An interrupt sets ``stop`` (no helper takes another item) and the wait goes
    on until the helpers have finished the item they are on: their tasks write into the
    caller's output and read through files the caller closes once this returns. A second
    interrupt is raised at once, for a task that never ends (a request to a store that does not
    answer); the helpers still running then finish on their own.
    """
    first: BaseException | None = None
    interrupted: BaseException | None = None
    for future in helpers:
        if cancel_queued and future.cancel():
            continue
        while True:
            try:
                error = future.exception()
                break
            except BaseException as exc:  # returned once the helpers have stopped
                stop.set()
                if interrupted is not None:
                    raise
                interrupted = exc
        if first is None:
            first = error
    return first, interrupted


def io_runner(concurrency: int | None) -> Callable[[Callable[[T], R], Sequence[T]], list[R]]:
    """How to run a batch of requests to a store whose ``io_concurrency`` is ``concurrency``:
    :func:`run_tasks` on the CPU pool for None, in order for 1, else :func:`run_tasks` on the
    I/O pool with ``max(concurrency, CPU concurrency)`` workers (as :func:`io_workers`)."""
    if concurrency is None:
        return run_tasks
    if concurrency <= 1:
        return lambda func, items: [func(x) for x in items]
    return lambda func, items: run_tasks(func, items, workers=_io_worker_count(concurrency))


def each_as_completed(func: Callable[[T], R], items: Sequence[T], then: Callable[[T, R], object], workers: int) -> None:
    """``func(x)`` for every item on the I/O pool, and ``then(x, func(x))`` on the calling
    thread for each as soon as it finishes (in the order they finish).

    The calls run on ``workers - 1`` threads (the I/O pool, see :func:`io_workers`) while the
    caller handles what has arrived: a reader decodes one answer while later requests are still
    in flight. The first exception (of a call or of ``then``) cancels the calls not yet started
    and is raised once those running have finished, so none outlives this function.
    """
    if pools_shut_down():
        for x in items:
            then(x, func(x))
        return
    pool = config.io_thread_pool(workers)
    futures = {pool.submit(func, x): x for x in items}
    try:
        for future in as_completed(futures):
            then(futures[future], future.result())
    finally:
        for future in futures:
            future.cancel()
        wait(futures)


def batches_by_bytes(sizes: Sequence[int], budget: int) -> list[range]:
    """Split items into consecutive runs whose summed size stays within ``budget`` (>= 1 item)."""
    runs: list[range] = []
    start, total = 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > budget:
            runs.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(sizes):
        runs.append(range(start, len(sizes)))
    return runs


__all__ = [
    "batches_by_bytes",
    "cpu_workers",
    "each_as_completed",
    "io_runner",
    "io_workers",
    "run_coding_tasks",
    "run_tasks",
    "worker_share",
]
