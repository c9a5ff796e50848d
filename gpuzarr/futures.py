"""Futures of reads, writes and opens that run while the caller goes on.

``Array.read_async``, ``Array.write_async`` and :func:`gpuzarr.open_async` return a
:class:`Future`: a :class:`concurrent.futures.Future` (``result()``, ``done()``, ``cancel()``,
``add_done_callback``, ``concurrent.futures.wait``) that asyncio code may also ``await``, as
TensorStore's futures are both. The work runs on the ``async_concurrency`` threads of
:func:`gpuzarr.config.request_pool`, in the order it was asked for; each request decodes on the
shared ``concurrency`` pool as a blocking call would.

Work that asks for the ``result()`` or ``exception()`` of a future whose work has not started
yet (another future's work, or a done-callback, which runs where the future's work ended) runs
that work itself, at once, whatever its timeout: it never waits for a place on the request
threads it occupies. Any other thread waits, with its timeout, as for any
:class:`concurrent.futures.Future`. (``concurrent.futures.wait`` and ``as_completed`` inside a
future's work wait for a thread like any other caller.)
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import config

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

T = TypeVar("T")

#: ``depth``: how many futures' work this thread is running (0 or absent: none)
_running = threading.local()


class _Work(Generic[T]):
    """The call a future stands for, taken by the first thread that claims it (the request
    thread whose turn came, or a thread asking for the result first) and dropped once taken or
    cancelled, so that a cancelled write does not keep its value alive."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._call: tuple[Callable[..., T], tuple[Any, ...], dict[str, Any]] | None = (fn, args, kwargs)
        self._lock = threading.Lock()

    def take(self) -> tuple[Callable[..., T], tuple[Any, ...], dict[str, Any]] | None:
        with self._lock:
            call, self._call = self._call, None
            return call


class Future(concurrent.futures.Future[T]):
    """A :class:`concurrent.futures.Future` that asyncio code may ``await``.

    Awaiting it does not block the event loop; cancelling the awaiting task cancels the work if
    it has not started (work already running finishes, and its result is dropped). Every task
    awaiting one future shares it: a timeout that cancels one awaiter cancels the work for all.
    """

    _work: _Work[T] | None = None

    def __await__(self) -> Generator[Any, None, T]:
        import asyncio  # only for callers that await: asyncio is not imported with gpuzarr

        return asyncio.wrap_future(self).__await__()

    def result(self, timeout: float | None = None) -> T:
        self._run_if_waiting()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._run_if_waiting()
        return super().exception(timeout)

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled and self._work is not None and self._work.take() is not None:
            # Told here, by the one thread that took the work: concurrent.futures.wait and
            # as_completed count a cancelled future as done only once it is notified.
            self.set_running_or_notify_cancel()
        return cancelled

    def _run_if_waiting(self) -> None:
        """Run the work here if it has not started and this thread runs a future's work."""
        if self._work is not None and getattr(_running, "depth", 0) > 0 and not self.done():
            self._run()

    def _run(self) -> None:
        call = self._work.take() if self._work is not None else None
        if call is None or not self.set_running_or_notify_cancel():
            return  # taken by another thread, or cancelled while it waited its turn
        fn, args, kwargs = call
        _running.depth = getattr(_running, "depth", 0) + 1
        try:
            result = fn(*args, **kwargs)
        except StopIteration as exc:
            # asyncio cannot raise a StopIteration into an awaiting task (it would hang there).
            self.set_exception(RuntimeError(f"the work raised StopIteration: {exc!r}"))
        except BaseException as exc:  # the caller's result() raises it, whatever it is
            self.set_exception(exc)
            if not isinstance(exc, Exception):
                # KeyboardInterrupt, SystemExit: on where the work ran inline (a waiting thread,
                # an atexit call); a pool thread drops it and goes on.
                raise
        else:
            self.set_result(result)  # its done-callbacks run here, inside the work
        finally:
            _running.depth -= 1


def submit(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` on the request pool, as a :class:`Future` of its result.

    Where the pool takes no more work (the interpreter is shutting down: an ``atexit`` handler),
    the work runs here, and the future is done when this returns.
    """
    future: Future[T] = Future()
    future._work = _Work(fn, args, kwargs)
    try:
        config.request_pool().submit(future._run)
    except RuntimeError:
        # "cannot schedule new futures after interpreter shutdown" (or no thread could start):
        # the work is still this future's alone to run, once (``_Work.take``).
        future._run()
    return future


__all__ = ["Future", "submit"]
