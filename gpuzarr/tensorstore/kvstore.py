"""TensorStore kvstore specs (``file`` and ``memory``) and the one parser of kvstore JSON.

A kvstore is ``{"driver": "file", "path": "/data/x.zarr/"}``, ``{"driver": "memory"}`` or a URL
(``"file:///data/x.zarr"``, ``"memory://name"``). Reference:
https://google.github.io/tensorstore/kvstore/index.html. Pure.

``file://`` URLs follow TensorStore, which is stricter than zarr-python's plain strings
(:mod:`gpuzarr.store.url`): the path is absolute and percent-decoded, the only host allowed is
``localhost``, and queries and fragments are refused. ``file://a.zarr`` names the host "a.zarr"
there, so it is an error naming the URL rather than a path below the current directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from ..errors import MetadataError
from ..metadata.json_util import expect_dict
from ..store.paths import directory_problem, path_problem

__all__ = ["KvStoreSpec", "file_url_path", "join_path"]

_KVSTORE_IGNORED = frozenset(
    {
        "context",
        "file_io_concurrency",
        "file_io_sync",
        "file_io_locking",
        "file_io_mode",
        "file_io_retries",
        "memory_key_value_store",
        "atomic",
    }
)


def join_path(*parts: str) -> str:
    """Join path components with "/" (empty components are dropped; no leading/trailing "/")."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def file_url_path(url: str, field_name: str = "kvstore") -> str:
    """The absolute directory of a ``file://`` kvstore URL, read as TensorStore reads it.

    ``file:///data/x.zarr/`` and ``file://localhost/data/x.zarr`` give ``/data/x.zarr``;
    ``%xx`` escapes are decoded. A host other than localhost, a relative or empty path, a query
    or a fragment raises MetadataError naming ``field_name`` and the URL.
    """
    rest = url[len("file://") :]
    if "?" in rest or "#" in rest:
        raise MetadataError(f"{field_name}: query strings and fragments are not supported in {url!r}")
    host, slash, path = rest.partition("/")
    if not slash and host in ("", "localhost"):
        raise MetadataError(f"{field_name}: {url!r} names no directory ('file:///abs/dir/')")
    if host not in ("", "localhost"):
        raise MetadataError(
            f"{field_name}: {url!r} names the host {host!r}; a file:// URL needs an absolute path "
            "('file:///abs/dir/'), and a relative directory is {'driver': 'file', 'path': 'dir'}"
        )
    path = unquote(slash + path)
    problem = directory_problem(path)
    if problem is not None:
        raise MetadataError(f"{field_name}: invalid directory {path!r} in {url!r}: {problem}")
    return path.rstrip("/") or "/"


@dataclass(frozen=True)
class KvStoreSpec:
    """A ``file`` or ``memory`` key-value store.

    ``path`` is the directory (file) or key prefix (memory), without a trailing "/". ``url`` is
    kept when the spec gave a ``"memory://name"`` URL, so that the URL's meaning in gpuzarr (a
    named memory store) is kept; a ``file://`` URL is just its absolute path.
    """

    driver: Literal["file", "memory"]
    path: str = ""
    url: str | None = None

    @classmethod
    def from_json(cls, value: Any, field_name: str = "kvstore") -> KvStoreSpec:
        """Parse a kvstore object or URL; MetadataError names ``field_name`` and the member."""
        if isinstance(value, str):
            if "|" in value:
                raise MetadataError(f"{field_name}: URL pipelines ('|') are not supported, got {value!r}")
            if value.startswith("file://"):
                return cls("file", file_url_path(value, field_name))
            if value.startswith("memory://"):
                return cls("memory", "", value)
            scheme = value.split("://", 1)[0] if "://" in value else None
            if scheme is not None:
                raise MetadataError(
                    f"{field_name}: the URL scheme {scheme!r} of {value!r} is not supported "
                    "(gpuzarr reads 'file://' and 'memory://' kvstores)"
                )
            raise MetadataError(
                f"{field_name}: expected a 'file://' or 'memory://' URL or a kvstore object, got {value!r}"
            )
        doc = expect_dict(value, field_name)
        if not doc:
            raise MetadataError(f"{field_name}: required member is missing")
        driver = doc.get("driver")
        if driver not in ("file", "memory"):
            raise MetadataError(f"{field_name}.driver: expected 'file' or 'memory', got {driver!r}")
        path = doc.get("path", "")
        if not isinstance(path, str):
            raise MetadataError(f"{field_name}.path: expected a string, got {path!r}")
        extra = set(doc) - {"driver", "path"} - _KVSTORE_IGNORED
        if extra:
            raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown kvstore member")
        if driver == "file":
            if not path:
                raise MetadataError(f"{field_name}.path: a file kvstore needs a path")
            problem = directory_problem(path)
        else:
            problem = path_problem(path)
        if problem is not None:
            raise MetadataError(f"{field_name}.path: invalid path {path!r}: {problem}")
        if driver == "file":
            return cls("file", path.rstrip("/") or "/")
        return cls("memory", path.strip("/"))

    def joined(self, path: str, field_name: str = "path") -> KvStoreSpec:
        """This store with ``path`` appended to its path (for a URL store: to the URL).

        A ``path`` with a '.', '..' or empty component, which could lead out of the store,
        raises MetadataError naming ``field_name``.
        """
        problem = path_problem(path)
        if problem is not None:
            raise MetadataError(f"{field_name}: invalid path {path!r}: {problem}")
        if not path.strip("/"):
            return self
        if self.driver == "file":
            new_path = self.path.rstrip("/") + "/" + path.strip("/")
            return KvStoreSpec("file", new_path, None)
        if self.url is not None:
            return KvStoreSpec("memory", join_path(self.path, path), self.url)
        return KvStoreSpec("memory", join_path(self.path, path))

    def to_json(self) -> Any:
        """The kvstore as JSON: a URL for a named memory store, else an object."""
        if self.url is not None and self.driver == "memory":
            return self.url.rstrip("/") + ("/" + self.path if self.path else "")
        if self.driver == "file":
            return {"driver": "file", "path": self.path.rstrip("/") + "/"}
        return {"driver": "memory", "path": self.path + "/"} if self.path else {"driver": "memory"}
