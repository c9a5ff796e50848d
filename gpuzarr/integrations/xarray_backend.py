"""The xarray engine ``"gpuzarr"``: ``xr.open_dataset(path, engine="gpuzarr")``.

Registered as the ``xarray.backends`` entry point ``gpuzarr`` (pyproject.toml). xarray imports
every entry point when it lists its engines, so this module imports nothing beyond what
``import gpuzarr`` and xarray have already loaded; the store, arrays and device placement are
imported on the first open, and CuPy only on the first GPU read.

``guess_can_open`` is True only for gpuzarr :class:`~gpuzarr.Store` objects, which no other
engine opens. Paths and URLs need ``engine="gpuzarr"``: this engine sorts before ``"zarr"`` in
xarray's list, so claiming ``*.zarr`` paths would silently take ``xr.open_dataset("x.zarr")``
away from xarray's own zarr engine for everyone who installs gpuzarr.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..store.base import Store

try:
    from xarray.backends import BackendEntrypoint
except ImportError as exc:  # imported by name only: xarray loads it through its entry point
    raise ImportError("the xarray engine needs xarray: pip install 'gpuzarr[xarray]'") from exc

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from xarray import Dataset, DataTree
    from xarray.backends.common import AbstractDataStore
    from xarray.core.types import ReadBuffer

    from ..core.array import Array
    from ..core.group import Group

    FilenameOrObj = str | os.PathLike[Any] | ReadBuffer[Any] | bytes | memoryview | AbstractDataStore


#: the options of open_dataset that choose the group (the others decode it)
GROUP_OPTIONS = ("mode", "consolidated", "storage_options", "zarr_format")


def _open_group(
    filename_or_obj: Any,
    *,
    group: str | None = None,
    mode: str = "r",
    consolidated: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
) -> Group:
    """The group a Dataset is read from, opened read-only on the CPU.

    As xarray's zarr engine: with consolidated metadata allowed (None, True) the root is opened
    and ``group`` looked up through it, since ``to_zarr`` consolidates at the root.
    """
    from ..api import open_group
    from ..core.group import Group
    from ..errors import GroupNotFoundError, InvalidArgumentError

    if mode != "r":
        raise InvalidArgumentError(f"mode: the gpuzarr engine only reads, expected 'r', got {mode!r}")
    if zarr_format not in (None, 2, 3):
        raise InvalidArgumentError(f"zarr_format: expected None, 2 or 3, got {zarr_format!r}")
    if not isinstance(filename_or_obj, (str, os.PathLike, Store)):
        raise InvalidArgumentError(
            f"the gpuzarr engine opens a path, URL or gpuzarr Store, got {type(filename_or_obj).__name__}"
        )
    path = (group or "").strip("/")
    if consolidated is False:
        node = open_group(
            filename_or_obj, path=path, mode="r", device="cpu", use_consolidated=False, storage_options=storage_options
        )
    else:
        root = open_group(
            filename_or_obj, mode="r", device="cpu", use_consolidated=consolidated, storage_options=storage_options
        )
        node = root
        if path:
            try:
                member = root[path]
            except KeyError:
                raise GroupNotFoundError(f"group {path!r}: not found in {filename_or_obj!r}") from None
            if not isinstance(member, Group):
                raise GroupNotFoundError(f"group {path!r}: is an array in {filename_or_obj!r}, not a group")
            node = member
    if zarr_format is not None and node.zarr_format != zarr_format:
        raise GroupNotFoundError(
            f"zarr_format={zarr_format}: the group {path or '/'!r} in {filename_or_obj!r} is Zarr v{node.zarr_format}"
        )
    return node


def _dataset(
    node: Group,
    device: str,
    *,
    drop_variables: str | Iterable[str] | None = None,
    use_zarr_fill_value_as_mask: bool | None = None,
    **decoding: Any,
) -> Dataset:
    """The Dataset of the arrays of the opened group ``node``, decoded by xarray with
    ``decoding`` (its CF options), its variables on ``device`` (resolved: "cpu", "cuda:N")."""
    from xarray.backends.store import StoreBackendEntrypoint

    from .xarray_device import move_to_device
    from .xarray_store import GpuZarrDataStore

    dropped = [drop_variables] if isinstance(drop_variables, str) else list(drop_variables or ())
    store = GpuZarrDataStore(node, use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask, drop_variables=dropped)
    dataset = StoreBackendEntrypoint().open_dataset(store, drop_variables=dropped, **decoding)
    _keep_stored_byte_order(dataset, store.arrays)
    if device != "cpu":
        move_to_device(dataset, store.backend_arrays, device)
    return dataset


def _keep_stored_byte_order(dataset: Dataset, arrays: Mapping[str, Array]) -> None:
    """Put the stored byte order of a v2 big-endian array back into its variable's encoding.

    xarray's CF decoding records a variable's original data type in its encoding. Where it
    decodes to another type (a masked integer becomes a float) that is the type of the values
    as they came, big-endian from xarray's zarr engine, native from gpuzarr, and writing the
    Dataset back (``to_zarr``) flipped the stored byte order; the stored one is recorded, as the
    zarr engine records it. (Where the type stays, xarray records the native type for both.)
    """
    for name, variable in dataset.variables.items():
        recorded = variable.encoding.get("dtype")
        array = arrays.get(str(name))
        if recorded is None or array is None or array.zarr_format != 2 or variable.dtype == recorded:
            continue
        if getattr(array.metadata, "endian", None) == "big" and np.dtype(recorded) == array.dtype.newbyteorder("="):
            variable.encoding["dtype"] = array.dtype.newbyteorder(">")


class GpuZarrBackendEntrypoint(BackendEntrypoint):
    """Open Zarr v2 and v3 groups with gpuzarr: ``xr.open_dataset(path, engine="gpuzarr")``.

    Takes xarray's zarr engine's options (``group``, ``consolidated``, ``storage_options``,
    ``zarr_format``, ``use_zarr_fill_value_as_mask``, ``mode="r"``) and ``device``: "cpu" (the
    default: NumPy), "gpu", "cuda:N" or "auto" (the GPU when gpuzarr can use one), for variables
    that read into CuPy arrays and decode on the GPU. See docs/xarray.md.
    """

    description = "Open Zarr v2/v3 stores with gpuzarr, into NumPy or (device='gpu') CuPy arrays"
    supports_groups: ClassVar[bool] = True
    open_dataset_parameters: ClassVar[tuple[str, ...]] = (
        "filename_or_obj",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "drop_variables",
        "use_cftime",
        "decode_timedelta",
        "group",
        "mode",
        "consolidated",
        "storage_options",
        "zarr_format",
        "use_zarr_fill_value_as_mask",
        "device",
    )

    def guess_can_open(self, filename_or_obj: FilenameOrObj) -> bool:
        """True for a gpuzarr Store only: paths and URLs stay with xarray's zarr engine."""
        return isinstance(filename_or_obj, Store)

    def open_dataset(
        self,
        filename_or_obj: FilenameOrObj,
        *,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        group: str | None = None,
        mode: str = "r",
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        device: str = "cpu",
    ) -> Dataset:
        """The Dataset of the arrays in ``group`` (the root by default) of ``filename_or_obj``.

        Parameters
        ----------
        filename_or_obj
            A path, a URL (``s3://``, ``https://``, ``zip://``, ``memory://``, ...) or a gpuzarr
            Store.
        mask_and_scale, decode_times, concat_characters, decode_coords, drop_variables, use_cftime, decode_timedelta
            xarray's CF decoding options.
        group
            The group holding the Dataset's arrays.
        mode
            "r": the engine only reads.
        consolidated
            None: use the consolidated metadata when present; True: require it; False: ignore it.
        storage_options
            Options of an object store or HTTP URL (see docs/stores.md).
        zarr_format
            None, or 2 or 3 to insist on that format.
        use_zarr_fill_value_as_mask
            Mask the arrays' Zarr ``fill_value`` as ``_FillValue`` (None: v2 yes, v3 no).
        device
            "cpu" (NumPy), "gpu"/"cuda"/"cuda:N" (CuPy; DeviceError without a usable GPU) or
            "auto".

        Returns
        -------
        xarray.Dataset
        """
        from ..backends.select import resolve_device

        # Checked first: no GPU is an error before anything is read.
        resolved = resolve_device(device)
        node = _open_group(
            filename_or_obj,
            group=group,
            mode=mode,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )
        return _dataset(
            node,
            resolved,
            drop_variables=drop_variables,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )

    def open_groups_as_dict(self, filename_or_obj: FilenameOrObj, **options: Any) -> dict[str, Dataset]:
        """A Dataset per group at and below ``group`` (the root by default), keyed "/", "/a", "/a/b".

        Takes :meth:`open_dataset`'s options; ``group`` is the top of the tree.
        """
        from ..backends.select import resolve_device
        from ..core.group import Group

        resolved = resolve_device(options.pop("device", "cpu"))
        top = (options.pop("group", None) or "").strip("/")
        # The top group is opened once; every group below comes from it (sharing its consolidated
        # metadata), not from opening the store's root again per group.
        node = _open_group(filename_or_obj, group=top, **{k: options.pop(k) for k in GROUP_OPTIONS if k in options})
        below = node.members(max_depth=None)
        groups = [("", node), *((path, child) for path, child in below if isinstance(child, Group))]
        return {"/" + path: _dataset(group, resolved, **options) for path, group in groups}

    def open_datatree(self, filename_or_obj: FilenameOrObj, **options: Any) -> DataTree:
        """The groups at and below ``group`` as a DataTree (see :meth:`open_groups_as_dict`)."""
        from xarray import DataTree

        return DataTree.from_dict(self.open_groups_as_dict(filename_or_obj, **options))
