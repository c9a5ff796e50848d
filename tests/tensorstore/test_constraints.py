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
