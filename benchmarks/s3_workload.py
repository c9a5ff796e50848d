"""The ``s3`` workload (``python -m benchmarks.run --only s3``; not part of the default run):
reads from a loopback S3 server (moto, :mod:`benchmarks.s3_server`) by gpuzarr, zarr-python 3
(``zarr.storage.ObjectStore`` over obstore's ``S3Store``) and TensorStore (its ``s3`` kvstore
with the same endpoint, credentials from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``), same
data, same run.

Datasets: ``zstd``, ``sharded-zstd`` and ``v2-blosc-lz4`` of :mod:`benchmarks.datasets`, at
``--size-mib`` (64 MiB unless given: moto serves a few hundred MB/s at best), generated locally
and uploaded once per run. Workloads, each checked against the ground truth:

* ``full-read``: the whole array in one read (GB/s of decoded bytes);
* ``crops``: ``--crops`` random unaligned 64^3 crops (at most 64), one after the other, on a
  fresh handle each timed call (crops/s);
* ``crops-repeat``: the same crops again on a handle that has read them once, as a training
  loader's second epoch sees them: ``gpuzarr+cache`` keeps fetched bytes in a
  :class:`gpuzarr.store.CachingStore` (``storage_options={"cache_bytes": ...}``).

gpuzarr opens ``s3://bucket/name`` with ``storage_options`` (obstore's S3 keys plus
``cache_bytes``); where this build cannot, its rows say why ("unavailable: ...") instead of
failing the run. Ratios are gpuzarr's value over the best of zarr-python and TensorStore.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .datasets import DATASETS, DataDir, DatasetSpec, chunks_for
from .measure import log
from .s3_server import S3Server
from .workloads import random_boxes

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path

S3_DATASETS = ("zstd", "sharded-zstd", "v2-blosc-lz4")
S3_DEFAULT_MIB = 64
MAX_CROPS = 64
CROP = 64
#: the budget of gpuzarr+cache's CachingStore
CACHE_BYTES = 1 << 30
PEERS = ("zarr-python", "tensorstore")


@dataclass
class S3Impl:
    """How one library opens a dataset in the bucket and reads from it."""

    name: str
    open: Callable[[str], Any]  # dataset path in the bucket -> handle
    read: Callable[[Any, Any], np.ndarray[Any, Any]]  # (handle, selection) -> NumPy array


def upload(server: S3Server, local: Path, name: str) -> int:
    """Put every file of the local hierarchy ``local`` under ``name/`` in the bucket."""
    import obstore

    store = server.obstore_store()
    files = [p for p in local.rglob("*") if p.is_file()]

    def put(path: Path) -> int:
        data = path.read_bytes()
        obstore.put(store, f"{name}/{path.relative_to(local).as_posix()}", data)
        return len(data)

    with ThreadPoolExecutor(16) as pool:
        return sum(pool.map(put, files))


def implementations(server: S3Server) -> list[S3Impl]:
    """gpuzarr (without and with its host cache), zarr-python and TensorStore."""
    import zarr
    from zarr.storage import ObjectStore

    def gpuzarr_open(cache_bytes: int | None) -> Callable[[str], Any]:
        def open_(path: str) -> Any:
            import gpuzarr

            options: dict[str, Any] = server.storage_options()
            if cache_bytes is not None:
                options["cache_bytes"] = cache_bytes
            return gpuzarr.open(f"s3://{server.bucket}/{path}", storage_options=options, device="cpu")

        return open_

    def zarr_open(path: str) -> Any:
        return zarr.open_array(ObjectStore(server.obstore_store(), read_only=True), path=path, mode="r")

    def ts_open(path: str) -> Any:
        import tensorstore as ts

        driver = "zarr" if zarr_format_of(path) == 2 else "zarr3"
        return ts.open({"driver": driver, "kvstore": server.tensorstore_kvstore(path)}, read=True).result()

    return [
        S3Impl("gpuzarr", gpuzarr_open(None), lambda h, sel: np.asarray(h[sel])),
        S3Impl("gpuzarr+cache", gpuzarr_open(CACHE_BYTES), lambda h, sel: np.asarray(h[sel])),
        S3Impl("zarr-python", zarr_open, lambda h, sel: np.asarray(h[sel])),
        S3Impl("tensorstore", ts_open, lambda h, sel: h[sel].read().result()),
    ]


def zarr_format_of(path: str) -> int:
    return 2 if path.startswith("v2-") else 3


def unavailable(impl: S3Impl, path: str) -> str | None:
    """Why ``impl`` cannot open ``path`` (None: it can)."""
    try:
        impl.open(path)
    except Exception as exc:  # any failure: reported as the impl's row, the run goes on
        return f"{type(exc).__name__}: {exc}"
    return None


def timed(func: Callable[[], Any], repeats: int, fresh: Callable[[], Any] | None = None) -> list[float]:
    times = []
    for _ in range(repeats):
        if fresh is not None:
            fresh()
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return times


def bench_impl(
    impl: S3Impl, path: str, truth: np.ndarray[Any, Any], sels: list[tuple[slice, ...]], repeats: int
) -> tuple[str, list[float], list[float], list[float]]:
    """Status (checked against ``truth`` first, untimed), then the times of full reads, of the
    crops on fresh handles and of the crops again on a handle that read them once."""
    handle = impl.open(path)
    status = "ok"
    if not np.array_equal(impl.read(handle, ...), truth):
        status = "MISMATCH"
    if any(not np.array_equal(impl.read(handle, sel), truth[sel]) for sel in sels):
        status = "MISMATCH"
    full = timed(lambda: impl.read(impl.open(path), ...), repeats)
    holder: dict[str, Any] = {}

    def fresh() -> None:
        holder["h"] = impl.open(path)

    def crops() -> None:
        for sel in sels:
            impl.read(holder["h"], sel)

    cold = timed(crops, repeats, fresh)
    fresh()
    crops()  # the first epoch, untimed
    warm = timed(crops, repeats)
    return status, full, cold, warm


def bench_dataset(
    spec: DatasetSpec, truth: np.ndarray[Any, Any], impls: list[S3Impl], args: argparse.Namespace
) -> list[dict[str, Any]]:
    path = f"{spec.name}.zarr"
    sels = random_boxes(truth.shape, (CROP,) * truth.ndim, chunks_for(spec), min(args.crops, MAX_CROPS), seed=5)
    crop_nbytes = sum(int(np.prod([s.stop - s.start for s in sel])) for sel in sels) * truth.itemsize
    records: list[dict[str, Any]] = []
    for impl in impls:
        note = unavailable(impl, path)
        base = {"dataset": spec.name, "impl": impl.name}
        if note is not None:
            log(f"  {impl.name}: unavailable: {note}")
            records.append({**base, "workload": "all", "status": "unavailable", "note": note})
            continue
        status, full, cold, warm = bench_impl(impl, path, truth, sels, args.repeats)
        for wl, times, nbytes in (
            ("full-read", full, truth.nbytes),
            ("crops", cold, crop_nbytes),
            ("crops-repeat", warm, crop_nbytes),
        ):
            median = float(np.median(times))
            records.append(
                {
                    **base,
                    "workload": wl,
                    "status": status,
                    "median_s": median,
                    "best_s": min(times),
                    "gb_s": nbytes / median / 1e9,
                    "crops_s": None if wl == "full-read" else len(sels) / median,
                }
            )
            log(f"  {impl.name:14s} {wl:13s} {nbytes / median / 1e9:7.3f} GB/s  median {median:.3f} s  {status}")
    return records


def table(records: list[dict[str, Any]]) -> str:
    """A markdown table: value per impl and gpuzarr's ratios over the best peer."""
    lines = [
        "| dataset | workload | impl | GB/s | crops/s | vs best peer |",
        "|---|---|---|---:|---:|---:|",
    ]
    for rec in records:
        if rec["status"] == "unavailable":
            lines.append(f"| {rec['dataset']} | {rec['workload']} | {rec['impl']} | unavailable: {rec['note']} | | |")
            continue
        peers = [
            r["gb_s"]
            for r in records
            if r["dataset"] == rec["dataset"]
            and r["workload"] == rec["workload"]
            and r["impl"] in PEERS
            and r["status"] == "ok"
        ]
        ratio = f"{rec['gb_s'] / max(peers):.2f}x" if peers and rec["impl"].startswith("gpuzarr") else ""
        crops = "" if rec["crops_s"] is None else f"{rec['crops_s']:.1f}"
        status = "" if rec["status"] == "ok" else f" {rec['status']}"
        lines.append(
            f"| {rec['dataset']} | {rec['workload']} | {rec['impl']} | {rec['gb_s']:.3f}{status} | {crops} | {ratio} |"
        )
    return "\n".join(lines)


def run_s3(args: argparse.Namespace, argv: list[str]) -> int:
    """The s3 benchmark: start the server, upload, measure, print the table."""
    size_mib = args.size_mib if any(a.startswith("--size-mib") for a in argv) else S3_DEFAULT_MIB
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    os.environ.update(S3Server.environ())
    wanted = [n for n in args.only if n in S3_DATASETS] or list(S3_DATASETS)
    data = DataDir(args.data_dir / "s3", size_mib, log=log)
    server = S3Server.start()
    records: list[dict[str, Any]] = []
    try:
        log(f"s3: moto at {server.endpoint}, datasets of {size_mib:g} MiB")
        impls = implementations(server)
        only_impls = [n for n in args.only if n in {i.name for i in impls}]
        impls = [i for i in impls if not only_impls or i.name in only_impls]
        for spec in (d for d in DATASETS if d.name in wanted):
            local = data.dataset(spec)
            t0 = time.perf_counter()
            nbytes = upload(server, local, f"{spec.name}.zarr")
            log(f"dataset {spec.name}: uploaded {nbytes / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s")
            records += bench_dataset(spec, data.truth(spec.kind), impls, args)
    finally:
        server.stop()
    print(table(records))
    return 1 if any(r["status"] == "MISMATCH" for r in records) else 0


__all__ = ["run_s3"]
