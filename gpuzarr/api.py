"""Public entry points: open, create, open_array, open_group, create_group, consolidated metadata.

Thin wrappers: they turn a store argument into a Store and a path, apply ``mode``
(:data:`gpuzarr.hierarchy.MODES`), and leave opening to :func:`gpuzarr.group.open_node`, creating
to :mod:`gpuzarr.group` and :func:`gpuzarr.hierarchy.write_node`, and TensorStore specs to
:mod:`gpuzarr.tensorstore`.
"""

from __future__ import annotations

from typing import Any, Literal

from .array import Array
from .consolidated import consolidate
from .errors import ArrayNotFoundError, GroupNotFoundError, InvalidArgumentError, MetadataError, NodeNotFoundError
from .group import Group, create_array_node, create_group_node, open_node
from .hierarchy import node_exists, parse_mode, read_node
from .metadata.build import build_metadata
from .store import StoreLike, make_store

Mode = Literal["r", "r+", "a", "w", "w-"]

#: The keyword arguments of :func:`create` that :func:`open` passes on when it creates an array.
CREATE_OPTIONS = frozenset(
    {
        "shape",
        "dtype",
        "chunks",
        "shards",
        "zarr_format",
        "codecs",
        "compressor",
        "filters",
        "order",
        "fill_value",
        "dimension_names",
        "attributes",
        "chunk_key_encoding",
        "dimension_separator",
        "overwrite",
    }
)


def _join(base: str, path: str) -> str:
    return "/".join(p for p in (base.strip("/"), path.strip("/")) if p)


def open(  # noqa: A001 - the public name, as in zarr-python
    store: StoreLike,
    *,
    path: str = "",
    mode: Mode | None = None,
    device: str = "auto",
    **create_kwargs: Any,
) -> Array | Group:
    """Open the array or group at ``store`` (a path, URL, Store or kvstore dict).

    ``mode`` has zarr-python's meanings: "r" read only; "r+" read/write, must exist; "a"
    read/write, created if missing (only when ``shape`` is given); "w" create, replacing what
    exists; "w-" create, failing if something exists. Keyword arguments other than these are
    passed to :func:`create` when an array is created; "w" and "w-" without ``shape`` create a
    group, as zarr-python does. ``mode`` defaults to "a".

    A TensorStore spec (a dict whose ``driver`` is "zarr3", "zarr2" or "zarr") is opened by
    :func:`gpuzarr.tensorstore.open.open_spec`: its open/create/delete_existing flags decide,
    ``mode`` (if given) must agree with them, and keyword arguments are spec options.
    """
    if isinstance(store, dict) and store.get("driver") in ("zarr3", "zarr2", "zarr"):
        from .tensorstore.open import open_spec

        return open_spec(store, mode=mode, device=device, path=path or None, **create_kwargs)  # type: ignore[no-any-return]
    mode = "a" if mode is None else mode
    flags = parse_mode(mode)
    field = create_kwargs.pop("field", None)
    unknown = set(create_kwargs) - CREATE_OPTIONS
    if unknown:
        raise TypeError(f"open: unexpected keyword arguments {sorted(unknown)}")
    s, base = make_store(store, read_only=flags.read_only)
    full = _join(base, path)
    if not flags.open and "shape" not in create_kwargs:  # "w", "w-"
        node: Any = create_group(s, path=full, overwrite=flags.delete_existing, device=device, **create_kwargs)
    elif not flags.open or (flags.create and not node_exists(s, full) and "shape" in create_kwargs):
        node = create(s, path=full, overwrite=flags.delete_existing, device=device, **create_kwargs)
    else:
        # Creation arguments with mode "a" only apply when nothing exists yet.
        node = open_node(s, full, device=device)
    if field is None:
        return node  # type: ignore[no-any-return]
    if not isinstance(node, Array):
        raise MetadataError(f"field: {field!r} given, but {full or '/'!r} is a group")
    from .field_array import select_field

    return select_field(node, field)  # type: ignore[return-value]


def open_array(
    store: StoreLike, *, path: str = "", mode: Mode | None = None, device: str = "auto", **kwargs: Any
) -> Array:
    """Like :func:`open`, for an array (raises ArrayNotFoundError for a group or nothing)."""
    if mode in ("w", "w-") and "shape" not in kwargs:
        # Checked first: open() would replace the node with a group before failing.
        raise TypeError(f"open_array: mode {mode!r} creates an array and needs shape and dtype")
    try:
        node = open(store, path=path, mode=mode, device=device, **kwargs)
    except NodeNotFoundError as exc:
        raise ArrayNotFoundError(str(exc)) from None
    if not isinstance(node, Array):
        raise ArrayNotFoundError(f"{path or '/'!r} is a group, not an array")
    return node


def open_group(
    store: StoreLike,
    *,
    path: str = "",
    mode: Mode = "a",
    device: str = "auto",
    zarr_format: int = 3,
    use_consolidated: bool | None = None,
) -> Group:
    """Open a group; with mode "a", "w" or "w-" it is created when missing.

    Parameters
    ----------
    store
        A path, ``file://`` or ``memory://`` URL, Store, or TensorStore kvstore dict.
    path
        The group's path below ``store``.
    mode
        zarr-python's mode (see :func:`open`).
    device
        Where reads of the group's arrays land: "auto", "cpu", "gpu" or "cuda:N".
    zarr_format
        The format of a group created here: 3 (default) or 2.
    use_consolidated
        As in zarr-python. None: the group's consolidated metadata (v3: the
        ``consolidated_metadata`` of its zarr.json; v2: ``.zmetadata``) is used when present,
        so its members open with no further metadata reads; True: it must be present
        (MetadataError otherwise); False: it is not read, and members are read from the store.

    Returns
    -------
    Group
    """
    if use_consolidated is not None and not isinstance(use_consolidated, bool):
        raise InvalidArgumentError(f"use_consolidated: expected None, True or False, got {use_consolidated!r}")
    flags = parse_mode(mode)
    s, base = make_store(store, read_only=flags.read_only)
    full = _join(base, path)
    if not flags.open or (flags.create and read_node(s, full) is None):
        return create_group(s, path=full, overwrite=flags.delete_existing, device=device, zarr_format=zarr_format)
    try:
        node: Array | Group | None = open_node(s, full, device=device, use_consolidated=use_consolidated)
    except NodeNotFoundError:
        node = None
    if not isinstance(node, Group):
        raise GroupNotFoundError(f"no group at {full or '/'!r} in {s!r}")
    return node


def open_consolidated(
    store: StoreLike,
    *,
    path: str = "",
    mode: Mode = "a",
    device: str = "auto",
    zarr_format: int = 3,
    use_consolidated: bool = True,
) -> Group:
    """Open a group through its consolidated metadata: :func:`open_group` with ``use_consolidated=True``.

    Parameters
    ----------
    store, path, mode, device, zarr_format
        As in :func:`open_group`.
    use_consolidated
        Must be True, as in zarr-python (use :func:`open_group` to choose).

    Returns
    -------
    Group
        A group whose members open from its consolidated metadata.

    Raises
    ------
    MetadataError
        The group has no consolidated metadata.
    """
    if use_consolidated is not True:
        raise InvalidArgumentError(
            "open_consolidated: use_consolidated must be True; call open_group(use_consolidated=False) instead"
        )
    return open_group(store, path=path, mode=mode, device=device, zarr_format=zarr_format, use_consolidated=True)


def consolidate_metadata(store: StoreLike, path: str = "", zarr_format: int | None = None) -> Group:
    """Store the metadata of every node below a group at that group, as zarr-python does.

    Zarr v3: the ``consolidated_metadata`` member of the group's zarr.json; Zarr v2: the group's
    ``.zmetadata``. zarr-python (``zarr.open_consolidated``, ``use_consolidated``), xarray
    (``consolidated=True``) and :func:`open_group` then open the whole hierarchy from that one
    document. Later metadata changes made through gpuzarr (new nodes, ``resize``, attributes)
    keep it up to date; changes made by other tools need a new call. Consolidated metadata is
    not part of the Zarr v3 specification: readers other than zarr-python may ignore it.

    Parameters
    ----------
    store
        A path, ``file://`` or ``memory://`` URL, Store, or TensorStore kvstore dict.
    path
        The group whose descendants are consolidated ("" for the store's root).
    zarr_format
        2 or 3 to require a group of that format; None (default) takes the group's.

    Returns
    -------
    Group
        The group, opened with its new consolidated metadata.

    Raises
    ------
    GroupNotFoundError
        No group (of ``zarr_format``) at ``path``.
    ReadOnlyError
        The store is read-only.
    """
    if zarr_format not in (None, 2, 3):
        raise MetadataError(f"zarr_format: expected 2, 3 or None, got {zarr_format!r}")
    s, base = make_store(store)
    full = _join(base, path)
    info, view = consolidate(s, full, zarr_format)
    return Group(s, full, info.attributes, zarr_format=info.zarr_format, consolidated=view)


def create_group(
    store: StoreLike,
    *,
    path: str = "",
    attributes: dict[str, Any] | None = None,
    overwrite: bool = False,
    device: str = "auto",
    zarr_format: int = 3,
) -> Group:
    """Create a group: v3 (zarr.json with node_type "group") or v2 (.zgroup + .zattrs)."""
    if zarr_format not in (2, 3):
        raise MetadataError(f"zarr_format: expected 2 or 3, got {zarr_format!r}")
    s, base = make_store(store)
    full = _join(base, path)
    return create_group_node(s, full, attributes, overwrite=overwrite, device=device, zarr_format=zarr_format)


def create(
    store: StoreLike,
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = None,
    shards: Any = None,
    zarr_format: int = 3,
    codecs: Any = None,
    compressor: Any = "auto",
    filters: Any = None,
    order: str = "C",
    fill_value: Any = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_separator: str | None = None,
    overwrite: bool = False,
    device: str = "auto",
    path: str = "",
) -> Array:
    """Create an array and return it open for writing.

    Parameters
    ----------
    store
        A path, ``file://`` or ``memory://`` URL, Store, or TensorStore kvstore dict.
    shape, dtype
        The array's shape and data type (any Zarr core type, or a NumPy dtype).
    chunks
        The chunk shape (the inner chunk shape when ``shards`` is given); a list of per-axis
        size lists makes a rectilinear grid (ZEP 3). Default: one chunk holding the whole array.
    shards
        The shard shape: wraps the codec chain in ``sharding_indexed`` with inner chunks
        ``chunks`` (v3 only).
    zarr_format
        3 (default) or 2.
    codecs
        v3: the Zarr JSON codec chain (default: ``bytes`` + zstd level 0, as zarr-python).
    compressor, filters
        v2 numcodecs-style JSON dicts; for v3 they are placed around the ``bytes`` codec.
    order
        "C" or "F" (v3: a ``transpose`` codec).
    fill_value
        The value of elements never written (default: the type's zero).
    dimension_names, attributes, chunk_key_encoding, dimension_separator
        As in the Zarr specification (``dimension_names`` is v3 only).
    overwrite
        Replace a node that exists at the path, and its data. Otherwise creating where a node
        exists raises :class:`~gpuzarr.errors.ContainsNodeError`.
    device
        Where reads of the returned array land: "auto", "cpu", "gpu" or "cuda:N".
    path
        The array's path below ``store``.

    Returns
    -------
    Array
    """
    metadata = build_metadata(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        zarr_format=zarr_format,
        codecs=codecs,
        compressor=compressor,
        filters=filters,
        order=order,
        fill_value=fill_value,
        dimension_names=dimension_names,
        attributes=attributes,
        chunk_key_encoding=chunk_key_encoding,
        dimension_separator=dimension_separator,
    )
    s, base = make_store(store)
    return create_array_node(s, _join(base, path), metadata, overwrite=overwrite, device=device)
