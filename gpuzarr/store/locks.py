"""Write locks of single keys: in-process locks by key, and advisory file locks between processes.

:meth:`gpuzarr.store.base.Store.lock` serialises the read-modify-write of one key. A LocalStore
takes two locks, in this order:

* a ``threading.Lock`` per key (:class:`KeyLocks`), shared by every store object of the
  process. ``flock`` alone would exclude threads too on a local file system, since each thread
  opens the lock file itself (flock locks belong to the open file description), but not where
  the kernel emulates flock with POSIX record locks (NFS), which belong to the process: two
  threads would both hold it. POSIX locks (``fcntl.lockf``) have that flaw everywhere, and
  closing any descriptor of the file drops all of the process's locks on it. A thread waiting
  on the in-process lock also holds no file descriptor.
* ``fcntl.flock`` on a lock file beside the key's file (:func:`file_lock`), which the kernel
  releases when its holder dies (kill -9 included), so a dead writer never blocks the next.

The lock file lives only while it is held: its holder unlinks it before unlocking, and a
writer that locked a file which is no longer the one at the path (unlinked by its previous
holder) unlocks and tries again, so two writers never hold different files of one key. Only a
writer killed while holding the lock leaves the file, empty and unlocked; the next lock of that
key takes it over and removes it. Listings never show lock files (``LOCK_MARKER``).

On Windows there is no ``fcntl``: only the in-process lock is taken.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterator

#: Marks lock files (see :func:`lock_path`); listings skip them, like partial writes.
LOCK_MARKER = ".__gpuzarr_lock_"
#: File names longer than this are refused by common file systems (ext4, XFS, APFS, NTFS).
NAME_MAX = 255

#: Whether :func:`file_lock` excludes other processes on this platform.
LOCKS_ACROSS_PROCESSES = sys.platform != "win32"


class KeyLocks:
    """``threading.Lock`` objects by key, made on first use and dropped once no thread holds or
    waits for them (a store of 100,000 keys keeps no 100,000 locks)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, list[int]]] = {}

    @contextlib.contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        """Hold the lock of ``key``, waiting for the thread that holds it."""
        with self._mutex:
            lock, users = self._locks.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._mutex:
                users[0] -= 1
                if not users[0]:
                    del self._locks[key]

    def any_below(self, prefix: str) -> bool:
        """Whether a thread of this process holds, or waits for, the lock of a key (a path)
        starting with ``prefix``."""
        with self._mutex:
            return any(isinstance(key, str) and key.startswith(prefix) for key in self._locks)

    def reset(self) -> None:
        """Forget every lock: in a forked child, the threads that held them do not exist."""
        self._mutex = threading.Lock()
        self._locks = {}


#: The in-process locks of every store, keyed by what names a key across store objects (a
#: LocalStore's file path; a MemoryStore's dict and key).
process_locks = KeyLocks()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=process_locks.reset)


def lock_path(path: str) -> str:
    """The lock file of the file at ``path``: in the same directory, named with ``LOCK_MARKER``
    (a hash of the name where the name would grow past ``NAME_MAX``)."""
    directory, name = os.path.split(path)
    if len(os.fsencode(LOCK_MARKER + name)) > NAME_MAX:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()
    return os.path.join(directory, LOCK_MARKER + name)


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``path`` (created, and removed on release).

    Nothing is locked on platforms without ``fcntl`` (see ``LOCKS_ACROSS_PROCESSES``).
    """
    if sys.platform == "win32":
        yield
        return
    import fcntl

    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    while True:
        try:
            # O_NOFOLLOW: a link planted at the lock's name is refused (ELOOP), not followed.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            if os.path.isdir(directory):
                raise
            os.makedirs(directory, exist_ok=True)  # erased with its node meanwhile: made again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                current = os.stat(path)
                same = (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        # The previous holder unlinked this file after we opened it: lock the one at the path.
        os.close(fd)
    try:
        yield
    finally:
        # Unlinked before it is unlocked: a writer waiting on this file then finds it gone and
        # locks the next one, never this one beside another writer.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


__all__ = ["LOCKS_ACROSS_PROCESSES", "LOCK_MARKER", "KeyLocks", "file_lock", "lock_path", "process_locks"]
