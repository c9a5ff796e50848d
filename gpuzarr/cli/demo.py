"""``gpuzarr demo``: write a sample sharded zstd volume, read it back, verify it, report speed."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .options import positive_int

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="write, read back and verify a sample volume; print throughput",
        description="Write a sample uint16 volume (64^3 chunks in 256^3 shards, zstd level 3), read it "
        "back whole and as a crop, check both against the data written, and print sizes and speeds.",
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
            path, shape=shape, dtype="uint16", chunks=(64, 64, 64), shards=(256, 256, 256),
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
        crop = reopened[10:74, 100:164, 33:97]
        crop = crop.get() if hasattr(crop, "get") else crop
        if not np.array_equal(crop, data[10:74, 100:164, 33:97]):
            print("MISMATCH in a partial read", file=sys.stderr)
            return 1
        mib = data.nbytes / 2**20
        print(f"gpuzarr {gpuzarr.__version__} demo: {path}")
        print(f"  array   {shape} uint16, chunks 64^3 in shards 256^3, zstd level 3, device {reopened.device}")
        print(f"  sizes   {mib:.1f} MiB decoded, {stored / 2**20:.1f} MiB stored (ratio {data.nbytes / stored:.2f})")
        print(f"  write   {t_write:.3f} s  {mib / t_write:8.1f} MiB/s")
        print(f"  read    {t_read:.3f} s  {mib / t_read:8.1f} MiB/s")
        print("  verify  full read and a 64^3 crop equal the source: OK")
        return 0
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
