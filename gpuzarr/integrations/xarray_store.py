"""``GpuZarrDataStore``: a Zarr group as xarray's undecoded variables and attributes.

The mapping follows xarray's own zarr backend (``xarray/backends/zarr.py``), so that
``engine="gpuzarr"`` and ``engine="zarr"`` give the same Dataset:

* dimension names: v3 ``dimension_names``; v2 the ``_ARRAY_DIMENSIONS`` attribute, hidden from
  the variable's attributes together with NCZarr's ``_nc*`` attributes;
* fill values: with ``use_zarr_fill_value_as_mask`` (default: True for v2, False for v3) the
  array's ``fill_value`` becomes the ``_FillValue`` attribute that CF decoding masks; otherwise
  a v3 array's ``fill_value`` is kept in the encoding and a stored ``_FillValue`` attribute is
  decoded with xarray's ``FillValueCoder`` (base64 floats);
* encoding: ``chunks`` (the chunks read: inner chunks when sharded), ``preferred_chunks``,
  ``shards``, ``filters``, ``compressors``, ``serializer`` (v3), ``fill_value`` (v3), and
  ``dtype`` for variable-length strings (NumPy's StringDType).

``preferred_chunks`` differs on purpose for sharded arrays: xarray's zarr backend gives the
inner chunk shape, this store the shard shape, because a shard is what gpuzarr reads best in one
go (one index read, coalesced ranges) and dask chunks of whole shards are also the ones that can
be written back without two tasks touching one shard. Codecs are given as their Zarr JSON
(dicts) for v3 rather than zarr-python's objects, which would mean importing zarr-python;
``to_zarr`` accepts either. v2 codecs are numcodecs objects, as zarr-python gives them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xarray.backends import AbstractDataStore
from xarray.backends.zarr import DIMENSION_KEY, FillValueCoder
from xarray.core import indexing
from xarray.core.utils import FrozenDict
from xarray.core.variable import Variable

from ..core.array import Array
from ..errors import MetadataError
from .xarray_array import GpuZarrBackendArray

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..core.group import Group


def _hidden(key: str) -> bool:
    # NCZarr's bookkeeping attributes, which xarray's zarr backend hides as well.
    return key.lower().startswith("_nc")


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def dimensions_and_attributes(name: str, array: Array) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The dimension names of ``array`` and the attributes xarray shows for it."""
    attrs = dict(array.attrs)
    if array.zarr_format == 3:
        dims = array.dimension_names or ()
        if len(dims) != array.ndim or any(d is None for d in dims):
            raise MetadataError(
                f"{array.path}/zarr.json: 'dimension_names' must name each of the {array.ndim} dimensions for "
                f"xarray, got {list(dims) if array.dimension_names else None} (drop_variables=[{name!r}] skips it)"
            )
        return tuple(str(d) for d in dims), attrs
    dims = attrs.pop(DIMENSION_KEY, None)
    if not isinstance(dims, list) or len(dims) != array.ndim or not all(isinstance(d, str) for d in dims):
        raise MetadataError(
            f"{array.path}/.zattrs: {DIMENSION_KEY!r} must list the names of the {array.ndim} dimensions for "
            f"xarray, got {dims!r} (drop_variables=[{name!r}] skips it)"
        )
    return tuple(dims), {k: v for k, v in attrs.items() if not _hidden(k)}


def _numcodecs(configs: tuple[Any, ...]) -> tuple[Any, ...]:
    """v2 codecs as numcodecs objects, as zarr-python gives them and wants them back in
    ``to_zarr`` (a configuration numcodecs does not know stays JSON)."""
    import numcodecs

    def codec(config: Any) -> Any:
        try:
            return numcodecs.get_codec(dict(config))
        except (KeyError, ValueError, TypeError):
            return config

    return tuple(codec(c) for c in configs)


def variable_encoding(array: Array, dims: tuple[str, ...]) -> dict[str, Any]:
    """What xarray's zarr backend keeps in a variable's encoding.

    Codecs of v2 arrays are numcodecs objects (zarr-python refuses anything else for v2 in
    ``to_zarr``); those of v3 arrays their Zarr JSON, which zarr-python takes for v3.
    """
    chunks = _tuples(array.chunks)
    info = array.info  # reads nothing from the store
    v2 = array.zarr_format == 2
    encoding: dict[str, Any] = {
        "chunks": chunks,
        "preferred_chunks": dict(zip(dims, array.shards or chunks, strict=True)),
        "compressors": _numcodecs(info.compressors) if v2 else info.compressors,
        "filters": _numcodecs(info.filters) if v2 else info.filters,
        "shards": array.shards,
    }
    if array.dtype.kind == "T":
        encoding["dtype"] = array.dtype
    if not v2:
        encoding["serializer"] = info.serializer
    return encoding


class GpuZarrDataStore(AbstractDataStore):
    """The arrays directly below a gpuzarr :class:`~gpuzarr.Group`, as xarray variables.

    Parameters
    ----------
    group
        The group whose child arrays become the Dataset's variables.
    use_zarr_fill_value_as_mask
        Whether the arrays' ``fill_value`` masks data (None: True for v2, False for v3).
    drop_variables
        Arrays left out (they need no dimension names).
    """

    def __init__(
        self,
        group: Group,
        *,
        use_zarr_fill_value_as_mask: bool | None = None,
        drop_variables: Iterable[str] = (),
    ) -> None:
        self.group = group
        self.use_zarr_fill_value_as_mask = (
            group.zarr_format == 2 if use_zarr_fill_value_as_mask is None else use_zarr_fill_value_as_mask
        )
        dropped = set(drop_variables)
        self.arrays: dict[str, Array] = {
            name: node for name, node in group.members() if isinstance(node, Array) and name not in dropped
        }
        #: the backend array of each variable opened, by name (the engine moves them to a device)
        self.backend_arrays: dict[str, GpuZarrBackendArray] = {}

    def open_store_variable(self, name: str, array: Array) -> Variable:
        """The undecoded variable of one array: dimensions, lazy data, attributes, encoding."""
        dims, attrs = dimensions_and_attributes(name, array)
        backend = GpuZarrBackendArray(array)
        self.backend_arrays[name] = backend
        encoding = variable_encoding(array, dims)
        if self.use_zarr_fill_value_as_mask:
            # CF decoding then masks Zarr's fill value as it would netCDF's _FillValue.
            if array.fill_value is not None:
                attrs["_FillValue"] = array.fill_value
        else:
            if array.zarr_format == 3:
                encoding["fill_value"] = array.fill_value
            if "_FillValue" in attrs:
                attrs["_FillValue"] = FillValueCoder.decode(attrs["_FillValue"], array.dtype)
        return Variable(dims, indexing.LazilyIndexedArray(backend), attrs, encoding)

    def get_variables(self) -> Mapping[str, Variable]:
        """Every array of the group (less those dropped) as an undecoded variable."""
        return FrozenDict((name, self.open_store_variable(name, array)) for name, array in self.arrays.items())

    def get_attrs(self) -> dict[str, Any]:
        """The group's attributes, less NCZarr's."""
        return {k: v for k, v in self.group.attrs.items() if not _hidden(k)}

    def get_dimensions(self) -> dict[str, int]:
        """The length of each dimension; MetadataError when two arrays disagree."""
        sizes: dict[str, int] = {}
        for name, array in self.arrays.items():
            dims, _ = dimensions_and_attributes(name, array)
            for dim, size in zip(dims, array.shape, strict=True):
                if sizes.setdefault(dim, size) != size:
                    raise MetadataError(
                        f"{name}: dimension {dim!r} has length {size}, another array gives it {sizes[dim]}"
                    )
        return sizes
