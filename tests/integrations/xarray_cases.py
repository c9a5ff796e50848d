"""Datasets as notebooks write them with ``to_zarr``, and writing and opening them with xarray's
own zarr engine quietly, for the tests of the xarray engine (CPU and GPU)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

if TYPE_CHECKING:
    from pathlib import Path


def cf_dataset() -> Any:
    """What notebooks write: coordinates, CF encodings, strings, booleans, every numeric width."""
    rng = np.random.default_rng(7)
    when = pd.date_range("2001-01-01", periods=6, freq="6h").values.copy()
    when[2] = np.datetime64("NaT", "ns")
    duration = pd.to_timedelta(np.arange(6), unit="min").values.copy()
    duration[4] = np.timedelta64("NaT", "ns")
    masked = np.where(np.arange(40).reshape(4, 10) % 7 == 0, np.nan, 1.5)
    packed = np.linspace(0, 1, 60).reshape(6, 10)
    packed[1, 2] = np.nan
    data_vars = {
        "temperature": (("time", "x"), rng.normal(size=(6, 10)).astype("f4"), {"units": "K", "long_name": "T"}),
        "packed": (("time", "x"), packed),
        "masked": (("y", "x"), masked),
        "flag": ("x", np.arange(10) % 3 == 0),
        "when": ("time", when),
        "duration": ("time", duration),
        "name": ("y", np.array(["\u03b1-é", "bb", "", "dddd"], dtype=object)),
        "code": ("y", np.array([b"a", b"bc", b"", b"d"])),
        "half": ("x", np.arange(10, dtype="f2")),
        "complex": ("x", (np.arange(10) + 0.5j).astype("c8")),
        "big_endian": ("x", np.arange(10, dtype=">i4")),
        "scalar": ((), 3.5, {"note": "0-d"}),
    }
    for width in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
        data_vars[width] = ("x", (np.arange(10) * 3).astype(width))
    ds = xr.Dataset(
        data_vars,
        coords={
            "time": pd.date_range("2000-01-01", periods=6, freq="D"),
            "x": np.linspace(-1, 1, 10),
            "y": ["north", "east", "south", "west"],
            "label": ("x", list("abcdefghij")),
        },
        attrs={"title": "cf", "version": 3, "levels": [1, 2, 3], "nested": {"a": 1}},
    )
    ds["packed"].encoding = {"scale_factor": 0.01, "add_offset": 1.0, "dtype": "i2", "_FillValue": -9999}
    ds["masked"].encoding = {"_FillValue": -1.0}
    ds["temperature"].encoding = {"chunks": (2, 5)}
    return ds


def quietly(call: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``call`` with zarr-python's and xarray's warnings silenced (v3 string types have no
    spec yet; consolidated metadata is not in the v3 spec; no consolidated metadata found)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


def write(ds: Any, path: Path, zarr_format: int, consolidated: bool, **kwargs: Any) -> Path:
    quietly(
        ds.to_zarr,
        path,
        mode="a" if path.exists() else "w",
        zarr_format=zarr_format,
        consolidated=consolidated,
        **kwargs,
    )
    return path


def open_zarr_engine(path: Any, **options: Any) -> Any:
    return quietly(xr.open_dataset, path, engine="zarr", **options)
