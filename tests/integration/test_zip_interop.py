"""Zip archives: zarr-python's ZipStore writes, gpuzarr reads (and the reverse), v2 and v3,
sharded; TensorStore's zip kvstore reads what gpuzarr wrote; every way gpuzarr names a zip."""

from __future__ import annotations

import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.store import ZipStore, make_store

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

DATA = np.arange(12 * 10, dtype="uint16").reshape(12, 10)

LAYOUTS = [
    pytest.param({"zarr_format": 3}, id="v3"),
    pytest.param({"zarr_format": 3, "shards": (12, 10)}, id="v3-sharded"),
    pytest.param({"zarr_format": 2}, id="v2"),
]


def _read(node: Any) -> np.ndarray[Any, Any]:
    assert isinstance(node, gpuzarr.Array)
    return np.asarray(node[...])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"])
def test_zarr_python_writes_gpuzarr_reads(tmp_path: Path, layout: dict[str, Any], compression: int) -> None:
    path = tmp_path / "data.zip"
    with zarr.storage.ZipStore(path, mode="w", compression=compression) as store:
        group = zarr.open_group(store, mode="w", zarr_format=layout["zarr_format"])
        a = group.create_array("raw", shape=DATA.shape, chunks=(4, 5), dtype=DATA.dtype, **layout_kwargs(layout))
        a[...] = DATA
    for url in (str(path), f"zip://{path}", ZipStore(path)):
        node = gpuzarr.open(url, path="raw", mode="r")
        np.testing.assert_array_equal(_read(node), DATA)
        np.testing.assert_array_equal(np.asarray(node[3:9, 2:7]), DATA[3:9, 2:7])
    assert sorted(gpuzarr.open_group(str(path), mode="r")) == ["raw"]


def layout_kwargs(layout: dict[str, Any]) -> dict[str, Any]:
    return {"shards": layout["shards"]} if "shards" in layout else {}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpuzarr_writes_zarr_python_and_tensorstore_read(tmp_path: Path, layout: dict[str, Any]) -> None:
    path = tmp_path / "out.zip"
    group = gpuzarr.open_group(str(path), mode="w", zarr_format=layout["zarr_format"])
    a = group.create_array("raw", shape=DATA.shape, chunks=(4, 5), dtype=DATA.dtype, **layout_kwargs(layout))
    a[0:6] = DATA[0:6]
    a[6:] = DATA[6:]  # the sharded array writes its one shard twice: the archive keeps the last
    group.store.close()
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    assert len(names) == len(set(names))
    with zarr.storage.ZipStore(path, mode="r") as store:
        np.testing.assert_array_equal(zarr.open_array(store, path="raw", mode="r")[...], DATA)
    if layout["zarr_format"] == 3:
        kvstore = {"driver": "zip", "base": {"driver": "file", "path": str(path)}, "path": "raw/"}
        t = ts.open({"driver": "zarr3", "kvstore": kvstore}).result()
        np.testing.assert_array_equal(t[...].read().result(), DATA)


def test_tensorstore_zip_specs(tmp_path: Path) -> None:
    path = tmp_path / "spec.zip"
    with zarr.storage.ZipStore(path, mode="w") as store:
        zarr.create_array(store, name="x/raw", shape=DATA.shape, chunks=(4, 5), dtype=DATA.dtype)[...] = DATA
    spec = {"driver": "zarr3", "kvstore": {"driver": "zip", "base": {"driver": "file", "path": str(path)}}}
    np.testing.assert_array_equal(_read(gpuzarr.open({**spec, "path": "x/raw"}, mode="r")), DATA)
    url = {"driver": "zarr3", "kvstore": f"file://{path}|zip:x/raw/"}
    node = gpuzarr.open(url, mode="r")
    np.testing.assert_array_equal(_read(node), DATA)
    # The spec gpuzarr gives back is TensorStore's, and TensorStore opens it.
    np.testing.assert_array_equal(ts.open(node.spec()).result()[...].read().result(), DATA)
    store, path_in = make_store({"driver": "zip", "base": {"driver": "file", "path": str(path)}, "path": "x"})
    assert isinstance(store, ZipStore) and path_in == "x/"


@pytest.mark.parametrize(
    ("kvstore", "match"),
    [
        ({"driver": "zip"}, r"kvstore\.base: a zip kvstore needs"),
        ({"driver": "zip", "base": {"driver": "memory"}}, r"kvstore\.base: gpuzarr reads zip archives from local"),
        ({"driver": "zip", "base": {"driver": "file", "path": "/a.zip"}, "path": "../x"}, r"kvstore\.path"),
        ({"driver": "zip", "base": {"driver": "file", "path": "/a.zip"}, "cache": 1}, r"kvstore\.cache: unknown"),
    ],
)
def test_bad_zip_specs_name_the_member(kvstore: dict[str, Any], match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        gpuzarr.open({"driver": "zarr3", "kvstore": kvstore}, mode="r")


def test_api_modes_on_a_zip_path(tmp_path: Path) -> None:
    path = tmp_path / "modes.zip"
    with pytest.raises(gpuzarr.errors.NodeNotFoundError):
        gpuzarr.open(str(path), mode="r")
    assert not path.exists()
    a = gpuzarr.open(str(path), mode="a", shape=(4,), dtype="int8", chunks=(2,))  # created by its first write
    a[...] = 7
    a.store.close()
    read = gpuzarr.open(str(path), mode="r")
    assert read.store.read_only and isinstance(read.store, ZipStore)
    np.testing.assert_array_equal(_read(read), np.full(4, 7, "int8"))
    # "w" replaces the node: its members are erased and the archive rewritten on close.
    b = gpuzarr.open(str(path), mode="w", shape=(3,), dtype="int8", chunks=(3,))
    b[...] = 1
    b.store.close()
    with zarr.storage.ZipStore(path, mode="r") as store:
        np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], np.ones(3, "int8"))
