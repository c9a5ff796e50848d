"""``device="gpu"``: which variables of a decoded Dataset read into CuPy arrays, and making their
CF decoding run there.

Variables are opened on the CPU, CF-decoded by xarray, and then moved: a variable's backend
array reads on the GPU when everything between it and the user can take a CuPy array. These stay
in host memory (NumPy), as in cupy-xarray:

* dimension coordinates (``dims == (name,)``): xarray builds pandas indexes from them;
* variables whose stored or decoded data type CuPy cannot hold: strings, datetime64 and
  timedelta64 (CF time decoding runs on the host in any case);
* variables whose decoding chain holds a step not known to work on CuPy arrays (a warning in the
  ``gpuzarr`` log names it).

xarray's CF masking (``_FillValue``/``missing_value`` other than NaN) converts with
``np.array``, which CuPy refuses; :func:`apply_mask` does the same work with the array's own
methods and takes its place in the chains of moved variables. Scaling (``scale_factor``,
``add_offset``) and boolean decoding already use the array's own methods.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from xarray.coding import variables as cf_variables
from xarray.core import indexing

from ..backends.select import cupy_supports
from .xarray_array import GpuZarrBackendArray

if TYPE_CHECKING:
    from xarray import Dataset

logger = logging.getLogger("gpuzarr")

#: Wrappers between a variable and its backend array that only index or cache.
_INDEXING_WRAPPERS: tuple[type, ...] = (
    indexing.LazilyIndexedArray,
    indexing.LazilyVectorizedIndexedArray,
    indexing.CopyOnWriteArray,
    indexing.MemoryCachedArray,
)
# Decoding steps (xarray's private names, looked up so that a renamed one reads as unknown).
_BOOL_ARRAY: type | None = getattr(cf_variables, "BoolTypeArray", None)
_XARRAY_MASK = getattr(cf_variables, "_apply_mask", None)
_XARRAY_SCALE = getattr(cf_variables, "_scale_offset_decoding", None)


def apply_mask(data: Any, encoded_fill_values: Any, decoded_fill_value: Any, dtype: Any) -> Any:
    """xarray's CF masking (``_apply_mask``) through the array's own methods: NumPy or CuPy."""
    data = data.astype(data.dtype if dtype is None else dtype, copy=True)
    condition = None
    for fill in encoded_fill_values:
        hit = data == fill
        condition = hit if condition is None else condition | hit
    if condition is not None:
        data[condition] = decoded_fill_value
    return data


def _passes_cupy_through(node: Any) -> bool:
    """Whether ``node`` only indexes, caches or casts (``astype``) what it wraps."""
    return isinstance(node, _INDEXING_WRAPPERS) or (_BOOL_ARRAY is not None and isinstance(node, _BOOL_ARRAY))


def _masks_in_chain(variable: Any) -> tuple[list[Any], str | None]:
    """The masking steps in the decoding chain of ``variable``, and why the chain cannot run on
    CuPy arrays (None when it can)."""
    masks: list[Any] = []
    node: Any = getattr(variable, "_data", None)
    while not isinstance(node, GpuZarrBackendArray):
        if _passes_cupy_through(node):
            node = node.array
            continue
        func = getattr(node, "func", None)
        if not (isinstance(func, functools.partial) and hasattr(node, "array")):
            return masks, f"its data passes through {type(node).__name__}"
        if func.func is _XARRAY_MASK:
            masks.append(node)
        elif func.func not in (apply_mask, _XARRAY_SCALE):
            return masks, f"its decoding step {func.func!r} may convert with NumPy"
        node = node.array
    return masks, None


def _host_reason(name: str, variable: Any, backend: GpuZarrBackendArray) -> str | None:
    """Why ``variable`` belongs in host memory whatever its decoding, or None."""
    if variable.dims == (name,):
        return "a dimension coordinate (pandas index)"
    for dtype in (backend.dtype, variable.dtype):
        if not cupy_supports(np.dtype(dtype)):
            return f"CuPy arrays cannot hold its data type {dtype}"
    return None


def move_to_device(dataset: Dataset, backend_arrays: dict[str, GpuZarrBackendArray], device: str) -> list[str]:
    """Read the variables of ``dataset`` that can be on ``device`` (``"cuda:N"``) there.

    Returns the names moved. Variables are looked up by name in ``backend_arrays`` (what the
    store opened); the masking steps of the moved ones become :func:`apply_mask`.
    """
    moved = []
    for name, variable in dataset.variables.items():
        backend = backend_arrays.get(str(name))
        if backend is None or _host_reason(str(name), variable, backend) is not None:
            continue
        masks, unknown = _masks_in_chain(variable)
        if unknown is not None:
            logger.warning("gpuzarr: variable %r stays in host memory: %s", name, unknown)
            continue
        for step in masks:
            step.func = functools.partial(apply_mask, *step.func.args, **step.func.keywords)
        backend.move_to(device)
        moved.append(str(name))
    return moved
