"""zarr-python's one-call conveniences: ``save``, ``save_array``, ``save_group`` and ``load``.

``save`` writes NumPy (or CuPy, PyTorch, ...) data to a new array (refusing to replace one, as
zarr-python does, unless asked to) or to a group (which replaces what is at the path), with
:func:`gpuzarr.create_array`'s automatic choices; ``load`` reads an array whole, or a group's
child arrays, each when it is first asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .api import create, create_group, open
from .core.array import Array
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .core.group import Group
    from .store import StoreLike

__all__ = ["GroupLoader", "load", "save", "save_array", "save_group"]


def save_array(
    store: StoreLike,
    arr: Any,
    *,
    zarr_format: int | None = None,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """Write ``arr`` as a new array at ``path`` of ``store``.

    A node already there raises ContainsNodeError, as zarr-python's ``save_array`` refuses,
    unless ``overwrite=True`` (or ``mode="w"``) replaces it. Other ``kwargs`` are
    :func:`gpuzarr.create`'s (``chunks``, ``compressors``, ``compressor``, ``codecs``,
    ``dimension_separator``, ``chunk_shape``, ...), as zarr-python hands them to its
    ``create``.
    """
    mode = kwargs.pop("mode", "a")
    if mode not in ("a", "w", "w-"):
        raise InvalidArgumentError(f"save_array: mode must be 'a', 'w' or 'w-', got {mode!r}")
    overwrite = mode == "w" or (mode == "a" and bool(kwargs.pop("overwrite", False)))
    kwargs.pop("overwrite", None)  # "w-" fails where a node exists, whatever it says
    create(
        store,
        path=path or "",
        data=arr,
        zarr_format=zarr_format or 3,
        storage_options=storage_options,
        overwrite=overwrite,
        **kwargs,
    )


def save_group(
    store: StoreLike,
    *args: Any,
    zarr_format: int | None = None,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """Write a group at ``path`` of ``store`` (replacing what is there) holding each of ``args``
    as ``arr_0``, ``arr_1``, ... and each of ``kwargs`` under its name."""
    if not args and not kwargs:
        raise InvalidArgumentError("save_group: at least one array must be given")
    named = {f"arr_{i}": value for i, value in enumerate(args)}
    clash = sorted(set(named) & set(kwargs))
    if clash:
        raise InvalidArgumentError(f"save_group: {clash} named twice (positional arrays are arr_0, arr_1, ...)")
    named.update(kwargs)
    fmt = zarr_format or 3
    group = create_group(store, path=path or "", overwrite=True, zarr_format=fmt, storage_options=storage_options)
    for name, value in named.items():
        group.create_array(name, data=value, zarr_format=fmt)


def save(
    store: StoreLike,
    *args: Any,
    zarr_format: int | None = None,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """:func:`save_array` for one array given by position, else :func:`save_group`."""
    if len(args) == 1 and not kwargs:
        save_array(store, args[0], zarr_format=zarr_format, path=path, storage_options=storage_options)
    else:
        save_group(store, *args, zarr_format=zarr_format, path=path, storage_options=storage_options, **kwargs)


class GroupLoader(Mapping[str, Any]):
    """What :func:`load` gives for a group: its child arrays by name, each read whole when it
    is first asked for (and kept), so that loading a large group reads only what is used."""

    def __init__(self, group: Group) -> None:
        self._group = group
        self._names = list(group.array_keys())
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._loaded:
            array = self._group[name]
            if not isinstance(array, Array):  # a group now, since the array keys were listed
                raise KeyError(name)
            self._loaded[name] = array[...]
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<GroupLoader {self._group.name!r}: {', '.join(self._names)}>"


def load(
    store: StoreLike,
    path: str | None = None,
    zarr_format: int | None = None,
    *,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """The array at ``path`` of ``store`` read whole, or for a group a :class:`GroupLoader` of
    its child arrays (zarr-python 3.1.6 raises NotImplementedError for a group).

    ``zarr_format``, where given, must be the node's format.
    """
    node = open(store, path=path or "", mode="r", device=device, storage_options=storage_options)
    if zarr_format is not None and node.zarr_format != zarr_format:
        raise InvalidArgumentError(f"load: zarr_format={zarr_format} asked for, the node is Zarr v{node.zarr_format}")
    if isinstance(node, Array):
        return node[...]
    return GroupLoader(node)
