"""Malformed .zarray members are MetadataErrors naming the field, never NumPy's or Python's own
exceptions, nor a silently changed value."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.v2 import ArrayMetadataV2

if TYPE_CHECKING:
    from pathlib import Path


def zarray(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f4", "compressor": None,
        "fill_value": 0.0, "order": "C", "filters": None,
    }
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("dtype", "fill_value"),
    [("<f4", 1e300), ("<f4", 10**39), ("<f2", 70000), ("<f8", 10**400), ("<c8", 1e300), ("<c8", 10**39)],
)
def test_float_fill_value_too_large_for_its_type_is_refused(dtype: str, fill_value: Any) -> None:
    # zarr-python reads these as inf (with a RuntimeWarning); the value was not inf.
    with pytest.raises(MetadataError, match=r"fill_value: .* is out of range"):
        ArrayMetadataV2.from_json(zarray(dtype=dtype, fill_value=fill_value))


@pytest.mark.parametrize(
    ("fill_value", "expected"),
    [("Infinity", np.inf), ("-Infinity", -np.inf), (3, 3.0), (3.4e38, np.float32(3.4e38))],
)
def test_float_fill_values_that_fit_are_read(fill_value: Any, expected: float) -> None:
    assert ArrayMetadataV2.from_json(zarray(fill_value=fill_value)).fill_value == expected
    assert np.isnan(ArrayMetadataV2.from_json(zarray(fill_value="NaN")).fill_value)


def test_complex_fill_value_is_its_real_part() -> None:
    assert ArrayMetadataV2.from_json(zarray(dtype="<c8", fill_value=2)).fill_value == np.complex64(2)


@pytest.mark.parametrize("shuffle", [{}, [1], "1", 1.0, True, None])
def test_blosc_shuffle_of_the_wrong_json_type_is_refused(shuffle: Any) -> None:
    compressor = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": shuffle}
    with pytest.raises(MetadataError, match=r"compressor\.shuffle: expected -1, 0, 1 or 2"):
        ArrayMetadataV2.from_json(zarray(compressor=compressor))


@pytest.mark.parametrize("dtype", ["\ud800", [], [["a", "|O"]]])
def test_dtype_numpy_cannot_read_raw_bytes_into_is_refused(dtype: Any) -> None:
    # found by benchmarks/fuzz.py: UnicodeEncodeError from np.dtype, and a zero-size
    # element that failed on read with NumPy's ValueError
    with pytest.raises(MetadataError, match="dtype: "):
        ArrayMetadataV2.from_json(zarray(dtype=dtype))


#: dtype strings NumPy's parser of comma strings refuses with SyntaxError (it hands the repeat
#: counts to ``ast.literal_eval``) or ValueError
FORGED_DTYPES = [",i4", "(,)<u2", "<u2,(1e9,)i", "(1,2<u2", "(9999999999999999999,)<u2"]


@pytest.mark.parametrize("dtype", FORGED_DTYPES)
def test_a_dtype_numpy_cannot_parse_is_refused(dtype: str) -> None:
    # found by benchmarks/fuzz.py (seed 2512): a flipped byte made '<i4' into ',i4', and
    # NumPy raised SyntaxError
    with pytest.raises(MetadataError, match=r"^dtype: .* is not a valid dtype string"):
        ArrayMetadataV2.from_json(zarray(dtype=dtype))
    with pytest.raises(MetadataError, match=r"^dtype: invalid structured dtype"):
        ArrayMetadataV2.from_json(zarray(dtype=[["a", dtype]], fill_value=None))


@pytest.mark.parametrize("dtype", FORGED_DTYPES)
@pytest.mark.parametrize("member", ["encode_dtype", "dtype", "astype"])
def test_a_filter_dtype_numpy_cannot_parse_is_refused(tmp_path: Path, dtype: str, member: str) -> None:
    filters = {
        "encode_dtype": {"id": "astype", "encode_dtype": dtype, "decode_dtype": "<f4"},
        "dtype": {"id": "delta", "dtype": dtype},
        "astype": {"id": "fixedscaleoffset", "offset": 0, "scale": 1, "dtype": "<f4", "astype": dtype},
    }
    (tmp_path / ".zarray").write_text(json.dumps(zarray(filters=[filters[member]])))
    with pytest.raises(MetadataError, match="invalid configuration"):
        gpuzarr.open(tmp_path, mode="r")


# -- fill values given to a create, as .zarray will hold them ---------------------------------------------

_RECORD = np.dtype([("a", "<i4"), ("b", ">f8")])


@pytest.mark.parametrize("fill_value", [[3, -1.5], (3, -1.5), np.array((3, -1.5), _RECORD)[()]])
def test_a_structured_fill_given_as_a_list_or_tuple_is_one_record(tmp_path: Path, fill_value: Any) -> None:
    # A list of one value per field is JSON's record: NumPy made it two records, which read as
    # alternating records in the creating handle and wrote a fill of twice the record's size.
    path = tmp_path / "r.zarr"
    a = gpuzarr.create(path, shape=(4,), chunks=(2,), dtype=_RECORD, fill_value=fill_value, zarr_format=2)
    expected = np.full(4, np.array((3, -1.5), _RECORD))
    assert a.fill_value == expected[0]
    np.testing.assert_array_equal(a[...], expected)
    np.testing.assert_array_equal(gpuzarr.open(path, mode="r")[...], expected)


def test_a_structured_fill_given_as_bytes_is_the_record_of_those_bytes(tmp_path: Path) -> None:
    raw = np.array((7, 2.5), _RECORD).tobytes()
    a = gpuzarr.create(tmp_path / "r.zarr", shape=(2,), dtype=_RECORD, fill_value=raw, zarr_format=2)
    assert a.fill_value.tobytes() == raw
    with pytest.raises(MetadataError, match="fill_value: 3 bytes given for a record of 12 bytes"):
        gpuzarr.create(tmp_path / "s.zarr", shape=(2,), dtype=_RECORD, fill_value=b"abc", zarr_format=2)


@pytest.mark.parametrize("fill_value", [[(1, 2.0), (3, 4.0)], "AAAAAAAAAAAAAAAA", [1, 2, 3]])
def test_a_structured_fill_that_is_no_one_record_is_refused(tmp_path: Path, fill_value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        gpuzarr.create(tmp_path / "r.zarr", shape=(2,), dtype=_RECORD, fill_value=fill_value, zarr_format=2)


def test_a_nan_fill_with_a_payload_is_held_as_v2_writes_it(tmp_path: Path) -> None:
    # .zarray says "NaN": the creating handle kept the payload, so chunks of that NaN were
    # taken for fill and not written, and read back as the plain NaN.
    payload = np.array(0x7FC00001, np.uint32).view(np.float32)[()]
    a = gpuzarr.create(tmp_path / "n.zarr", shape=(4,), chunks=(2,), dtype="f4", fill_value=payload, zarr_format=2)
    assert np.array(a.fill_value, np.float32).view(np.uint32) == 0x7FC00000
    a[...] = np.full(4, payload)
    got = gpuzarr.open(tmp_path / "n.zarr", mode="r")[...]
    assert (got.view(np.uint32) == 0x7FC00001).all()


def test_a_complex_nan_fill_with_a_payload_is_written_as_v2_names_it(tmp_path: Path) -> None:
    # The v3 form (hex bits), which zarr-python refuses and TensorStore's zarr2 driver read as a number.
    real = np.array(0xFFC00000, np.uint32).view(np.float32)[()]
    fill = np.complex64(complex(real, 1.5))
    gpuzarr.create(tmp_path / "c.zarr", shape=(2,), dtype="c8", fill_value=fill, zarr_format=2)
    assert json.loads((tmp_path / "c.zarr" / ".zarray").read_text())["fill_value"] == ["NaN", 1.5]
    got = gpuzarr.open(tmp_path / "c.zarr", mode="r")[...]
    assert np.isnan(got.real).all() and (got.imag == 1.5).all()


def test_nested_structured_dtypes_are_read_and_written(tmp_path: Path) -> None:
    # zarr-python 2 wrote them; the fields of a nested structure were left as JSON lists.
    dtype = np.dtype([("a", "u1"), ("n", [("x", "<f4"), ("y", "S2")]), ("s", "<i2", (2,))])
    data = np.array([(1, (1.5, b"ab"), (3, 4)), (2, (2.5, b"c"), (5, 6))], dtype)
    a = gpuzarr.create(tmp_path / "n.zarr", shape=(2,), dtype=dtype, zarr_format=2)
    a[...] = data
    zarray = json.loads((tmp_path / "n.zarr" / ".zarray").read_text())
    assert zarray["dtype"] == [["a", "|u1"], ["n", [["x", "<f4"], ["y", "|S2"]]], ["s", "<i2", [2]]]
    again = gpuzarr.open(tmp_path / "n.zarr", mode="r")
    assert again.dtype == dtype
    np.testing.assert_array_equal(again[...], data)


def test_a_structured_dtype_in_v3_points_to_v2(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match=r"zarr_format=2"):
        gpuzarr.create(tmp_path / "s.zarr", shape=(2,), dtype=_RECORD)


@pytest.mark.parametrize(
    ("text", "expected"), [("1.5", 1.5), ("-2", -2.0), ("1e3", 1000.0), (".25", 0.25), ("-7.E-1", -0.7)]
)
def test_a_float_fill_value_written_as_a_numeric_string_is_read(text: str, expected: float) -> None:
    # zarr-python and TensorStore's zarr2 driver read these; the value is written back a number.
    metadata = ArrayMetadataV2.from_json(zarray(dtype="<f4", fill_value=text))
    assert metadata.fill_value == np.float32(expected)
    assert metadata.to_json()["fill_value"] == float(np.float32(expected))


@pytest.mark.parametrize("text", ["1_000", " 1.5", "1.5x", "nan", "", "1e"])
def test_other_strings_are_no_float_fill_value(text: str) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        ArrayMetadataV2.from_json(zarray(dtype="<f4", fill_value=text))
