"""Consolidated metadata with zarr-python 3, both ways, v2 and v3.

zarr-python consolidates → gpuzarr opens from it; gpuzarr consolidates → zarr.open_consolidated
and ``zarr.open_group(use_consolidated=True)`` open from it; and gpuzarr's metadata writes in a
consolidated hierarchy (resize, attributes, new nodes) keep zarr-python's consolidated view
equal to what is stored. TensorStore does not read consolidated metadata, so it has no part here.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

zarr = pytest.importorskip("zarr")

# zarr-python warns that v3 consolidated metadata is not in the specification yet.
pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")

A = np.arange(12, dtype="int32").reshape(3, 4)
B = np.linspace(0, 1, 6).reshape(2, 3)


def _zarr_python_hierarchy(path: Path, zarr_format: int) -> None:
    root = zarr.open_group(str(path), mode="w", zarr_format=zarr_format, attributes={"title": "zp"})
    a = root.create_array("a", shape=A.shape, chunks=(2, 2), dtype=A.dtype, attributes={"units": "m"})
    a[...] = A
    sub = root.create_group("sub", attributes={"level": 1})
    b = sub.create_array("b", shape=B.shape, chunks=(1, 3), dtype=B.dtype, fill_value=float("nan"))
    b[...] = B
    sub.create_group("empty")
    root.create_group("Z")


def _gpuzarr_hierarchy(path: Path, zarr_format: int) -> None:
    root = gpuzarr.create_group(str(path), zarr_format=zarr_format, attributes={"title": "gz"})
    root.create_array("a", shape=A.shape, chunks=(2, 2), dtype=A.dtype, attributes={"units": "m"})[...] = A
    sub = root.create_group("sub", attributes={"level": 1})
    sub.create_array("b", shape=B.shape, chunks=(1, 3), dtype=B.dtype, fill_value=float("nan"))[...] = B
    sub.create_group("empty")
    root.create_group("Z")


def _metadata_files(path: Path, zarr_format: int) -> list[Path]:
    names = {"zarr.json"} if zarr_format == 3 else {".zarray", ".zgroup", ".zattrs"}
    return [p for p in path.rglob("*") if p.name in names and p.parent != path]


def _zarr_python_tree(path: Path, use_consolidated: bool) -> dict[str, Any]:
    group = zarr.open_group(str(path), mode="r", use_consolidated=use_consolidated)
    assert (group.metadata.consolidated_metadata is not None) == use_consolidated
    out: dict[str, Any] = {"": dict(group.attrs)}
    for name, node in group.members(max_depth=None):
        shape = node.shape if isinstance(node, zarr.Array) else None
        out[name] = (type(node).__name__, shape, dict(node.attrs))
    return out


def _gpuzarr_tree(group: gpuzarr.Group) -> dict[str, Any]:
    out: dict[str, Any] = {"": dict(group.attrs)}
    for name, node in group.members(recursive=True):
        shape = node.shape if isinstance(node, gpuzarr.Array) else None
        out[name] = (type(node).__name__, shape, dict(node.attrs))
    return out


def test_gpuzarr_opens_what_zarr_python_consolidated(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "zp.zarr"
    _zarr_python_hierarchy(path, zarr_format)
    zarr.consolidate_metadata(str(path))
    # Only the consolidated document is left to describe the members: gpuzarr must use it.
    for f in _metadata_files(path, zarr_format):
        f.unlink()
    for group in (
        gpuzarr.open_consolidated(str(path), mode="r"),
        gpuzarr.open_group(str(path), mode="r", use_consolidated=True),
        gpuzarr.open_group(str(path), mode="r"),
        gpuzarr.open(str(path), mode="r"),
    ):
        assert isinstance(group, gpuzarr.Group) and group.consolidated
        assert group.zarr_format == zarr_format
        assert dict(group.attrs) == {"title": "zp"}
        assert [n for n, _ in group.members(recursive=True)] == ["Z", "a", "sub", "sub/b", "sub/empty"]
        np.testing.assert_array_equal(group["a"][...], A)
        assert dict(group["a"].attrs) == {"units": "m"}
        assert dict(group["sub"].attrs) == {"level": 1}
        np.testing.assert_array_equal(group["sub"]["b"][...], B)
        assert np.isnan(group["sub/b"].fill_value)
    assert list(gpuzarr.open_group(str(path), mode="r", use_consolidated=False)) == []


def test_zarr_python_opens_what_gpuzarr_consolidated(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "gz.zarr"
    _gpuzarr_hierarchy(path, zarr_format)
    gpuzarr.consolidate_metadata(str(path))
    for f in _metadata_files(path, zarr_format):
        f.unlink()
    for group in (
        zarr.open_consolidated(str(path), mode="r"),
        zarr.open_group(str(path), mode="r", use_consolidated=True),
    ):
        assert group.metadata.consolidated_metadata is not None
        assert dict(group.attrs) == {"title": "gz"}
        assert sorted(n for n, _ in group.members(max_depth=None)) == ["Z", "a", "sub", "sub/b", "sub/empty"]
        np.testing.assert_array_equal(group["a"][...], A)
        assert dict(group["a"].attrs) == {"units": "m"}
        assert dict(group["sub"].attrs) == {"level": 1}
        np.testing.assert_array_equal(group["sub/b"][...], B)


def test_same_documents_as_zarr_python(tmp_path: Path, zarr_format: int) -> None:
    # One hierarchy consolidated by each: the consolidated documents agree member for member.
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    _zarr_python_hierarchy(ours, zarr_format)
    shutil.copytree(ours, theirs)
    gpuzarr.consolidate_metadata(str(ours))
    zarr.consolidate_metadata(str(theirs))
    if zarr_format == 3:
        mine = json.loads((ours / "zarr.json").read_bytes())
        expected = json.loads((theirs / "zarr.json").read_bytes())
        assert mine == expected
        assert list(mine["consolidated_metadata"]["metadata"]) == list(expected["consolidated_metadata"]["metadata"])
    else:
        assert (ours / ".zmetadata").read_bytes() == (theirs / ".zmetadata").read_bytes()


CHANGES: dict[str, Callable[[gpuzarr.Group], Any]] = {
    "resize": lambda g: g["a"].resize(5, 4),
    "array attrs": lambda g: g["sub/b"].attrs.update(units="s"),
    "root attrs": lambda g: g.attrs.update(title="changed"),
    "group attrs": lambda g: g["sub"].attrs.update(level=2),
    "new child array": lambda g: g["sub"].create_array("c", shape=(2,), dtype="uint16", attributes={"n": 1}),
    "new nested group": lambda g: g.create_group("x/y", attributes={"deep": True}),
    "replaced child": lambda g: g.create_array("sub", shape=(1,), dtype="int8", overwrite=True),
}


@pytest.mark.parametrize("consolidator", ["zarr-python", "gpuzarr"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_gpuzarr_changes_keep_zarr_python_view_true(
    tmp_path: Path, zarr_format: int, change: str, consolidator: str
) -> None:
    path = tmp_path / "h.zarr"
    _zarr_python_hierarchy(path, zarr_format)
    if consolidator == "zarr-python":
        zarr.consolidate_metadata(str(path))
    else:
        gpuzarr.consolidate_metadata(str(path))
    group = gpuzarr.open_group(str(path), mode="r+")
    assert group.consolidated
    CHANGES[change](group)
    stored = _zarr_python_tree(path, use_consolidated=False)
    assert _zarr_python_tree(path, use_consolidated=True) == stored
    assert _gpuzarr_tree(group) == stored


def test_zarr_python_reads_data_of_a_resized_array_through_consolidated_metadata(
    tmp_path: Path, zarr_format: int
) -> None:
    path = tmp_path / "grow.zarr"
    _zarr_python_hierarchy(path, zarr_format)
    zarr.consolidate_metadata(str(path))
    a = gpuzarr.open_consolidated(str(path), mode="r+")["a"]
    a.resize(6, 4)
    a[3:] = A + 100
    new = gpuzarr.open_consolidated(str(path), mode="r+")["sub"].create_array(
        "c", shape=(4,), chunks=(2,), dtype="int64", fill_value=-1
    )
    new[1:3] = [5, 6]
    group = zarr.open_consolidated(str(path), mode="r")
    np.testing.assert_array_equal(group["a"][...], np.concatenate([A, A + 100]))
    np.testing.assert_array_equal(group["sub/c"][...], [-1, 5, 6, -1])


def test_zarr_python_keeps_what_gpuzarr_recorded(tmp_path: Path, zarr_format: int) -> None:
    # zarr-python re-consolidating after gpuzarr's changes writes what gpuzarr kept.
    path = tmp_path / "again.zarr"
    _gpuzarr_hierarchy(path, zarr_format)
    group = gpuzarr.consolidate_metadata(str(path))
    group["a"].resize(1, 4)
    group.create_group("later").create_array("z", shape=(2,), dtype="int8")
    kept = _zarr_python_tree(path, use_consolidated=True)
    zarr.consolidate_metadata(str(path))
    assert _zarr_python_tree(path, use_consolidated=True) == kept


def test_xarray_sees_gpuzarr_appends(tmp_path: Path, zarr_format: int) -> None:
    # Runs where xarray is installed (it is no test dependency): xr.open_zarr(consolidated=True)
    # trusts the consolidated metadata, so gpuzarr's resize and attributes must be in it.
    xr = pytest.importorskip("xarray")
    path = tmp_path / "ds.zarr"
    data = np.arange(8.0).reshape(2, 4)
    ds = xr.Dataset({"temp": (("time", "x"), data)}, coords={"time": [0, 1]}, attrs={"title": "t"})
    ds.to_zarr(str(path), zarr_format=zarr_format, consolidated=True, mode="w")
    group = gpuzarr.open_consolidated(str(path), mode="r+")
    temp, time = group["temp"], group["time"]
    temp.resize(3, 4)
    temp[2] = 100.0
    time.resize(3)
    time[2] = 2
    temp.attrs["units"] = "K"
    group.attrs["history"] = "appended"
    out = xr.open_zarr(str(path), consolidated=True)
    assert out.sizes["time"] == 3
    np.testing.assert_array_equal(out["temp"].values, np.vstack([data, np.full((1, 4), 100.0)]))
    np.testing.assert_array_equal(out["time"].values, [0, 1, 2])
    assert out["temp"].attrs["units"] == "K"
    assert out.attrs == {"title": "t", "history": "appended"}


def test_a_large_consolidated_zarr_json_is_written_compact_and_read_by_zarr_python(tmp_path: Path) -> None:
    """Indenting runs in Python's pure-Python encoder: 48 ms of every metadata write in a group
    of 1,000 arrays (an 870 KB zarr.json). Above 64 KiB the document is written compact."""
    from gpuzarr.consolidated import INDENTED_MAX_BYTES

    path = tmp_path / "g.zarr"
    group = gpuzarr.open_group(str(path), mode="w")
    group.create_array("a0", shape=(3,), dtype="i4")
    gpuzarr.consolidate_metadata(str(path))
    assert b'\n  "consolidated_metadata"' in (path / "zarr.json").read_bytes()  # small: indented
    group = gpuzarr.open_group(str(path), mode="r+")
    n = 1
    while b"\n" in (path / "zarr.json").read_bytes():  # indented while its compact form is small
        group.create_array(f"a{n}", shape=(3,), dtype="i4", attributes={"note": "x" * 200})
        n += 1
        assert n < 1000
    assert (path / "zarr.json").stat().st_size > INDENTED_MAX_BYTES
    group[f"a{n - 1}"][...] = [1, 2, 3]
    theirs = zarr.open_consolidated(str(path))
    assert sorted(theirs.array_keys()) == sorted(f"a{i}" for i in range(n))
    np.testing.assert_array_equal(theirs[f"a{n - 1}"][...], [1, 2, 3])
