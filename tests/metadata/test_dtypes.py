"""Zarr v3 core data types: parsing, NumPy mapping, rejection of everything else."""

from __future__ import annotations

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.dtypes import CORE_DATA_TYPES, DataType

CORE = {
    "bool": np.bool_,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
}


def test_core_table_is_complete() -> None:
    assert set(CORE_DATA_TYPES) == set(CORE)


@pytest.mark.parametrize("name", sorted(CORE))
def test_core_type_parses(name: str) -> None:
    dt = DataType.from_json(name)
    assert dt.name == name
    assert dt.numpy_dtype == np.dtype(CORE[name])
    assert dt.numpy_dtype.isnative
    assert dt.itemsize == np.dtype(CORE[name]).itemsize
    assert dt.to_json() == name
    assert DataType.from_json(dt.to_json()) == dt


@pytest.mark.parametrize("name", sorted(CORE))
def test_from_numpy(name: str) -> None:
    npdt = np.dtype(CORE[name])
    assert DataType.from_numpy(npdt).name == name
    assert DataType.from_numpy(npdt.newbyteorder(">")).name == name
    assert DataType.from_numpy(name).name == name
    assert DataType.from_numpy(DataType.from_json(name)).name == name


@pytest.mark.parametrize("name", sorted(CORE))
def test_default_fill_value_is_zero(name: str) -> None:
    dt = DataType.from_json(name)
    fill = dt.default_fill_value()
    assert fill.dtype == dt.numpy_dtype
    assert not fill


@pytest.mark.parametrize(
    "value",
    [
        "float8_e4m3",
        "strings",
        "r12",
        "r0",
        "<f4",
        "Int32",
        "int 32",
        "",
        "datetime64",
        3,
        None,
        True,
        ["int32"],
        {"name": "foo"},
        {"name": "datetime", "configuration": {"unit": "ns"}},
        {"configuration": {}},
    ],
)
def test_unknown_or_extension_type_raises(value: object) -> None:
    with pytest.raises(MetadataError, match="data_type"):
        DataType.from_json(value)


def test_extension_error_names_custom_field() -> None:
    with pytest.raises(MetadataError, match=r"^codecs\[0\]\.dtype: .*'foo'"):
        DataType.from_json({"name": "foo"}, field="codecs[0].dtype")


def test_extension_error_names_type() -> None:
    with pytest.raises(MetadataError, match="'uint4'"):
        DataType.from_json("uint4")
    with pytest.raises(MetadataError, match="'foo'"):
        DataType.from_json({"name": "foo"})


def test_metadata_error_is_value_error() -> None:
    with pytest.raises(ValueError):
        DataType.from_json("bfloat17")


@pytest.mark.parametrize("dtype", ["O", "U", "S", [("a", "i4")], "float128"])
def test_from_numpy_rejects_types_without_a_v3_name(dtype: object) -> None:
    try:
        np.dtype(dtype)
    except TypeError:
        pytest.skip("dtype unavailable on this platform")
    with pytest.raises(MetadataError, match="dtype"):
        DataType.from_numpy(dtype)


def test_from_numpy_rejects_non_dtype() -> None:
    with pytest.raises(MetadataError, match="dtype"):
        DataType.from_numpy(object())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("|O", r"object array \('\|O'\) needs an object codec"),
        ("<O", "object arrays are written '\\|O'"),
        ("|U3", "needs a byte order"),
        ("<S3", "bytes types are written"),
        ("|M8[s]", "needs a byte order"),
        ("<M8[fortnight]", "not a valid dtype"),
        ("i4", "must start with a byte order"),
        ("|i4", "needs a byte order"),
    ],
)
def test_v2_dtype_errors_say_what_is_wrong(value: str, message: str) -> None:
    from gpuzarr.metadata.v2 import parse_v2_dtype

    with pytest.raises(MetadataError, match=message):
        parse_v2_dtype(value)


@pytest.mark.parametrize("value", ["r17179869184", "r" + "8" * 40])
def test_raw_type_larger_than_numpy_supports_is_refused(value: str) -> None:
    with pytest.raises(MetadataError, match=r"data_type: raw data type .* more than the 2147483647 NumPy supports"):
        DataType.from_json(value)


def test_largest_raw_type_numpy_supports_is_read() -> None:
    assert DataType.from_json(f"r{8 * (2**31 - 1)}").itemsize == 2**31 - 1


@pytest.mark.parametrize("name", ["raw_bytes", "null_terminated_bytes", "fixed_length_utf32"])
def test_length_bytes_larger_than_numpy_supports_is_refused(name: str) -> None:
    value = {"name": name, "configuration": {"length_bytes": 2**33}}
    with pytest.raises(MetadataError, match=r"data_type\.configuration\.length_bytes: at most"):
        DataType.from_json(value)


@pytest.mark.parametrize("dtype", [",i4", "(,)<u2", "<u2,(1e9,)i", "(9999999999999999999,)<u2"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_create_with_a_dtype_numpy_cannot_parse_is_refused(dtype: str, zarr_format: int) -> None:
    with pytest.raises(MetadataError, match=r"^dtype: .* is not a data type"):
        gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype=dtype, zarr_format=zarr_format)
