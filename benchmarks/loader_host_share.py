"""The host's share of a device-cached GPU loader pass, measured without a GPU.

    python -m benchmarks.loader_host_share [--data-dir benchmarks/data] [--size-mib 64]
                                           [--crops 256] [--passes 20] [--phases]

With every chunk in the device cache, a GPU loader's pass is host work (planning the window,
looking chunks up, checking and packing each batch's box copies, events and hand-overs) and
one assemble launch a batch, which the device runs asynchronously in microseconds. On the
emulated device (``benchmarks.fuzz.emulated_gpu``: NumPy buffers, the NumPy models of the
kernels) that host work is the same code; only the launch is a NumPy model that copies every
box on the host. This benchmark checks one pass with those copies against the ground truth,
then times ``--passes`` passes with the emulated launch reduced to its argument checks (what is
left is the host's share), and prints the median time per pass and the crops/s it allows.
``--phases`` adds where one more such pass spent its time (``gpuzarr.backends.cuda.phases``).

It is not a GPU measurement: on a GPU, CuPy's upload and launch of each batch's block (a few
tens of microseconds) and the host's own speed come on top, and the pass also waits for the
device whenever the host is faster than it. It measures what changes to the loader's host code
do, on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .datasets import DATASETS, DataDir, chunks_for
from .loader_sweep import checked_pass, recorded_pass
from .loader_workload import LOADER_BATCH
from .workloads import random_boxes

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).resolve().parent
CROP = 64
DATASET = "sharded-zstd"


@contextlib.contextmanager
def launches_checked_only() -> Iterator[None]:
    """Within the block, the emulated device's box-copy launches do the host work of
    ``CudaDevice.assemble_boxes`` (checks, each box's source pointer, the kernel and its grid)
    short of CuPy's upload and launch, and copy nothing; and its new buffers are not filled."""
    from gpuzarr.backends.cuda import kernels
    from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice

    def checks_only(self: CpuEmulatedDevice, out: Any, sources: Any, copies: Any) -> None:
        self.calls.append(("assemble_chunks", copies.nboxes))
        copies.check_output(out)
        if any(not s.flags.c_contiguous for s in sources):
            raise ValueError("assemble: every source must be C-contiguous")
        copies.check_sources([int(s.nbytes) for s in sources])
        # Each source's address stands in by id(): CuPy's ``data.ptr`` is two attribute reads,
        # NumPy's ``__array_interface__`` builds a dict for each array.
        copies.set_pointers([id(s) for s in sources])
        kernels.assemble_kernel_and_grid(copies.table("extents"), copies.ndim)

    def empty_from_a_pool(self: CpuEmulatedDevice, shape: tuple[int, ...], dtype: Any) -> Any:
        # The emulated device fills new buffers with a poison byte (16 MiB for a batch); CuPy
        # hands them out of its memory pool, untouched.
        return np.empty(shape, dtype)

    saved = CpuEmulatedDevice.assemble_boxes, CpuEmulatedDevice.empty
    CpuEmulatedDevice.assemble_boxes = checks_only  # type: ignore[method-assign]
    CpuEmulatedDevice.empty = empty_from_a_pool  # type: ignore[method-assign]
    try:
        yield
    finally:
        CpuEmulatedDevice.assemble_boxes, CpuEmulatedDevice.empty = saved  # type: ignore[method-assign]


def measure(
    array: Any, truth: np.ndarray[Any, Any], sels: list[tuple[slice, ...]], passes: int
) -> tuple[Any, list[float]]:
    """(the loader, seconds of each timed pass): one pass checked against ``truth`` (which also
    fills the device cache), then ``passes`` passes with launches that only check."""
    from gpuzarr.loader import CropLoader

    crops = [(0, tuple(s.start for s in sel)) for sel in sels]
    loader = CropLoader(
        array, (CROP,) * truth.ndim, LOADER_BATCH, sampler=crops, shuffle=False, device="cuda:0", output="cupy",
        prefetch=2, device_cache_bytes=2 * truth.nbytes,
    )  # fmt: skip
    checked_pass(loader, truth, sels)
    times = []
    with launches_checked_only():
        for _ in range(passes):
            t0 = time.perf_counter()
            for _batch in loader:
                pass
            times.append(time.perf_counter() - t0)
    return loader, times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loader_host_share", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--size-mib", type=float, default=64)
    p.add_argument("--crops", type=int, default=256)
    p.add_argument("--passes", type=int, default=20)
    p.add_argument("--phases", action="store_true", help="after the figures, where one more pass went")
    args = p.parse_args(argv)

    import gpuzarr

    from .fuzz import emulated_gpu

    data = DataDir(args.data_dir, args.size_mib, log=lambda message: print(message, file=sys.stderr))
    spec = next(s for s in DATASETS if s.name == DATASET)
    path = data.dataset(spec)
    truth = data.truth(spec.kind)
    sels = random_boxes(truth.shape, (CROP,) * truth.ndim, chunks_for(spec), args.crops, seed=3)
    with emulated_gpu():
        array = gpuzarr.open(str(path), device="cuda:0")
        loader, times = measure(array, truth, sels, args.passes)
        table = None
        if args.phases:
            with launches_checked_only():
                table = recorded_pass(loader)
        loader.close()
    median = statistics.median(times)
    print(f"{DATASET}, {args.crops} crops of {CROP}^3 in batches of {LOADER_BATCH}, device cache, emulated device")
    print(f"host share of a pass: median {median * 1e3:.2f} ms (min {min(times) * 1e3:.2f}) over {len(times)} passes")
    print(f"crops/s the host allows: {args.crops / median:,.0f}")
    if table is not None:
        print()
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
