"""Timing and memory helpers: a peak-RSS sampler and run statistics."""

from __future__ import annotations

import os
import resource
import statistics
import threading
from typing import Any

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


class PeakRSS:
    """Samples RSS in a background thread while active: ``delta`` = peak - RSS at entry."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start = current_rss()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRSS:
        if self.start is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            rss = current_rss()
            if rss is not None and (self.peak is None or rss > self.peak):
                self.peak = rss

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rss = current_rss()
        if rss is not None and (self.peak is None or rss > self.peak):
            self.peak = rss

    @property
    def delta(self) -> int | None:
        if self.start is None or self.peak is None:
            return None
        return self.peak - self.start


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
