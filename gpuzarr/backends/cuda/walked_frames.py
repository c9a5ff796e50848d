"""The zstd frames in local files that the host has walked and found fit for a batch, kept so
that a frame read again from an unchanged file is not walked again.

Before the device reads a zstd chunk from a file itself (kvikio), the host walks the frame's
headers with small reads of the file (``bind._check_direct_frame``): about one ``pread`` per
block, some 20 µs a frame on the host (emulated device, 2-core VM), 7.7 ms of a whole read of
343 inner chunks. A loader reads the same chunks epoch after epoch, and every one of those walks
gave the same answer. A walk's verdict depends only on the frame's bytes, and a file's
:class:`~gpuzarr.store.local.FileVersion` (inode, size, modification and change times, which
every write moves) tells whether they can have changed: a frame is known by its file, offset,
size, the file's version when the span was located and the decoded size the chunk must have.
Only frames that passed are kept; a frame that fails is walked (and fails) every time.

The device's read is still checked against the span's version afterwards, as before: what the
walk vouched for is the bytes of that version.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...store.local import FileVersion
    from .launches import FileSpan

#: the most frames kept (about 200 bytes each), least recently read dropped first
KEPT_FRAMES = 1 << 16

_FrameKey = tuple[str, int, int, "FileVersion", int]


class WalkedFrames:
    """A bounded set of frames that passed the walk (thread-safe: batches are bound on helper
    threads, and reads run on several threads at once)."""

    def __init__(self, capacity: int = KEPT_FRAMES) -> None:
        self.capacity = capacity
        self._frames: OrderedDict[_FrameKey, None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(span: FileSpan, decoded_nbytes: int) -> _FrameKey | None:
        """What knows the frame of ``span``; None where the file's version is unknown."""
        if span.version is None:
            return None
        return (span.path, span.offset, span.nbytes, span.version, decoded_nbytes)

    def passed(self, key: _FrameKey | None) -> bool:
        """Whether the frame ``key`` names passed the walk before, in a file of the same version."""
        if key is None:
            return False
        with self._lock:
            if key not in self._frames:
                return False
            self._frames.move_to_end(key)
            return True

    def add(self, key: _FrameKey | None) -> None:
        """Keep ``key``: its frame passed the walk."""
        if key is None or self.capacity <= 0:
            return
        with self._lock:
            self._frames[key] = None
            self._frames.move_to_end(key)
            while len(self._frames) > self.capacity:
                self._frames.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._frames.clear()

    def __len__(self) -> int:
        return len(self._frames)


#: the frames this process has walked
WALKED_FRAMES = WalkedFrames()

__all__ = ["KEPT_FRAMES", "WALKED_FRAMES", "WalkedFrames"]
