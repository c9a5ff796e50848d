"""A store on a local directory: one file per key, replaced whole (atomic writes).

Symbolic links
--------------
By default a LocalStore never reads, writes, erases or lists through a symbolic link that
resolves outside its root: such a key raises :class:`~gpuzarr.errors.SymlinkEscapeError`
naming it, and listings skip such links. Links that stay inside the root work, and the root
itself may be a link (it is resolved once, when the store is made). ``follow_symlinks=True``
follows every link, as a plain file system walk would.

How it is checked: a read opens the file by a path the kernel resolves without following any
link (``openat2`` with ``RESOLVE_NO_SYMLINKS``, Linux 5.6+), so the file read is the one the
path below the root names. Where the path holds a link, or that call is missing, it opens the
file and then asks the kernel where the open file lives (``/proc/self/fd``), so what is read is
what was checked. A write, an erase or a lock opens the key's directory by its path and checks
it through ``/proc`` too, so what is written into is the directory checked (like a read, a path
that leaves the root through a link and comes back in through another is judged by where it
ends: inside). Where that directory does not exist yet, or lies outside the root, or ``/proc``
is missing, the key's directories are walked one at a time from the root (``openat`` with
``O_NOFOLLOW``; a link is followed only after its target is checked), creating what is missing,
and the file is created, renamed and unlinked relative to the checked directory. What stays
racy: where ``/proc`` is missing (not Linux) a read checks the resolved path before opening it,
and the GPU path's direct reads (kvikio) open the checked real path by name again, so a
directory swapped for a link between the check and that open is followed.

Partial writes
--------------
A key's file is only ever replaced whole, so readers see the old value or the new one, never
part of one, also when the writer is killed.

Where the kernel and the file system have unnamed files (Linux, ``O_TMPFILE``: ext4, XFS,
Btrfs, tmpfs, ...), ``set`` writes the value to an unnamed file in the key's directory and
links it in under the key's name once it is complete (``linkat`` through ``/proc/self/fd``). A
writer killed before that leaves nothing behind: the kernel frees an unnamed file with its last
descriptor, so no lock and no clean-up is needed. ``linkat`` never replaces a name, so a key
that exists is replaced by linking the file under a hidden temporary name and renaming that
over the key; the file is locked first (see below), and a writer killed between those two calls
leaves the temporary file for :meth:`LocalStore.remove_partial_writes`.

Elsewhere (the first ``O_TMPFILE`` refused makes a store use them from then on), ``set`` writes
to a hidden temporary file beside the key and renames it over the key. The temporary name is
short and fixed in length (``.<16 hex digits of the key's name>`` then :data:`TEMP_MARKER`), so
any key whose own name fits the file system's limit can be written, and it is skipped by every
listing. The writer holds an advisory lock (``flock``) on it until the rename; the kernel drops
the lock when the writer dies. The next write of the same key therefore takes over a leftover
of a killed writer at once (an unlocked temporary file has no live writer) and never touches
the file of a live one: liveness by lock rather than by age, so that a slow writer is never cut
off and no grace period has to be guessed. A writer that finds the name held by a live writer
uses a second name with its pid and a random part; those leftovers, and leftovers of keys never
written again, are removed by :meth:`LocalStore.remove_partial_writes`.

Durable writes
--------------
``durable=True`` makes ``set`` fsync the file before it is linked or renamed in and the
directory after that, and fsync the parent of every directory it creates, so that a key written
survives a power failure. Without it a write is atomic for readers (they see the old or the new value,
never a torn file, even when the writer is killed) but may be lost to a crash of the machine.

Concurrency
-----------
A :meth:`LocalStore.snapshot` holds the key's file open, so reads through it see one version
however often a writer replaces the file; :meth:`LocalStore.lock` takes a per-key lock in the
process and an advisory ``flock`` between processes (:mod:`gpuzarr.store.locks`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import math
import os
import secrets
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import buffers
from ..errors import GpuZarrError, InvalidKeyError, StoreError, SymlinkEscapeError
from ..output_pool import pooled_bytes
from .base import (
    Buffer,
    ByteRange,
    RangeReader,
    Snapshot,
    Store,
    os_errors,
    os_failure,
    read_value,
    validate_key,
    validate_prefix,
)
from .locks import LOCK_MARKER, LOCKS_ACROSS_PROCESSES, file_lock, lock_path, process_locks
from .no_links_open import open_without_links

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from .base import ValueReader

#: Marks in-progress writes; listing skips them so readers never see a half-written key.
TEMP_MARKER = ".__gpuzarr_partial_"

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: An unnamed file in a directory (Linux 3.11+), linked in by name once written; None elsewhere.
_UNNAMED_FILE_FLAGS = os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC if hasattr(os, "O_TMPFILE") else None
#: What opening an unnamed file fails with where the file system (or kernel) has none: then
#: named temporary files are used.
_NO_UNNAMED_FILES = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL})
#: O_NONBLOCK: opening a FIFO planted in a store must not wait for a writer (it is then not a
#: regular file, so not a key); regular files ignore the flag.
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
#: A value_reader's files, opened relative to their directory: a link is not followed there.
_VALUE_FLAGS = _READ_FLAGS | os.O_NOFOLLOW
#: What opening a key's file raises where the key holds no value (a directory is not one).
_ABSENT = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


#: the folder of a volume's root that only its owner may list (as a walk names it, from the root):
#: never a store's concern
_LOST_AND_FOUND = "/lost+found/"


def _is_hidden(name: str) -> bool:
    """Whether a file name is a partial write or a lock file, never a key."""
    return TEMP_MARKER in name or name.startswith(LOCK_MARKER)


class _OpenDirectories:
    """The directories a :meth:`LocalStore.value_reader` holds open, by their path below the root
    (None: read by path): at most :attr:`MOST` at once. A run's chunk files come row by row, a
    directory a row with v3's keys (``c/i/j``): a whole read held one a row and ran out of
    descriptors. Once the reader is done, none, and a call made after it reads by path (a
    descriptor number closed here may since name another directory)."""

    MOST = 8

    def __init__(self) -> None:
        self.held: dict[str, int | None] = {}
        self.closed = False

    def hold(self, directory: str, fd: int | None) -> int | None:
        if len(self.held) >= self.MOST:
            self.close()
        self.held[directory] = fd
        return fd

    def close(self, *, for_good: bool = False) -> None:
        held, self.held = self.held, {}
        self.closed = self.closed or for_good
        for fd in held.values():
            if fd is not None:
                os.close(fd)


class LocalStore(Store):
    """Keys are files below ``root``; '/' in a key is a directory separator.

    Parameters
    ----------
    root
        The directory; created on the first write. When it is a symbolic link, it is resolved
        once, here.
    read_only
        Refuse writes.
    follow_symlinks
        Follow symbolic links that lead outside ``root``. By default a key reached through
        such a link raises :class:`~gpuzarr.errors.SymlinkEscapeError` and listings skip it.
    durable
        fsync each written file and its directory (see the module's docstring).
    """

    locks_across_threads = True
    locks_across_processes = LOCKS_ACROSS_PROCESSES
    cheap_ranged_reads = True
    reads_sizes_first = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass that reads in a way of its own (it overrides get or get_into, to count or
        # transform what is read) is read through those alone, unless it says otherwise or
        # gives open_reader too: readers would go round them through open_reader.
        super().__init_subclass__(**kwargs)
        if "cheap_ranged_reads" not in cls.__dict__:
            reads_its_own_way = cls.get is not LocalStore.get or cls.get_into is not LocalStore.get_into
            cls.cheap_ranged_reads = not reads_its_own_way or cls.open_reader is not LocalStore.open_reader
        if "reads_sizes_first" not in cls.__dict__ and cls.get_into is not LocalStore.get_into:
            cls.reads_sizes_first = False  # its own get_into may read before it asks for memory

    def __init__(
        self,
        root: str | os.PathLike[str],
        read_only: bool = False,
        *,
        follow_symlinks: bool = False,
        durable: bool = False,
    ) -> None:
        super().__init__(read_only)
        self.root = Path(root).expanduser().absolute()
        self.follow_symlinks = follow_symlinks
        self.durable = durable
        self._real_root = os.path.realpath(self.root)
        self._inside_prefix = self._real_root.rstrip("/") + "/"
        #: Unnamed temporary files: where the kernel has them, and /proc links them in; set
        #: False by the first write whose file system has none.
        self._unnamed_temp_files = _UNNAMED_FILE_FLAGS is not None and _proc_fd_links()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStore) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def with_options(self, read_only: bool) -> LocalStore:
        """A store of the same directory and link and durability options, ``read_only`` or not."""
        return LocalStore(self.root, read_only=read_only, follow_symlinks=self.follow_symlinks, durable=self.durable)

    def kvstore_json(self) -> dict[str, Any]:
        """``{"driver": "file", "path": "<root>/"}``, which TensorStore opens too."""
        return {"driver": "file", "path": os.fspath(self.root).rstrip("/") + "/"}

    def path_of(self, key: str) -> str:
        """The file name of ``key`` below the root as given (not checked for links)."""
        return os.path.join(self.root, validate_key(key))

    def real_path(self, key: str) -> str | None:
        """Where the regular file holding ``key`` really is, links resolved; None when there is
        none. For readers that open files by name (kvikio). Raises SymlinkEscapeError when the
        file lies outside the root and links are not followed."""
        located = self.locate(key)
        return None if located is None else located[0]

    def locate(self, key: str) -> tuple[str, int, FileVersion] | None:
        """(real path, size, version) of the regular file holding ``key``, from one open of it
        (see :meth:`real_path`); None when there is none. What a reader that opens files by
        name needs, and the version to tell later whether the file it read is still this one."""
        opened = self._open_stat(key)
        if opened is None:
            return None
        fd, info = opened
        try:
            return self._opened_path(fd, os.path.join(self._real_root, key)), info.st_size, stat_version(info)
        finally:
            os.close(fd)

    # -- the link policy -------------------------------------------------------------------------

    def _inside(self, real: str) -> bool:
        return real == self._real_root or real.startswith(self._inside_prefix)

    def _opened_path(self, fd: int, path: str) -> str:
        """The real path of the file open as ``fd`` (opened as ``path``)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # no /proc: the resolved name, checked before the file may change
            return os.path.realpath(path)
        # A file replaced (renamed over) since it was opened is still the one read.
        return real.removesuffix(" (deleted)")

    def _check_opened(self, fd: int, key: str, path: str) -> None:
        if self.follow_symlinks:
            return
        real = self._opened_path(fd, path)
        if not self._inside(real):
            raise SymlinkEscapeError(key, real)

    def _failure(self, key: str | None, action: str, exc: OSError) -> OSError:
        """:func:`os_failure` for this store."""
        return os_failure(str(self.root), key, action, exc)

    def _os_errors(self, key: str | None, action: str) -> contextlib.AbstractContextManager[None]:
        """:func:`~gpuzarr.store.base.os_errors` for this store."""
        return os_errors(str(self.root), key, action)

    def _link_leaves(self, path: str) -> bool:
        """Whether the link at ``path`` is one this store refuses to go through."""
        return not self.follow_symlinks and not self._inside(os.path.realpath(path))

    def _prefix_leaves(self, top: str) -> bool:
        """:meth:`_link_leaves` of a listing's directory ``top`` (below the root), told by one
        ``openat2`` where no link lies on its way: ``realpath`` looks at every component, and
        listing a hierarchy 300 groups deep took 92,000 ``lstat`` calls (0.8 s)."""
        if self.follow_symlinks:
            return False
        try:
            fd = open_without_links(top, _DIRECTORY_FLAGS)
        except OSError:  # a link on the way, or nothing there: looked at component by component
            fd = None
        if fd is None:
            return self._link_leaves(top)
        os.close(fd)
        return False

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        with self._open(key) as opened:
            if opened is None:
                return None
            fd, size = opened
            start, stop = (0, size) if byte_range is None else byte_range.resolve(size)
            try:
                return _pread_all(fd, stop - start, start)
            except OSError as exc:
                raise self._failure(key, "read", exc) from exc

    @contextlib.contextmanager
    def _open(self, key: str) -> Iterator[tuple[int, int] | None]:
        """(file descriptor, size) of the file holding ``key``, or None when there is none."""
        opened = self._open_fd(key)
        if opened is None:
            yield None
            return
        try:
            yield opened
        finally:
            os.close(opened[0])

    def _open_fd(self, key: str) -> tuple[int, int] | None:
        """(file descriptor, size) of the file holding ``key`` (the caller closes it), or None
        when there is none. Hot loops (a chunk read) call this rather than :meth:`_open`, whose
        context manager costs a few microseconds per key."""
        opened = self._open_stat(key)
        return None if opened is None else (opened[0], opened[1].st_size)

    def _open_stat(self, key: str) -> tuple[int, os.stat_result] | None:
        """(file descriptor, ``fstat``) of the regular file holding ``key`` (the caller closes
        it), or None when there is none."""
        path = self._inside_prefix + validate_key(key)
        fd = None
        if not self.follow_symlinks:
            # No link on the way: the file is the one below the root that the path names, and
            # needs no check. A link on the way (ELOOP) is checked below.
            try:
                fd = open_without_links(path, _READ_FLAGS)
            except _ABSENT:
                return None
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise self._failure(key, "open", exc) from exc
        checked = fd is not None
        if fd is None:
            try:
                fd = os.open(path, _READ_FLAGS)
            except _ABSENT:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SymlinkEscapeError(key, "a loop of symbolic links") from None
                raise self._failure(key, "open", exc) from exc
        try:
            if not checked:
                self._check_opened(fd, key, path)
            info = os.fstat(fd)
        except GpuZarrError:
            os.close(fd)
            raise
        except OSError as exc:
            os.close(fd)
            raise self._failure(key, "open", exc) from exc
        except BaseException:
            os.close(fd)
            raise
        if stat.S_ISREG(info.st_mode):
            return fd, info
        # os.open succeeds on a directory; a directory is not a key.
        os.close(fd)
        return None

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        """The file of ``key`` held open: a writer that replaces the file (as :meth:`set` does,
        and TensorStore) leaves this version readable; one that rewrites it in place shows
        in ``Snapshot.changed()``."""
        with self._open(key) as opened:
            yield _FileSnapshot(key, opened, self._inside_prefix + key, str(self.root))

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """The write lock of ``key``, between threads and (through ``flock`` on a lock file
        beside the key's file, see :mod:`gpuzarr.store.locks`) processes. Advisory: writers
        that do not take it (other libraries) are not held back; on NFS it holds only where
        the server supports locks."""
        self._check_writable()
        *directories, _name = validate_key(key).split("/")
        path = os.path.join(self._real_root, key)
        # Only taking the lock is this store's to report on: what fails in the caller's block
        # is raised as it is.
        with self._os_errors(key, "lock"):
            # The lock file is created beside the key: reach its directory as a write does, so
            # that the lock, too, never goes through a link that leaves the root.
            dir_fd = self._directory(key, directories, create=True)
            assert dir_fd is not None  # created
            os.close(dir_fd)
        # ``with`` statements, not an ExitStack: an interrupt (Ctrl-C) between a lock's enter
        # and the stack's taking its exit left the lock held until a garbage collection, and
        # every later write of the key waited for it.
        with process_locks.hold(path), file_lock(lock_path(path), self._lock_failure(key)):
            yield

    def _lock_failure(self, key: str) -> Callable[[OSError], BaseException]:
        return lambda exc: self._failure(key, "lock", exc)

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        opened = self._open_fd(key)
        if opened is None:
            return None
        fd, size = opened
        try:
            begin = min(start, size)
            stop = size if length is None else min(start + length, size)
            target = memoryview(buffer_for(stop - begin)).cast("B")
            try:
                got = _preadv_into(fd, target, begin)
            except OSError as exc:
                raise self._failure(key, "read", exc) from exc
            if got < len(target):  # the file shrank under us: report what is there
                return target[:got], begin + got
            return target, size
        finally:
            os.close(fd)

    def open_reader(self, key: str) -> RangeReader | None:
        opened = self._open_fd(key)
        return None if opened is None else _FileReader(*opened, str(self.root), key)

    @contextlib.contextmanager
    def value_reader(self, limit: int | None, refuse: Callable[[str, int], Exception]) -> Iterator[ValueReader]:
        """As :meth:`Store.value_reader`. Each key's directory is opened once for the reader
        (with no link on its way, as a read checks a path) and each file relative to it, its
        name not followed where it is a link: an open, an ``fstat`` and a read a value. A
        :meth:`get_into` a file walks the whole path and picks its buffer through two more
        calls: 12 µs against 5 for a 2 KiB chunk file (2 cores). A key whose directory is
        missing or reached through a link, or whose file is a link, is read as
        :meth:`get_into` reads it. A subclass that reads in a :meth:`get_into` of its own
        (counting or changing what is read) is read through it, a value at a time."""
        if type(self).get_into is not LocalStore.get_into:
            with super().value_reader(limit, refuse) as read:
                yield read
            return
        directories = _OpenDirectories()
        try:
            yield functools.partial(self._read_value, directories, limit, refuse)
        finally:
            directories.close(for_good=True)

    def _read_value(
        self,
        directories: _OpenDirectories,
        limit: int | None,
        refuse: Callable[[str, int], Exception],
        key: str,
    ) -> Buffer | None:
        directory, _, name = validate_key(key).rpartition("/")
        if directory in directories.held:
            dir_fd = directories.held[directory]
        else:
            dir_fd = None if directories.closed else directories.hold(directory, self._values_directory(directory))
        if dir_fd is None:
            return read_value(self, key, limit, refuse)
        try:
            fd = os.open(name, _VALUE_FLAGS, dir_fd=dir_fd)
        except _ABSENT:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the file is a link: checked where it leads
                return read_value(self, key, limit, refuse)
            raise self._failure(key, "open", exc) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # a directory (or a FIFO) is not a key
                return None
            if limit is not None and info.st_size > limit:
                raise refuse(key, info.st_size)
            target = buffers.growable(info.st_size, "values")
            got = _preadv_into(fd, target, 0)
        except OSError as exc:
            raise self._failure(key, "read", exc) from exc
        finally:
            os.close(fd)
        return target[:got]  # shorter where the file shrank meanwhile: what is there

    def _values_directory(self, directory: str) -> int | None:
        """A descriptor of ``directory`` (below the root) for :meth:`value_reader`, or None
        where it is missing, reached through a link, or cannot be opened with no link on its
        way here (no ``openat2``): its keys are then read one by one by path."""
        path = self._inside_prefix + directory
        try:
            if self.follow_symlinks:
                return os.open(path, _DIRECTORY_FLAGS)
            return open_without_links(path, _DIRECTORY_FLAGS)
        except OSError:
            return None

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        with self._open(key) as opened:
            if opened is None:
                return None
            fd, size = opened
            try:
                return [_pread_pooled(fd, stop - start, start) for start, stop in (r.resolve(size) for r in ranges)]
            except OSError as exc:
                raise self._failure(key, "read", exc) from exc

    def exists(self, key: str) -> bool:
        with self._open(key) as opened:
            return opened is not None

    # -- listing ---------------------------------------------------------------------------------

    def _walk(
        self, directory: str, *, partial_writes: bool = False, refused: list[str] | None = None
    ) -> Iterator[str]:
        """The keys below ``directory`` ("" or a prefix ending in '/'), in no order; with
        ``partial_writes``, the temporary files of writes instead.

        Links leaving the root are skipped (unless followed); a directory that is one of its
        own ancestors (a link loop) is not entered again, so a walk always ends. As
        ``os.walk`` does, what cannot be listed is skipped: a directory gone meanwhile, a link
        that loops, and one the file system will not list, which goes to ``refused`` where
        given (except a ``lost+found``, the folder of a volume's root that only its owner lists:
        never the store's). Erasing does not list: it raises where it cannot reach what it is to
        remove.
        """
        top = os.path.join(self._real_root, directory)
        if directory and self._prefix_leaves(top):
            return
        try:
            info = os.stat(top)
        except OSError:
            return
        stack = [(directory, top, frozenset({(info.st_dev, info.st_ino)}))]
        while stack:
            rel, path, ancestors = stack.pop()
            try:
                entries = os.scandir(path)
            except OSError as exc:  # gone, not a directory, or not ours to read: as os.walk does
                if refused is not None and isinstance(exc, PermissionError) and not f"/{rel}".endswith(_LOST_AND_FOUND):
                    refused.append(rel)
                continue
            with entries:
                for entry in entries:
                    try:
                        if entry.is_symlink() and self._link_leaves(entry.path):
                            continue
                        if entry.is_dir():
                            info = entry.stat()
                            ident = (info.st_dev, info.st_ino)
                            if ident not in ancestors:
                                stack.append((rel + entry.name + "/", entry.path, ancestors | {ident}))
                        elif (
                            entry.is_file()
                            and not entry.name.startswith(LOCK_MARKER)
                            and (TEMP_MARKER in entry.name) == partial_writes
                        ):
                            yield rel + entry.name
                    except OSError:  # removed while listed, a link that loops, not ours to look at
                        continue

    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        # Walk only the directory the prefix names, not the whole store.
        base_dir = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        return iter(sorted(key for key in self._walk(base_dir) if key.startswith(prefix)))

    def unlisted_folders(self, prefix: str) -> list[str]:
        """The folders below ``prefix`` (a prefix ending in '/', or "") that the file system will
        not let this process list, sorted, ``lost+found`` left out: where :meth:`list_prefix`
        (which skips them, as ``os.walk`` does) may have missed keys. A check such as
        ``gpuzarr verify`` asks, so as not to take what it could not see for missing."""
        return self.listing(prefix)[1]

    def listing(self, prefix: str) -> tuple[list[str], list[str]]:
        """(:meth:`list_prefix`, :meth:`unlisted_folders`) of ``prefix`` (ending in '/', or ""),
        from one walk: what a listing that must be complete asks."""
        validate_prefix(prefix)
        refused: list[str] = []
        keys = sorted(self._walk(prefix, refused=refused))
        return keys, sorted(refused)

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        top = os.path.join(self._real_root, prefix)
        if prefix and self._prefix_leaves(top):
            return [], []
        try:
            entries = list(os.scandir(top))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a link that loops: nothing there, as for a listing
                return [], []
            raise self._failure(prefix, "list", exc) from exc
        entries = [
            e for e in entries if not _is_hidden(e.name) and not (e.is_symlink() and self._link_leaves(e.path))
        ]
        keys = sorted(prefix + e.name for e in entries if _entry_is(e, "file"))
        # erase() leaves empty directories behind: a child prefix is listed only when it holds a
        # key, as in every other store, or may (see _may_hold_keys).
        dirs = sorted(
            prefix + e.name + "/" for e in entries if _entry_is(e, "dir") and self._may_hold_keys(prefix + e.name + "/")
        )
        return keys, dirs

    def _may_hold_keys(self, directory: str) -> bool:
        """Whether ``directory`` holds a key, or a folder in it that the file system will not
        list, which may hold some: listed, what it names is then read and the refusal raised
        (``StorePermissionError``), as zarr-python raises it, rather than a group's listing,
        and the consolidated metadata written from it, leaving a node out without a word.
        Except ``lost+found``, the folder of a volume's root that only its owner lists: a
        store at a volume's root must stay listable."""
        refused: list[str] = []
        return next(self._walk(directory, refused=refused), None) is not None or bool(refused)

    # -- writing ---------------------------------------------------------------------------------

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        *directories, name = validate_key(key).split("/")
        hidden = next((part for part in (*directories, name) if _is_hidden(part)), None)
        if hidden is not None:
            # Listings skip such names (this store's partial writes and lock files): a node
            # or chunk written under one could never be found again.
            raise InvalidKeyError(
                f"{key!r}: {hidden!r} is named like this store's partial writes and lock files "
                f"({TEMP_MARKER!r} inside, or {LOCK_MARKER!r} first), which listings skip"
            )
        view = memoryview(value).cast("B")
        with self._os_errors(key, "write"):
            dir_fd = self._directory(key, directories, create=True)
            assert dir_fd is not None  # created
            try:
                if not (self._unnamed_temp_files and self._set_unnamed(dir_fd, name, view)):
                    self._set_named(dir_fd, name, view)
                if self.durable:
                    os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _set_unnamed(self, dir_fd: int, name: str, view: memoryview) -> bool:
        """Write ``view`` to an unnamed file (``O_TMPFILE``) in ``dir_fd`` and link it in as
        ``name`` once complete; False, having written nothing, where the file system has no
        unnamed files (the store then uses named temporary files from now on).

        A writer killed before the link leaves nothing behind: the kernel frees an unnamed file
        with its last descriptor. A new key is linked in directly (one ``linkat``, which never
        replaces a name); an existing one is replaced by :func:`_link_over`.
        """
        assert _UNNAMED_FILE_FLAGS is not None  # the store uses unnamed files only where they exist
        try:
            fd = os.open(".", _UNNAMED_FILE_FLAGS, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in _NO_UNNAMED_FILES:
                raise
            self._unnamed_temp_files = False
            return False
        try:
            _write_all(fd, view)
            if self.durable:
                os.fsync(fd)
            source = f"/proc/self/fd/{fd}"
            try:
                os.link(source, name, dst_dir_fd=dir_fd, follow_symlinks=True)
            except FileExistsError:
                _link_over(fd, source, dir_fd, name)
        finally:
            os.close(fd)
        return True

    def _set_named(self, dir_fd: int, name: str, view: memoryview) -> None:
        """Write ``view`` to a locked, hidden temporary file in ``dir_fd`` and rename it over
        ``name`` (file systems without unnamed files)."""
        fd, temp = _create_temp(dir_fd, name)
        try:
            _write_all(fd, view)
            if self.durable:
                os.fsync(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        finally:
            os.close(fd)  # releases the lock, after the rename

    def _directory(self, key: str, directories: list[str], *, create: bool) -> int | None:
        """A descriptor of the directory holding ``key``; None when it does not exist and
        ``create`` is false. An existing directory is opened by its path and checked (one
        open and one ``readlink``); otherwise, or when that check fails, the walk of
        :meth:`_open_directory` decides (and creates, and raises SymlinkEscapeError)."""
        fd = self._open_existing_directory(directories)
        return fd if fd is not None else self._open_directory(key, directories, create=create)

    def _open_existing_directory(self, directories: list[str]) -> int | None:
        """The directory ``directories`` below the root, opened by its path and then checked
        where it really is (as a read checks a file), or None.

        Opening by path follows links, so the open directory is checked afterwards through
        ``/proc/self/fd``: what is written into is what was checked. None when the directory
        is missing, outside the root, or cannot be checked (no ``/proc``).
        """
        if not self.follow_symlinks and not _proc_fd_links():
            return None
        try:
            fd = os.open(os.path.join(self._real_root, *directories), _DIRECTORY_FLAGS)
        except OSError:
            return None
        if self.follow_symlinks:
            return fd
        try:
            inside = self._inside(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            inside = False
        except BaseException:  # an interrupt (Ctrl-C): the descriptor goes
            os.close(fd)
            raise
        if not inside:
            os.close(fd)
            return None
        return fd

    def _open_directory(self, key: str, directories: list[str], *, create: bool) -> int | None:
        """A descriptor of the directory holding ``key``, reached one component at a time from
        the root; None when it does not exist and ``create`` is false.

        A component that is a link is followed only when it stays inside the root (or the
        store follows links); created directories are fsynced into their parents when durable.
        """
        if create:
            self._make_root()
        nofollow = 0 if self.follow_symlinks else os.O_NOFOLLOW
        try:
            fd = os.open(self._real_root, _DIRECTORY_FLAGS)
        except FileNotFoundError:
            return None
        try:
            for name in directories:
                try:
                    child = os.open(name, _DIRECTORY_FLAGS | nofollow, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                        if self.durable:
                            os.fsync(fd)
                    child = os.open(name, _DIRECTORY_FLAGS | nofollow, dir_fd=fd)
                except OSError as exc:
                    # O_NOFOLLOW refuses a link with ELOOP (ENOTDIR on some systems).
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not _is_link(name, fd):
                        raise
                    child = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
                    try:
                        self._check_opened(child, key, name)
                    except BaseException:
                        os.close(child)
                        raise
                parent, fd = fd, child  # never closed twice, whatever interrupts
                os.close(parent)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _make_root(self) -> None:
        if os.path.isdir(self._real_root):
            return
        missing = []
        parent = self._real_root
        while not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        os.makedirs(self._real_root, exist_ok=True)
        if self.durable:
            for directory in [parent, *reversed(missing[1:])]:
                _fsync_directory(directory)

    def erase(self, key: str) -> None:
        # Empty directories are left in place: removing them could race with a concurrent
        # set() that has just created the directory for its temporary file.
        self._check_writable()
        *directories, name = validate_key(key).split("/")
        with self._os_errors(key, "erase"):
            dir_fd = self._existing_directory(key, directories)
            if dir_fd is None:
                return
            try:
                os.unlink(name, dir_fd=dir_fd)
                if self.durable:
                    os.fsync(dir_fd)
            except (FileNotFoundError, NotADirectoryError):
                return
            finally:
                os.close(dir_fd)

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key starting with ``prefix``, and the directories that held them, as
        zarr-python's ``delete_dir`` (``shutil.rmtree``) removes a node.

        Where ``prefix`` names a directory ("a/b/"), it goes too; a file of that name is not
        below it and stays. Where that directory is a link, the link goes and what it points
        to stays (inside the store, another node's name for that folder), unless the store
        follows links (``follow_symlinks``) and the link leaves the root (a node kept on
        another disk): then what the folder it points to holds goes, the link and the folder
        stay, so that the next node written there lands on the same disk (a link to a folder
        holding the store raises instead). Below that, links are removed, never followed: a
        link inside a node to another node's directory goes, and the other node stays. ""
        empties the store but keeps its root. Directories left empty go, since other tools list an empty
        directory as a node they cannot read, and a new array at the same path could not write
        a chunk whose name an old chunk's directory holds ("c/0" where "c/0/0" was). Partial
        writes and lock files no live writer holds go too (lock files below the node stay
        while a thread of this process holds a lock there); a live writer's stay, with the
        directories holding them. No folder holding the store is entered (a bind mount).
        Unlike :meth:`erase` (which leaves directories, as a concurrent ``set`` may have just
        made one), this removes a subtree, which no other writer should be writing into. What
        the file system refuses raises, as elsewhere: nothing is left behind unsaid.
        """
        self._check_writable()
        parent, _, last = validate_prefix(prefix).rstrip("/").rpartition("/") if prefix else ("", "", "")
        directories = parent.split("/") if parent else []
        with self._os_errors(prefix, "erase"):
            dir_fd = self._existing_directory(prefix, directories)
            if dir_fd is None:
                return
            try:
                kept = _ids_around(self._real_root) | _ids_around(os.path.dirname(os.path.abspath(self.root)))
                how = _Erasing(
                    durable=self.durable,
                    locks=not process_locks.any_below(self._inside_prefix + prefix),
                    kept=frozenset(kept),
                    url=str(self.root),
                )
                if prefix.endswith("/"):
                    self._erase_node_directory(dir_fd, last, prefix, how)
                else:  # names starting with ``last`` ("" for the whole store)
                    for entry in list(os.scandir(dir_fd)):
                        if entry.name.startswith(last):
                            _erase_entry(dir_fd, entry.name, how)
                if self.durable:
                    os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _existing_directory(self, key: str, directories: list[str]) -> int | None:
        """:meth:`_directory` of what exists: None where a directory on the way is missing or
        is a file (nothing below it to erase)."""
        try:
            return self._directory(key, directories, create=False)
        except NotADirectoryError:
            return None

    def _erase_node_directory(self, dir_fd: int, name: str, prefix: str, how: _Erasing) -> None:
        """:meth:`erase_prefix` of the directory ``name`` in ``dir_fd`` (``prefix`` names it).

        A link there is the node's name, not its data, unless this store follows links
        (``follow_symlinks``) and the link leaves the root: then the folder it points to is
        emptied, the link kept (a node kept on another disk), except where that folder holds
        the store (a link to an ancestor), which raises rather than erase what lies around the
        node. Otherwise the link alone goes, as does one to nothing, to a file or in a loop:
        a folder it points to inside the store is another node's.
        """
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            _erase_entry(dir_fd, name, how)
            return
        if not stat.S_ISLNK(info.st_mode):
            return  # a file of the folder's name is not below the prefix
        target = -1
        if self.follow_symlinks:
            try:
                target = os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if not isinstance(exc, (FileNotFoundError, NotADirectoryError)) and exc.errno != errno.ELOOP:
                    raise
        try:
            where = "" if target < 0 else self._opened_path(target, os.path.join(self._real_root, prefix.rstrip("/")))
            if target < 0 or self._inside(where):  # not followed, or another node's folder
                os.unlink(name, dir_fd=dir_fd)  # the link alone goes (erase_prefix syncs dir_fd)
                return
            held = os.fstat(target)
            if (held.st_dev, held.st_ino) in how.kept:  # the root or a folder above it
                raise StoreError(
                    str(self.root), prefix, f"not erased: the node's folder is a link to {where}, which holds the store"
                )
            _erase_contents(target, how)
        finally:
            if target >= 0:
                os.close(target)

    def remove_partial_writes(self, older_than: float = 60.0) -> list[str]:
        """Remove the temporary files that killed writers left in the store.

        A temporary file is removed when no live writer holds its lock and it was last
        modified at least ``older_than`` seconds ago (the age is a second guard, for file
        systems whose locks are not reliable). Safe to run while the store is being written.

        Returns
        -------
        list of str
            The removed files, as '/'-separated paths below the root.
        """
        self._check_writable()
        removed = []
        for rel in sorted(self._walk("", partial_writes=True)):
            *directories, name = rel.split("/")
            with self._os_errors(rel, "remove a partial write"):
                dir_fd = self._open_directory(rel, directories, create=False)
                if dir_fd is None:
                    continue
                try:
                    if _remove_if_abandoned(dir_fd, name, time.time() - older_than):
                        removed.append(rel)
                finally:
                    os.close(dir_fd)
        return removed


class _FileReader(RangeReader):
    """A key's file held open for :meth:`LocalStore.open_reader`."""

    def __init__(self, fd: int, size: int, url: str, key: str) -> None:
        self._fd = fd  # first: whatever stops the rest, close() closes it
        super().__init__(size)
        self._url, self._key = url, key

    def read_into(self, start: int, target: Buffer) -> int:
        try:
            return _preadv_into(self._fd, target, start)
        except OSError as exc:
            raise os_failure(self._url, self._key, "read", exc) from exc

    def close(self) -> None:
        # Forgotten before it is closed: an interrupt between the two then leaks it at worst,
        # where the other order let ``__del__`` close the number again, by then maybe another
        # thread's file.
        fd, self._fd = getattr(self, "_fd", -1), -1  # none where an interrupt cut __init__ short
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:  # a reader dropped unclosed does not keep its descriptor
        self.close()


class _FileSnapshot(Snapshot):
    """One open file of a LocalStore (``opened`` None: the key was absent)."""

    def __init__(self, key: str, opened: tuple[int, int] | None, path: str, url: str) -> None:
        super().__init__(key)
        self._fd = -1 if opened is None else opened[0]
        self._path, self._url = path, url
        self._version = None if opened is None else self._stat()
        # The size this version has (the one fstat above, not the open's: a writer may be between).
        self.size = None if self._version is None else self._version.size

    @property
    def version(self) -> FileVersion | None:
        """:func:`stat_version` of the file, as ``FileSpan.version`` of the GPU path."""
        return self._version

    def changed(self) -> bool:
        then = self._version
        if then is None:
            return False
        now = self._stat()
        if (now.size, now.modified_ns) != (then.size, then.modified_ns):
            return True
        if same_bytes(then, now):
            return False
        # The change time alone moved: a write that put the old modification time back, or a
        # rename that :func:`same_bytes` cannot see from the links. An NFS client keeps an open
        # file that a writer replaced under a hidden name, its link count unchanged: where the
        # key no longer names this file, it was replaced, and the open one is intact.
        return _names_same_file(None, self._path, self._fd, follow_symlinks=True)

    def _stat(self) -> FileVersion:
        try:
            return stat_version(os.fstat(self._fd))
        except OSError as exc:
            raise os_failure(self._url, self.key, "stat", exc) from exc

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self._check_key(key)
        if self.size is None:
            return None
        start, stop = (0, self.size) if byte_range is None else byte_range.resolve(self.size)
        # Shards (whole, or their index) are what snapshots read: into reused memory too.
        try:
            return _pread_pooled(self._fd, stop - start, start)
        except OSError as exc:
            raise os_failure(self._url, key, "read", exc) from exc

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        self._check_key(key)
        size = self.size
        if size is None:
            return None
        spans = (r.resolve(size) for r in ranges)
        try:
            return [_pread_pooled(self._fd, stop - start, start) for start, stop in spans]
        except OSError as exc:
            raise os_failure(self._url, key, "read", exc) from exc


class FileVersion(NamedTuple):
    """What tells versions of a file apart (:func:`stat_version`); times in ns.

    The change time is there for writers that rewrite a file in place and then put its old
    modification time back (``os.utime``, ``touch -d``, ``rsync --inplace --times``): the
    kernel sets it on every write and no call sets it back. It also moves with the file's
    links and mode, so equal versions mean the same bytes, and a version that differs may
    still hold them: :func:`same_bytes` tells.
    """

    inode: int
    size: int
    modified_ns: int
    changed_ns: int
    links: int
    mode: int


def stat_version(info: os.stat_result) -> FileVersion:
    """The :class:`FileVersion` of a file from its ``stat``."""
    return FileVersion(info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_nlink, info.st_mode)


def same_bytes(then: FileVersion, now: FileVersion) -> bool:
    """Whether a file seen as ``then`` and later as ``now`` still holds the same bytes: the same
    inode, size and modification time, and a change time that did not move, or moved with
    the file's links or mode (a rename over it, a hard link, a chmod leave its bytes alone).

    A write that puts the old modification time back within the same tick of the clock as
    the file's last change goes unseen where the kernel keeps change times to the tick
    (Linux before 6.13: 1-10 ms); the same write and a chmod in one window, too.
    """
    if (then.inode, then.size, then.modified_ns) != (now.inode, now.size, now.modified_ns):
        return False
    return then.changed_ns == now.changed_ns or (then.links, then.mode) != (now.links, now.mode)


def _temp_name(name: str) -> str:
    """The fixed-length hidden temporary name of the key file ``name``."""
    digest = hashlib.blake2b(os.fsencode(name), digest_size=8).hexdigest()
    return f".{digest}{TEMP_MARKER}"


def _lock(fd: int) -> bool:
    """Take the writer's lock on ``fd`` without waiting; False when another holds it or the
    file system has no locks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _names_same_file(dir_fd: int | None, name: str, fd: int, *, follow_symlinks: bool = False) -> bool:
    """Whether ``name`` still names the file open as ``fd`` (not renamed or replaced)."""
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    except OSError:  # gone, or no longer reachable: not that file
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _create_temp(dir_fd: int, name: str) -> tuple[int, str]:
    """A new, locked, empty temporary file for the key file ``name``: (descriptor, its name).

    Whoever holds the lock of a temporary file owns it: only the owner writes, renames or
    removes it, and it checks after locking that the name still names its file. A leftover
    whose writer died (lock free) is taken over; one with a live writer is left alone, and a
    second name with this process's pid and a random part is used instead.
    """
    temp = _temp_name(name)
    flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    for _attempt in range(3):
        leftover = False
        try:
            fd = os.open(temp, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dir_fd)
        except FileExistsError:
            try:
                fd = os.open(temp, flags, dir_fd=dir_fd)
            except FileNotFoundError:  # its writer renamed it meanwhile: try again
                continue
            leftover = True
        try:
            if _lock(fd) and _names_same_file(dir_fd, temp, fd):
                if leftover:  # of a killed writer: its bytes go
                    os.ftruncate(fd, 0)
                return fd, temp
        except BaseException:  # an interrupt (Ctrl-C) or a failure: the descriptor goes
            os.close(fd)
            raise
        os.close(fd)
        break
    for _attempt in range(_OWN_NAME_ATTEMPTS):
        own = f"{temp}{os.getpid()}_{secrets.token_hex(4)}"
        fd = os.open(own, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dir_fd)
        try:
            # Locked so that remove_partial_writes sees a live writer. Between the create and the
            # lock, a cleanup may have found it unlocked: holding its lock, or having removed it
            # (a write then failed at its rename). Where the file system has no locks, no
            # cleanup removes anything.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a cleanup holds it, to remove it
                locked = None
            except OSError:  # no locks here
                locked = False
            else:
                locked = True
            if locked is False or (locked and _names_same_file(dir_fd, own, fd)):
                return fd, own
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(own, dir_fd=dir_fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{name}: every temporary file made for it was removed before it could be locked")


#: Temporary files of a writer's own name tried, each removed by a cleanup before it was locked
_OWN_NAME_ATTEMPTS = 8


def _link_over(fd: int, source: str, dir_fd: int, name: str) -> None:
    """Replace the file ``name`` in ``dir_fd`` by the complete unnamed file open as ``fd``
    (``source``, its ``/proc`` link).

    ``linkat`` never replaces a name, so the file is linked under a hidden temporary name and
    renamed over ``name``. It is locked first, so that :meth:`LocalStore.remove_partial_writes`
    leaves it alone in between; a writer killed in those two calls leaves it, unlocked, for
    ``remove_partial_writes``.
    """
    _lock(fd)
    temp = f"{_temp_name(name)}{os.getpid()}_{secrets.token_hex(4)}"
    try:
        # Inside: an interrupt (Ctrl-C) just after the link left the hidden file, a whole copy
        # of the value, behind. The name is this writer's own (pid and random part).
        os.link(source, temp, dst_dir_fd=dir_fd, follow_symlinks=True)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def _write_all(fd: int, view: memoryview) -> None:
    """os.write until all of ``view`` is written (one call, unless the kernel splits it)."""
    while view:
        view = view[os.write(fd, view) :]


@functools.cache
def _proc_fd_links() -> bool:
    """Whether ``/proc/self/fd`` shows where open files are (Linux with /proc mounted)."""
    return os.path.isdir("/proc/self/fd")


def _remove_if_abandoned(dir_fd: int, name: str, modified_before: float) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        if not _lock(fd) or os.fstat(fd).st_mtime > modified_before or not _names_same_file(dir_fd, name, fd):
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _fsync_directory(path: str) -> None:
    fd = os.open(path, _DIRECTORY_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _entry_is(entry: os.DirEntry[str], kind: str) -> bool:
    """Whether a listed entry is a regular file ("file") or a directory ("dir"), links
    followed; False for one gone meanwhile, a link that loops or one not ours to look at."""
    try:
        return entry.is_file() if kind == "file" else entry.is_dir()
    except OSError:
        return False


class _Erasing(NamedTuple):
    """How one erase goes: ``durable`` (fsync each directory changed), ``locks`` (remove lock
    files no one holds: False where a thread of this process holds a lock below the node,
    which NFS's emulated ``flock`` would not show), ``kept`` ((device, inode) of the
    directories that hold the store, which no erase may enter, even through a bind mount)
    and ``url`` (the store, for errors)."""

    durable: bool
    locks: bool
    kept: frozenset[tuple[int, int]]
    url: str


def _erase_entry(dir_fd: int, name: str, how: _Erasing) -> None:
    """Remove ``name`` in the directory ``dir_fd``: a directory with what it holds (and then
    itself, where that leaves it empty), anything else unlinked (a link, not what it points
    to), except a partial write or a lock file a live writer holds; what is already gone is
    not an error."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            if TEMP_MARKER in name or name.startswith(LOCK_MARKER):
                # Gone where no live writer holds it: a locker between creating its lock file
                # and locking it finds the file gone after its flock, and takes the next one.
                if how.locks or TEMP_MARKER in name:
                    _remove_if_abandoned(dir_fd, name, modified_before=math.inf)
            else:
                os.unlink(name, dir_fd=dir_fd)
            return
        if (info.st_dev, info.st_ino) in how.kept:
            raise StoreError(how.url, None, f"not erased: {name!r} is a folder holding the store (a bind mount?)")
        child = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            _erase_contents(child, how)
        finally:
            os.close(child)
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # a lock file or live partial write stays
                raise
    except FileNotFoundError:
        return


def _erase_contents(dir_fd: int, how: _Erasing) -> None:
    """:func:`_erase_entry` of everything in the directory ``dir_fd``."""
    for entry in list(os.scandir(dir_fd)):
        _erase_entry(dir_fd, entry.name, how)
    if how.durable:
        os.fsync(dir_fd)


def _ids_around(path: str) -> set[tuple[int, int]]:
    """(device, inode) of ``path`` and of every directory above it, as far as they can be
    looked at."""
    ids = set()
    while True:
        try:
            info = os.stat(path)
        except OSError:
            break
        ids.add((info.st_dev, info.st_ino))
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return ids


def _pread_pooled(fd: int, length: int, offset: int) -> Buffer:
    """Like :func:`_pread_all`, into a buffer of the host output pool (a memoryview of the bytes
    read). Ranges of a shard (its inner chunks) come in many lengths and are dropped once
    decoded: fresh memory for each (what ``os.pread`` allocates) pays the kernel's page faults
    every time, a reused buffer does not (sharded crops read one by one: 12-16 % faster)."""
    if length <= 0:
        return b""
    if length <= UNPOOLED_READ_NBYTES:
        # Small reads come from the C heap without page faults; the pool's hand-out (about
        # 7 µs) was a third of reading a tiny inner chunk (16,384 of 512 B in one shard).
        return _pread_all(fd, length, offset)
    target = pooled_bytes(length).data.cast("B")
    return target[: _preadv_into(fd, target, offset)]


#: Ranges up to this size are read into fresh bytes rather than a pooled buffer (see
#: ``_pread_pooled``): below glibc's mmap threshold, malloc reuses its heap.
UNPOOLED_READ_NBYTES = 64 * 1024


def _preadv_into(fd: int, target: Buffer, offset: int) -> int:
    """Read from ``offset`` into ``target`` until it is full or the file ends; the bytes read."""
    got = 0
    while got < len(target):
        n = os.preadv(fd, [target[got:]] if got else [target], offset + got)
        if n == 0:
            break
        got += n
    return got


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    """pread that loops until ``length`` bytes or end of file."""
    if length <= 0:
        return b""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
