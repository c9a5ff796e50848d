"""Stores (local directory, memory, object stores and HTTP, zip archive, fsspec file systems)
and the shard reader."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from ..errors import InvalidArgumentError
from .base import ByteRange, RangeReader, Store, validate_key
from .caching import CachingStore
from .fsspec import FsspecStore  # imports fsspec itself only when a store is made
from .local import LocalStore
from .memory import MemoryStore
from .object_store import ObjectStore
from .read_only import ReadOnlyStore, read_only_view
from .url import parse_store_url
from .zip import ZipStore

_named_memory: dict[str, dict[str, bytes]] = {}
_named_lock = threading.Lock()

StoreLike = Any  # str | os.PathLike | Store | dict (of keys, or a kvstore spec) | fsspec mapper


def innermost(store: Store) -> Store:
    """The store a view (read only, cached) shows; any other store itself."""
    while isinstance(store, (ReadOnlyStore, CachingStore)):
        store = store.inner
    return store


def memory_store(name: str = "", read_only: bool = False) -> MemoryStore:
    """A memory store; the same non-empty ``name`` gives stores sharing one dict in a process."""
    if not name:
        return MemoryStore(read_only=read_only)
    with _named_lock:
        data = _named_memory.setdefault(name, {})
    return MemoryStore(data, read_only=read_only, name=name)


def make_store(
    store: StoreLike, read_only: bool = False, storage_options: dict[str, Any] | None = None
) -> tuple[Store, str]:
    """A Store and the node path inside it from anything the public API accepts.

    Paths and ``file://`` URLs give a LocalStore rooted at that directory (a relative one below
    the current directory, ``file://data.zarr`` included, as in zarr-python: see
    :mod:`gpuzarr.store.url`); ``memory://name`` a named MemoryStore; ``s3://``, ``gs://``,
    ``gcs://``, ``az://``, ``azure://`` and ``http(s)://`` URLs an :class:`ObjectStore`
    configured by ``storage_options`` (:mod:`gpuzarr.store.object_options`); a dict a kvstore
    spec ``{"driver": "file"|"memory"|"s3"|"gcs"|"http"|"zip", ...}``, parsed by
    :class:`gpuzarr.tensorstore.kvstore.KvStoreSpec` (``storage_options`` add to and override
    what an object store's spec says). Other URL schemes raise InvalidArgumentError naming
    the URL.

    A path ending in ``.zip`` (not a directory) and a ``zip://`` URL give a ZipStore: mode "r"
    when ``read_only``, else "a" (read, and append once written to; created by the first
    write). ``{"driver": "zip", "base": {"driver": "file", "path": ...}}`` opens the same way.
    URLs of fsspec's file systems and chained fsspec URLs give an FsspecStore, configured by
    ``storage_options`` as fsspec takes them.
    """
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options: expected a dict or None, got {type(storage_options).__name__}")
    if isinstance(store, dict):
        if isinstance(store.get("driver"), str):
            return _from_kvstore(store, read_only, storage_options)
        return _memory_of(store, read_only, storage_options), ""
    if isinstance(store, Store):
        refuse_options(storage_options, f"a {type(store).__name__} object")
        return (read_only_view(store) if read_only else store), ""
    if isinstance(store, (str, os.PathLike)) and _is_zip_path(store):
        refuse_options(storage_options, "a zip archive")
        return zip_store(store, read_only), ""
    member = _inside_zip(store)
    if member is not None:
        refuse_options(storage_options, "a zip archive")
        archive, inner = member
        return zip_store(archive, read_only), inner
    if isinstance(store, os.PathLike):
        refuse_options(storage_options, "a local path")
        return LocalStore(store, read_only=read_only), ""
    if isinstance(store, str):
        return _from_string(store, read_only, storage_options), ""
    if _is_fsspec_mapper(store):
        refuse_options(storage_options, "an fsspec mapper")
        return FsspecStore(store.fs, store.root, read_only=read_only), ""
    raise TypeError(
        f"store: expected a path, URL, Store, dict (of keys, or a kvstore spec) or fsspec mapper, "
        f"got {type(store).__name__}"
    )


def _memory_of(data: dict[Any, Any], read_only: bool, storage_options: dict[str, Any] | None) -> MemoryStore:
    """A MemoryStore over the dict ``data`` (shared: writes go into it), as zarr-python takes a
    dict for a store (``store={}``). Its keys must be strings and its values bytes: a dict that
    zarr-python's MemoryStore filled holds its Buffer objects, which gpuzarr does not read."""
    refuse_options(storage_options, "a dict")
    for key, value in data.items():
        if not isinstance(key, str) or not isinstance(value, bytes):
            raise InvalidArgumentError(
                f"store: a dict used as a store holds str keys and bytes values; key {key!r} holds a "
                f"{type(value).__name__} (a dict filled by another library's store?)"
            )
    return MemoryStore(data, read_only=read_only)


def _is_fsspec_mapper(store: object) -> bool:
    """Whether ``store`` is an fsspec mapper (``fsspec.get_mapper(url)``, an ``FSMap``): told
    without importing fsspec, which only a program that made one has imported."""
    mapping = sys.modules.get("fsspec.mapping")
    return mapping is not None and isinstance(store, mapping.FSMap)


def _from_kvstore(
    doc: dict[str, Any], read_only: bool, storage_options: dict[str, Any] | None
) -> tuple[Store, str]:
    """The store and node path of a TensorStore kvstore spec."""
    # One parser of kvstore JSON, shared with TensorStore specs (imported on first use).
    from ..tensorstore.kvstore import KvStoreSpec, object_storage_options, object_store_url

    kvstore = KvStoreSpec.from_json(doc)
    prefix = kvstore.path + "/" if kvstore.path else ""
    if kvstore.driver not in ("s3", "gcs", "http"):
        refuse_options(storage_options, f"a {kvstore.driver!r} kvstore")
    if kvstore.driver == "zip":
        assert kvstore.base is not None
        return zip_store(kvstore.base.path, read_only), prefix
    if kvstore.driver in ("s3", "gcs", "http"):
        options = {**object_storage_options(kvstore), **(storage_options or {})}
        return _object_store(object_store_url(kvstore), options, read_only), ""
    if kvstore.driver == "file":
        return LocalStore(kvstore.path, read_only=read_only), ""
    return memory_store("", read_only), prefix


def _from_string(value: str, read_only: bool, storage_options: dict[str, Any] | None) -> Store:
    """The store a path or URL string names."""
    url = parse_store_url(value)
    if url is not None and url.kind == "fsspec":
        return FsspecStore.from_url(url.location, storage_options, read_only=read_only)
    if url is not None and url.kind == "object":
        return _object_store(url.location, storage_options, read_only)
    kind = "a local path" if url is None or url.kind not in ("memory", "zip") else f"a {url.kind}:// URL"
    refuse_options(storage_options, kind)
    if url is None:
        return LocalStore(value, read_only=read_only)
    if url.kind == "memory":
        return memory_store(url.location, read_only)
    if url.kind == "zip":
        return zip_store(url.location, read_only)
    return LocalStore(url.location, read_only=read_only)


def takes_storage_options(store: object) -> bool:
    """Whether ``store`` is a URL that ``storage_options`` configure (an object store, HTTP,
    fsspec), or a kvstore dict."""
    if isinstance(store, dict):
        return True
    if not isinstance(store, str):
        return False
    url = parse_store_url(store)
    return url is not None and url.kind in ("fsspec", "object")


def refuse_options(storage_options: dict[str, Any] | None, what: str) -> None:
    """``storage_options`` configure object stores and fsspec's file systems: given for
    ``what`` (which takes none), they would be silently ignored; zarr-python refuses them too."""
    if storage_options:
        raise InvalidArgumentError(
            f"storage_options: {what} takes none (they configure object-store, HTTP and fsspec URLs); "
            f"got {sorted(storage_options)}"
        )


def zip_store(path: str | os.PathLike[str], read_only: bool = False) -> ZipStore:
    """The zip archive at ``path`` as the public API opens it: mode "r" when ``read_only``,
    else "a" (created by its first write)."""
    return ZipStore(path, mode="r" if read_only else "a")


def _inside_zip(store: object) -> tuple[str, str] | None:
    """(archive, path inside it) where ``store`` (a local path or a ``zip://`` URL) names a node
    inside an existing zip archive, ``data.zip/raw/labels``, as a path inside a folder does;
    None otherwise."""
    if isinstance(store, os.PathLike):
        text = os.fspath(store)
    elif isinstance(store, str):
        url = parse_store_url(store)
        if url is not None and url.kind != "zip":
            return None
        text = store if url is None else url.location
    else:
        return None
    parts = text.replace(os.sep, "/").split("/")
    for end in range(1, len(parts)):
        archive = "/".join(parts[:end])
        if archive.lower().endswith(".zip") and os.path.isfile(archive):
            inner = "/".join(p for p in parts[end:] if p)
            return (archive, inner) if inner else None
    return None


def _is_zip_path(path: str | os.PathLike[str]) -> bool:
    """A local path (no URL) ending in ``.zip`` that is not a directory."""
    text = os.fspath(path)
    return "://" not in text and text.lower().rstrip("/").endswith(".zip") and not os.path.isdir(text)


def _object_store(url: str, storage_options: dict[str, Any] | None, read_only: bool) -> Store:
    """An ObjectStore for ``url``, wrapped in the host cache when ``cache_bytes`` asks for it."""
    store = ObjectStore.from_url(url, storage_options, read_only=read_only)
    return CachingStore(store, store.cache_bytes) if store.cache_bytes else store


__all__ = [
    "innermost",
    "ByteRange",
    "CachingStore",
    "FsspecStore",
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "RangeReader",
    "ReadOnlyStore",
    "Store",
    "ZipStore",
    "make_store",
    "memory_store",
    "read_only_view",
    "refuse_options",
    "takes_storage_options",
    "validate_key",
    "zip_store",
]
