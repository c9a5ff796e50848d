"""Waiting out the clock that stamps files' change times, for tests of writers that hide a
rewrite by putting the old modification time back."""

from __future__ import annotations

import os
import time

#: Longer than one tick of the coarse clock that kernels before Linux 6.13 stamp change times
#: with (1-10 ms, by CONFIG_HZ).
_TICK_NS = 20_000_000
#: The longest wait: a change time ahead of this machine's clock (a file server's clock, or
#: times kept to the second) is not waited for.
_MOST_NS = 2_000_000_000


def wait_for_a_new_change_time(path: str | os.PathLike[str]) -> None:
    """Return once a change to ``path`` would get a change time other than its present one: a
    write right after the file's last change may otherwise get the same one, which no reader
    can tell apart."""
    changed = os.stat(path).st_ctime_ns
    give_up = time.monotonic_ns() + _MOST_NS
    while time.time_ns() <= changed + _TICK_NS and time.monotonic_ns() < give_up:
        time.sleep(0.002)
