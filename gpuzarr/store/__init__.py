"""Stores (local directory, memory) and the shard reader."""

from __future__ import annotations

import os
import threading
from typing import Any

from .base import ByteRange, Store, validate_key
from .caching import CachingStore
from .local import LocalStore
from .memory import MemoryStore
from .url import parse_store_url

_named_memory: dict[str, dict[str, bytes]] = {}
_named_lock = threading.Lock()

StoreLike = Any  # str | os.PathLike | Store | dict (kvstore spec)


def memory_store(name: str = "", read_only: bool = False) -> MemoryStore:
    """A memory store; the same non-empty ``name`` gives stores sharing one dict in a process."""
    if not name:
        return MemoryStore(read_only=read_only)
    with _named_lock:
        data = _named_memory.setdefault(name, {})
    return MemoryStore(data, read_only=read_only, name=name)


def make_store(store: StoreLike, read_only: bool = False) -> tuple[Store, str]:
    """A Store and the node path inside it from anything the public API accepts.

    Paths and ``file://`` URLs give a LocalStore rooted at that directory (a relative one below
    the current directory, ``file://data.zarr`` included, as in zarr-python: see
    :mod:`gpuzarr.store.url`); ``memory://name`` a named MemoryStore; a dict a kvstore spec
    ``{"driver": "file"|"memory", "path": ...}``, parsed by
    :class:`gpuzarr.tensorstore.kvstore.KvStoreSpec`. Other URL schemes raise
    InvalidArgumentError naming the URL.
    """
    if isinstance(store, Store):
        if read_only and not store.read_only:
            # Same data, refusing writes: never mutate the caller's object.
            if isinstance(store, LocalStore):
                return store.with_options(read_only=True), ""
            if isinstance(store, MemoryStore):
                return MemoryStore(store.data, read_only=True, name=store.name), ""
        return store, ""
    if isinstance(store, dict):
        # One parser of kvstore JSON, shared with TensorStore specs (imported on first use).
        from ..tensorstore.kvstore import KvStoreSpec

        kvstore = KvStoreSpec.from_json(store)
        if kvstore.driver == "file":
            return LocalStore(kvstore.path, read_only=read_only), ""
        return memory_store("", read_only), kvstore.path + "/" if kvstore.path else ""
    if isinstance(store, os.PathLike):
        return LocalStore(store, read_only=read_only), ""
    if isinstance(store, str):
        url = parse_store_url(store)
        if url is None:
            return LocalStore(store, read_only=read_only), ""
        if url.kind == "memory":
            return memory_store(url.location, read_only), ""
        return LocalStore(url.location, read_only=read_only), ""
    raise TypeError(f"store: expected a path, URL, Store or kvstore dict, got {type(store).__name__}")


__all__ = [
    "ByteRange",
    "CachingStore",
    "LocalStore",
    "MemoryStore",
    "Store",
    "make_store",
    "memory_store",
    "validate_key",
]
