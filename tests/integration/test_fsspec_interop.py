"""fsspec: zarr-python's FsspecStore writes, gpuzarr's FsspecStore reads (and the reverse); fsspec
URLs and chained URLs given to the public API open through the adapter."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.store import FsspecStore, MemoryStore, make_store

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")
fsspec = pytest.importorskip("fsspec")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

DATA = np.arange(8 * 9, dtype="float32").reshape(8, 9)


def _async_memory_fs() -> Any:
    # zarr-python's FsspecStore needs an async file system: wrap the memory one.
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    return AsyncFileSystemWrapper(fsspec.filesystem("memory"), asynchronous=True)


@pytest.mark.parametrize("shards", [None, (8, 9)], ids=["chunked", "sharded"])
def test_zarr_python_writes_gpuzarr_reads(shards: tuple[int, int] | None) -> None:
    root = f"/interop-{uuid.uuid4().hex}"
    zstore = zarr.storage.FsspecStore(_async_memory_fs(), path=root)
    zarr.create_array(zstore, name="raw", shape=DATA.shape, chunks=(4, 3), shards=shards, dtype=DATA.dtype)[...] = DATA
    store = FsspecStore(fsspec.filesystem("memory"), root)
    node = gpuzarr.open(store, path="raw", mode="r")
    assert isinstance(node, gpuzarr.Array)
    np.testing.assert_array_equal(np.asarray(node[...]), DATA)
    np.testing.assert_array_equal(np.asarray(node[1:7, 2:8]), DATA[1:7, 2:8])


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_gpuzarr_writes_zarr_python_reads(zarr_format: int) -> None:
    root = f"/interop-{uuid.uuid4().hex}"
    store = FsspecStore.from_url(f"memory://{root}")
    a = gpuzarr.create(store, path="raw", shape=DATA.shape, chunks=(4, 3), dtype=DATA.dtype, zarr_format=zarr_format)
    a[...] = DATA
    zstore = zarr.storage.FsspecStore(_async_memory_fs(), path=root, read_only=True)
    np.testing.assert_array_equal(zarr.open_array(zstore, path="raw", mode="r")[...], DATA)


def test_chained_url_through_the_public_api(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "x.zarr"), shape=DATA.shape, chunks=(4, 3), dtype=DATA.dtype)[...] = DATA
    url = f"simplecache::file://{tmp_path}/x.zarr"
    node = gpuzarr.open(url, mode="r")
    assert isinstance(node, gpuzarr.Array) and isinstance(node.store, FsspecStore)
    np.testing.assert_array_equal(np.asarray(node[...]), DATA)


class UserFileSystem(MemoryFileSystem):  # type: ignore[misc]
    """A file system of the user's own, registered under a scheme of its own."""

    protocol = "gpuzarrtest"


def test_a_registered_user_scheme_opens_through_fsspec() -> None:
    fsspec.register_implementation("gpuzarrtest", UserFileSystem, clobber=True)
    url = f"gpuzarrtest://bucket-{uuid.uuid4().hex}/x.zarr"
    a = gpuzarr.create(url, shape=(4,), dtype="int16", chunks=(2,))
    a[...] = np.arange(4)
    store, _ = make_store(url, read_only=True)
    assert isinstance(store, FsspecStore) and store.read_only
    np.testing.assert_array_equal(np.asarray(gpuzarr.open(url, mode="r")[...]), np.arange(4))


def test_memory_url_stays_gpuzarrs_own() -> None:
    store, _ = make_store("memory://fsspec-test")
    assert isinstance(store, MemoryStore)
