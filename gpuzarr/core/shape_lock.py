"""The lock that keeps an Array handle's writes and its shape changes apart.

Whether a write covers a chunk whole depends on the array's shape: at the array's edge a chunk
is whole once the part inside the shape is written, and is then written without reading what
is stored. A write planned with the shape before another thread's ``append`` (or growing
``resize``) wrote the old edge chunk whole, fill value in the rows the append had just written,
and erased them. Writes share this lock, from planning to the last chunk; ``resize`` and
``append`` hold it alone, so a write is planned and done with one shape.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


class ShapeLock:
    """Shared by writes, held alone by shape changes; the thread holding it alone may also
    take it shared (``append`` writes its rows) or alone again (``append`` resizes)."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        #: threads holding it shared, and how many times each (a write may nest another)
        self._sharing: dict[int, int] = {}
        self._owner: int | None = None
        self._depth = 0
        #: shape changes waiting: new writes wait behind them, so that steady writes from
        #: several threads never keep an append out
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held by a write from its plan to its last chunk."""
        me = threading.get_ident()
        with self._changed:
            while self._owner not in (None, me) or (self._waiting and self._owner != me and me not in self._sharing):
                self._changed.wait()
            self._sharing[me] = self._sharing.get(me, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                if self._sharing[me] == 1:
                    del self._sharing[me]
                else:
                    self._sharing[me] -= 1
                if not self._sharing:
                    self._changed.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Held by a shape change: waits for the writes under way, and new ones wait for it."""
        me = threading.get_ident()
        with self._changed:
            if self._owner == me:
                self._depth += 1
            else:
                self._waiting += 1
                try:
                    while self._owner is not None or self._sharing:
                        self._changed.wait()
                finally:
                    self._waiting -= 1
                    if not self._waiting:
                        self._changed.notify_all()
                self._owner, self._depth = me, 1
        try:
            yield
        finally:
            with self._changed:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None
                    self._changed.notify_all()
