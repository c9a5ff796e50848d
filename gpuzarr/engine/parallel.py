"""Running many small independent tasks on the shared pool, or inline when that is cheaper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from .. import config

T = TypeVar("T")
R = TypeVar("R")


def run_tasks(func: Callable[[T], R], items: Sequence[T], min_parallel: int = 2) -> list[R]:
    """``[func(x) for x in items]``, spread over the pool in a few groups per worker.

    Grouping amortises the pool's per-task cost; running inline below ``min_parallel`` items (or
    with one worker) keeps small reads, such as a data loader's crops, free of thread hand-offs.
    Exceptions propagate from the first failing group.
    """
    workers = config.get("concurrency")
    if workers <= 1 or len(items) < min_parallel:
        return [func(x) for x in items]
    ngroups = min(len(items), workers * 4)
    size = -(-len(items) // ngroups)
    groups = [items[i : i + size] for i in range(0, len(items), size)]

    def run_group(group: Sequence[T]) -> list[R]:
        return [func(x) for x in group]

    results: list[R] = []
    for part in config.thread_pool().map(run_group, groups):
        results.extend(part)
    return results


def batches_by_bytes(sizes: Sequence[int], budget: int) -> list[range]:
    """Split items into consecutive runs whose summed size stays within ``budget`` (>= 1 item)."""
    runs: list[range] = []
    start, total = 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > budget:
            runs.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(sizes):
        runs.append(range(start, len(sizes)))
    return runs


__all__ = ["batches_by_bytes", "run_tasks"]
