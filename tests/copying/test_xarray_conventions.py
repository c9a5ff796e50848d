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
