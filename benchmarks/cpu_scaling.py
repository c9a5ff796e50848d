"""How batched crop reads scale with CPU threads: gpuzarr's ``read_batch`` beside TensorStore
(every read of a batch in flight), at 1, 2, 4, ... threads, on the loader's datasets.

    python -m benchmarks.cpu_scaling [--threads 1 2 4 8 16] [--batches 8] [--data-dir DIR]

Each thread count is one ``gpuzarr.config`` ``concurrency`` and one TensorStore context with
``data_copy_concurrency`` and ``file_io_concurrency`` limited to it. gpuzarr also runs in two
diagnostic variants, to tell where a read that does not scale loses its time:

* ``no-link-check``: the store follows links (``follow_symlinks=True``), which spares one system
  call per chunk (the ``/proc/self/fd`` check) and with it one release and re-take of the GIL;
* ``switch-0.5ms``: ``sys.setswitchinterval(0.0005)`` (CPython's default is 5 ms), so a thread
  that waits for the GIL behind another running Python gets it sooner.

If the variants gain much at many threads and little at one, the time goes to threads waiting
for the GIL around short system calls, not to decoding.

A last row per thread count, ``bare decode``, is the model itself without gpuzarr: every chunk
each batch touches (the same data, encoded with the array's own codecs), decoded whole by
numcodecs on that many Python threads with nothing else around it (no reads, no copies, no
planning). Compare how the rows grow with threads, not their sizes at one thread (gpuzarr
decodes only the part of a chunk a crop needs, where it can). Where ``bare decode`` keeps
growing and gpuzarr stops, gpuzarr's own Python per chunk is what does not scale; where both
stop together, decoding chunk by chunk on Python threads is the limit, and only decoding many
chunks per native call goes further. Reads are made from a thread of their
own, as the loader's producer makes them (numcodecs' Blosc would start c-blosc's own threads on
the main thread). Every batch is checked against the
ground truth once per configuration. The table gives crops/s (median of ``--repeats`` passes of
``--batches`` batches of 32), CPU seconds per batch (all threads) and gpuzarr ÷ TensorStore.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .datasets import DATASETS, DataDir, chunks_for
from .workloads import random_boxes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

BATCH = 32
VARIANTS = ("default", "no-link-check", "switch-0.5ms")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_scaling", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--threads", type=int, nargs="+", default=None, help="thread counts (default: 1, 2, 4, ... up to the CPUs)"
    )
    parser.add_argument("--batches", type=int, default=8, help=f"batches of {BATCH} crops per pass (default 8)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per configuration (default 3)")
    parser.add_argument("--crop", type=int, default=64, help="crop edge (default 64)")
    parser.add_argument("--size-mib", type=float, default=64, help="dataset size (default 64, as the loader workload)")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gpuzarr-bench-data-64"))
    parser.add_argument("--datasets", nargs="+", default=["v2-blosc-lz4", "sharded-zstd"])
    return parser.parse_args(argv)


def default_threads() -> list[int]:
    from gpuzarr import config

    cpus = config.get("concurrency")
    counts, n = [], 1
    while n < cpus:
        counts.append(n)
        n *= 2
    return [*counts, cpus]


@contextlib.contextmanager
def gpuzarr_variant(array: Any, variant: str) -> Iterator[None]:
    """``array`` read under ``variant`` (see the module's docstring)."""
    interval = sys.getswitchinterval()
    follow = array.store.follow_symlinks
    try:
        if variant == "no-link-check":
            array.store.follow_symlinks = True
        elif variant == "switch-0.5ms":
            sys.setswitchinterval(0.0005)
        yield
    finally:
        array.store.follow_symlinks = follow
        sys.setswitchinterval(interval)


def gpuzarr_reader(
    path: Path, threads: int
) -> tuple[Any, Callable[[list[tuple[slice, ...]], np.ndarray[Any, Any]], Any]]:
    import gpuzarr

    array = gpuzarr.open(str(path), device="cpu")

    def read(boxes: list[tuple[slice, ...]], out: np.ndarray[Any, Any]) -> Any:
        with gpuzarr.config.set(concurrency=threads):
            return array.read_batch(boxes, out=out)

    return array, read


def tensorstore_reader(
    path: Path, zarr_format: int, threads: int
) -> Callable[[list[tuple[slice, ...]], np.ndarray[Any, Any]], Any]:
    import tensorstore as ts

    context = ts.Context({"data_copy_concurrency": {"limit": threads}, "file_io_concurrency": {"limit": threads}})
    spec = {"driver": "zarr3" if zarr_format == 3 else "zarr", "kvstore": {"driver": "file", "path": str(path)}}
    array = ts.open(spec, read=True, context=context).result()

    def read(boxes: list[tuple[slice, ...]], out: np.ndarray[Any, Any]) -> Any:
        futures = [array[box].read() for box in boxes]  # all in flight at once
        for i, future in enumerate(futures):
            out[i] = future.result()
        return out

    return read


def bare_decoder(
    array: Any, batches: list[list[tuple[slice, ...]]], truth: np.ndarray[Any, Any], pool: ThreadPoolExecutor
) -> Callable[[list[tuple[slice, ...]], np.ndarray[Any, Any]], Any]:
    """A reader that, for each batch, only decodes the chunks the batch touches (see the module's
    docstring), with numcodecs' decoder of the array's compressor, on ``pool``'s threads."""
    import threading

    from gpuzarr.plan.selection import plan_selection

    layout = array.layout
    pipeline = layout.chunk_pipeline
    (codec,) = pipeline.bytes_to_bytes  # the loader's datasets: bytes + one compressor
    chunk_shape = pipeline.spec.shape
    frames: dict[tuple[int, ...], bytes] = {}
    per_batch: dict[int, list[bytes]] = {}
    for boxes in batches:
        coords = {p.chunk_coords for box in boxes for p in plan_selection(box, array._dims()).projections}
        for c in coords:
            if c not in frames:
                region = tuple(slice(i * n, (i + 1) * n) for i, n in zip(c, chunk_shape, strict=True))
                chunk = np.zeros(chunk_shape, truth.dtype)
                part = truth[region]
                chunk[tuple(slice(0, n) for n in part.shape)] = part
                frames[c] = bytes(pipeline.encode(chunk))
        per_batch[id(boxes)] = [frames[c] for c in sorted(coords)]
    local = threading.local()
    nbytes = pipeline.spec.nbytes

    def decode(frame: bytes) -> None:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = np.empty(nbytes, np.uint8)
        codec._impl.decode(frame, scratch)

    checked: set[int] = set()

    def read(boxes: list[tuple[slice, ...]], out: np.ndarray[Any, Any]) -> Any:
        list(pool.map(decode, per_batch[id(boxes)]))
        if id(boxes) not in checked:  # the first, checked pass: the crops themselves, untimed after
            checked.add(id(boxes))
            for i, box in enumerate(boxes):
                out[i] = truth[box]
        return out

    return read


def timed_passes(
    read: Callable[[list[tuple[slice, ...]], np.ndarray[Any, Any]], Any],
    batches: list[list[tuple[slice, ...]]],
    out: np.ndarray[Any, Any],
    truth: np.ndarray[Any, Any],
    repeats: int,
) -> tuple[float, float]:
    """(median seconds per pass, median CPU seconds per batch); the first pass is checked."""
    with ThreadPoolExecutor(1, thread_name_prefix="reader") as reader:
        return _timed_passes(lambda boxes: reader.submit(read, boxes, out).result(), batches, out, truth, repeats)


def _timed_passes(
    read: Callable[[list[tuple[slice, ...]]], Any],
    batches: list[list[tuple[slice, ...]]],
    out: np.ndarray[Any, Any],
    truth: np.ndarray[Any, Any],
    repeats: int,
) -> tuple[float, float]:
    for boxes in batches:
        read(boxes)
        for i, box in enumerate(boxes):
            if not np.array_equal(out[i], truth[box]):
                raise AssertionError(f"crop {box} differs from the ground truth")
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for boxes in batches:
            read(boxes)
        walls.append(time.perf_counter() - t0)
        cpus.append((time.process_time() - c0) / len(batches))
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = args.threads or default_threads()
    data = DataDir(args.data_dir, args.size_mib)
    specs = {spec.name: spec for spec in DATASETS}
    print(f"# CPU scaling of batched {args.crop}^3 crops (batches of {BATCH}, {args.batches} per pass)")
    print("| dataset | threads | impl | crops/s | CPU s per batch | ÷ TensorStore |")
    print("|---|---|---|---|---|---|")
    for name in args.datasets:
        spec = specs[name]
        path = data.dataset(spec)
        truth = data.truth(spec.kind)
        crop = (args.crop,) * truth.ndim
        boxes = random_boxes(truth.shape, crop, chunks_for(spec), BATCH * args.batches, seed=5)
        batches = [boxes[i : i + BATCH] for i in range(0, len(boxes), BATCH)]
        out = np.empty((BATCH, *crop), truth.dtype)
        ncrops = len(boxes)
        for n in threads:
            ts_wall, ts_cpu = timed_passes(
                tensorstore_reader(path, spec.zarr_format, n), batches, out, truth, args.repeats
            )
            print(f"| {name} | {n} | tensorstore | {ncrops / ts_wall:.0f} | {ts_cpu:.4f} | |")
            array, read = gpuzarr_reader(path, n)
            for variant in VARIANTS:
                with gpuzarr_variant(array, variant):
                    wall, cpu = timed_passes(read, batches, out, truth, args.repeats)
                print(f"| {name} | {n} | gpuzarr {variant} | {ncrops / wall:.0f} | {cpu:.4f} | {ts_wall / wall:.2f} |")
            with ThreadPoolExecutor(n, thread_name_prefix="bare") as pool:
                wall, cpu = timed_passes(bare_decoder(array, batches, truth, pool), batches, out, truth, args.repeats)
            print(f"| {name} | {n} | bare decode | {ncrops / wall:.0f} | {cpu:.4f} | {ts_wall / wall:.2f} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
