"""Every codec: round trips, configuration round trips, validation, and interop with the
reference implementations (python's gzip module, numcodecs)."""

from __future__ import annotations

import gzip as pygzip
import zlib
from typing import Any

import numcodecs
import numpy as np
import pytest

from gpuzarr.codecs.base import ChunkSpec
from gpuzarr.codecs.blosc import BloscCodec, parse_blosc_header
from gpuzarr.codecs.crc32c import crc32c
from gpuzarr.codecs.registry import codec_from_json, registered_codecs
from gpuzarr.errors import CorruptChunkError, MetadataError, UnknownCodecError

from .helpers import LITTLE, assert_config_roundtrip, assert_roundtrip, pipeline, sample

BIG = {"name": "bytes", "configuration": {"endian": "big"}}


def test_registry() -> None:
    assert registered_codecs() == [
        "blosc",
        "bytes",
        "crc32c",
        "gzip",
        "sharding_indexed",
        "transpose",
        "vlen-bytes",
        "vlen-utf8",
        "zstd",
    ]
    with pytest.raises(UnknownCodecError, match="'nope'"):
        codec_from_json({"name": "nope"})
    with pytest.raises(MetadataError, match="configuration"):
        codec_from_json({"name": "gzip", "configuration": [1]})


# -- bytes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["<u2", "<i4", "<f8", "<u8", "<c8", "<f2", "|u1", "|b1", "|i1"])
@pytest.mark.parametrize("endian", ["little", "big"])
def test_bytes_roundtrip(dtype: str, endian: str) -> None:
    data = sample((3, 5), dtype)
    encoded = assert_roundtrip([{"name": "bytes", "configuration": {"endian": endian}}], data)
    stored = data.astype(np.dtype(dtype).newbyteorder("<" if endian == "little" else ">"))
    assert encoded == stored.tobytes()


@pytest.mark.parametrize("dtype", ["|u1", "|i1", "|b1"])
def test_bytes_one_byte_types_need_no_endian(dtype: str) -> None:
    data = sample((4, 4), dtype)
    assert assert_roundtrip([{"name": "bytes"}], data) == data.tobytes()
    codec = assert_config_roundtrip({"name": "bytes"})
    assert codec.to_json() == {"name": "bytes"}


@pytest.mark.parametrize("dtype", ["<u2", "<f4", "<i8"])
def test_bytes_wide_types_need_endian(dtype: str) -> None:
    with pytest.raises(MetadataError, match="endian"):
        pipeline([{"name": "bytes"}], (2,), dtype)


@pytest.mark.parametrize("config", [{"endian": "middle"}, {"endian": 1}, {"endian": "little", "extra": 1}])
def test_bytes_bad_config(config: dict[str, Any]) -> None:
    with pytest.raises(MetadataError):
        codec_from_json({"name": "bytes", "configuration": config})


@pytest.mark.parametrize("endian", ["little", "big"])
def test_bytes_config_roundtrip(endian: str) -> None:
    assert_config_roundtrip({"name": "bytes", "configuration": {"endian": endian}})


def test_bytes_wrong_size() -> None:
    p = pipeline([LITTLE], (2, 3), "<u2")
    with pytest.raises(CorruptChunkError, match="11 bytes, expected 12") as info:
        p.decode(b"\0" * 11, "c/0")
    assert info.value.key == "c/0"


# -- transpose ---------------------------------------------------------------------------------

PERMUTATIONS_3D = [(0, 1, 2), (2, 1, 0), (1, 0, 2), (2, 0, 1), (1, 2, 0), (0, 2, 1)]


@pytest.mark.parametrize("order", PERMUTATIONS_3D)
@pytest.mark.parametrize("endian", ["little", "big"])
def test_transpose_roundtrip(order: tuple[int, ...], endian: str) -> None:
    data = sample((2, 3, 4), "<i4")
    chain = [
        {"name": "transpose", "configuration": {"order": list(order)}},
        {"name": "bytes", "configuration": {"endian": endian}},
    ]
    encoded = assert_roundtrip(chain, data)
    # Encoded axis i is decoded axis order[i].
    stored_dtype = np.dtype("<i4" if endian == "little" else ">i4")
    assert encoded == np.ascontiguousarray(data.transpose(order)).astype(stored_dtype).tobytes()
    assert_config_roundtrip(chain[0])


@pytest.mark.parametrize(("legacy", "order"), [("C", (0, 1, 2)), ("F", (2, 1, 0))])
def test_transpose_legacy_forms(legacy: str, order: tuple[int, ...]) -> None:
    data = sample((2, 3, 4), "<u2")
    legacy_bytes = assert_roundtrip([{"name": "transpose", "configuration": {"order": legacy}}, LITTLE], data)
    list_bytes = assert_roundtrip(
        [{"name": "transpose", "configuration": {"order": list(order)}}, LITTLE], data
    )
    assert legacy_bytes == list_bytes
    assert_config_roundtrip({"name": "transpose", "configuration": {"order": legacy}})


@pytest.mark.parametrize("order", [[0, 1, 2], [0], [1, 0, 0]])
def test_transpose_wrong_rank(order: list[int]) -> None:
    chain = [{"name": "transpose", "configuration": {"order": order}}, LITTLE]
    with pytest.raises(MetadataError, match="order"):
        pipeline(chain, (2, 3), "<u2")


@pytest.mark.parametrize("order", [[0, 0], [1, 2], [-1, 0], "X", None, [0.0, 1.0], [True, False]])
def test_transpose_bad_order(order: Any) -> None:
    with pytest.raises(MetadataError, match="order"):
        codec_from_json({"name": "transpose", "configuration": {"order": order}})


def test_transpose_after_bytes_is_refused() -> None:
    with pytest.raises(MetadataError, match="after the array->bytes"):
        pipeline([LITTLE, {"name": "transpose", "configuration": {"order": [1, 0]}}], (2, 3), "<u2")


def test_chain_needs_array_to_bytes() -> None:
    with pytest.raises(MetadataError, match="array->bytes"):
        pipeline([{"name": "gzip"}], (2,), "<u2")
    with pytest.raises(MetadataError, match="exactly one"):
        pipeline([LITTLE, LITTLE], (2,), "<u2")


# -- gzip --------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [0, 1, 5, 9])
def test_gzip_levels(level: int) -> None:
    data = sample((20, 30), "<u2")
    encoded = assert_roundtrip([LITTLE, {"name": "gzip", "configuration": {"level": level}}], data)
    assert pygzip.decompress(encoded) == data.tobytes()
    assert_config_roundtrip({"name": "gzip", "configuration": {"level": level}})


def gzip_codec() -> Any:
    return codec_from_json({"name": "gzip"})


def test_gzip_decodes_python_gzip_and_numcodecs() -> None:
    raw = sample((50,), "<f8").tobytes()
    assert bytes(gzip_codec().decode(pygzip.compress(raw, 6))) == raw
    assert bytes(gzip_codec().decode(pygzip.compress(raw, 0, mtime=0))) == raw
    assert bytes(gzip_codec().decode(numcodecs.GZip(1).encode(raw))) == raw
    assert bytes(numcodecs.GZip().decode(gzip_codec().encode(raw))) == raw


def test_gzip_concatenated_members() -> None:
    parts = [b"first ", b"", b"second", b"!" * 1000]
    stream = b"".join(pygzip.compress(p) for p in parts)
    assert bytes(gzip_codec().decode(stream)) == b"".join(parts)


def test_gzip_refuses_zlib_streams() -> None:
    with pytest.raises(ValueError, match="gzip: corrupt stream"):
        gzip_codec().decode(zlib.compress(b"abc"))


@pytest.mark.parametrize("level", [-1, 10, "5", True, 1.5])
def test_gzip_bad_level(level: Any) -> None:
    with pytest.raises(MetadataError, match="level"):
        codec_from_json({"name": "gzip", "configuration": {"level": level}})


# -- zstd --------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [-5, 0, 1, 3, 19])
@pytest.mark.parametrize("checksum", [False, True])
def test_zstd_roundtrip(level: int, checksum: bool) -> None:
    data = sample((20, 30), "<i4")
    cfg = {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}
    encoded = assert_roundtrip([LITTLE, cfg], data)
    assert bytes(numcodecs.Zstd().decode(encoded)) == data.tobytes()
    # The frame header descriptor's checksum flag (bit 2) says whether a checksum follows.
    assert bool(encoded[4] & 0x04) == checksum
    assert_config_roundtrip(cfg)


def test_zstd_decodes_numcodecs() -> None:
    raw = sample((300,), "<u8").tobytes()
    codec = codec_from_json({"name": "zstd", "configuration": {"level": 0, "checksum": False}})
    for encoder in (numcodecs.Zstd(level=1), numcodecs.Zstd(level=10, checksum=True)):
        assert bytes(codec.decode(encoder.encode(raw))) == raw


def test_zstd_checksum_detects_corruption() -> None:
    data = sample((100,), "<u4")
    p = pipeline([LITTLE, {"name": "zstd", "configuration": {"level": 1, "checksum": True}}], (100,), "<u4")
    encoded = bytearray(memoryview(p.encode(data)).cast("B"))
    encoded[-1] ^= 0xFF  # the checksum itself
    with pytest.raises(CorruptChunkError) as info:
        p.decode(bytes(encoded), "c/1")
    assert info.value.key == "c/1"


@pytest.mark.parametrize("config", [{"level": 23}, {"level": "1"}, {"checksum": 1}, {"level": 1, "x": 0}])
def test_zstd_bad_config(config: dict[str, Any]) -> None:
    with pytest.raises(MetadataError):
        codec_from_json({"name": "zstd", "configuration": config})


# -- blosc -------------------------------------------------------------------------------------

CNAMES = ["lz4", "lz4hc", "blosclz", "zstd", "zlib"]
SHUFFLES = ["noshuffle", "shuffle", "bitshuffle"]


@pytest.mark.parametrize("cname", CNAMES)
@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_blosc_roundtrip(cname: str, shuffle: str) -> None:
    data = sample((16, 32), "<f4")
    cfg = {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle}}
    encoded = assert_roundtrip([LITTLE, cfg], data)
    header = parse_blosc_header(encoded)
    assert header.typesize == 4  # resolved from the data type
    assert header.nbytes == data.nbytes
    assert bytes(numcodecs.Blosc().decode(encoded)) == data.tobytes()
    assert_config_roundtrip(cfg)


@pytest.mark.parametrize(("dtype", "typesize"), [("<u2", 2), ("<f8", 8), ("|u1", 1), ("<c16", 16)])
def test_blosc_typesize_resolved_from_dtype(dtype: str, typesize: int) -> None:
    codec = codec_from_json({"name": "blosc", "configuration": {"shuffle": "shuffle"}})
    assert "typesize" not in codec.to_json()["configuration"]
    resolved = codec.resolve(ChunkSpec((4,), np.dtype(dtype), 0))
    assert isinstance(resolved, BloscCodec)
    assert resolved.typesize == typesize
    assert resolved.to_json()["configuration"]["typesize"] == typesize
    p = pipeline([{"name": "bytes", "configuration": {"endian": "little"}}, codec.to_json()], (8,), dtype)
    assert p.to_json()[1]["configuration"]["typesize"] == typesize


@pytest.mark.parametrize(
    ("config", "dtype", "shuffle", "flags"),
    [
        ({}, "<u2", "shuffle", 0x01),
        ({}, "|u1", "bitshuffle", 0x04),
        ({"typesize": 1}, "<u2", "shuffle", 0x01),
        ({"shuffle": "noshuffle"}, "<u2", "noshuffle", 0x00),
        ({"shuffle": "bitshuffle"}, "<f8", "bitshuffle", 0x04),
    ],
)
def test_blosc_shuffle_left_out_is_chosen_by_the_element_size(
    config: dict[str, Any], dtype: str, shuffle: str, flags: int
) -> None:
    """As zarr-python's BloscCodec() and TensorStore choose it; a shuffle given is kept."""
    codec = codec_from_json({"name": "blosc", "configuration": config})
    assert codec.to_json()["configuration"].get("shuffle") == config.get("shuffle")
    resolved = codec.resolve(ChunkSpec((4,), np.dtype(dtype), 0))
    assert isinstance(resolved, BloscCodec)
    assert resolved.to_json()["configuration"]["shuffle"] == shuffle
    encoded = assert_roundtrip([LITTLE if np.dtype(dtype).itemsize > 1 else {"name": "bytes"}, codec.to_json()],
                               sample((64,), dtype))  # fmt: skip
    assert parse_blosc_header(encoded).flags & 0x05 == flags


def test_blosc_explicit_typesize_is_kept() -> None:
    cfg = {"name": "blosc", "configuration": {"cname": "lz4", "shuffle": "shuffle", "typesize": 4}}
    data = sample((64,), "<u2")
    encoded = assert_roundtrip([LITTLE, cfg], data)
    assert parse_blosc_header(encoded).typesize == 4


@pytest.mark.parametrize("blocksize", [0, 256, 4096])
def test_blosc_blocksize(blocksize: int) -> None:
    data = sample((65536,), "<u2")
    cfg = {"name": "blosc", "configuration": {"cname": "lz4", "shuffle": "shuffle", "blocksize": blocksize}}
    encoded = assert_roundtrip([LITTLE, cfg], data)
    # c-blosc treats the blocksize as a request it may round; the encoder must pass it on.
    reference = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, blocksize=blocksize, typesize=2)
    assert encoded == bytes(reference.encode(data.tobytes()))
    header = parse_blosc_header(encoded)
    assert (header.blocksize < data.nbytes) == (blocksize != 0)
    assert_config_roundtrip(cfg)


def test_blosc_decodes_numcodecs() -> None:
    raw = sample((500,), "<i8").tobytes()
    codec = codec_from_json({"name": "blosc", "configuration": {"cname": "lz4"}})
    for cname in CNAMES:
        for shuffle in (0, 1, 2):
            encoded = numcodecs.Blosc(cname=cname, clevel=3, shuffle=shuffle, typesize=8).encode(raw)
            assert bytes(codec.decode(encoded)) == raw


@pytest.mark.parametrize(
    "config",
    [
        {"cname": "lz5"},
        {"clevel": 10},
        {"clevel": -1},
        {"shuffle": 1},
        {"shuffle": "byteshuffle"},
        {"typesize": 0},
        {"typesize": 256},
        {"blocksize": -1},
        {"blocksize": True},
        {"blocksize": 2**31},  # c-blosc takes a C int: numcodecs' encode raised OverflowError
        {"cname": "lz4", "other": 1},
    ],
)
def test_blosc_bad_config(config: dict[str, Any]) -> None:
    with pytest.raises(MetadataError):
        codec_from_json({"name": "blosc", "configuration": config})


# -- crc32c ------------------------------------------------------------------------------------


def test_crc32c_known_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(np.frombuffer(b"123456789", np.uint8)) == 0xE3069283


def test_crc32c_appends_little_endian_checksum() -> None:
    codec = codec_from_json({"name": "crc32c"})
    encoded = bytes(codec.encode(b"123456789"))
    assert encoded == b"123456789" + (0xE3069283).to_bytes(4, "little")
    assert bytes(codec.decode(encoded)) == b"123456789"
    assert bytes(codec.decode(b"\0\0\0\0")) == b""  # empty payload, crc32c(b"") == 0


def test_crc32c_roundtrip_and_config() -> None:
    data = sample((5, 7), "<f8")
    assert_roundtrip([LITTLE, {"name": "crc32c"}], data)
    assert_roundtrip([LITTLE, {"name": "zstd"}, {"name": "crc32c"}], data)
    assert_config_roundtrip({"name": "crc32c"})
    assert codec_from_json({"name": "crc32c", "configuration": {}}).to_json() == {"name": "crc32c"}
    with pytest.raises(MetadataError):
        codec_from_json({"name": "crc32c", "configuration": {"x": 1}})


@pytest.mark.parametrize("flip", [0, 10, -1, -4])
def test_crc32c_mismatch(flip: int) -> None:
    p = pipeline([LITTLE, {"name": "crc32c"}], (3, 3), "<u2")
    encoded = bytearray(memoryview(p.encode(sample((3, 3), "<u2"))).cast("B"))
    encoded[flip] ^= 0x10
    with pytest.raises(CorruptChunkError, match="checksum mismatch") as info:
        p.decode(bytes(encoded), "a/c/0/0")
    assert info.value.key == "a/c/0/0"


def test_crc32c_too_short() -> None:
    with pytest.raises(ValueError, match="4-byte checksum"):
        codec_from_json({"name": "crc32c"}).decode(b"abc")


@pytest.mark.parametrize(
    ("member", "value"),
    [("shuffle", {}), ("shuffle", ["shuffle"]), ("shuffle", 1), ("cname", {}), ("cname", ["lz4"])],
)
def test_blosc_config_member_of_the_wrong_json_type(member: str, value: Any) -> None:
    with pytest.raises(MetadataError, match=f"configuration.{member}: expected one of"):
        codec_from_json({"name": "blosc", "configuration": {member: value}}, "codecs[1]")


def test_a_blosc_compressor_numcodecs_lacks_is_refused_before_anything_is_written(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # numcodecs' wheels leave snappy out of c-blosc: its encode raised a bare ValueError for each
    # chunk, after the array's metadata had been written.
    import gpuzarr
    from gpuzarr.codecs import blosc

    monkeypatch.setattr(blosc, "builtin_cnames", lambda: frozenset({"lz4", "zstd"}))
    cases: list[tuple[int, dict[str, Any]]] = [
        (2, {"compressor": {"id": "blosc", "cname": "lz4hc", "clevel": 5, "shuffle": 1}}),
        (3, {"compressors": [{"name": "blosc", "configuration": {"cname": "lz4hc"}}]}),
        (3, {"compressors": [{"name": "numcodecs.blosc", "configuration": {"cname": "lz4hc"}}]}),
        (3, {"shards": (4,), "compressors": [{"name": "blosc", "configuration": {"cname": "lz4hc"}}]}),
    ]
    for k, (zarr_format, codecs) in enumerate(cases):
        path = tmp_path / f"{k}.zarr"
        with pytest.raises(MetadataError, match=r"blosc cname: 'lz4hc' is not built into numcodecs' c-blosc here"):
            gpuzarr.create(str(path), shape=(8,), chunks=(2,), dtype="<i4", zarr_format=zarr_format, **codecs)
        assert not path.exists() or not any(path.iterdir())
    # An array another library made with it (metadata as stored) opens; writing names the field.
    codec = BloscCodec.from_config({"cname": "lz4hc", "shuffle": "shuffle", "typesize": 4})
    with pytest.raises(MetadataError, match=r"^blosc cname: 'lz4hc' is not built"):
        codec.encode(np.arange(8, dtype="<i4").view(np.uint8))
    assert gpuzarr.create(str(tmp_path / "ok.zarr"), shape=(8,), chunks=(2,), dtype="<i4",
                          compressors=[{"name": "blosc", "configuration": {"cname": "zstd"}}]) is not None  # fmt: skip


def test_blosc_shuffle_left_out_follows_the_element_size_not_the_typesize() -> None:
    """As zarr-python chooses it: 8-byte elements with ``typesize`` 1 are byte-shuffled."""
    codec = codec_from_json({"name": "blosc", "configuration": {"typesize": 1}})
    resolved = codec.resolve(ChunkSpec((4,), np.dtype("<f8"), 0))
    assert resolved.to_json()["configuration"]["shuffle"] == "shuffle"


def test_blosc_shuffle_null_in_metadata_is_refused() -> None:
    """Left out it is chosen by the element size; written as null it is no shuffle the spec names."""
    with pytest.raises(MetadataError, match="shuffle"):
        codec_from_json({"name": "blosc", "configuration": {"cname": "lz4", "shuffle": None}})
