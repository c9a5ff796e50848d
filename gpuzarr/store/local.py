"""A store on a local directory: one file per key, atomic writes by rename.

Concurrency: a :meth:`LocalStore.snapshot` holds the key's file open, so reads through it see
one version however often a writer replaces the file; :meth:`LocalStore.lock` takes a per-key
lock in the process and an advisory ``flock`` between processes (``store.locks``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import Buffer, ByteRange, Snapshot, Store, validate_key, validate_prefix
from .locks import LOCK_MARKER, LOCKS_ACROSS_PROCESSES, file_lock, lock_path, process_locks

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

#: Marks in-progress writes; listing skips them so readers never see a half-written key.
TEMP_MARKER = ".__gpuzarr_partial_"


def _is_hidden(name: str) -> bool:
    """Whether a file name is a partial write or a lock file, never a key."""
    return TEMP_MARKER in name or name.startswith(LOCK_MARKER)


class LocalStore(Store):
    """Keys are files below ``root``; '/' in a key is a directory separator."""

    locks_across_threads = True
    locks_across_processes = LOCKS_ACROSS_PROCESSES

    def __init__(self, root: str | os.PathLike[str], read_only: bool = False) -> None:
        super().__init__(read_only)
        self.root = Path(root).expanduser().absolute()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStore) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def kvstore_json(self) -> dict[str, Any]:
        """``{"driver": "file", "path": "<root>/"}``, which TensorStore opens too."""
        return {"driver": "file", "path": os.fspath(self.root).rstrip("/") + "/"}

    def path_of(self, key: str) -> str:
        return os.path.join(self.root, validate_key(key))

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        with self._open(key) as opened:
            if opened is None:
                return None
            fd, size = opened
            start, stop = (0, size) if byte_range is None else byte_range.resolve(size)
            return _pread_all(fd, stop - start, start)

    @contextlib.contextmanager
    def _open(self, key: str) -> Iterator[tuple[int, int] | None]:
        """(file descriptor, size) of the file holding ``key``, or None when there is none."""
        try:
            fd = os.open(self.path_of(key), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            yield None
            return
        try:
            info = os.fstat(fd)
            # os.open succeeds on a directory; a directory is not a key.
            yield (fd, info.st_size) if stat.S_ISREG(info.st_mode) else None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        """The file of ``key`` held open: a writer that replaces the file (as :meth:`set` does,
        and TensorStore) leaves this version readable; one that rewrites it in place shows
        in ``Snapshot.changed()``."""
        with self._open(key) as opened:
            yield _FileSnapshot(key, opened)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """The write lock of ``key``, between threads and (through ``flock`` on a lock file
        beside the key's file, see :mod:`gpuzarr.store.locks`) processes. Advisory: writers
        that do not take it (other libraries) are not held back; on NFS it holds only where
        the server supports locks."""
        self._check_writable()
        path = self.path_of(key)
        with process_locks.hold(path), file_lock(lock_path(path)):
            yield

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        with self._open(key) as opened:
            if opened is None:
                return None
            fd, size = opened
            begin = min(start, size)
            stop = size if length is None else min(start + length, size)
            target = memoryview(buffer_for(stop - begin)).cast("B")
            got = 0
            while got < len(target):
                n = os.preadv(fd, [target[got:]], begin + got)
                if n == 0:  # the file shrank under us: report what is there
                    return target[:got], begin + got
                got += n
            return target, size

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        with self._open(key) as opened:
            if opened is None:
                return None
            fd, size = opened
            return [_pread_all(fd, stop - start, start) for start, stop in (r.resolve(size) for r in ranges)]

    def exists(self, key: str) -> bool:
        return os.path.isfile(self.path_of(key))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        # Walk only the directory the prefix names, not the whole store.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = os.path.join(self.root, base_dir)
        if not os.path.isdir(top):
            return iter(())
        found = []
        for dirpath, _dirnames, filenames in os.walk(top):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in filenames:
                key = rel + name
                if key.startswith(prefix) and not _is_hidden(name):
                    found.append(key)
        return iter(sorted(found))

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        try:
            entries = list(os.scandir(os.path.join(self.root, prefix)))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        keys = sorted(prefix + e.name for e in entries if e.is_file() and not _is_hidden(e.name))
        # erase() leaves empty directories behind: a child prefix is listed only when it holds a
        # key, as in every other store.
        dirs = sorted(prefix + e.name + "/" for e in entries if e.is_dir() and _holds_a_key(e.path))
        return keys, dirs

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        path = self.path_of(key)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        temp = f"{path}{TEMP_MARKER}{uuid.uuid4().hex}"
        try:
            with open(temp, "wb", buffering=0) as f:
                view = memoryview(value).cast("B")
                while view:
                    written = f.write(view)
                    view = view[written:]
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise

    def erase(self, key: str) -> None:
        # Empty directories are left in place: removing them could race with a concurrent
        # set() that has just created the directory for its temporary file.
        self._check_writable()
        try:
            os.unlink(self.path_of(key))
        except (FileNotFoundError, NotADirectoryError):
            return


class _FileSnapshot(Snapshot):
    """One open file of a LocalStore (``opened`` None: the key was absent)."""

    def __init__(self, key: str, opened: tuple[int, int] | None) -> None:
        super().__init__(key)
        self._fd, self.size = opened if opened is not None else (-1, 0)
        self._stat = None if opened is None else os.fstat(self._fd)

    @property
    def version(self) -> tuple[int, int] | None:
        """(inode, modification time in ns), as ``FileSpan.version`` of the GPU path."""
        return None if self._stat is None else (self._stat.st_ino, self._stat.st_mtime_ns)

    def changed(self) -> bool:
        if self._stat is None:
            return False
        now = os.fstat(self._fd)
        return (now.st_size, now.st_mtime_ns) != (self._stat.st_size, self._stat.st_mtime_ns)

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self._check_key(key)
        if self._stat is None:
            return None
        start, stop = (0, self.size) if byte_range is None else byte_range.resolve(self.size)
        return _pread_all(self._fd, stop - start, start)

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        self._check_key(key)
        if self._stat is None:
            return None
        spans = (r.resolve(self.size) for r in ranges)
        return [_pread_all(self._fd, stop - start, start) for start, stop in spans]


def _holds_a_key(directory: str) -> bool:
    """Whether ``directory`` or any directory below it holds a file other than a partial write
    or a lock file."""
    return any(not _is_hidden(name) for _dirpath, _dirnames, filenames in os.walk(directory) for name in filenames)


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
