"""The xarray internals that ``device="gpu"`` relies on (gpuzarr/integrations/xarray_device.py):
an xarray release that renames or reshapes them must fail here, in CI, rather than leave every
variable quietly in host memory with a logged warning."""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

xr = pytest.importorskip("xarray")

from gpuzarr.integrations import xarray_device  # noqa: E402 - after the skip guard
from gpuzarr.integrations.xarray_array import GpuZarrBackendArray  # noqa: E402

from .xarray_cases import write  # noqa: E402

if TYPE_CHECKING:
    from pathlib import Path


def test_the_private_decoding_steps_exist_with_the_signatures_used() -> None:
    from xarray.coding import common, variables

    assert xarray_device._XARRAY_MASK is variables._apply_mask
    assert list(inspect.signature(variables._apply_mask).parameters) == [
        "data", "encoded_fill_values", "decoded_fill_value", "dtype"
    ]
    # apply_mask takes _apply_mask's place with the same arguments.
    assert list(inspect.signature(xarray_device.apply_mask).parameters) == list(
        inspect.signature(variables._apply_mask).parameters
    )
    assert xarray_device._XARRAY_SCALE is variables._scale_offset_decoding
    assert xarray_device._BOOL_ARRAY is variables.BoolTypeArray
    assert {"func", "array"} <= set(inspect.signature(common._ElementwiseFunctionArray.__init__).parameters)


def _chain(variable: Any) -> list[Any]:
    node, chain = variable._data, []
    while not isinstance(node, GpuZarrBackendArray):
        chain.append(node)
        node = node.array
    return chain


@pytest.mark.usefixtures("xarray_engine")
def test_decoded_variables_are_chains_the_device_move_understands(tmp_path: Path) -> None:
    from xarray.coding import common, variables

    ds = xr.Dataset(
        {
            "masked": ("x", np.array([1.0, np.nan, 3.0])),
            "packed": ("x", np.array([0.5, 1.0, np.nan])),
            "flag": ("x", np.array([True, False, True])),
        }
    )
    ds["masked"].encoding = {"dtype": "i2", "_FillValue": -1}
    ds["packed"].encoding = {"dtype": "i2", "scale_factor": 0.5, "_FillValue": -9}
    path = write(ds, tmp_path / "cf.zarr", 3, consolidated=False)
    opened = xr.open_dataset(path, engine="gpuzarr")
    for name in ("masked", "packed"):
        steps = [n for n in _chain(opened[name].variable) if isinstance(n, common._ElementwiseFunctionArray)]
        assert steps, f"{name}: xarray no longer decodes through _ElementwiseFunctionArray"
        funcs = {step.func.func for step in steps if isinstance(step.func, functools.partial)}
        assert variables._apply_mask in funcs, f"{name}: masking is no longer a partial of _apply_mask: {funcs}"
        masks, unknown = xarray_device._masks_in_chain(opened[name].variable)
        assert unknown is None and len(masks) == 1, (name, unknown)
    packed = _chain(opened["packed"].variable)
    funcs = {s.func.func for s in packed if isinstance(getattr(s, "func", None), functools.partial)}
    assert variables._scale_offset_decoding in funcs
    assert xarray_device._masks_in_chain(opened["flag"].variable) == ([], None)
