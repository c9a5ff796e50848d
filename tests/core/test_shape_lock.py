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
from gpuzarr.errors import InvalidArgumentError

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


def test_a_write_async_is_planned_again_after_the_shape_changed() -> None:
    a = _array(sharded=False)
    with a._shape_lock.alone():  # holds the write back until the append is done
        grown = a.write_async(np.s_[40:45], 2)
        a.append(np.full((3, 4), 7, dtype="int32"))
    grown.result(WAIT)
    np.testing.assert_array_equal(a[43:48, 0], [2, 2, 7, 7, 7])
    with a._shape_lock.alone():
        cut = a.write_async(np.s_[40:45], 3)
        a.resize((42, 4))
    with pytest.raises(InvalidArgumentError, match=r"resized to \(42, 4\) after the call"):
        cut.result(WAIT)
    np.testing.assert_array_equal(a[38:42, 0], [1, 1, 2, 2])  # nothing of it written


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
