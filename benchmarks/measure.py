"""Timing and memory helpers (a peak-RSS sampler and run statistics) and the progress log on stderr."""

from __future__ import annotations

import os
import resource
import statistics
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss() -> int | None:
    """Resident set size of this process in bytes (``/proc``, else psutil, else None)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


def process_peak_rss() -> int:
    """Peak RSS of the process so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _read_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS counter (Linux: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class PeakRSS:
    """Peak RSS during a block: ``delta`` = peak - RSS at entry.

    Uses the kernel's resettable high-water mark, so no sampling thread runs during the timed
    call (a Python sampler would compete for the GIL with the implementations measured).
    Without /proc it reports nothing.
    """

    def __init__(self) -> None:
        self.start = current_rss()
        self.peak: int | None = None
        self._usable = False

    def __enter__(self) -> PeakRSS:
        self._usable = self.start is not None and _reset_hwm()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._usable:
            self.peak = _read_hwm()

    @property
    def delta(self) -> int | None:
        if self.start is None or self.peak is None:
            return None
        return max(self.peak - self.start, 0)


def summarise(times: list[float], nbytes: int, items: int) -> dict[str, Any]:
    """Median and range of the run times, as GB/s (1e9 bytes) and items/s."""
    med = statistics.median(times)
    lo, hi = min(times), max(times)
    return {
        "time_median_s": med,
        "time_min_s": lo,
        "time_max_s": hi,
        "gbps_median": nbytes / med / 1e9,
        "gbps_min": nbytes / hi / 1e9,
        "gbps_max": nbytes / lo / 1e9,
        "items_per_s_median": items / med,
        "items_per_s_min": items / hi,
        "items_per_s_max": items / lo,
    }


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def gpu_sync() -> Callable[[], None] | None:
    """What waits for the GPU's queued work (CuPy's device synchronisation; nothing on the
    emulated device of the tests, where every call has finished already), or None, with the
    reason printed, where no GPU read can run here."""
    from gpuzarr.backends.select import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"skipped: no usable GPU ({reason})")
        return None
    try:
        import cupy
    except ImportError:
        return lambda: None

    def sync() -> None:
        cupy.cuda.Device().synchronize()

    return sync
