"""The conformance suite honours capability flags: a store that declares it cannot erase or
list passes it, and is checked to refuse those operations by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr.errors import UnsupportedOperationError
from gpuzarr.store import MemoryStore

from .conformance import StoreConformance

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpuzarr.store.base import Store


class AppendOnlyStore(MemoryStore):
    """Keys can be written and read, but neither erased nor listed (a write-once archive
    behind a server without listings)."""

    supports_deletes = False
    supports_listing = False

    def erase(self, key: str) -> None:
        self._check_writable()
        if self.exists(key):
            raise UnsupportedOperationError(f"{self!r}: cannot erase {key!r}")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        raise UnsupportedOperationError(f"{self!r}: cannot list {prefix!r}")


class TestAppendOnlyStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return AppendOnlyStore()

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, MemoryStore)
        return AppendOnlyStore(store.data, read_only=True)


def test_a_store_that_cannot_be_written_is_read_only() -> None:
    class Server(MemoryStore):
        supports_writes = False

    store = Server()
    assert store.read_only
    with pytest.raises(PermissionError):
        store.set("k", b"v")
