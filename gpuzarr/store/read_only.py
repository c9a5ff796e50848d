"""A read-only view of another store: what ``mode="r"`` makes of a store object that has no
read-only variant of its own (a CachingStore, a ZipStore opened for appending, a user's store).

Reads, listings and snapshots go to the inner store unchanged (a CachingStore's cache keeps
serving them); every write (``set``, ``erase``, ``erase_prefix``, ``lock``, ``set_if``,
``erase_if``) raises ReadOnlyError naming the view. The view does not own the inner store:
closing it leaves the inner store open for its owner.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from .base import Store
from .fsspec import FsspecStore
from .local import LocalStore
from .memory import MemoryStore
from .object_store import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from .base import Buffer, ByteRange, RangeReader, Snapshot


class ReadOnlyStore(Store):
    """``inner``'s data, refusing writes."""

    supports_writes = False

    def __init__(self, inner: Store) -> None:
        if not isinstance(inner, Store):
            raise TypeError(f"ReadOnlyStore: expected a Store, got {type(inner).__name__}")
        self.inner = inner
        # What readers consult about the inner store's reads holds for the view too.
        self.supports_partial_reads = inner.supports_partial_reads
        self.supports_listing = inner.supports_listing
        self.io_concurrency = inner.io_concurrency
        self.cheap_ranged_reads = inner.cheap_ranged_reads
        self.reads_sizes_first = inner.reads_sizes_first
        super().__init__(read_only=True)

    def __repr__(self) -> str:
        return f"ReadOnlyStore({self.inner!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReadOnlyStore) and other.inner == self.inner

    def __hash__(self) -> int:
        return hash((ReadOnlyStore, self.inner))

    # -- reading: the inner store's ------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        return self.inner.get(key, byte_range)

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        return self.inner.get_ranges(key, ranges)

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        return self.inner.get_into(key, buffer_for, start, length)

    def open_reader(self, key: str) -> RangeReader | None:
        return self.inner.open_reader(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return self.inner.list_dir(prefix)

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        with self.inner.snapshot(key) as snapshot:
            yield snapshot

    def kvstore_json(self) -> dict[str, Any] | str:
        return self.inner.kvstore_json()

    # -- writing: refused --------------------------------------------------------------------------

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    def erase(self, key: str) -> None:
        self._check_writable()

    def erase_prefix(self, prefix: str) -> None:
        self._check_writable()

    def set_if(self, key: str, value: Buffer, version: Any) -> bool:
        self._check_writable()
        return False  # pragma: no cover - _check_writable raised

    def erase_if(self, key: str, version: Any) -> bool:
        self._check_writable()
        return False  # pragma: no cover - _check_writable raised

    def close(self) -> None:
        """Nothing: the inner store belongs to whoever made it."""


def read_only_view(store: Store) -> Store:
    """The same data as ``store``, refusing writes, without changing the caller's object:
    the store's own read-only variant where it has one (sharing its files, connections or
    memory), else (a subclass too) a :class:`ReadOnlyStore` around it."""
    if store.read_only:
        return store
    # Exactly these classes: a subclass's own methods (a get_into that counts what is read)
    # would be lost in a new plain store; it is wrapped instead.
    if type(store) is LocalStore or type(store) is ObjectStore:
        return store.with_options(read_only=True)
    if type(store) is MemoryStore:
        return MemoryStore(store.data, read_only=True, name=store.name)
    if type(store) is FsspecStore:
        return FsspecStore(store.fs, store.root, read_only=True)
    return ReadOnlyStore(store)
