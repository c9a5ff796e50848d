"""TensorStore kvstore specs (``file``, ``memory`` and ``zip``) and the one parser of kvstore JSON.

A kvstore is ``{"driver": "file", "path": "/data/x.zarr/"}``, ``{"driver": "memory"}``,
``{"driver": "zip", "base": {"driver": "file", "path": "/data/x.zip"}, "path": "x.zarr/"}`` or
a URL (``"file:///data/x.zarr"``, ``"memory://name"``, ``"file:///data/x.zip|zip:x.zarr/"``).
Reference: https://google.github.io/tensorstore/kvstore/index.html and
https://google.github.io/tensorstore/kvstore/zip/index.html. Pure.

TensorStore's zip kvstore only reads; gpuzarr also writes through it (a
:class:`~gpuzarr.store.zip.ZipStore` in mode "a"), and reads archives from local files only
(``base`` must be a ``file`` kvstore).

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
    """A ``file``, ``memory`` or ``zip`` key-value store.

    ``path`` is the directory (file) or key prefix (memory, zip), without a trailing "/".
    ``url`` is kept when the spec gave a ``"memory://name"`` URL, so that the URL's meaning in
    gpuzarr (a named memory store) is kept; a ``file://`` URL is just its absolute path.
    ``base`` is a zip kvstore's archive: a ``file`` kvstore whose path is the archive's file.
    """

    driver: Literal["file", "memory", "zip"]
    path: str = ""
    url: str | None = None
    base: KvStoreSpec | None = None

    @classmethod
    def from_json(cls, value: Any, field_name: str = "kvstore") -> KvStoreSpec:
        """Parse a kvstore object or URL; MetadataError names ``field_name`` and the member."""
        if isinstance(value, str):
            return cls._from_url(value, field_name)
        doc = expect_dict(value, field_name)
        if not doc:
            raise MetadataError(f"{field_name}: required member is missing")
        driver = doc.get("driver")
        if driver == "zip":
            return cls._zip_from_json(doc, field_name)
        if driver not in ("file", "memory"):
            raise MetadataError(f"{field_name}.driver: expected 'file', 'memory' or 'zip', got {driver!r}")
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

    @classmethod
    def _from_url(cls, value: str, field_name: str) -> KvStoreSpec:
        if value.startswith("file://") and "|zip:" in value:
            archive, _, inner = value.partition("|zip:")
            return cls._zip(cls.from_json(archive, f"{field_name}.base"), unquote(inner), field_name)
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

    @classmethod
    def _zip_from_json(cls, doc: dict[str, Any], field_name: str) -> KvStoreSpec:
        extra = set(doc) - {"driver", "path", "base"} - _KVSTORE_IGNORED
        if extra:
            raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown kvstore member")
        if "base" not in doc:
            raise MetadataError(f"{field_name}.base: a zip kvstore needs the archive's kvstore")
        path = doc.get("path", "")
        if not isinstance(path, str):
            raise MetadataError(f"{field_name}.path: expected a string, got {path!r}")
        return cls._zip(cls.from_json(doc["base"], f"{field_name}.base"), path, field_name)

    @classmethod
    def _zip(cls, base: KvStoreSpec, path: str, field_name: str) -> KvStoreSpec:
        if base.driver != "file":
            raise MetadataError(
                f"{field_name}.base: gpuzarr reads zip archives from local files, got a {base.driver!r} kvstore"
            )
        problem = path_problem(path)
        if problem is not None:
            raise MetadataError(f"{field_name}.path: invalid path {path!r}: {problem}")
        return cls("zip", path.strip("/"), None, base)

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
        if self.driver == "zip":
            return KvStoreSpec("zip", join_path(self.path, path), None, self.base)
        if self.url is not None:
            return KvStoreSpec("memory", join_path(self.path, path), self.url)
        return KvStoreSpec("memory", join_path(self.path, path))

    def to_json(self) -> Any:
        """The kvstore as JSON: a URL for a named memory store, else an object."""
        if self.url is not None and self.driver == "memory":
            return self.url.rstrip("/") + ("/" + self.path if self.path else "")
        if self.driver == "file":
            return {"driver": "file", "path": self.path.rstrip("/") + "/"}
        if self.driver == "zip":
            assert self.base is not None
            doc = {"driver": "zip", "base": {"driver": "file", "path": self.base.path}}
            return {**doc, "path": self.path + "/"} if self.path else doc
        return {"driver": "memory", "path": self.path + "/"} if self.path else {"driver": "memory"}
