"""Per-thread scratch buffers (gpuzarr.buffers): reused when small, never kept when large."""

from __future__ import annotations

from gpuzarr import buffers


def test_small_buffers_are_kept_for_the_thread_and_large_ones_are_not() -> None:
    """A read of a few 64 MiB chunks left 119 MiB a thread allocated after it ended."""
    small = buffers.scratch(4096, "test")
    assert buffers.scratch(4096, "test") is small
    assert buffers.growable(4096, "test").ctypes.data == buffers.growable(100, "test").ctypes.data
    large = buffers.KEPT_NBYTES + 1
    first = buffers.scratch(large, "test")
    assert first.size == large and first.ctypes.data % buffers.PAGE == 0
    assert buffers.scratch(large, "test") is not first
    grown = buffers.growable(large, "test")
    assert grown.size == large and grown.ctypes.data % buffers.PAGE == 0
    assert buffers.growable_nbytes(["test"]) <= buffers.KEPT_NBYTES  # the large one was not kept
