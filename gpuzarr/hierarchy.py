"""What lives at a path of a store: a v3 or v2 array or group, an implicit group, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .errors import MetadataError, NodeNotFoundError
from .spec.v2 import ZARRAY, ZATTRS, ZGROUP, ArrayMetadataV2
from .spec.v3 import ZARR_JSON, ArrayMetadata, parse_json_document
from .store.base import Store

METADATA_KEYS = (ZARR_JSON, ZARRAY, ZGROUP)


def node_prefix(path: str) -> str:
    path = path.strip("/")
    return path + "/" if path else ""


@dataclass(frozen=True)
class NodeInfo:
    """A node found in a store. ``implicit`` groups have descendants but no metadata."""

    node_type: Literal["array", "group"]
    zarr_format: int
    document: dict[str, Any]
    attributes: dict[str, Any]
    implicit: bool = False


def _read_json(store: Store, key: str) -> dict[str, Any] | None:
    raw = store.get(key)
    return None if raw is None else parse_json_document(bytes(raw), key)


def read_node(store: Store, path: str, allow_implicit: bool = True) -> NodeInfo | None:
    prefix = node_prefix(path)
    doc = _read_json(store, prefix + ZARR_JSON)
    if doc is not None:
        key = prefix + ZARR_JSON
        if doc.get("zarr_format") != 3:
            raise MetadataError(f"{key}: zarr_format: expected 3, got {doc.get('zarr_format')!r}")
        node_type = doc.get("node_type")
        if node_type not in ("array", "group"):
            raise MetadataError(f"{key}: node_type: expected 'array' or 'group', got {node_type!r}")
        attrs = doc.get("attributes", {})
        if not isinstance(attrs, dict):
            raise MetadataError(f"{key}: attributes: expected an object, got {attrs!r}")
        return NodeInfo(node_type, 3, doc, attrs)
    for key, node_type in ((ZARRAY, "array"), (ZGROUP, "group")):
        doc = _read_json(store, prefix + key)
        if doc is None:
            continue
        if doc.get("zarr_format") != 2:
            raise MetadataError(f"{prefix}{key}: zarr_format: expected 2, got {doc.get('zarr_format')!r}")
        attrs = _read_json(store, prefix + ZATTRS) or {}
        return NodeInfo(node_type, 2, doc, attrs)  # type: ignore[arg-type]
    if allow_implicit and has_descendant_nodes(store, prefix):
        return NodeInfo("group", 3, {}, {}, implicit=True)
    return None


def has_descendant_nodes(store: Store, prefix: str) -> bool:
    """Whether any node metadata exists strictly below ``prefix`` (an implicit group)."""
    if not prefix:
        keys = store.list_prefix("")
    else:
        keys = store.list_prefix(prefix)
    return any(k.rsplit("/", 1)[-1] in METADATA_KEYS for k in keys)


def require_node(store: Store, path: str) -> NodeInfo:
    info = read_node(store, path)
    if info is None:
        raise NodeNotFoundError(f"no Zarr array or group at {path or '/'!r} in {store!r}")
    return info


def array_metadata(info: NodeInfo, path: str) -> ArrayMetadata | ArrayMetadataV2:
    """Parse an array node's metadata, prefixing errors with the document's key."""
    key = node_prefix(path) + (ZARR_JSON if info.zarr_format == 3 else ZARRAY)
    try:
        if info.zarr_format == 3:
            return ArrayMetadata.from_json(info.document)
        return ArrayMetadataV2.from_json(info.document, info.attributes)
    except MetadataError as exc:
        raise type(exc)(f"{key}: {exc}") from exc


def node_exists(store: Store, path: str) -> bool:
    prefix = node_prefix(path)
    return any(store.exists(prefix + k) for k in METADATA_KEYS)
