"""Repeated random crops of a sharded array from a slow store, with and without gpuzarr's host
cache: how many requests reach the store, and how long the crops take.

    python -m benchmarks.cache_workload [--latency-ms 20] [--epochs 3] [--crops 64]

The store is a MemoryStore behind :class:`LatencyStore`, which sleeps ``--latency-ms`` per
request (an object store's time to first byte; a ranged ``get_ranges`` of several ranges counts
one request per range, issued one after the other). A loader-like run draws ``--crops`` random
unaligned 48^3 crops of a 256^3 uint16 volume (shards 128^3 of inner chunks 32^3, zstd) and
reads them ``--epochs`` times, as a training loop's epochs would. Rows: the array on the slow
store (its per-array shard index cache only), and the same behind a ``CachingStore``.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import gpuzarr
from gpuzarr.store import CachingStore, MemoryStore
from gpuzarr.store.base import Buffer, ByteRange, Store

from .workloads import random_boxes

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

SHAPE = (256, 256, 256)
SHARDS = (128, 128, 128)
CHUNKS = (32, 32, 32)
CROP = (48, 48, 48)


class LatencyStore(Store):
    """``inner`` with ``latency`` seconds added to every read request, counting them."""

    def __init__(self, inner: Store, latency: float) -> None:
        super().__init__(read_only=True)
        self.inner = inner
        self.latency = latency
        self.requests = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def _count(self, n: int, nbytes: int) -> None:
        with self._lock:
            self.requests += n
            self.bytes += nbytes
        time.sleep(self.latency * n)

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        value = self.inner.get(key, byte_range)
        self._count(1, 0 if value is None else len(value))
        return value

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        values = self.inner.get_ranges(key, ranges)
        self._count(max(len(ranges), 1), 0 if values is None else sum(len(v) for v in values))
        return values

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    def erase(self, key: str) -> None:
        self._check_writable()


def make_data() -> tuple[MemoryStore, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(7)
    data = (rng.normal(1000, 30, SHAPE)).astype("<u2")
    store = MemoryStore()
    array = gpuzarr.create(
        store,
        shape=SHAPE,
        dtype="<u2",
        chunks=CHUNKS,
        shards=SHARDS,
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
        device="cpu",
    )
    array[...] = data
    return store, data


def run(args: argparse.Namespace) -> str:
    memory, data = make_data()
    sels = random_boxes(SHAPE, CROP, CHUNKS, args.crops, seed=11)
    lines = [
        f"{args.crops} random {CROP[0]}^3 crops x {args.epochs} epochs of a {SHAPE[0]}^3 uint16 array "
        f"(shards {SHARDS[0]}^3, inner chunks {CHUNKS[0]}^3, zstd), {args.latency_ms:g} ms per request",
        "",
        "| store | epoch | requests | MiB fetched | seconds | crops/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, cache_bytes in (("slow store", None), ("slow store + CachingStore(256 MiB)", 256 * 2**20)):
        slow = LatencyStore(memory, args.latency_ms / 1000)
        store: Store = slow if cache_bytes is None else CachingStore(slow, cache_bytes)
        array = gpuzarr.open(store, device="cpu")
        assert isinstance(array, gpuzarr.Array)
        for epoch in range(args.epochs):
            before, fetched = slow.requests, slow.bytes
            t0 = time.perf_counter()
            for sel in sels:
                got = array[sel]
                if epoch == 0 and not np.array_equal(got, data[sel]):
                    raise AssertionError(f"{label}: crop {sel} differs")
            seconds = time.perf_counter() - t0
            lines.append(
                f"| {label} | {epoch + 1} | {slow.requests - before} | {(slow.bytes - fetched) / 2**20:.1f} "
                f"| {seconds:.2f} | {len(sels) / seconds:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cache_workload", description=__doc__)
    p.add_argument("--latency-ms", type=float, default=20.0, help="added per request (default 20)")
    p.add_argument("--epochs", type=int, default=3, help="passes over the crops (default 3)")
    p.add_argument("--crops", type=int, default=64, help="crops per epoch (default 64)")
    print(run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
