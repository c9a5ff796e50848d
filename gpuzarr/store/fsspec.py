"""Any fsspec file system as a store: the adapter for URLs no built-in store serves.

fsspec (``pip install 'gpuzarr[fsspec]'``) is imported only when a store is made. Reads map
to ``cat_file`` (with ``start``/``end``; a suffix is a negative ``start``) and ``cat_ranges``
(which async file systems run concurrently); listing to ``find`` and ``ls``; writes to
``pipe_file``; erase to ``rm_file``. ``FileNotFoundError`` (and a directory where a key was
asked for) is a missing key, None; any other failure raises a StoreError (a PermissionError
a StorePermissionError) naming the URL and the key: a failed read is never taken for a
missing chunk.

Atomicity of :meth:`FsspecStore.set` is the file system's: object stores replace objects
whole, fsspec's local file system writes the file in place (gpuzarr's LocalStore is the
store for local directories).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, StoreError, StorePermissionError
from .base import Buffer, ByteRange, Store, validate_key, validate_prefix
from .locks import process_locks

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence


def import_fsspec() -> Any:
    """The fsspec module, or an ImportError naming the extra that installs it."""
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            "fsspec URLs and FsspecStore need fsspec: pip install 'gpuzarr[fsspec]' "
            "(and the file system's own package, e.g. sshfs for sftp://)"
        ) from exc
    return fsspec


class FsspecStore(Store):
    """The files below ``root`` of an fsspec file system as keys.

    Parameters
    ----------
    fs
        Any ``fsspec.AbstractFileSystem`` (sync or async with a sync interface).
    root
        The directory (or bucket prefix) the keys are relative to, in the file system's own
        form (its protocol is stripped).
    read_only
        Refuse writes.
    path
        ``root`` by zarr-python's name for it; ``FsspecStore(fs, True)`` is read-only, as
        zarr-python's positional ``read_only`` is.
    """

    supports_partial_reads = True
    # A read-modify-write of one key (a chunk or shard that several writers write parts of)
    # waits for the other threads of this process writing it; fsspec has no locks between
    # processes.
    locks_across_threads = True

    def __init__(
        self, fs: Any, root: str | bool = "", read_only: bool = False, *, path: str | None = None
    ) -> None:
        # zarr-python's signature is (fs, read_only=False, path="/"): its positional read_only
        # and its ``path`` keyword are taken too.
        if isinstance(root, bool):
            where, read_only = "", root
        else:
            where = root
        if path is not None:
            if where:
                raise InvalidArgumentError("FsspecStore: give root or path (the same thing), not both")
            where = path
        super().__init__(read_only)
        self.fs = fs
        self.root = fs._strip_protocol(where).rstrip("/") if where else ""
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        #: the URL errors name
        self.url = f"{protocol}://{self.root.lstrip('/')}"
        self._calls = _call_guard(fs)
        self._sync = _sync_interface(fs)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_calls"]  # a lock does not pickle; the copy makes its own
        del state["_sync"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._calls = _call_guard(self.fs)
        self._sync = _sync_interface(self.fs)

    @classmethod
    def from_url(cls, url: str, storage_options: dict[str, Any] | None = None, read_only: bool = False) -> FsspecStore:
        """The store at an fsspec URL (chained ones too: ``"simplecache::s3://bucket/x.zarr"``).

        ``storage_options`` are the file system's arguments (``fsspec.core.url_to_fs``).
        """
        fsspec = import_fsspec()
        try:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, TypeError, ValueError):  # a missing package; options or URL of the wrong form
            raise
        except PermissionError as exc:  # a file system that logs in when it is made (ftp, sftp)
            raise StorePermissionError(url, None, f"opening the file system: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # one that connects when it is made, to a server that is not there
            raise StoreError(url, None, f"opening the file system failed: {type(exc).__name__}: {exc}") from exc
        store = cls(fs, path, read_only=read_only)
        store.url = url
        return store

    def __repr__(self) -> str:
        return f"FsspecStore({self.url!r})"

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """The process's lock of the file ``key`` names, shared by every store over the same
        file system (fsspec's token of its arguments) and path: threads writing parts of one
        chunk or shard lose nothing. Other processes are not excluded."""
        self._check_writable()
        token = getattr(self.fs, "_fs_token", None) or id(self.fs)
        with process_locks.hold(("fsspec", token, self._path(validate_key(key)))):
            yield

    @contextlib.contextmanager
    def _errors(self, key: str, action: str) -> Iterator[None]:
        """Failures other than absence become errors naming the URL and the key; calls into a
        file system that is not safe on several threads at once are made one at a time."""
        try:
            with self._calls:
                yield
        except PermissionError as exc:
            raise StorePermissionError(self.url, key, f"{action}: permission denied ({exc})") from exc
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except Exception as exc:
            raise StoreError(self.url, key, f"{action} failed: {type(exc).__name__}: {exc}") from exc

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        """The file at ``key`` (or part of it), None when absent."""
        path = self._path(validate_key(key))
        start, end = _bounds(byte_range)
        if end is not None and end <= (start or 0):
            # An empty range still tells whether the key exists.
            return b"" if self.exists(key) else None
        try:
            with self._errors(key, "reading"):
                try:
                    data = self._sync.cat_file(path, start=start, end=end)
                except AttributeError:
                    if start is None or start >= 0:
                        raise
                    data = self._cat_suffix(path, start, end)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return self._checked_length(key, data, start, end)

    def _checked_length(self, key: str, data: Buffer, start: int | None, end: int | None) -> Buffer:
        """``data`` read for ``[start, end)``, refused where it holds more bytes than that range
        (fsspec's HTTP file system hands back the whole body of a server that ignores Range:
        another inner chunk's bytes, decoded as this one's)."""
        asked = (end - (start or 0)) if end is not None else (-start if start is not None and start < 0 else None)
        if asked is not None and len(data) > asked:
            raise StoreError(
                self.url, key, f"asked for {asked} bytes from offset {start} and got {len(data)}: the ranged read "
                "was not honoured (a server that ignores Range headers)"
            )
        return data

    def _cat_suffix(self, path: str, start: int, end: int | None) -> Buffer:
        """``cat_file`` of a suffix (``start`` < 0) from the file's size. fsspec's caching file
        systems (``simplecache::``, ``filecache::``) open their local copy as a plain Python
        file, which has no ``size`` for ``cat_file`` to seek from the end with (fsspec 2026.9)."""
        size = int(self._sync.size(path))
        data: Buffer = self._sync.cat_file(path, start=max(size + start, 0), end=end)
        return data

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        """Several parts of one file through ``cat_ranges`` (concurrent on async file systems)."""
        path = self._path(validate_key(key))
        if not self.exists(key):
            return None
        if not ranges:
            return []
        bounds = [_bounds(r) for r in ranges]
        with self._errors(key, "reading"):
            got = self._sync.cat_ranges(
                [path] * len(bounds), [s for s, _ in bounds], [e for _, e in bounds], on_error="return"
            )
        out: list[Buffer] = []
        for (start, end), value in zip(bounds, got):
            if isinstance(value, (FileNotFoundError, IsADirectoryError)):
                return None  # erased since exists(): absent, as a single read would say
            if isinstance(value, AttributeError) and start is not None and start < 0:
                with self._errors(key, "reading"):
                    value = self._cat_suffix(path, start, end)  # a caching file system's suffix
            if isinstance(value, BaseException):
                with self._errors(key, "reading"):
                    try:
                        raise value
                    finally:
                        value = got = None  # no cycle through this frame, which holds the ranges read
            # Some file systems hand back bytes for empty ranges, some fail on them.
            out.append(b"" if end is not None and end <= (start or 0) else self._checked_length(key, value, start, end))
        return out

    def exists(self, key: str) -> bool:
        """Whether a file (not a directory) is at ``key``."""
        path = self._path(validate_key(key))
        with self._errors(key, "checking"):
            return bool(self._sync.isfile(path))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every file below the root whose key starts with ``prefix``."""
        validate_prefix(prefix)
        # find() below the deepest directory the prefix names, not below the root.
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = self._path(directory) if directory else (self.root or "/")
        with self._errors(prefix, "listing"):
            try:
                found = self._sync.find(base)
            except FileNotFoundError:
                found = []
        cut = len(self.root) + 1 if self.root else 0
        keys = []
        for path in found:
            key = path[cut:] if self.root else path.lstrip("/")
            if key.startswith(prefix):
                keys.append(key)
        return iter(sorted(keys))

    def set(self, key: str, value: Buffer) -> None:
        """Write the file at ``key`` with ``pipe_file`` (making its directory if needed)."""
        self._check_writable()
        path = self._path(validate_key(key))
        data = bytes(memoryview(value).cast("B"))
        with self._errors(key, "writing"):
            try:
                self._sync.pipe_file(path, data)
            except FileNotFoundError:
                # Local-like file systems need the directory first; object stores never do.
                self._sync.makedirs(self.fs._parent(path), exist_ok=True)
                self._sync.pipe_file(path, data)

    def erase(self, key: str) -> None:
        """Remove the file at ``key``, and directories left empty up to the root."""
        self._check_writable()
        path = self._path(validate_key(key))
        with self._errors(key, "erasing"):
            try:
                self._sync.rm_file(path)
            except FileNotFoundError:
                return
            # A directory emptied here would still show in list_dir on local-like systems.
            parent = self.fs._parent(path)
            while parent.rstrip("/") != self.root.rstrip("/") and len(parent) > len(self.root):
                try:
                    if self._sync.ls(parent, detail=False):
                        break
                    self._sync.rmdir(parent)
                except (FileNotFoundError, OSError):
                    break
                parent = self.fs._parent(parent)


def _sync_interface(fs: Any) -> Any:
    """``fs``, or, for an fsspec file system made with ``asynchronous=True`` (as zarr-python's
    FsspecStore asks for), an object whose methods of the same names run its coroutines on
    fsspec's own I/O loop: the sync methods of such an instance raise "Loop is not running"."""
    if not getattr(fs, "asynchronous", False):
        return fs
    try:
        from fsspec.asyn import AsyncFileSystem
    except ImportError:  # an fs that is not fsspec's (a duck-typed one)
        return fs
    return _OnFsspecLoop(fs) if isinstance(fs, AsyncFileSystem) else fs


class _OnFsspecLoop:
    """The sync calls FsspecStore makes, on an asynchronous file system: each runs the
    coroutine of the same name (``cat_file`` -> ``_cat_file``) on fsspec's I/O loop and waits
    for it, from whichever thread calls (gpuzarr's decode threads among them). The file
    system's sessions are then made on, and used from, that one loop."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        coroutine = getattr(self._fs, f"_{name}", None)
        if coroutine is None or not inspect.iscoroutinefunction(coroutine):
            return getattr(self._fs, name)  # _parent; rmdir where the file system has no folders
        from fsspec.asyn import get_loop, sync

        return functools.partial(sync, get_loop(), coroutine)


def _call_guard(fs: Any) -> contextlib.AbstractContextManager[object]:
    """What :meth:`FsspecStore._errors` holds around each call into ``fs``: a lock for
    fsspec's caching file systems that keep a table of cached files in memory (``filecache::``,
    ``blockcache::``), whose calls on several threads at once corrupt it (fsspec issue 1126,
    open: concurrent ``cat_file`` of a ``filecache::`` fails with "cannot unpack non-iterable
    bool object"); nothing for the others, which gpuzarr's threads call at once.
    ``simplecache::`` keeps no such table."""
    try:
        from fsspec.implementations.cached import CachingFileSystem, SimpleCacheFileSystem
    except ImportError:  # an fs that is not fsspec's (a duck-typed one)
        return contextlib.nullcontext()
    if isinstance(fs, CachingFileSystem) and not isinstance(fs, SimpleCacheFileSystem):
        return threading.RLock()
    return contextlib.nullcontext()


def _bounds(byte_range: ByteRange | None) -> tuple[int | None, int | None]:
    """``(start, end)`` of fsspec's ``cat_file`` (a suffix is a negative start)."""
    if byte_range is None:
        return None, None
    if byte_range.length is None:
        return byte_range.offset, None
    return byte_range.offset, byte_range.offset + byte_range.length
