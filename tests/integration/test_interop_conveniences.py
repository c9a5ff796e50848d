"""The zarr-python-style conveniences against zarr-python 3 and TensorStore, both directions.

Arrays made by ``gpuzarr.array``/``zeros``/``*_like`` with automatic chunks open in zarr-python
and TensorStore with the same chunks and values; arrays zarr-python writes feed gpuzarr's
``*_like`` and ``array``; ``info_complete()``, ``nchunks``, ``nchunks_initialized``,
``metadata.to_dict()``, ``tree()`` and ``members()`` agree with zarr-python's on the same store.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

RNG = np.random.default_rng(11)


def _tensorstore(path: Path, zarr_format: int = 3) -> Any:
    driver = "zarr3" if zarr_format == 3 else "zarr"
    return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path) + "/"}}, open=True).result()


def _info_lines(info: Any) -> dict[str, str]:
    return dict(tuple(part.strip() for part in line.split(":", 1)) for line in repr(info).splitlines())  # type: ignore[misc]


def _as_json(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(doc))
    if out.get("storage_transformers") == []:
        del out["storage_transformers"]  # zarr-python lists the empty default; gpuzarr omits it
    return out


# -- gpuzarr writes, zarr-python and TensorStore read --------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "kwargs"),
    [
        ((700, 900), "float32", {}),
        ((70_000,), "int16", {}),
        ((3, 200, 300), "uint8", {"shards": (3, 200, 300)}),
        ((500, 300), "float64", {"zarr_format": 2}),
    ],
    ids=["2d", "1d", "sharded", "v2"],
)
def test_gpuzarr_array_with_automatic_chunks_reads_back(
    tmp_path: Path, shape: tuple[int, ...], dtype: str, kwargs: dict[str, Any]
) -> None:
    data = RNG.integers(0, 100, size=shape).astype(dtype)
    path = tmp_path / "a.zarr"
    a = gpuzarr.array(data, store=path, **kwargs)
    theirs = zarr.open_array(str(path), mode="r")
    expected_chunks = zarr.create_array({}, shape=shape, dtype=dtype, **kwargs).chunks
    assert a.chunks == theirs.chunks == expected_chunks
    assert theirs.shards == a.shards
    np.testing.assert_array_equal(theirs[...], data)
    np.testing.assert_array_equal(np.asarray(_tensorstore(path, kwargs.get("zarr_format", 3)).read().result()), data)


def test_gpuzarr_filled_arrays_read_back(tmp_path: Path) -> None:
    ones = gpuzarr.ones((300, 40), dtype="int32", store=tmp_path / "ones.zarr")
    ones[5, 5] = 9
    gpuzarr.full((10,), 2.5, dtype="float32", store=tmp_path / "full.zarr", zarr_format=2)
    expected = np.ones((300, 40), "int32")
    expected[5, 5] = 9
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "ones.zarr"))[...], expected)
    np.testing.assert_array_equal(np.asarray(_tensorstore(tmp_path / "ones.zarr").read().result()), expected)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "full.zarr"))[...], np.full(10, 2.5, "float32"))
    np.testing.assert_array_equal(np.asarray(_tensorstore(tmp_path / "full.zarr", 2).read().result()), np.full(10, 2.5))


# -- zarr-python writes, gpuzarr reads and copies -------------------------------------------------


def test_like_and_array_from_zarr_python_arrays(tmp_path: Path) -> None:
    data = RNG.standard_normal((64, 48)).astype("float32")
    src = zarr.create_array(
        str(tmp_path / "src.zarr"), shape=data.shape, dtype=data.dtype, chunks=(8, 8), shards=(32, 48), fill_value=-1
    )
    src[...] = data
    opened = gpuzarr.open_array(str(tmp_path / "src.zarr"))
    np.testing.assert_array_equal(opened[...], data)

    like = gpuzarr.zeros_like(src, store=tmp_path / "like.zarr")
    assert (like.shape, like.dtype, like.fill_value) == ((64, 48), np.float32, 0)
    assert (like.chunks, like.shards) == ((8, 8), (32, 48))
    theirs = zarr.open_array(str(tmp_path / "like.zarr"))
    assert (theirs.chunks, theirs.shards) == ((8, 8), (32, 48))
    np.testing.assert_array_equal(theirs[...], np.zeros((64, 48)))
    assert gpuzarr.empty_like(src).fill_value == -1  # the fill value of a Zarr array carries over

    copy = gpuzarr.array(src, store=tmp_path / "copy.zarr")
    assert (copy.chunks, copy.shards, copy.fill_value) == ((8, 8), (32, 48), -1)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "copy.zarr"))[...], data)

    v2 = zarr.create_array(
        str(tmp_path / "v2.zarr"), shape=(30,), dtype="<u2", chunks=(7,), zarr_format=2, compressors=None
    )
    v2[...] = np.arange(30)
    like2 = gpuzarr.ones_like(v2, store=tmp_path / "like2.zarr")
    assert (like2.zarr_format, like2.chunks, like2.metadata.to_dict()["compressor"]) == (2, (7,), None)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "like2.zarr"))[...], np.ones(30))


def test_zarr_python_array_with_default_chunks_reads_in_gpuzarr(tmp_path: Path) -> None:
    data = RNG.integers(0, 2**16, size=(1500, 1100)).astype("uint16")
    zarr.array(data, store=str(tmp_path / "z.zarr"))
    ours = gpuzarr.open_array(str(tmp_path / "z.zarr"))
    assert ours.chunks == gpuzarr.array(data).chunks  # both picked the same chunks
    np.testing.assert_array_equal(ours[...], data)


# -- descriptions agree on the same store ----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shape": (100, 60), "dtype": "int32", "chunks": (10, 20)},
        {"shape": (100, 60), "dtype": "float32", "chunks": (10, 20), "shards": (50, 60)},
        {"shape": (100, 60), "dtype": "uint8", "chunks": (30, 30), "zarr_format": 2},
    ],
    ids=["plain", "sharded", "v2"],
)
def test_info_complete_and_chunk_counts_match_zarr_python(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    path = str(tmp_path / "a.zarr")
    z = zarr.create_array(path, fill_value=0, **kwargs)
    z[3:25, 7:45] = 1
    ours = gpuzarr.open_array(path)
    assert (ours.nchunks, ours.nchunks_initialized) == (z.nchunks, z.nchunks_initialized)
    assert ours.nbytes_stored() == z.nbytes_stored()
    mine, theirs = _info_lines(ours.info_complete()), _info_lines(z.info_complete())
    for label in ("Type", "Zarr format", "Shape", "Shard shape", "Chunk shape", "Order", "Read-only",
                  "Store type", "No. bytes", "No. bytes stored", "Storage ratio"):
        assert mine.get(label) == theirs.get(label), label
    initialized = "Shards Initialized" if "shards" in kwargs else "Chunks Initialized"
    assert mine[initialized].split(" of ")[0] == theirs[initialized]
    # Same labels in the same order; gpuzarr adds the chunk count of sharded arrays.
    extra = ["Chunks Initialized"] if "shards" in kwargs else []
    assert list(mine) == [*theirs, *extra]
    assert ours.metadata.to_dict() == _as_json(z.metadata.to_dict())


def test_metadata_to_dict_matches_zarr_python_both_ways(tmp_path: Path) -> None:
    ours = gpuzarr.create(
        tmp_path / "g.zarr", shape=(9, 4), dtype="int16", chunks=(3, 4), fill_value=5,
        attributes={"a": [1, "x"]}, dimension_names=["y", "x"],
    )
    assert _as_json(zarr.open_array(str(tmp_path / "g.zarr")).metadata.to_dict()) == ours.metadata.to_dict()
    v2 = gpuzarr.create(tmp_path / "v2.zarr", shape=(9,), dtype=">f8", chunks=(4,), zarr_format=2, fill_value=1.5)
    assert _as_json(zarr.open_array(str(tmp_path / "v2.zarr")).metadata.to_dict()) == v2.metadata.to_dict()


def _populate(make_group: Any, make_array: Any) -> None:
    make_array("b", (2, 2), "float64")
    make_group("x/y/z")
    make_array("x/arr", (3,), "int16")
    make_array("x/y/deep", (4, 5, 6), "uint8")
    make_group("a")


@pytest.mark.parametrize("writer", ["zarr-python", "gpuzarr"])
def test_tree_and_members_match_zarr_python(tmp_path: Path, writer: str) -> None:
    path = str(tmp_path / "h.zarr")
    if writer == "zarr-python":
        zg = zarr.open_group(path, mode="w")
        _populate(zg.create_group, lambda n, s, d: zg.create_array(n, shape=s, dtype=d))
    else:
        gg = gpuzarr.group(path)
        _populate(gg.create_group, lambda n, s, d: gg.create_array(n, shape=s, dtype=d))
    theirs, ours = zarr.open_group(path, mode="r"), gpuzarr.open_group(path, mode="r")
    assert ours.tree(plain=True).text == repr(theirs.tree(plain=True))
    assert ours["x"].tree(plain=True).text == repr(theirs["x"].tree(plain=True))
    assert ours.tree(level=0, plain=True).text == repr(theirs.tree(level=0, plain=True))
    for depth in (0, 1, None):
        mine = {name: type(node).__name__ for name, node in ours.members(max_depth=depth)}
        expected = {name: type(node).__name__ for name, node in theirs.members(max_depth=depth)}
        assert mine == expected, depth
    assert ours["x/y"].name == theirs["x/y"].name == "/x/y"
