"""``gpuzarr demo``: write a sample sharded zstd volume, read it back, verify it, report speed."""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .options import positive_int

#: The demo's layout: the chunk and shard edges a 3-D imaging volume commonly uses.
CHUNK_EDGE = 64
SHARD_EDGE = 256
#: Where the crop starts (clipped to the volume) and its edge (at most the volume's).
CROP_ORIGIN = (10, 100, 33)

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="write, read back and verify a sample volume; print throughput",
        description=f"Write a sample uint16 volume ({CHUNK_EDGE}^3 chunks in {SHARD_EDGE}^3 shards, zstd "
        "level 3), read it back whole and as a crop (64^3, or the whole volume when smaller), check both "
        "against the data written, and print sizes and speeds.",
    )
    parser.add_argument("--size", type=positive_int, default=256, help="edge length of the cubic volume (default 256)")
    parser.add_argument("--device", default="auto", help="auto | cpu | gpu | cuda:N (default auto)")
    parser.add_argument("--keep", metavar="DIR", help="write into DIR and keep it")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return demo(args.size, args.device, args.keep)


def sample_volume(shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """A smooth field plus sensor noise, quantised to uint16 like a 12-bit camera (values about
    400..3600): it compresses like real imaging data, neither zeros nor random bytes."""
    rng = np.random.default_rng(seed)
    axes = np.meshgrid(*(np.linspace(0, 3 * np.pi, n, dtype=np.float32) for n in shape), indexing="ij", sparse=True)
    field = sum(np.sin(a * (1 + 0.3 * i)) for i, a in enumerate(axes)) / len(shape)
    noise = rng.normal(0, 6, size=shape).astype(np.float32)
    volume: np.ndarray[Any, Any] = (2000 + 1600 * field + noise).clip(0, 4095).astype(np.uint16)
    return volume


def crop_box(size: int) -> tuple[slice, ...]:
    """The demo's crop of a cubic volume of edge ``size``: 64^3 (the volume's edge when smaller),
    starting at :data:`CROP_ORIGIN` moved back as far as needed to lie inside the volume."""
    edge = min(CHUNK_EDGE, size)
    return tuple(slice(start, start + edge) for start in (min(o, size - edge) for o in CROP_ORIGIN))


def layout_summary(shape: tuple[int, ...], chunks: tuple[int, ...], shards: tuple[int, ...] | None) -> str:
    """The chunk/shard layout as stored, and how many of each the volume spans."""

    def edge(box: tuple[int, ...]) -> str:
        return f"{box[0]}^{len(box)}" if len(set(box)) == 1 else "x".join(map(str, box))

    def count(box: tuple[int, ...]) -> int:
        return math.prod(-(-n // b) for n, b in zip(shape, box, strict=True))

    chunk_count = count(chunks)
    if shards is None:
        return f"chunks {edge(chunks)} ({chunk_count} chunk(s))"
    shard_count = count(shards)
    return f"chunks {edge(chunks)} in shards {edge(shards)} ({shard_count} shard(s) holding {chunk_count} chunk(s))"


def demo(size: int, device: str, keep: str | None) -> int:
    import gpuzarr
    from gpuzarr.backends.select import resolve_device

    # Before anything is written: "--device gpu" on a machine without one fails with the reason.
    resolve_device(device)
    shape = (size, size, size)
    data = sample_volume(shape)
    root = keep or tempfile.mkdtemp(prefix="gpuzarr-demo-")
    path = os.path.join(root, "volume.zarr")
    try:
        t0 = time.perf_counter()
        arr = gpuzarr.create(
            path, shape=shape, dtype="uint16", chunks=(CHUNK_EDGE,) * 3, shards=(SHARD_EDGE,) * 3,
            codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "zstd", "configuration": {"level": 3}}],
            dimension_names=["z", "y", "x"], attributes={"description": "gpuzarr demo volume"},
            overwrite=True, device=device,
        )
        arr[...] = data
        t_write = time.perf_counter() - t0
        stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        reopened = gpuzarr.open_array(path, mode="r", device=device)
        t0 = time.perf_counter()
        back = reopened[...]
        if reopened.device != "cpu":
            from gpuzarr.backends.cuda.runtime import synchronize

            synchronize()  # the read is queued on the current stream: time it to completion
        t_read = time.perf_counter() - t0
        host = back.get() if hasattr(back, "get") else back
        if not np.array_equal(host, data):
            print("MISMATCH: the array read back differs from what was written", file=sys.stderr)
            return 1
        box = crop_box(size)
        crop = reopened[box]
        crop = crop.get() if hasattr(crop, "get") else crop
        if not np.array_equal(crop, data[box]):
            print("MISMATCH in a partial read", file=sys.stderr)
            return 1
        mib = data.nbytes / 2**20
        print(f"gpuzarr {gpuzarr.__version__} demo: {path}")
        layout = layout_summary(shape, reopened.chunks, reopened.shards)
        print(f"  array   {shape} uint16, {layout}, zstd level 3, device {reopened.device}")
        print(f"  sizes   {mib:.1f} MiB decoded, {stored / 2**20:.1f} MiB stored (ratio {data.nbytes / stored:.2f})")
        print(f"  write   {t_write:.3f} s  {mib / t_write:8.1f} MiB/s")
        print(f"  read    {t_read:.3f} s  {mib / t_read:8.1f} MiB/s")
        crop_shape = "x".join(str(s.stop - s.start) for s in box)
        origin = ", ".join(str(s.start) for s in box)
        print(f"  verify  full read and a {crop_shape} crop at ({origin}) equal the source: OK")
        return 0
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
