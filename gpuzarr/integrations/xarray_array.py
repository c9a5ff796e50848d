"""``GpuZarrBackendArray``: one gpuzarr Array as xarray's lazily indexed backend array.

xarray hands every read over as an explicit indexer; ``explicit_indexing_adapter`` with
``IndexingSupport.VECTORIZED`` passes it through whole, and each kind maps onto the gpuzarr
selection of the same meaning, so a ``ds.isel``/``ds.sel`` reads only the chunks it touches:

* ``BasicIndexer`` (integers and slices) -> ``Array[...]``;
* ``OuterIndexer`` (per-axis integer arrays) -> ``Array.oindex[...]``;
* ``VectorizedIndexer`` (broadcast integer arrays, maybe with slices) -> ``Array.vindex[...]``.

The array is read on the device it was opened on; :meth:`GpuZarrBackendArray.move_to` reopens
it on another one (the engine moves variables to the GPU after CF decoding, see
:mod:`gpuzarr.integrations.xarray_device`). It pickles with its gpuzarr Array (store, path,
metadata), which is what dask's distributed schedulers need.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from ..core.array import Array

if TYPE_CHECKING:
    from xarray.core.indexing import ExplicitIndexer


def _points_with_slices(key: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[np.ndarray[Any, Any], ...]:
    """A vectorised key of integer arrays and slices as integer arrays only.

    xarray's vectorised indexing puts the broadcast axes of the arrays first and then one axis per
    slice, in order (NumPy's ``vindex`` meaning); an ``arange`` on its own trailing axis per slice
    gives gpuzarr's ``vindex``, which takes integer arrays only, the same points in that order.
    """
    arrays = [np.asarray(k) for k in key if not isinstance(k, slice)]
    broadcast = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
    slice_axes = [i for i, k in enumerate(key) if isinstance(k, slice)]
    n_slices = len(slice_axes)
    out: list[np.ndarray[Any, Any]] = []
    for axis, k in enumerate(key):
        if isinstance(k, slice):
            position = slice_axes.index(axis)
            steps = np.arange(*k.indices(shape[axis]))
            tail = [1] * n_slices
            tail[position] = steps.size
            out.append(steps.reshape((1,) * len(broadcast) + tuple(tail)))
        else:
            out.append(np.broadcast_to(np.asarray(k), broadcast).reshape(broadcast + (1,) * n_slices))
    return tuple(out)


class GpuZarrBackendArray(BackendArray):
    """A gpuzarr :class:`~gpuzarr.Array` that xarray indexes lazily.

    Parameters
    ----------
    array
        The gpuzarr array; its device decides where reads land (NumPy or CuPy).
    """

    def __init__(self, array: Array) -> None:
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def __repr__(self) -> str:
        return f"GpuZarrBackendArray({self.array!r}, device={self.array.device!r})"

    @property
    def device(self) -> str:
        """Where reads land: ``"cpu"`` or ``"cuda:N"``."""
        return self.array.device

    def move_to(self, device: str) -> None:
        """Read on ``device`` from now on (the same store, path and metadata, nothing read)."""
        a = self.array
        if device != a.device:
            self.array = Array(a.store, a.path, a.metadata, device=device, strict=a.strict)

    def __getitem__(self, key: ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.VECTORIZED, self._read(key))

    async def async_getitem(self, key: ExplicitIndexer) -> Any:
        """``ds.load_async()``: the same read, on another thread, so that the event loop keeps
        running.

        Integers and slices (what loading a variable or a ``ds.isel`` of slices asks) are
        :meth:`~gpuzarr.Array.read_async`, index arrays its orthogonal and point twins
        (:meth:`~gpuzarr.Array.get_orthogonal_selection_async`,
        :meth:`~gpuzarr.Array.get_coordinate_selection_async`): they share gpuzarr's request
        threads with the caller's other futures and, on a GPU, run on the caller's device and
        stream.
        """
        if type(key) is indexing.BasicIndexer:
            return self._as_array(await self.array.read_async(key.tuple))
        if type(key) is indexing.OuterIndexer:
            return await self.array.get_orthogonal_selection_async(key.tuple)
        if type(key) is indexing.VectorizedIndexer:
            return await self.array.get_coordinate_selection_async(self._points(key.tuple))
        return await asyncio.to_thread(self.__getitem__, key)

    def _read(self, key: ExplicitIndexer) -> Any:
        if isinstance(key, indexing.VectorizedIndexer):
            return self._vindex
        if isinstance(key, indexing.OuterIndexer):
            return self._oindex
        return self._basic

    def _basic(self, key: tuple[Any, ...]) -> Any:
        return self._as_array(self.array[key])

    def _oindex(self, key: tuple[Any, ...]) -> Any:
        return self.array.oindex[key]

    def _vindex(self, key: tuple[Any, ...]) -> Any:
        return self.array.vindex[self._points(key)]

    def _points(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """A vectorised key as gpuzarr's point selection: slices beside the arrays made arrays."""
        return _points_with_slices(key, self.shape) if any(isinstance(k, slice) for k in key) else key

    def _as_array(self, value: Any) -> Any:
        # gpuzarr gives a scalar for an integer index on every axis, as NumPy does; xarray wants
        # an array, and a variable-length string (a Python str) must keep its StringDType.
        if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
            return value
        return np.asarray(value, dtype=self.dtype)
