"""LocalStore's write locks and descriptors under interrupts (Ctrl-C) and fork: no lock held for
ever by a process that no longer uses it, no descriptor closed twice."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.store import local as local_module
from gpuzarr.store.local import _FileReader

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file locks between processes need fcntl")


def _write_in_child(path: str, done: Any) -> None:
    array = gpuzarr.open(path, mode="a", device="cpu")
    array[0:4, 0:4] = 5  # a part of shard c/0/0: its write lock
    done.set()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_while_a_thread_holds_a_lock_gets_it_once_released(tmp_path: Path) -> None:
    """The child inherited the lock file's open description: the parent's close left the lock
    with the child, whose own write of the key then waited on itself for ever."""
    path = str(tmp_path / "a.zarr")
    array = gpuzarr.create(path, shape=(16, 16), dtype="i4", chunks=(8, 8), shards=(16, 16), fill_value=0)
    array[...] = 1
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with array.store.lock("c/0/0"):
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    context = multiprocessing.get_context("fork")
    done = context.Event()
    child = context.Process(target=_write_in_child, args=(path, done))
    child.start()
    try:
        time.sleep(1.5)  # the child waits for the lock by now (if not, the test proves nothing)
        release.set()
        holder.join()
        assert done.wait(30), "the child's write waited for a lock nobody holds"
        child.join(30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
    assert (gpuzarr.open(path, mode="r")[0:4, 0:4] == 5).all()


def test_an_interrupt_right_after_the_lock_is_taken_leaves_it_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The locks were entered into an ExitStack: Ctrl-C between a lock's enter and the stack
    taking its exit left the lock held until a garbage collection, and every later write of
    the key in the process waited for it."""
    path = str(tmp_path / "a.zarr")
    array = gpuzarr.create(path, shape=(16,), dtype="i4", chunks=(8,), fill_value=0, device="cpu")
    array[...] = 1
    push = contextlib.ExitStack._push_cm_exit
    calls = [0]

    def interrupted_push(self: Any, cm: Any, exit_: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:  # the second lock, taken, not yet the stack's to release
            raise KeyboardInterrupt
        push(self, cm, exit_)

    monkeypatch.setattr(contextlib.ExitStack, "_push_cm_exit", interrupted_push)
    kept: list[BaseException] = []
    try:
        array[2:5] = 9
    except KeyboardInterrupt as exc:
        kept.append(exc)  # a caller that keeps the error (to log it) keeps its frames alive
    monkeypatch.undo()
    done = threading.Event()

    def write() -> None:
        array[2:5] = 7
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(10), "a later write of the key waited for a lock left held"
    np.testing.assert_array_equal(array[...], [1, 1, 7, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])


def test_a_reader_closed_by_an_interrupted_close_is_not_closed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close`` closed the descriptor, then forgot it: an interrupt between the two left it to
    ``__del__``, which closed the number again, by then maybe another thread's file."""
    (tmp_path / "f").write_bytes(b"x" * 10)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    reader = _FileReader(fd, 10, "url", "f")
    closed: list[int] = []
    real_close = os.close

    def close_then_interrupt(n: int) -> None:
        real_close(n)
        closed.append(n)
        if len(closed) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(local_module.os, "close", close_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        reader.close()
    reader.close()
    del reader
    assert closed == [fd]


@pytest.mark.parametrize("sharded", [False, True])
def test_an_interrupt_as_a_chunks_lock_is_let_go_of_leaves_it_free_while_the_exception_is_kept(
    tmp_path: Path, sharded: bool
) -> None:
    """Ctrl-C at the entry of the lock's ``__exit__`` (where CPython delivers signals) skipped
    the release: the lock stayed held while the exception lived, and a REPL keeps the last one
    (``sys.last_value``): the next write of that chunk waited for ever."""
    options: dict[str, Any] = {"shards": (8, 8)} if sharded else {}
    array = gpuzarr.create(str(tmp_path / "a.zarr"), shape=(8, 8), dtype="u2", chunks=(4, 4), device="cpu", **options)
    array[...] = 1
    exit_code = contextlib._GeneratorContextManager.__exit__.__code__

    def interrupt_the_release(frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is exit_code and frame.f_locals["self"].gen.gi_code.co_name == "lock":
            sys.settrace(None)
            raise KeyboardInterrupt
        return None

    sys.settrace(interrupt_the_release)
    try:
        with pytest.raises(KeyboardInterrupt) as kept:  # a partly covered chunk: written under its lock
            array[0:2, 0:2] = 2
    finally:
        sys.settrace(None)
    assert kept.value is not None  # still referenced, as a REPL keeps it
    done = threading.Event()

    def write_again() -> None:
        array[0:1, 0:1] = 3
        done.set()

    threading.Thread(target=write_again, daemon=True).start()
    assert done.wait(10), "the next write of the chunk waited on the lock the interrupt left held"
    assert array[0, 0] == 3 and array[1, 1] == 2
