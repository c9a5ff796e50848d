"""Stores (local directory, memory, zip archive, fsspec file systems) and the shard reader."""

from __future__ import annotations

import os
import threading
from typing import Any

from .base import ByteRange, Store, validate_key
from .fsspec import FsspecStore  # imports fsspec itself only when a store is made
from .local import LocalStore
from .memory import MemoryStore
from .url import parse_store_url
from .zip import ZipStore

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

    A path ending in ``.zip`` (not a directory) and a ``zip://`` URL give a ZipStore: mode "r"
    when ``read_only``, else "a" (read, and append once written to; created by the first
    write). ``{"driver": "zip", "base": {"driver": "file", "path": ...}}`` opens the same way.
    URLs of fsspec's file systems and chained fsspec URLs give an FsspecStore.
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
        if kvstore.driver == "zip":
            assert kvstore.base is not None
            return zip_store(kvstore.base.path, read_only), kvstore.path + "/" if kvstore.path else ""
        if kvstore.driver == "file":
            return LocalStore(kvstore.path, read_only=read_only), ""
        return memory_store("", read_only), kvstore.path + "/" if kvstore.path else ""
    if isinstance(store, (str, os.PathLike)) and _is_zip_path(store):
        return zip_store(store, read_only), ""
    if isinstance(store, os.PathLike):
        return LocalStore(store, read_only=read_only), ""
    if isinstance(store, str):
        url = parse_store_url(store)
        if url is None:
            return LocalStore(store, read_only=read_only), ""
        if url.kind == "memory":
            return memory_store(url.location, read_only), ""
        if url.kind == "zip":
            return zip_store(url.location, read_only), ""
        if url.kind == "fsspec":
            return FsspecStore.from_url(url.location, read_only=read_only), ""
        return LocalStore(url.location, read_only=read_only), ""
    raise TypeError(f"store: expected a path, URL, Store or kvstore dict, got {type(store).__name__}")


def zip_store(path: str | os.PathLike[str], read_only: bool = False) -> ZipStore:
    """The zip archive at ``path`` as the public API opens it: mode "r" when ``read_only``,
    else "a" (created by its first write)."""
    return ZipStore(path, mode="r" if read_only else "a")


def _is_zip_path(path: str | os.PathLike[str]) -> bool:
    """A local path (no URL) ending in ``.zip`` that is not a directory."""
    text = os.fspath(path)
    return "://" not in text and text.lower().rstrip("/").endswith(".zip") and not os.path.isdir(text)


__all__ = [
    "ByteRange",
    "FsspecStore",
    "LocalStore",
    "MemoryStore",
    "Store",
    "ZipStore",
    "make_store",
    "memory_store",
    "validate_key",
    "zip_store",
]
