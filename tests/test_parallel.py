"""gpuzarr.parallel.run_tasks on pool threads and with ``caller_works=False``: the tasks run on
the pool's threads, in order, errors are raised, pool threads that share out tasks never wait on
each other, and an interrupt is raised only once the helpers have stopped."""

from __future__ import annotations

import gc
import signal
import threading
import time
import weakref
from typing import TYPE_CHECKING

import pytest

import gpuzarr
from gpuzarr import config
from gpuzarr.parallel import run_tasks

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def three_workers() -> Iterator[None]:
    with gpuzarr.config.set(concurrency=3):  # the setting before, back on exit
        yield


def test_tasks_left_to_the_pool_never_run_on_the_caller(three_workers: None) -> None:
    ran_on: list[threading.Thread] = []

    def square(v: int) -> int:
        ran_on.append(threading.current_thread())
        return v * v

    assert run_tasks(square, list(range(50)), caller_works=False) == [v * v for v in range(50)]
    assert len(ran_on) == 50
    assert threading.current_thread() not in ran_on
    assert not config.in_pool_thread()


def test_the_pool_has_a_thread_per_worker_for_a_caller_that_waits(three_workers: None) -> None:
    # Three tasks that each wait for the other two: they finish only on three threads at once.
    barrier = threading.Barrier(3, timeout=10)
    names = run_tasks(lambda _: (barrier.wait(), threading.current_thread().name)[1], [0, 1, 2], caller_works=False)
    assert len(set(names)) == 3


def test_a_task_error_left_to_the_pool_is_raised(three_workers: None) -> None:
    def boom(v: int) -> int:
        if v == 7:
            raise KeyError(v)
        return v

    with pytest.raises(KeyError):
        run_tasks(boom, list(range(40)), caller_works=False)


@pytest.mark.parametrize("caller_works", [True, False])
def test_a_task_error_goes_with_the_results_when_dropped(three_workers: None, caller_works: bool) -> None:
    """No reference cycle through run_tasks' frame keeps the error (and the finished results its
    traceback holds) alive until a garbage collection."""
    results: list[weakref.ref[Payload]] = []

    def task(v: int) -> Payload:
        if v == 5:
            raise TaskFailed(v)
        payload = Payload()
        results.append(weakref.ref(payload))
        return payload

    gc.collect()
    gc.disable()
    try:
        try:
            run_tasks(task, list(range(6)), caller_works=caller_works)
        except TaskFailed as exc:
            error = weakref.ref(exc)
        assert error() is None
        # A helper cancelled while queued holds the results until a pool thread takes it off.
        deadline = time.monotonic() + 5
        while any(r() is not None for r in results) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert results and all(r() is None for r in results)
    finally:
        gc.enable()


class Payload:
    """A task's result that can be referred to weakly."""


class TaskFailed(Exception):
    """A task's error that can be referred to weakly (built-in exceptions cannot)."""


def test_a_pool_thread_that_would_wait_on_its_own_pool_works_instead(three_workers: None) -> None:
    # Every pool thread runs a task that asks to leave its own tasks to the pool: waiting there
    # would leave no thread to run them.
    release = threading.Barrier(3, timeout=10)

    def outer(_: int) -> list[int]:
        release.wait()  # all three pool threads are busy here
        assert config.in_pool_thread()
        return run_tasks(lambda v: v + 1, list(range(10)), caller_works=False)

    futures = [config.thread_pool().submit(outer, i) for i in range(3)]
    assert [f.result(timeout=30) for f in futures] == [list(range(1, 11))] * 3


def test_pool_threads_that_share_out_tasks_at_once_do_not_wait_on_each_other(three_workers: None) -> None:
    # Every pool thread runs a task that shares its own tasks with the pool: the helpers it
    # queues cannot start while all threads are busy, and are not waited for.
    release = threading.Barrier(3, timeout=10)

    def outer(_: int) -> list[int]:
        release.wait()
        return run_tasks(lambda v: v + 1, list(range(10)))

    futures = [config.thread_pool().submit(outer, i) for i in range(3)]
    assert [f.result(timeout=30) for f in futures] == [list(range(1, 11))] * 3


def test_items_are_taken_one_at_a_time(three_workers: None) -> None:
    # Item 0 finishes only once item 1 has: had they gone to one thread together (a group of
    # items, as before), item 1 would wait behind item 0 and the wait would time out.
    items = list(range(40))
    done = [threading.Event() for _ in items]

    def task(i: int) -> bool:
        if i == 0 and not done[1].wait(timeout=5):
            return False
        done[i].set()
        return True

    assert all(run_tasks(task, items))
    for event in done:
        event.clear()
    assert all(run_tasks(task, items, caller_works=False))


def _threads_used(items: int, workers: int | None = None) -> set[int]:
    """The threads a parallel pass of ``items`` slow tasks started here ran on."""
    used: set[int] = set()
    lock = threading.Lock()

    def work(_: int) -> None:
        with lock:
            used.add(threading.get_ident())
        time.sleep(0.005)  # long enough for every worker to take some

    run_tasks(work, list(range(items)), workers=workers)
    return used


def test_a_worker_share_caps_the_threads_of_passes_started_on_its_thread(three_workers: None) -> None:
    from gpuzarr.parallel import cpu_workers, worker_share

    assert cpu_workers() == 3
    assert len(_threads_used(24)) == 3
    with worker_share(2):
        assert cpu_workers() == 2
        assert len(_threads_used(24)) == 2
        with worker_share(1):
            assert cpu_workers() == 1
            assert _threads_used(6) == {threading.get_ident()}  # inline on the caller
        assert cpu_workers() == 2
        with worker_share(8):
            assert cpu_workers() == 3  # never more than concurrency
        # Only the thread in the block is capped.
        other: list[int] = []
        t = threading.Thread(target=lambda: other.append(cpu_workers()))
        t.start()
        t.join()
        assert other == [3]
    assert cpu_workers() == 3
    with pytest.raises(ValueError, match="at least 1"), worker_share(0):
        pass


def test_passes_of_several_caller_threads_at_once_share_the_workers() -> None:
    """Each caller thread's pass asked for ``concurrency`` workers: their helpers queued behind
    one another in the shared pool (four threads reading crops at once took 2.8-3.2x
    TensorStore's time, more than reading them one after the other)."""
    release = threading.Event()
    running = threading.Event()

    def hold(_: int) -> None:
        running.set()
        release.wait(10)

    with gpuzarr.config.set(concurrency=4):
        other = threading.Thread(target=lambda: run_tasks(hold, [0]))  # a pass of one item, running
        other.start()
        try:
            assert running.wait(10)
            assert len(_threads_used(24)) == 2  # half of the workers: two passes run
        finally:
            release.set()
            other.join()
        assert len(_threads_used(24)) == 4  # alone again

        def fail(_: int) -> None:
            raise RuntimeError("a task's error")

        with pytest.raises(RuntimeError):
            run_tasks(fail, list(range(8)))
        assert len(_threads_used(24)) == 4  # a pass that failed is no longer counted


def test_a_worker_share_caps_a_number_of_workers_within_the_cpu_pool(three_workers: None) -> None:
    from gpuzarr.parallel import worker_share

    with worker_share(2):
        # a remote store's fetches whose io_concurrency is no more than concurrency
        assert len(_threads_used(24, workers=3)) == 2
        # above concurrency: the I/O pool, whose size bounds the requests in flight
        assert len(_threads_used(48, workers=6)) > 3


def _interrupted_run(helper_seconds: float, interrupts_at: list[float]) -> tuple[float, threading.Event]:
    """run_tasks on 2 workers, the helper's item taking ``helper_seconds``, with Ctrl-C sent to
    the main thread at each of ``interrupts_at`` (seconds): how long until KeyboardInterrupt was
    raised, and the event the helper sets when its item is done."""
    helper_done = threading.Event()
    helper_began = threading.Event()

    def task(v: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            helper_began.set()
            time.sleep(helper_seconds)
            helper_done.set()
        else:  # the helper takes an item before the caller has them all, however busy the
            # machine (a sleep of 50 ms was not always enough under load)
            helper_began.wait(5)

    def interrupt() -> None:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    timers = [threading.Timer(at, interrupt) for at in interrupts_at]
    # Python's own handler, whatever the process inherited: a shell's background job starts with
    # SIGINT ignored, and Python then leaves it so (no KeyboardInterrupt ever came).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    with gpuzarr.config.set(concurrency=2):
        start = time.perf_counter()
        for timer in timers:
            timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                run_tasks(task, list(range(4)))
            return time.perf_counter() - start, helper_done
        finally:
            for timer in timers:
                timer.cancel()
            signal.signal(signal.SIGINT, inherited)


def test_an_interrupt_is_raised_once_the_helpers_have_stopped() -> None:
    # A helper's task writes into what the caller owns (a read's output, through files the
    # caller closes): Ctrl-C while the caller waits must not leave it running.
    _, helper_done = _interrupted_run(0.8, [0.4])
    assert helper_done.is_set()


def test_a_second_interrupt_is_raised_at_once() -> None:
    # For a task that does not end soon (a store that does not answer): Ctrl-C twice gets out.
    seconds, helper_done = _interrupted_run(2.0, [0.4, 0.7])
    assert seconds < 1.5
    assert not helper_done.is_set()
    assert helper_done.wait(5)  # the helper finishes on its own


class _PoolInterruptedAtSubmit:
    """The CPU pool, whose ``nth`` submit is interrupted (Ctrl-C inside
    ``ThreadPoolExecutor.submit``): with ``queued``, after the task was queued (the interrupt
    lands in its thread start), else before."""

    def __init__(self, pool: object, nth: int, queued: bool) -> None:
        self.pool, self.nth, self.queued = pool, nth, queued
        self.calls = 0
        self.orphans: list[object] = []

    def submit(self, fn: object, *args: object) -> object:
        self.calls += 1
        if self.calls == self.nth:
            if self.queued:
                self.orphans.append(self.pool.submit(fn, *args))  # type: ignore[attr-defined]
            raise KeyboardInterrupt
        return self.pool.submit(fn, *args)  # type: ignore[attr-defined]


def test_an_interrupt_inside_a_submit_leaves_no_helper_taking_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helpers submitted before the interrupted submit went on through every item after the
    caller had the KeyboardInterrupt: an interrupted write overwrote the caller's next write."""
    with gpuzarr.config.set(concurrency=4):
        pool = _PoolInterruptedAtSubmit(config.thread_pool(), nth=2, queued=True)
        monkeypatch.setattr(config, "thread_pool", lambda: pool)
        started: list[float] = []

        def task(i: int) -> int:
            started.append(time.perf_counter())
            time.sleep(0.01)
            return i

        with pytest.raises(KeyboardInterrupt):
            run_tasks(task, list(range(60)))
        returned = time.perf_counter()
        time.sleep(0.3)
        assert all(t < returned for t in started), "a task started after the caller had the interrupt"
        assert len(started) < 60


def test_an_interrupt_inside_a_submit_leaves_no_fetch_ahead_worker_waiting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Blosc read's decoding worker queued by a submit that was then interrupted waited for a
    stop that never came: the pool's threads were lost for good, one per Ctrl-C."""
    blosc = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}
    path = str(tmp_path / "a.zarr")
    # Chunks of 64 KiB: smaller ones are read on the calling thread alone (no workers).
    array = gpuzarr.create(path, shape=(512, 512), dtype="u2", chunks=(128, 256), zarr_format=2, compressor=blosc)
    array[...] = 7
    with gpuzarr.config.set(concurrency=4):
        pool = _PoolInterruptedAtSubmit(config.thread_pool(), nth=2, queued=True)
        monkeypatch.setattr(config, "thread_pool", lambda: pool)
        with pytest.raises(KeyboardInterrupt):
            array[100:300, 100:400]
        assert pool.calls >= 2 and pool.orphans, "the read did not go through the fetch-ahead workers"
        for orphan in pool.orphans:
            orphan.result(timeout=10)  # type: ignore[attr-defined]  # it got its stop and ended
        monkeypatch.undo()
        assert (array[100:300, 100:400] == 7).all()


def test_a_thread_running_on_after_the_main_thread_returned_reads_and_writes(tmp_path: Path) -> None:
    """Python shuts the thread pools down before it waits for the threads that are not daemons:
    their reads and writes after that raised RuntimeError (cannot schedule new futures)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import threading
        import time
        import gpuzarr

        a = gpuzarr.create({str(tmp_path / "a.zarr")!r}, shape=(64, 64, 64), dtype="u2", chunks=(16, 16, 16),
                           device="cpu")
        main_returned = threading.Event()

        def work():
            main_returned.wait()
            while threading.main_thread().is_alive():
                time.sleep(0.01)
            time.sleep(0.2)  # the pools are shut down once the main thread has stopped
            a[...] = 7
            assert (a[...] == 7).all()
            print("done")

        threading.Thread(target=work).start()
        main_returned.set()
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
