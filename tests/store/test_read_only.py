"""Read-only views (``gpuzarr.store.read_only``): what ``mode="r"`` makes of a store object. The
conformance suite's read-only tests run through the view over stores that have no read-only
variant of their own, and ``mode="r"`` refuses writes whatever store it was given."""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import ReadOnlyError
from gpuzarr.store import (
    CachingStore,
    FsspecStore,
    LocalStore,
    MemoryStore,
    ReadOnlyStore,
    ZipStore,
    read_only_view,
)

from .conformance import VALUE, StoreConformance, as_bytes
from .test_caching import TestCachingStore
from .test_zip import TestAppendedZipStore

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.store.base import Store


class TestReadOnlyViewOfMemoryStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return MemoryStore()

    def make_read_only(self, store: Store) -> Store:
        return ReadOnlyStore(store)


class TestReadOnlyViewOfCachingStore(TestCachingStore):
    def make_read_only(self, store: Store) -> Store:
        view = read_only_view(store)
        assert isinstance(view, ReadOnlyStore)
        return view


class TestReadOnlyViewOfZipStore(TestAppendedZipStore):
    def make_read_only(self, store: Store) -> Store:
        view = read_only_view(store)
        assert isinstance(view, ReadOnlyStore)
        return view


class NotedStore(MemoryStore):
    """A user's store: a MemoryStore subclass that notes every key written."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []

    def set(self, key: str, value: Any) -> None:
        super().set(key, value)
        self.written.append(key)


def test_the_stores_own_read_only_variant_is_used_where_there_is_one(tmp_path: Path) -> None:
    import fsspec

    local = LocalStore(tmp_path / "l")
    assert isinstance(read_only_view(local), LocalStore) and read_only_view(local).read_only
    memory = MemoryStore()
    view = read_only_view(memory)
    assert type(view) is MemoryStore and view.read_only and view.data is memory.data
    fs_store = FsspecStore(fsspec.filesystem("memory"), "/ro-view")
    assert type(read_only_view(fs_store)) is FsspecStore and read_only_view(fs_store).read_only
    for other in (CachingStore(MemoryStore(), 1 << 20), NotedStore(), ZipStore(tmp_path / "z.zip", mode="a")):
        assert isinstance(read_only_view(other), ReadOnlyStore)
    already = MemoryStore(read_only=True)
    assert read_only_view(already) is already


def test_the_view_reads_what_the_inner_store_holds_and_refuses_every_write() -> None:
    inner = MemoryStore()
    inner.set("a/b", VALUE)
    view = ReadOnlyStore(inner)
    assert as_bytes(view.get("a/b")) == VALUE and view.exists("a/b") and not view.exists("a/c")
    assert sorted(view.list_prefix("")) == ["a/b"] and view.list_dir("a") == (["a/b"], [])
    with view.snapshot("a/b") as snapshot:
        assert as_bytes(snapshot.get("a/b")) == VALUE
    for write in (
        lambda: view.set("x", b"1"),
        lambda: view.erase("a/b"),
        lambda: view.erase_prefix("a"),
        lambda: view.set_if("x", b"1", None),
        lambda: view.erase_if("a/b", None),
    ):
        with pytest.raises(ReadOnlyError, match="ReadOnlyStore"):
            write()
    with pytest.raises(ReadOnlyError), view.lock("a/b"):
        pass
    assert dict(inner.data) == {"a/b": VALUE}
    # The inner store is its owner's: closing the view leaves it alone, and it stays writable.
    view.close()
    inner.set("x", b"2")
    assert as_bytes(view.get("x")) == b"2"


def test_the_view_compares_pickles_and_names_its_inner_store() -> None:
    inner = MemoryStore(name="ro-view-test")
    view = ReadOnlyStore(inner)
    assert view == ReadOnlyStore(inner) and hash(view) == hash(ReadOnlyStore(inner))
    assert view != inner and repr(view) == f"ReadOnlyStore({inner!r})"
    again = pickle.loads(pickle.dumps(view))
    assert isinstance(again, ReadOnlyStore) and again.read_only
    with pytest.raises(TypeError, match="expected a Store"):
        ReadOnlyStore({"a": b"1"})  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["caching", "zip", "user"])
def test_mode_r_refuses_writes_through_any_store_object(kind: str, tmp_path: Path) -> None:
    store: Store
    if kind == "caching":
        store = CachingStore(LocalStore(tmp_path / "a.zarr"), 1 << 20)
    elif kind == "zip":
        store = ZipStore(tmp_path / "a.zip", mode="a")
    else:
        store = NotedStore()
    data = np.arange(12, dtype="i4").reshape(3, 4)
    gpuzarr.open_group(store, mode="w")
    written = gpuzarr.open(store, path="a", mode="w", shape=data.shape, dtype=data.dtype, chunks=(2, 2))
    written[...] = data
    before = sorted(store.list_prefix(""))

    array = gpuzarr.open(store, path="a", mode="r")
    np.testing.assert_array_equal(array[...], data)
    assert array.read_only and array.store.read_only
    with pytest.raises(ReadOnlyError):
        array[0, 0] = 99
    with pytest.raises(ReadOnlyError):
        array.attrs["x"] = 1
    with pytest.raises(ReadOnlyError):
        gpuzarr.open_group(store, mode="r").attrs["x"] = 1
    # Nothing reached the store, and the caller's object is as writable as it was.
    assert sorted(store.list_prefix("")) == before
    np.testing.assert_array_equal(gpuzarr.open(store, path="a", mode="r")[...], data)
    assert not store.read_only
    gpuzarr.open(store, path="a", mode="r+")[0, 0] = 7
    assert gpuzarr.open(store, path="a", mode="r")[0, 0] == 7
