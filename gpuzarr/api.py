"""Public entry points: open, create, open_array, open_group, create_group, group and friends.

Also consolidated metadata (open_consolidated, consolidate_metadata).

Thin wrappers: they turn a store argument into a Store and a path, apply ``mode``
(:data:`gpuzarr.hierarchy.MODES`), and leave opening to :func:`gpuzarr.core.group.open_node`, creating
to :mod:`gpuzarr.core.group` and :func:`gpuzarr.hierarchy.write_node`, and TensorStore specs to
:mod:`gpuzarr.tensorstore`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Literal, overload

from .backends.select import callers_device, current_device_of_caller
from .consolidated import consolidate
from .core.array import Array
from .core.array_config import with_write_empty_chunks
from .core.group import Group, create_group_node, new_array, open_node, refuse_v3_memory_order
from .errors import (
    ArrayNotFoundError,
    ContainsNodeError,
    GroupNotFoundError,
    InvalidArgumentError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
)
from .futures import submit
from .hierarchy import node_exists, node_prefix, parse_mode, read_node
from .store import MemoryStore, Store, StoreLike, make_store
from .store.base import validate_path

if TYPE_CHECKING:
    from .core.field_array import FieldArray
    from .core.tree import TreeRepr
    from .futures import Future

Mode = Literal["r", "r+", "a", "w", "w-"]

#: The keyword arguments of :func:`create` that :func:`open` passes on when it creates an array.
CREATE_OPTIONS = frozenset(
    {
        "shape",
        "dtype",
        "data",
        "chunks",
        "shards",
        "zarr_format",
        "codecs",
        "compressor",
        "compressors",
        "filters",
        "serializer",
        "order",
        "fill_value",
        "dimension_names",
        "attributes",
        "chunk_key_encoding",
        "dimension_separator",
        "config",
        "chunk_shape",
        "write_empty_chunks",
    }
)


def _join(base: str, path: str) -> str:
    # Checked here, where the caller's argument is still known by its name.
    return "/".join(p for p in (base.strip("/"), validate_path(path)) if p)


def _store(
    store: StoreLike, read_only: bool = False, storage_options: dict[str, Any] | None = None
) -> tuple[Store, str]:
    """:func:`make_store`, with zarr-python's default: no store is a new in-memory store."""
    return make_store(MemoryStore() if store is None else store, read_only=read_only, storage_options=storage_options)


def _refuse_writing_mode(store: Store, mode: str) -> None:
    """Refuse mode "r+" on a store that cannot write (an HTTP server, a store made read-only).

    zarr-python refuses it so ("Store is read-only but mode is 'r+'"); the node opened
    read-only, and the first write failed. Mode "a" (the default of ``open_group``) opens such
    a store to read, as it always has.
    """
    if mode == "r+" and store.read_only:
        raise ReadOnlyError(f"{store!r} is read-only, but mode 'r+' asks to write to it; open it with mode 'r'")


def _creates_array(kwargs: dict[str, Any]) -> bool:
    return "shape" in kwargs or "data" in kwargs


@overload
def open(  # noqa: A001 - the public name, as in zarr-python
    store: StoreLike = None,
    *,
    path: str = "",
    mode: Mode | None = None,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
    field: None = None,
    **create_kwargs: Any,
) -> Array | Group: ...


@overload
def open(  # noqa: A001
    store: StoreLike = None,
    *,
    path: str = "",
    mode: Mode | None = None,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
    field: str,
    **create_kwargs: Any,
) -> FieldArray: ...


def open(  # noqa: A001
    store: StoreLike = None,
    *,
    path: str = "",
    mode: Mode | None = None,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
    field: str | None = None,
    **create_kwargs: Any,
) -> Array | Group | FieldArray:
    """Open the array or group at ``store`` (a path, URL, Store or kvstore dict).

    ``mode`` has zarr-python's meanings: "r" read only; "r+" read/write, must exist; "a"
    read/write, created if missing (only when ``shape`` is given); "w" create, replacing what
    exists; "w-" create, failing if something exists. Keyword arguments other than these are
    passed to :func:`create` when an array is created; "w" and "w-" without ``shape`` create a
    group, as zarr-python does. ``mode`` defaults to "a". ``overwrite`` may be given where it
    agrees with ``mode`` (True with "w", False with the others); InvalidArgumentError otherwise.

    A TensorStore spec (a dict whose ``driver`` is "zarr3", "zarr2" or "zarr", or a TensorStore
    URL ending in a driver step, ``"file:///data/a.zarr|zarr3:"``) is opened by
    :func:`gpuzarr.tensorstore.open.open_spec`: its open/create/delete_existing flags decide,
    ``mode`` (if given) must agree with them, and keyword arguments are spec options.

    ``storage_options`` configure an object store or HTTP URL (``s3://``, ``gs://``,
    ``http(s)://``, ...) or kvstore: endpoint, region, credentials, retries, timeouts, requests
    in flight (see docs/stores.md); given for a store that takes none (a local path, a zip
    archive, ``memory://``, a ``file`` kvstore, a Store object) they are refused with
    InvalidArgumentError, as zarr-python refuses them.
    """
    if isinstance(store, str) and "|" in store:
        # A TensorStore URL ending in a driver step ("gs://b/a.zarr|zarr3:"): its spec.
        from .tensorstore.spec import spec_of_url

        store = spec_of_url(store) or store
    if isinstance(store, dict) and "kvstore" in store and store.get("driver") not in ("zarr3", "zarr2", "zarr"):
        # A TensorStore spec (it has a kvstore) of another driver, or of none: not a kvstore.
        raise MetadataError(f"driver: expected 'zarr3', 'zarr2' or 'zarr', got {store.get('driver')!r}")
    if isinstance(store, dict) and store.get("driver") in ("zarr3", "zarr2", "zarr"):
        from .tensorstore.open import open_spec

        if field is not None:  # a spec member there
            create_kwargs["field"] = field
        return open_spec(  # type: ignore[no-any-return]
            store, mode=mode, device=device, path=path or None, storage_options=storage_options, **create_kwargs
        )
    mode = "a" if mode is None else mode
    flags = parse_mode(mode)
    _take_zarr_version(create_kwargs)
    # The mode says whether what exists is replaced; ``overwrite`` may repeat it, not contradict it.
    overwrite = create_kwargs.pop("overwrite", None)
    if overwrite is not None and bool(overwrite) != flags.delete_existing:
        raise InvalidArgumentError(
            f"open: overwrite={overwrite!r} contradicts mode {mode!r} "
            "(mode 'w' replaces what exists, the others never do)"
        )
    unknown = set(create_kwargs) - CREATE_OPTIONS
    if unknown:
        raise TypeError(f"open: unexpected keyword arguments {sorted(unknown)}")
    s, base = _store(store, read_only=flags.read_only, storage_options=storage_options)
    _refuse_writing_mode(s, mode)
    full = _join(base, path)
    if mode == "w-":
        _refuse_other_data(s, full)
    if not flags.open and not _creates_array(create_kwargs):  # "w", "w-"
        node: Any = create_group(s, path=full, overwrite=flags.delete_existing, device=device, **create_kwargs)
    # Whether a node exists is asked only when an array could be created: on an object store
    # each question is a request, and opening what exists reads its metadata anyway.
    elif not flags.open or (flags.create and _creates_array(create_kwargs) and not node_exists(s, full)):
        node = create(s, path=full, overwrite=flags.delete_existing, device=device, **create_kwargs)
    else:
        # Creation arguments with mode "a" only apply when nothing exists yet; ``config`` (and
        # its ``write_empty_chunks``) applies to the array opened, as in zarr-python's open.
        node = open_node(s, full, device=device)
        config = with_write_empty_chunks(create_kwargs.get("config"), create_kwargs.get("write_empty_chunks"))
        if config is not None and isinstance(node, Array):
            node = node.with_config(config)
    if field is None:
        return node  # type: ignore[no-any-return]
    if not isinstance(node, Array):
        raise MetadataError(f"field: {field!r} given, but {full or '/'!r} is a group")
    from .core.field_array import select_field

    return select_field(node, field)


def open_async(
    store: StoreLike = None,
    *,
    path: str = "",
    mode: Mode | None = None,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
    field: str | None = None,
    **create_kwargs: Any,
) -> Future[Array | Group | FieldArray]:
    """:func:`open`, started and returned at once as a :class:`gpuzarr.futures.Future`.

    A ``mode`` or ``device`` that names nothing raises here. ``.result()`` gives the node and
    raises :func:`open`'s other errors; ``await`` waits without blocking an asyncio event loop
    (an object store's metadata is a request or more away).
    """
    if mode is not None:
        parse_mode(mode)
    # CUDA's current device is a thread's own: the one this thread has now is the one "gpu" means.
    # (A device string that names nothing raises here too.)
    return submit(
        _open_on,
        callers_device(device),
        store,
        path=path,
        mode=mode,
        device=device,
        storage_options=storage_options,
        field=field,
        **create_kwargs,
    )


def _open_on(index: int | None, store: StoreLike, **kwargs: Any) -> Array | Group | FieldArray:
    """:func:`open` on a request thread, with "gpu" meaning the caller's device ``index``."""
    with current_device_of_caller(index):
        node: Array | Group | FieldArray = open(store, **kwargs)
    return node


def _refuse_other_data(store: Store, path: str) -> None:
    """Mode "w-" creates only where nothing is.

    Files that are no Zarr node there are refused as well (zarr-python raises FileExistsError
    "already contains data"); a node there is refused by the creation itself. Stores that
    cannot list are not asked.
    """
    if not store.supports_listing:
        return
    first = next(iter(store.list_prefix(node_prefix(path))), None)
    if first is not None:
        raise ContainsNodeError(
            f"{path or '/'!r} of {store!r} already holds data ({first!r}); mode 'w-' creates only where nothing is"
        )


def _take_zarr_version(kwargs: dict[str, Any]) -> None:
    """zarr-python's deprecated ``zarr_version`` (it warns and takes it for ``zarr_format``)."""
    if "zarr_version" not in kwargs:
        return
    version = kwargs.pop("zarr_version")
    warnings.warn("zarr_version is deprecated: use zarr_format", DeprecationWarning, stacklevel=3)
    if version is None:
        return
    if kwargs.get("zarr_format") not in (None, version):
        raise InvalidArgumentError(f"zarr_version={version!r} and zarr_format={kwargs['zarr_format']!r}: they disagree")
    kwargs["zarr_format"] = version


def open_array(
    store: StoreLike = None, *, path: str = "", mode: Mode | None = None, device: str = "auto", **kwargs: Any
) -> Array:
    """Like :func:`open`, for an array (raises ArrayNotFoundError for a group or nothing)."""
    if mode in ("w", "w-") and not _creates_array(kwargs):
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
    store: StoreLike = None,
    *,
    path: str = "",
    mode: Mode = "a",
    device: str = "auto",
    zarr_format: int = 3,
    use_consolidated: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    attributes: dict[str, Any] | None = None,
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
    storage_options
        Options of an object store or HTTP URL or kvstore (see :func:`open`).
    attributes
        The attributes of a group created here (an existing group keeps its own), as in
        zarr-python.

    Returns
    -------
    Group
    """
    if use_consolidated is not None and not isinstance(use_consolidated, bool):
        raise InvalidArgumentError(f"use_consolidated: expected None, True or False, got {use_consolidated!r}")
    flags = parse_mode(mode)
    s, base = _store(store, read_only=flags.read_only, storage_options=storage_options)
    _refuse_writing_mode(s, mode)
    full = _join(base, path)
    if mode == "w-":
        _refuse_other_data(s, full)
    if not flags.open or (flags.create and read_node(s, full) is None):
        return create_group(
            s, path=full, attributes=attributes, overwrite=flags.delete_existing, device=device, zarr_format=zarr_format
        )
    try:
        node: Array | Group | None = open_node(s, full, device=device, use_consolidated=use_consolidated)
    except NodeNotFoundError:
        node = None
    if not isinstance(node, Group):
        raise GroupNotFoundError(f"no group at {full or '/'!r} in {s!r}")
    return node


def group(
    store: StoreLike = None,
    *,
    overwrite: bool = False,
    path: str | None = None,
    zarr_format: int | None = None,
    attributes: dict[str, Any] | None = None,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
) -> Group:
    """Open the group at ``store``, creating it when nothing is there (``zarr.group``).

    Parameters
    ----------
    store
        A path, URL, Store or kvstore dict; None (the default) is a new in-memory store.
    overwrite
        Replace whatever is at the path (and everything below it) with a new empty group.
    path
        The group's path below ``store``.
    zarr_format
        The format of a group that is created: 3 (the default) or 2. An existing group is
        opened in whichever format it has.
    attributes
        The attributes of a group that is created (an existing group keeps its own).
    device
        Where reads of the arrays opened through the group land.
    storage_options
        Options of an object store or HTTP URL or kvstore (see :func:`open`).

    Returns
    -------
    Group

    Raises
    ------
    GroupNotFoundError
        An array, not a group, is at the path (and ``overwrite`` is False).
    """
    s, base = _store(store, storage_options=storage_options)
    full = _join(base, path or "")
    if not overwrite and read_node(s, full) is not None:
        return open_group(s, path=full, mode="r+" if not s.read_only else "r", device=device)
    fmt = 3 if zarr_format is None else zarr_format
    return create_group(s, path=full, attributes=attributes, overwrite=overwrite, device=device, zarr_format=fmt)


def open_consolidated(
    store: StoreLike,
    *,
    path: str = "",
    mode: Mode = "a",
    device: str = "auto",
    zarr_format: int = 3,
    use_consolidated: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> Group:
    """Open a group through its consolidated metadata: :func:`open_group` with ``use_consolidated=True``.

    Parameters
    ----------
    store, path, mode, device, zarr_format, storage_options
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
    return open_group(
        store,
        path=path,
        mode=mode,
        device=device,
        zarr_format=zarr_format,
        use_consolidated=True,
        storage_options=storage_options,
    )


def consolidate_metadata(
    store: StoreLike, path: str = "", zarr_format: int | None = None, storage_options: dict[str, Any] | None = None
) -> Group:
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
    storage_options
        Options of an object store URL or kvstore (see :func:`open`).

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
    s, base = _store(store, storage_options=storage_options)
    full = _join(base, path)
    info, view = consolidate(s, full, zarr_format)
    return Group(s, full, info.attributes, zarr_format=info.zarr_format, consolidated=view)


def create_group(
    store: StoreLike = None,
    *,
    path: str = "",
    attributes: dict[str, Any] | None = None,
    overwrite: bool = False,
    device: str = "auto",
    zarr_format: int | None = 3,
    storage_options: dict[str, Any] | None = None,
) -> Group:
    """Create a group: v3 (zarr.json with node_type "group") or v2 (.zgroup + .zattrs).

    ``storage_options`` configure an object store URL or kvstore (see :func:`open`).
    """
    if zarr_format is None:  # zarr-python's: its default format
        zarr_format = 3
    if zarr_format not in (2, 3):
        raise MetadataError(f"zarr_format: expected 2 or 3, got {zarr_format!r}")
    s, base = _store(store, storage_options=storage_options)
    full = _join(base, path)
    return create_group_node(s, full, attributes, overwrite=overwrite, device=device, zarr_format=zarr_format)


def create(
    store: StoreLike = None,
    *,
    shape: Any = None,
    dtype: Any = None,
    data: Any = None,
    chunks: Any = None,
    shards: Any = None,
    zarr_format: int | None = 3,
    codecs: Any = None,
    compressor: Any = "auto",
    filters: Any = None,
    serializer: Any = "auto",
    compressors: Any = "auto",
    order: str | None = "C",
    fill_value: Any = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_separator: str | None = None,
    overwrite: bool = False,
    device: str = "auto",
    path: str = "",
    storage_options: dict[str, Any] | None = None,
    config: Any = None,
    chunk_shape: Any = None,
    write_empty_chunks: bool | None = None,
) -> Array:
    """Create an array and return it open for writing.

    Parameters
    ----------
    store
        A path, ``file://`` or ``memory://`` URL, Store, or TensorStore kvstore dict; None (the
        default) creates the array in a new in-memory store.
    shape
        The array's shape (an integer for one axis). Taken from ``data`` when omitted.
    dtype
        The data type (any Zarr core type, or a NumPy dtype). Taken from ``data`` when omitted;
        float64 when neither is given, as ``zarr.create``.
    data
        Values to write once the array exists: anything with a shape and dtype (NumPy, CuPy,
        PyTorch, a gpuzarr Array, which is copied a row of chunks at a time) or a nested list.
        A ``shape`` given with it must match it; a ``dtype`` given with it converts the values.
    chunks
        The chunk shape (the inner chunk shape when ``shards`` is given). An integer applies to
        every axis; a shorter tuple is completed, and -1 or None entries are filled, with the
        array's extents; False is one chunk holding the whole array; a list of per-axis size
        lists makes a rectilinear grid (ZEP 3).

        Omitted (None, True or "auto"), the chunk shape is chosen as zarr-python 3 chooses it
        (h5py's heuristic): starting from the whole array, the axes are halved in turn, first
        axis first, until a chunk is below, or within 50% of, a target of
        ``256 KiB * 2 ** log10(array size in MiB)`` clamped to 128 KiB .. 64 MiB, and below
        64 MiB. An 8000 x 8000 float32 array gets 500 x 1000 chunks (2 MB); a 1000-element
        array is one chunk. With ``shards`` and no ``chunks``, the guess aims at inner chunks
        of at most 1 MiB (again as zarr-python) and ``shards`` must be a multiple of it.
    shards
        The shard shape: wraps the codec chain in ``sharding_indexed`` with inner chunks
        ``chunks`` (v3 only).
    zarr_format
        3 (default) or 2.
    filters, serializer, compressors
        The codecs of each chunk, with zarr-python 3's keywords and meanings (``create_array``).
        v3: ``filters`` (array -> array codecs: ``transpose``, numcodecs filters such as
        ``numcodecs.delta``), then the ``serializer`` (the array -> bytes codec: ``bytes``,
        ``sharding_indexed``, ``numcodecs.pcodec``), then ``compressors`` (bytes -> bytes
        codecs). v2: ``filters`` and one compressor, numcodecs codecs.
        Each codec may be a zarr-python codec object (``zarr.codecs.ZstdCodec(level=3)``,
        ``zarr.codecs.numcodecs.Delta(dtype="<i4")``), a numcodecs codec object
        (``numcodecs.Zstd(level=3)``) or JSON (``{"name": "zstd", "configuration": {...}}``,
        ``{"id": "zstd", "level": 3}``); for v3, numcodecs blosc, zstd and gzip become the
        Zarr codecs of those names and others ``numcodecs.<id>``, as zarr-python's v2 -> v3
        migration maps them. ``filters`` and ``compressors`` take one codec or a list; None or
        ``[]`` means none. "auto" (the default of ``serializer`` and ``compressors``) means
        zarr-python's default: ``bytes`` (little endian), and zstd level 0.
    compressor
        The Zarr v2 spelling of ``compressors``: one codec, or None for no compression. Giving
        both raises :class:`~gpuzarr.errors.InvalidArgumentError`.
    codecs
        v3: the whole codec chain instead of ``filters``/``serializer``/``compressors`` (giving
        both raises :class:`~gpuzarr.errors.InvalidArgumentError`); codecs as above. A chain
        without an array -> bytes codec gets ``bytes``.
    order
        "C" (or None, zarr-python's default) or "F" (v3: a ``transpose`` codec).
    fill_value
        The value of elements never written (default: the type's zero in Zarr v3; in Zarr v2,
        null, where zarr-python 3 writes the type's zero, which xarray then takes for its
        ``_FillValue`` and masks: pass ``fill_value=0`` for zarr-python's).
    dimension_names, attributes, chunk_key_encoding, dimension_separator
        As in the Zarr specification (``dimension_names`` is v3 only).
    overwrite
        Replace a node that exists at the path, and its data. Otherwise creating where a node
        exists raises :class:`~gpuzarr.errors.ContainsNodeError`.
    device
        Where reads of the returned array land: "auto", "cpu", "gpu" or "cuda:N".
    path
        The array's path below ``store``.
    storage_options
        Options of an object store URL or kvstore (see :func:`open`).
    config
        zarr-python's ``ArrayConfig`` (or a dict of its keys), as :func:`create_array` takes it.
    write_empty_chunks
        ``zarr.create``'s keyword for ``config``'s ``write_empty_chunks``.
    chunk_shape
        zarr-python's Zarr v3 name for ``chunks``; giving both raises
        :class:`~gpuzarr.errors.InvalidArgumentError`.

    Returns
    -------
    Array
    """
    s, base = _store(store, storage_options=storage_options)
    return new_array(
        s,
        _join(base, path),
        shape=shape,
        dtype=dtype,
        data=data,
        overwrite=overwrite,
        device=device,
        config=config,
        chunk_shape=chunk_shape,
        write_empty_chunks=write_empty_chunks,
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
        compressors=compressors,
        serializer=serializer,
    )


def create_array(
    store: StoreLike = None,
    *,
    name: str | None = None,
    shape: Any = None,
    dtype: Any = None,
    data: Any = None,
    chunks: Any = "auto",
    shards: Any = None,
    filters: Any = "auto",
    compressors: Any = "auto",
    serializer: Any = "auto",
    fill_value: Any = None,
    order: str | None = None,
    zarr_format: int | None = 3,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_names: Any = None,
    storage_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    config: Any = None,
    write_data: bool = True,
    device: str = "auto",
) -> Array:
    """Create an array, with zarr-python 3's ``create_array`` arguments and meanings.

    As :func:`create` (a Zarr v2 array given no ``fill_value`` gets null, as there), but:

    - the array's path below ``store`` is ``name``;
    - ``write_data=False`` takes the shape and dtype from ``data`` without writing it;
    - ``config`` is zarr-python's ``ArrayConfig`` (or a dict of its keys):
      ``write_empty_chunks=True`` stores chunks equal to the fill value too (for this Array
      object: one opened again leaves them out), and its ``order`` must be "C" (gpuzarr
      returns C-ordered arrays);
    - ``order`` is the stored order of a Zarr v2 array; for Zarr v3, where zarr-python takes it
      for the memory order of reads alone, only "C" is taken (a ``transpose`` filter, or
      :func:`create` with ``order="F"``, stores chunks transposed).

    Returns
    -------
    Array
    """
    refuse_v3_memory_order(3 if zarr_format is None else zarr_format, order)
    s, base = _store(store, storage_options=storage_options)
    return new_array(
        s,
        _join(base, name or ""),
        shape=shape,
        dtype=dtype,
        data=data,
        overwrite=overwrite,
        device=device,
        config=config,
        write_data=write_data,
        chunks=chunks,
        shards=shards,
        zarr_format=zarr_format,
        filters=filters,
        compressors=compressors,
        serializer=serializer,
        order=order,
        fill_value=fill_value,
        dimension_names=dimension_names,
        attributes=attributes,
        chunk_key_encoding=chunk_key_encoding,
    )


def tree(grp: Group, expand: bool | None = None, level: int | None = None) -> TreeRepr:
    """The hierarchy below a group as text: ``grp.tree(expand, level)``, as ``zarr.tree``."""
    if not isinstance(grp, Group):
        raise TypeError(f"tree: expected a gpuzarr Group, got {type(grp).__name__}")
    return grp.tree(expand, level)
