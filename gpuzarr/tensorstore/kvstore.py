"""TensorStore kvstore specs (``file``, ``memory``, ``zip``, ``s3``, ``gcs``, ``http``) and the one
parser of kvstore JSON.

A kvstore is ``{"driver": "file", "path": "/data/x.zarr/"}``, ``{"driver": "memory"}``,
``{"driver": "zip", "base": {"driver": "file", "path": "/data/x.zip"}, "path": "x.zarr/"}`` or
a URL (``"file:///data/x.zarr"``, ``"memory://name"``, ``"file:///data/x.zip|zip:x.zarr/"``).
Reference: https://google.github.io/tensorstore/kvstore/index.html and
https://google.github.io/tensorstore/kvstore/zip/index.html. Pure.

TensorStore's zip kvstore only reads; gpuzarr also writes through it (a
:class:`~gpuzarr.store.zip.ZipStore` in mode "a"), and reads archives from local files only
(``base`` must be a ``file`` kvstore).

Object stores and HTTP, read through :class:`gpuzarr.store.ObjectStore`:
``{"driver": "s3", "bucket": "b", "path": "x.zarr/", "endpoint": "http://127.0.0.1:9000",
"aws_region": "us-east-1", "aws_credentials": {"type": "anonymous"}, "requester_pays": false,
"host_header": ...}``, ``{"driver": "gcs", "bucket": "b", "path": ..., "user_project": ...}`` and
``{"driver": "http", "base_url": "https://host/data", "path": ..., "headers": [...]}``, or the
URLs ``s3://b/x.zarr/``, ``gs://b/x.zarr/``, ``https://host/x.zarr/``. A ``base_url``'s query
(``https://host/data?sig=...``, and an ``https://`` URL's) goes with every request, after the
key, as TensorStore sends it. Credentials come from
the environment, as TensorStore and obstore take them (``AWS_ACCESS_KEY_ID``, ...);
``aws_credentials`` of type ``anonymous`` sends unsigned requests, and the types ``default``
and ``environment`` read the environment.

``file://`` URLs follow TensorStore, which is stricter than zarr-python's plain strings
(:mod:`gpuzarr.store.url`): the path is absolute and percent-decoded, the only host allowed is
``localhost``, and queries and fragments are refused. ``file://a.zarr`` names the host "a.zarr"
there, so it is an error naming the URL rather than a path below the current directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import quote, unquote, urlsplit

from ..errors import MetadataError
from ..metadata.json_util import expect_dict
from ..store.paths import directory_problem, path_problem
from ..store.shown import shown_url

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..metadata.json_types import KvStoreJSON

__all__ = [
    "KvStoreSpec",
    "file_url_path",
    "join_path",
    "object_storage_options",
    "object_store_url",
]

#: TensorStore's object store and HTTP drivers, and the members each takes besides driver/path.
REMOTE_MEMBERS: dict[str, frozenset[str]] = {
    "s3": frozenset({"bucket", "endpoint", "aws_region", "aws_credentials", "requester_pays", "host_header"}),
    "gcs": frozenset({"bucket", "user_project"}),
    "http": frozenset({"base_url", "headers"}),
}
#: TensorStore's context and concurrency members of remote drivers: gpuzarr has its own.
_REMOTE_IGNORED = frozenset({"s3_request_concurrency", "s3_request_retries", "gcs_request_concurrency",
                             "gcs_request_retries", "http_request_concurrency", "http_request_retries",
                             "experimental_s3_rate_limiter", "experimental_gcs_rate_limiter",
                             "data_copy_concurrency"})
_URL_DRIVERS = {"s3": "s3", "gs": "gcs", "http": "http", "https": "http"}

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
    """A ``file``, ``memory``, ``zip``, ``s3``, ``gcs`` or ``http`` key-value store.

    ``path`` is the directory (file) or key prefix (the others), without a trailing "/".
    ``url`` is kept when the spec gave a ``"memory://name"`` URL, so that the URL's meaning in
    gpuzarr (a named memory store) is kept; a ``file://`` URL is just its absolute path.
    ``members`` holds a remote driver's other members (``bucket``, ``endpoint``, ``base_url``,
    ...) as given. ``base`` is a zip kvstore's archive: a ``file`` kvstore whose path is the
    archive's file.
    """

    driver: Literal["file", "memory", "zip", "s3", "gcs", "http"]
    path: str = ""
    url: str | None = None
    members: Mapping[str, Any] = field(default_factory=dict)
    base: KvStoreSpec | None = None

    @classmethod
    def from_json(cls, value: Any, field_name: str = "kvstore", completed: bool = False) -> KvStoreSpec:
        """Parse a kvstore object or URL; MetadataError names ``field_name`` and the member.

        ``completed``: a spec's ``path`` follows, so a file kvstore may leave its own path
        empty (the spec's path is then the directory, relative to the working one or
        absolute), as TensorStore takes it; :meth:`checked_complete` checks the result.
        """
        if isinstance(value, str):
            return _from_url(value, field_name)
        doc = expect_dict(value, field_name)
        if not doc:
            raise MetadataError(f"{field_name}: required member is missing")
        driver = doc.get("driver")
        if driver == "zip":
            return _zip_from_json(doc, field_name)
        if driver in REMOTE_MEMBERS:
            return _remote_from_json(doc, field_name)
        if driver not in ("file", "memory"):
            raise MetadataError(
                f"{field_name}.driver: expected 'file', 'memory', 'zip', 's3', 'gcs' or 'http', got {driver!r}"
            )
        path = doc.get("path", "")
        if not isinstance(path, str):
            raise MetadataError(f"{field_name}.path: expected a string, got {path!r}")
        extra = set(doc) - {"driver", "path"} - _KVSTORE_IGNORED
        if extra:
            raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown kvstore member")
        if driver == "file":
            if not path:
                if completed:
                    return cls("file", "")
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
            if not self.path:  # the spec's path is the whole directory (see from_json)
                problem = directory_problem(path)
                if problem is not None:
                    raise MetadataError(f"{field_name}: invalid path {path!r}: {problem}")
                return KvStoreSpec("file", path.rstrip("/") or "/", None)
            new_path = self.path.rstrip("/") + "/" + path.strip("/")
            return KvStoreSpec("file", new_path, None)
        if self.driver == "zip":
            return KvStoreSpec("zip", join_path(self.path, path), None, base=self.base)
        if self.driver in REMOTE_MEMBERS:
            return KvStoreSpec(self.driver, join_path(self.path, path), None, self.members)
        if self.url is not None:
            return KvStoreSpec("memory", join_path(self.path, path), self.url)
        return KvStoreSpec("memory", join_path(self.path, path))

    def to_json(self) -> KvStoreJSON | str:
        """The kvstore as JSON: a URL for a named memory store, else an object."""
        if self.url is not None and self.driver == "memory":
            return self.url.rstrip("/") + ("/" + self.path if self.path else "")
        if self.driver == "file":
            return {"driver": "file", "path": self.path.rstrip("/") + "/"}
        if self.driver == "zip":
            assert self.base is not None
            doc: KvStoreJSON = {"driver": "zip", "base": {"driver": "file", "path": self.base.path}}
            if self.path:
                doc["path"] = self.path + "/"
            return doc
        if self.driver in REMOTE_MEMBERS:
            # ``members`` holds only the driver's members of REMOTE_MEMBERS (checked on parsing).
            remote = cast("KvStoreJSON", {"driver": self.driver, **self.members})
            if self.path:
                remote["path"] = self.path + "/"
            return remote
        return {"driver": "memory", "path": self.path + "/"} if self.path else {"driver": "memory"}


def _from_url(value: str, field_name: str) -> KvStoreSpec:
    """A kvstore given as a URL string."""
    if value.startswith("file://") and "|zip:" in value:
        archive, _, inner = value.partition("|zip:")
        return _zip(KvStoreSpec.from_json(archive, f"{field_name}.base"), unquote(inner), field_name)
    if "|" in value:
        raise MetadataError(f"{field_name}: URL pipelines ('|') are not supported, got {value!r}")
    if value.startswith("file://"):
        return KvStoreSpec("file", file_url_path(value, field_name))
    if value.startswith("memory://"):
        return KvStoreSpec("memory", "", value)
    scheme = value.split("://", 1)[0] if "://" in value else None
    if scheme in _URL_DRIVERS:
        return _remote_from_url(value, scheme, field_name)
    if scheme is not None:
        raise MetadataError(
            f"{field_name}: the URL scheme {scheme!r} of {value!r} is not supported "
            "(gpuzarr reads 'file://', 'memory://', 's3://', 'gs://' and 'http(s)://' kvstores)"
        )
    raise MetadataError(
        f"{field_name}: expected a 'file://' or 'memory://' URL or a kvstore object, got {value!r}"
    )


def _zip_from_json(doc: Mapping[str, Any], field_name: str) -> KvStoreSpec:
    extra = set(doc) - {"driver", "path", "base"} - _KVSTORE_IGNORED
    if extra:
        raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown kvstore member")
    if "base" not in doc:
        raise MetadataError(f"{field_name}.base: a zip kvstore needs the archive's kvstore")
    path = doc.get("path", "")
    if not isinstance(path, str):
        raise MetadataError(f"{field_name}.path: expected a string, got {path!r}")
    return _zip(KvStoreSpec.from_json(doc["base"], f"{field_name}.base"), path, field_name)


def _zip(base: KvStoreSpec, path: str, field_name: str) -> KvStoreSpec:
    if base.driver != "file":
        raise MetadataError(
            f"{field_name}.base: gpuzarr reads zip archives from local files, got a {base.driver!r} kvstore"
        )
    problem = path_problem(path)
    if problem is not None:
        raise MetadataError(f"{field_name}.path: invalid path {path!r}: {problem}")
    return KvStoreSpec("zip", path.strip("/"), None, base=base)


def _remote_from_json(doc: Mapping[str, Any], field_name: str) -> KvStoreSpec:
    """An ``s3``, ``gcs`` or ``http`` kvstore object, checked member by member."""
    driver = doc["driver"]
    allowed = REMOTE_MEMBERS[driver]
    extra = set(doc) - {"driver", "path"} - allowed - _REMOTE_IGNORED - _KVSTORE_IGNORED
    if extra:
        raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown member of an {driver!r} kvstore")
    required = "base_url" if driver == "http" else "bucket"
    if not isinstance(doc.get(required), str) or not doc[required]:
        raise MetadataError(
            f"{field_name}.{required}: an {driver!r} kvstore needs a non-empty string, got {doc.get(required)!r}"
        )
    for name in ("endpoint", "aws_region", "host_header", "user_project"):
        if name in doc and not isinstance(doc[name], str):
            raise MetadataError(f"{field_name}.{name}: expected a string, got {doc[name]!r}")
    if driver == "http":
        parts = urlsplit(doc["base_url"])
        # A query (a token, a signature) goes with every request, as TensorStore sends it.
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
            shown = shown_url(doc["base_url"])
            raise MetadataError(f"{field_name}.base_url: expected an http(s)://host/... URL, got {shown!r}")
    credentials = doc.get("aws_credentials")
    if credentials is not None:
        kind = credentials.get("type") if isinstance(credentials, dict) else None
        if kind not in ("default", "environment", "anonymous"):
            raise MetadataError(
                f"{field_name}.aws_credentials: gpuzarr takes the types 'default', 'environment' and "
                f"'anonymous' (credentials from the environment), got {credentials!r}"
            )
    path = doc.get("path", "")
    if not isinstance(path, str):
        raise MetadataError(f"{field_name}.path: expected a string, got {path!r}")
    problem = path_problem(path)
    if problem is not None:
        raise MetadataError(f"{field_name}.path: invalid path {path!r}: {problem}")
    members = {k: doc[k] for k in sorted(allowed) if k in doc}
    return KvStoreSpec(driver, path.strip("/"), None, members)


def _remote_from_url(value: str, scheme: str, field_name: str) -> KvStoreSpec:
    """``s3://bucket/path``, ``gs://bucket/path`` or ``http(s)://host/path``."""
    parts = urlsplit(value)
    driver = _URL_DRIVERS[scheme]
    # An HTTP URL's query goes with every request (its base_url's, in TensorStore's JSON).
    if (parts.query and driver != "http") or parts.fragment:
        raise MetadataError(f"{field_name}: query strings and fragments are not supported in {shown_url(value)!r}")
    if not parts.netloc:
        raise MetadataError(f"{field_name}: {shown_url(value)!r} names no bucket or host")
    if driver == "http":
        base_url = f"{parts.scheme}://{parts.netloc}" + (f"/?{parts.query}" if parts.query else "")
        doc: dict[str, Any] = {"driver": "http", "base_url": base_url, "path": unquote(parts.path)}
    else:
        doc = {"driver": driver, "bucket": parts.netloc, "path": unquote(parts.path)}
    return _remote_from_json(doc, field_name)


def object_store_url(kvstore: KvStoreSpec) -> str:
    """The URL :meth:`gpuzarr.store.ObjectStore.from_url` opens for a remote kvstore."""
    members = kvstore.members
    query = ""
    if kvstore.driver == "http":
        # base_url's query ends the URL, after the path (TensorStore sends it with every key).
        base, _, query = str(members["base_url"]).partition("?")
        base = base.rstrip("/")
    else:
        base = ("s3://" if kvstore.driver == "s3" else "gs://") + str(members["bucket"])
    # A spec's path is the keys' own prefix: escaped, since obstore reads the URL's escapes (a
    # "%41" or a "#" in it named another prefix).
    url = base + "/" + quote(kvstore.path, safe="/") if kvstore.path else base
    return url + "?" + query if query else url


def object_storage_options(kvstore: KvStoreSpec) -> dict[str, Any]:
    """obstore's configuration for a remote kvstore's members (see the module docstring)."""
    members = kvstore.members
    options: dict[str, Any] = {}
    if "endpoint" in members:
        options["endpoint"] = members["endpoint"]
    if "aws_region" in members:
        options["region"] = members["aws_region"]
    if members.get("requester_pays"):
        options["request_payer"] = True
    if (members.get("aws_credentials") or {}).get("type") == "anonymous":
        options["skip_signature"] = True
    if "headers" in members:
        headers = members["headers"]
        if not isinstance(headers, list) or not all(isinstance(h, str) and ":" in h for h in headers):
            raise MetadataError(f"kvstore.headers: expected a list of 'Name: value' strings, got {headers!r}")
        options["default_headers"] = {h.split(":", 1)[0].strip(): h.split(":", 1)[1].strip() for h in headers}
    return options
