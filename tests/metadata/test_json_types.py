"""The TypedDicts of gpuzarr.metadata.json_types describe the documents gpuzarr writes: every
key written is declared, every required key is written, for arrays of each kind."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import gpuzarr
from gpuzarr.metadata.json_types import ArrayMetadataV2JSON, ArrayMetadataV3JSON, CodecJSON

if TYPE_CHECKING:
    from pathlib import Path

ARRAYS: list[tuple[str, dict[str, Any]]] = [
    ("v3", {"shape": (10, 12), "dtype": "uint16", "chunks": (5, 6)}),
    (
        "v3-sharded-named",
        {"shape": (8, 8), "dtype": "f4", "chunks": (2, 2), "shards": (4, 4), "dimension_names": ["y", "x"]},
    ),
    ("v3-rectilinear-F", {"shape": (10, 7), "dtype": "i2", "chunks": [[4, 6], 7], "order": "F"}),
    ("v3-strings", {"shape": (3,), "dtype": str, "chunks": (2,)}),
    ("v2", {"shape": (9,), "dtype": "<f8", "chunks": (4,), "zarr_format": 2}),
    (
        "v2-F-filters",
        {"shape": (4, 4), "dtype": "i4", "chunks": (2, 2), "zarr_format": 2, "order": "F",
         "filters": [{"id": "delta", "dtype": "<i4"}]},
    ),
]


def _check(document: dict[str, Any], shape: type) -> None:
    declared = set(shape.__annotations__)
    assert set(document) <= declared, f"written but not declared: {set(document) - declared}"
    required: frozenset[str] = shape.__required_keys__  # type: ignore[attr-defined]
    assert required <= set(document), f"declared required but not written: {required - set(document)}"


def _check_codec(codec: dict[str, Any]) -> None:
    _check(codec, CodecJSON)
    assert isinstance(codec["name"], str)
    if "configuration" in codec:
        assert isinstance(codec["configuration"], dict)
        for inner in ("codecs", "index_codecs"):
            for c in codec["configuration"].get(inner, []):
                _check_codec(c)


@pytest.mark.parametrize(("name", "options"), ARRAYS, ids=[n for n, _ in ARRAYS])
def test_written_documents_have_their_declared_shapes(tmp_path: Path, name: str, options: dict[str, Any]) -> None:
    array = gpuzarr.create(gpuzarr.LocalStore(tmp_path / f"{name}.zarr"), device="cpu", **options)
    document = dict(array.metadata.to_json())
    if array.zarr_format == 3:
        _check(document, ArrayMetadataV3JSON)
        for key in ("chunk_grid", "chunk_key_encoding"):
            _check(document[key], CodecJSON)
    else:
        _check(document, ArrayMetadataV2JSON)
    for codec in array.codecs:  # the v3 chain, also the one a v2 array maps to
        _check_codec(dict(codec))
    serializer = array.serializer
    if serializer is not None:
        _check_codec(dict(serializer))
