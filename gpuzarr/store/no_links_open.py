"""Opening a file by a path the kernel checks holds no symbolic link: ``openat2(2)`` with
``RESOLVE_NO_SYMLINKS`` (Linux 5.6+), called through ctypes (the os module has no openat2).

Why: a LocalStore that refuses links leaving its root checked every read by asking ``/proc``
where the opened file lives (``readlink`` of ``/proc/self/fd/N``). That is a second system call
per chunk file and a slow one: 3-4 µs on one thread, and with two threads reading crops of a
Blosc array it took 12 % of the read (measured on 2 cores). A path opened with no link in it is
the file the path names, so where that path lies below the resolved root there is nothing left
to check; a path with a link in it fails here with ``ELOOP`` and is left to the ``/proc`` check.

Where the call is missing (another OS or architecture, a kernel before 5.6, a seccomp filter
that refuses it), :func:`open_without_links` returns None from then on and callers check as
before.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import threading

#: openat2's number in the generic system call table, which x86-64 and arm64 share.
_SYS_OPENAT2 = 437
_AT_FDCWD = -100
_RESOLVE_NO_SYMLINKS = 0x04


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _Opener:
    """The ``syscall`` entry point and the constant arguments, made once."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        # syscall() is variadic and reads every argument as a long: pass longs, not C ints.
        self.number = ctypes.c_long(_SYS_OPENAT2)
        self.at_cwd = ctypes.c_long(_AT_FDCWD)
        self.size = ctypes.c_size_t(ctypes.sizeof(_OpenHow))
        self.hows: dict[int, tuple[_OpenHow, object]] = {}

    def how(self, flags: int) -> object:
        """A pointer to an ``open_how`` for ``flags`` (kept: the structs are reused)."""
        made = self.hows.get(flags)
        if made is None:
            how = _OpenHow(flags, 0, _RESOLVE_NO_SYMLINKS)
            made = self.hows[flags] = (how, ctypes.byref(how))
        return made[1]

    def open(self, path: bytes, flags: int) -> tuple[int, int]:
        """(file descriptor or -1, errno)."""
        fd = int(self.syscall(self.number, self.at_cwd, path, self.how(flags), self.size))
        return fd, (ctypes.get_errno() if fd < 0 else 0)


_opener: _Opener | None = None
_usable: bool | None = None  # None until the first call has tried it
_probe_lock = threading.Lock()


def _probe() -> bool:
    """Whether openat2 works here: tried once, on the root directory. It does not where the
    kernel has no such call (ENOSYS), a seccomp filter refuses it (EPERM, older container
    runtimes) or the kernel does not know the flags (EINVAL)."""
    global _opener, _usable
    with _probe_lock:
        if _usable is not None:
            return _usable
        usable = False
        if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64"):
            try:
                opener = _Opener()
                fd, _ = opener.open(b"/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except (OSError, AttributeError):  # no C library to load, or no syscall() in it
                fd = -1
            if fd >= 0:
                os.close(fd)
                _opener, usable = opener, True
        _usable = usable
        return usable


def open_without_links(path: str, flags: int) -> int | None:
    """``os.open(path, flags)``, failing with ``OSError(ELOOP)`` where any component of ``path``
    is a symbolic link; None where openat2 cannot be used here (then nothing was opened).

    ``flags`` must include ``O_CLOEXEC`` where the descriptor should have it, as for
    ``os.open`` (which adds it itself): openat2 takes them as given.
    """
    opener = _opener
    if opener is None:
        if _usable is False or not _probe():
            return None
        opener = _opener
        assert opener is not None
    fd, err = opener.open(os.fsencode(path), flags)
    if fd >= 0:
        return fd
    if err == errno.EINTR:  # a signal arrived while opening: as os.open does, try again
        return open_without_links(path, flags)
    raise OSError(err, os.strerror(err), path)


def reset_for_tests(*, unavailable: bool) -> None:
    """Forget the probe's answer, so that the next call probes again; with ``unavailable``
    behave as where openat2 cannot be used instead."""
    global _opener, _usable
    with _probe_lock:
        _opener = None
        _usable = False if unavailable else None


__all__ = ["open_without_links", "reset_for_tests"]
