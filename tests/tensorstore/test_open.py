"""TensorStore-style specs end to end, with TensorStore itself as the oracle.

Each test gives the same spec dict to gpuzarr and to ``tensorstore.open``: what one creates the
other opens and reads, and both write the same metadata.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.core.field_array import FieldArray
from gpuzarr.errors import ArrayNotFoundError, ChunkNotFoundError, ContainsNodeError, MetadataError
from gpuzarr.tensorstore.open import open_spec

if TYPE_CHECKING:
    from pathlib import Path

ts = pytest.importorskip("tensorstore")


def kv(path: Path) -> dict[str, str]:
    return {"driver": "file", "path": str(path) + "/"}


def ts_open(spec: dict[str, Any], **kwargs: Any) -> Any:
    return ts.open(spec, **kwargs).result()


def stored_json(path: Path, key: str = "zarr.json") -> dict[str, Any]:
    return json.loads((path / key).read_text())


def normalized_codecs(chain: list[Any]) -> list[Any]:
    """Codec JSON without empty configurations and with TensorStore's sharding defaults."""
    out = []
    for codec in chain:
        codec = {"name": codec} if isinstance(codec, str) else dict(codec)
        config = dict(codec.get("configuration") or {})
        if codec["name"] == "sharding_indexed":
            config.setdefault("index_location", "end")
            config["codecs"] = normalized_codecs(config["codecs"])
            config["index_codecs"] = normalized_codecs(config["index_codecs"])
        codec.pop("configuration", None)
        if config:
            codec["configuration"] = config
        out.append(codec)
    return out


#: metadata of shards whose inner chunks' codecs it leaves to the create
SHARDS_WITHOUT_INNER_CODECS = {
    "shape": [16, 16],
    "data_type": "int16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 16]}},
    "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4]}}],
}

CREATE_SPECS_V3 = {
    "default": {"schema": {"domain": {"shape": [100, 200]}, "dtype": "uint16"}},
    "sharded_inner_order": {
        "schema": {
            "domain": {"shape": [10, 20]},
            "dtype": "int32",
            "chunk_layout": {
                "read_chunk": {"shape": [4, 4]},
                "write_chunk": {"shape": [8, 8]},
                "inner_order": [1, 0],
            },
        }
    },
    "aspect_ratio": {
        "schema": {
            "domain": {"shape": [300, 400, 50]},
            "dtype": "uint8",
            "chunk_layout": {"chunk": {"aspect_ratio": [1, 2, 2], "elements": 20000}},
        }
    },
    "labels_units_fill": {
        "schema": {
            "domain": {"shape": [10, 20], "labels": ["y", "x"]},
            "dtype": "float32",
            "fill_value": 3,
            "dimension_units": ["4nm", "5 um"],
        }
    },
    "metadata_codecs": {
        "metadata": {
            "shape": [30, 40],
            "data_type": "float64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [7, 9]}},
            "chunk_key_encoding": {"name": "v2"},
            "codecs": [{"name": "zstd", "configuration": {"level": 3}}],
            "fill_value": "NaN",
            "dimension_names": ["a", "b"],
        }
    },
    "metadata_sharding": {"metadata": SHARDS_WITHOUT_INNER_CODECS},
    # The schema's codecs become the inner chunks' of shards whose metadata leaves them out
    # (they contradicted them); a schema chain that only names part of the metadata's is met.
    "metadata_sharding_schema_codecs": {
        "metadata": SHARDS_WITHOUT_INNER_CODECS,
        "schema": {"codec": {"driver": "zarr3", "codecs": [{"name": "zstd", "configuration": {"level": 5}}]}},
    },
    "metadata_codecs_partial_schema_codecs": {
        "metadata": {
            "shape": [16, 16],
            "data_type": "uint16",
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}],
        },
        "schema": {"codec": {"driver": "zarr3", "codecs": [{"name": "gzip"}]}},
    },
}


@pytest.mark.parametrize("case", sorted(CREATE_SPECS_V3))
def test_zarr3_create_writes_what_tensorstore_writes(tmp_path: Path, case: str) -> None:
    members = CREATE_SPECS_V3[case]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    a = open_spec({"driver": "zarr3", "kvstore": kv(ours), "create": True, **members})
    ts_open({"driver": "zarr3", "kvstore": kv(theirs), "create": True, **members})
    mine, ref = stored_json(ours), stored_json(theirs)
    for key in ("shape", "data_type", "chunk_grid", "fill_value", "dimension_names"):
        assert mine.get(key) == ref.get(key), key
    assert mine["chunk_key_encoding"]["name"] == ref["chunk_key_encoding"]["name"]
    assert normalized_codecs(mine["codecs"]) == normalized_codecs(ref["codecs"])
    assert mine.get("attributes", {}) == ref.get("attributes", {})

    # Data written by gpuzarr reads back in TensorStore through the same spec, and vice versa.
    data = (np.arange(a.size) % 100).reshape(a.shape).astype(a.dtype)
    a[...] = data
    t = ts_open({"driver": "zarr3", "kvstore": kv(ours), **members})
    np.testing.assert_array_equal(t.read().result(), data)
    t_theirs = ts_open({"driver": "zarr3", "kvstore": kv(theirs), **members})
    t_theirs[...] = data
    b = gpuzarr.open({"driver": "zarr3", "kvstore": kv(theirs), **members})
    np.testing.assert_array_equal(b[...], data)


def test_zarr2_create_writes_what_tensorstore_writes(tmp_path: Path) -> None:
    for i, members in enumerate(
        [
            {"schema": {"domain": {"shape": [1000, 2000]}, "dtype": "float32"}},
            {
                "metadata": {
                    "shape": [30, 40],
                    "chunks": [7, 9],
                    "dtype": ">i2",
                    "order": "F",
                    "compressor": {"id": "zstd", "level": 2},
                    "fill_value": 5,
                    "dimension_separator": "/",
                }
            },
            {
                "schema": {
                    "domain": {"shape": [50, 60]},
                    "dtype": "uint8",
                    "chunk_layout": {"inner_order": [1, 0]},
                },
                "metadata": {"compressor": None},
            },
        ]
    ):
        ours, theirs = tmp_path / f"ours{i}", tmp_path / f"theirs{i}"
        a = gpuzarr.open({"driver": "zarr2", "kvstore": kv(ours), "create": True, **members})
        ts_open({"driver": "zarr2", "kvstore": kv(theirs), "create": True, **members})
        assert stored_json(ours, ".zarray") == stored_json(theirs, ".zarray")
        data = (np.arange(a.size) % 100).reshape(a.shape).astype(a.dtype)
        a[...] = data
        np.testing.assert_array_equal(ts_open({"driver": "zarr", "kvstore": kv(ours)}).read().result(), data)


def test_tensorstore_creates_gpuzarr_opens_the_same_spec(tmp_path: Path) -> None:
    spec = {
        "driver": "zarr3",
        "kvstore": kv(tmp_path / "a"),
        "metadata": {
            "shape": [20, 30],
            "data_type": "uint32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10, 10]}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [5, 5],
                        "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip"}],
                    },
                }
            ],
        },
    }
    t = ts_open(spec, create=True)
    data = np.arange(600, dtype=np.uint32).reshape(20, 30)
    t[...] = data
    a = gpuzarr.open(spec)
    assert (a.chunks, a.shards) == ((5, 5), (10, 10))
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[3:17, 4:29], data[3:17, 4:29])


def test_spec_round_trips_through_both_libraries(tmp_path: Path) -> None:
    v3 = gpuzarr.create(
        str(tmp_path / "v3"),
        shape=(12, 10),
        dtype="int16",
        chunks=(4, 5),
        shards=(8, 10),
        fill_value=-1,
        dimension_names=["y", "x"],
    )
    v2 = gpuzarr.create(
        str(tmp_path / "v2"),
        zarr_format=2,
        shape=(12, 10),
        dtype=">f8",
        chunks=(5, 5),
        order="F",
        fill_value=float("nan"),
        compressor={"id": "zlib", "level": 3},
    )
    for array in (v3, v2):
        data = np.arange(120).reshape(12, 10).astype(array.dtype)
        array[...] = data
        spec = array.spec()
        assert set(spec) == {"driver", "kvstore", "metadata"}
        assert spec["driver"] == ("zarr3" if array.zarr_format == 3 else "zarr2")
        json.dumps(spec)
        again = gpuzarr.open(spec)
        assert isinstance(again, gpuzarr.Array) and again.metadata.to_json() == array.metadata.to_json()
        np.testing.assert_array_equal(again[...], data)
        np.testing.assert_array_equal(ts_open(spec).read().result(), data)


def test_spec_of_an_array_in_a_subpath_and_named_memory_store(tmp_path: Path) -> None:
    group = gpuzarr.open_group(str(tmp_path / "root.zarr"), mode="w")
    arr = group.create_array("raw", shape=(4,), dtype="uint8", chunks=(2,))
    arr[...] = [1, 2, 3, 4]
    spec = arr.spec()
    assert spec["kvstore"]["path"].endswith("root.zarr/raw/")
    np.testing.assert_array_equal(ts_open(spec).read().result(), [1, 2, 3, 4])

    mem = gpuzarr.open(
        {
            "driver": "zarr3",
            "kvstore": "memory://ts-spec-test",
            "path": "a/b",
            "create": True,
            "delete_existing": True,
            "metadata": {"shape": [3], "data_type": "int8"},
        }
    )
    mem[...] = [7, 8, 9]
    spec = mem.spec()
    assert (spec["kvstore"], spec["path"]) == ("memory://ts-spec-test", "a/b")
    np.testing.assert_array_equal(gpuzarr.open(spec)[...], [7, 8, 9])


def test_store_object_as_kvstore() -> None:
    store = gpuzarr.MemoryStore()
    a = open_spec(
        {"driver": "zarr3", "kvstore": store, "path": "x", "create": True},
        shape=[5],
        dtype="uint16",
        fill_value=9,
    )
    np.testing.assert_array_equal(a[...], [9] * 5)
    assert "x/zarr.json" in set(store.list_prefix(""))
    assert open_spec({"driver": "zarr3", "kvstore": store, "path": "x"}).shape == (5,)


# -- open-mode rules ------------------------------------------------------------------------------


def test_open_create_delete_existing(tmp_path: Path) -> None:
    base = {"driver": "zarr3", "kvstore": kv(tmp_path / "a")}
    meta = {"metadata": {"shape": [4], "data_type": "uint8"}}
    with pytest.raises(ArrayNotFoundError):
        gpuzarr.open(base)
    a = gpuzarr.open({**base, **meta, "create": True})
    a[...] = 5
    with pytest.raises(ContainsNodeError):
        gpuzarr.open({**base, **meta, "create": True})
    assert gpuzarr.open({**base, **meta, "open": True, "create": True})[0] == 5
    b = gpuzarr.open(
        {**base, "create": True, "delete_existing": True, "metadata": {"shape": [6], "data_type": "int8"}}
    )
    assert b.shape == (6,) and b[0] == 0
    with pytest.raises(MetadataError, match=r"^delete_existing"):
        gpuzarr.open({**base, "delete_existing": True})
    with pytest.raises(MetadataError, match=r"^create: .*mode='r'"):
        gpuzarr.open({**base, "create": True}, mode="r")
    ro = gpuzarr.open(base, mode="r")
    assert ro.read_only
    assert gpuzarr.open(base, mode="w", metadata={"shape": [2], "data_type": "uint8"}).shape == (2,)
    with pytest.raises(MetadataError, match=r"^metadata.shape: required"):
        gpuzarr.open({**base, "create": True, "delete_existing": True})


def test_a_spec_creates_no_array_inside_an_array_and_no_parent_groups(tmp_path: Path) -> None:
    """The rules of every new node: no array among the ancestors within the store (a store
    object and a path: a file kvstore is rooted at the array itself); and, as TensorStore, no
    parent groups written for a nested path."""
    store = gpuzarr.LocalStore(tmp_path / "h.zarr")
    gpuzarr.create_group(store)
    gpuzarr.create(store, path="arr", shape=(4,), dtype="u1")
    meta = {"metadata": {"shape": [4], "data_type": "uint8"}, "create": True}
    with pytest.raises(ContainsNodeError, match="'arr' is an array: it cannot contain 'arr/inner'"):
        gpuzarr.open({"driver": "zarr3", "kvstore": store, **meta}, path="arr/inner")
    assert not (tmp_path / "h.zarr" / "arr" / "inner").exists()
    nested = gpuzarr.open({"driver": "zarr3", "kvstore": store, **meta}, path="g/sub/x")
    assert nested.shape == (4,)
    assert not (tmp_path / "h.zarr" / "g" / "zarr.json").exists()  # no parent group, as TensorStore writes none


def test_constraint_mismatch_on_open_names_the_field(tmp_path: Path) -> None:
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path / "a")}
    gpuzarr.open({**spec, "create": True, "metadata": {"shape": [10, 20], "data_type": "uint16"}})
    with pytest.raises(MetadataError, match=r"^metadata.shape: expected \[10, 30\], stored \[10, 20\]"):
        gpuzarr.open({**spec, "metadata": {"shape": [10, 30]}})
    with pytest.raises(MetadataError, match=r'^dtype: expected "float32", stored "uint16"'):
        gpuzarr.open({**spec, "dtype": "float32"})
    with pytest.raises(MetadataError, match=r"^rank"):
        gpuzarr.open({**spec, "rank": 3})
    with pytest.raises(MetadataError, match=r"^schema.chunk_layout.write_chunk.shape"):
        gpuzarr.open({**spec, "schema": {"chunk_layout": {"write_chunk": {"shape": [5, 5]}}}})
    assert gpuzarr.open(
        {**spec, "dtype": "uint16", "rank": 2, "schema": {"domain": {"shape": [10, 20]}}}
    ).shape == (10, 20)
    # TensorStore agrees on what matches and what does not.
    ts_open({**spec, "dtype": "uint16", "rank": 2, "schema": {"domain": {"shape": [10, 20]}}})
    with pytest.raises(ValueError, match=r"shape"):
        ts_open({**spec, "metadata": {"shape": [10, 30]}})
    with pytest.raises(MetadataError, match=r"^driver"):
        gpuzarr.open({"driver": "zarr2", "kvstore": kv(tmp_path / "a")})


def test_dimension_units_constraint_on_open(tmp_path: Path) -> None:
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path / "a")}
    ts_open(
        {**spec, "schema": {"domain": {"shape": [3, 4]}, "dtype": "uint8", "dimension_units": ["nm", "2 s"]}},
        create=True,
    )
    a = gpuzarr.open({**spec, "schema": {"dimension_units": ["1nm", "2s"]}})
    assert a.attrs["dimension_units"] == ["nm", "2 s"]
    with pytest.raises(MetadataError, match=r"^schema.dimension_units"):
        gpuzarr.open({**spec, "schema": {"dimension_units": ["um", None]}})
    with pytest.raises(MetadataError, match=r"^schema.dimension_units: the zarr2 driver"):
        gpuzarr.open(
            {
                "driver": "zarr2",
                "kvstore": kv(tmp_path / "b"),
                "create": True,
                "schema": {"domain": {"shape": [3]}, "dtype": "uint8", "dimension_units": ["nm"]},
            }
        )


def test_assume_metadata(tmp_path: Path) -> None:
    spec = {
        "driver": "zarr3",
        "kvstore": kv(tmp_path / "a"),
        "assume_metadata": True,
        "metadata": {
            "shape": [8],
            "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        },
    }
    a = gpuzarr.open(spec)
    a[...] = np.arange(8)
    assert not (tmp_path / "a" / "zarr.json").exists()
    np.testing.assert_array_equal(a[...], np.arange(8))
    np.testing.assert_array_equal(ts_open(spec).read().result(), np.arange(8))
    with pytest.raises(MetadataError, match=r"assume_metadata"):
        a.resize(10)
    cached = gpuzarr.open({**spec, "assume_metadata": False, "assume_cached_metadata": True})
    cached.resize(12)
    assert gpuzarr.open({"driver": "zarr3", "kvstore": kv(tmp_path / "a")}).shape == (12,)


# -- fill_missing_data_reads / store_data_equal_to_fill_value ------------------------------------


@pytest.mark.parametrize("driver", ["zarr3", "zarr2"])
def test_fill_missing_data_reads_false_raises_naming_the_key(tmp_path: Path, driver: str) -> None:
    meta = (
        {
            "shape": [4, 6],
            "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        }
        if driver == "zarr3"
        else {"shape": [4, 6], "chunks": [2, 3], "dtype": "<i4"}
    )
    spec = {
        "driver": driver,
        "kvstore": kv(tmp_path / "a"),
        "metadata": meta,
        "fill_missing_data_reads": False,
    }
    a = gpuzarr.open({**spec, "create": True})
    a[0:2, 0:3] = 1
    np.testing.assert_array_equal(a[0:2, 0:3], 1)
    key = "c/1/1" if driver == "zarr3" else "1.1"
    with pytest.raises(ChunkNotFoundError, match=key.replace(".", r"\.")) as info:
        a[3, 5]
    assert info.value.key == key and isinstance(info.value, FileNotFoundError)
    with pytest.raises(ValueError, match=r"missing"):
        ts_open(spec).read().result()
    a[2:4, 3:6] = 2  # a partial write of a missing chunk still starts from the fill value
    assert a.spec()["fill_missing_data_reads"] is False
    assert gpuzarr.open({**spec, "fill_missing_data_reads": True})[3, 0] == 0


def test_fill_missing_data_reads_in_shards(tmp_path: Path) -> None:
    spec = {
        "driver": "zarr3",
        "kvstore": kv(tmp_path / "a"),
        "fill_missing_data_reads": False,
        "schema": {
            "domain": {"shape": [8]},
            "dtype": "uint8",
            "chunk_layout": {"read_chunk": {"shape": [2]}, "write_chunk": {"shape": [4]}},
        },
    }
    a = gpuzarr.open({**spec, "create": True})
    a[0:2] = 3
    np.testing.assert_array_equal(a[0:2], [3, 3])
    with pytest.raises(ChunkNotFoundError, match=r"^c/0\b"):
        a[2]
    with pytest.raises(ChunkNotFoundError, match=r"c/1"):
        a[6]


@pytest.mark.parametrize("driver", ["zarr3", "zarr2"])
def test_store_data_equal_to_fill_value(tmp_path: Path, driver: str) -> None:
    meta = (
        {
            "shape": [4, 6],
            "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        }
        if driver == "zarr3"
        else {"shape": [4, 6], "chunks": [2, 3], "dtype": "<i4"}
    )
    listings = []
    for who in ("gpuzarr", "tensorstore"):
        path = tmp_path / who
        spec = {
            "driver": driver,
            "kvstore": kv(path),
            "metadata": meta,
            "create": True,
            "store_data_equal_to_fill_value": True,
        }
        array = gpuzarr.open(spec) if who == "gpuzarr" else ts_open(spec)
        array[0:2, 0:3] = 0
        listings.append(chunk_files(path))
    assert listings[0] == listings[1] and len(listings[0]) == 1
    plain = gpuzarr.open(
        {"driver": driver, "kvstore": kv(tmp_path / "plain"), "metadata": meta, "create": True}
    )
    plain[0:2, 0:3] = 0
    assert chunk_files(tmp_path / "plain") == []


def chunk_files(path: Path) -> list[str]:
    """Stored keys other than metadata documents."""
    return sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs")
    )


# -- fields of structured zarr2 arrays ------------------------------------------------------------


def test_structured_field_both_ways(tmp_path: Path) -> None:
    meta = {
        "shape": [4, 6],
        "chunks": [2, 3],
        "dtype": [["x", "<u2", [2, 3]], ["y", "<f4"]],
        "compressor": None,
    }
    base = {"driver": "zarr2", "kvstore": kv(tmp_path / "s")}
    tx = ts_open({**base, "metadata": meta, "field": "x"}, create=True)
    xdata = np.arange(4 * 6 * 6, dtype=np.uint16).reshape(4, 6, 2, 3)
    tx[...] = xdata
    fx = gpuzarr.open({**base, "field": "x"})
    assert isinstance(fx, FieldArray)
    # The field as open()'s keyword: a member of the spec, as TensorStore's open takes it.
    assert gpuzarr.open(base, field="x").shape == fx.shape
    assert (fx.shape, fx.dtype, fx.ndim, fx.chunks) == ((4, 6, 2, 3), np.dtype("uint16"), 4, (2, 3, 2, 3))
    np.testing.assert_array_equal(fx[...], xdata)
    np.testing.assert_array_equal(fx[1:3, ..., 1], xdata[1:3, ..., 1])
    np.testing.assert_array_equal(fx[2, 4, 1, 2], xdata[2, 4, 1, 2])
    fy = gpuzarr.open({**base, "field": "y", "dtype": "float32", "rank": 2})
    fy[1:3, 2:5] = 2.5
    ydata = np.zeros((4, 6), np.float32)
    ydata[1:3, 2:5] = 2.5
    np.testing.assert_array_equal(ts_open({**base, "field": "y"}).read().result(), ydata)
    np.testing.assert_array_equal(fx[...], xdata)  # the other field is untouched
    assert gpuzarr.open(fy.spec())[...].tolist() == ydata.tolist()
    with pytest.raises(MetadataError, match=r"^field: expected one of"):
        gpuzarr.open({**base, "field": "z"})
    with pytest.raises(MetadataError, match=r"^dtype"):
        gpuzarr.open({**base, "field": "y", "dtype": "uint8"})
    with pytest.raises(IndexError, match=r"subarray"):
        fx[0, 0, [0, 1]]


def test_gpuzarr_creates_a_structured_field(tmp_path: Path) -> None:
    spec = {
        "driver": "zarr2",
        "kvstore": kv(tmp_path / "s"),
        "field": "b",
        "metadata": {"shape": [5], "chunks": [2], "dtype": [["a", "<i4"], ["b", "<f8", [2]]]},
    }
    fb = gpuzarr.open({**spec, "create": True})
    fb[...] = np.arange(10.0).reshape(5, 2)
    np.testing.assert_array_equal(ts_open(spec).read().result(), np.arange(10.0).reshape(5, 2))


def test_spec_of_a_rectilinear_array_reopens_in_gpuzarr(tmp_path: Path) -> None:
    a = gpuzarr.create(str(tmp_path / "r"), shape=(5, 4), dtype="uint8", chunks=[[2, 3], [4]])
    a[...] = np.arange(20).reshape(5, 4)
    np.testing.assert_array_equal(gpuzarr.open(a.spec())[...], np.arange(20).reshape(5, 4))
    with pytest.raises(MetadataError, match=r"^metadata.chunk_grid.name: only 'regular'"):
        gpuzarr.open({**a.spec(), "kvstore": kv(tmp_path / "new"), "create": True})


def test_schema_codecs_are_sharded_where_the_chunk_layout_needs_it(tmp_path: Path) -> None:
    """As TensorStore: a schema's codecs with a read chunk smaller than the write chunk become
    the inner chain of sharding_indexed; fixed metadata.codecs are still refused."""
    layout = {"write_chunk": {"shape": [16, 16]}, "read_chunk": {"shape": [8, 8]}}
    schema = {"domain": {"shape": [30, 20]}, "dtype": "float32", "chunk_layout": layout,
              "codec": {"driver": "zarr3", "codecs": [{"name": "gzip"}]}}  # fmt: skip
    ours = gpuzarr.open({"driver": "zarr3", "kvstore": kv(tmp_path / "g"), "create": True, "schema": schema})
    theirs = ts_open({"driver": "zarr3", "kvstore": kv(tmp_path / "t"), "create": True, "schema": schema})
    assert normalized_codecs(stored_json(tmp_path / "g")["codecs"]) == normalized_codecs(
        stored_json(tmp_path / "t")["codecs"]
    )
    data = np.arange(600, dtype="f4").reshape(30, 20)
    ours[...] = data
    np.testing.assert_array_equal(ts_open({"driver": "zarr3", "kvstore": kv(tmp_path / "g")}).read().result(), data)
    del theirs
    unsharded = {k: v for k, v in schema.items() if k != "codec"}
    fixed = {"driver": "zarr3", "kvstore": kv(tmp_path / "f"), "create": True, "schema": unsharded,
             "metadata": {"codecs": [{"name": "bytes"}, {"name": "gzip"}]}}  # fmt: skip
    with pytest.raises(MetadataError, match=r"needs sharding_indexed in metadata\.codecs"):
        gpuzarr.open(fixed)


@pytest.mark.parametrize("driver", ["zarr3", "zarr2"])
def test_labels_and_units_constrain_only_what_is_stored(tmp_path: Path, driver: str) -> None:
    """An array written without dimension names or units opens under a schema that names them,
    as in TensorStore; names or units stored differently are refused."""
    metadata = {"shape": [4, 3], "data_type": "int16"} if driver == "zarr3" else {"shape": [4, 3], "dtype": "<i2"}
    ts_open({"driver": driver, "kvstore": kv(tmp_path), "path": "a", "create": True, "metadata": metadata})
    spec = {"driver": driver, "kvstore": kv(tmp_path), "path": "a"}
    labelled = {**spec, "schema": {"domain": {"labels": ["x", "y"]}}}
    assert gpuzarr.open(labelled).shape == (4, 3)
    ts_open(labelled)
    if driver == "zarr3":
        united = {**spec, "schema": {"dimension_units": ["nm", None]}}
        assert gpuzarr.open(united).shape == (4, 3)
        ts_open(united)
    named = gpuzarr.create_array(str(tmp_path / "n"), shape=(4, 3), dtype="i2", dimension_names=["z", "y"])
    del named
    with pytest.raises(MetadataError, match=r"schema\.domain\.labels"):
        gpuzarr.open({"driver": "zarr3", "kvstore": kv(tmp_path / "n"), "schema": {"domain": {"labels": ["x", "y"]}}})


@pytest.mark.parametrize("extra", [{"key_encoding": "/"}, {"metadata": {"dimension_separator": "/"}}])
def test_spec_separator_reads_a_v2_array_whose_zarray_names_none(tmp_path: Path, extra: dict[str, Any]) -> None:
    # Written before .zarray had dimension_separator (zarr-python's NestedDirectoryStore):
    # chunks at "0/0". The stored document decides where it names a separator, the spec where
    # it is silent, as in TensorStore.
    path = tmp_path / "nested"
    (path / "0").mkdir(parents=True)
    meta = {"zarr_format": 2, "shape": [4, 4], "chunks": [2, 2], "dtype": "<u1", "compressor": None,
            "fill_value": 3, "order": "C", "filters": None}
    (path / ".zarray").write_text(json.dumps(meta))
    (path / "0" / "0").write_bytes(bytes([0, 1, 2, 3]))
    spec = {"driver": "zarr", "kvstore": kv(path), **extra}
    want = ts_open(spec).read().result()
    assert want[0, 0] == 0 and want[1, 1] == 3 and want[3, 3] == 3
    np.testing.assert_array_equal(gpuzarr.open(spec, device="cpu")[...], want)
    # Without the spec's separator both read "." keys: the fill value everywhere.
    plain = {"driver": "zarr", "kvstore": kv(path)}
    np.testing.assert_array_equal(gpuzarr.open(plain, device="cpu")[...], ts_open(plain).read().result())
    # A separator the .zarray names is not overridden: the spec contradicting it is refused.
    meta["dimension_separator"] = "."
    (path / ".zarray").write_text(json.dumps(meta))
    with pytest.raises(MetadataError, match=r"^metadata\.dimension_separator"):
        gpuzarr.open(spec, device="cpu")


def test_zarr2_driver_reads_the_zarray_of_an_array_migrated_to_v3(tmp_path: Path) -> None:
    # zarr-python's migrate_v2_to_v3 writes zarr.json beside the .zarray it leaves in place.
    zarr = pytest.importorskip("zarr")
    migrate = pytest.importorskip("zarr.metadata.migrate_v3")
    path = tmp_path / "migrated.zarr"
    z = zarr.create_array(store=str(path), shape=(4,), chunks=(2,), dtype="int32", zarr_format=2)
    z[...] = [1, 2, 3, 4]
    migrate.migrate_v2_to_v3(input_store=zarr.storage.LocalStore(str(path)))
    assert (path / ".zarray").exists() and (path / "zarr.json").exists()
    for driver, fmt in (("zarr", 2), ("zarr2", 2), ("zarr3", 3)):
        spec = {"driver": driver, "kvstore": kv(path)}
        a = gpuzarr.open(spec, device="cpu")
        assert a.zarr_format == fmt
        np.testing.assert_array_equal(a[...], ts_open(spec).read().result())
    # The v3-only driver mismatch is still named, as before.
    only_v3 = tmp_path / "v3.zarr"
    gpuzarr.create(str(only_v3), shape=(2,), chunks=(2,), dtype="int32")
    with pytest.raises(MetadataError, match=r"^driver: 'zarr2' expects Zarr v2, found a Zarr v3"):
        gpuzarr.open({"driver": "zarr2", "kvstore": kv(only_v3)})


@pytest.mark.parametrize("driver", [None, "n5", "file"])
def test_a_spec_of_another_driver_is_refused_naming_driver(tmp_path: Path, driver: str | None) -> None:
    spec: dict[str, Any] = {"kvstore": kv(tmp_path / "a"), "dtype": "int16"}
    if driver is not None:
        spec["driver"] = driver
    with pytest.raises(MetadataError, match=r"^driver: expected 'zarr3', 'zarr2' or 'zarr', got"):
        gpuzarr.open(spec)


def test_tensorstore_spec_of_a_subarray_field_reopens_and_field_fill_values_check(tmp_path: Path) -> None:
    dtype = np.dtype([("a", "<i2"), ("b", "<f4", (2,))])
    fill = np.zeros((), dtype)
    fill["a"], fill["b"] = 3, [1.0, 2.0]
    meta = {"shape": [4], "chunks": [2], "dtype": [["a", "<i2"], ["b", "<f4", [2]]], "compressor": None,
            "fill_value": base64.b64encode(fill.tobytes()).decode()}
    base = {"driver": "zarr2", "kvstore": kv(tmp_path / "st")}
    t = ts_open({**base, "metadata": meta, "field": "b"}, create=True)
    t[0:2] = [[5.0, 6.0], [7.0, 8.0]]
    # TensorStore's spec() of the field bounds its subarray dimension explicitly.
    own = t.spec().to_json()
    assert any(not isinstance(b, list) for b in own["transform"]["input_exclusive_max"])
    np.testing.assert_array_equal(gpuzarr.open(own, device="cpu")[...], t.read().result())
    # A field's stored fill value is what schema.fill_value is checked against, element by
    # element for a subarray (a scalar broadcast as TensorStore broadcasts it).
    for field, good, bad in (("a", 3, 4), ("b", [1.0, 2.0], [1.0, 3.0]), ("b", [[1.0, 2.0]], 1.0)):
        spec = {**base, "field": field}
        want = ts_open({**spec, "schema": {"fill_value": good}}).read().result()
        np.testing.assert_array_equal(gpuzarr.open({**spec, "schema": {"fill_value": good}})[...], want)
        with pytest.raises(ValueError):
            ts_open({**spec, "schema": {"fill_value": bad}})
        with pytest.raises(MetadataError, match=r"^schema\.fill_value: expected .*, stored (3|\[1\.0, 2\.0\])"):
            gpuzarr.open({**spec, "schema": {"fill_value": bad}})
    # Bounds that are not the field's extents would make a smaller view: refused at open.
    smaller = {**base, "field": "b", "transform": {"input_inclusive_min": [0, 0], "input_exclusive_max": [[4], 1]}}
    with pytest.raises(MetadataError, match=r"^transform\.input_exclusive_max: \[None, 1\] would restrict"):
        gpuzarr.open(smaller)
    # Bounds of another rank are refused by the rank check first.
    with pytest.raises(MetadataError, match=r"^rank: expected 1, stored 2"):
        gpuzarr.open({**base, "field": "b", "transform": {"input_shape": [4]}})


def test_a_zarr2_fill_value_of_null_meets_no_fill_value_a_schema_asks_for(tmp_path: Path) -> None:
    """TensorStore refuses these pairs. gpuzarr took metadata.fill_value null for "not given":
    the schema's fill value was dropped and the array read as zeros."""
    base = {"driver": "zarr", "kvstore": kv(tmp_path / "a")}
    null = {"shape": [4], "dtype": "<u2", "fill_value": None}
    asks = r"schema\.fill_value: 3 asks for a fill value, but metadata\.fill_value is null"
    with pytest.raises(MetadataError, match=asks):
        gpuzarr.open({**base, "create": True, "metadata": null, "schema": {"fill_value": 3}})
    with pytest.raises(MetadataError, match=asks):
        gpuzarr.open({**base, "create": True, "metadata": null}, fill_value=3)
    assert not (tmp_path / "a").exists()
    gpuzarr.open({**base, "create": True, "metadata": null})
    with pytest.raises(MetadataError, match=r"schema.fill_value: expected 0, stored null"):
        gpuzarr.open({**base, "schema": {"fill_value": 0}})
    with pytest.raises(MetadataError, match=r"schema.fill_value: null is no fill value"):
        gpuzarr.open({**base, "schema": {"fill_value": None}})
    assert gpuzarr.open(base).fill_value is None  # opened without a schema, as before


def test_metadata_codecs_that_contradict_the_schemas_are_refused(tmp_path: Path) -> None:
    metadata = {"shape": [4], "data_type": "uint16", "codecs": [{"name": "bytes"}, {"name": "gzip"}]}
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path / "a"), "create": True, "metadata": metadata,
            "schema": {"codec": {"driver": "zarr3", "codecs": [{"name": "zstd"}]}}}  # fmt: skip
    with pytest.raises(MetadataError, match=r"^metadata.codecs: .*gzip.* contradicts schema.codec.codecs .*zstd"):
        open_spec(spec)
    with pytest.raises(ValueError, match="codec"):
        ts_open(spec)


def test_tensorstore_urls_ending_in_a_driver_step_open_as_tensorstore_opens_them(tmp_path: Path) -> None:
    """``tensorstore.open("file:///data/a.zarr|zarr3:")``: the kvstore's URL, a driver step, and
    the path after its colon. gpuzarr took the whole string for a directory."""
    import zipfile

    data = np.arange(12, dtype="i4").reshape(3, 4)
    gpuzarr.create(str(tmp_path / "a.zarr"), data=data, chunks=(2, 2))
    gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w").create_array("sub dir", data=data[0])
    gpuzarr.create(str(tmp_path / "v2.zarr"), data=data[1], chunks=(2,), zarr_format=2)
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as archive:
        for file in (tmp_path / "a.zarr").rglob("*"):
            archive.write(file, "inner/" + file.relative_to(tmp_path / "a.zarr").as_posix())
    base = f"file://{tmp_path}"
    cases = {
        f"{base}/a.zarr|zarr3:": data,
        f"{base}/a.zarr/|zarr3": data,
        f"{base}/|zarr3:a.zarr": data,
        f"{base}/g.zarr|zarr3:sub%20dir": data[0],
        f"{base}/v2.zarr|zarr2:": data[1],
        f"{base}/z.zip|zip:inner|zarr3:": data,
    }
    for url, expected in cases.items():
        np.testing.assert_array_equal(gpuzarr.open(url, mode="r")[...], expected, err_msg=url)
        np.testing.assert_array_equal(ts_open(url).read().result(), expected, err_msg=url)
    assert open_spec(f"{base}/a.zarr|zarr3:").shape == (3, 4)  # type: ignore[arg-type]
    with pytest.raises(MetadataError, match=r"is no TensorStore URL of an array"):
        open_spec("|zarr3:")  # type: ignore[arg-type]
    with pytest.raises(MetadataError, match=r"is no TensorStore URL of an array"):
        open_spec(f"{base}/a.zarr")  # type: ignore[arg-type]


def test_tensorstores_read_write_and_context_options(tmp_path: Path) -> None:
    """``tensorstore.open(spec, read=True)`` opens read only, ``write=True`` read/write;
    ``context=`` and ``recheck_cached_*`` are TensorStore's own and taken. All were TypeErrors."""
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path / "a")}
    open_spec(spec, create=True, dtype="uint8", shape=[4])[...] = [1, 2, 3, 4]
    reader = open_spec(spec, read=True)
    theirs = ts_open(spec, read=True)
    assert reader.read_only and theirs.mode == "r"
    with pytest.raises(gpuzarr.errors.ReadOnlyError):
        reader[0] = 9
    writer = open_spec(spec, read=True, write=True, context=ts.Context({"cache_pool": {"total_bytes_limit": 0}}))
    writer[0] = 9
    np.testing.assert_array_equal(open_spec(spec, write=True, recheck_cached_data=False)[...], [9, 2, 3, 4])
    with pytest.raises(MetadataError, match=r"^create: an array opened read only"):
        open_spec({**spec, "kvstore": kv(tmp_path / "b")}, create=True, read=True, dtype="uint8", shape=[4])
    with pytest.raises(ValueError, match="without `write`"):
        ts_open({**spec, "kvstore": kv(tmp_path / "b")}, create=True, read=True, dtype=ts.uint8, shape=[4])
    with pytest.raises(MetadataError, match=r"^write: True contradicts mode='r'"):
        open_spec(spec, mode="r", write=True)
    with pytest.raises(MetadataError, match=r"^read: expected true or false"):
        open_spec(spec, read="yes")


def test_only_urls_carry_driver_steps_and_other_entry_points_say_where_they_open(tmp_path: Path) -> None:
    """A local path holding a "|" is a path (a directory "a|zarr3" opened; the first version of
    the URL steps took it for one). URL pipelines name TensorStore arrays, which gpuzarr.open
    reads: given to create or open_group they made a directory "a.zarr|zarr3:" beside the array."""
    data = np.arange(4, dtype="i4")
    gpuzarr.create(str(tmp_path / "a|zarr3"), data=data, chunks=(2,))
    np.testing.assert_array_equal(gpuzarr.open(str(tmp_path / "a|zarr3"), mode="r")[...], data)
    url = f"file://{tmp_path}/b.zarr|zarr3:"
    gpuzarr.open(url, create=True, shape=[4], dtype="int32")[...] = data
    for call in (
        lambda: gpuzarr.create(url, data=data, overwrite=True),
        lambda: gpuzarr.open_group(url),
        lambda: gpuzarr.open(f"{url}|cast:int64", mode="w", shape=(2,), dtype="i4"),
    ):
        with pytest.raises(gpuzarr.errors.InvalidArgumentError, match=r"URL pipeline .* gpuzarr.open\(url\)"):
            call()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a|zarr3", "b.zarr"]
    for bad in (f"{url}x?t=1", f"{url}/x"):
        with pytest.raises(MetadataError, match=r"takes a relative path without a query"):
            gpuzarr.open(bad)
        with pytest.raises(ValueError):
            ts_open(bad)


def test_schema_options_merge_and_refuse_as_tensorstore(tmp_path: Path) -> None:
    """``schema=`` merges a chunk layout member by member; repeated labels are refused (they
    wrote a zarr.json TensorStore cannot reopen); a ``context=`` option does not hide the
    spec's own, which is still checked; ``read=True`` contradicts a writing mode."""
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path / "a"), "schema": {"chunk_layout": {"inner_order": [1, 0]}}}
    layout = ts.Schema(chunk_layout=ts.ChunkLayout(write_chunk_shape=[2, 2]))
    ours = open_spec(spec, create=True, dtype="uint8", shape=[4, 5], schema=layout)
    theirs = ts_open({**spec, "kvstore": kv(tmp_path / "b")}, create=True, dtype=ts.uint8, shape=[4, 5], schema=layout)
    assert ours.chunks == tuple(theirs.chunk_layout.write_chunk.shape) == (2, 2)
    labels = {"driver": "zarr3", "kvstore": kv(tmp_path / "c"), "schema": {"domain": {"labels": ["x", ""]}}}
    repeated = ts.IndexDomain(labels=["", "x"], shape=[4, 5])
    with pytest.raises(MetadataError, match=r"'x' names more than one dimension"):
        open_spec(labels, create=True, dtype="uint8", domain=repeated)
    with pytest.raises(ValueError, match="not unique"):
        ts_open(labels, create=True, dtype=ts.uint8, domain=repeated)
    bad_context = {**spec, "context": {"cache_pool": {"total_bytes_limit": -1}}}
    with pytest.raises(MetadataError, match=r"total_bytes_limit"):
        open_spec(bad_context, context={"cache_pool": {}})
    with pytest.raises(MetadataError, match=r"^read: True without write opens read only, which contradicts mode='r\+'"):
        open_spec(spec, mode="r+", read=True)
