"""``Array.info``, ``info_complete()``, ``nchunks``, ``nchunks_initialized``, ``nbytes_stored()``
and ``metadata.to_dict()``. The comparisons with zarr-python on the same stored arrays are in
tests/integration/test_interop_conveniences.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gpuzarr
from gpuzarr.core.info import ArrayInfo, byte_info, human_readable_size


def _lines(info: ArrayInfo) -> dict[str, str]:
    return dict((part.strip() for part in line.split(":", 1)) for line in repr(info).splitlines())  # type: ignore[misc]


def test_info_of_a_plain_array(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 30), dtype="int16", chunks=(10, 30), fill_value=-1)
    info = a.info
    assert isinstance(info, ArrayInfo)
    assert repr(info).splitlines()[:3] == [
        "Type               : Array",
        "Zarr format        : 3",
        "Data type          : int16",
    ]
    lines = _lines(info)
    assert lines["Fill value"] == "-1" and lines["Shape"] == "(100, 30)" and lines["Chunk shape"] == "(10, 30)"
    assert "Shard shape" not in lines and lines["Order"] == "C" and lines["Read-only"] == "False"
    assert lines["Store type"] == type(store).__name__
    assert lines["Filters"] == "()"
    assert lines["Serializer"] == "{'name': 'bytes', 'configuration': {'endian': 'little'}}"
    assert lines["Compressors"] == "({'name': 'zstd', 'configuration': {'level': 0, 'checksum': False}},)"
    assert lines["No. bytes"] == "6000 (5.9K)"
    assert "No. bytes stored" not in lines  # info reads nothing from the store
    assert (info.count_bytes, info.shard_shape, info.count_bytes_stored) == (6000, None, None)


def test_info_complete_counts_what_is_stored(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 30), dtype="int16", chunks=(10, 30), compressor=None)
    assert (a.nchunks, a.nchunks_initialized) == (10, 0)
    a[0:25] = 7  # chunks 0, 1 and 2
    assert a.nchunks_initialized == 3
    doc_size = len(store.get("zarr.json"))
    assert a.nbytes_stored() == doc_size + 3 * 600  # uncompressed chunks of 10 x 30 int16
    info = a.info_complete()
    assert (info.count_chunks, info.count_chunks_initialized, info.count_shards) == (10, 3, None)
    lines = _lines(info)
    assert lines["No. bytes stored"] == byte_info(doc_size + 1800)
    assert lines["Storage ratio"] == f"{6000 / (doc_size + 1800):.1f}"
    assert lines["Chunks Initialized"] == "3 of 10"
    a[0:25] = 0  # chunks equal to the fill value are erased again
    assert a.nchunks_initialized == 0


def test_sharded_info_counts_shards_and_their_chunks() -> None:
    a = gpuzarr.create(shape=(40, 40), dtype="float32", chunks=(5, 10), shards=(20, 20))
    assert (a.nchunks, a.shards) == (32, (20, 20))
    a[0, 0] = 1.0  # one shard: all 8 of its inner chunks count as initialized, as in zarr-python
    a[39, 39] = 1.0
    lines = _lines(a.info_complete())
    assert lines["Shard shape"] == "(20, 20)" and lines["Chunk shape"] == "(5, 10)"
    assert lines["Shards Initialized"] == "2 of 4"
    assert lines["Chunks Initialized"] == "16 of 32"
    assert a.nchunks_initialized == 16
    # As zarr-python: the codecs shown are those of the inner chunks.
    assert lines["Serializer"].startswith("{'name': 'bytes'")
    assert lines["Compressors"].startswith("({'name': 'zstd'")


def test_info_of_v2_and_transposed_arrays() -> None:
    v2 = gpuzarr.create(
        shape=(6, 4), dtype=">u2", chunks=(3, 4), zarr_format=2, order="F", filters=[{"id": "delta", "dtype": ">u2"}]
    )
    lines = _lines(v2.info)
    assert lines["Zarr format"] == "2" and lines["Data type"] == ">u2" and lines["Order"] == "F"
    assert lines["Filters"] == "({'id': 'delta', 'dtype': '>u2', 'astype': '>u2'},)"
    assert "Serializer" not in lines
    assert lines["Compressors"] == "({'id': 'zstd', 'level': 0},)"
    v3 = gpuzarr.create(shape=(6, 4), dtype="u2", order="F")
    lines = _lines(v3.info)
    # Arrays read in C order; F order on disk is the transpose codec, a filter.
    assert lines["Order"] == "C" and lines["Filters"].startswith("({'name': 'transpose'")


def test_chunk_counts_ignore_keys_that_are_not_chunks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = gpuzarr.LocalStore(tmp_path / "s.zarr")
    a = gpuzarr.create(store, path="x", shape=(4, 4), dtype="u1", chunks=(2, 2))
    a[...] = 1
    store.set("x/c/9/9", b"outside the grid")
    store.set("x/c/01/0", b"not a canonical key")
    store.set("x/notes.txt", b"not a chunk")
    store.set("xy/c/0/0", b"another node's prefix")
    assert (a.nchunks, a.nchunks_initialized) == (4, 4)
    v2 = gpuzarr.create(store, path="v2", shape=(4, 4), dtype="u1", chunks=(2, 2), zarr_format=2)
    v2[:2, :] = 1
    assert v2.nchunks_initialized == 2
    scalar = gpuzarr.create(store, path="s", shape=(), dtype="f8", fill_value=1.0)
    assert (scalar.nchunks, scalar.nchunks_initialized) == (1, 0)
    scalar[()] = 2.0
    assert scalar.nchunks_initialized == 1


def test_rectilinear_grids() -> None:
    a = gpuzarr.create(shape=(10, 6), dtype="i4", chunks=[[2, 3, 5], 3])
    assert a.nchunks == 6
    a[9, 5] = 1
    assert a.nchunks_initialized == 1
    assert _lines(a.info)["Chunk shape"] == "((2, 3, 5), 3)"


def test_metadata_to_dict_is_the_stored_document(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(5,), dtype="float32", fill_value=float("nan"), attributes={"k": [1, 2]})
    doc = a.metadata.to_dict()
    assert doc == json.loads(store.get("zarr.json"))
    assert doc["fill_value"] == "NaN" and doc["attributes"] == {"k": [1, 2]}
    doc["attributes"]["k"].append(3)  # a new dict: changing it changes nothing in the array
    assert a.attrs["k"] == [1, 2]
    v2 = gpuzarr.create(store, path="v2", shape=(5,), dtype="<i8", zarr_format=2, attributes={"a": 1})
    expected = json.loads(store.get("v2/.zarray")) | {"attributes": json.loads(store.get("v2/.zattrs"))}
    assert v2.metadata.to_dict() == expected


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0"), (1023, "1023"), (1024, "1.0K"), (1536, "1.5K"), (5 * 2**20, "5.0M"), (3 * 2**30, "3.0G"),
     (2**40, "1.0T"), (2**50 * 3, "3.0P"), (2**60, "1024.0P")],
)
def test_human_readable_sizes(size: int, text: str) -> None:
    assert human_readable_size(size) == text
    assert byte_info(size) == (text if size < 1024 else f"{size} ({text})")


def test_info_is_cheap_and_info_complete_sees_writes() -> None:
    a = gpuzarr.zeros((4, 4), dtype="u1", chunks=(2, 2))
    before = a.info_complete()
    a[...] = np.arange(16, dtype="u1").reshape(4, 4)
    after = a.info_complete()
    assert (before.count_chunks_initialized, after.count_chunks_initialized) == (0, 4)
    assert after.count_bytes_stored is not None and before.count_bytes_stored is not None
    assert after.count_bytes_stored > before.count_bytes_stored


def test_info_counts_only_the_inner_chunks_of_edge_shards_that_lie_in_the_array() -> None:
    # One 64-wide array in one 256-wide shard of 64-wide chunks: zarr-python's property counts the
    # shard's 4 positions, the summary the 1 chunk that exists, so it never says "4 of 1".
    a = gpuzarr.create(shape=(64,), dtype="uint8", chunks=(64,), shards=(256,))
    a[:] = 1
    assert (a.nchunks, a.nchunks_initialized) == (1, 4)
    lines = _lines(a.info_complete())
    assert lines["Shards Initialized"] == "1 of 1"
    assert lines["Chunks Initialized"] == "1 of 1"
