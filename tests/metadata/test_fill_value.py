"""Fill values in every JSON form the Zarr v3 core spec allows, and their normalised round trip."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuzarr.errors import MetadataError
from gpuzarr.metadata.dtypes import DataType, fill_value_bytes_equal

INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_TYPES = ["float16", "float32", "float64"]
COMPLEX_TYPES = ["complex64", "complex128"]
UINT_OF = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def parse(name: str, value: Any) -> np.generic:
    return DataType.from_json(name).fill_value_from_json(value)


def bits(x: Any) -> int:
    a = np.asarray(x)
    return int(a.view(UINT_OF[a.dtype.itemsize]))


def raw(x: np.generic) -> bytes:
    return np.asarray(x).tobytes()


# -- bool ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, False])
def test_bool(value: bool) -> None:
    fill = parse("bool", value)
    assert fill.dtype == np.bool_ and bool(fill) is value
    assert DataType.from_json("bool").fill_value_to_json(fill) is value


@pytest.mark.parametrize("value", [0, 1, "true", None, 0.0, [True], "NaN"])
def test_bool_rejects_non_bool(value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        parse("bool", value)


# -- integers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", INT_TYPES)
def test_int_range_limits(name: str) -> None:
    info = np.iinfo(np.dtype(name))
    for value in (int(info.min), int(info.max), 0):
        fill = parse(name, value)
        assert fill.dtype == np.dtype(name) and int(fill) == value
        assert DataType.from_json(name).fill_value_to_json(fill) == value
        assert type(DataType.from_json(name).fill_value_to_json(fill)) is int


@pytest.mark.parametrize("name", INT_TYPES)
def test_int_out_of_range(name: str) -> None:
    info = np.iinfo(np.dtype(name))
    for value in (int(info.min) - 1, int(info.max) + 1, 2**200, -(2**200)):
        with pytest.raises(MetadataError, match=r"fill_value.*out of range"):
            parse(name, value)


def test_int_integral_float_accepted() -> None:
    assert int(parse("int32", 7.0)) == 7


@pytest.mark.parametrize(
    "value",
    [1.5, True, False, "1", "NaN", "Infinity", "0x01", None, [1], {"v": 1}, math.nan, math.inf],
)
@pytest.mark.parametrize("name", ["int8", "uint64"])
def test_int_rejects_invalid_forms(name: str, value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        parse(name, value)


# -- floats -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FLOAT_TYPES)
@pytest.mark.parametrize("value", [0, 0.0, -0.0, 1, -2.5, 0.1, 1e-3, 65504.0])
def test_float_numbers(name: str, value: float) -> None:
    fill = parse(name, value)
    assert fill.dtype == np.dtype(name)
    assert raw(fill) == raw(np.dtype(name).type(value))


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_float_special_strings(name: str) -> None:
    dt = DataType.from_json(name)
    nan = parse(name, "NaN")
    assert np.isnan(nan) and bits(nan) == bits(np.array(np.nan, dtype=name))
    assert parse(name, "Infinity") == np.inf
    assert parse(name, "-Infinity") == -np.inf
    assert dt.fill_value_to_json(nan) == "NaN"
    assert dt.fill_value_to_json(parse(name, "Infinity")) == "Infinity"
    assert dt.fill_value_to_json(parse(name, "-Infinity")) == "-Infinity"


@pytest.mark.parametrize(
    ("name", "hexbits", "expected"),
    [
        ("float16", "0x7e00", math.nan),
        ("float16", "0x3c00", 1.0),
        ("float16", "0xfc00", -math.inf),
        ("float16", "0x8000", -0.0),
        ("float32", "0x7fc00000", math.nan),
        ("float32", "0x3f800000", 1.0),
        ("float32", "0x7F800000", math.inf),
        ("float32", "0x00000001", float(np.array(1, np.uint32).view(np.float32))),
        ("float64", "0x7ff8000000000000", math.nan),
        ("float64", "0x3ff0000000000000", 1.0),
        ("float64", "0xc000000000000000", -2.0),
    ],
)
def test_float_hex(name: str, hexbits: str, expected: float) -> None:
    fill = parse(name, hexbits)
    assert fill.dtype == np.dtype(name)
    assert bits(fill) == int(hexbits, 16)
    if math.isnan(expected):
        assert np.isnan(fill)
    else:
        assert float(fill) == expected and math.copysign(1, float(fill)) == math.copysign(1, expected)


@pytest.mark.parametrize(
    ("name", "hexbits"),
    [("float32", "0x7fc00001"), ("float32", "0xffc00000"), ("float16", "0x7e01"),
     ("float32", "0x7f800001"), ("float64", "0x7ff0000000000001"), ("float64", "0xfff8000000000000")],
)
def test_nan_payload_kept_as_hex(name: str, hexbits: str) -> None:
    dt = DataType.from_json(name)
    fill = parse(name, hexbits)
    assert np.isnan(fill) and bits(fill) == int(hexbits, 16)
    assert dt.fill_value_to_json(fill) == hexbits.lower()


@pytest.mark.parametrize("name", FLOAT_TYPES)
@pytest.mark.parametrize(
    "value",
    [
        "nan",
        "inf",
        "+inf",
        "-inf",
        "infinity",
        "1.5",
        "",
        "0x",
        "0x7fc",  # wrong width for every float type
        "0x7fc00",
        "0x7fc0000000",
        "0xzzzzzzzz",
        "0x7fc0_000",
        "0x+7fc000",
        "0x 7fc0000",
        "0x7fc0000 ",
        True,
        False,
        None,
        [1.0],
        {"re": 1.0},
        10**400,
    ],
)
def test_float_rejects_invalid_forms(name: str, value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        parse(name, value)


@pytest.mark.parametrize(("name", "value"), [("float16", 1e5), ("float32", 1e39), ("float16", -70000.0)])
def test_float_overflow_raises(name: str, value: float) -> None:
    with pytest.raises(MetadataError, match=r"fill_value.*out of range"):
        parse(name, value)


def test_float_nan_and_infinity_numbers_accepted() -> None:
    # Python's json module reads NaN / Infinity literals; treat them like the strings.
    assert np.isnan(parse("float64", math.nan))
    assert parse("float16", json.loads("-Infinity")) == -np.inf
    assert parse("float32", math.inf) == np.inf


def test_float_max_rounds_without_overflow() -> None:
    assert parse("float32", 3.4028235e38) == np.finfo(np.float32).max
    assert parse("float16", 65519.0) == np.finfo(np.float16).max


# -- complex ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", COMPLEX_TYPES)
def test_complex_parts(name: str) -> None:
    dt = DataType.from_json(name)
    fill = parse(name, [1.5, -2])
    assert fill.dtype == np.dtype(name) and fill == complex(1.5, -2)
    assert dt.fill_value_to_json(fill) == [1.5, -2.0]
    fill = parse(name, ["NaN", "-Infinity"])
    assert np.isnan(fill.real) and fill.imag == -np.inf
    assert dt.fill_value_to_json(fill) == ["NaN", "-Infinity"]
    part = np.dtype(f"f{np.dtype(name).itemsize // 2}")
    hexlen = 2 * part.itemsize
    one = "0x" + format(bits(part.type(1.0)), f"0{hexlen}x")
    payload = "0x" + format(bits(part.type(np.nan)) | 1, f"0{hexlen}x")
    fill = parse(name, [one, payload])
    assert fill.real == 1.0
    assert bits(np.asarray(fill).real) == bits(part.type(1.0))
    assert bits(np.asarray(fill).imag) == int(payload, 16)
    assert dt.fill_value_to_json(fill) == [1.0, payload]


@pytest.mark.parametrize("name", COMPLEX_TYPES)
@pytest.mark.parametrize(
    "value",
    [1.0, "NaN", [1.0], [1.0, 2.0, 3.0], [], [True, 0.0], [1.0, None], ["x", 0], {"re": 1, "im": 2},
     [1.0, "0x7fc0"], None],
)
def test_complex_rejects_invalid_forms(name: str, value: Any) -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        parse(name, value)


def test_complex_part_error_names_part() -> None:
    with pytest.raises(MetadataError, match=r"fill_value\[1\]"):
        parse("complex64", [0.0, "nope"])


def test_complex64_hex_parts_use_float32_width() -> None:
    with pytest.raises(MetadataError, match="8 digits"):
        parse("complex64", ["0x7ff8000000000000", 0.0])
    assert np.isnan(parse("complex128", ["0x7ff8000000000000", 0.0]).real)


# -- round trips --------------------------------------------------------------------------------


def _json_roundtrip(name: str, fill: np.generic) -> Any:
    dt = DataType.from_json(name)
    doc = dt.fill_value_to_json(fill)
    # Normalised JSON is strict JSON: no NaN/Infinity literals.
    text = json.dumps(doc, allow_nan=False)
    return dt.fill_value_from_json(json.loads(text)), doc


@pytest.mark.parametrize("name", FLOAT_TYPES)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_float_bits_roundtrip(name: str, data: st.DataObject) -> None:
    size = np.dtype(name).itemsize
    pattern = data.draw(st.integers(0, 2 ** (8 * size) - 1))
    fill = np.array(pattern, dtype=UINT_OF[size]).view(name)[()]
    back, doc = _json_roundtrip(name, fill)
    assert back.dtype == np.dtype(name)
    assert bits(back) == pattern
    # Normalised: parsing and writing again gives the same JSON.
    assert DataType.from_json(name).fill_value_to_json(back) == doc


@pytest.mark.parametrize("name", FLOAT_TYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_nan_payloads_roundtrip(name: str, data: st.DataObject) -> None:
    size = np.dtype(name).itemsize
    mant = {2: 10, 4: 23, 8: 52}[size]
    exp_all_ones = (2 ** (8 * size - 1 - mant) - 1) << mant
    sign = data.draw(st.integers(0, 1)) << (8 * size - 1)
    payload = data.draw(st.integers(1, 2**mant - 1))
    pattern = sign | exp_all_ones | payload
    fill = np.array(pattern, dtype=UINT_OF[size]).view(name)[()]
    assert np.isnan(fill)
    back, doc = _json_roundtrip(name, fill)
    assert bits(back) == pattern
    canonical = bits(np.array(np.nan, dtype=name))
    assert (doc == "NaN") == (pattern == canonical)


@pytest.mark.parametrize("name", COMPLEX_TYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_complex_bits_roundtrip(name: str, data: st.DataObject) -> None:
    size = np.dtype(name).itemsize
    half = size // 2
    part = st.integers(0, 2 ** (8 * half) - 1)
    re_bits, im_bits = data.draw(st.tuples(part, part))
    fill = np.array([re_bits, im_bits], dtype=UINT_OF[half]).view(name)[0]
    back, doc = _json_roundtrip(name, fill)
    assert raw(back) == raw(fill)
    assert isinstance(doc, list) and len(doc) == 2
    assert DataType.from_json(name).fill_value_to_json(back) == doc


@pytest.mark.parametrize("name", INT_TYPES)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_int_roundtrip(name: str, data: st.DataObject) -> None:
    info = np.iinfo(np.dtype(name))
    value = data.draw(st.integers(int(info.min), int(info.max)))
    back, doc = _json_roundtrip(name, parse(name, value))
    assert doc == value and int(back) == value and back.dtype == np.dtype(name)


@pytest.mark.parametrize(
    ("name", "given_json", "normalised"),
    [
        ("float32", "0x7fc00000", "NaN"),
        ("float16", "0x7e00", "NaN"),
        ("float64", "0x7ff8000000000000", "NaN"),
        ("float32", "0x7f800000", "Infinity"),
        ("float64", "0xfff0000000000000", "-Infinity"),
        ("float32", "0x3f800000", 1.0),
        ("float64", 2, 2.0),
        ("int16", 3.0, 3),
        ("complex64", [0, "0x7fc00000"], [0.0, "NaN"]),
    ],
)
def test_normalised_form(name: str, given_json: Any, normalised: Any) -> None:
    dt = DataType.from_json(name)
    assert dt.fill_value_to_json(dt.fill_value_from_json(given_json)) == normalised


# -- user-supplied fill values and comparison ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("int32", None, 0),
        ("int32", np.int64(5), 5),
        ("float32", 1.5, 1.5),
        ("float64", "NaN", math.nan),
        ("bool", 1, True),
        ("uint8", 255, 255),
        ("complex64", 1 + 2j, 1 + 2j),
    ],
)
def test_fill_value_from_python(name: str, value: Any, expected: Any) -> None:
    fill = DataType.from_json(name).fill_value_from_python(value)
    assert fill.dtype == np.dtype(name)
    if isinstance(expected, float) and math.isnan(expected):
        assert np.isnan(fill)
    else:
        assert fill == expected


def test_fill_value_from_python_range_checked() -> None:
    with pytest.raises(MetadataError, match="fill_value"):
        DataType.from_json("uint8").fill_value_from_python(256)


def test_fill_value_bytes_equal() -> None:
    a = np.full(4, np.nan, dtype=np.float32)
    assert fill_value_bytes_equal(a, np.float32(np.nan))
    assert not fill_value_bytes_equal(a, np.float32(0))
    c = np.full(3, complex(np.nan, 1), dtype=np.complex64)
    assert fill_value_bytes_equal(c, np.complex64(complex(np.nan, 1)))
    assert not fill_value_bytes_equal(c, np.complex64(complex(np.nan, 2)))
    assert fill_value_bytes_equal(np.zeros(5, np.int16), np.int16(0))
    assert not fill_value_bytes_equal(np.arange(3), np.int64(0))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "longdouble"])
def test_a_zero_equals_only_a_zero_of_its_own_sign(dtype: str) -> None:
    """-0.0 == 0.0, but a chunk of -0.0 written into an array whose fill is 0.0 must be stored
    (and read back with its sign), as zarr-python and TensorStore do."""
    import ml_dtypes

    dt = np.dtype(getattr(ml_dtypes, dtype, dtype))
    zeros, negative = np.zeros((3, 4), dt), -np.zeros((3, 4), dt)
    assert fill_value_bytes_equal(zeros, dt.type(0)) and fill_value_bytes_equal(negative, negative[0, 0])
    assert not fill_value_bytes_equal(negative, dt.type(0))
    assert not fill_value_bytes_equal(zeros[:, ::2], negative[0, 0])
    mixed = zeros.copy()
    mixed[2, 3] = negative[0, 0]
    assert not fill_value_bytes_equal(mixed, dt.type(0))


def test_complex_zero_parts_keep_their_signs() -> None:
    c = np.full(3, complex(1, -0.0), np.complex64)
    assert fill_value_bytes_equal(c, np.complex64(complex(1, -0.0)))
    assert not fill_value_bytes_equal(c, np.complex64(complex(1, 0)))
    assert not fill_value_bytes_equal(np.full(2, complex(-0.0, 0), np.complex128), np.complex128(0))


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("shards", [None, (4,)])
def test_negative_zeros_are_stored_and_read_back(tmp_path: Any, zarr_format: int, shards: Any) -> None:
    if shards is not None and zarr_format == 2:
        pytest.skip("v2 has no sharding")
    import gpuzarr

    a = gpuzarr.create_array(str(tmp_path / "a.zarr"), shape=(8,), chunks=(2,), shards=shards, dtype="f4",
                             fill_value=0.0, zarr_format=zarr_format)  # fmt: skip
    a[...] = np.array([-0.0, -0.0, 0.0, 0.0, 1, 2, 0.0, -0.0], "f4")
    got = gpuzarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    np.testing.assert_array_equal(np.signbit(got), [True, True, False, False, False, False, False, True])


def test_a_zero_part_beside_a_nan_part_keeps_its_sign() -> None:
    fill = np.complex64(complex(0.0, np.nan))
    assert fill_value_bytes_equal(np.full(3, complex(0.0, np.nan), np.complex64), fill)
    assert not fill_value_bytes_equal(np.full(3, complex(-0.0, np.nan), np.complex64), fill)


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8", "c8", "c16"])
def test_a_chunk_of_other_nans_than_the_fill_nan_is_stored(tmp_path: Any, dtype: str) -> None:
    """A chunk of NaNs was the fill value whatever their sign and payload: ``inf - inf`` (a NaN
    with the sign bit set on x86) read back as the fill NaN. Compared by bits now, as -0.0; a
    chunk of the fill's own NaN is still not stored."""
    import gpuzarr

    path = str(tmp_path / "a.zarr")
    array = gpuzarr.create(path, shape=(8,), chunks=(4,), dtype=dtype, fill_value=np.nan, device="cpu")
    with np.errstate(invalid="ignore"):
        negative = np.full(4, np.inf, dtype=dtype) - np.inf
    assert np.signbit(negative.real if negative.dtype.kind == "c" else negative).all()
    array[0:4] = negative
    array[4:8] = np.full(4, np.nan, dtype=dtype)
    stored = sorted(p.name for p in (tmp_path / "a.zarr" / "c").iterdir())
    assert stored == ["0"]  # the chunk of the fill's own NaN is not written
    got = gpuzarr.open(path, mode="r")[...]
    assert got[0:4].tobytes() == negative.tobytes()
