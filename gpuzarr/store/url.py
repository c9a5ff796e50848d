"""Store URLs given as strings to the public API, read the way zarr-python reads them.

zarr-python hands every string containing "://" to fsspec, whose local filesystem strips the
scheme and takes the rest as a path: ``file://data.zarr`` is ``data.zarr`` below the current
directory, ``file:///data/x.zarr`` the absolute ``/data/x.zarr``. gpuzarr does the same, and
also percent-decodes the path (``my%20data`` is ``my data``), as TensorStore does. Any other
scheme is refused by name: reading it as a local path would open, or create, the wrong place.
A URL's path with a '..' or empty component, or a '.' one other than a leading "./", is refused
too (fsspec would take it), as in TensorStore: URLs travel in configuration written by others.
A plain path string is the caller's own operating-system path and is taken as it is.

Object store and HTTP URLs (``s3://``, ``gs://``, ``az://``, ``abfs://``, ``http(s)://``, ...:
:data:`OBJECT_SCHEMES`) go to :class:`gpuzarr.store.object_store.ObjectStore` (obstore).
``zip://archive.zip`` names a zip archive (the path read as a ``file://`` one). URLs of other
schemes that fsspec knows (``sftp://``, ``hf://``, ...) and fsspec's chained URLs
(``simplecache::https://...``) go to :class:`gpuzarr.store.fsspec.FsspecStore`; fsspec's own
``memory://`` stays gpuzarr's named memory store (``FsspecStore.from_url("memory://x")`` reaches
fsspec's).

TensorStore specs have stricter rules of their own (no host, absolute paths only): see
:mod:`gpuzarr.tensorstore.kvstore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from ..errors import InvalidArgumentError, InvalidKeyError
from .paths import directory_problem
from .shown import shown_url

#: fsspec's local filesystem answers to both names.
LOCAL_SCHEMES = ("file", "local")

#: Object stores and HTTP, read through obstore (gpuzarr.store.object_store), never by the
#: fsspec adapter.
OBJECT_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "http", "https")


@dataclass(frozen=True)
class StoreUrl:
    """A parsed store URL: a local directory, the name of a shared memory store, a zip archive,
    an object store or HTTP URL, or a URL of one of fsspec's file systems."""

    kind: Literal["file", "memory", "zip", "object", "fsspec"]
    #: the directory (as given: relative paths are taken from the current directory), the
    #: memory store's name, the zip archive's path, or the whole URL (object stores, fsspec)
    location: str


def parse_store_url(value: str) -> StoreUrl | None:
    """The store a URL string names, or None when ``value`` is a plain path.

    Object store and HTTP URLs (:data:`OBJECT_SCHEMES`) are kind "object". Raises
    InvalidArgumentError, naming the URL, for schemes gpuzarr does not read, and
    InvalidKeyError for a local path with a '.', '..' or empty component.
    """
    if "::" in value:
        # fsspec chains ("simplecache::s3://b/x", "zip::file://a.zip") wrap other filesystems.
        return StoreUrl("fsspec", value)
    if "://" not in value:
        return None
    if "|" in value.partition("?")[0]:
        # A TensorStore URL pipeline ("gs://b/a.zarr|zarr3:"): taken as a directory, "a.zarr|zarr3:"
        # was created beside the array it names. gpuzarr.open reads one as TensorStore does.
        raise InvalidArgumentError(
            f"store: {shown_url(value)!r} is a TensorStore URL pipeline ('|'), which names an array: open it with "
            "gpuzarr.open(url) (or give the kvstore's URL and path=); a '|' in a URL's path is written %7C"
        )
    scheme, rest = value.split("://", 1)
    if scheme == "memory":
        return StoreUrl("memory", rest.strip("/"))
    if scheme in LOCAL_SCHEMES or scheme == "zip":
        path = unquote(rest)
        if not path:
            raise InvalidArgumentError(f"store: {value!r} names no {'archive' if scheme == 'zip' else 'directory'}")
        # "file://./data.zarr", the current directory's data.zarr, is zarr-python's own spelling.
        problem = directory_problem(path.removeprefix("./"))
        if problem is not None:
            raise InvalidKeyError(f"store: invalid directory {path!r} in {value!r}: {problem}")
        return StoreUrl("zip" if scheme == "zip" else "file", path)
    if scheme.lower() in OBJECT_SCHEMES:
        if not rest.strip("/"):
            raise InvalidArgumentError(f"store: {value!r} names no bucket or host")
        return StoreUrl("object", value)
    if _fsspec_knows(scheme):
        return StoreUrl("fsspec", value)
    raise InvalidArgumentError(
        f"store: the URL scheme {scheme!r} of {value!r} is not supported "
        "(gpuzarr reads local paths, file://, memory://, zip://, s3://, gs://, az:// and http(s):// "
        "URLs, and with fsspec installed, pip install 'gpuzarr[fsspec]', the URLs of fsspec's file systems)"
    )


def _fsspec_knows(scheme: str) -> bool:
    """Whether fsspec has a file system for ``scheme`` (False without fsspec installed)."""
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return False
    return scheme in known_implementations or scheme in registry
