"""Work spread over ``--jobs`` threads, and the progress bar that follows it.

The threads are the command's own (``--jobs`` of them), not gpuzarr's shared pool: each runs
whole reads and writes, which spread their chunks over the shared pool in turn (a caller of
``gpuzarr.parallel.run_tasks`` works through its own tasks when the pool is busy, so the nesting
cannot deadlock). Results come back to the calling thread, which alone updates the bar.
"""

from __future__ import annotations

import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

T = TypeVar("T")
R = TypeVar("R")


def run_parallel(
    func: Callable[[T], R], items: Sequence[T], jobs: int, on_result: Callable[[T, R], None]
) -> None:
    """``on_result(item, func(item))`` for every item, ``func`` running on ``jobs`` threads
    and ``on_result`` on the calling thread, in the order the items finish.

    The first error cancels the items not started yet and is raised once the running ones end.
    """
    if jobs <= 1 or len(items) <= 1:
        for item in items:
            on_result(item, func(item))
        return
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="gpuzarr-copy") as pool:
        futures = {pool.submit(func, item): item for item in items}
        try:
            for future in as_completed(futures):
                on_result(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


class Progress:
    """A progress bar of bytes on stderr (tqdm), with the chunks done and chunks per second
    after it; nothing is drawn (and tqdm is not imported) when it is disabled.

    ``enabled=None`` draws it only when stderr is a terminal, so that logs and pipes stay clean.
    """

    def __init__(self, total_bytes: int, description: str, enabled: bool | None) -> None:
        self.chunks = 0
        self.nbytes = 0
        self._start = time.perf_counter()
        self._bar: Any = None
        self._logging: Any = None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._bar = tqdm(
                total=total_bytes, desc=description, unit="B", unit_scale=True, file=sys.stderr,
                dynamic_ncols=True, leave=True,
            )
            # Log messages (-v) go above the bar instead of through it.
            self._logging = logging_redirect_tqdm(loggers=[logging.getLogger("gpuzarr")])
            self._logging.__enter__()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def update(self, nbytes: int, chunks: int) -> None:
        self.nbytes += nbytes
        self.chunks += chunks
        if self._bar is None:
            return
        rate = self.chunks / max(self.elapsed, 1e-9)
        self._bar.set_postfix_str(f"{self.chunks} chunks, {rate:.0f} chunks/s", refresh=False)
        self._bar.update(nbytes)

    def close(self) -> None:
        if self._logging is not None:
            self._logging.__exit__(None, None, None)
            self._logging = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
