"""``vlen-utf8`` and ``vlen-bytes``: byte-identical to numcodecs' VLenUTF8 / VLenBytes both ways,
configuration, the data types they accept, and corrupt chunks."""

from __future__ import annotations

import struct
from typing import Any

import numcodecs
import numpy as np
import pytest

from gpuzarr.codecs.base import ArrayToBytesCodec, ChunkSpec
from gpuzarr.codecs.registry import codec_from_json
from gpuzarr.codecs.vlen import VLenBytesCodec, VLenUTF8Codec
from gpuzarr.errors import CorruptChunkError, InvalidArgumentError, MetadataError

from .helpers import assert_config_roundtrip, pipeline

STRING = np.dtypes.StringDType()
UTF8 = {"name": "vlen-utf8", "configuration": {}}
BYTES = {"name": "vlen-bytes", "configuration": {}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}

TEXT = ["", "a", "ünïcödé ✓", "x" * 300, "\x00nul\x00", "🙂", "ab"]
BLOBS = [b"", b"a", b"\x00\x00", bytes(range(256)), b"x" * 70000, b"\xff", b"ab"]


def strings(shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    n = int(np.prod(shape))
    return np.array([TEXT[i % len(TEXT)] + str(i) * (i % 3) for i in range(n)], dtype=STRING).reshape(shape)


def blobs(shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    n = int(np.prod(shape))
    out = np.empty(n, dtype=object)
    out[:] = [BLOBS[i % len(BLOBS)] + bytes([i % 256]) * (i % 2) for i in range(n)]
    return out.reshape(shape)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 4), (2, 3, 2), (0,)])
def test_utf8_bytes_match_numcodecs(shape: tuple[int, ...]) -> None:
    data = strings(shape)
    p = pipeline([UTF8], shape, STRING, "")
    encoded = bytes(p.encode(data))
    assert encoded == bytes(numcodecs.VLenUTF8().encode(data.astype(object)))
    decoded = p.decode(encoded, "k")
    assert decoded.dtype == STRING and decoded.shape == shape
    np.testing.assert_array_equal(decoded, data)
    # Chunks numcodecs wrote decode as well.
    np.testing.assert_array_equal(p.decode(numcodecs.VLenUTF8().encode(data.astype(object)), "k"), data)


@pytest.mark.parametrize("shape", [(), (7,), (3, 4)])
def test_bytes_match_numcodecs(shape: tuple[int, ...]) -> None:
    data = blobs(shape)
    p = pipeline([BYTES, ZSTD], shape, object, b"")
    raw = pipeline([BYTES], shape, object, b"")
    encoded = bytes(raw.encode(data))
    assert encoded == bytes(numcodecs.VLenBytes().encode(data.reshape(-1)))
    for chain, stored in ((raw, encoded), (p, p.encode(data))):
        decoded = chain.decode(stored, "k")
        assert decoded.dtype == np.dtype(object) and decoded.shape == shape
        assert [type(v) for v in decoded.ravel()] == [bytes] * data.size
        assert decoded.ravel().tolist() == data.ravel().tolist()


def test_equal_length_bytes_stay_elements() -> None:
    # NumPy would turn a list of equal-length bytes into a 2-d array of characters.
    data = np.empty(3, dtype=object)
    data[:] = [b"ab", b"cd", b"ef"]
    p = pipeline([BYTES], (3,), object, b"")
    assert p.decode(p.encode(data), "k").tolist() == [b"ab", b"cd", b"ef"]


def test_transposed_chunks_are_written_in_c_order() -> None:
    data = strings((3, 4))
    transpose = {"name": "transpose", "configuration": {"order": [1, 0]}}
    p = pipeline([transpose, UTF8], (3, 4), STRING, "")
    encoded = bytes(p.encode(data))
    assert encoded == bytes(numcodecs.VLenUTF8().encode(data.T.astype(object).reshape(-1)))
    np.testing.assert_array_equal(p.decode(encoded, "k"), data)


def test_none_elements_are_written_empty_as_in_numcodecs() -> None:
    for codec, value in ((UTF8, ""), (BYTES, b"")):
        data = np.array([None, value], dtype=object)
        p = pipeline([codec], (2,), STRING if codec is UTF8 else object, value)
        assert bytes(p.encode(data)) == struct.pack("<III", 2, 0, 0)


@pytest.mark.parametrize(
    ("codec", "value", "match"),
    [
        (VLenUTF8Codec(), b"bytes", r"vlen-utf8: element 1 of the chunk is b'bytes', expected a str"),
        (VLenUTF8Codec(), "\ud800", "element 1 of the chunk is not valid text"),
        (VLenBytesCodec(), "text", r"vlen-bytes: element 1 of the chunk is 'text', expected bytes"),
        (VLenBytesCodec(), 7, "element 1 of the chunk is 7, expected bytes"),
    ],
)
def test_encoding_what_the_type_cannot_hold_raises(codec: ArrayToBytesCodec, value: Any, match: str) -> None:
    # Object arrays can hold anything (NumPy 1 keeps strings in them too).
    data = np.array([None, value], dtype=object)
    with pytest.raises(InvalidArgumentError, match=match):
        codec.encode(data, ChunkSpec((2,), data.dtype, None))


def test_configuration() -> None:
    for codec in (UTF8, BYTES):
        assert assert_config_roundtrip(codec).to_json() == codec
        assert codec_from_json({"name": codec["name"]}).to_json() == codec
        with pytest.raises(MetadataError, match=rf"{codec['name']}.*takes no members"):
            codec_from_json({"name": codec["name"], "configuration": {"level": 1}})


@pytest.mark.parametrize(
    ("codec", "dtype"),
    [(UTF8, "int32"), (UTF8, object), (BYTES, STRING), (BYTES, "S4"), (UTF8, "U4")],
)
def test_codec_rejects_other_data_types(codec: Any, dtype: Any) -> None:
    with pytest.raises(MetadataError, match=rf"{codec['name']} encodes the"):
        pipeline([codec], (2,), dtype, None)


@pytest.mark.parametrize("dtype", [STRING, object])
def test_bytes_codec_rejects_variable_length_types(dtype: Any) -> None:
    with pytest.raises(MetadataError, match="bytes cannot encode the variable-length data type"):
        pipeline([{"name": "bytes", "configuration": {}}], (2,), dtype, None)


GOOD = struct.pack("<II", 2, 1) + b"a" + struct.pack("<I", 2) + b"bc"


@pytest.mark.parametrize(
    ("stored", "match"),
    [
        (b"\x02\x00", "has no 4-byte element count"),
        (struct.pack("<I", 3) + GOOD[4:], "holds 3 elements, expected 2"),
        (GOOD[:6], "vlen chunk of 6 bytes is truncated"),
        (GOOD[:10], "vlen chunk of 10 bytes is truncated"),
        (GOOD[:13], "vlen chunk of 13 bytes is truncated"),
        (GOOD + b"\x00", "bytes after its 2 elements"),
        # Non-ASCII text (more bytes than characters) followed by one byte too many.
        (struct.pack("<II", 2, 2) + "é".encode() + struct.pack("<I", 1) + b"a\x00", "bytes after its 2 elements"),
        (struct.pack("<II", 2, 1) + b"\xff" + struct.pack("<I", 0), "holds text that is not UTF-8 .*utf-8"),
    ],
)
def test_corrupt_chunks_name_the_key(stored: bytes, match: str) -> None:
    p = pipeline([UTF8], (2,), STRING, "")
    assert p.decode(GOOD, "c/0").tolist() == ["a", "bc"]
    with pytest.raises(CorruptChunkError, match=rf"^c/0: .*{match}"):
        p.decode(stored, "c/0")
