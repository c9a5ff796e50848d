"""Reading node metadata: what lives at a path of a store."""

from __future__ import annotations

from typing import Any

from .errors import MetadataError, NodeNotFoundError
from .spec.v3 import ZARR_JSON, parse_json_document
from .store.base import Store


def node_prefix(path: str) -> str:
    path = path.strip("/")
    return path + "/" if path else ""


def read_node_document(store: Store, path: str) -> dict[str, Any] | None:
    """The parsed zarr.json at ``path``, or None if there is none."""
    key = node_prefix(path) + ZARR_JSON
    raw = store.get(key)
    if raw is None:
        return None
    doc = parse_json_document(bytes(raw), key)
    if doc.get("zarr_format") != 3:
        raise MetadataError(f"{key}: zarr_format: expected 3, got {doc.get('zarr_format')!r}")
    if doc.get("node_type") not in ("array", "group"):
        raise MetadataError(f"{key}: node_type: expected 'array' or 'group', got {doc.get('node_type')!r}")
    return doc


def require_node_document(store: Store, path: str) -> dict[str, Any]:
    doc = read_node_document(store, path)
    if doc is None:
        raise NodeNotFoundError(f"no Zarr array or group at {path or '/'!r} in {store!r}")
    return doc


def node_exists(store: Store, path: str) -> bool:
    return store.exists(node_prefix(path) + ZARR_JSON)
