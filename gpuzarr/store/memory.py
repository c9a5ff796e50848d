"""An in-memory store (a dict of bytes), for tests and scratch data."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import TYPE_CHECKING, Any

from .base import Buffer, ByteRange, BytesSnapshot, Snapshot, Store, validate_key, validate_prefix
from .locks import process_locks

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class MemoryStore(Store):
    """Keys and values in a dict. ``MemoryStore(data)`` shares ``data`` with the caller.

    ``name`` is the name of a shared store (``memory://name``), "" for an anonymous one.
    Values are immutable bytes replaced whole, so a :meth:`snapshot` is the bytes object itself;
    :meth:`lock` is a thread lock per key of the dict (stores sharing a dict share it).
    """

    locks_across_threads = True

    def __init__(self, data: dict[str, bytes] | None = None, read_only: bool = False, name: str = "") -> None:
        super().__init__(read_only)
        self.data: dict[str, bytes] = {} if data is None else data
        self.name = name
        self._lock = threading.Lock()
        # Names this store in Dask task graphs: hashing the data instead would copy all of it.
        self._token = uuid.uuid4().hex

    def kvstore_json(self) -> dict[str, Any] | str:
        """``memory://name`` for a named store, which gpuzarr reopens in the same process; an
        anonymous store gives ``{"driver": "memory"}``, which (as in TensorStore without a shared
        context) opens a new, empty store."""
        return f"memory://{self.name}" if self.name else {"driver": "memory"}

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self.data)} keys>)"

    def __dask_tokenize__(self) -> tuple[str, str]:
        """Dask's name for this store (its graphs never hash the data): unique per store object."""
        return ("gpuzarr.MemoryStore", self._token)

    def __getstate__(self) -> dict[str, Any]:
        # A pickled memory store carries a copy of its keys (another process cannot share the
        # dict); the lock is made anew.
        return {"data": dict(self.data), "read_only": self.read_only, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        MemoryStore.__init__(self, state["data"], state["read_only"], state["name"])

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        value = self.data.get(validate_key(key))
        if value is None or byte_range is None:
            return value
        start, stop = byte_range.resolve(len(value))
        return memoryview(value)[start:stop]

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        # The value is already in memory: hand out a view of it, no copy.
        value = self.data.get(validate_key(key))
        if value is None:
            return None
        view = memoryview(value).cast("B")
        stop = len(view) if length is None else min(start + length, len(view))
        return view[min(start, len(view)) : stop], len(view)

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        yield BytesSnapshot(key, self.data.get(validate_key(key)))

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        self._check_writable()
        with process_locks.hold((id(self.data), validate_key(key))):
            yield

    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        with self._lock:
            keys = list(self.data)
        return iter(sorted(k for k in keys if k.startswith(prefix)))

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        data = bytes(memoryview(value).cast("B")) if not isinstance(value, bytes) else value
        with self._lock:
            self.data[validate_key(key)] = data

    def erase(self, key: str) -> None:
        self._check_writable()
        with self._lock:
            self.data.pop(validate_key(key), None)
