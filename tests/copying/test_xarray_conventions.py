"""``gpuzarr.convert`` (and so ``gpuzarr convert``) across formats keeps what xarray reads:
dimension names and ``_FillValue`` translated between Zarr v2 and v3 as xarray's own
``to_zarr`` writes them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.copying.xarray_conventions import decode_fill_attribute, encode_fill_attribute
from gpuzarr.errors import MetadataError

if TYPE_CHECKING:
    from pathlib import Path

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
xarray_cases = pytest.importorskip("tests.integrations.xarray_cases")


def _dataset() -> Any:
    """CF encodings whose Zarr form differs between v2 and v3: _FillValue on integers and floats,
    scale/offset packing, times with NaT, a scalar, strings, and a variable whose chunks are
    all zero (so a v3 source stores none of them, and they read as its fill value 0)."""
    masked = np.where(np.arange(12) % 5 == 0, np.nan, 2.5)
    packed = np.linspace(0, 1, 12)
    packed[3] = np.nan
    when = pd.date_range("2001-01-01", periods=12, freq="h").values.copy()
    when[4] = np.datetime64("NaT", "ns")
    ds = xr.Dataset(
        {
            "ints": ("x", np.arange(12, dtype="i4") - 3),
            "floats": ("x", masked.astype("f4")),
            "packed": ("x", packed),
            "when": ("x", when),
            "zeros": ("x", np.zeros(12, dtype="i2")),
            "scalar": ((), 1.5),
            "name": ("x", np.array([f"n{i}" for i in range(12)], dtype=object)),
        },
        coords={"x": np.arange(12) * 0.5},
        attrs={"title": "fill values"},
    )
    ds["ints"].encoding = {"_FillValue": -1, "chunks": (4,)}
    ds["floats"].encoding = {"_FillValue": -1, "chunks": (4,)}
    ds["packed"].encoding = {"scale_factor": 0.01, "add_offset": 1.0, "dtype": "i2", "_FillValue": -9999}
    ds["zeros"].encoding = {"_FillValue": -1, "chunks": (4,)}
    return ds


@pytest.mark.parametrize(("source_format", "target_format"), [(2, 3), (3, 2)])
def test_convert_keeps_what_xarray_reads(tmp_path: Path, source_format: int, target_format: int) -> None:
    source = xarray_cases.write(_dataset(), tmp_path / "src.zarr", source_format, consolidated=True)
    target = tmp_path / "dst.zarr"
    gpuzarr.convert(source, target, zarr_format=target_format)
    expected = xarray_cases.open_zarr_engine(source).load()
    found = xarray_cases.open_zarr_engine(target).load()
    xr.testing.assert_identical(found, expected)
    assert found["ints"].encoding["_FillValue"] == -1 and np.isnan(found["ints"].values[2])
    assert np.isnan(found["zeros"].values).sum() == 0  # chunks SRC did not store read as 0, not -1


def test_fill_value_moves_between_attribute_and_metadata(tmp_path: Path) -> None:
    source = xarray_cases.write(_dataset(), tmp_path / "src.zarr", 3, consolidated=False)
    attributes = json.loads((source / "floats" / "zarr.json").read_text())["attributes"]
    assert attributes["_FillValue"] == encode_fill_attribute(-1, np.dtype("f4"))  # xarray's encoding
    gpuzarr.convert(source, tmp_path / "v2.zarr", zarr_format=2)
    v2 = gpuzarr.open_array(tmp_path / "v2.zarr" / "floats")
    assert v2.fill_value == -1 and "_FillValue" not in v2.attrs
    assert v2.attrs["_ARRAY_DIMENSIONS"] == ["x"]
    assert gpuzarr.open_array(tmp_path / "v2.zarr" / "scalar").attrs["_ARRAY_DIMENSIONS"] == []
    assert gpuzarr.open_array(tmp_path / "v2.zarr" / "name").fill_value is None  # no _FillValue: null
    gpuzarr.convert(tmp_path / "v2.zarr", tmp_path / "v3.zarr", zarr_format=3)
    v3 = gpuzarr.open_array(tmp_path / "v3.zarr" / "floats")
    assert v3.fill_value == -1 and v3.attrs["_FillValue"] == attributes["_FillValue"]
    assert v3.dimension_names == ("x",) and "_ARRAY_DIMENSIONS" not in v3.attrs


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(-1, "i4"), (np.nan, "f8"), (-1.5, "f4"), (True, "bool"), (1 - 2j, "c8"), (b"ab", "S2"), ("x", "U1")],
)
def test_fill_attribute_round_trip(value: Any, dtype: str) -> None:
    encoded = encode_fill_attribute(value, np.dtype(dtype))
    json.dumps(encoded)  # a JSON attribute
    decoded = decode_fill_attribute(encoded, np.dtype(dtype), "/a")
    assert decoded == value or (np.isnan(value) and np.isnan(decoded))
    xarray_zarr = pytest.importorskip("xarray.backends.zarr")
    if np.dtype(dtype).kind in "biufc":
        assert encoded == xarray_zarr.FillValueCoder.encode(value, np.dtype(dtype))


def test_fill_attribute_not_xarrays_encoding_is_an_error() -> None:
    with pytest.raises(MetadataError, match=r"/a: attribute '_FillValue': expected a number or the base64"):
        decode_fill_attribute("not base64!", np.dtype("f4"), "/a")
    with pytest.raises(MetadataError, match="expected an integer, got 'x'"):
        decode_fill_attribute("x", np.dtype("i2"), "/a")


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [("m8[s]", np.timedelta64(5, "s")), ("M8[ns]", np.datetime64("NaT", "ns")), ("<U3", "abc"), ("|S4", b"ab")],
)
def test_no_fill_attribute_that_xarray_cannot_decode(tmp_path: Path, dtype: str, fill: Any) -> None:
    """xarray decodes a v3 _FillValue attribute of numbers and booleans only: one on a date,
    duration or text array failed the whole dataset's open (and "5 seconds" could not even be
    converted back to v2)."""
    import zarr

    src, dst, back = (str(tmp_path / n) for n in ("v2.zarr", "v3.zarr", "back.zarr"))
    group = zarr.open_group(src, mode="w", zarr_format=2)
    dims = {"_ARRAY_DIMENSIONS": ["x"]}
    group.create_array("t", shape=(4,), chunks=(2,), dtype=dtype, fill_value=fill, attributes=dims)
    gpuzarr.convert(src, dst, zarr_format=3)
    assert "_FillValue" not in json.loads((tmp_path / "v3.zarr" / "t" / "zarr.json").read_text())["attributes"]
    xr.open_zarr(dst, consolidated=False).load()
    gpuzarr.convert(dst, back, zarr_format=2)
    kept = gpuzarr.open_array(f"{back}/t", mode="r").fill_value  # the way back keeps the fill value
    assert np.asarray(kept, dtype=dtype).tobytes() == np.asarray(fill, dtype=dtype).tobytes()


def test_dimensions_attribute_that_cannot_be_dimension_names_is_kept(tmp_path: Path) -> None:
    import zarr

    src, dst = str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr")
    zarr.create_array(src, shape=(3,), dtype="i2", zarr_format=2, attributes={"_ARRAY_DIMENSIONS": ["x", "y"], "o": 1})
    gpuzarr.convert(src, dst, zarr_format=3)
    copy = gpuzarr.open_array(dst, mode="r")
    assert copy.dimension_names is None
    assert copy.attrs["_ARRAY_DIMENSIONS"] == ["x", "y"] and copy.attrs["o"] == 1  # it was dropped


def test_a_v2_opaque_array_converts_to_a_type_zarr_python_opens(tmp_path: Path) -> None:
    """v2's |V4 became v3's r32, which zarr-python refuses; raw_bytes, as gpuzarr writes V4 itself."""
    import zarr

    src, dst = str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr")
    fill = b"\x01\x02\x03\x04"
    original = zarr.create_array(src, shape=(4,), chunks=(2,), dtype="V4", zarr_format=2, fill_value=fill)
    original[0:2] = np.array([b"abcd", b"efgh"], dtype="V4")
    gpuzarr.convert(src, dst, zarr_format=3)
    assert json.loads((tmp_path / "v3.zarr" / "zarr.json").read_text())["data_type"]["name"] == "raw_bytes"
    theirs = zarr.open_array(dst, mode="r")
    assert theirs[...].tobytes() == original[...].tobytes()
    assert gpuzarr.open_array(dst, mode="r")[...].tobytes() == original[...].tobytes()
