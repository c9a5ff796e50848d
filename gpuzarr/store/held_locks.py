"""Store locks that an interrupt (Ctrl-C) cannot leave held.

``with store.lock(key):`` lets go of the lock in the context manager's ``__exit__``, a Python
function: a KeyboardInterrupt landing at its entry (where CPython delivers signals) skips the
release, and the lock stays held for as long as the exception lives (its traceback holds the
suspended lock). A REPL or a notebook keeps the last exception (``sys.last_value``), and every
later write of that key, in this process or another one waiting on the lock file, waited for
ever: 9 in about 6,000 random interrupts of partial writes.

:func:`held` enters a store's lock and notes it for the thread until it is let go of;
:func:`released_on_interrupt` around an operation lets go of those its block entered and an
interrupt left behind, by finishing their ``__exit__``. Errors (``Exception``) leave nothing
behind and are not looked at: only an interrupt lands between two lines.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager

    from .base import Store

_thread = threading.local()


def _entered() -> list[AbstractContextManager[Any]]:
    entered: list[AbstractContextManager[Any]] | None = getattr(_thread, "entered", None)
    if entered is None:
        entered = _thread.entered = []
    return entered


class held:
    """``store.lock(key)``, noted for the thread while it is held (see the module)."""

    __slots__ = ("_lock",)

    def __init__(self, store: Store, key: str) -> None:
        self._lock = store.lock(key)

    def __enter__(self) -> None:
        entered = _entered()
        entered.append(self._lock)  # before: an interrupt inside the enter leaves it noted
        try:
            self._lock.__enter__()
        except BaseException:
            entered.remove(self._lock)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self._lock.__exit__(*exc)
        except Exception:  # the lock's own failure: it let go of the lock on the way
            self._forget()
            raise
        # An interrupt inside the exit above leaves the lock noted, for released_on_interrupt.
        self._forget()

    def _forget(self) -> None:
        with contextlib.suppress(ValueError):  # let go of by released_on_interrupt already
            _entered().remove(self._lock)


@contextlib.contextmanager
def released_on_interrupt() -> Iterator[None]:
    """Around an operation that takes store locks with :func:`held`: where an interrupt
    (not an ``Exception``) stops it, the locks its block entered and did not let go of are let
    go of, newest first, before the interrupt goes on."""
    entered = _entered()
    before = len(entered)
    try:
        yield
    except Exception:
        raise
    except BaseException as interrupt:
        while len(entered) > before:
            lock = entered.pop()
            # Finishes the suspended lock's exit (the lock is let go of); one never entered, or
            # let go of already, ignores it. Whatever it raises, the interrupt is what goes on.
            with contextlib.suppress(BaseException):
                lock.__exit__(type(interrupt), interrupt, interrupt.__traceback__)
        raise


__all__ = ["held", "released_on_interrupt"]
