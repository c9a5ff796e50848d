"""What the GPU batch budget (``gpuzarr.config`` ``gpu_batch_bytes``) does to whole-volume reads
and batched crops.

    python -m benchmarks.batch_sweep [--data-dir benchmarks/data] [--size-mib 128] [--crops 64]
                                     [--repeats 5] [--budgets-mib 256 1024 4096]
                                     [--datasets zstd sharded-zstd blosc-lz4 raw]
                                     [--io-threads 1 4 16]

The executor splits a read into batches that each fit the budget (encoded and decoded bytes,
and nvCOMP's scratch: about 5x the decoded bytes of a zstd chunk), and waits on the host for
each batch's decode before the next one's is queued. nvCOMP's batched zstd decode takes about
as long as its slowest frame, whatever the number of frames, so each batch adds that latency
once. Each row reads one dataset at one budget: the number of executor batches, the host's
planning time alone (the selection's plan and the GPU plan), the median whole read and the
median ``read_batch`` of ``--crops`` random 64^3 crops (those of the ``crops-batch`` workload),
after one warm-up read of each checked against the ground truth. ``--io-threads`` repeats
every row at each of these ``gpuzarr.config`` ``io_threads`` (kvikio's threads for the file
reads the device does itself; the default is ``min(16, CPUs)``), in the last column. Prints a
Markdown table; no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuzarr.cli.bench import median_seconds

from .datasets import DATASETS, DataDir, chunks_for
from .measure import gpu_sync
from .workloads import crop_shape, random_boxes

if TYPE_CHECKING:
    from collections.abc import Callable

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
#: the volumes of the full-read benchmark whose chunks the GPU decodes in different ways
DEFAULT_DATASETS = ("zstd", "sharded-zstd", "blosc-lz4", "raw")


def _to_numpy(x: Any) -> np.ndarray[Any, Any]:
    get = getattr(x, "get", None)
    return np.asarray(get() if callable(get) else x)


def plan_of(array: Any, selection: Any, budget: int, crops: list[tuple[slice, ...]] | None = None) -> Any:
    """The GPU read plan of ``array[selection]`` (or of ``array.read_batch(crops)``) at ``budget``,
    planned as the reader plans it."""
    from gpuzarr.backends.cuda.gpu_plan import build_gpu_read_plan
    from gpuzarr.plan.selection import plan_box_batch, plan_selection

    dims = array.layout.dimensions()
    plan = plan_box_batch(crops, dims) if crops is not None else plan_selection(selection, dims)
    if plan is None:
        raise ValueError("the crops are not boxes of one shape")
    return build_gpu_read_plan(array.layout, plan, budget)


def check(array: Any, truth: np.ndarray[Any, Any], crops: list[tuple[slice, ...]]) -> None:
    """Raise unless the whole read and the batch of crops equal the ground truth."""
    if not np.array_equal(_to_numpy(array[...]), truth):
        raise AssertionError("the whole read differs from the ground truth")
    got = _to_numpy(array.read_batch(crops))
    for i, crop in enumerate(crops):
        if not np.array_equal(got[i], truth[crop]):
            raise AssertionError(f"crop {i} at {crop} differs from the ground truth")


def row(
    array: Any,
    truth: np.ndarray[Any, Any],
    crops: list[tuple[slice, ...]],
    budget: int,
    sync: Callable[[], None],
    repeats: int,
) -> str:
    """One row's cells after the dataset and budget (``gpu_batch_bytes`` already set to
    ``budget``): batches, planning, whole read and crops, after a checked warm-up."""
    read_plan = plan_of(array, ..., budget)
    crops_plan = plan_of(array, None, budget, crops)
    plan_seconds = median_seconds(lambda: plan_of(array, ..., budget), lambda: None, repeats)
    check(array, truth, crops)
    read_seconds = median_seconds(lambda: array[...], sync, repeats)
    crop_seconds = median_seconds(lambda: array.read_batch(crops), sync, repeats)
    return (
        f"{len(read_plan.batches)} | {len(crops_plan.batches)} | {plan_seconds * 1e3:.2f} | {read_seconds * 1e3:.1f} "
        f"| {truth.nbytes / read_seconds / 1e9:.3f} | {crop_seconds * 1e3:.1f} | {len(crops) / crop_seconds:,.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.batch_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--size-mib", type=float, default=128)
    p.add_argument("--crops", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budgets-mib", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS), choices=[s.name for s in DATASETS])
    p.add_argument("--io-threads", type=int, nargs="+", default=[None], help="kvikio threads (default: gpuzarr's)")
    args = p.parse_args(argv)

    import gpuzarr

    sync = gpu_sync()
    if sync is None:
        return 0

    data = DataDir(args.data_dir, args.size_mib, log=lambda message: print(message, file=sys.stderr))
    print(
        f"| dataset | budget MiB | batches (read) | batches ({args.crops} crops) | plan ms (read) "
        f"| whole read ms | GB/s | {args.crops} crops ms | 64^3 crops/s | io threads |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for spec in (s for s in DATASETS if s.name in args.datasets):
        path = data.dataset(spec)
        truth = data.truth(spec.kind)
        crops = random_boxes(truth.shape, crop_shape(spec), chunks_for(spec), args.crops, seed=1)
        array = gpuzarr.open(str(path), device="gpu")
        for budget_mib, io_threads in itertools.product(args.budgets_mib, args.io_threads):
            threads = "default" if io_threads is None else str(io_threads)
            try:
                with gpuzarr.config.set(gpu_batch_bytes=budget_mib * MIB, io_threads=io_threads):
                    cells = row(array, truth, crops, budget_mib * MIB, sync, args.repeats)
            except Exception as exc:  # reported, not raised: the other rows still run
                print(f"| {spec.name} | {budget_mib} | error: {type(exc).__name__}: {exc} | | | | | | | {threads} |")
                continue
            print(f"| {spec.name} | {budget_mib} | {cells} | {threads} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
