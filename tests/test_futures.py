"""gpuzarr.futures: futures that ``result()`` and ``await`` both wait for, run on the request
pool (``async_concurrency`` threads) or by the thread waiting for them, cancelled while queued,
and working after a fork and at interpreter exit."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import multiprocessing
import subprocess
import sys
import threading
import weakref

import pytest

from gpuzarr import config, futures
from gpuzarr.errors import CorruptChunkError, InvalidArgumentError

TIMEOUT = 30


def test_result_and_exception_of_the_work() -> None:
    assert futures.submit(lambda x, *, y: x + y, 2, y=3).result(TIMEOUT) == 5
    failing = futures.submit(_raise, CorruptChunkError("c/0/0: damaged"))
    with pytest.raises(CorruptChunkError, match="c/0/0"):
        failing.result(TIMEOUT)
    assert isinstance(failing.exception(), CorruptChunkError)


def _raise(exc: BaseException) -> None:
    raise exc


def test_a_future_is_a_concurrent_future() -> None:
    started = [futures.submit(pow, 2, i) for i in range(20)]
    _, not_done = concurrent.futures.wait(started, timeout=TIMEOUT)
    assert not not_done
    assert [f.result() for f in started] == [2**i for i in range(20)]
    seen: list[int] = []
    started[0].add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [1]  # done already: called at once


def test_awaited_in_asyncio_without_blocking_the_loop() -> None:
    release = threading.Event()

    async def main() -> tuple[int, int]:
        slow = futures.submit(lambda: release.wait(TIMEOUT) and 7)
        ticks = 0
        # The loop keeps running while the future waits on its thread.
        while not slow.done():
            ticks += 1
            if ticks == 3:
                release.set()
            await asyncio.sleep(0.01)
        return await slow, ticks

    value, ticks = asyncio.run(main())
    assert value == 7 and ticks >= 3


def test_await_raises_the_work_error() -> None:
    async def main() -> None:
        await futures.submit(_raise, InvalidArgumentError("bad"))

    with pytest.raises(InvalidArgumentError, match="bad"):
        asyncio.run(main())


def test_work_runs_at_most_async_concurrency_at_once_and_in_order() -> None:
    lock = threading.Lock()
    running, most = 0, 0
    order: list[int] = []
    gate = threading.Event()

    def work(i: int) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            order.append(i)
        gate.wait(TIMEOUT)
        with lock:
            running -= 1

    with config.set(async_concurrency=3):
        started = [futures.submit(work, i) for i in range(9)]
        threading.Timer(0.2, gate.set).start()
        concurrent.futures.wait(started, timeout=TIMEOUT)
    assert all(f.done() and f.exception() is None for f in started)
    assert most == 3
    assert sorted(order[:3]) == [0, 1, 2] and sorted(order) == list(range(9))


def test_a_queued_future_cancels_and_its_work_never_runs() -> None:
    gate = threading.Event()
    ran: list[str] = []
    with config.set(async_concurrency=1):
        blocker = futures.submit(gate.wait, TIMEOUT)
        queued = futures.submit(ran.append, "queued")
        assert queued.cancel()
        gate.set()
        blocker.result(TIMEOUT)
        # The pool has one thread: anything submitted now runs after the cancelled work's turn.
        futures.submit(ran.append, "after").result(TIMEOUT)
    assert ran == ["after"]
    assert queued.cancelled()


def test_cancelling_the_awaiting_task_cancels_queued_work() -> None:
    gate = threading.Event()
    ran: list[str] = []

    async def main() -> None:
        blocker = futures.submit(gate.wait, TIMEOUT)
        task = asyncio.ensure_future(_await(futures.submit(ran.append, "queued")))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()
        await blocker

    with config.set(async_concurrency=1):
        asyncio.run(main())
        futures.submit(ran.append, "after").result(TIMEOUT)
    assert ran == ["after"]


async def _await(future: futures.Future[None]) -> None:
    await future


def test_the_request_pool_follows_the_setting_and_is_not_the_decode_pool() -> None:
    with config.set(async_concurrency=2):
        pool = config.request_pool()
        assert config.request_pool() is pool
        assert pool is not config.thread_pool()
        assert pool._max_workers == 2
    with config.set(async_concurrency=5):
        assert config.request_pool()._max_workers == 5


@pytest.mark.parametrize("value", [0, -1, None, True, 1.5, "4"])
def test_async_concurrency_is_a_positive_integer(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="async_concurrency"):
        config.set(async_concurrency=value)


def test_requests_may_fill_the_decode_pool_without_a_deadlock() -> None:
    """More requests than decode threads, each waiting on decode-pool work: all finish."""

    def uses_the_decode_pool(i: int) -> int:
        return sum(config.thread_pool().map(lambda j: i * j, range(8)))

    with config.set(concurrency=2, async_concurrency=6):
        started = [futures.submit(uses_the_decode_pool, i) for i in range(24)]
        assert [f.result(TIMEOUT) for f in started] == [28 * i for i in range(24)]


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_a_forked_child_gets_a_pool_of_its_own() -> None:
    code = (
        "import os, sys\n"
        "from gpuzarr import futures\n"
        "assert futures.submit(int, '1').result(30) == 1\n"  # the parent's pool exists now
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if futures.submit(int, '2').result(30) == 2 else 1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_importing_gpuzarr_does_not_import_asyncio() -> None:
    code = "import sys, gpuzarr, gpuzarr.futures; print('asyncio' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_waiting_inside_a_callback_or_another_futures_work_runs_the_work_there() -> None:
    """With every request thread busy waiting for a future that is still queued, the waiting
    thread runs it itself instead of waiting for a place it holds."""
    got: list[int] = []
    with config.set(async_concurrency=1):
        outer = futures.submit(lambda: futures.submit(lambda: 41).result(TIMEOUT) + 1)
        assert outer.result(TIMEOUT) == 42
        first = futures.submit(int, "1")
        first.add_done_callback(lambda f: got.append(futures.submit(int, "2").result(TIMEOUT)))
        first.result(TIMEOUT)
        futures.submit(int, "3").result(TIMEOUT)
    assert got == [2]


def test_any_other_thread_waits_with_its_timeout_and_the_work_runs_once_in_its_turn() -> None:
    calls: list[int] = []
    gate = threading.Event()
    with config.set(async_concurrency=1):
        blocker = futures.submit(gate.wait, TIMEOUT)
        queued = futures.submit(calls.append, 1)
        with pytest.raises(concurrent.futures.TimeoutError):
            queued.result(0.05)  # not run here: this thread runs no future's work
        with pytest.raises(concurrent.futures.TimeoutError):
            queued.exception(0)  # a poll neither runs it nor waits
        assert calls == [] and not queued.done()
        gate.set()
        assert queued.result(TIMEOUT) is None
        blocker.result(TIMEOUT)
    assert calls == [1]


def test_a_cancelled_queued_future_counts_as_done_for_wait_and_as_completed() -> None:
    gate = threading.Event()
    with config.set(async_concurrency=1):
        blocker = futures.submit(gate.wait, TIMEOUT)
        queued = futures.submit(int, "1")
        assert queued.cancel()
        done, not_done = concurrent.futures.wait([queued], timeout=TIMEOUT)
        assert done == {queued} and not not_done
        assert list(concurrent.futures.as_completed([queued], timeout=TIMEOUT)) == [queued]
        gate.set()
        blocker.result(TIMEOUT)
        futures.submit(int, "2").result(TIMEOUT)  # the pool passes over the cancelled work
    assert queued.cancelled()


def test_stop_iteration_becomes_a_runtime_error_that_await_raises() -> None:
    future = futures.submit(next, iter(()))
    with pytest.raises(RuntimeError, match="StopIteration"):
        future.result(TIMEOUT)

    async def main() -> None:
        await asyncio.wait_for(futures.submit(next, iter(())), TIMEOUT)

    with pytest.raises(RuntimeError, match="StopIteration"):
        asyncio.run(main())


def test_a_cancelled_future_lets_go_of_its_arguments() -> None:
    class Value:
        pass

    value = Value()
    kept = weakref.ref(value)
    gate = threading.Event()
    with config.set(async_concurrency=1):
        blocker = futures.submit(gate.wait, TIMEOUT)
        queued = futures.submit(id, value)
        del value
        assert queued.cancel()
        gc.collect()
        assert kept() is None  # while the cancelled work still waits its turn
        gate.set()
        blocker.result(TIMEOUT)


def test_at_interpreter_exit_the_work_runs_at_the_call() -> None:
    code = (
        "import atexit, numpy as np, gpuzarr\n"
        "a = gpuzarr.zeros(shape=(4, 4), chunks=(2, 2), dtype='i4', store=gpuzarr.MemoryStore())\n"
        "def at_exit():\n"
        "    a.write_async((0, slice(None)), 5).result(30)\n"
        "    print(a.read_async(np.s_[0:2, 0]).result(30).tolist())\n"
        "atexit.register(at_exit)\n"
        "a.read_async(0).result(30)\n"  # the request pool exists before the interpreter ends
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[5, 0]", done.stderr


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_threads_submitting_waiting_and_cancelling(seed: int) -> None:
    """Submits, cancels and waits from several threads, some inside other futures' work: every
    future ends exactly once, done, with its own value, its error, or cancelled and never run."""
    import random

    ran: dict[int, int] = {}
    lock = threading.Lock()

    def work(i: int, nested: list[futures.Future[int]]) -> int:
        with lock:
            ran[i] = ran.get(i, 0) + 1
        if i % 11 == 0:
            raise ValueError(i)
        for f in nested:  # waiting inside a future's work: may run the others here
            with contextlib.suppress(ValueError, concurrent.futures.CancelledError):
                f.result(TIMEOUT)
        return i * 2

    made: list[futures.Future[int]] = []
    made_lock = threading.Lock()

    def client(k: int) -> None:
        rng = random.Random(seed * 100 + k)
        for j in range(150):
            i = k * 1000 + j
            with made_lock:
                nested = rng.sample(made, min(len(made), rng.randrange(3)))
            future = futures.submit(work, i, nested)
            with made_lock:
                made.append(future)
            if rng.random() < 0.2:
                future.cancel()

    with config.set(async_concurrency=2):
        clients = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in clients:
            t.start()
        for t in clients:
            t.join(TIMEOUT)
        _, not_done = concurrent.futures.wait(made, timeout=TIMEOUT)
    assert not not_done
    by_value: dict[int, bool] = {}
    for f in made:
        if f.cancelled():
            continue
        exc = f.exception()
        if exc is not None:
            assert isinstance(exc, ValueError) and exc.args[0] % 11 == 0
            by_value[exc.args[0]] = True
        else:
            assert f.result() % 2 == 0
            by_value[f.result() // 2] = True
    assert all(count == 1 for count in ran.values())
    assert set(ran) == set(by_value)  # run exactly the futures that were not cancelled
