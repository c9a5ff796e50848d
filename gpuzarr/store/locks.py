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
    from collections.abc import Callable, Hashable, Iterator

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

#: The descriptors of the lock files this process holds: a forked child closes its copies (the
#: threads holding them are not in it, and would never release them there).
_held_descriptors: set[int] = set()


def _after_fork_in_child() -> None:
    process_locks.reset()
    for fd in list(_held_descriptors):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held_descriptors.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def lock_path(path: str) -> str:
    """The lock file of the file at ``path``: in the same directory, named with ``LOCK_MARKER``
    (a hash of the name where the name would grow past ``NAME_MAX``)."""
    directory, name = os.path.split(path)
    if len(os.fsencode(LOCK_MARKER + name)) > NAME_MAX:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()
    return os.path.join(directory, LOCK_MARKER + name)


@contextlib.contextmanager
def file_lock(path: str, failure: Callable[[OSError], BaseException] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``path`` (created, and removed on release).

    ``failure`` turns an OSError of taking the lock into the error to raise (a store's report
    naming the key); what the caller's block raises passes as it is. Nothing is locked on
    platforms without ``fcntl`` (see ``LOCKS_ACROSS_PROCESSES``).
    """
    if sys.platform == "win32":
        yield
        return
    import fcntl

    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd = -1
    try:
        # Every step from the open to the yield sits in this ``try``, so that an interrupt
        # (Ctrl-C) anywhere in it leaves no descriptor open, and so no lock held for the life of
        # the process (every later write of the key waited for it).
        while True:
            try:
                # O_NOFOLLOW: a link planted at the lock's name is refused (ELOOP), not followed.
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            except FileNotFoundError:
                if os.path.isdir(directory):
                    raise
                os.makedirs(directory, exist_ok=True)  # erased with its node meanwhile: made again
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                current = os.stat(path)
                same = (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                break
            # The previous holder unlinked this file after we opened it: lock the one at the path.
            stale, fd = fd, -1
            os.close(stale)
        _held_descriptors.add(fd)
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        if failure is not None and isinstance(exc, OSError):
            raise failure(exc) from exc
        raise
    try:
        yield
    finally:
        try:
            # Unlinked before it is unlocked: a writer waiting on this file then finds it gone
            # and locks the next one, never this one beside another writer.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            # Unlocked explicitly, not by the close: a child forked meanwhile shares this open
            # file, and the lock would stay with it, for ever, if only closed here.
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            try:
                os.close(fd)
            finally:
                _held_descriptors.discard(fd)


__all__ = ["LOCKS_ACROSS_PROCESSES", "LOCK_MARKER", "KeyLocks", "file_lock", "lock_path", "process_locks"]
