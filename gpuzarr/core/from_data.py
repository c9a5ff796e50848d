"""New arrays filled from data: ``gpuzarr.create(data=...)`` and ``gpuzarr.array(data)``.

The shape and data type come from ``data`` unless given (as zarr-python's ``create_array``), and
the values are written once the array exists. A gpuzarr ``Array`` as the source is copied one
slab of the new array's stored chunks at a time, so that copying a large array never holds more
than one row of chunks in memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .array import Array

__all__ = ["as_data", "data_chunks", "data_dtype", "shape_and_dtype", "write_data"]


def as_data(data: Any) -> Any:
    """``data`` itself when it has a shape and a dtype (NumPy, CuPy, PyTorch, an Array), else
    ``numpy.asanyarray(data)`` (lists, scalars)."""
    if hasattr(data, "shape") and hasattr(data, "dtype"):
        return data
    return np.asanyarray(data)


def data_chunks(data: Any) -> tuple[int, ...] | None:
    """The chunk shape ``data`` carries (a Zarr array's regular chunks), as zarr-python reads it.

    Only a tuple of integers with one entry per axis counts: Dask's per-axis tuples of sizes and
    rectilinear grids leave the choice to the usual default.
    """
    chunks = getattr(data, "chunks", None)
    shape = tuple(data.shape)
    if isinstance(chunks, tuple) and len(chunks) == len(shape) and all(isinstance(c, int) for c in chunks):
        return chunks
    return None


def shape_and_dtype(data: Any, shape: Any, dtype: Any) -> tuple[tuple[int, ...], Any]:
    """The new array's shape and dtype: those of ``data`` unless given.

    A ``shape`` given with ``data`` must equal the data's; a ``dtype`` given with it is the type
    the values are converted to when written.
    """
    data_shape = tuple(int(s) for s in data.shape)
    if shape is not None:
        wanted = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if wanted != data_shape:
            raise InvalidArgumentError(f"shape: {wanted} given, but data has shape {data_shape}")
    return data_shape, data_dtype(data.dtype) if dtype is None else data_dtype(dtype)


def data_dtype(dtype: Any) -> Any:
    """``dtype`` as gpuzarr's metadata takes it: NumPy's (and CuPy's, which are NumPy's) as it
    is; PyTorch's (``torch.float32``, ``torch.bfloat16``) by its name, which NumPy or ml_dtypes
    know by the same name."""
    if type(dtype).__module__.split(".")[0] == "torch":
        return str(dtype).removeprefix("torch.")
    return dtype


def write_data(array: Array, data: Any) -> None:
    """Write ``data`` (of the array's shape) into ``array``."""
    if not isinstance(data, Array) or array.ndim == 0 or array.size == 0:
        array[...] = data
        return
    step = max(1, int(array.metadata.chunk_grid.chunk_shape[0]))
    for start in range(0, array.shape[0], step):
        stop = min(start + step, array.shape[0])
        array[start:stop] = data[start:stop]
