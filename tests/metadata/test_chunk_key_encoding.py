"""Chunk key encodings (Zarr v3 core: ``default`` and ``v2``), checked against zarr-python."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuzarr.errors import MetadataError
from gpuzarr.metadata.chunk_key_encoding import ChunkKeyEncoding


@pytest.mark.parametrize(
    ("doc", "coords", "key"),
    [
        ({"name": "default"}, (1, 23, 45), "c/1/23/45"),
        ({"name": "default", "configuration": {"separator": "/"}}, (1, 23, 45), "c/1/23/45"),
        ({"name": "default", "configuration": {"separator": "."}}, (1, 23, 45), "c.1.23.45"),
        ({"name": "v2"}, (1, 23, 45), "1.23.45"),
        ({"name": "v2", "configuration": {"separator": "."}}, (1, 23, 45), "1.23.45"),
        ({"name": "v2", "configuration": {"separator": "/"}}, (1, 23, 45), "1/23/45"),
        ({"name": "default"}, (0,), "c/0"),
        ({"name": "v2"}, (7,), "7"),
        # 0-d arrays: one chunk with the empty coordinate.
        ({"name": "default"}, (), "c"),
        ({"name": "default", "configuration": {"separator": "."}}, (), "c"),
        ({"name": "v2"}, (), "0"),
        ({"name": "v2", "configuration": {"separator": "/"}}, (), "0"),
        ("default", (2, 3), "c/2/3"),
    ],
)
def test_encode(doc: Any, coords: tuple[int, ...], key: str) -> None:
    assert ChunkKeyEncoding.from_json(doc).encode(coords) == key


def test_defaults() -> None:
    assert ChunkKeyEncoding.from_json({"name": "default"}).separator == "/"
    assert ChunkKeyEncoding.from_json({"name": "v2"}).separator == "."
    assert ChunkKeyEncoding() == ChunkKeyEncoding("default", "/")


@pytest.mark.parametrize("name", ["default", "v2"])
@pytest.mark.parametrize("separator", ["/", "."])
def test_json_roundtrip(name: str, separator: str) -> None:
    cke = ChunkKeyEncoding(name, separator)
    doc = cke.to_json()
    assert doc == {"name": name, "configuration": {"separator": separator}}
    assert ChunkKeyEncoding.from_json(doc) == cke


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"name": "default", "configuration": {"separator": "-"}}, "separator"),
        ({"name": "default", "configuration": {"separator": ""}}, "separator"),
        ({"name": "default", "configuration": {"separator": 1}}, "separator"),
        ({"name": "v2", "configuration": {"separator": "//"}}, "separator"),
        ({"name": "n5"}, "chunk_key_encoding.name"),
        ({"name": 3}, "chunk_key_encoding.name"),
        ({}, "chunk_key_encoding.name"),
        ({"name": "default", "configuration": []}, "chunk_key_encoding.configuration"),
        ({"name": "default", "extra": 1}, "chunk_key_encoding"),
        (None, "chunk_key_encoding"),
        (["default"], "chunk_key_encoding"),
    ],
)
def test_invalid(doc: Any, field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        ChunkKeyEncoding.from_json(doc)


coords_strategy = st.lists(st.integers(0, 10**6), min_size=0, max_size=5).map(tuple)


@settings(max_examples=100, deadline=None)
@given(coords=coords_strategy, separator=st.sampled_from(["/", "."]))
def test_matches_zarr_python(coords: tuple[int, ...], separator: str) -> None:
    pytest.importorskip("zarr")
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding, V2ChunkKeyEncoding

    ours_default = ChunkKeyEncoding("default", separator).encode(coords)
    ours_v2 = ChunkKeyEncoding("v2", separator).encode(coords)
    assert ours_default == DefaultChunkKeyEncoding(separator=separator).encode_chunk_key(coords)
    assert ours_v2 == V2ChunkKeyEncoding(separator=separator).encode_chunk_key(coords)
