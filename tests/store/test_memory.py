"""MemoryStore: the conformance suite plus named shared stores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr.store import MemoryStore, make_store, memory_store

from .conformance import StoreConformance

if TYPE_CHECKING:
    from gpuzarr.store.base import Store


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return MemoryStore()

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, MemoryStore)
        return MemoryStore(store.data, read_only=True)


def test_shared_dict() -> None:
    data: dict[str, bytes] = {}
    MemoryStore(data).set("k", b"v")
    assert data == {"k": b"v"}


def test_stored_values_are_bytes() -> None:
    store = MemoryStore()
    store.set("k", bytearray(b"abc"))
    assert type(store.data["k"]) is bytes


def test_named_memory_stores_share_data() -> None:
    a = memory_store("test_memory_shared")
    a.set("k", b"v")
    b = memory_store("test_memory_shared")
    assert b.get("k") == b"v"
    assert memory_store("").get("k") is None
    assert memory_store("test_memory_other").get("k") is None


def test_memory_url() -> None:
    store, path = make_store("memory://test_memory_url")
    assert isinstance(store, MemoryStore)
    assert path == ""
    store.set("zarr.json", b"{}")
    again, _ = make_store("memory://test_memory_url")
    assert again.get("zarr.json") == b"{}"


def test_make_store_read_only_wraps_without_mutating() -> None:
    store = MemoryStore()
    ro, _ = make_store(store, read_only=True)
    assert ro.read_only and not store.read_only
    store.set("k", b"v")
    assert ro.get("k") == b"v"


def test_a_dict_is_a_memory_store_over_it() -> None:
    """zarr-python takes a dict for a store (``store={}``, its guide's examples); gpuzarr read
    every dict as a TensorStore kvstore spec and raised 'kvstore: required member is missing'."""
    import numpy as np

    import gpuzarr
    from gpuzarr.errors import InvalidArgumentError

    data: dict[str, bytes] = {}
    array = gpuzarr.create_array(data, shape=(4, 4), dtype="i4", chunks=(2, 2))
    array[...] = np.arange(16).reshape(4, 4)
    assert "zarr.json" in data and "c/1/1" in data  # written into the caller's dict
    np.testing.assert_array_equal(gpuzarr.open_array(data, mode="r")[...], np.arange(16).reshape(4, 4))
    group = gpuzarr.open_group({}, mode="w", zarr_format=2)
    assert group.zarr_format == 2
    # A kvstore spec names its driver; a dict of other values is no store gpuzarr can read.
    assert list(gpuzarr.open_group({"driver": "memory"}, mode="w").store.data) == ["zarr.json"]
    with pytest.raises(InvalidArgumentError, match=r"key 'zarr\.json' holds a int"):
        gpuzarr.open_array({"zarr.json": 1}, mode="r")
