"""Public entry points: open, create, open_array, open_group, create_group."""

from __future__ import annotations

import json
from typing import Any, Literal

from .array import Array
from .errors import (
    ArrayNotFoundError,
    ContainsNodeError,
    GroupNotFoundError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
)
from .group import Group
from .hierarchy import array_metadata, node_exists, node_prefix, read_node, require_node
from .spec.build import build_v2, build_v3
from .spec.v2 import ZGROUP, ArrayMetadataV2
from .spec.v3 import ArrayMetadata
from .store import StoreLike, make_store
from .store.base import Store

Mode = Literal["r", "r+", "a", "w", "w-"]
MODES = ("r", "r+", "a", "w", "w-")


_CREATE_PARAMETERS: frozenset[str] = frozenset()  # filled at the end of this module


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {list(MODES)}, got {mode!r}")


def _join(base: str, path: str) -> str:
    return "/".join(p for p in (base.strip("/"), path.strip("/")) if p)


def open_node(store: Store, path: str, device: str = "auto") -> Array | Group:
    """Open whatever node lives at ``path``: a v3 or v2 array or group, or an implicit group."""
    info = require_node(store, path)
    if info.node_type == "array":
        return Array(store, path, array_metadata(info, path), device=device)
    return Group(store, path, info.attributes, device=device, zarr_format=info.zarr_format)


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
    _check_mode(mode)
    field = create_kwargs.pop("field", None)
    unknown = set(create_kwargs) - _CREATE_PARAMETERS
    if unknown:
        raise TypeError(f"open: unexpected keyword arguments {sorted(unknown)}")
    s, base = make_store(store, read_only=(mode == "r"))
    full = _join(base, path)
    if mode in ("w", "w-") and "shape" not in create_kwargs:
        node: Any = create_group(s, path=full, overwrite=(mode == "w"), device=device, **create_kwargs)
    elif mode in ("w", "w-") or (mode == "a" and not node_exists(s, full) and "shape" in create_kwargs):
        node = create(s, path=full, overwrite=(mode == "w"), device=device, **create_kwargs)
    else:
        # Creation arguments with mode "a" only apply when nothing exists yet.
        node = open_node(s, full, device=device)
    if field is None:
        return node  # type: ignore[no-any-return]
    if not isinstance(node, Array):
        raise MetadataError(f"field: {field!r} given, but {full or '/'!r} is a group")
    from .field_array import select_field

    return select_field(node, field)  # type: ignore[return-value]


def _create_parameter_names() -> frozenset[str]:
    import inspect

    return frozenset(inspect.signature(create).parameters) - {"store", "path", "device"}


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
    store: StoreLike, *, path: str = "", mode: Mode = "a", device: str = "auto", zarr_format: int = 3
) -> Group:
    """Open a group; with mode "a", "w" or "w-" it is created when missing."""
    _check_mode(mode)
    s, base = make_store(store, read_only=(mode == "r"))
    full = _join(base, path)
    if mode in ("w", "w-") or (mode == "a" and read_node(s, full) is None):
        return create_group(s, path=full, overwrite=(mode == "w"), device=device, zarr_format=zarr_format)
    node = open_node(s, full, device=device) if read_node(s, full) is not None else None
    if not isinstance(node, Group):
        raise GroupNotFoundError(f"no group at {full or '/'!r} in {s!r}")
    return node


def _missing_parents(store: Store, path: str) -> list[str]:
    """The ancestors of ``path`` (below the store root) that have no metadata yet.

    An array among the ancestors is an error: arrays cannot contain nodes.
    """
    parts = path.split("/") if path else []
    missing = []
    for i in range(1, len(parts)):
        ancestor = "/".join(parts[:i])
        info = read_node(store, ancestor, allow_implicit=False)
        if info is None:
            missing.append(ancestor)
        elif info.node_type == "array":
            raise ContainsNodeError(f"{ancestor!r} is an array: it cannot contain {path!r}")
    return missing


def _create_parents(store: Store, missing: list[str], zarr_format: int) -> None:
    # Written explicitly: v2 has no implicit groups, and zarr-python warns about directories
    # without metadata. Called after the child exists, so a child that fails validation leaves
    # nothing behind.
    for ancestor in missing:
        create_group(store, path=ancestor, zarr_format=zarr_format)


def _prepare_new_node(store: Store, path: str, overwrite: bool) -> None:
    if store.read_only:
        raise ReadOnlyError(f"cannot create a node in read-only {store!r}")
    if node_exists(store, path):
        if not overwrite:
            raise ContainsNodeError(
                f"a node already exists at {path or '/'!r} in {store!r} (pass overwrite=True)"
            )
        store.erase_prefix(node_prefix(path))
    elif overwrite:
        # Stale chunks of an earlier node (whose metadata is gone) must not leak into a new one.
        store.erase_prefix(node_prefix(path))


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
    missing = _missing_parents(s, full)
    _prepare_new_node(s, full, overwrite)
    if zarr_format == 2:
        s.set(node_prefix(full) + ZGROUP, b'{\n  "zarr_format": 2\n}')
    group = Group(s, full, {}, device=device, zarr_format=zarr_format)
    group._put_attributes(dict(attributes or {}))
    _create_parents(s, missing, zarr_format)
    return group


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
    """Create an array (see DESIGN §2 for every argument) and return it open for writing.

    ``shards`` wraps the codec chain in ``sharding_indexed`` with inner chunks ``chunks``.
    Creating where a node exists raises ContainsNodeError unless ``overwrite=True``, which
    discards the old node and its data.
    """
    metadata: ArrayMetadata | ArrayMetadataV2
    if zarr_format == 3:
        metadata = build_v3(
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            shards=shards,
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
    elif zarr_format == 2:
        for name, value in (("shards", shards), ("codecs", codecs), ("dimension_names", dimension_names),
                            ("chunk_key_encoding", chunk_key_encoding)):
            if value is not None:
                raise MetadataError(f"{name}: not available for zarr_format=2")
        metadata = build_v2(
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            compressor=compressor,
            filters=filters,
            order=order,
            fill_value=fill_value,
            attributes=attributes,
            dimension_separator=dimension_separator,
        )
    else:
        raise MetadataError(f"zarr_format: expected 2 or 3, got {zarr_format!r}")
    try:
        json.dumps(metadata.attributes, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"attributes: values must be JSON-serialisable ({exc})") from exc
    s, base = make_store(store)
    full = _join(base, path)
    # Resolve the codec chain before touching the store: bad codecs fail without side effects.
    array = Array(s, full, metadata, device=device)
    missing = _missing_parents(s, full)
    _prepare_new_node(s, full, overwrite)
    for key, document in metadata.documents().items():
        s.set(node_prefix(full) + key, document)
    _create_parents(s, missing, zarr_format)
    return array


_CREATE_PARAMETERS = _create_parameter_names() | {"attributes", "zarr_format", "overwrite"}
