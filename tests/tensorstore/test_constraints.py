"""Checks of a TensorStore spec's constraints against stored metadata (gpuzarr.tensorstore.constraints)."""

from __future__ import annotations

import pytest

from gpuzarr.errors import MetadataError
from gpuzarr.tensorstore.constraints import (
    StoredSchema,
    check_metadata_constraints,
    check_schema_constraints,
    codecs_match,
)
from gpuzarr.tensorstore.schema import Schema
from gpuzarr.tensorstore.spec import TensorStoreSpec

from .helpers import FILE, parse

STORED_V3 = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [10, 20],
    "data_type": "uint16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    ],
    "attributes": {"a": 1},
}


def test_matching_metadata_constraints_pass() -> None:
    spec = parse(
        metadata={
            "shape": [10, 20],
            "data_type": "uint16",
            "codecs": [{"name": "zstd"}],
            "chunk_key_encoding": {"name": "default"},
            "fill_value": 0.0,
            "attributes": {"a": 1},
            "chunk_grid": {"configuration": {"chunk_shape": [5, 5]}},
        }
    )
    check_metadata_constraints(spec, STORED_V3)


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ({"shape": [10, 30]}, "metadata.shape: expected [10, 30], stored [10, 20]"),
        ({"data_type": "int16"}, "metadata.data_type"),
        ({"codecs": ["gzip"]}, "metadata.codecs"),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}},
            "metadata.chunk_key_encoding",
        ),
        ({"fill_value": 1}, "metadata.fill_value"),
        ({"attributes": {"a": 2}}, "metadata.attributes"),
        ({"chunk_grid": {"configuration": {"chunk_shape": [5, 4]}}}, "metadata.chunk_grid"),
    ],
)
def test_mismatched_metadata_constraints_raise(constraint: dict[str, object], message: str) -> None:
    with pytest.raises(MetadataError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_metadata_constraints(parse(metadata=constraint), STORED_V3)


def test_v2_metadata_constraints_against_stored() -> None:
    stored = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "<f4",
        "fill_value": "NaN",
        "order": "C",
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
        "filters": None,
    }
    ok = TensorStoreSpec.from_json(
        {
            "driver": "zarr2",
            "kvstore": FILE,
            "metadata": {
                "dtype": "<f4",
                "fill_value": "NaN",
                "compressor": {"id": "blosc"},
                "dimension_separator": ".",
            },
        }
    )
    check_metadata_constraints(ok, stored)
    bad = TensorStoreSpec.from_json({"driver": "zarr2", "kvstore": FILE, "metadata": {"dtype": ">f4"}})
    with pytest.raises(MetadataError, match=r"^metadata.dtype"):
        check_metadata_constraints(bad, stored)
    bad = TensorStoreSpec.from_json({"driver": "zarr2", "kvstore": FILE, "metadata": {"compressor": None}})
    with pytest.raises(MetadataError, match=r"^metadata.compressor"):
        check_metadata_constraints(bad, stored)


def test_codecs_match_leaves_array_to_bytes_unconstrained_when_absent() -> None:
    stored = STORED_V3["codecs"]
    assert codecs_match([{"name": "zstd", "configuration": {}}], stored)  # type: ignore[arg-type]
    assert codecs_match(
        [{"name": "bytes", "configuration": {}}, {"name": "zstd", "configuration": {"level": 3}}], stored
    )  # type: ignore[arg-type]
    assert not codecs_match(
        [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd", "configuration": {}}], stored
    )  # type: ignore[arg-type]
    assert not codecs_match([], stored)  # type: ignore[arg-type]


def test_schema_constraints_against_stored() -> None:
    stored = StoredSchema(
        dtype="uint16",
        shape=(10, 20),
        labels=("y", "x"),
        fill_value=0,
        dimension_units=("4 nm", None),
        write_chunk=(8, 8),
        read_chunk=(4, 4),
        inner_order=(1, 0),
        codec={"driver": "zarr3", "codecs": []},
    )
    check_schema_constraints(
        Schema.from_json(
            {
                "dtype": "uint16",
                "domain": {"shape": [10, 20], "labels": ["y", "x"]},
                "fill_value": 0,
                "dimension_units": ["4nm", None],
                "chunk_layout": {
                    "write_chunk": {"shape": [8, 0]},
                    "read_chunk": {"shape": [4, 4]},
                    "inner_order": [1, 0],
                },
            },
            "zarr3",
        ),
        stored,
    )
    for schema, field in (
        ({"dtype": "int16"}, "dtype"),
        ({"rank": 3}, "rank"),
        ({"domain": {"shape": [10, 21]}}, "schema.domain.shape"),
        ({"domain": {"labels": ["x", "y"]}}, "schema.domain.labels"),
        ({"fill_value": 1}, "schema.fill_value"),
        ({"dimension_units": ["nm", None]}, "schema.dimension_units"),
        ({"chunk_layout": {"write_chunk": {"shape": [4, 4]}}}, "schema.chunk_layout.write_chunk.shape"),
        ({"chunk_layout": {"chunk": {"shape": [8, 8]}}}, "schema.chunk_layout.chunk.shape"),
        ({"chunk_layout": {"inner_order": [0, 1]}}, "schema.chunk_layout.inner_order"),
    ):
        with pytest.raises(MetadataError, match=rf"^{field}: expected"):
            check_schema_constraints(Schema.from_json(schema, "zarr3"), stored)


_INNER = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3}}]
_SHARD = {"name": "sharding_indexed", "configuration": {"chunk_shape": [16, 16], "codecs": _INNER}}
_STORED_CHAINS = {
    "plain": _INNER,
    "sharded": [_SHARD],
    "transposed shards": [{"name": "transpose", "configuration": {"order": [1, 0]}}, _SHARD],
    "shards of shards": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [32, 32], "codecs": [_SHARD]}}],
}
_ZSTD = {"name": "zstd"}
_CONSTRAINTS = [
    [_ZSTD],
    [{"name": "zstd", "configuration": {"level": 3}}],
    [{"name": "zstd", "configuration": {"level": 5}}],
    [{"name": "gzip"}],
    [{"name": "bytes"}, _ZSTD],
    [{"name": "bytes", "configuration": {"endian": "little"}}],
    [{"name": "crc32c"}],
    [_ZSTD, {"name": "crc32c"}],
    [{"name": "transpose", "configuration": {"order": [1, 0]}}],
    [{"name": "transpose", "configuration": {"order": [1, 0]}}, _ZSTD],
    [{"name": "sharding_indexed", "configuration": {"chunk_shape": [16, 16]}}],
    [{"name": "sharding_indexed", "configuration": {"chunk_shape": [8, 8]}}],
]


@pytest.mark.parametrize("stored", list(_STORED_CHAINS))
def test_codec_constraints_agree_with_tensorstore(tmp_path: object, stored: str) -> None:
    """A partial ``schema.codec`` chain matches as TensorStore merges it: into the inner
    chunks' chain of a lone sharding codec, shard within shard (``["zstd"]`` of a sharded array
    was refused), with a transpose more or less at the end of the array->array codecs. Each
    constraint opens where TensorStore opens it, and only there."""
    ts = pytest.importorskip("tensorstore")
    import gpuzarr

    kvstore = {"driver": "file", "path": f"{tmp_path}/a/"}
    grid = {"name": "regular", "configuration": {"chunk_shape": [64, 64]}}
    metadata = {"shape": [64, 64], "data_type": "uint16", "chunk_grid": grid, "codecs": _STORED_CHAINS[stored]}
    ts.open({"driver": "zarr3", "kvstore": kvstore, "metadata": metadata}, create=True).result()
    for constraint in _CONSTRAINTS:
        spec = {"driver": "zarr3", "kvstore": kvstore, "schema": {"codec": {"driver": "zarr3", "codecs": constraint}}}
        try:
            ts.open(spec).result()
        except ValueError:
            theirs = False
        else:
            theirs = True
        try:
            gpuzarr.open(spec, mode="r")
        except MetadataError as exc:
            assert "schema.codec.codecs" in str(exc)
            ours = False
        else:
            ours = True
        assert ours == theirs, (stored, constraint, theirs)

