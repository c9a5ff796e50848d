"""The loader's GPU settings side by side: what decoding ahead, the GPU batch budget and the
device chunk cache do to 64^3 crops/s on the loader's datasets.

    python -m benchmarks.loader_sweep [--data-dir benchmarks/data] [--size-mib 64] [--crops 256]
                                      [--passes 5] [--device gpu|cpu] [--rows NAME ...]
                                      [--switch-interval SECONDS] [--phases]

Each row is one CropLoader (batches of 32, ``prefetch=2``, CuPy output on a GPU, NumPy on the
CPU) over the same ``--crops`` random unaligned crops (those of the ``loader`` workload),
warmed up by one pass whose every crop is checked against the ground truth, then timed over
``--passes`` passes (median). GPU rows:

* ``ahead off``: ``decode_ahead_bytes=0``, each batch reads exactly its crops (one batched
  decode per batch);
* ``ahead default``: the chunks of the next batches decoded together, up to the GPU batch budget;
* ``ahead default, host reads``: the same with ``gpu_direct_reads=False``: zstd chunks read on
  the host and copied in the batch's staging buffer rather than read by kvikio (Blosc chunks
  take that route either way, so their two rows show how much rows differ by chance);
* ``ahead default, 2 lanes``: ``decode_ahead_lanes=2``, the next window's chunks decoded on a
  second thread, and a CUDA stream of its own, while the current window's batches are put together;
* ``ahead default, frames walked every pass``: as ``ahead default``, with the zstd frames the device reads
  from files walked again on every pass (the kept walks, ``backends/cuda/walked_frames.py``,
  forgotten before each pass): what keeping them saves;
* ``ahead 1 GiB, batch 4 GiB``: more batches per decode, with ``gpu_batch_bytes`` raised so that
  the executor does not split them again;
* ``device cache``: a device cache holding the whole volume (after the warm-up, no decoding).

On the CPU (``--device cpu``) the rows are the loader without a host cache (several batches
read at once, its default, and one batch at a time) and with one, on threads, then with
``workers`` processes (2, 4, ... up to the CPUs; each reads with
``concurrency // workers`` threads): what worker processes gain over threads that share one
interpreter lock, on this host's cores. A loader with workers is kept over its passes, as a
training loop keeps it, so its workers start once, in the warm-up pass. ``--rows`` keeps the rows
named; ``--switch-interval`` sets how long a thread may keep the interpreter lock while another
waits (Python's default is 5 ms), to see what the hand-overs between the loader's threads cost.
``--phases`` adds, after the table, where the wall time of one more pass of each row went
(``gpuzarr.backends.cuda.phases``: the loader's pieces, look-ups and assembles, the consumer's
waits, and the steps of the reads that decode chunks).
Prints a Markdown table (the median time per pass, the median time from the start of a pass to
its first batch, and crops/s); no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .datasets import DATASETS, DataDir, chunks_for
from .loader_workload import LOADER_BATCH, LOADER_DATASETS
from .measure import gpu_sync
from .workloads import random_boxes

if TYPE_CHECKING:
    from collections.abc import Callable

HERE = Path(__file__).resolve().parent
CROP = 64
GIB = 1 << 30


def worker_counts(cpus: int | None = None) -> list[int]:
    """The ``workers`` of the CPU rows: 2, 4, 8, ... up to ``cpus`` (this host's CPUs)."""
    cpus = cpus or os.cpu_count() or 1
    counts, n = [], 2
    while n <= max(cpus, 2):
        counts.append(n)
        n *= 2
    return counts


#: (row name, CropLoader options, gpuzarr.config settings, what runs before each timed pass)
Row = tuple[str, dict[str, Any], dict[str, Any], "Callable[[], None] | None"]


def _forget_walked_frames() -> None:
    from gpuzarr.backends.cuda.walked_frames import WALKED_FRAMES

    WALKED_FRAMES.clear()


def settings(device: str, volume_nbytes: int) -> list[Row]:
    """Every row of ``device``'s table."""
    if device == "cpu":
        return [
            ("no cache", {}, {}, None),
            ("no cache, one batch at a time", {"concurrent_batches": 1}, {}, None),
            ("host cache", {"cache_bytes": 2 * volume_nbytes}, {}, None),
            *((f"workers {n}", {"workers": n}, {}, None) for n in worker_counts()),
        ]
    return [
        ("ahead off", {"decode_ahead_bytes": 0}, {}, None),
        ("ahead default", {}, {}, None),
        ("ahead default, host reads", {}, {"gpu_direct_reads": False}, None),
        # Windows of up to 64 MiB decoded by the CPU engine and copied over: against nvCOMP's
        # latency (about 11 ms for a window of 512 KiB zstd frames on an H200), 16 cores decode
        # a window of 125 such chunks in about 3 ms.
        ("ahead default, CPU decode", {}, {"gpu_small_read_chunks": 1 << 20}, None),
        ("ahead default, 2 lanes", {"decode_ahead_lanes": 2}, {}, None),
        ("ahead default, frames walked every pass", {}, {}, _forget_walked_frames),
        ("ahead 1 GiB, batch 4 GiB", {"decode_ahead_bytes": GIB}, {"gpu_batch_bytes": 4 * GIB}, None),
        ("device cache", {"device_cache_bytes": 2 * volume_nbytes}, {}, None),
    ]


def _to_numpy(x: Any) -> np.ndarray[Any, Any]:
    get = getattr(x, "get", None)
    return np.asarray(get() if callable(get) else x)


def measure(
    array: Any,
    truth: np.ndarray[Any, Any],
    sels: list[tuple[slice, ...]],
    device: str,
    options: dict[str, Any],
    passes: int,
    sync: Callable[[], None],
    before_pass: Callable[[], None] | None = None,
    phases: list[str] | None = None,
) -> tuple[float, float, float]:
    """(median seconds per pass, crops/s, median seconds from a pass's start to its first batch)
    of one loader, after a checked warm-up pass; ``before_pass`` runs before each timed pass,
    outside the time. With ``phases`` (a list), one more pass is recorded and the table of where
    its time went is appended."""
    from gpuzarr.loader import CropLoader

    crops = [(0, tuple(s.start for s in sel)) for sel in sels]
    output = "numpy" if device == "cpu" else "cupy"
    loader = CropLoader(
        array, (CROP,) * truth.ndim, LOADER_BATCH, sampler=crops, shuffle=False, device=device, output=output,
        prefetch=2, **options,
    )  # fmt: skip
    checked_pass(loader, truth, sels)
    times, firsts = [], []
    for _ in range(passes):
        if before_pass is not None:
            before_pass()
        first = None
        t0 = time.perf_counter()
        for _batch in loader:
            if first is None:
                first = time.perf_counter() - t0
        sync()
        times.append(time.perf_counter() - t0)
        firsts.append(times[-1] if first is None else first)
    if phases is not None:
        phases.append(recorded_pass(loader, sync, before_pass))
    loader.close()
    median = statistics.median(times)
    return median, len(sels) / median, statistics.median(firsts)


def checked_pass(loader: Any, truth: np.ndarray[Any, Any], sels: list[tuple[slice, ...]]) -> None:
    """One pass of ``loader`` (over the crops ``sels``, in order), every crop checked against
    ``truth``."""
    start = 0
    for batch in loader:
        got = _to_numpy(batch.data)
        for i, sel in enumerate(sels[start : start + len(got)]):
            if not np.array_equal(got[i], truth[sel]):
                raise AssertionError(f"crop {start + i} at {sel} differs from the ground truth")
        start += len(got)


def recorded_pass(
    loader: Any, sync: Callable[[], None] = lambda: None, before_pass: Callable[[], None] | None = None
) -> str:
    """Where the wall time of one pass of ``loader`` went, as a Markdown table (``sync`` waits
    for the device after it; ``before_pass`` runs first, outside the time)."""
    from gpuzarr.backends.cuda import phases

    if before_pass is not None:
        before_pass()
    with phases.recording() as log:
        start = time.perf_counter()
        for _batch in loader:
            pass
        sync()
        wall = time.perf_counter() - start
    return phases.format_summary(log.summary(), wall)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loader_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--size-mib", type=float, default=64)
    p.add_argument("--crops", type=int, default=256)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--rows", nargs="+", metavar="ROW", help="only these rows (by name)")
    p.add_argument(
        "--switch-interval",
        type=float,
        metavar="SECONDS",
        help="sys.setswitchinterval for the run (how soon a thread waiting for the interpreter lock gets it)",
    )
    p.add_argument("--phases", action="store_true", help="after the table, where one more pass of each row went")
    args = p.parse_args(argv)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)

    import gpuzarr

    sync: Callable[[], None] = lambda: None  # noqa: E731 - the CPU's reads have finished
    if args.device == "gpu":
        waits = gpu_sync()
        if waits is None:
            return 0
        sync = waits

    data = DataDir(args.data_dir, args.size_mib, log=lambda message: print(message, file=sys.stderr))
    tables: list[str] = []
    print(f"| dataset | {args.device} loader | s per pass | first batch ms | 64^3 crops/s |")
    print("|---|---|---|---|---|")
    for spec in (s for s in DATASETS if s.name in LOADER_DATASETS):
        path = data.dataset(spec)
        truth = data.truth(spec.kind)
        sels = random_boxes(truth.shape, (CROP,) * truth.ndim, chunks_for(spec), args.crops, seed=3)
        array = gpuzarr.open(str(path), device=args.device)
        for name, options, config, before_pass in settings(args.device, truth.nbytes):
            if args.rows and name not in args.rows:
                continue
            try:
                with gpuzarr.config.set(**config):
                    recorded: list[str] | None = [] if args.phases else None
                    seconds, rate, first = measure(
                        array, truth, sels, args.device, options, args.passes, sync, before_pass, recorded
                    )
            except Exception as exc:  # reported, not raised: the other rows still run
                print(f"| {spec.name} | {name} | error: {type(exc).__name__}: {exc} | | |")
                continue
            print(f"| {spec.name} | {name} | {seconds:.4f} | {first * 1e3:.2f} | {rate:,.0f} |", flush=True)
            if recorded:
                tables.append(f"\n### {spec.name}, {name}: one pass\n\n{recorded[0]}")
    for table in tables:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
