"""zarr-python's ``numcodecs.*`` v3 codecs: each one's kind and place in a chain, the data type
and shape its filters hand on, the members filled in from the data type, round trips against
numcodecs itself, and clear errors. Interop with zarr-python is in
tests/integration/test_numcodecs_v3_interop.py."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numcodecs
import numpy as np
import pytest

import gpuzarr
from gpuzarr.codecs.base import ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec
from gpuzarr.codecs.numcodecs_codec import NumcodecsCodec
from gpuzarr.codecs.registry import codec_from_json
from gpuzarr.errors import CorruptChunkError, MetadataError, UnknownCodecError
from gpuzarr.metadata.chain import codec_kind
from gpuzarr.metadata.numcodecs_v3 import ARRAY_TO_ARRAY_IDS, ARRAY_TO_BYTES_IDS, BYTES_TO_BYTES_IDS

from .helpers import LITTLE, assert_roundtrip, pipeline, sample

BIG = {"name": "bytes", "configuration": {"endian": "big"}}


def nc(codec_id: str, **config: Any) -> dict[str, Any]:
    return {"name": f"numcodecs.{codec_id}", "configuration": config}


def test_the_kind_tables_are_zarr_pythons() -> None:
    zarr_codecs = pytest.importorskip("zarr.codecs")
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.registry import get_codec_class

    ours = {i: "a2a" for i in ARRAY_TO_ARRAY_IDS} | {i: "a2b" for i in ARRAY_TO_BYTES_IDS}
    ours |= {i: "b2b" for i in BYTES_TO_BYTES_IDS}
    theirs = {}
    for name in zarr_codecs.numcodecs.__all__:
        cls = getattr(zarr_codecs.numcodecs, name)
        codec_name = getattr(cls, "codec_name", None)
        if name.startswith("_") or not codec_name:
            continue
        assert get_codec_class(codec_name) is cls  # registered under that name
        kind = (
            "a2a" if issubclass(cls, ArrayArrayCodec) else "a2b" if issubclass(cls, ArrayBytesCodec) else "b2b"
        )
        assert issubclass(cls, (ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec))
        theirs[codec_name.removeprefix("numcodecs.")] = kind
    assert ours == theirs


#: A complete configuration of each codec (as numcodecs' get_config() gives, without "id").
CONFIGS: dict[str, dict[str, Any]] = {
    "delta": {"dtype": "<i4"},
    "bitround": {"keepbits": 3},
    "quantize": {"digits": 2, "dtype": "<f8"},
    "astype": {"encode_dtype": "<f4", "decode_dtype": "<f8"},
    "fixedscaleoffset": {"offset": 0, "scale": 1, "dtype": "<f8"},
    "pcodec": {"level": 3},
}


@pytest.mark.parametrize("codec_id", sorted(ARRAY_TO_ARRAY_IDS | BYTES_TO_BYTES_IDS | {"pcodec"}))
def test_each_name_builds_a_codec_of_its_kind(codec_id: str) -> None:
    if codec_id == "pcodec":
        pytest.importorskip("pcodec")
    config = CONFIGS.get(codec_id, {})
    codec = codec_from_json(nc(codec_id, **config))
    expected = {
        "array_to_array": ArrayToArrayCodec,
        "array_to_bytes": ArrayToBytesCodec,
        "bytes_to_bytes": BytesToBytesCodec,
    }[codec_kind(f"numcodecs.{codec_id}") or ""]
    assert isinstance(codec, expected)
    assert codec.to_json() == nc(codec_id, **config)
    # After the array->bytes codec (the Zarr v2 placement) every one runs on bytes.
    placed = codec_from_json(nc(codec_id, **config), after_array_to_bytes=True)
    assert isinstance(placed, NumcodecsCodec)
    assert placed.typed is (codec_id not in BYTES_TO_BYTES_IDS)


# -- filters: data types, shapes and round trips ---------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "dtype", "stage_dtype"),
    [
        ([nc("delta", dtype="<i4")], "<i4", "<i4"),
        ([nc("delta", dtype="<i8", astype="<i2")], "<i8", "<i2"),
        ([nc("fixedscaleoffset", offset=1000, scale=10, dtype="<f8", astype="<u2")], "<f8", "<u2"),
        ([nc("fixedscaleoffset", offset=0, scale=1)], "<f4", "<f4"),
        ([nc("quantize", digits=2)], "<f8", "<f8"),
        ([nc("quantize", digits=2, dtype="<f8", astype="<f4")], "<f8", "<f4"),
        ([nc("bitround", keepbits=4)], "<f4", "<f4"),
        ([nc("astype", encode_dtype="<f4", decode_dtype="<f8")], "<f8", "<f4"),
        ([nc("astype", encode_dtype="<i2")], "<i8", "<i2"),
        # The second filter receives what the first encodes to.
        ([nc("fixedscaleoffset", offset=0, scale=10, dtype="<f8", astype="<i4"), nc("delta", dtype="<i4")],
         "<f8", "<i4"),
    ],
)  # fmt: skip
def test_filters_hand_on_their_encoded_type(filters: list[dict[str, Any]], dtype: str, stage_dtype: str) -> None:
    p = pipeline([*filters, LITTLE], (5, 4), dtype)
    _, bytes_spec = p.array_to_bytes
    assert bytes_spec.dtype == np.dtype(stage_dtype)
    assert bytes_spec.shape == (5, 4)
    assert p.spec.dtype == np.dtype(dtype)


@pytest.mark.parametrize("shape", [(5, 4), (8,), (3, 3, 3), ()])
def test_packbits_hands_on_packed_bytes(shape: tuple[int, ...]) -> None:
    p = pipeline([nc("packbits"), {"name": "bytes"}], shape, "bool")
    _, bytes_spec = p.array_to_bytes
    n = math.prod(shape)
    assert (bytes_spec.shape, bytes_spec.dtype) == ((1 + math.ceil(n / 8),), np.dtype(np.uint8))
    data = sample(shape, "|b1", seed=len(shape))
    encoded = assert_roundtrip([nc("packbits"), {"name": "bytes"}], data)
    assert encoded == numcodecs.PackBits().encode(data).tobytes()


@pytest.mark.parametrize(
    ("codec", "dtype"),
    [
        (nc("delta", dtype="<i4"), "<i4"),
        (nc("delta", dtype="<u2", astype="<i1"), "<u2"),
        (nc("astype", encode_dtype="<i2", decode_dtype="<i8"), "<i8"),
        (nc("astype", encode_dtype="<f8", decode_dtype="<f4"), "<f4"),
    ],
)
@pytest.mark.parametrize("serializer", [LITTLE, BIG])
def test_lossless_filters_roundtrip_to_numcodecs_bytes(codec: dict[str, Any], dtype: str, serializer: Any) -> None:
    data = sample((6, 5), dtype, seed=3)
    encoded = assert_roundtrip([codec, serializer, {"name": "zstd", "configuration": {"level": 1}}], data)
    # The stored elements are numcodecs' encoding of the chunk, in the serializer's byte order.
    reference = numcodecs.get_codec({"id": codec["name"].removeprefix("numcodecs."), **codec["configuration"]})
    expected = np.asarray(reference.encode(data)).reshape(-1)
    order = "<" if serializer is LITTLE else ">"
    raw = numcodecs.Zstd().decode(encoded)
    assert raw == expected.astype(expected.dtype.newbyteorder(order)).tobytes()


@pytest.mark.parametrize(
    ("codec", "dtype", "tolerance"),
    [
        (nc("fixedscaleoffset", offset=1000, scale=10, dtype="<f8", astype="<u2"), "<f8", 0.05),
        (nc("quantize", digits=3, dtype="<f4"), "<f4", 1e-3),
        (nc("bitround", keepbits=6), "<f4", 0.05),
        (nc("bitround", keepbits=2), "<f2", 0.3),
    ],
)
def test_lossy_filters_match_numcodecs(codec: dict[str, Any], dtype: str, tolerance: float) -> None:
    rng = np.random.default_rng(1)
    data = (1000 + rng.uniform(0, 100, size=(6, 5))).astype(dtype)
    p = pipeline([codec, LITTLE], data.shape, dtype)
    decoded = p.decode(p.encode(data), "k")
    reference = numcodecs.get_codec({"id": codec["name"].removeprefix("numcodecs."), **codec["configuration"]})
    expected = np.asarray(reference.decode(reference.encode(data))).reshape(data.shape)
    np.testing.assert_array_equal(decoded, expected.astype(dtype))
    np.testing.assert_allclose(decoded, data, rtol=tolerance)


def test_filters_get_c_ordered_native_chunks_after_a_transpose() -> None:
    # A transpose before delta hands it a transposed view; numcodecs must see it in C order.
    data = sample((4, 6), "<i4", seed=7)
    chain = [{"name": "transpose", "configuration": {"order": [1, 0]}}, nc("delta", dtype="<i4"), BIG]
    encoded = assert_roundtrip(chain, data)
    expected = numcodecs.Delta(dtype="<i4").encode(np.ascontiguousarray(data.T)).astype(">i4")
    assert encoded == expected.tobytes()


_BYTE_ORDER_CASES = [
    ("i4", lambda o: {"id": "delta", "dtype": f"{o}i4"}),
    ("f8", lambda o: {"id": "fixedscaleoffset", "offset": 1, "scale": 10, "dtype": f"{o}f8", "astype": "<i2"}),
    ("f8", lambda o: {"id": "quantize", "digits": 3, "dtype": f"{o}f8"}),
    ("f4", lambda o: {"id": "astype", "encode_dtype": "<f8", "decode_dtype": f"{o}f4"}),
    ("i4", lambda o: {"id": "astype", "encode_dtype": f"{o}i4", "decode_dtype": f"{o}i4"}),
]


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning")
@pytest.mark.parametrize("array_order", ["<", ">"])
@pytest.mark.parametrize("config_order", ["<", ">"])
@pytest.mark.parametrize("case", range(len(_BYTE_ORDER_CASES)))
def test_filters_configured_in_either_byte_order(tmp_path: Any, array_order: str, config_order: str, case: int) -> None:
    # numcodecs views a chunk as its configured type without converting it. A type of the order
    # the array does not store its elements in made gpuzarr's writes read back as garbage, and
    # its reads of zarr-python's such arrays differ from zarr-python's. Now: new arrays name the
    # type in the stored order (so the data comes back in both libraries), and existing ones
    # read as zarr-python reads them.
    zarr = pytest.importorskip("zarr")
    kind, make = _BYTE_ORDER_CASES[case]
    dtype = f"{array_order}{kind}"
    config = make(config_order)
    data = np.array([0.5, -26.1, -20.7, -122.1, 90.0, 57.2]).astype(dtype)
    native = data.astype(data.dtype.newbyteorder("="))
    options = {"shape": data.shape, "dtype": dtype, "chunks": (6,), "compressors": None, "fill_value": 0}
    classes = {"delta": "Delta", "fixedscaleoffset": "FixedScaleOffset", "quantize": "Quantize", "astype": "AsType"}

    def filters() -> list[Any]:  # zarr-python's v3 wrappers of the numcodecs filters
        wrapper = getattr(zarr.codecs.numcodecs, classes[config["id"]])
        return [wrapper(**{k: v for k, v in config.items() if k != "id"})]

    ours = gpuzarr.create_array(tmp_path / "g.zarr", filters=filters(), **options)
    ours[...] = data
    np.testing.assert_allclose(ours[...], native, rtol=2e-2)  # quantize and the scaled ints round
    written = json.loads((tmp_path / "g.zarr" / "zarr.json").read_text())["codecs"][0]["configuration"]
    assert all(not isinstance(v, str) or v[:1] != ">" for k, v in written.items() if k != "id")  # stored order
    theirs = zarr.open_array(str(tmp_path / "g.zarr"), mode="r")[...]
    np.testing.assert_array_equal(theirs.astype(theirs.dtype.newbyteorder("=")), ours[...])
    # zarr-python's own array of the same call: read as zarr-python reads it, whatever it holds.
    with warnings.catch_warnings():  # mixed orders cast garbage: NumPy says so, in both libraries
        warnings.simplefilter("ignore", RuntimeWarning)
        made = zarr.create_array(str(tmp_path / "z.zarr"), filters=filters(), **options)
        made[...] = data
        again = zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[...]
        got = gpuzarr.open(str(tmp_path / "z.zarr"), mode="r")[...]
    np.testing.assert_array_equal(got, again.astype(again.dtype.newbyteorder("=")))
    if array_order == "<" and config_order == "<":
        assert (tmp_path / "g.zarr" / "c" / "0").read_bytes() == (tmp_path / "z.zarr" / "c" / "0").read_bytes()


# -- members zarr-python fills in from the data type -------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "dtype", "filled", "given"),
    [
        (nc("fixedscaleoffset", offset=1, scale=2), "<f8", {"dtype": "float64"}, {"dtype": "<f8"}),
        (nc("quantize", digits=2), "<f4", {"dtype": "float32"}, {"dtype": "<f4"}),
        (nc("astype", encode_dtype="<i2"), "<i8", {"decode_dtype": "int64"}, {"decode_dtype": "<i8"}),
        (nc("shuffle"), "<u2", {"elementsize": 2}, {"elementsize": 1}),
    ],
)
def test_members_derived_from_the_data_type_are_filled_in(
    codec: dict[str, Any], dtype: str, filled: dict[str, Any], given: dict[str, Any]
) -> None:
    def resolved(config: dict[str, Any]) -> dict[str, Any]:
        c = {**codec, "configuration": config}
        chain = [LITTLE, c] if codec["name"] == "numcodecs.shuffle" else [c, LITTLE]
        return next(j for j in pipeline(chain, (4,), dtype).to_json() if j["name"] == codec["name"])

    assert resolved(codec["configuration"])["configuration"] == {**codec["configuration"], **filled}
    assert resolved({**codec["configuration"], **given})["configuration"] == {**codec["configuration"], **given}


def test_v2_shuffle_without_elementsize_is_numcodecs_default() -> None:
    from gpuzarr.metadata.v2 import ArrayMetadataV2

    doc = {
        "zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<u2", "compressor": None,
        "fill_value": 0, "order": "C", "filters": [{"id": "shuffle"}],
    }  # fmt: skip
    metadata = ArrayMetadataV2.from_json(doc)
    assert metadata.codecs[-1] == nc("shuffle", elementsize=4)
    p = pipeline(list(metadata.codecs), (4,), "<u2")
    data = np.arange(4, dtype="<u2")
    assert bytes(memoryview(p.encode(data)).cast("B")) == bytes(numcodecs.Shuffle(elementsize=4).encode(data))


# -- serializers --------------------------------------------------------------------------------------


def test_pcodec_serializer_roundtrip() -> None:
    pytest.importorskip("pcodec")
    data = sample((7, 5), "<f8", seed=2)
    encoded = assert_roundtrip([nc("pcodec", level=3)], data)
    decoded = numcodecs.get_codec({"id": "pcodec", "level": 3}).decode(encoded)
    np.testing.assert_array_equal(np.asarray(decoded).reshape(data.shape), data)
    p = pipeline([nc("pcodec", level=3), nc("zlib", level=1)], data.shape, data.dtype)
    assert isinstance(p.array_to_bytes[0], ArrayToBytesCodec)
    np.testing.assert_array_equal(p.decode(p.encode(data), "k"), data)


def test_missing_serializer_package_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from numcodecs import registry

    monkeypatch.delitem(registry.codec_registry, "zfpy", raising=False)
    with pytest.raises(UnknownCodecError, match="'zfpy' package"):
        codec_from_json(nc("zfpy", mode=4))


# -- compressors and checksums (bytes -> bytes) ------------------------------------------------------


@pytest.mark.parametrize(
    "codec",
    [
        nc("zlib", level=3), nc("gzip", level=1), nc("bz2", level=2), nc("lzma"), nc("lz4"),
        nc("zstd", level=2), nc("blosc"), nc("shuffle"), nc("crc32"), nc("crc32c"), nc("adler32"),
        nc("fletcher32"), nc("jenkins_lookup3"),
    ],
)  # fmt: skip
def test_compressors_get_the_serialized_bytes(codec: dict[str, Any]) -> None:
    data = sample((6, 5), "<i4", seed=4)
    encoded = assert_roundtrip([LITTLE, codec], data)
    # As zarr-python: the numcodecs codec encodes the little-endian bytes as bytes.
    config = dict(codec["configuration"])
    if codec["name"] == "numcodecs.shuffle":
        config["elementsize"] = 4
    reference = numcodecs.get_codec({"id": codec["name"].removeprefix("numcodecs."), **config})
    raw = np.frombuffer(data.astype("<i4").tobytes(), np.uint8)
    if codec["name"] in ("numcodecs.zlib", "numcodecs.gzip"):
        # Deflated by gpuzarr.codecs.deflate (zlib-ng where installed): other bytes than
        # numcodecs' encoder writes, which numcodecs decodes to the same data.
        assert bytes(reference.decode(encoded)) == raw.tobytes()
        return
    assert encoded == bytes(reference.encode(raw))


def test_checksum_mismatch_is_corrupt() -> None:
    data = sample((4, 4), "<i4")
    p = pipeline([LITTLE, nc("crc32")], data.shape, data.dtype)
    stored = bytearray(bytes(memoryview(p.encode(data)).cast("B")))
    stored[-1] ^= 0xFF
    with pytest.raises(CorruptChunkError, match="k:"):
        p.decode(bytes(stored), "k")


# -- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chain", "dtype", "match"),
    [
        ([nc("bitround", keepbits=3), LITTLE], "<i4", r"codecs\[0\] \(numcodecs.bitround\).*float16/32/64.*int32"),
        ([nc("packbits"), LITTLE], "<u1", r"packbits packs bool elements, not uint8"),
        ([nc("delta", dtype="<i8"), LITTLE], "<i4", r"dtype: '<i8' \(8-byte elements\).*int32"),
        ([nc("fixedscaleoffset", offset=0, scale=1, dtype="nonsense"), LITTLE], "<f8", "nonsense"),
        ([nc("delta", dtype="<i4", astype="what"), LITTLE], "<i4", "what"),
        ([nc("quantize", digits=2), LITTLE], "<i4", r"numcodecs.quantize"),
        ([nc("delta"), LITTLE], "<i4", r"numcodecs.delta"),
    ],
)
def test_bad_filters_raise_naming_the_codec(chain: list[Any], dtype: str, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        pipeline(chain, (4,), dtype)


def test_unknown_numcodecs_id_raises() -> None:
    with pytest.raises(UnknownCodecError, match="'nope'"):
        codec_from_json(nc("nope"))
    with pytest.raises(MetadataError, match=r"codecs\[1\].configuration"):
        pipeline([LITTLE, {"name": "numcodecs.zlib", "configuration": [1]}], (2,), "<i4")


def test_corrupt_filter_input_names_the_key() -> None:
    p = pipeline([nc("packbits"), {"name": "bytes"}], (16,), "bool")
    # A packbits header says how many bits of the last byte are padding: 9 is impossible.
    with pytest.raises(CorruptChunkError, match="chunk/0"):
        p.decode(bytes([9, 0xFF, 0xFF]), "chunk/0")
    q = pipeline([nc("pcodec")], (4,), "<f8") if _has_pcodec() else None
    if q is not None:
        with pytest.raises(CorruptChunkError, match="chunk/1"):
            q.decode(b"\x00\x01garbage", "chunk/1")


def _has_pcodec() -> bool:
    try:
        import pcodec  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    "compressor",
    [
        {"id": "zlib", "level": 10**30},
        {"id": "bz2", "level": 99},
        {"id": "lzma", "preset": 99},
        {"id": "lz4", "acceleration": 10**30},
    ],
)
def test_a_configuration_numcodecs_refuses_only_when_coding_fails_the_write(tmp_path: Any, compressor: Any) -> None:
    # numcodecs builds these codecs and fails in encode with OverflowError, ValueError or
    # LZMAError; the array still opens and reads (decoding needs none of those settings).
    doc = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<u2", "compressor": compressor,
           "fill_value": 0, "order": "C", "filters": None}  # fmt: skip
    (tmp_path / ".zarray").write_text(json.dumps(doc))
    a = gpuzarr.open(tmp_path, mode="r+")
    assert a[...].tolist() == [0, 0, 0, 0]
    with pytest.raises(MetadataError, match=rf"^numcodecs\.{compressor['id']}: cannot encode with the configuration"):
        a[...] = np.arange(4, dtype="<u2")
    assert a[...].tolist() == [0, 0, 0, 0]
