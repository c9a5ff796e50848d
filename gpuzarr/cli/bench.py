"""``gpuzarr bench PATH``: full-read and random-crop throughput of one array, on CPU and GPU.

Each measurement is the median of ``--repeats`` timed runs after one untimed run (which warms
the page cache and, on a GPU, compiles the kernels): warm-cache figures of this machine, for
comparing layouts and devices, not cold-storage figures. GPU reads are timed to completion (the
stream is synchronised). Crops are ``--crops`` boxes of ``--crop-shape`` at random origins read
as one batch (``Array.read_batch``, as the data loader reads them). The benchmarks/ directory of
the repository compares gpuzarr with other libraries; this command measures gpuzarr alone.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..copying.destination import for_rank
from ..copying.nodes import open_path
from ..core.array import Array
from ..errors import DeviceError, InvalidArgumentError
from ..metadata.limits import format_bytes
from ..store.shown import shown_url
from .options import add_storage_options, non_negative_int, positive_int, shape

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure read throughput of an array on CPU and GPU",
        description="Time full reads and batches of random crops of the array at PATH on the CPU and, "
        "when one is usable, the GPU; print GB/s and crops/s (medians, warm cache).",
    )
    parser.add_argument("path", metavar="PATH", help="an array (a path or store URL)")
    parser.add_argument(
        "--crops", type=non_negative_int, default=64, metavar="N", help="crops per batch (default 64; 0: none)"
    )
    parser.add_argument(
        "--crop-shape", type=shape, default=(64,), metavar="SHAPE",
        help="shape of each crop, e.g. 64,64,64; one number for every axis (default 64; clipped to the array)",
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=3, metavar="R", help="timed runs of each read (default 3)"
    )
    parser.add_argument(
        "--device", choices=("all", "cpu", "gpu"), default="all",
        help="all (default): the CPU, and the GPU when usable; gpu: fail when it is not",
    )
    parser.add_argument("--no-full-read", action="store_true", help="skip the full read (arrays larger than memory)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the crop origins (default 0)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document")
    add_storage_options(parser)
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class Row:
    """One device's results (seconds are medians); ``unavailable`` says why it was not measured."""

    device: str
    full_read_s: float | None = None
    full_read_gbps: float | None = None
    crops_s: float | None = None
    crops_gbps: float | None = None
    crops_per_s: float | None = None
    unavailable: str | None = None


def random_crops(
    array_shape: tuple[int, ...], crop: tuple[int, ...], n: int, seed: int
) -> list[tuple[slice, ...]]:
    """``n`` boxes of shape ``crop`` (clipped to the array) at uniformly random origins."""
    rng = np.random.default_rng(seed)
    boxes = []
    for _ in range(n):
        box = []
        for size, edge in zip(array_shape, crop, strict=True):
            edge = min(edge, size)
            origin = int(rng.integers(0, size - edge + 1))
            box.append(slice(origin, origin + edge))
        boxes.append(tuple(box))
    return boxes


def median_seconds(read: Callable[[], Any], finish: Callable[[], None], repeats: int) -> float:
    """The median time of ``repeats`` runs of ``read`` (each until ``finish`` returns), after an
    untimed one."""
    read()
    finish()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(args: argparse.Namespace) -> int:
    shown = shown_url(args.path)  # a URL's query or password is no part of the output
    with open_path(args.path, args.storage_options) as array:
        if not isinstance(array, Array):
            raise InvalidArgumentError(f"{shown} is a group; name one of its arrays (gpuzarr tree lists them)")
        wanted = for_rank(args.crop_shape, array.ndim, "--crop-shape", shown)
        crop = tuple(min(c, s) for c, s in zip(wanted, array.shape, strict=True))
        boxes = random_crops(array.shape, crop, args.crops, args.seed)
        rows = []
        if args.device in ("all", "cpu"):
            rows.append(measure(array, args, boxes))
        if args.device in ("all", "gpu"):
            rows.append(_gpu_row(array, args, boxes))
    if args.json:
        doc = {
            "path": shown, "shape": list(array.shape), "dtype": str(array.dtype), "nbytes": array.nbytes,
            "crops": len(boxes), "crop_shape": list(crop), "repeats": args.repeats, "rows": [asdict(r) for r in rows],
        }
        print(json.dumps(doc, indent=2))
    else:
        print(_table(args, array, crop, len(boxes), rows))
    return 0


def _gpu_row(array: Array, args: argparse.Namespace, boxes: list[tuple[slice, ...]]) -> Row:
    from ..backends.select import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None and args.device == "gpu":
        raise DeviceError(f"--device gpu: the GPU read path cannot run here: {reason}")
    if reason is not None:
        return Row("gpu", unavailable=f"no usable GPU: {reason}")
    try:
        return measure(Array(array.store, array.path, array.metadata, device="gpu"), args, boxes)
    except DeviceError as exc:  # a data type CuPy cannot hold
        if args.device == "gpu":
            raise
        return Row("gpu", unavailable=str(exc))


def measure(array: Array, args: argparse.Namespace, boxes: list[tuple[slice, ...]]) -> Row:
    """Full-read and crop timings of ``array``, read on its device."""
    finish: Callable[[], None] = lambda: None  # noqa: E731 - the CPU has nothing in flight
    if array.device != "cpu":
        from ..backends.cuda.runtime import synchronize

        finish = synchronize
    row: dict[str, Any] = {"device": array.device}
    if not args.no_full_read:
        seconds = median_seconds(lambda: array[...], finish, args.repeats)
        row.update(full_read_s=seconds, full_read_gbps=array.nbytes / seconds / 1e9)
    if boxes:
        nbytes = len(boxes) * math.prod(s.stop - s.start for s in boxes[0]) * array.dtype.itemsize
        seconds = median_seconds(lambda: array.read_batch(boxes), finish, args.repeats)
        row.update(crops_s=seconds, crops_gbps=nbytes / seconds / 1e9, crops_per_s=len(boxes) / seconds)
    return Row(**row)


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(args: argparse.Namespace, array: Array, crop: tuple[int, ...], crops: int, rows: list[Row]) -> str:
    shards = f", shards {array.shards}" if array.shards is not None else ""
    lines = [
        f"gpuzarr bench {shown_url(args.path)}: {array.shape} {array.dtype}, {format_bytes(array.nbytes)}; "
        f"chunks {array.chunks}{shards}",
        f"median of {args.repeats} warm runs; crops: {crops} random {crop} boxes in one read_batch; GB = 1e9 bytes",
        "",
        f"{'device':<10}{'full read GB/s':>16}{'crops GB/s':>14}{'crops/s':>12}",
    ]
    for row in rows:
        if row.unavailable is not None:
            lines.append(f"{row.device:<10}not measured: {row.unavailable}")
        else:
            lines.append(
                f"{row.device:<10}{_cell(row.full_read_gbps, 3):>16}{_cell(row.crops_gbps, 3):>14}"
                f"{_cell(row.crops_per_s, 1):>12}"
            )
    return "\n".join(lines)
