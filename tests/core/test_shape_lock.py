"""Writes and shape changes of one Array handle: a write is planned and done with one shape
(``core/shape_lock.py``). A write planned with the shape before another thread's ``append``
wrote the old edge chunk whole, and erased the rows the append had just written."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.core import array as array_module
from gpuzarr.core.shape_lock import ShapeLock

WAIT = 10.0


def _array(sharded: bool) -> gpuzarr.Array:
    shards = {"shards": (16, 4)} if sharded else {}
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(45, 4), dtype="int32", chunks=(8, 4), fill_value=0, **shards)
    a[...] = 1
    return a


@pytest.mark.parametrize("sharded", [False, True])
def test_a_write_planned_before_an_append_keeps_the_appended_rows(
    monkeypatch: pytest.MonkeyPatch, sharded: bool
) -> None:
    a = _array(sharded)
    planned, go = threading.Event(), threading.Event()
    real = array_module.write_plan
    writer: list[threading.Thread] = []

    def paused(*args: Any, **kwargs: Any) -> Any:
        if writer and threading.current_thread() is writer[0]:
            planned.set()  # planned with shape (45, 4): rows 40..44 make chunk 5 whole
            go.wait(WAIT)
        return real(*args, **kwargs)

    monkeypatch.setattr(array_module, "write_plan", paused)
    writer.append(threading.Thread(target=a.__setitem__, args=(slice(40, 45), 2)))
    writer[0].start()
    assert planned.wait(WAIT)
    appender = threading.Thread(target=a.append, args=(np.full((3, 4), 7, dtype="int32"),))
    appender.start()
    time.sleep(0.2)
    assert appender.is_alive()  # the append waits for the write planned with the old shape
    go.set()
    for thread in (writer[0], appender):
        thread.join(WAIT)
    assert a.shape == (48, 4)
    np.testing.assert_array_equal(a[38:48, 0], [1, 1, 2, 2, 2, 2, 2, 7, 7, 7])


def test_a_write_async_run_after_a_shape_change_reads_before_it_writes() -> None:
    a = _array(sharded=False)
    with a._shape_lock.alone():  # holds the write back until the append is done
        grown = a.write_async(np.s_[40:44], 2)
        last = a.write_async(-1, 5)  # the last row at the call: row 44, not the appended 47
        a.append(np.full((3, 4), 7, dtype="int32"))
    grown.result(WAIT)
    last.result(WAIT)
    np.testing.assert_array_equal(a[43:48, 0], [2, 5, 7, 7, 7])


def test_a_write_async_planned_before_an_append_on_another_thread_keeps_its_rows() -> None:
    """The shape the write was planned with is the one it compares: an append landing while
    the value was being converted (after the plan) changed ``a.shape`` before it was read."""
    a = _array(sharded=False)

    class AppendsWhileConverted:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
            appender = threading.Thread(target=a.append, args=(np.full((3, 4), 7, dtype="int32"),))
            appender.start()
            appender.join(WAIT)
            return np.full((5, 4), 2, dtype="int32")

    a.write_async(np.s_[40:45], AppendsWhileConverted()).result(WAIT)
    assert a.shape == (48, 4)
    np.testing.assert_array_equal(a[43:48, 0], [2, 2, 7, 7, 7])


def test_writes_share_the_lock_and_a_shape_change_holds_it_alone() -> None:
    lock = ShapeLock()
    order: list[str] = []
    with lock.shared(), lock.shared():  # writes of several threads at once (and nested)
        changer = threading.Thread(target=lambda: _hold(lock, order))
        changer.start()
        time.sleep(0.1)
        order.append("writes done")
    changer.join(WAIT)
    assert order == ["writes done", "changed"]
    with lock.alone(), lock.alone(), lock.shared():  # append: resizes and writes its rows
        order.append("append")
    blocked = threading.Thread(target=lambda: _write(lock, order))
    with lock.alone():
        blocked.start()
        time.sleep(0.1)
        order.append("resized")
    blocked.join(WAIT)
    assert order[-2:] == ["resized", "write"]


def _hold(lock: ShapeLock, order: list[str]) -> None:
    with lock.alone():
        order.append("changed")


def _write(lock: ShapeLock, order: list[str]) -> None:
    with lock.shared():
        order.append("write")


def test_steady_writes_from_several_threads_let_an_append_in() -> None:
    """New writes wait behind a waiting shape change: writers that overlap one another kept
    the lock shared without a break, and an append waited for as long as they wrote."""
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(32, 4), dtype="int32", chunks=(8, 4), fill_value=0)
    stop = threading.Event()

    def write(i: int) -> None:
        while not stop.is_set():
            a[8 * i : 8 * i + 8] = i

    writers = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for w in writers:
        w.start()
    try:
        time.sleep(0.1)
        appender = threading.Thread(target=a.append, args=(np.full((8, 4), 9, dtype="int32"),))
        appender.start()
        appender.join(WAIT)
        assert not appender.is_alive()  # in, while the writers went on
        assert a.shape == (40, 4)
    finally:
        stop.set()
        for w in writers:
            w.join(WAIT)
    np.testing.assert_array_equal(a[32:40], 9)
