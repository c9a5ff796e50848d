"""Read-only descriptors of LocalStore files, kept open from one read to the next.

Opening a chunk's file costs four system calls beside the read itself: ``open``, the link
check (``readlink`` of ``/proc/self/fd``), ``fstat`` and ``close``. Crops read one by one open
the same few files again and again, and on two cores each of those calls is also a point where
the reading threads hand the interpreter lock to each other. So LocalStore reads keep the files
they opened last open, here, and take one ``lstat`` of the key's path instead on the next read.

What a kept descriptor may serve: the file that the key's path still names. Before each use the
path's ``lstat`` must show a regular file with the descriptor's device and inode; otherwise the
entry is retired and the key is opened afresh, with the full link check. That covers a file
replaced by a writer (renamed over it, as gpuzarr, zarr-python and TensorStore write: a new
inode), erased, turned into a link, or reached through a directory that has since been swapped
for a link (the path then leads to another inode, or to none). A file changed in place keeps its
inode, and a read through the kept descriptor sees its new bytes, as a fresh open would.

What it costs: a kept descriptor holds its file, so the disk space of a file erased or replaced
by another process comes back when the entry goes, not at once. An entry goes when its key is
next read, written or erased through a LocalStore of this process, when it is the least recently
used of more than ``open_files`` entries (a :mod:`gpuzarr.config` setting, see
:func:`default_open_files`), or at the first use of the cache after it has been idle for
:data:`MAX_IDLE_SECONDS`; ``gpuzarr.config.set(open_files=0)`` keeps none. An entry in use by a
read is closed when that read gives it back, never under it.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import config

if TYPE_CHECKING:
    from collections.abc import Callable

#: An entry unused for this long is closed at the next use of the cache.
MAX_IDLE_SECONDS = 10.0


@dataclass(eq=False)
class OpenFile:
    """One kept descriptor: its file's identity, and the reads using it now."""

    fd: int
    dev: int
    ino: int
    users: int = 1
    used_at: float = 0.0
    #: no longer in the cache: closed once ``users`` drops to 0
    retired: bool = False
    closed: bool = False


class OpenFiles:
    """The kept descriptors of one process, keyed by path and link policy.

    The policy is in the key because a store that follows links may have opened, by the same
    path, a file that a store refusing links must not read.
    """

    def __init__(self, capacity: Callable[[], int], clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        self._entries: OrderedDict[tuple[str, bool], OpenFile] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def borrow(self, path: str, follow_symlinks: bool) -> tuple[OpenFile, os.stat_result] | None:
        """The kept descriptor of ``path`` and the ``lstat`` that found its file still there,
        when one is kept and ``path`` still names its file; None otherwise (open it, then
        :meth:`keep`). Give it back."""
        key = (path, follow_symlinks)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            entry.users += 1
            idle = self._pop_idle(self._clock())
        self._close(idle)
        try:
            info = os.lstat(path)
        except OSError:
            info = None
        if info is not None and info.st_ino == entry.ino and info.st_dev == entry.dev and stat.S_ISREG(info.st_mode):
            entry.used_at = self._clock()
            return entry, info
        # The path names another file now, or none: this descriptor serves no read again.
        self._close(self._retire(key, entry) + self._release(entry))
        return None

    def keep(self, path: str, follow_symlinks: bool, fd: int, info: os.stat_result) -> OpenFile | None:
        """Keep ``fd``, just opened and checked for ``path`` (``info``: its ``fstat``), borrowed
        by the caller; None where none are kept (the caller closes ``fd`` itself)."""
        capacity = self._capacity()
        if capacity <= 0:
            self.clear()  # what was kept before the setting went to 0
            return None
        now = self._clock()
        entry = OpenFile(fd, info.st_dev, info.st_ino, used_at=now)
        key = (path, follow_symlinks)
        with self._lock:
            to_close = []
            old = self._entries.pop(key, None)
            if old is not None:
                to_close += self._retire_locked(old)
            self._entries[key] = entry
            while len(self._entries) > capacity:
                _, oldest = self._entries.popitem(last=False)
                to_close += self._retire_locked(oldest)
            to_close += self._pop_idle(now)
        self._close(to_close)
        return entry

    def give_back(self, entry: OpenFile) -> None:
        """End a read's use of ``entry`` (from :meth:`borrow` or :meth:`keep`)."""
        self._close(self._release(entry))

    def discard(self, path: str) -> None:
        """Retire the entries of ``path`` (its key was written or erased in this process)."""
        to_close = []
        with self._lock:
            for follow in (False, True):
                entry = self._entries.pop((path, follow), None)
                if entry is not None:
                    to_close += self._retire_locked(entry)
        self._close(to_close)

    def clear(self) -> None:
        """Retire every entry (those in use close when given back)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            to_close = [fd for entry in entries for fd in self._retire_locked(entry)]
        self._close(to_close)

    def after_fork_in_child(self) -> None:
        """A forked child's copy: the parent's threads are gone, and with them every use."""
        self._lock = threading.Lock()
        entries, self._entries = list(self._entries.values()), OrderedDict()
        self._close([entry.fd for entry in entries if not entry.closed])

    # -- under the lock ---------------------------------------------------------------------------

    def _pop_idle(self, now: float) -> list[int]:
        """Retire the least recently used entries while they are idle; their descriptors."""
        to_close = []
        while self._entries:
            head = next(iter(self._entries.values()))
            if head.users or now - head.used_at <= MAX_IDLE_SECONDS:
                break
            self._entries.popitem(last=False)
            to_close += self._retire_locked(head)
        return to_close

    def _retire(self, key: tuple[str, bool], entry: OpenFile) -> list[int]:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]
            return self._retire_locked(entry)

    @staticmethod
    def _retire_locked(entry: OpenFile) -> list[int]:
        entry.retired = True
        if entry.users == 0 and not entry.closed:
            entry.closed = True
            return [entry.fd]
        return []

    def _release(self, entry: OpenFile) -> list[int]:
        with self._lock:
            entry.users -= 1
            if entry.retired and entry.users == 0 and not entry.closed:
                entry.closed = True
                return [entry.fd]
            return []

    @staticmethod
    def _close(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)


def default_open_files() -> int:
    """``open_files`` when it is None: an eighth of the soft open-file limit (``ulimit -n``),
    between 16 and 256. kvikio's handles of GPU reads take up to half of it (see
    :func:`gpuzarr.config.default_file_handles`)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        return 64
    if soft == resource.RLIM_INFINITY or soft < 0:
        return 256
    return max(16, min(256, soft // 8))


def _capacity() -> int:
    wanted = config.get("open_files")
    return int(wanted) if wanted is not None else default_open_files()


#: The process's kept descriptors, shared by every LocalStore.
OPEN_FILES = OpenFiles(_capacity)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=OPEN_FILES.after_fork_in_child)
