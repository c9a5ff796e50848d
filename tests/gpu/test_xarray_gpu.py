"""The xarray engine with ``device="gpu"`` on a real GPU: data variables load as CuPy arrays
(CF masking and scaling included) equal to the CPU engine's; indexes, strings and times stay
NumPy. Skipped without a usable GPU."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

xr = pytest.importorskip("xarray")

from ..integrations.xarray_cases import cf_dataset  # noqa: E402
from ..integrations.xarray_engine import xarray_engine  # noqa: E402, F401 - a fixture

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("xarray_engine")]

#: variables that read into CuPy arrays on device="gpu"
ON_DEVICE = ("temperature", "packed", "masked", "flag", "half", "complex", "big_endian", "scalar", "i1", "u8")
#: variables that stay NumPy: dimension coordinates, strings, bytes, datetimes, timedeltas
ON_HOST = ("time", "x", "y", "label", "name", "code", "when", "duration")


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("xr") / "data.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf_dataset().to_zarr(target, zarr_format=request.param, consolidated=True)
    return target


def _host(value: Any) -> np.ndarray[Any, Any]:
    import cupy

    assert isinstance(value, cupy.ndarray), type(value)
    return np.asarray(value.get())


def test_data_variables_load_as_cupy_arrays_equal_to_the_cpu_engines(path: Path) -> None:
    gpu = xr.open_dataset(path, engine="gpuzarr", device="gpu").load()
    cpu = xr.open_dataset(path, engine="gpuzarr", device="cpu").load()
    for name in ON_DEVICE:
        got = _host(gpu[name].data)
        assert got.dtype == cpu[name].dtype, name
        np.testing.assert_array_equal(got, cpu[name].values, err_msg=name)
    for name in ON_HOST:
        assert isinstance(gpu[name].data, np.ndarray), name
        np.testing.assert_array_equal(gpu[name].values, cpu[name].values)


def test_selections_read_on_the_gpu(path: Path) -> None:
    gpu = xr.open_dataset(path, engine="gpuzarr", device="gpu")
    cpu = xr.open_dataset(path, engine="gpuzarr", device="cpu")
    points = {"time": xr.DataArray([0, 5, 2], dims="p"), "x": xr.DataArray([9, 0, 4], dims="p")}
    for selection in ({"time": slice(1, 5), "x": 3}, {"time": [4, 0, 0]}, points):
        got = gpu["packed"].isel(**selection).load()
        np.testing.assert_array_equal(_host(got.data), cpu["packed"].isel(**selection).values)
