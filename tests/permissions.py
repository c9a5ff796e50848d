"""Files this process may not read or write, for the tests of permission errors.

Root reads and writes whatever the mode bits say, so for root the effective user is switched to
``nobody`` (every thread of the process: glibc passes ``seteuid`` on to all of them) for the
duration; pytest's temporary directories belong to root with mode 0700, so nothing below them
can then be reached. Anyone else gets the paths' mode bits cleared. Either way the refusal is the
kernel's own, not a stand-in.

Switched to ``nobody``, the process cannot reach files below ``/root`` (where Python itself may
live): code run inside must already have imported what it needs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

#: the user root runs as meanwhile
NOBODY = 65534


@contextlib.contextmanager
def without_permission(*paths: Path) -> Iterator[None]:
    """``paths`` (and, for root, everything below pytest's temporary directories) neither
    readable nor writable by this process inside the block."""
    if os.geteuid() != 0:
        modes = [(path, path.stat().st_mode & 0o7777) for path in paths]
        for path, _mode in modes:
            path.chmod(0)
        try:
            yield
        finally:
            for path, mode in modes:
                path.chmod(mode)
        return
    try:
        os.seteuid(NOBODY)
    except PermissionError:  # root without CAP_SETUID (some containers)
        pytest.skip("cannot give up root's access here")
    try:
        yield
    finally:
        os.seteuid(0)


def open_to_all(root: Path) -> None:
    """``root`` and everything below it readable and writable by every user (folders 0777, files
    0666): what the user switched to in :func:`without_permission` needs, short of what a test
    takes away."""
    for path in [root, *root.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)


@contextlib.contextmanager
def reachable_directory(mode: int = 0o777) -> Iterator[Path]:
    """A new directory outside pytest's (which only root may enter), of ``mode``, removed after
    (opened to all first, whatever a test took away): where a test's hierarchy must stay
    reachable by the user :func:`without_permission` switches to."""
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(mode)
        yield base
    finally:
        open_to_all(base)
        shutil.rmtree(base)
