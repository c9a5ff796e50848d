"""Shared-memory batch buffers (gpuzarr.loader.shared): segments let go of leave nothing open."""

from __future__ import annotations

import contextlib
import gc
import os
import sys

import numpy as np
import pytest

from gpuzarr.loader.shared import SharedSegments

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")


def _open_segments() -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own descriptor)
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [link for link in links if link.startswith("/dev/shm/")]


def test_segments_let_go_of_keep_no_descriptor_open() -> None:
    """A segment unlinked while its array was being freed kept its descriptor open (closing it
    raised BufferError first), and with it the segment's memory, for the life of the process."""
    before = _open_segments()
    segments = SharedSegments(workers=1, keep=0)
    arrays = [segments.empty((256, 256), np.dtype("u2")) for _ in range(4)]
    views = [a[1:] for a in arrays]  # the last reference to each segment is a view
    del arrays
    views.clear()
    segments.close()
    del segments
    gc.collect()
    assert _open_segments() == before
