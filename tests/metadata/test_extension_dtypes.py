"""Extension data types (TensorStore's bfloat16, float8/float4, int4/int2) and raw r* types."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.dtypes import EXTENSION_DATA_TYPES, DataType
from gpuzarr.metadata.v2 import parse_v2_dtype

ts = pytest.importorskip("tensorstore")

SAMPLE = [1.5, -2.0, 0.25, 0.0, 1.0, -1.0, 3.0]


def sample(dtype: np.dtype) -> np.ndarray:
    if dtype.name in ("int4", "int2"):
        return np.array([1, -1, 0, 1, -2, 0, 1]).astype(dtype)
    if dtype.name in ("float8_e8m0fnu",):
        return np.array([1.0, 2.0, 0.5, 4.0, 1.0, 8.0, 0.25], dtype=np.float32).astype(dtype)
    return np.array(SAMPLE, dtype=np.float32).astype(dtype)


@pytest.mark.parametrize("name", EXTENSION_DATA_TYPES)
def test_extension_types_parse_to_ml_dtypes(name: str) -> None:
    dt = DataType.from_json(name)
    assert dt.numpy_dtype == np.dtype(getattr(ml_dtypes, name))
    assert dt.to_json() == name
    assert DataType.from_numpy(getattr(ml_dtypes, name)) == dt


@pytest.mark.parametrize("bits", [8, 16, 24, 128])
def test_raw_types_are_void(bits: int) -> None:
    dt = DataType.from_json(f"r{bits}")
    assert dt.numpy_dtype == np.dtype(f"V{bits // 8}")
    fill = dt.fill_value_from_json(list(range(bits // 8)))
    assert dt.fill_value_to_json(fill) == list(range(bits // 8))
    with pytest.raises(MetadataError, match="fill_value"):
        dt.fill_value_from_json(0)
    with pytest.raises(MetadataError, match="fill_value"):
        dt.fill_value_from_json([256] * (bits // 8))


def test_int4_fill_range_checked() -> None:
    dt = DataType.from_json("int4")
    assert int(dt.fill_value_from_json(-8)) == -8
    with pytest.raises(MetadataError, match="out of range"):
        dt.fill_value_from_json(8)


def test_bfloat16_hex_and_nan_fill() -> None:
    dt = DataType.from_json("bfloat16")
    assert np.isnan(dt.fill_value_from_json("0x7fc0"))
    assert dt.fill_value_to_json(dt.fill_value_from_json("NaN")) == "NaN"
    assert dt.fill_value_to_json(dt.fill_value_from_json(1.5)) == 1.5


@pytest.mark.parametrize("name", [n for n in EXTENSION_DATA_TYPES])
@pytest.mark.parametrize("direction", ["gpuzarr_writes", "tensorstore_writes"])
def test_v3_interop_with_tensorstore(tmp_path, name: str, direction: str) -> None:
    path = str(tmp_path / "a.zarr")
    dtype = np.dtype(getattr(ml_dtypes, name))
    x = sample(dtype)
    if direction == "gpuzarr_writes":
        a = gpuzarr.create(path, shape=(10,), dtype=name, chunks=(4,))
        a[:7] = x
    else:
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": path},
            "metadata": {
                "data_type": name,
                "shape": [10],
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            },
        }
        t = ts.open(spec, create=True).result()
        t[:7].write(x).result()
    ours = gpuzarr.open(path)[...]
    theirs = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result().read().result()
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours.astype(np.float32), np.asarray(theirs).astype(np.float32))
    np.testing.assert_array_equal(ours[:7].astype(np.float32), x.astype(np.float32))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "int4"])
def test_v2_interop_with_tensorstore(tmp_path, name: str) -> None:
    dtype = np.dtype(getattr(ml_dtypes, name))
    x = sample(dtype)
    path = str(tmp_path / "g.zarr")
    a = gpuzarr.create(path, zarr_format=2, shape=(10,), dtype=name, chunks=(4,), fill_value=1)
    a[:7] = x
    assert json.loads((tmp_path / "g.zarr" / ".zarray").read_text())["dtype"] == name
    theirs = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path}}).result().read().result()
    expected = np.concatenate([x, np.ones(3, dtype)])
    np.testing.assert_array_equal(np.asarray(theirs).astype(np.float32), expected.astype(np.float32))
    assert parse_v2_dtype(name)[0].name == name


def test_bfloat16_big_endian_round_trip(tmp_path) -> None:
    path = str(tmp_path / "b.zarr")
    a = gpuzarr.create(path, shape=(5,), dtype="bfloat16", chunks=(2,),
                       codecs=[{"name": "bytes", "configuration": {"endian": "big"}}])
    x = np.array([1.5, -2, 3, 0.125, 7], dtype=ml_dtypes.bfloat16)
    a[...] = x
    assert (tmp_path / "b.zarr" / "c" / "0").read_bytes() == bytes.fromhex("3fc0c000")
    theirs = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result().read().result()
    np.testing.assert_array_equal(np.asarray(theirs), x)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_raw_type_round_trip(tmp_path, zarr_format: int) -> None:
    path = str(tmp_path / "r.zarr")
    dtype = "|V3" if zarr_format == 2 else "r24"
    a = gpuzarr.create(path, zarr_format=zarr_format, shape=(3,), dtype=dtype, chunks=(2,), fill_value=b"abc")
    a[:2] = np.array([b"xyz", b"123"], dtype="V3")
    r = gpuzarr.open(path)[...]
    assert r.dtype == np.dtype("V3")
    assert [bytes(v) for v in r] == [b"xyz", b"123", b"abc"]
