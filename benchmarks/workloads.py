"""The workloads and how one is run: random selections, the timed-and-checked loop over the
implementations (``run_workload``), every workload of one dataset (``bench_dataset``, ``bench_write``)
and its raw ceilings (``bench_ceilings``). Each returns result records for benchmarks/report.py."""

from __future__ import annotations

import gc
import shutil
import statistics
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .ceilings import measure_ceilings
from .datasets import DataDir, DatasetSpec, chunks_for, fresh_copy_of_metadata, stored_bytes
from .impls import Impl, SkipImpl
from .measure import PeakRSS, log, summarise

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from pathlib import Path

WORKLOADS = ["full-read", "crops-each", "crops-batch", "shard-partial", "full-write"]
#: run only when named with --only
OPTIONAL_WORKLOADS = ["loader", "s3"]
WORKLOAD_HELP = {
    "loader": "epochs of random 64^3 / 128^3 crops in batches of 32 as torch tensors (benchmarks/loader_workload.py)",
    "s3": "full reads and random crops from a loopback S3 server (moto) beside zarr-python and TensorStore "
    "(benchmarks/s3_workload.py)",
    "full-read": "the whole array in one read",
    "crops-each": "N random unaligned crops, one read after the other",
    "crops-batch": "the same N crops as one batch (gpuzarr read_batch; TensorStore all futures at once; "
    "zarr-python a loop)",
    "shard-partial": "B random unaligned 128^3 boxes of the sharded dataset, one after the other",
    "full-write": "the whole array written into a fresh array with the same metadata and codecs",
}


# -- selections ---------------------------------------------------------------------------------------


def random_boxes(
    shape: Sequence[int], box: Sequence[int], chunks: Sequence[int], n: int, seed: int
) -> list[tuple[slice, ...]]:
    """``n`` boxes of shape ``box`` (clamped to the array) at random origins, nudged off chunk
    boundaries where possible so that reads are unaligned."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        sel = []
        for dim, b, c in zip(shape, box, chunks):
            b = min(b, dim)
            o = int(rng.integers(0, dim - b + 1))
            if o % c == 0 and o + 1 + b <= dim and c > 1:
                o += 1
            sel.append(slice(o, o + b))
        out.append(tuple(sel))
    return out


def crop_shape(spec: DatasetSpec) -> tuple[int, ...]:
    return (64, 64, 64) if spec.kind == "volume" else (8, 128, 128)


# -- running one workload -------------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    nbytes: int  # decoded bytes moved per call
    items: int  # crops / boxes / arrays per call
    call: Callable[[Impl, Any], Any]
    check: Callable[[Impl, Any], str | None]  # None when equal, else what differs
    prepare: Callable[[Impl], Any] | None = None  # before each call, untimed: returns the handle
    check_every_run: bool = True


def _first_difference(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if np.array_equal(got, want):
        return None
    diff = got != want
    where = tuple(int(i[0]) for i in np.nonzero(diff))
    first = f"first at {where}: {got[where]!r} != {want[where]!r}"
    return f"{int(diff.sum())} of {diff.size} elements differ ({first})"


def check_array(want: np.ndarray[Any, Any]) -> Callable[[Impl, Any], str | None]:
    def check(impl: Impl, got: Any) -> str | None:
        return _first_difference(impl.to_numpy(got), want)

    return check


def check_crops(truth: np.ndarray[Any, Any], sels: list[tuple[slice, ...]]) -> Callable[[Impl, Any], str | None]:
    def check(impl: Impl, got: Any) -> str | None:
        if len(got) != len(sels):
            return f"{len(got)} results for {len(sels)} selections"
        for i, (g, s) in enumerate(zip(got, sels)):
            d = _first_difference(impl.to_numpy(g), truth[s])
            if d is not None:
                return f"crop {i} {s}: {d}"
        return None

    return check


def _new_record(wl: Workload, impl: Impl, base: dict[str, Any]) -> dict[str, Any]:
    return {
        **base,
        "workload": wl.name,
        "impl": impl.name,
        "device": impl.device,
        "nbytes": wl.nbytes,
        "items": wl.items,
        "times_s": [],
        "cpu_s": [],
        "rss_delta_bytes": [],
        "status": "ok",
        "note": "",
    }


def _run_once(
    wl: Workload, impl: Impl, handles: dict[str, Any], rec: dict[str, Any], *, timed: bool, check: bool
) -> None:
    """One call of the workload: timed into ``rec`` if ``timed``, its result checked if ``check``."""
    h = wl.prepare(impl) if wl.prepare is not None else handles[impl.name]
    gc.collect()
    with PeakRSS() as mem:
        c0, t0 = time.process_time(), time.perf_counter()
        with impl.context():
            result = wl.call(impl, h)
            impl.finish()
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - c0
    if timed:
        rec["times_s"].append(elapsed)
        rec["cpu_s"].append(cpu)
        if mem.delta is not None:
            rec["rss_delta_bytes"].append(mem.delta)
    if check:
        problem = wl.check(impl, result)
        if problem is not None and rec["status"] == "ok":
            rec["status"] = "MISMATCH"
            rec["note"] = problem
    del result


def _run_guarded(
    wl: Workload, impl: Impl, handles: dict[str, Any], rec: dict[str, Any], *, timed: bool, check: bool
) -> bool:
    """``_run_once``, with a skip or an exception recorded in ``rec``; False when it did not complete."""
    try:
        _run_once(wl, impl, handles, rec, timed=timed, check=check)
    except SkipImpl as exc:
        rec.update(status="skipped", note=str(exc))
        return False
    except Exception as exc:
        rec.update(status="error", note=f"{type(exc).__name__}: {exc}")
        log(f"    {impl.name}: {type(exc).__name__}: {exc}")
        log("".join(traceback.format_exception(exc)[-3:]).rstrip())
        return False
    return True


def _finish_record(wl: Workload, rec: dict[str, Any]) -> None:
    """Summarise the timed runs into ``rec`` (an error if none completed), and log its line."""
    if rec["times_s"] and rec["status"] in ("ok", "MISMATCH"):
        rec.update(summarise(rec["times_s"], wl.nbytes, wl.items))
        rec["cpu_s_median"] = statistics.median(rec["cpu_s"])
        if rec["rss_delta_bytes"]:
            rec["rss_delta_peak_bytes"] = max(rec["rss_delta_bytes"])
    elif rec["status"] == "ok":
        rec["status"] = "error"
        rec["note"] = rec["note"] or "no timed run completed"
    if rec.get("gbps_median") is not None:
        log(
            f"    {wl.name:13s} {rec['impl']:18s} {rec['gbps_median']:7.3f} GB/s "
            f"{rec['items_per_s_median']:9.1f} /s  {rec['status']}"
        )
    else:
        log(f"    {wl.name:13s} {rec['impl']:18s} {rec['status']}: {rec['note'][:100]}")


def run_workload(
    wl: Workload,
    impls: list[Impl],
    handles: dict[str, Any],
    repeats: int,
    base: dict[str, Any],
) -> list[dict[str, Any]]:
    """Warm up every implementation once, then ``repeats`` rounds in rotating order."""
    records: dict[str, dict[str, Any]] = {}
    active: list[Impl] = []
    for impl in impls:
        rec = _new_record(wl, impl, base)
        records[impl.name] = rec
        h = handles.get(impl.name)
        if isinstance(h, BaseException):
            rec["status"] = "skipped" if isinstance(h, SkipImpl) else "error"
            rec["note"] = str(h)
        else:
            active.append(impl)

    def warm_up(impl: Impl) -> bool:
        return _run_guarded(wl, impl, handles, records[impl.name], timed=False, check=True)

    active = [impl for impl in active if warm_up(impl)]
    for r in range(repeats):
        k = r % len(active) if active else 0
        for impl in active[k:] + active[:k]:
            if records[impl.name]["status"] in ("ok", "MISMATCH"):
                _run_guarded(wl, impl, handles, records[impl.name], timed=True, check=wl.check_every_run)

    out = []
    for impl in impls:
        rec = records[impl.name]
        _finish_record(wl, rec)
        out.append(rec)
    return out


# -- running one dataset ---------------------------------------------------------------------------------


def bench_dataset(
    spec: DatasetSpec,
    data: DataDir,
    impls: list[Impl],
    workloads: list[str],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    path = data.dataset(spec)
    truth = data.truth(spec.kind)
    base = {"dataset": spec.name, "shape": list(truth.shape), "dtype": str(truth.dtype)}
    results: list[dict[str, Any]] = []
    read_workloads = [w for w in workloads if w != "full-write"]
    if not spec.sharded and "shard-partial" in read_workloads:
        read_workloads.remove("shard-partial")
    loader = "loader" in read_workloads
    if loader:
        read_workloads.remove("loader")
        from .loader_workload import LOADER_DATASETS

        loader = spec.name in LOADER_DATASETS

    handles: dict[str, Any] = {}
    if read_workloads or loader:
        for impl in impls:
            try:
                with impl.context():
                    handles[impl.name] = impl.open(path, spec.zarr_format)
            except Exception as exc:
                handles[impl.name] = exc

    chunks = chunks_for(spec)
    crops = random_boxes(truth.shape, crop_shape(spec), chunks, args.crops, seed=1)
    crop_bytes = sum(int(np.prod([s.stop - s.start for s in c])) for c in crops) * truth.itemsize
    for name in read_workloads:
        if name == "full-read":
            wl = Workload(name, truth.nbytes, 1, lambda i, h: i.read_full(h), check_array(truth))
        elif name == "crops-each":
            wl = Workload(name, crop_bytes, len(crops), lambda i, h: i.read_each(h, crops), check_crops(truth, crops))
        elif name == "crops-batch":
            wl = Workload(name, crop_bytes, len(crops), lambda i, h: i.read_batch(h, crops), check_crops(truth, crops))
        else:  # shard-partial
            box = tuple(min(128, max(d - 16, 1)) for d in truth.shape)
            boxes = random_boxes(truth.shape, box, chunks, args.boxes, seed=2)
            nb = sum(int(np.prod([s.stop - s.start for s in b])) for b in boxes) * truth.itemsize
            wl = Workload(name, nb, len(boxes), lambda i, h, b=boxes: i.read_each(h, b), check_crops(truth, boxes))
        log(f"  {name}: {WORKLOAD_HELP[name]}")
        results += run_workload(wl, impls, handles, args.repeats, base)
    if loader:
        from .loader_workload import loader_workloads

        log(f"  loader: {WORKLOAD_HELP['loader']}")
        for wl in loader_workloads(truth, chunks, args.crops):
            results += run_workload(wl, impls, handles, args.repeats, base)
    handles.clear()
    gc.collect()

    if "full-write" in workloads:
        results += bench_write(spec, path, truth, impls, data.root / "scratch", args, base)
    return results


def bench_write(
    spec: DatasetSpec,
    src: Path,
    truth: np.ndarray[Any, Any],
    impls: list[Impl],
    scratch: Path,
    args: argparse.Namespace,
    base: dict[str, Any],
) -> list[dict[str, Any]]:
    log(f"  full-write: {WORKLOAD_HELP['full-write']}")
    handles: dict[str, Any] = {}
    writers = []
    for impl in impls:
        if impl.device == "gpu":
            handles[impl.name] = SkipImpl("writes are measured on the host path (CPU rows)")
        writers.append(impl)

    def prepare(impl: Impl) -> Any:
        dst = scratch / f"{spec.name}-{impl.name}.zarr"
        fresh_copy_of_metadata(src, dst)
        with impl.context():
            return impl.open(dst, spec.zarr_format, write=True)

    def call(impl: Impl, h: Any) -> Any:
        impl.write_full(h, truth)
        return impl

    def check(impl: Impl, _: Any) -> str | None:
        # Read back with an independent reader: zarr-python (default pipeline), else TensorStore.
        dst = scratch / f"{spec.name}-{impl.name}.zarr"
        try:
            import zarr

            got = zarr.open_array(store=str(dst), mode="r", zarr_format=spec.zarr_format)[...]
        except ImportError:
            import tensorstore as ts

            driver = "zarr3" if spec.zarr_format == 3 else "zarr"
            got = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(dst)}}).result().read().result()
        problem = _first_difference(np.asarray(got), truth)
        return None if problem is None else f"written data read back by zarr-python: {problem}"

    wl = Workload("full-write", truth.nbytes, 1, call, check, prepare=prepare, check_every_run=False)
    results = run_workload(wl, writers, handles, args.repeats, base)
    for rec in results:
        dst = scratch / f"{spec.name}-{rec['impl']}.zarr"
        if dst.exists():
            rec["stored_bytes"] = stored_bytes(dst)
            shutil.rmtree(dst)
    return results


# -- ceilings ------------------------------------------------------------------------------------------------


def bench_ceilings(spec: DatasetSpec, path: Path, array_nbytes: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The dataset's raw ceilings (GPU ones with ``--device gpu``), logged as they come."""
    log("  ceilings: each step of a full read alone (see benchmarks/ceilings.py)")
    records = [
        {"dataset": spec.name, **r}
        for r in measure_ceilings(path, array_nbytes, args.repeats, gpu=args.device == "gpu")
    ]
    for r in records:
        if r["status"] == "ok":
            gbps = f"{r['array_gbps_median']:7.3f} GB/s of the array ({r['gbps_median']:.3f} GB/s moved)"
            log(f"    {'ceiling':13s} {r['ceiling']:18s} {gbps}")
        else:
            log(f"    {'ceiling':13s} {r['ceiling']:18s} {r['status']}: {r['note'][:100]}")
    return records
