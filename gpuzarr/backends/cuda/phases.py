"""Where the wall time of GPU reads goes: named phases timed on the host, while a caller records.

A read's steps run on two threads (the executor prepares batch k+1 on a helper thread while the
device works on batch k) and the device runs asynchronously, so a profiler's per-function times
say little about the read's wall time. Each step the executor and the reader take is wrapped in
:func:`phase`; inside :func:`recording`, every phase that ends is kept with its thread and its
start and end on ``time.perf_counter``'s clock, and :func:`summary` tells how long each kind of
phase took in all and where in the read it began and ended. ``device-wait`` is the host waiting
for the device (nvCOMP's decodes and the checksum kernels), ``batch-wait`` the device path
waiting for the helper thread's next batch.

Outside :func:`recording` a phase costs a global look-up and an empty context manager: a few
phases per batch, not per chunk. ``benchmarks/gpu_profile.py --phases`` prints the summary of
whole reads and batched crops on a GPU.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True)
class Phase:
    """One step of a read: its name, the thread it ran on, and its start and end (seconds on
    ``time.perf_counter``'s clock)."""

    name: str
    thread: int
    start: float
    end: float


@dataclass(frozen=True)
class PhaseTotal:
    """Every phase of one name in a recording: how many, their summed seconds, and the first
    start and last end relative to the recording's start."""

    name: str
    count: int
    seconds: float
    first_start: float
    last_end: float


class PhaseLog:
    """The phases ended while it was recording, in the order they ended (thread-safe)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.phases: list[Phase] = []
        self._lock = threading.Lock()

    def add(self, phase: Phase) -> None:
        with self._lock:
            self.phases.append(phase)

    def summary(self) -> list[PhaseTotal]:
        """One total per phase name, in the order of their first starts."""
        with self._lock:
            phases = list(self.phases)
        by_name: dict[str, list[Phase]] = {}
        for p in sorted(phases, key=lambda p: p.start):
            by_name.setdefault(p.name, []).append(p)
        return [
            PhaseTotal(
                name,
                len(group),
                sum(p.end - p.start for p in group),
                group[0].start - self.started,
                max(p.end for p in group) - self.started,
            )
            for name, group in by_name.items()
        ]


_log: PhaseLog | None = None
_log_lock = threading.Lock()


@contextlib.contextmanager
def recording() -> Iterator[PhaseLog]:
    """Record the phases of every GPU read in this process until the block ends (one recording
    at a time)."""
    global _log
    with _log_lock:
        if _log is not None:
            raise RuntimeError("phases are already being recorded")
        log = _log = PhaseLog()
    try:
        yield log
    finally:
        with _log_lock:
            _log = None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as phase ``name`` when a recording is on (also when the block raises)."""
    log = _log
    if log is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        log.add(Phase(name, threading.get_ident(), start, time.perf_counter()))


def format_summary(totals: list[PhaseTotal], wall: float | None = None) -> str:
    """``totals`` as a Markdown table (milliseconds), with the read's wall time when given."""
    lines = ["| phase | count | total ms | first start ms | last end ms |", "|---|---|---|---|---|"]
    lines += [
        f"| {t.name} | {t.count} | {t.seconds * 1e3:.2f} | {t.first_start * 1e3:.2f} | {t.last_end * 1e3:.2f} |"
        for t in totals
    ]
    if wall is not None:
        lines.append(f"| (wall) | 1 | {wall * 1e3:.2f} | 0.00 | {wall * 1e3:.2f} |")
    return "\n".join(lines)


__all__ = ["Phase", "PhaseLog", "PhaseTotal", "format_summary", "phase", "recording"]
