"""zarr-python 3's string, bytes and time data types: v3 JSON, v2 dtype strings, NumPy dtypes and
fill values (every JSON form zarr-python writes or reads, and the errors for the rest)."""

from __future__ import annotations

import base64
import datetime
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.dtypes import DataType, fill_value_bytes_equal
from gpuzarr.metadata.named_dtypes import full
from gpuzarr.metadata.v2 import ArrayMetadataV2, object_codec_of, parse_v2_dtype, v2_dtype_string

if TYPE_CHECKING:
    from pathlib import Path

STRING = np.dtypes.StringDType()
NAT = -(2**63)


def b64(raw: bytes) -> str:
    return base64.standard_b64encode(raw).decode()


def time_type(name: str, unit: str, scale: int = 1) -> dict[str, Any]:
    return {"name": f"numpy.{name}", "configuration": {"unit": unit, "scale_factor": scale}}


def length_type(name: str, length: int) -> dict[str, Any]:
    return {"name": name, "configuration": {"length_bytes": length}}


# -- v3 data_type JSON <-> NumPy ----------------------------------------------------------------------

V3_TYPES = [
    ("string", STRING),
    ("variable_length_bytes", np.dtype(object)),
    ("bytes", np.dtype(object)),  # the zarr-extensions name, which zarr-python reads too
    (length_type("null_terminated_bytes", 8), np.dtype("S8")),
    (length_type("fixed_length_utf32", 12), np.dtype("U3")),
    (length_type("raw_bytes", 5), np.dtype("V5")),
    (time_type("datetime64", "s"), np.dtype("M8[s]")),
    (time_type("datetime64", "ms", 10), np.dtype("M8[10ms]")),
    (time_type("datetime64", "generic"), np.dtype("M8")),
    (time_type("timedelta64", "ns"), np.dtype("m8[ns]")),
    (time_type("timedelta64", "D", 7), np.dtype("m8[7D]")),
]


@pytest.mark.parametrize(("doc", "dtype"), V3_TYPES, ids=lambda v: json.dumps(v) if isinstance(v, dict) else str(v))
def test_v3_json_maps_to_numpy_and_back(doc: Any, dtype: np.dtype[Any]) -> None:
    data_type = DataType.from_json(doc)
    assert data_type.numpy_dtype == dtype
    assert data_type.to_json() == doc
    assert DataType.from_json(json.loads(json.dumps(data_type.to_json()))) == data_type


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (length_type("null_terminated_bytes", 0), "length_bytes"),
        (length_type("raw_bytes", "4"), "length_bytes"),
        (length_type("raw_bytes", True), "length_bytes"),
        (length_type("fixed_length_utf32", 6), "multiple of 4"),
        ({"name": "null_terminated_bytes"}, "configuration"),
        ({"name": "raw_bytes", "configuration": {"length_bytes": 4, "x": 1}}, "configuration"),
        (time_type("datetime64", "fortnight"), "unit"),
        (time_type("datetime64", "s", 0), "scale_factor"),
        (time_type("timedelta64", "s", 2**31), "scale_factor"),
        (time_type("timedelta64", "s", True), "scale_factor"),
        (time_type("datetime64", "generic", 2), "generic"),
        ({"name": "numpy.datetime64", "configuration": {"unit": "s"}}, "configuration"),
        ({"name": "string", "configuration": {"x": 1}}, "takes no configuration"),
        ({"name": "string", "must_understand": False}, "unexpected members"),
    ],
)
def test_bad_v3_json_names_the_field(doc: Any, field: str) -> None:
    with pytest.raises(MetadataError, match=f"^data_type.*{field}"):
        DataType.from_json(doc)


def test_name_only_objects_are_read() -> None:
    assert DataType.from_json({"name": "string"}).numpy_dtype == STRING
    assert DataType.from_json({"name": "variable_length_bytes", "configuration": {}}).to_json() == (
        "variable_length_bytes"
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (str, "string"),
        ("str", "string"),
        ("string", "string"),
        (STRING, "string"),
        (np.dtypes.StringDType(coerce=False), "string"),
        ("variable_length_bytes", "variable_length_bytes"),
        ("bytes", "bytes"),
        (np.dtype("S4"), length_type("null_terminated_bytes", 4)),
        ("U3", length_type("fixed_length_utf32", 12)),
        (">U3", length_type("fixed_length_utf32", 12)),
        ("M8[s]", time_type("datetime64", "s")),
        (">m8[10us]", time_type("timedelta64", "us", 10)),
        (np.dtype("V4"), length_type("raw_bytes", 4)),
        ("r32", "r32"),  # the core spec's raw type, when asked for by name
        (time_type("datetime64", "h", 6), time_type("datetime64", "h", 6)),
    ],
)
def test_from_numpy_names_the_types_as_zarr_python(given: Any, expected: Any) -> None:
    data_type = DataType.from_numpy(given)
    assert data_type.to_json() == expected
    assert data_type.numpy_dtype.isnative
    if expected == "string":
        assert data_type.numpy_dtype == STRING  # what reads return, as in zarr-python


@pytest.mark.parametrize(
    ("given", "match"),
    [
        (object, "ambiguous"),
        ("S0", "has no length"),
        (np.dtype("U0"), "'string'"),
        (np.dtypes.StringDType(na_object=None), "na_object"),
    ],
)
def test_from_numpy_rejects_what_zarr_python_rejects(given: Any, match: str) -> None:
    with pytest.raises(MetadataError, match=f"^dtype: .*{match}"):
        DataType.from_numpy(given)


def test_object_codec_and_byte_order() -> None:
    assert DataType.from_json("string").object_codec_id == "vlen-utf8"
    assert DataType.from_json("bytes").object_codec_id == "vlen-bytes"
    assert DataType.from_json("variable_length_bytes").object_codec_id == "vlen-bytes"
    assert DataType.from_json("int32").object_codec_id is None
    ordered = {json.dumps(doc): DataType.from_json(doc).has_endianness for doc, _ in V3_TYPES}
    assert [k for k, v in ordered.items() if v] == [
        json.dumps(length_type("fixed_length_utf32", 12)),
        *(json.dumps(doc) for doc, dt in V3_TYPES if dt.kind in "mM"),
    ]


# -- fill values ----------------------------------------------------------------------------------------


def fill(doc: Any, value: Any) -> Any:
    return DataType.from_json(doc).fill_value_from_json(value)


def to_json(doc: Any, value: Any) -> Any:
    return DataType.from_json(doc).fill_value_to_json(value)


@pytest.mark.parametrize("value", ["", "abc", "ünïcödé ✓", "a\x00"])
def test_string_fill_round_trips(value: str) -> None:
    got = fill("string", value)
    assert type(got) is str and got == value
    assert to_json("string", got) == value


def test_string_fill_reads_numbers_as_zarr_python_does() -> None:
    assert fill("string", 0) == "0"
    assert fill("string", 1.5) == "1.5"


@pytest.mark.parametrize("value", [None, True, [], {"a": 1}])
def test_string_fill_rejects_non_text(value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value: expected a string for string"):
        fill("string", value)


@pytest.mark.parametrize("doc", ["string", length_type("fixed_length_utf32", 12)])
def test_text_fill_rejects_lone_surrogates(doc: Any) -> None:
    """JSON can escape half a surrogate pair ("\\ud800"): no Unicode text (a write of a string
    array with it as fill value raised a TypeError in NumPy's comparison)."""
    with pytest.raises(MetadataError, match=r"fill_value: .* is not Unicode text"):
        fill(doc, "a\ud800")


def test_fixed_utf32_fill() -> None:
    doc = length_type("fixed_length_utf32", 12)
    assert fill(doc, "ab") == np.str_("ab") and fill(doc, "abc").dtype == np.dtype("U3")
    assert to_json(doc, fill(doc, "ab")) == "ab"
    with pytest.raises(MetadataError, match="more than the 3 characters"):
        fill(doc, "abcd")
    with pytest.raises(MetadataError, match="expected a string"):
        fill(doc, 3)


@pytest.mark.parametrize("raw", [b"", b"a", b"\x00b\x00\x00", bytes(range(256))])
def test_vlen_bytes_fill_keeps_every_byte(raw: bytes) -> None:
    got = fill("variable_length_bytes", b64(raw))
    assert type(got) is bytes and got == raw
    assert to_json("variable_length_bytes", got) == b64(raw)
    assert fill("bytes", b64(raw)) == raw


def test_null_terminated_bytes_fill() -> None:
    doc = length_type("null_terminated_bytes", 4)
    assert fill(doc, b64(b"ab")) == b"ab"
    assert fill(doc, b64(b"ab\x00\x00")) == b"ab"  # NumPy's S type drops trailing NULs
    assert to_json(doc, fill(doc, b64(b"abcd"))) == b64(b"abcd")
    with pytest.raises(MetadataError, match="5 bytes do not fit the 4"):
        fill(doc, b64(b"abcde"))


def test_raw_bytes_fill_is_base64_of_every_byte() -> None:
    doc = length_type("raw_bytes", 3)
    got = fill(doc, b64(b"\x01\x00\x02"))
    assert got.dtype == np.dtype("V3") and got.tobytes() == b"\x01\x00\x02"
    assert to_json(doc, got) == b64(b"\x01\x00\x02")
    with pytest.raises(MetadataError, match="expected 3 bytes"):
        fill(doc, b64(b"ab"))


@pytest.mark.parametrize("doc", ["variable_length_bytes", length_type("null_terminated_bytes", 4)])
@pytest.mark.parametrize(("value", "match"), [("not base64!", "not valid base64"), (3, "expected a base64 string")])
def test_bytes_fill_errors(doc: Any, value: Any, match: str) -> None:
    with pytest.raises(MetadataError, match=f"fill_value: .*{match}"):
        fill(doc, value)


@pytest.mark.parametrize("name", ["datetime64", "timedelta64"])
def test_time_fill_is_a_count_of_units(name: str) -> None:
    doc = time_type(name, "ms", 10)
    got = fill(doc, 5)
    assert got.dtype == np.dtype(f"{'M' if name == 'datetime64' else 'm'}8[10ms]")
    assert int(np.asarray(got).view(np.int64)) == 5
    assert to_json(doc, got) == 5
    nat = fill(doc, "NaT")
    assert np.isnat(nat) and to_json(doc, nat) == NAT
    assert np.isnat(fill(doc, NAT))
    assert to_json(doc, fill(doc, 2**63 - 1)) == 2**63 - 1


@pytest.mark.parametrize("value", [2**63, NAT - 1, 1.5, True, "2020-01-01", None, [1]])
def test_time_fill_rejects(value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        fill(time_type("datetime64", "s"), value)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("string", ""),
        ("variable_length_bytes", b""),
        (length_type("null_terminated_bytes", 3), b""),
        (length_type("fixed_length_utf32", 8), ""),
        (length_type("raw_bytes", 2), b"\x00\x00"),
    ],
)
def test_default_fill_values_match_zarr_python(doc: Any, expected: Any) -> None:
    default = DataType.from_json(doc).default_fill_value()
    assert (default.tobytes() if isinstance(default, np.void) else default) == expected


@pytest.mark.parametrize("name", ["datetime64", "timedelta64"])
def test_default_time_fill_is_nat(name: str) -> None:
    data_type = DataType.from_json(time_type(name, "s"))
    assert np.isnat(data_type.default_fill_value())
    assert data_type.fill_value_to_json(data_type.default_fill_value()) == NAT


def test_time_fill_from_python() -> None:
    data_type = DataType.from_json(time_type("datetime64", "ms", 10))
    expected = np.datetime64("2020-01-02T03:04:05.670", "10ms")
    assert data_type.fill_value_from_python("2020-01-02T03:04:05.67") == expected
    assert data_type.fill_value_from_python(datetime.datetime(2020, 1, 2, 3, 4, 5, 670000)) == expected
    assert data_type.fill_value_from_python(np.datetime64("2020-01-02T03:04:05.670000", "us")) == expected
    assert data_type.fill_value_from_python(3) == np.datetime64(30, "ms")
    assert np.isnat(data_type.fill_value_from_python("NaT"))
    assert np.isnat(data_type.fill_value_from_python(None))
    delta = DataType.from_json(time_type("timedelta64", "s"))
    assert delta.fill_value_from_python(datetime.timedelta(minutes=2)) == np.timedelta64(120, "s")
    # NumPy's timedelta64 is an np.integer, but a time of its own unit, not a count of the array's
    assert delta.fill_value_from_python(np.timedelta64(3, "m")) == np.timedelta64(180, "s")
    assert delta.fill_value_from_python(np.timedelta64(-5, "s")) == np.timedelta64(-5, "s")
    assert np.isnat(delta.fill_value_from_python(np.timedelta64("NaT")))
    assert np.isnat(data_type.fill_value_from_python(np.datetime64("NaT")))
    for bad in (1.5, True, "yesterday", object()):
        with pytest.raises(MetadataError, match="fill_value"):
            data_type.fill_value_from_python(bad)


def test_text_and_bytes_fill_from_python() -> None:
    assert DataType.from_json("string").fill_value_from_python(12) == "12"
    assert DataType.from_json("string").fill_value_from_python("ab") == "ab"
    with pytest.raises(MetadataError, match="expected a str"):
        DataType.from_json("string").fill_value_from_python(b"ab")
    utf32 = DataType.from_json(length_type("fixed_length_utf32", 8))
    with pytest.raises(MetadataError, match="more than the 2 characters"):
        utf32.fill_value_from_python("abc")
    vlen = DataType.from_json("variable_length_bytes")
    assert vlen.fill_value_from_python("é") == "é".encode()
    assert vlen.fill_value_from_python(bytearray(b"a\x00")) == b"a\x00"
    with pytest.raises(MetadataError, match="expected bytes"):
        vlen.fill_value_from_python(3)
    fixed = DataType.from_json(length_type("null_terminated_bytes", 2))
    with pytest.raises(MetadataError, match="3 bytes do not fit the 2"):
        fixed.fill_value_from_python(b"abc")
    raw = DataType.from_json(length_type("raw_bytes", 2))
    assert raw.fill_value_from_python([1, 2]).tobytes() == b"\x01\x02"
    assert raw.fill_value_from_python(b"\x03\x04").tobytes() == b"\x03\x04"
    with pytest.raises(MetadataError, match="byte values"):
        raw.fill_value_from_python([1, 256])


def test_fill_comparison_of_times_treats_nat_as_equal() -> None:
    nat = DataType.from_json(time_type("datetime64", "s")).default_fill_value()
    chunk = np.full((3, 4), np.datetime64("NaT", "s"), dtype="M8[s]")
    assert fill_value_bytes_equal(chunk, nat)
    chunk[2, 3] = np.datetime64(0, "s")
    assert not fill_value_bytes_equal(chunk, nat)
    assert fill_value_bytes_equal(chunk[:, :3], nat)


def test_fill_comparison_of_strings_and_bytes() -> None:
    assert fill_value_bytes_equal(np.array([["", ""]], dtype=STRING), "")
    assert not fill_value_bytes_equal(np.array([["", "x"]], dtype=STRING), "")
    objects = np.empty((2, 2), dtype=object)
    objects.fill(b"a\x00")
    assert fill_value_bytes_equal(objects, b"a\x00")
    assert not fill_value_bytes_equal(objects, b"a")


def test_full_keeps_the_exact_fill_object() -> None:
    out = full((2, 3), b"a\x00", np.dtype(object))
    assert out.shape == (2, 3) and all(v == b"a\x00" for v in out.ravel())
    assert full((2,), "x", STRING).tolist() == ["x", "x"]


# -- Zarr v2 ------------------------------------------------------------------------------------------

V2_TYPES = [
    ("|S8", None, length_type("null_terminated_bytes", 8), None),
    ("<U3", None, length_type("fixed_length_utf32", 12), "little"),
    (">U3", None, length_type("fixed_length_utf32", 12), "big"),
    ("<M8[10ms]", None, time_type("datetime64", "ms", 10), "little"),
    (">m8", None, time_type("timedelta64", "generic"), "big"),
    ("<m8[ns]", None, time_type("timedelta64", "ns"), "little"),
    ("|O", "vlen-utf8", "string", None),
    ("|O", "vlen-bytes", "variable_length_bytes", None),
]


@pytest.mark.parametrize(("v2", "object_codec", "v3", "endian"), V2_TYPES)
def test_v2_dtype_strings(v2: str, object_codec: str | None, v3: Any, endian: str | None) -> None:
    data_type, got_endian = parse_v2_dtype(v2, object_codec=object_codec)
    assert data_type.to_json() == v3
    assert got_endian == endian
    assert data_type.numpy_dtype.isnative
    assert v2_dtype_string(data_type, endian) == v2


@pytest.mark.parametrize(
    ("object_codec", "match"),
    [(None, "needs an object codec"), ("pickle", "'pickle' are not supported"), ("json2", "'json2'")],
)
def test_v2_object_arrays_need_a_vlen_codec(object_codec: str | None, match: str) -> None:
    with pytest.raises(MetadataError, match=f"^dtype: .*{match}"):
        parse_v2_dtype("|O", object_codec=object_codec)


def test_object_codec_is_found_in_filters_or_compressor() -> None:
    assert object_codec_of(None, {"id": "vlen-bytes"}) == "vlen-bytes"
    assert object_codec_of([{"id": "delta"}, {"id": "vlen-utf8"}], {"id": "zstd"}) == "vlen-utf8"
    assert object_codec_of([{"id": "delta"}], None) is None


def zarray(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 2, "shape": [6, 5], "chunks": [4, 2], "dtype": "|O", "compressor": {"id": "zstd", "level": 1},
        "fill_value": None, "order": "C", "filters": [{"id": "vlen-utf8"}],
    }  # fmt: skip
    doc.update(changes)
    return doc


def test_v2_object_array_chain() -> None:
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
    metadata = ArrayMetadataV2.from_json(zarray())
    assert metadata.dtype == STRING
    assert metadata.codecs == ({"name": "vlen-utf8", "configuration": {}}, zstd)
    assert metadata.fill_value == ""
    assert metadata.to_json()["filters"] == [{"id": "vlen-utf8"}]
    fortran = ArrayMetadataV2.from_json(zarray(order="F", filters=[{"id": "vlen-bytes"}]))
    assert fortran.dtype == np.dtype(object)
    assert [c["name"] for c in fortran.codecs] == ["transpose", "vlen-bytes", "zstd"]
    # The object codec as the compressor, with no filters (a layout zarr-python reads too).
    alone = ArrayMetadataV2.from_json(zarray(filters=None, compressor={"id": "vlen-utf8"}))
    assert alone.codecs == ({"name": "vlen-utf8", "configuration": {}},)
    # Blosc after an object codec compresses plain bytes: typesize 1.
    blosc = ArrayMetadataV2.from_json(zarray(compressor={"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}))
    assert blosc.codecs[1]["configuration"]["typesize"] == 1


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"filters": [{"id": "zlib"}, {"id": "vlen-utf8"}]}, r"^filters\[0\]: the object codec 'vlen-utf8'"),
        ({"filters": [{"id": "vlen-utf8", "x": 1}]}, r"^filters\[0\]: unexpected members \['x'\]"),
        ({"filters": None}, r"^dtype: .*needs an object codec"),
        ({"filters": [{"id": "msgpack2"}]}, r"^dtype: .*'msgpack2' are not supported"),
        ({"fill_value": 3, "filters": [{"id": "vlen-bytes"}]}, r"^fill_value: expected a base64 string"),
    ],
)
def test_v2_object_array_errors(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        ArrayMetadataV2.from_json(zarray(**changes))


@pytest.mark.parametrize(
    ("dtype", "stored", "python", "written"),
    [
        ("|O", "", "", ""),
        ("|O", 0, "0", "0"),  # zarr-python 2 wrote numbers for string arrays
        ("|S4", b64(b"ab"), b"ab", b64(b"ab\x00\x00")),  # written whole, which TensorStore needs
        ("|S4", b64(b"abcd"), b"abcd", b64(b"abcd")),
        ("<U2", "hé", "hé", "hé"),
        ("<M8[s]", NAT, np.datetime64("NaT", "s"), NAT),
        ("<m8[ns]", 42, np.timedelta64(42, "ns"), 42),
    ],
)
def test_v2_fill_values(dtype: str, stored: Any, python: Any, written: Any) -> None:
    metadata = ArrayMetadataV2.from_json(zarray(dtype=dtype, fill_value=stored, filters=None, compressor=None)
                                         if dtype != "|O" else zarray(fill_value=stored))
    got = metadata.fill_value
    if isinstance(python, np.datetime64):
        assert np.isnat(got)
    else:
        assert got == python
    assert metadata.to_json()["fill_value"] == written
    assert ArrayMetadataV2.from_json(json.loads(json.dumps(metadata.to_json()))).to_json() == metadata.to_json()


def test_v2_null_fill_reads_as_the_types_default() -> None:
    assert ArrayMetadataV2.from_json(zarray()).fill_value == ""
    times = ArrayMetadataV2.from_json(zarray(dtype="<M8[s]", filters=None))
    assert times.fill_value_v2 is None and np.isnat(times.fill_value)


@pytest.mark.parametrize("dtype", ["M8", "m8"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_time_of_generic_unit_holds_only_nat(tmp_path: Path, dtype: str, zarr_format: int) -> None:
    # NumPy converts no other value of it: the array was created, and reading its fill_value
    # raised a bare ValueError ever after (zarr-python refuses such arrays).
    value = np.datetime64("2000-01-01") if dtype == "M8" else np.timedelta64(3, "D")
    for fill in (value, 10957):
        with pytest.raises(MetadataError, match=r"generic unit .* holds only NaT"):
            gpuzarr.create(tmp_path / "t.zarr", shape=(2,), dtype=dtype, fill_value=fill, zarr_format=zarr_format)
    a = gpuzarr.create(tmp_path / "t.zarr", shape=(2,), dtype=dtype, fill_value="NaT", zarr_format=zarr_format)
    assert np.isnat(a.fill_value) and np.isnat(a[...]).all()
