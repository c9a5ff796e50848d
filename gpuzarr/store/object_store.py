"""Object stores (S3, GCS, Azure, S3-compatible servers) and HTTP(S), through obstore.

:class:`ObjectStore` wraps any obstore store (https://developmentseed.org/obstore/):
``ObjectStore(S3Store("bucket", prefix="x.zarr", ...))``, or ``ObjectStore.from_url(url,
storage_options)`` for ``s3://``, ``gs://``/``gcs://``, ``az://``/``azure://`` and
``http(s)://`` URLs (storage_options: :mod:`gpuzarr.store.object_options`).

Reads
-----
Every read is one GET; a ranged read asks for just its bytes (``Range: bytes=a-b``, or
``bytes=-n`` for a suffix) and checks that the answer covers exactly the bytes asked for (an
object shorter than the range clamps, as on a disk; a body cut short is a StoreError, never
short data). :meth:`ObjectStore.get_ranges` sends one request per range, concurrently: the shard
reader already merges inner chunks closer than 64 KiB into one range, and one request per range
is what lets each carry the ``If-Match`` of a snapshot. obstore releases the GIL while it
waits, so the reader pools (``io_concurrency``) keep that many requests in flight.
:meth:`ObjectStore.get_into` hands out obstore's own buffer (the decoders read it without a
copy). Stores made by :meth:`ObjectStore.from_url` with the same URL, options and environment
share one obstore store and its connections (:mod:`gpuzarr.store.object_clients`).

An HTTP URL may carry a query (``https://host/data.zarr?sig=...``: a shared access signature,
a token), which every request sends after its key, as TensorStore's ``http`` kvstore does with
its ``base_url``'s. It often is a credential: messages and ``repr`` show it as ``?…``, and the
URLs in obstore's messages lose it too. A spec (:meth:`ObjectStore.kvstore_json`) and a pickled
store keep it, since they open the data again.

Errors: a missing object (404) reads as None, a missing chunk (its fill value); 401 and 403 are
:class:`~gpuzarr.errors.StorePermissionError`; anything else that still fails after obstore's
retries (5xx, dropped connections, timeouts) is :class:`~gpuzarr.errors.StoreError`; all name
the store's URL and the key. Nothing but a 404 ever becomes a fill value.

Snapshots and writers
---------------------
:meth:`ObjectStore.snapshot` reads the ETag with its first request and sends it as ``If-Match``
with the later ones: every read through it sees one version of the object or fails. When a
writer replaced the object in between, the store answers 412, the snapshot reports
``changed()`` and raises CorruptChunkError, and the shard reader reads the shard again (at most
``SHARD_READ_ATTEMPTS`` times). ``consistent`` is False: unlike a held-open file, the old version
cannot be read once it is replaced.

``set`` is one PUT, atomic per object: readers see the old or the new value. :meth:`lock`
serialises read-modify-writes of one key between the threads of this process only. Two
processes (or hosts) that write different inner chunks of one shard at once each read the
shard, change their part and PUT it whole: the later PUT wins, and the other's inner chunks are
lost (no error), unless the writer uses conditional writes, as gpuzarr's own writer does
(``supports_conditional_writes``): :meth:`get_versioned` reads the object with its ETag,
:meth:`set_if` is the conditional PUT (``If-Match`` the ETag, or create-only), which the
writer retries from the fresh object when another writer came first (S3, GCS, Azure; not
HTTP). :meth:`erase_if` has no conditional DELETE to use: it compares the ETag with a HEAD,
then deletes, and a PUT landing between the two is erased.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import numpy as np

from .. import config
from ..errors import (
    CorruptChunkError,
    InvalidArgumentError,
    MetadataError,
    StoreError,
    StorePermissionError,
    UnsupportedOperationError,
)
from .base import BoundedBufferFor, Buffer, ByteRange, Snapshot, Store, validate_key, validate_prefix
from .locks import KeyLocks
from .object_clients import shared_store
from .object_options import ENVIRONMENT_PREFIXES, ObjectStoreOptions
from .shown import shown_url

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator, Sequence

T = TypeVar("T")

#: URL schemes :meth:`ObjectStore.from_url` reads, and the scheme obstore knows them by.
SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "az": "az",
    "azure": "azure",
    "abfs": "abfs",
    "abfss": "abfss",
    "http": "http",
    "https": "https",
}
#: Keys deleted per request by erase_prefix (S3's DeleteObjects takes at most 1000).
DELETE_BATCH = 1000

_locks = KeyLocks()


def import_obstore() -> Any:
    """The obstore module; an ImportError naming the extra to install when it is missing."""
    try:
        import obstore
    except ImportError as exc:
        raise ImportError(
            "object stores and HTTP need obstore: pip install 'gpuzarr[remote]' (or pip install obstore)"
        ) from exc
    return obstore


def _is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is obstore's panic (``pyo3_runtime.PanicException``, not importable by name)."""
    return type(exc).__name__ == "PanicException"


def _panics_as_store_errors(method: Callable[..., T]) -> Callable[..., T]:
    """``method`` of an ObjectStore, with obstore's panics raised as StoreError naming the store
    and the key (its first argument, or its ``what``).

    obstore panics (``pyo3_runtime.PanicException``, a BaseException that no ``except
    Exception`` catches) on some values it was configured with: a credential or region holding
    a character no HTTP header may hold, an endpoint it cannot parse given to a store made by
    the user.
    """

    @functools.wraps(method)
    def guarded(self: ObjectStore, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except BaseException as exc:
            if not _is_panic(exc):
                raise
            key = kwargs.get("what", args[-1] if method.__name__ == "_delete" else args[0] if args else "")
            raise StoreError(
                self.url, str(key), f"obstore failed ({_first_line(exc)}): a storage option it cannot use?"
            ) from exc

    return guarded


#: ``ObjectStore(_config=...)`` not given: the store's configuration is read from it
_UNREAD: Any = object()


class ObjectStore(Store):
    """A store on an object store or HTTP server, wrapping an obstore store.

    Parameters
    ----------
    store
        Any obstore store (``S3Store``, ``GCSStore``, ``AzureStore``, ``HTTPStore``, ...); its
        prefix is the store's root.
    read_only
        Refuse writes. An HTTP store is always read-only.
    url
        The URL shown in errors and ``repr`` (derived from ``store`` when None).
    io_concurrency
        Requests in flight per read; None: the ``remote_concurrency`` setting.
    """

    supports_partial_reads = True
    locks_across_threads = True
    supports_conditional_writes = True
    # An answer's headers carry its size (Content-Length, Content-Range) before its body comes:
    # get_into asks for its memory then, and a value larger than a reader allows is refused
    # without being downloaded (a hostile server's "chunk" of gigabytes).
    reads_sizes_first = True

    def __init__(
        self,
        store: Any,
        *,
        read_only: bool = False,
        url: str | None = None,
        io_concurrency: int | None = None,
        _config: Any = _UNREAD,
    ) -> None:
        if type(store).__module__.split(".")[0] != "obstore":
            hint = " (zarr-python's ObjectStore: pass its .store)" if hasattr(store, "store") else ""
            raise InvalidArgumentError(
                f"ObjectStore: expected an obstore store (obstore.store.S3Store, ...), got {type(store).__name__}"
                f"{hint}; for a URL use ObjectStore.from_url or gpuzarr.open(url)"
            )
        is_http = type(store).__name__ == "HTTPStore"
        super().__init__(read_only=read_only or is_http)
        self.store = store
        #: the store's configuration (bucket, endpoint, region, ...); None where obstore cannot
        #: give it (see :func:`_store_config`)
        # Read once per store: where obstore cannot give it, it prints its panic each time.
        self._config: dict[str, Any] | None = _store_config(store) if _config is _UNREAD else _config
        self.url = url if url is not None else _url_of(store, self._config)
        #: the query an HTTP store sends with every request ("" for none): obstore keeps the
        #: one its URL was given, and :func:`_url_of` leaves it out of ``url``
        self.query = urlsplit(str(store.url)).query if is_http else ""
        # obstore's local file system has no conditional PUT (PutMode::Update): read-modify-writes
        # take this process's locks there, as for an fsspec file system.
        self.supports_conditional_writes = type(store).__name__ != "LocalStore"
        self.is_http = is_http
        # An HTTP server has no listing: callers check the capability before they list.
        self.supports_listing = not is_http
        self._io_concurrency = io_concurrency
        # (url, storage_options) when made by from_url, to pickle by them
        self._recipe: tuple[str, dict[str, Any] | None] | None = None
        #: the host cache's byte budget that ``storage_options`` asked for (``cache_bytes``);
        #: the public API wraps the store in a CachingStore of that size
        self.cache_bytes: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_url(
        cls, url: str, storage_options: dict[str, Any] | None = None, read_only: bool = False
    ) -> ObjectStore:
        """The store at an ``s3://``, ``gs://``, ``gcs://``, ``az://``, ``azure://`` or
        ``http(s)://`` URL; ``storage_options`` as :mod:`gpuzarr.store.object_options` says.

        Raises
        ------
        InvalidArgumentError
            Naming the URL, for another scheme or an option obstore does not know.
        ImportError
            When obstore is not installed (the ``remote`` extra).
        """
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in SCHEMES:
            raise InvalidArgumentError(
                f"store: {shown_url(url)!r} is not an object store or HTTP URL ({', '.join(SCHEMES)})"
            )
        is_http = scheme.lower() in ("http", "https")
        if "#" in rest or ("?" in rest and not is_http):
            # The URL parser drops what follows: "s3://b/run#1.zarr" and "s3://b/run#2.zarr"
            # were both "run", each overwriting the other (TensorStore refuses them too).
            what, ends, escapes = (
                ("'#'", "a fragment", "%23") if is_http else ("'#' or '?'", "a fragment or a query", "%23, %3F")
            )
            raise InvalidArgumentError(
                f"store: {shown_url(url)!r}: a {what} in a store URL ends its path ({ends}), so the keys would "
                f"go elsewhere; percent-encode it ({escapes}) or give it as path="
            )
        query = ""
        if is_http:
            # A query goes with every request, after the key (TensorStore's base_url query):
            # obstore keeps the one of its URL. The path before it loses its trailing "/",
            # which obstore kept as an empty segment ("d.zarr//c/0").
            rest, _, query = rest.partition("?")
            authority, slash, path = rest.partition("/")
            if not authority.rpartition("@")[2]:
                # "http:///x" was read from the host "x", its spec naming no host at all.
                raise InvalidArgumentError(f"store: {shown_url(url)!r} names no host")
            rest = authority + slash + path.rstrip("/") if path.strip("/") else authority
        if SCHEMES[scheme.lower()] in ("s3", "gs") and "@" in rest.partition("/")[0]:
            # (Azure's abfs://container@account.dfs.core.windows.net/ has an "@" of its own.)
            # obstore ignores credentials in the authority; kept, they reached messages, reprs and
            # specs (the secret as part of the bucket's name). Not repeated here either.
            raise InvalidArgumentError(
                f"store: {scheme}://...@{rest.partition('/')[0].rpartition('@')[2]}/...: credentials in an "
                f"object store URL are not read; give them in storage_options (e.g. access_key_id and "
                "secret_access_key) or the environment"
            )
        _refuse_dot_segments(shown_url(url), rest)
        obstore = import_obstore()
        # The options are checked by obstore itself, at run time (as untyped dicts here).
        stores = importlib.import_module("obstore.store")

        environ_prefix = None if is_http else ENVIRONMENT_PREFIXES.get(SCHEMES[scheme.lower()])
        options = ObjectStoreOptions.from_storage_options(storage_options, environ_prefix)
        given_url = url  # what a pickled copy opens again (its credentials included)
        credentials = None
        if is_http:
            # http://user:password@host/...: Basic authentication, as curl (TensorStore) and
            # aiohttp (fsspec) send it; obstore ignores it. The password never reaches a
            # message, a repr or ``url``.
            rest, credentials = _take_userinfo(rest)
            url = f"{scheme}://{rest}"
        target = SCHEMES[scheme.lower()] + "://" + rest + ("?" + query if query else "")
        if is_http and options.config:
            raise InvalidArgumentError(
                f"storage_options: {sorted(options.config)[0]!r} is not an HTTP client option ({url})"
            )
        client = options.client_options
        if scheme.lower() == "http":
            # An http:// URL already says plain HTTP is meant (obstore refuses it by default).
            client = {"allow_http": True, **client}
        if credentials is not None:
            headers = dict(client.get("default_headers") or {})
            if not any(name.lower() == "authorization" for name in headers):
                headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
            client = {**client, "default_headers": headers}

        def build() -> Any:
            if is_http:
                return stores.HTTPStore(target, client_options=client, retry_config=options.retry_config)
            return stores.from_url(
                target, config=options.config or None, client_options=client, retry_config=options.retry_config
            )

        recipe = {"config": options.config, "client_options": client, "retry_config": options.retry_config}
        try:
            inner = shared_store(target, recipe, build)
        except obstore.exceptions.BaseError as exc:
            raise InvalidArgumentError(f"store: cannot open {shown_url(url)!r}: {_first_line(exc)}") from exc
        except (TypeError, ValueError, OverflowError) as exc:  # obstore's type checks of the options
            raise InvalidArgumentError(f"storage_options: cannot open {shown_url(url)!r}: {exc}") from exc
        store = cls(inner, read_only=read_only, url=url.rstrip("/"), io_concurrency=options.io_concurrency)
        store._recipe = (given_url, storage_options)
        store.cache_bytes = options.cache_bytes
        return store

    def __repr__(self) -> str:
        shown = self.url + ("?…" if self.query else "")
        return f"ObjectStore({shown!r}{', read_only=True' if self.read_only else ''})"

    def _identity(self) -> tuple[Any, ...]:
        """What makes two stores the same place: a URL names no endpoint (the same bucket on
        MinIO and on AWS) nor, for a wrapped obstore store, which one: the options made from,
        or the obstore store itself."""
        if self._recipe is not None:
            url, options = self._recipe
            made_from: Any = (url, repr(sorted((options or {}).items(), key=lambda kv: kv[0])))
        else:
            made_from = id(self.store)
        return (self.url, self.read_only, made_from)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectStore) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __getstate__(self) -> dict[str, Any]:
        # A store made from a URL travels as its URL and options, so that the other process
        # builds its own client (credentials from its own environment included); the pool and
        # the lock are made anew.
        state: dict[str, Any] = {"read_only": self.read_only, "url": self.url, "io_concurrency": self._io_concurrency}
        if self._recipe is not None:
            state["recipe"] = self._recipe
        elif self._config is None:
            # obstore pickles a store by its configuration, which it cannot give for this one.
            raise InvalidArgumentError(
                f"{self!r} cannot be pickled: obstore cannot give the configuration of its {type(self.store).__name__} "
                "(made with a client option such as allow_http among its configuration keys). Give client options "
                "in client_options={...}, or open the data by URL with storage_options"
            )
        elif type(self.store).__name__ == "MemoryStore":
            # obstore's in-memory store does not pickle (its objects live in this process).
            raise InvalidArgumentError(
                f"{self!r} cannot be pickled: obstore's MemoryStore lives in this process's memory; use a "
                "gpuzarr.MemoryStore (which travels by value) or a store of files or objects"
            )
        else:
            state["store"] = self.store
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "recipe" in state:
            url, options = state["recipe"]
            made = ObjectStore.from_url(url, options, read_only=state["read_only"])
            self.__dict__.update(made.__dict__)
            return
        ObjectStore.__init__(
            self, state["store"], read_only=state["read_only"], url=state["url"], io_concurrency=state["io_concurrency"]
        )

    def with_options(self, read_only: bool) -> ObjectStore:
        """The same objects, refusing writes when ``read_only``."""
        other = ObjectStore(
            self.store, read_only=read_only, url=self.url, io_concurrency=self._io_concurrency, _config=self._config
        )
        other._recipe = self._recipe
        other.cache_bytes = self.cache_bytes
        return other

    @property
    def io_concurrency(self) -> int:  # type: ignore[override]
        """Requests in flight per read: the store's own value, else ``remote_concurrency``."""
        value = self._io_concurrency
        return int(config.get("remote_concurrency")) if value is None else value

    def kvstore_json(self) -> dict[str, Any] | str:
        """TensorStore's ``s3`` (with ``endpoint`` and ``aws_region`` when set), ``gcs`` or
        ``http`` kvstore for this store; MetadataError for Azure, which TensorStore lacks."""
        url = urlsplit(self.url)
        doc: dict[str, Any]
        settings = self._config
        if settings is None and url.scheme not in ("http", "https"):
            raise MetadataError(
                f"spec: the configuration of {self!r} cannot be read (obstore fails on a store given a "
                "client option such as allow_http as a configuration key: give it in client_options)"
            )
        if url.scheme in ("s3", "s3a"):
            doc = {"driver": "s3", "bucket": url.netloc}
            assert settings is not None
            for ours, theirs in (("endpoint", "endpoint"), ("aws_region", "region")):
                value = settings.get(theirs, settings.get("aws_" + theirs))
                if value:
                    doc[ours] = value
            if _is_true(settings.get("skip_signature", settings.get("aws_skip_signature"))):
                # A public bucket read without credentials: the spec reopens it so elsewhere
                # (where no credentials are found, a signed request fails).
                doc["aws_credentials"] = {"type": "anonymous"}
        elif url.scheme in ("gs", "gcs"):
            doc = {"driver": "gcs", "bucket": url.netloc}
        elif url.scheme in ("http", "https"):
            # The query goes with every request, as TensorStore sends its base_url's.
            base_url = f"{url.scheme}://{url.netloc}" + (f"/?{self.query}" if self.query else "")
            doc = {"driver": "http", "base_url": base_url}
        else:
            raise MetadataError(f"spec: no TensorStore kvstore for {self!r}")
        path = unquote(url.path).strip("/")  # the keys' prefix: obstore decodes the URL's escapes
        return {**doc, "path": path + "/"} if path else doc

    # -- errors ------------------------------------------------------------------------------------

    def error(self, exc: BaseException, key: str) -> Exception:
        """The gpuzarr error for an obstore failure on ``key`` (not for a 404: that is None)."""
        import obstore.exceptions as obx

        reason = _first_line(exc)
        denied = isinstance(exc, obx.PermissionDeniedError | obx.UnauthenticatedError)
        if "169.254.169.254" in reason:
            # No credentials in the options or the environment: the last place AWS's chain looks
            # is an EC2 instance's metadata service, and its failure is what obstore reports.
            return StorePermissionError(
                self.url,
                key,
                "no credentials found (in storage_options, the environment or an instance's metadata service); "
                "give access_key_id and secret_access_key, or skip_signature=True for a public bucket "
                f"({reason})",
            )
        if denied or any(code in reason for code in ("403 Forbidden", "401 Unauthorized")):
            return StorePermissionError(self.url, key, f"permission denied ({reason})")
        return StoreError(self.url, key, reason)

    def _check_bucket(self, exc: BaseException, key: str) -> None:
        # A 404 for the bucket itself is a wrong URL, not a missing chunk: never a fill value.
        # S3 and GCS's XML API say NoSuchBucket, Azure ContainerNotFound, GCS's JSON API "The
        # specified bucket does not exist".
        text = str(exc)
        for marker in ("NoSuchBucket", "ContainerNotFound", "The specified bucket does not exist"):
            if marker in text:
                raise StoreError(self.url, key, f"the bucket does not exist ({marker})") from exc

    # -- reading -----------------------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        got = self._read(validate_key(key), byte_range)
        if got is None:
            return None
        return _as_buffer(got.data, whole=byte_range is None)

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        validate_key(key)
        return self._read_ranges(key, ranges, None)

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """As :meth:`Store.get_into`: ``buffer_for`` is asked for the bytes' memory once the
        answer's headers have said how many there are, before its body is read (a caller's
        bound refuses a value too large without downloading it), and the body is copied there;
        a :class:`~gpuzarr.store.base.BoundedBufferFor` only checks their number, and the
        answer is a view of obstore's own buffer."""
        whole = start == 0 and length is None
        got = self._read(validate_key(key), None if whole else ByteRange(start, length), buffer_for=buffer_for)
        if got is None:
            return None
        return memoryview(got.data).cast("B"), got.size

    def exists(self, key: str) -> bool:
        return self._head(validate_key(key)) is not None

    @_panics_as_store_errors
    def _head(self, key: str) -> dict[str, Any] | None:
        import obstore.exceptions as obx

        obstore = import_obstore()
        try:
            meta: dict[str, Any] = obstore.head(self.store, key)
        except (obx.NotFoundError, FileNotFoundError) as exc:
            self._check_bucket(exc, key)
            return None
        except obx.BaseError as exc:
            raise self.error(exc, key) from exc
        return meta

    @_panics_as_store_errors
    def _read(
        self,
        key: str,
        byte_range: ByteRange | None,
        if_match: str | None = None,
        buffer_for: Callable[[int], Any] | None = None,
    ) -> _Got | None:
        """One GET of ``key`` (part of it), checked to hold exactly the bytes asked for.

        With ``buffer_for``, the body goes into ``buffer_for(n)``'s memory, asked for once the
        headers have said ``n`` and before the body is read, and the answer's data is a view
        of it; without (or where it is a ``BoundedBufferFor``, which checks ``n`` there), the
        data is obstore's own buffer.
        """
        import obstore.exceptions as obx

        if byte_range is not None and byte_range.length == 0:
            return self._empty_read(key, if_match, buffer_for)
        answer = self._request(key, byte_range, if_match)
        if not isinstance(answer, tuple):  # absent, or empty past the end
            return answer
        result, size, want = answer
        del answer  # ``result`` alone holds the answer (see below)
        start, stop = result.range
        try:
            if (start, stop) != want:
                raise self._mismatch(key, want, size, f"bytes {start}-{stop}")
            _refuse_encoded(self.url, key, result)
            target = None
            if isinstance(buffer_for, BoundedBufferFor):  # its caller takes obstore's memory too
                buffer_for.check(stop - start)
            elif buffer_for is not None:
                target = memoryview(buffer_for(stop - start)).cast("B")
            data = _body_of(result, stop - start)
        except obx.BaseError as exc:  # the body cut short
            raise self.error(exc, key) from exc
        finally:
            # An answer refused before its body was read closes its connection now, not once
            # the error's traceback (which holds this frame) is gone: the server stops sending.
            e_tag = result.meta.get("e_tag")
            del result
        if len(data) != stop - start:
            raise self._mismatch(key, want, size, f"{len(data)} bytes for {start}-{stop}")
        if target is not None:
            # NumPy copies without the GIL (a memoryview's copy holds it while other threads'
            # requests wait for it).
            np.copyto(np.frombuffer(target, np.uint8), np.frombuffer(data, np.uint8))
            data = target
        return _Got(data, size, e_tag)

    def _empty_read(self, key: str, if_match: str | None, buffer_for: Callable[[int], Any] | None) -> _Got | None:
        """An empty range, which is no HTTP range: whether the object is there (and its size)."""
        meta = self._head(key)
        if meta is None:
            return None
        if if_match is not None and meta.get("e_tag") != if_match:
            raise _Replaced(key)
        return _Got(memoryview(b"") if buffer_for is not None else b"", int(meta["size"]), meta.get("e_tag"))

    @_panics_as_store_errors
    def _request(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> tuple[Any, int, tuple[int, int]] | _Got | None:
        """A GET's answer once its headers have come, before its body is read: (obstore's
        result, the object's size, the bytes wanted of it); None where the object is absent,
        and an empty answer where the range starts at or past its end."""
        import obstore.exceptions as obx

        obstore = import_obstore()
        options: dict[str, Any] = {}
        # A weak ETag (W/"...") never matches an If-Match (RFC 9110 compares them strongly: nginx
        # answered 412 to every range of a shard, read 4 times, then called corrupt): it is
        # compared with the answer's own instead, as TensorStore's http kvstore does.
        weak = if_match is not None and if_match.startswith("W/")
        if if_match is not None and not weak:
            options["if_match"] = if_match
        if byte_range is not None:
            options["range"] = _http_range(byte_range)
        try:
            result = obstore.get(self.store, key, options=options or None)
        except (obx.NotFoundError, FileNotFoundError) as exc:
            self._check_bucket(exc, key)
            return None
        except obx.PreconditionError as exc:
            if if_match is None:  # a 412 to no condition of ours: the server's error, named
                raise self.error(exc, key) from exc
            raise _Replaced(key) from exc
        except obx.BaseError as exc:
            if byte_range is not None:
                # 416: the range starts at or past the end (an empty object's every range), which
                # reads as empty, as on a disk.
                empty = self._empty_past_end(key, byte_range, if_match)
                if empty is not None:
                    return empty
            raise self.error(exc, key) from exc
        if weak and result.meta.get("e_tag") != if_match:
            del result  # closes the connection before the body is read
            raise _Replaced(key)
        size = int(result.meta["size"])
        return result, size, (0, size) if byte_range is None else byte_range.resolve(size)

    def _mismatch(self, key: str, want: tuple[int, int], size: int, got: str) -> StoreError:
        return StoreError(
            self.url,
            key,
            f"expected bytes {want[0]}-{want[1]} of {size}, got {got} (a cut-short or mismatched answer)",
        )

    def _empty_past_end(self, key: str, byte_range: ByteRange, if_match: str | None) -> _Got | None:
        meta = self._head(key)
        if meta is None:
            return None
        size = int(meta["size"])
        start, stop = byte_range.resolve(size)
        if start != stop:
            return None
        if if_match is not None and meta.get("e_tag") != if_match:
            raise _Replaced(key)
        return _Got(b"", size, meta.get("e_tag"))

    def _read_ranges(self, key: str, ranges: Sequence[ByteRange], if_match: str | None) -> list[Buffer] | None:
        """Several ranges of one object, one request each, concurrently; None when it is absent."""
        if not ranges:
            return [] if self._read(key, ByteRange(0, 0), if_match) is not None else None
        if len(ranges) == 1:
            got = [self._read(key, ranges[0], if_match)]
        else:
            got = list(self._pool_for().map(lambda r: self._read(key, r, if_match), ranges))
        if any(g is None for g in got):
            return None
        return [memoryview(g.data) for g in got if g is not None]

    def _pool_for(self) -> ThreadPoolExecutor:
        # The store's own threads for the ranges of one request: the reader's pool threads call
        # get_ranges, and waiting on their own pool could deadlock.
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.io_concurrency, thread_name_prefix="gpuzarr-io")
            return self._pool

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        yield _ETagSnapshot(self, validate_key(key))

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        self._check_writable()
        with _locks.hold((self.url, validate_key(key))):
            yield

    # -- listing -----------------------------------------------------------------------------------

    @_panics_as_store_errors
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        if self.is_http:
            raise UnsupportedOperationError(
                f"{self.url}: {prefix!r}: an HTTP server cannot list keys (read metadata by key instead)"
            )
        import obstore.exceptions as obx

        obstore = import_obstore()
        # obstore lists whole path segments: list the prefix's directory, keep what matches.
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        keys: list[str] = []
        firsts: set[str] = set()  # the first key of each batch (the keys of all: ~120 B each)
        try:
            for batch in obstore.list(self.store, directory or None, chunk_size=1000):
                paths = [meta["path"] for meta in batch]
                if paths and (paths[0] in firsts or len(set(paths)) < len(paths)):
                    # A server handing back a continuation token it gave before lists the same
                    # page forever (botocore stops so too: "the same next token was received
                    # twice"): the page comes again within a batch, or as a whole batch.
                    repeated = "the listing repeats keys: the server gave the same continuation twice"
                    raise StoreError(self.url, prefix, repeated)
                if paths:
                    firsts.add(paths[0])
                keys.extend(p for p in paths if p.startswith(prefix))
        except obx.BaseError as exc:
            raise self.error(exc, prefix) from exc
        return iter(sorted(keys))

    @_panics_as_store_errors
    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        validate_prefix(prefix)
        if self.is_http:
            raise UnsupportedOperationError(
                f"{self.url}: {prefix!r}: an HTTP server cannot list keys (read metadata by key instead)"
            )
        import obstore.exceptions as obx

        obstore = import_obstore()
        directory = prefix.rstrip("/")
        try:
            found = obstore.list_with_delimiter(self.store, directory or None)
        except obx.BaseError as exc:
            raise self.error(exc, prefix) from exc
        keys = sorted(meta["path"] for meta in found["objects"])
        dirs = sorted(p.rstrip("/") + "/" for p in found["common_prefixes"])
        return keys, dirs

    # -- writing -----------------------------------------------------------------------------------

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        self._put(validate_key(key), value, None)

    def get_versioned(self, key: str, bound: BoundedBufferFor | None = None) -> tuple[Buffer | None, str | None]:
        """The whole object at ``key`` (None if absent) and its ETag, from one GET; one larger
        than ``bound`` allows is refused from the answer's headers, before its body is read."""
        got = self._read(validate_key(key), None, buffer_for=bound)
        if got is None:
            return None, None
        if got.e_tag is None:
            raise StoreError(self.url, key, "the service sent no ETag (no conditional writes)")
        return _as_buffer(got.data, whole=True), got.e_tag

    def set_if(self, key: str, value: Buffer, e_tag: Any) -> bool:
        """Store ``value`` at ``key`` only if the object is still the version ``e_tag`` (a
        snapshot's ``version``, or :meth:`get_versioned`'s), or, with ``e_tag`` None, only if
        there is no object yet.

        Returns False, writing nothing, when another writer came first. Services without
        conditional writes raise StoreError naming the key.
        """
        import obstore.exceptions as obx

        self._check_writable()
        validate_key(key)
        try:
            self._put(key, value, "create" if e_tag is None else {"e_tag": e_tag})
        except _Conflict:
            return False
        except obx.BaseError as exc:  # pragma: no cover - _put translates
            raise self.error(exc, key) from exc
        return True

    @_panics_as_store_errors
    def _put(self, key: str, value: Buffer, mode: Any) -> None:
        import obstore.exceptions as obx

        obstore = import_obstore()
        data = value if isinstance(value, bytes) else bytes(memoryview(value).cast("B"))
        try:
            obstore.put(self.store, key, data, mode=mode)
        except (obx.PreconditionError, obx.AlreadyExistsError) as exc:
            if mode is None:
                raise self.error(exc, key) from exc
            raise _Conflict(key) from exc
        except (obx.NotFoundError, FileNotFoundError) as exc:
            # A PUT's 404 (obstore raises the builtin FileNotFoundError): a missing bucket.
            self._check_bucket(exc, key)
            raise self.error(exc, key) from exc
        except obx.BaseError as exc:
            raise self.error(exc, key) from exc

    def erase(self, key: str) -> None:
        self._check_writable()
        self._delete([validate_key(key)], key)

    def erase_if(self, key: str, e_tag: Any) -> bool:
        """Remove ``key`` only if the object is still the version ``e_tag``.

        obstore (and S3's general-purpose buckets, GCS through it) has no conditional DELETE:
        this is a HEAD comparing the ETag, then a plain DELETE. It returns False when the HEAD
        finds another version, but a writer whose PUT lands between the HEAD and the DELETE
        (one round trip) has its object erased.
        """
        self._check_writable()
        meta = self._head(validate_key(key))
        if meta is None:
            return True
        if meta.get("e_tag") != e_tag:
            return False
        self._delete([key], key)
        return True

    def erase_prefix(self, prefix: str) -> None:
        self._check_writable()
        keys = list(self.list_prefix(prefix))
        for i in range(0, len(keys), DELETE_BATCH):
            self._delete(keys[i : i + DELETE_BATCH], prefix)

    @_panics_as_store_errors
    def _delete(self, keys: list[str], what: str) -> None:
        import obstore.exceptions as obx

        obstore = import_obstore()
        try:
            obstore.delete(self.store, keys if len(keys) > 1 else keys[0])
        except (obx.NotFoundError, FileNotFoundError) as exc:
            self._check_bucket(exc, what)  # erasing an absent key is not an error; in no bucket it is
        except obx.BaseError as exc:
            raise self.error(exc, what) from exc

    def close(self) -> None:
        """Stop the store's request threads."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


class _Got:
    """The bytes of one GET, the object's size and its ETag."""

    __slots__ = ("data", "e_tag", "size")

    def __init__(self, data: Any, size: int, e_tag: str | None) -> None:
        self.data = data
        self.size = size
        self.e_tag = e_tag


class _Replaced(CorruptChunkError):
    """A snapshot's object was replaced (412 on If-Match): read it again."""

    def __init__(self, key: str) -> None:
        super().__init__(key, "the object was replaced while it was read")


class _Conflict(Exception):
    """A conditional PUT lost to another writer."""


class _ETagSnapshot(Snapshot):
    """One version of one object: the first read's ETag goes as If-Match with every later one."""

    consistent = False
    # As the store's: a version's size comes with the headers, before its body.
    reads_sizes_first = True

    def __init__(self, store: ObjectStore, key: str) -> None:
        super().__init__(key)
        self.store = store
        self.e_tag: str | None = None
        self._seen = False  # whether a read (or a HEAD) fixed the version
        self._absent = False
        self._replaced = False

    @property
    def version_known(self) -> bool:  # type: ignore[override]
        return self._seen

    @property
    def version(self) -> str | None:
        """The ETag of the version read (a HEAD asks for it before the first read)."""
        if not self._seen:
            meta = self.store._head(self.key)
            self._fix(None if meta is None else meta.get("e_tag"), meta is None)
        return self.e_tag

    def changed(self) -> bool:
        """Whether a read found the object replaced after the snapshot's first read."""
        return self._replaced

    def assume_version(self, version: Hashable) -> bool:
        """Send ``version`` (an ETag) as If-Match with every read, instead of a HEAD asking for
        the current one: a replaced object answers 412, and the read fails as
        :meth:`changed`."""
        if self._seen or not isinstance(version, str):
            return False
        self._fix(version, False)
        return True

    def _fix(self, e_tag: str | None, absent: bool) -> None:
        if not self._seen:
            self._seen, self.e_tag, self._absent = True, e_tag, absent

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        got = self._get(key, byte_range, None)
        # A view even of a whole value: snapshots serve the shard reader, which cuts inner
        # chunks out of a whole shard (megabytes, not worth a copy into bytes).
        return None if got is None else memoryview(got.data)

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """As :meth:`ObjectStore.get_into`, of this version."""
        whole = start == 0 and length is None
        got = self._get(key, None if whole else ByteRange(start, length), buffer_for)
        return None if got is None else (memoryview(got.data).cast("B"), got.size)

    def _get(self, key: str, byte_range: ByteRange | None, buffer_for: Callable[[int], Any] | None) -> _Got | None:
        self._check_key(key)
        if self._absent:
            return None
        try:
            got = self.store._read(key, byte_range, self.e_tag, buffer_for)
        except _Replaced:
            self._replaced = True
            raise
        if got is None:
            if self._seen:
                # Gone since the version was fixed: a replacement too.
                self._replaced = True
                raise _Replaced(key)
            self._fix(None, True)
            return None
        self._fix(got.e_tag, False)
        return got

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        self._check_key(key)
        if self._absent:
            return None
        if not self._seen and ranges:
            # The first read fixes the version the others must match.
            first = self.get(key, ranges[0])
            if first is None:
                return None
            if len(ranges) == 1:  # no more to read (asking for none cost a HEAD)
                return [first]
            rest = self._ranges(key, ranges[1:])
            return None if rest is None else [first, *rest]
        return self._ranges(key, ranges)

    def _ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        try:
            got = self.store._read_ranges(key, ranges, self.e_tag)
        except _Replaced:
            self._replaced = True
            raise
        if got is None and self._seen:
            self._replaced = True
            raise _Replaced(key)
        return got


def _body_of(result: Any, n: int) -> Any:
    """The body of obstore's ``result``, whose headers say it holds ``n`` bytes, read no
    further than one piece past them: a body that runs on (a chunked one sent with a
    ``Content-Length`` it does not keep to) is not buffered whole. One of another length comes
    back as far as it was read, for the caller's length check to refuse."""
    pieces = []
    got = 0
    # Pieces of at least ``n`` bytes (the last excepted): a body of ``n`` bytes is one piece.
    for piece in result.stream(min_chunk_size=max(n, 1)):
        pieces.append(piece)
        got += len(piece)
        if got > n:
            break
    if len(pieces) == 1:
        return pieces[0]
    return b"".join(pieces)


def _as_buffer(data: Any, whole: bool) -> Buffer:
    # Whole values are bytes (metadata documents go to json.loads); parts stay views of
    # obstore's buffer, without a copy.
    if whole:
        return data.to_bytes() if hasattr(data, "to_bytes") else bytes(data)
    return memoryview(data)


def _http_range(byte_range: ByteRange) -> Any:
    """obstore's ``range`` option for a non-empty ByteRange."""
    if byte_range.offset < 0:
        return {"suffix": -byte_range.offset}
    if byte_range.length is None:
        return {"offset": byte_range.offset}
    return (byte_range.offset, byte_range.offset + byte_range.length)


def _store_config(store: Any) -> dict[str, Any] | None:
    """An obstore store's ``config``, or None where obstore cannot give it.

    obstore 0.12 panics (``pyo3_runtime.PanicException``, a BaseException, so not caught as an
    error) reading the configuration of an ``S3Store`` made with a client option among its
    configuration keys (``S3Store(bucket, allow_http=True)``), a store that reads and writes as
    any other.
    """
    try:
        return dict(getattr(store, "config", None) or {})
    except BaseException as exc:
        if not _is_panic(exc):
            raise
        return None


def _url_of(store: Any, cfg: dict[str, Any] | None) -> str:
    """A URL naming an obstore store, for messages (and kvstore specs); ``cfg``: its
    configuration (None: not known, and the bucket named as unknown)."""
    name = type(store).__name__
    # A path object for obstore's LocalStore (its root directory), a string for the others.
    prefix = str(getattr(store, "prefix", None) or "").strip("/")
    # Escaped as a URL's path: kvstore_json unescapes it, and a "#" or "?" ended the path.
    prefix = quote(prefix, safe="/")
    if cfg is None:
        cfg = {"bucket": "(bucket unknown)", "container_name": "(container unknown)"}
    if name == "HTTPStore":
        # No "user:password@" in messages and specs (obstore does not send it either).
        return _without_userinfo(str(store.url).partition("?")[0]).rstrip("/")
    if name == "LocalStore":
        return f"file:///{prefix}"
    if name == "S3Store":
        base = f"s3://{cfg.get('bucket', '')}"
    elif name == "GCSStore":
        base = f"gs://{cfg.get('bucket', '')}"
    elif name == "AzureStore":
        base = f"az://{cfg.get('container_name', '')}"
    else:
        base = f"{name}://"
    return f"{base}/{prefix}" if prefix else base


def _first_line(exc: BaseException) -> str:
    """The first line of obstore's message, the queries of the URLs in it shown as ``?…``
    (obstore names the URL it requested, and an HTTP store's query may be a credential)."""
    text = str(exc).strip()
    return _URL_QUERY.sub(r"\1?…", text.splitlines()[0]) if text else type(exc).__name__


#: a URL's query (up to the next white space), in a message
_URL_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#]*)\?\S*")


def _take_userinfo(rest: str) -> tuple[str, str | None]:
    """``rest`` of an HTTP URL (after ``scheme://``) without its ``user:password@``, and the
    ``user:password`` it held (percent-decoded), or None. A user without a password is
    ``user:`` (RFC 7617's user-pass has its colon; curl sends it so)."""
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return rest, None
    user, _, password = userinfo.partition(":")
    return host + slash + path, f"{unquote(user)}:{unquote(password)}"


def _without_userinfo(url: str) -> str:
    """``url`` without a ``user:password@`` (for messages)."""
    scheme, sep, rest = url.partition("://")
    return scheme + sep + _take_userinfo(rest)[0] if sep else url


def _is_true(value: Any) -> bool:
    """A configuration flag as obstore reads it: a bool, or a string such as "true"."""
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"))


def _refuse_dot_segments(url: str, rest: str) -> None:
    """Refuse ``.`` and ``..`` path segments (percent-encoded too) in an object store or HTTP
    URL: the URL parser resolves them, so the keys would go elsewhere than the URL reads, and
    the spec would name a path no store opens. URLs travel in configuration others wrote."""
    path = rest.partition("/")[2]
    for segment in path.split("/"):
        if unquote(segment) in (".", ".."):
            raise InvalidArgumentError(
                f"store: {url!r}: '.' and '..' path segments are refused (the keys would go elsewhere than the URL "
                "reads); give the path without them"
            )


def _refuse_encoded(url: str, key: str, result: Any) -> None:
    """Refuse an answer whose body is encoded (``Content-Encoding: gzip``, sent unasked where an
    object was stored with it): its bytes are not the stored value, and ranges of it are no
    ranges of the value. obstore does not decode it; read as the value, a zarr.json was "not
    valid JSON" and a chunk would be corrupt."""
    attributes = getattr(result, "attributes", None) or {}
    encoding = next((str(v) for k, v in attributes.items() if str(k).lower() == "content-encoding"), None)
    if encoding is not None and encoding.lower() not in ("", "identity"):
        raise StoreError(
            url, key, f"the server sent the object encoded (Content-Encoding: {encoding}), which gpuzarr does not "
            "decode: store it without a Content-Encoding"
        )
