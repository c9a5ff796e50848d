"""Specs as TensorStore writes and takes them, run beside TensorStore: its own ``spec()`` of an
array reopens in gpuzarr, codec constraints compare after defaults, an open-or-create spec opens
again, extension data types, fixed codecs with chunk layouts, and errors that name the spec's
own members."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError, UnknownCodecError

if TYPE_CHECKING:
    from pathlib import Path

ts = pytest.importorskip("tensorstore")


def kv(path: Path) -> dict[str, str]:
    return {"driver": "file", "path": str(path) + "/"}


def test_tensorstore_spec_of_a_sharded_array_reopens(tmp_path: Path) -> None:
    """TensorStore's zarr.json leaves out ``index_location``; its spec() and schema state "end"."""
    t = ts.open(
        {"driver": "zarr3", "kvstore": kv(tmp_path), "create": True,
         "schema": {"dtype": "uint16", "domain": {"shape": [64, 64]},
                    "chunk_layout": {"read_chunk": {"shape": [8, 8]}, "write_chunk": {"shape": [32, 32]}}}}
    ).result()
    data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    t.write(data).result()
    assert "index_location" not in json.dumps(json.loads((tmp_path / "zarr.json").read_text()))
    def sharded(location: str) -> dict[str, Any]:
        codec = {"name": "sharding_indexed", "configuration": {"index_location": location}}
        return {"driver": "zarr3", "kvstore": kv(tmp_path), "metadata": {"codecs": [codec]}}

    for spec in (
        t.spec().to_json(),
        {"driver": "zarr3", "kvstore": kv(tmp_path), "schema": t.schema.to_json()},
        sharded("end"),
    ):
        np.testing.assert_array_equal(gpuzarr.open(spec, device="cpu")[...], data)
    with pytest.raises(MetadataError, match=r"metadata\.codecs"):
        gpuzarr.open(sharded("start"), device="cpu")


LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}


@pytest.mark.parametrize(
    ("dtype", "stored", "constraint"),
    [
        ("uint16", [LITTLE, {"name": "zstd", "configuration": {"level": 3}}],
         [{"name": "zstd", "configuration": {"checksum": False}}]),
        ("uint8", [{"name": "bytes"}], [LITTLE]),
        ("uint16", [{"name": "transpose", "configuration": {"order": [1, 0]}}, LITTLE],
         [{"name": "transpose", "configuration": {"order": "F"}}, {"name": "bytes"}]),
    ],
    ids=["zstd-checksum-default", "endian-of-one-byte-type", "transpose-F"],
)
def test_codec_constraints_compare_after_defaults(
    tmp_path: Path, dtype: str, stored: list[Any], constraint: list[Any]
) -> None:
    doc = {"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": dtype,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": stored}  # fmt: skip
    (tmp_path / "zarr.json").write_text(json.dumps(doc))
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path), "metadata": {"codecs": constraint}}
    ts.open(spec).result()  # TensorStore takes it
    assert gpuzarr.open(spec, device="cpu").shape == (4, 6)


def test_tensorstore_spec_of_an_array_with_dimension_names_reopens(tmp_path: Path) -> None:
    import zarr

    zarr.create_array(str(tmp_path), shape=(4, 5), dtype="int16", dimension_names=["y", "x"])
    spec = ts.open({"driver": "zarr3", "kvstore": kv(tmp_path)}).result().spec(minimal_spec=True).to_json()
    assert spec["transform"]["input_labels"] == ["y", "x"]
    assert gpuzarr.open(spec, device="cpu").dimension_names == ("y", "x")
    # A view under other names, which TensorStore makes, is refused rather than ignored.
    spec["transform"]["input_labels"] = ["a", "x"]
    with pytest.raises(MetadataError, match=r"transform\.input_labels.*relabel"):
        gpuzarr.open(spec, device="cpu")


@pytest.mark.parametrize(
    "codecs",
    [
        [{"name": "bytes"}],
        [{"name": "transpose", "configuration": {"order": [0, 1]}}, {"name": "bytes"}],
        [{"name": "zstd"}],
        [{"name": "sharding_indexed", "configuration": {"chunk_shape": [10, 10], "codecs": [{"name": "bytes"}]}}],
    ],
    ids=["bytes", "transpose-identity", "zstd", "sharded-bytes"],
)
def test_fixed_codecs_against_a_hard_inner_order_are_refused_as_tensorstore_refuses(
    tmp_path: Path, codecs: list[Any]
) -> None:
    """A transpose was inserted into the fixed chain (or the order ignored): the array was
    made, and the same spec then failed to open it."""
    def spec(path: Path) -> dict[str, Any]:
        return {"driver": "zarr3", "kvstore": kv(path), "open": True, "create": True,
                "metadata": {"shape": [100, 100], "data_type": "uint16", "codecs": codecs},
                "schema": {"chunk_layout": {"inner_order": [1, 0]}}}  # fmt: skip

    with pytest.raises(ValueError):
        ts.open(spec(tmp_path / "t")).result()
    with pytest.raises(MetadataError, match=r"schema\.chunk_layout\.inner_order: \[1, 0\] contradicts"):
        gpuzarr.open(spec(tmp_path / "g"), device="cpu")
    assert not (tmp_path / "g" / "zarr.json").exists()


@pytest.mark.parametrize(
    ("codecs", "layout"),
    [([{"name": "bytes"}], {"inner_order_soft_constraint": [1, 0]}),
     ([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}], {"inner_order": [1, 0]}),
     ([{"name": "sharding_indexed", "configuration": {"chunk_shape": [10, 10]}}], {"inner_order": [1, 0]})],
    ids=["soft-order", "fixed-transpose", "sharding-without-inner-codecs"],
)  # fmt: skip
def test_open_or_create_with_an_inner_order_opens_again(tmp_path: Path, codecs: list[Any], layout: Any) -> None:
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path / "g"), "open": True, "create": True,
            "metadata": {"shape": [100, 100], "data_type": "uint16", "codecs": codecs},
            "schema": {"chunk_layout": layout}}  # fmt: skip
    gpuzarr.open(spec, device="cpu")
    gpuzarr.open(spec, device="cpu")  # the same spec opens what it made
    theirs = {**spec, "kvstore": kv(tmp_path / "t")}
    ts.open(theirs).result()
    ours_codecs = json.loads((tmp_path / "g" / "zarr.json").read_text())["codecs"]
    their_codecs = json.loads((tmp_path / "t" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in ours_codecs] == [c["name"] for c in their_codecs]


@pytest.mark.parametrize("driver", ["zarr3", "zarr"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4"])
def test_extension_data_types_as_dtype_constraints(tmp_path: Path, driver: str, dtype: str) -> None:
    import ml_dtypes

    spec = {"driver": driver, "kvstore": kv(tmp_path / "g"), "create": True, "dtype": dtype,
            "schema": {"domain": {"shape": [6]}}}  # fmt: skip
    ours = gpuzarr.open(spec, device="cpu")
    data = np.arange(6).astype(getattr(ml_dtypes, dtype))
    ours[...] = data
    opened = ts.open({"driver": driver, "kvstore": kv(tmp_path / "g"), "dtype": dtype}).result()
    np.testing.assert_array_equal(opened.read().result(), data)
    again = gpuzarr.open({"driver": driver, "kvstore": kv(tmp_path / "g"), "schema": {"dtype": dtype}}, device="cpu")
    np.testing.assert_array_equal(again[...], data)
    assert gpuzarr.open({"driver": driver, "kvstore": kv(tmp_path / "g")}, dtype=getattr(ts, dtype)).dtype == data.dtype
    with pytest.raises(MetadataError, match=r"dtype: expected \"float32\""):
        gpuzarr.open({"driver": driver, "kvstore": kv(tmp_path / "g"), "dtype": "float32"}, device="cpu")


@pytest.mark.parametrize(
    ("shape", "layout", "chunk"),
    [
        ([100, 100], {"read_chunk": {"shape": [-1, 10]}}, (100, 10)),
        ([16], {"read_chunk": {"shape_soft_constraint": [8]}}, (8,)),
        ([1, 1], {"write_chunk": {"shape": [2, 8]}}, (2, 8)),
    ],
)
def test_fixed_codecs_take_read_and_write_constraints_as_one_chunk(
    tmp_path: Path, shape: list[int], layout: Any, chunk: tuple[int, ...]
) -> None:
    spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True,
            "metadata": {"shape": shape, "data_type": "uint16", "codecs": [{"name": "bytes"}, {"name": "zstd"}]},
            "schema": {"chunk_layout": layout}}  # fmt: skip
    theirs = ts.open(spec).result().spec().to_json()["metadata"]["chunk_grid"]["configuration"]["chunk_shape"]
    assert tuple(theirs) == chunk
    assert gpuzarr.open(spec, device="cpu").chunks == chunk


def test_blosc_after_another_compressor_gets_tensorstore_defaults() -> None:
    spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True,
            "metadata": {"shape": [16], "data_type": "float32",
                         "codecs": [{"name": "bytes"}, {"name": "zstd"}, {"name": "blosc"}]}}  # fmt: skip
    theirs = ts.open(spec).result().spec().to_json()["metadata"]["codecs"][2]
    ours = gpuzarr.open(spec, device="cpu").metadata.to_json()["codecs"][2]
    assert ours == theirs
    big = {"name": "bytes", "configuration": {"endian": "big"}}
    one_byte = {"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True,
                "metadata": {"shape": [4], "data_type": "uint8", "codecs": [big]}}  # fmt: skip
    assert "endian" not in json.dumps(gpuzarr.open(one_byte, device="cpu").metadata.to_json()["codecs"])


@pytest.mark.parametrize(
    ("codecs", "error", "message"),
    [
        ([{"name": "lz5"}], UnknownCodecError, r"^metadata\.codecs\[0\]: unknown codec 'lz5'"),
        (
            [{"name": "zstd", "configuration": {"level": "x"}}],
            MetadataError,
            r"^metadata\.codecs\[0\] \(zstd\): configuration\.level",
        ),
    ],
)
def test_a_bad_codec_is_named_as_the_spec_names_it(codecs: list[Any], error: type[Exception], message: str) -> None:
    spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True,
            "metadata": {"shape": [5], "data_type": "int8", "codecs": codecs}}  # fmt: skip
    with pytest.raises(error, match=message):
        gpuzarr.open(spec, device="cpu")


def test_schema_objects_as_keyword_merge_into_the_spec(tmp_path: Path) -> None:
    """``tensorstore.open(spec, schema=ts.Schema(...))`` form (it was refused: "expected an object")."""
    schema = ts.Schema(dtype=ts.uint16, shape=[10, 20], chunk_layout=ts.ChunkLayout(chunk_shape=[5, 5]))
    spec = {"driver": "zarr3", "kvstore": kv(tmp_path)}
    array = gpuzarr.open(spec, device="cpu", create=True, schema=schema)
    assert (array.shape, array.dtype, array.chunks) == ((10, 20), np.dtype("u2"), (5, 5))
    with pytest.raises(MetadataError, match=r"schema: dtype 'uint16' contradicts schema\.dtype 'int8'"):
        gpuzarr.open({**spec, "schema": {"dtype": "int8"}}, device="cpu", schema=schema)


def test_a_v2_float4_fill_value_is_base64_as_tensorstore_reads_and_writes_it(tmp_path: Path) -> None:
    """TensorStore's zarr2 driver takes float4_e2m1fn fill values as base64 bytes only: gpuzarr
    wrote a number TensorStore refused, and refused TensorStore's base64."""
    ours = tmp_path / "ours.zarr"
    gpuzarr.create_array(str(ours), shape=(4,), chunks=(2,), dtype="float4_e2m1fn", fill_value=0.5, zarr_format=2)
    assert json.loads((ours / ".zarray").read_text())["fill_value"] == "AQ=="
    np.testing.assert_array_equal(ts.open({"driver": "zarr", "kvstore": kv(ours)}).result().read().result(), [0.5] * 4)
    theirs = tmp_path / "theirs.zarr"
    metadata = {"shape": [4], "chunks": [2], "dtype": "float4_e2m1fn", "fill_value": "Ag=="}
    ts.open({"driver": "zarr", "kvstore": kv(theirs), "create": True, "metadata": metadata}).result()
    opened = gpuzarr.open_array(str(theirs), mode="r")
    assert float(opened.fill_value) == 1.0
    np.testing.assert_array_equal(opened[...].astype("f4"), [1.0] * 4)


@pytest.mark.parametrize(
    "compressor",
    [{"id": "blosc"}, {"id": "blosc", "cname": "zstd"}, {"id": "zstd"}, {"id": "zlib"}, {"id": "gzip"}, {"id": "bz2"}],
    ids=lambda c: "-".join(str(v) for v in c.values()),
)
def test_a_zarr2_compressor_given_in_part_is_written_as_tensorstore_writes_it(
    tmp_path: Path, compressor: dict[str, Any]
) -> None:
    def spec(path: Path) -> dict[str, Any]:
        return {"driver": "zarr", "kvstore": {"driver": "file", "path": str(path)}, "create": True,
                "metadata": {"shape": [4], "dtype": "<i4", "compressor": compressor}}  # fmt: skip

    ts.open(spec(tmp_path / "theirs")).result()
    gpuzarr.open(spec(tmp_path / "ours"), device="cpu")[...] = np.arange(4)
    written = json.loads((tmp_path / "ours" / ".zarray").read_text())["compressor"]
    assert written == json.loads((tmp_path / "theirs" / ".zarray").read_text())["compressor"]
    ours = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(tmp_path / "ours")}}).result()
    np.testing.assert_array_equal(ours.read().result(), np.arange(4))
