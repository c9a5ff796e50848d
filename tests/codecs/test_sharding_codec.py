"""``sharding_indexed`` as a whole-shard codec: layouts, nesting, empty chunks, index codecs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuzarr.codecs.sharding import ShardingCodec
from gpuzarr.errors import CorruptChunkError, MetadataError
from gpuzarr.store.sharding import EMPTY

from .helpers import LITTLE, assert_config_roundtrip, assert_roundtrip, pipeline, sample

CRC = {"name": "crc32c"}


def sharding(chunk_shape: list[int], codecs: list[Any] | None = None, **config: Any) -> dict[str, Any]:
    return {
        "name": "sharding_indexed",
        "configuration": {"chunk_shape": chunk_shape, "codecs": codecs or [LITTLE], **config},
    }


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize(
    "inner",
    [
        [LITTLE],
        [LITTLE, {"name": "zstd"}],
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, LITTLE, CRC],
    ],
    ids=["bytes", "zstd", "transpose-crc"],
)
def test_roundtrip(location: str, inner: list[Any]) -> None:
    data = sample((8, 6), "<u2")
    encoded = assert_roundtrip([sharding([2, 3], inner, index_location=location)], data)
    index_nbytes = 4 * 2 * 16 + 4
    p = pipeline([sharding([2, 3], inner, index_location=location)], (8, 6), "<u2")
    codec = p.array_to_bytes[0]
    assert isinstance(codec, ShardingCodec)
    index = codec.layout.index_from_shard(encoded, "k")
    offsets = index.offsets[~(index.offsets == EMPTY)]
    if location == "start":
        assert offsets.min() == index_nbytes
    else:
        assert int((index.offsets + index.nbytes).max()) == len(encoded) - index_nbytes


def test_config_roundtrip() -> None:
    codec = assert_config_roundtrip(sharding([2, 3], [LITTLE, {"name": "gzip"}], index_location="start"))
    assert codec.to_json()["configuration"]["index_codecs"] == [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "crc32c", "configuration": {}},
    ]


def test_empty_inner_chunks_are_left_out() -> None:
    data = np.zeros((8, 6), "<u2")
    data[2:4, 3:6] = 5  # inner chunk (1, 1) only
    encoded = assert_roundtrip([sharding([2, 3])], data)
    index_nbytes = 8 * 16 + 4
    assert len(encoded) == index_nbytes + 2 * 3 * 2
    p = pipeline([sharding([2, 3])], (8, 6), "<u2")
    codec = p.array_to_bytes[0]
    assert isinstance(codec, ShardingCodec)
    index = codec.layout.index_from_shard(encoded, "k")
    assert [i for i in range(8) if not index.is_empty(i)] == [3]


def test_all_empty_shard_decodes_to_fill() -> None:
    data = np.full((4, 6), 9, "<u2")
    encoded = assert_roundtrip([sharding([2, 3])], data, fill_value=9)
    assert len(encoded) == 4 * 16 + 4


def test_nested_sharding() -> None:
    data = sample((8, 12), "<i4")
    data[:4, :] = 0  # an inner shard that is all fill
    inner_shard = sharding([2, 3], [LITTLE, {"name": "zstd"}], index_location="start")
    chain = [sharding([4, 6], [inner_shard]), {"name": "crc32c"}]
    assert_roundtrip(chain, data)
    assert_config_roundtrip(chain[0])


@pytest.mark.parametrize(
    "index_codecs",
    [
        [LITTLE],
        [{"name": "bytes", "configuration": {"endian": "big"}}],
        [{"name": "bytes", "configuration": {"endian": "big"}}, CRC],
        [{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, LITTLE, CRC, CRC],
    ],
)
@pytest.mark.parametrize("location", ["start", "end"])
def test_index_codecs(index_codecs: list[Any], location: str) -> None:
    data = sample((4, 6), "<u2")
    assert_roundtrip([sharding([2, 3], index_codecs=index_codecs, index_location=location)], data)


@pytest.mark.parametrize("compressor", ["gzip", "zstd", "blosc"])
def test_variable_size_index_codecs_are_rejected(compressor: str) -> None:
    chain = [sharding([2, 3], index_codecs=[LITTLE, {"name": compressor}])]
    with pytest.raises(MetadataError, match="index_codecs"):
        pipeline(chain, (4, 6), "<u2")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"chunk_shape": [2, 3], "codecs": [LITTLE], "index_location": "middle"}, "index_location"),
        ({"chunk_shape": [2, 0], "codecs": [LITTLE]}, "chunk_shape"),
        ({"chunk_shape": "2", "codecs": [LITTLE]}, "chunk_shape"),
        ({"chunk_shape": [2, 3], "codecs": []}, "codecs"),
        ({"chunk_shape": [2, 3], "codecs": [LITTLE], "index_codecs": []}, "index_codecs"),
        ({"chunk_shape": [2, 3], "codecs": [LITTLE], "extra": 1}, "extra"),
    ],
)
def test_bad_config(config: dict[str, Any], field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        pipeline([{"name": "sharding_indexed", "configuration": config}], (4, 6), "<u2")


@pytest.mark.parametrize("chunk_shape", [[3, 3], [2], [2, 3, 1]])
def test_chunk_shape_must_divide_shard(chunk_shape: list[int]) -> None:
    with pytest.raises(MetadataError, match="chunk_shape"):
        pipeline([sharding(chunk_shape)], (4, 6), "<u2")


def test_corrupt_whole_shard() -> None:
    p = pipeline([sharding([2, 3])], (4, 6), "<u2")
    encoded = bytes(memoryview(p.encode(sample((4, 6), "<u2"))).cast("B"))
    with pytest.raises(CorruptChunkError) as info:
        p.decode(encoded[:-1], "c/0/0")
    assert info.value.key == "c/0/0"
    with pytest.raises(CorruptChunkError) as info:
        p.decode(b"", "c/0/0")
    assert info.value.key == "c/0/0"


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning")
@pytest.mark.parametrize("checksum", ["crc32", "adler32", "jenkins_lookup3"])
def test_a_numcodecs_checksum_ends_the_shard_index_in_both_libraries(tmp_path: Any, checksum: str) -> None:
    # A checksum adds 4 bytes, so the index has a fixed size: zarr-python writes and reads such
    # shards (they were refused: "the index must have a fixed encoded size").
    zarr = pytest.importorskip("zarr")
    import gpuzarr

    index_codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": f"numcodecs.{checksum}"}]
    sharding = {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4, 4], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": index_codecs, "index_location": "end"}}  # fmt: skip
    data = np.arange(64, dtype="<i4").reshape(8, 8)
    ours = gpuzarr.create(str(tmp_path / "g.zarr"), shape=(8, 8), chunks=(8, 8), dtype="<i4", codecs=[sharding])
    ours[...] = data
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "g.zarr"), mode="r")[...], data)
    theirs = zarr.open_array(str(tmp_path / "g.zarr"), mode="r")
    np.testing.assert_array_equal(gpuzarr.open(str(tmp_path / "g.zarr"), mode="r")[...], theirs[...])
    # A flipped index byte: the checksum catches it, naming the shard.
    shard = tmp_path / "g.zarr" / "c" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunkError, match=r"c/0/0"):
        gpuzarr.open(str(tmp_path / "g.zarr"), mode="r")[...]
