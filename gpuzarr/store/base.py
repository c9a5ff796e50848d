"""The store interface: a small synchronous key -> bytes map with byte-range reads.

Keys are '/'-separated relative paths. A missing key reads as ``None`` (never an exception), so
that missing chunks are cheap to detect. Every store passes tests/store/conformance.py; the
interface is public, so that users can plug in their own (docs/stores.md, "Writing your own
store", has a complete example). :class:`Store` says what a store must implement and what it may.

Two capabilities serve concurrent writers and readers (docs/reliability.md says what each store
promises):

* :meth:`Store.snapshot` reads several parts of one version of a value (a shard's index, then
  its inner chunks) while a writer may replace the value in between;
* :meth:`Store.lock` serialises the read-modify-write of one key (a shard some of whose inner
  chunks change, a partly written chunk, a group's metadata) between writers;
* conditional writes (:attr:`Store.supports_conditional_writes`: :meth:`Store.get_versioned`,
  :meth:`Store.set_if`, :meth:`Store.erase_if`) let a read-modify-write detect that another
  writer came first and start again, where no lock reaches (processes on other hosts).
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import (
    GpuZarrError,
    InvalidArgumentError,
    InvalidKeyError,
    MetadataError,
    ReadOnlyError,
    StoreError,
    StorePermissionError,
    UnsupportedOperationError,
)
from .locks import process_locks
from .paths import path_problem

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator, Sequence

Buffer = Any  # bytes, bytearray, memoryview or a C-contiguous NumPy array
if TYPE_CHECKING:
    #: ``Store.value_reader``'s ``read(key)``: the value of ``key`` (None: absent), valid until
    #: the next call.
    ValueReader = Callable[[str], Buffer | None]

#: The first part of the keys of :meth:`Store.lock`'s default locks in ``process_locks``.
_STORE_LOCKS = "Store.lock"


@dataclass(frozen=True, slots=True)
class ByteRange:
    """``length`` bytes from ``offset``; ``length=None`` reads to the end.

    A negative ``offset`` with no length is a suffix request: the last ``-offset`` bytes.
    """

    offset: int
    length: int | None = None

    def __post_init__(self) -> None:
        if self.length is not None and (self.length < 0 or self.offset < 0):
            raise InvalidArgumentError(
                f"byte range: expected offset >= 0 and length >= 0 (or a suffix with no length), "
                f"got offset {self.offset}, length {self.length}"
            )

    @classmethod
    def suffix(cls, nbytes: int) -> ByteRange:
        """The last ``nbytes`` bytes of a value."""
        if nbytes < 0:
            raise InvalidArgumentError(f"byte range: a suffix needs nbytes >= 0, got {nbytes}")
        # offset -0 would be 0, which reads everything: the empty suffix is an empty range.
        return cls(-nbytes, None) if nbytes else cls(0, 0)

    def resolve(self, size: int) -> tuple[int, int]:
        """``(start, stop)`` within an object of ``size`` bytes (clamped to it)."""
        if self.offset < 0:
            return max(size + self.offset, 0), size
        stop = size if self.length is None else min(self.offset + self.length, size)
        return min(self.offset, size), stop


#: Anything :func:`validate_key` refuses, found in one pass (it runs once per chunk read): a
#: backslash, a NUL, an empty segment, a leading or trailing '/', a '.' or '..' segment.
_SUSPECT_KEY = re.compile(r"[\\\0]|//|^/|/$|(?:^|/)\.\.?(?:/|$)")


def os_failure(url: str, key: str | None, action: str, exc: OSError) -> OSError:
    """A file system call's failure ``exc`` (other than a missing key) as stores report one.

    :class:`~gpuzarr.errors.StorePermissionError` for permission denied, else
    :class:`~gpuzarr.errors.StoreError`, naming the store (``url``), the key and what was being
    done (``action``). Both are OSErrors and keep ``exc``'s ``errno``, ``strerror`` and
    ``filename``, so code that tests the errno (ENOSPC, EACCES) still can. gpuzarr's own errors
    (a link leaving the root) come back unchanged. For stores of your own too.
    """
    if isinstance(exc, GpuZarrError):
        return exc
    reason = f"{action}: {exc.strerror or exc}"
    error = StorePermissionError(url, key, reason) if isinstance(exc, PermissionError) else StoreError(url, key, reason)
    error.errno, error.strerror, error.filename = exc.errno, exc.strerror, exc.filename
    return error


@contextlib.contextmanager
def os_errors(url: str, key: str | None, action: str) -> Iterator[None]:
    """The file system's failures inside the block, raised as :func:`os_failure`'s errors.

    gpuzarr's own errors pass unchanged. Not for hot paths: a ``with`` costs microseconds,
    where ``try`` costs nothing until something is raised.
    """
    try:
        yield
    except GpuZarrError:
        raise
    except OSError as exc:
        raise os_failure(url, key, action, exc) from exc


def validate_key(key: str) -> str:
    """Refuse keys that could escape the store's root or mean different things on other OSes."""
    if type(key) is str and key and _SUSPECT_KEY.search(key) is None:
        return key
    if not isinstance(key, str):
        raise InvalidKeyError(f"store keys must be strings, got {type(key).__name__}")
    if key == "" or key.endswith("/"):
        raise InvalidKeyError(f"invalid store key {key!r}: a key must be non-empty and not end in '/'")
    if key.startswith("/") or "\\" in key:
        raise InvalidKeyError(f"invalid store key {key!r}: no leading '/' or backslash allowed")
    if "\0" in key:  # no file or object name can hold one
        raise InvalidKeyError(f"invalid store key {key!r}: a NUL character is refused")
    parts = key.split("/")
    if any(p in ("..", ".") for p in parts) or "" in parts[:-1]:
        raise InvalidKeyError(f"invalid store key {key!r}: '.', '..' and empty segments are refused")
    return key


def validate_path(path: str, field: str = "path") -> str:
    """``path``, a node path relative to a store's root, without its leading and trailing '/'.

    Raises
    ------
    InvalidKeyError
        Naming ``field`` and the path, when ``path`` is not a string or has a '.', '..' or empty
        component (see :func:`path_problem`).
    """
    if not isinstance(path, str):
        raise InvalidKeyError(f"{field}: expected a string, got {type(path).__name__}")
    problem = path_problem(path)
    if problem is not None:
        raise InvalidKeyError(f"{field}: invalid path {path!r}: {problem}")
    return path.strip("/")


def validate_prefix(prefix: str) -> str:
    """Refuse prefixes that are not a valid key plus at most one trailing '/' ("" is the root)."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


class Store(ABC):
    """Base class of all stores: subclass it to read and write Zarr data anywhere.

    A store maps keys (``"zarr.json"``, ``"raw/c/0/1"``: '/'-separated relative paths) to byte
    values. gpuzarr calls it from many threads at once, so its methods must be thread-safe.

    **Must implement**

    - :meth:`get` ``(key, byte_range=None)``: the value, or the part a :class:`ByteRange`
      names (``ByteRange(offset, length)``, ``ByteRange(offset)`` to the end, or
      ``ByteRange.suffix(n)``, the last ``n`` bytes; :meth:`ByteRange.resolve` clamps one to a
      size). Ranges past the end give the bytes there are, possibly none.
    - :meth:`list_prefix` ``(prefix)``: every key starting with ``prefix`` ("" is every key).
    - :meth:`set` ``(key, value)``: store ``value`` (bytes, bytearray, memoryview or a
      C-contiguous NumPy array; copy it, the caller may reuse its buffer).
    - :meth:`erase` ``(key)``: remove ``key``.

    **May override**, for speed or stronger guarantees (the defaults are built on the four
    above): :meth:`get_ranges` (many ranges of one key at once: one request of many ranges,
    or requests in flight together), :meth:`get_into` (read into a buffer the caller gives),
    :meth:`exists`, :meth:`list_dir`, :meth:`erase_prefix`, :meth:`snapshot` (one version of a
    value for several reads), :meth:`lock` (a per-key read-modify-write lock),
    :meth:`kvstore_json` (TensorStore's spec of the store) and :meth:`close`.

    **Contracts** (checked by the conformance suite, tests/store/conformance.py):

    - a missing key reads as None from :meth:`get`, :meth:`get_ranges` and :meth:`get_into`,
      never as an exception; any other failure raises (a :class:`~gpuzarr.errors.GpuZarrError`
      naming the store and the key), never None: None means "fill value" to the readers;
    - every method validates keys with :func:`validate_key` and prefixes with
      :func:`validate_prefix` first, so that no key leaves the store's root;
    - :meth:`set` is atomic for readers: a reader sees the old value or the new one, whole;
    - erasing an absent key is not an error;
    - with ``read_only`` True, :meth:`set`, :meth:`erase`, :meth:`erase_prefix` and
      :meth:`lock` raise :class:`~gpuzarr.errors.ReadOnlyError` (call :meth:`_check_writable`
      first).

    **Capabilities** are class (or instance) attributes that the API and the readers consult:
    ``read_only``, :attr:`supports_partial_reads`, :attr:`supports_writes`,
    :attr:`supports_deletes`, :attr:`supports_listing`, :attr:`locks_across_threads`,
    :attr:`locks_across_processes` and :attr:`supports_conditional_writes`. A store that cannot
    do something by its nature (erase from a read-only server, list an HTTP server) says so
    with the flag and raises
    :class:`~gpuzarr.errors.UnsupportedOperationError` when asked; the conformance suite skips
    what a store declares it cannot do.

    Parameters
    ----------
    read_only
        Refuse writes (:class:`~gpuzarr.errors.ReadOnlyError`).
    """

    #: True when get() with a ByteRange costs only the bytes asked for.
    supports_partial_reads: bool = True
    #: False for stores that can never be written (an HTTP server): set() raises ReadOnlyError.
    supports_writes: bool = True
    #: False for stores that cannot remove a key: erase() of a present key raises
    #: UnsupportedOperationError (of an absent one it still succeeds).
    supports_deletes: bool = True
    #: False for stores that cannot enumerate keys (an HTTP server without listings):
    #: list_prefix() and list_dir() raise UnsupportedOperationError, and nodes are opened by key.
    supports_listing: bool = True
    #: Requests a read should keep in flight against this store, when that is more than the
    #: CPU ``concurrency``: a remote store waits on the network, not on cores, so its readers
    #: run their fetches on that many threads. None (local and memory stores): CPU-bound.
    io_concurrency: int | None = None
    #: True when :meth:`open_reader` reads only the ranges asked for, each for about what it
    #: copies (a local file): a reader then fetches just the parts of a chunk it decodes (the
    #: Blosc blocks a crop needs). False: one read of the whole value costs no more.
    cheap_ranged_reads: bool = False
    #: True when :meth:`get_into` learns a value's size before it reads it and asks
    #: ``buffer_for`` for its memory first (a local file's ``fstat``, a zip member's declared
    #: size, an HTTP answer's headers): a value larger than a reader allows is then refused
    #: before it is read (:func:`get_at_most`). False: the value is read, then refused.
    reads_sizes_first: bool = False

    def __init__(self, read_only: bool = False) -> None:
        # A store that can never be written is read-only whatever it was asked.
        self.read_only = read_only or not self.supports_writes

    # -- reading -------------------------------------------------------------------------------

    @abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        """The value at ``key`` (or the requested part of it), or None if absent."""

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        """Several parts of one value; None if the key is absent."""
        out = []
        for r in ranges:
            value = self.get(key, r)
            if value is None:
                return None
            out.append(value)
        return out

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """Read ``length`` bytes from ``start`` (to the end when None) of ``key``.

        ``buffer_for(n)`` supplies a writable uint8 buffer of ``n`` bytes to read into, so that
        hot loops can reuse memory. Returns (a view of the bytes read, the value's total size),
        or None when the key is absent. Stores holding values in memory may return a view of
        their own memory instead of filling the buffer.
        """
        value = self.get(key)
        if value is None:
            return None
        view = memoryview(value).cast("B")
        stop = len(view) if length is None else min(start + length, len(view))
        part = view[min(start, len(view)) : stop]
        target = memoryview(buffer_for(len(part))).cast("B")
        target[:] = part
        return target, len(view)

    @contextlib.contextmanager
    def value_reader(self, limit: int | None, refuse: Callable[[str, int], Exception]) -> Iterator[ValueReader]:
        """A reader of many small values one after the other (a run of chunk files).

        It does less work a value than a :meth:`get_into` each where the store can: ``read(key)``
        is the whole value of ``key``, or None where the key is absent. A value of more than ``limit``
        bytes (None: no bound) raises ``refuse(key, size)``, before memory is taken for it where
        the store learns sizes first. A value is valid until the next call of a reader on the
        same thread: it may live in a buffer the thread reuses. Use a reader on one thread.
        """
        yield lambda key: read_value(self, key, limit, refuse)

    def open_reader(self, key: str) -> RangeReader | None:
        """The value of ``key`` held for reads of byte ranges, or None when the key is absent.

        Close it, or use it as a context manager. For a reader that learns from one range which
        others it needs (a Blosc frame's block table, then the blocks a crop needs), so that
        the value is opened once. By default the whole value is read here; stores with
        :attr:`cheap_ranged_reads` read each range.
        """
        value = self.get(key)
        return None if value is None else _ValueReader(value)

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        return self.get(key, ByteRange(0, 0)) is not None

    @abstractmethod
    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix``."""

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        """Keys directly under ``prefix`` and the child prefixes (ending in '/'), both full."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        keys, dirs = set(), set()
        for key in self.list_prefix(prefix):
            rest = key[len(prefix) :]
            if "/" in rest:
                dirs.add(prefix + rest.split("/", 1)[0] + "/")
            else:
                keys.add(key)
        return sorted(keys), sorted(dirs)

    # -- writing -------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self!r} is read-only")

    @abstractmethod
    def set(self, key: str, value: Buffer) -> None:
        """Store ``value`` at ``key`` atomically (readers see the old or the new value)."""

    @abstractmethod
    def erase(self, key: str) -> None:
        """Remove ``key``; removing an absent key is not an error."""

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key starting with ``prefix``."""
        self._check_writable()
        for key in list(self.list_prefix(prefix)):
            self.erase(key)

    # -- concurrency -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        """One version of the value at ``key``, to read several parts of through one object.

        Every read of the returned :class:`Snapshot` sees the value as it was when the
        snapshot was taken, even when a writer replaces it meanwhile (a LocalStore holds the
        file open; a MemoryStore holds the bytes). This base implementation cannot promise
        that: it forwards each read to the store (``Snapshot.consistent`` is False), and a
        writer may change the value between two reads. Stores that can, override it.
        """
        validate_key(key)
        yield _ForwardingSnapshot(self, key)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the write lock of ``key`` for a read-modify-write of its value.

        While one writer holds it, no other writer that takes the lock of the same key (in
        this process or, where the store supports it, in another) gets it: a value read under
        the lock is still the stored one when it is written back. Writes that replace a value
        whole need no lock. This base implementation is a lock of this process per store
        object and key (``locks_across_threads``; not ``locks_across_processes``): writers in
        other threads through the same store object wait for it. It locked nothing before, and
        threads writing inner chunks of one shard through a store of a user's own lost each
        other's (gpuzarr's shard writes are such read-modify-writes).
        """
        self._check_writable()
        with process_locks.hold((_STORE_LOCKS, id(self), validate_key(key))):
            yield

    #: whether :meth:`lock` excludes writers in other threads of this process (through the
    #: same store object, at least)
    locks_across_threads: bool = True
    #: whether :meth:`lock` excludes writers in other processes (on the same host)
    locks_across_processes: bool = False
    #: whether :meth:`get_versioned`, :meth:`set_if` and :meth:`erase_if` work: gpuzarr's own
    #: read-modify-writes then retry when another writer (any process, any host) came first
    supports_conditional_writes: bool = False

    def get_versioned(self, key: str, bound: BoundedBufferFor | None = None) -> tuple[Buffer | None, Any]:
        """The whole value at ``key`` (None if absent) and its version (None if absent).

        The version is what :meth:`set_if` and :meth:`erase_if` compare with. Only for stores
        with :attr:`supports_conditional_writes` (an object store: the ETag); this base
        implementation raises UnsupportedOperationError. ``bound`` refuses a value larger than
        its limit, before its bytes are read where the store learns their number first.
        """
        raise UnsupportedOperationError(f"{self!r} has no conditional writes")

    def set_if(self, key: str, value: Buffer, version: Any) -> bool:
        """Store ``value`` at ``key`` only if the stored value is still ``version``.

        ``version`` comes from :meth:`get_versioned`; None means: only if ``key`` is absent.
        Returns False, writing nothing, when another writer came first. Only for stores with
        :attr:`supports_conditional_writes`; this base implementation raises
        UnsupportedOperationError.
        """
        raise UnsupportedOperationError(f"{self!r} has no conditional writes")

    def erase_if(self, key: str, version: Any) -> bool:
        """Remove ``key`` only if the stored value is still ``version``.

        An absent key counts as erased. Returns False, erasing nothing, when another writer
        came first. A store whose service has no conditional delete documents the window it
        leaves. Only for
        stores with :attr:`supports_conditional_writes`; this base implementation raises
        UnsupportedOperationError.
        """
        raise UnsupportedOperationError(f"{self!r} has no conditional writes")

    def kvstore_json(self) -> dict[str, Any] | str:
        """The TensorStore kvstore (JSON object or URL) that reopens this store.

        Used by :meth:`gpuzarr.Array.spec`. Stores without a TensorStore equivalent raise
        MetadataError.
        """
        raise MetadataError(f"spec: no TensorStore kvstore for {self!r}")

    def close(self) -> None:
        """Release any handles the store holds."""


def _fresh(n: int) -> Any:
    return np.empty(n, np.uint8)  # every byte is read into it: no zeroing


def read_value(store: Store, key: str, limit: int | None, refuse: Callable[[str, int], Exception]) -> Buffer | None:
    """One value as :meth:`Store.value_reader` reads it, through ``store.get_into``.

    It is read into memory of its own: a store's ``get_into`` may itself read through gpuzarr
    (another array's chunks, into the thread's buffers), which would overwrite a shared one.
    """
    bounded = BoundedBufferFor(limit, lambda n: refuse(key, n), _fresh)
    got = store.get_into(key, bounded)
    if got is None:
        return None
    bounded.check(got[0].nbytes)  # a store that handed out its own memory asked for none
    return got[0]


@dataclass(frozen=True)
class BoundedBufferFor:
    """A ``buffer_for`` (:meth:`Store.get_into`) that refuses values too large for it.

    A value of more than ``limit`` bytes (``limit`` None: no bound) raises ``refuse(n)`` before
    ``buffer_for(n)`` takes memory for it. Its caller takes a store's own memory as well: a
    store holding the bytes in memory of its own (an object store's answer) checks their
    number with :meth:`check` and hands out that memory, with no copy.
    """

    limit: int | None
    refuse: Callable[[int], Exception]
    buffer_for: Callable[[int], Any] = _fresh

    def check(self, n: int) -> None:
        """Raise ``refuse(n)`` where ``n`` bytes are more than ``limit``."""
        if self.limit is not None and n > self.limit:
            raise self.refuse(n)

    def __call__(self, n: int) -> Any:
        """``buffer_for(n)``, once :meth:`check` has let ``n`` through."""
        self.check(n)
        return self.buffer_for(n)


def get_at_most(store: Store, key: str, limit: int | None, refuse: Callable[[int], Exception]) -> Buffer | None:
    """``store.get(key)``, or ``refuse(size)`` raised where the value has more than ``limit`` bytes.

    ``limit`` None: no bound. The refusal comes before any memory is taken for the value where
    the store knows its size first (a snapshot that knows it; a ``get_into`` of its own that
    learns it first, as local files', zip members' and object stores' answers); other stores
    read the value and it is refused once it has come. A stored size is untrusted bytes too.
    """
    if limit is None:
        return store.get(key)
    size = store.size if isinstance(store, Snapshot) else None
    if size is not None and size > limit:
        raise refuse(size)
    if not sizes_first(store):
        value = store.get(key)
        if value is not None and memoryview(value).nbytes > limit:
            raise refuse(memoryview(value).nbytes)
        return value
    got = store.get_into(key, BoundedBufferFor(limit, refuse))
    if got is None:
        return None
    if got[0].nbytes > limit:  # a get_into that hands out its own memory asks for no buffer
        raise refuse(got[0].nbytes)
    return got[0]


def sizes_first(store: Store) -> bool:
    """Whether ``store`` learns a value's size before it reads it.

    A snapshot that knows it, or a store whose ``get_into`` asks for its buffer first
    (:attr:`Store.reads_sizes_first`).
    """
    if isinstance(store, Snapshot) and store.size is not None:
        return True
    return store.reads_sizes_first


class RangeReader:
    """One value of a store held for reads of byte ranges (:meth:`Store.open_reader`)."""

    def __init__(self, size: int) -> None:
        #: The value's size in bytes.
        self.size = size

    def read_into(self, start: int, target: Buffer) -> int:
        """Read ``len(target)`` bytes from ``start`` into ``target``; the bytes read.

        ``target`` is a writable contiguous uint8 buffer: a memoryview, bytearray or 1-d NumPy
        array. Fewer bytes are read only where the value ends first.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the value (a file descriptor); reading afterwards is an error."""

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ValueReader(RangeReader):
    """Ranges of a value already read whole."""

    def __init__(self, value: Buffer) -> None:
        self._view = memoryview(value).cast("B")
        super().__init__(len(self._view))

    def read_into(self, start: int, target: Buffer) -> int:
        part = self._view[start : start + len(target)]
        target[: len(part)] = part
        return len(part)


class Snapshot(Store):
    """A read-only view of one version of one value, made by :meth:`Store.snapshot`.

    It is a store holding the single key ``key`` (None when the value was absent), so that code
    written against the store interface (``store.sharding``'s readers) reads through it as it
    is. Reading another key raises InvalidArgumentError.
    """

    #: whether every read sees the same version of the value (see :meth:`Store.snapshot`)
    consistent: bool = True
    #: the value's size in bytes where the snapshot knows it without a request (an open
    #: file's), else None: readers check ranges against it before reading
    size: int | None = None
    #: whether :attr:`version` is known without a request (an object store's snapshot asks
    #: for it, with a HEAD, until its first read has fixed it)
    version_known: bool = True

    def __init__(self, key: str) -> None:
        super().__init__(read_only=True)
        self.key = key

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"

    @property
    def version(self) -> Hashable | None:
        """What identifies this version of the value, None when the store cannot tell.

        E.g. a file's inode, size, modification and change times; equal versions mean the same
        bytes (a version that differs may still hold them: ``store.local.same_bytes``).
        """
        return None

    def changed(self) -> bool:
        """Whether the value was modified in place since the snapshot was taken.

        A writer that rewrites a file instead of replacing it shows here; False when the store
        cannot tell.
        """
        return False

    def assume_version(self, version: Hashable) -> bool:
        """Read ``version`` without asking for the current version first; True if it does.

        ``version`` is one an earlier snapshot of this key reported. Where learning the version
        costs a request (an object store's HEAD), a reader that kept something from an earlier
        read (a shard's index) skips that request: every read then checks the version itself
        and fails with CorruptChunkError, with :meth:`changed` True, when the value is no
        longer ``version``. False (the default) where :attr:`version` is cheap or unknown, or
        a read has already fixed the version: compare :attr:`version` instead.
        """
        return False

    def _check_key(self, key: str) -> None:
        if key != self.key:
            raise InvalidArgumentError(f"snapshot of {self.key!r}: cannot read {key!r}")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """The snapshot's key when it starts with ``prefix`` and the value is present."""
        validate_prefix(prefix)
        present = self.key.startswith(prefix) and self.get(self.key, ByteRange(0, 0)) is not None
        return iter([self.key] if present else [])

    def set(self, key: str, value: Buffer) -> None:
        """Refused: a snapshot is read-only."""
        raise ReadOnlyError(f"{self!r} is read-only")

    def erase(self, key: str) -> None:
        """Refused: a snapshot is read-only."""
        raise ReadOnlyError(f"{self!r} is read-only")


class _ForwardingSnapshot(Snapshot):
    """Each read goes to the store: no promise of one version (see :meth:`Store.snapshot`)."""

    consistent = False

    def __init__(self, store: Store, key: str) -> None:
        super().__init__(key)
        self.store = store

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self._check_key(key)
        return self.store.get(key, byte_range)

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        self._check_key(key)
        return self.store.get_ranges(key, ranges)


class BytesSnapshot(Snapshot):
    """A snapshot of a value held in memory (or of an absent one: ``value`` None)."""

    def __init__(self, key: str, value: Buffer | None) -> None:
        super().__init__(key)
        self.value = value
        self.size = None if value is None else memoryview(value).nbytes

    @property
    def version(self) -> Hashable | None:
        """The value object itself, compared by identity.

        A store that replaces values whole makes a new object for each version.
        """
        return None if self.value is None else _SameObject(self.value)

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        """The held value, or a part of it (a view, no copy)."""
        self._check_key(key)
        if self.value is None or byte_range is None:
            return self.value
        view = memoryview(self.value).cast("B")
        start, stop = byte_range.resolve(len(view))
        return view[start:stop]


class _SameObject:
    """Equal to another only when both wrap the same object.

    It keeps the object alive, so that the object's identity is not reused.
    """

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SameObject) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)
