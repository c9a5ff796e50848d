"""Futures of reads, writes and opens that run while the caller goes on.

``Array.read_async``, ``Array.write_async`` and :func:`gpuzarr.open_async` return a
:class:`Future`: a :class:`concurrent.futures.Future` (``result()``, ``done()``, ``cancel()``,
``add_done_callback``, ``concurrent.futures.wait``) that asyncio code may also ``await``, as
TensorStore's futures are both. The work runs on the ``async_concurrency`` threads of
:func:`gpuzarr.config.request_pool`, in the order it was asked for; each request decodes on the
shared ``concurrency`` pool as a blocking call would.
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any, TypeVar

from . import config

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

T = TypeVar("T")


class Future(concurrent.futures.Future[T]):
    """A :class:`concurrent.futures.Future` that asyncio code may ``await``.

    Awaiting it does not block the event loop; cancelling the awaiting task cancels the work if
    it has not started (work already running finishes, and its result is dropped).
    """

    def __await__(self) -> Generator[Any, None, T]:
        import asyncio  # only for callers that await: asyncio is not imported with gpuzarr

        return asyncio.wrap_future(self).__await__()


def submit(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` on the request pool, as a :class:`Future` of its result."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return  # cancelled while it waited its turn
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # the caller's result() raises it, whatever it is
            future.set_exception(exc)
        else:
            future.set_result(result)

    config.request_pool().submit(run)
    return future


__all__ = ["Future", "submit"]
