"""Run gpuzarr beside zarr-python (default and zarrs pipelines) and TensorStore on the same data.

    python -m benchmarks.run [--size-mib 512] [--repeats 5] [--out benchmarks/out]
                             [--device cpu|gpu] [--only NAME ...] [--save-results]

See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .ceilings import measure_ceilings
from .datasets import (
    DATASET_NAMES,
    DATASETS,
    DataDir,
    DatasetSpec,
    chunks_for,
    fresh_copy_of_metadata,
    stored_bytes,
)
from .impls import ALL_IMPL_NAMES, Impl, SkipImpl, implementations
from .measure import PeakRSS, process_peak_rss, summarise

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

HERE = Path(__file__).resolve().parent
WORKLOADS = ["full-read", "crops-each", "crops-batch", "shard-partial", "full-write"]
WORKLOAD_HELP = {
    "full-read": "the whole array in one read",
    "crops-each": "N random unaligned crops, one read after the other",
    "crops-batch": "the same N crops as one batch (gpuzarr read_batch; TensorStore all futures at once; "
    "zarr-python a loop)",
    "shard-partial": "B random unaligned 128^3 boxes of the sharded dataset, one after the other",
    "full-write": "the whole array written into a fresh array with the same metadata and codecs",
}


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


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


def run_workload(  # noqa: C901 - one branch per workload kind
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
        rec = {
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
        records[impl.name] = rec
        h = handles.get(impl.name)
        if isinstance(h, BaseException):
            rec["status"] = "skipped" if isinstance(h, SkipImpl) else "error"
            rec["note"] = str(h)
        else:
            active.append(impl)

    def one(impl: Impl, timed: bool, check: bool) -> None:
        rec = records[impl.name]
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

    def guarded(impl: Impl, timed: bool, check: bool) -> bool:
        try:
            one(impl, timed, check)
        except SkipImpl as exc:
            records[impl.name].update(status="skipped", note=str(exc))
            return False
        except Exception as exc:
            records[impl.name].update(status="error", note=f"{type(exc).__name__}: {exc}")
            log(f"    {impl.name}: {type(exc).__name__}: {exc}")
            log("".join(traceback.format_exception(exc)[-3:]).rstrip())
            return False
        return True

    active = [impl for impl in active if guarded(impl, timed=False, check=True)]  # warm-up
    for r in range(repeats):
        k = r % len(active) if active else 0
        for impl in active[k:] + active[:k]:
            if records[impl.name]["status"] in ("ok", "MISMATCH"):
                guarded(impl, timed=True, check=wl.check_every_run)

    out = []
    for impl in impls:
        rec = records[impl.name]
        if rec["times_s"] and rec["status"] in ("ok", "MISMATCH"):
            rec.update(summarise(rec["times_s"], wl.nbytes, wl.items))
            rec["cpu_s_median"] = statistics.median(rec["cpu_s"])
            if rec["rss_delta_bytes"]:
                rec["rss_delta_peak_bytes"] = max(rec["rss_delta_bytes"])
        elif rec["status"] == "ok":
            rec["status"] = "error"
            rec["note"] = rec["note"] or "no timed run completed"
        out.append(rec)
        if rec.get("gbps_median") is not None:
            log(
                f"    {wl.name:13s} {impl.name:18s} {rec['gbps_median']:7.3f} GB/s "
                f"{rec['items_per_s_median']:9.1f} /s  {rec['status']}"
            )
        else:
            log(f"    {wl.name:13s} {impl.name:18s} {rec['status']}: {rec['note'][:100]}")
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

    handles: dict[str, Any] = {}
    if read_workloads:
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


def add_fractions(results: list[dict[str, Any]], ceilings: list[dict[str, Any]]) -> None:
    """Mark gpuzarr's full reads with the fraction of their ceiling reached: gpuzarr-cpu against the
    host read, gpuzarr-gpu against the slower of host read and nvCOMP decode (both bound it)."""
    ok = {(c["dataset"], c["ceiling"]): c["array_gbps_median"] for c in ceilings if c["status"] == "ok"}
    bounded_by = {"gpuzarr-cpu": ["host-read"], "gpuzarr-gpu": ["host-read", "nvcomp-decode"]}
    for r in results:
        if r["workload"] != "full-read" or r["impl"] not in bounded_by or r.get("gbps_median") is None:
            continue
        bounds = [ok[k] for k in ((r["dataset"], c) for c in bounded_by[r["impl"]]) if k in ok]
        if bounds:
            r["ceiling_gbps"] = min(bounds)
            r["fraction_of_ceiling"] = r["gbps_median"] / min(bounds)


# -- environment -------------------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> dict[str, Any]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("numpy", "numcodecs", "zarr", "zarrs", "tensorstore", "cupy", "psutil"):
        versions[dist] = _version(dist)
    try:
        import gpuzarr

        versions["gpuzarr"] = gpuzarr.__version__
    except Exception:
        versions["gpuzarr"] = None
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "gpuzarr"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        if commit:
            versions["gpuzarr"] = f"{versions['gpuzarr']} ({commit}{', modified' if dirty else ''})"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    env: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "versions": versions,
        "gpu": None,
        "loadavg_start": _loadavg(),
    }
    if device == "gpu":
        with contextlib.suppress(Exception):
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(0)
            env["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return env


def machine_slug(env: dict[str, Any]) -> str:
    words = re.sub(r"\(.*?\)|processor|cpu|@.*", " ", env["cpu_model"], flags=re.I).split()
    slug = "-".join(w.lower() for w in words[:3]) or "cpu"
    slug = re.sub(r"[^a-z0-9-]+", "", slug)
    gpu = ("-" + re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower()).strip("-")) if env.get("gpu") else ""
    return f"{slug}-{env['cpus_usable']}c{gpu}"


# -- report ------------------------------------------------------------------------------------------------


def _fmt_cell(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return ""
    if rec.get("gbps_median") is None:
        return {"skipped": "skip", "error": "ERROR"}.get(rec["status"], rec["status"])
    cell = f"{rec['gbps_median']:.3f}"
    return cell if rec["status"] == "ok" else f"{cell} **{rec['status']}**"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if not a or not b or a.get("gbps_median") is None or b.get("gbps_median") is None:
        return ""
    return f"{a['gbps_median'] / b['gbps_median']:.2f}"


CEILING_COLUMNS = [  # (header, ceiling, value)
    ("host read", "host-read", "array_gbps_median"),
    ("host read, stored bytes", "host-read", "gbps_median"),
    ("host→device", "host-to-device", "gbps_median"),
    ("nvCOMP decode", "nvcomp-decode", "array_gbps_median"),
]


def render_ceilings(ceilings: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[str]:
    """One row per dataset: the ceilings, then the fraction of them gpuzarr's full reads reach."""
    by_key = {(c["dataset"], c["ceiling"]): c for c in ceilings}
    columns = [col for col in CEILING_COLUMNS if any(c["ceiling"] == col[1] for c in ceilings)]
    fractions = {(r["dataset"], r["impl"]): r["fraction_of_ceiling"] for r in results if "fraction_of_ceiling" in r}
    fraction_headers = {"gpuzarr-cpu": "gpuzarr-cpu ÷ host read", "gpuzarr-gpu": "gpuzarr-gpu ÷ min(host read, decode)"}
    frac_impls = [n for n in fraction_headers if any(k[1] == n for k in fractions)]
    lines = [
        "### Raw ceilings (GB/s, median: each step of a full read alone; GB/s of the decoded array "
        "unless marked, so comparable with full-read)",
        "",
    ]
    header = ["dataset", *(h for h, _, _ in columns), *(fraction_headers[n] for n in frac_impls)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for ds in dict.fromkeys(c["dataset"] for c in ceilings):
        cells = [ds]
        for _, name, value in columns:
            c = by_key.get((ds, name))
            cells.append(f"{c[value]:.3f}" if c is not None and c["status"] == "ok" else _fmt_cell(c))
        cells += [f"{fractions[ds, n]:.1%}" if (ds, n) in fractions else "" for n in frac_impls]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"{c['dataset']} {c['ceiling']}: {c['status']} ({c['note']})" for c in ceilings if c["status"] != "ok"]
    if notes:
        lines += ["", "Ceilings not measured: " + "; ".join(notes) + "."]
    return lines


def render(
    results: list[dict[str, Any]],
    env: dict[str, Any],
    args: argparse.Namespace,
    ceilings: list[dict[str, Any]] | None = None,
) -> str:
    impl_names = [n for n in ALL_IMPL_NAMES if any(r["impl"] == n for r in results)]
    gz = [n for n in impl_names if n.startswith("gpuzarr")]
    peers = [n for n in impl_names if not n.startswith("gpuzarr")]
    by_key: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in results:
        by_key.setdefault((r["workload"], r["dataset"]), {})[r["impl"]] = r

    lines = ["### Throughput (GB/s of decoded data, median; higher is better)", ""]
    ratio_cols = [(g, p) for g in gz for p in peers if (g.endswith("gpu")) == (p.endswith("gpu") or p.endswith("cupy"))]
    header = ["workload", "dataset", *impl_names, *(f"{g} ÷ {p}" for g, p in ratio_cols)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (wl, ds), row in by_key.items():
        cells = [
            wl,
            ds,
            *(_fmt_cell(row.get(n)) for n in impl_names),
            *(_ratio(row.get(g), row.get(p)) for g, p in ratio_cols),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if ceilings:
        lines += ["", *render_ceilings(ceilings, results)]

    lines += [
        "",
        "### Detail (median [min-max] over repeats; CPU s = process CPU time per call, all "
        "threads; RSS Δ = peak resident memory above the level before the call)",
        "",
    ]
    header = ["workload", "dataset", "impl", "GB/s", "items/s", "CPU s", "RSS Δ MiB", "check"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (wl, ds), row in by_key.items():
        for n in impl_names:
            r = row.get(n)
            if r is None:
                continue
            if r.get("gbps_median") is not None:
                gbps = f"{r['gbps_median']:.3f} [{r['gbps_min']:.3f}-{r['gbps_max']:.3f}]"
                items = f"{r['items_per_s_median']:.1f}" if r["items"] > 1 else ""
                rss = f"{r['rss_delta_peak_bytes'] / 2**20:.0f}" if "rss_delta_peak_bytes" in r else ""
                cpu = f"{r['cpu_s_median']:.2f}" if "cpu_s_median" in r else ""
            else:
                gbps = items = rss = cpu = ""
            check = r["status"] if not r["note"] else f"{r['status']}: {r['note']}"
            check = check.replace("|", "/").replace("\n", " ")
            if len(check) > 160:
                check = check[:157] + "..."
            lines.append("| " + " | ".join([wl, ds, n, gbps, items, cpu, rss, check]) + " |")
    lines += ["", f"Process peak RSS: {process_peak_rss() / 2**30:.2f} GiB."]
    return "\n".join(lines)


def render_header(env: dict[str, Any], args: argparse.Namespace, datasets: dict[str, Any], argv: list[str]) -> str:
    v = env["versions"]
    lines = [
        f"# gpuzarr benchmarks — {env['date']}, {machine_slug(env)}",
        "",
        f"Command: `python -m benchmarks.run {' '.join(argv)}`".rstrip(),
        "",
        f"- CPU: {env['cpu_model']}, {env['cpu_count']} cores ({env['cpus_usable']} usable), "
        f"{env['memory_gib']} GiB RAM" + (f"; GPU: {env['gpu']}" if env.get("gpu") else "; no GPU"),
        f"- {env['platform']}",
        f"- Load average (1/5/15 min) at start: {env.get('loadavg_start')}, at end: {env.get('loadavg_end')} "
        "(other processes compete for the cores when these exceed the core count)",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val is not None),
        f"- {args.repeats} timed repeats after one warm-up per implementation, in rotating order; "
        f"{args.crops} crops per crop run, {args.boxes} boxes per shard-partial run. Reads are from the "
        "OS page cache (data written once, read many times); writes go to the page cache (no fsync).",
        "",
        "| dataset | shape | dtype | layout | stored MiB | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in datasets.items():
        lines.append(
            f"| {name} | {tuple(d['shape'])} | {d['dtype']} | {d['description']} | "
            f"{d['stored_bytes'] / 2**20:.0f} | {d['nbytes'] / max(d['stored_bytes'], 1):.2f} |"
        )
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--size-mib", type=float, default=512, help="size of each dataset (default 512)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per implementation (default 5)")
    p.add_argument("--crops", type=int, default=256, help="random crops per crop run (default 256)")
    p.add_argument("--boxes", type=int, default=16, help="128^3 boxes per shard-partial run (default 16)")
    p.add_argument("--out", type=Path, default=HERE / "out", help="where results.json/.md go")
    p.add_argument("--data-dir", type=Path, default=HERE / "data", help="generated datasets (reused)")
    p.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        default="cpu",
        help="gpu adds the GPU implementations (skipped, with a note, without a usable GPU)",
    )
    p.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="NAME",
        help="restrict to these implementations / datasets / workloads (any mix): "
        + ", ".join(ALL_IMPL_NAMES + DATASET_NAMES + WORKLOADS),
    )
    p.add_argument("--save-results", action="store_true", help="also write benchmarks/results/<date>-<machine>.md")
    p.add_argument("--results-dir", type=Path, default=HERE / "results", help=argparse.SUPPRESS)
    p.add_argument("--machine", default=None, help="machine name for --save-results (default: CPU model + cores)")
    args = p.parse_args(argv)
    unknown = [o for o in args.only if o not in ALL_IMPL_NAMES + DATASET_NAMES + WORKLOADS]
    if unknown:
        p.error(f"--only: unknown name(s) {unknown}; choose from {ALL_IMPL_NAMES + DATASET_NAMES + WORKLOADS}")
    if args.repeats < 1 or args.crops < 1 or args.boxes < 1:
        p.error("--repeats, --crops and --boxes must be >= 1")
    return args


def _select(names: list[str], only: list[str]) -> list[str]:
    chosen = [n for n in names if n in only]
    return chosen or list(names)


def write_outputs(
    args: argparse.Namespace,
    argv: list[str],
    env: dict[str, Any],
    ds_info: dict[str, Any],
    unavailable: dict[str, str],
    results: list[dict[str, Any]],
    ceilings: list[dict[str, Any]],
    elapsed: float,
    final: bool,
) -> str:
    """Render the report; write results.json/.md (and the --save-results file). Returns the report."""
    env["loadavg_end"] = _loadavg()
    header = render_header(env, args, ds_info, argv)
    table = render(results, env, args, ceilings)
    notes = ""
    if unavailable:
        notes = "\n\nSkipped implementations: " + "; ".join(f"{k} ({v})" for k, v in unavailable.items()) + "."
    status = "" if final else "\n\n**Partial results: the run has not finished.**"
    report = f"{header}\n\n{table}{notes}\n\nTotal benchmark time: {elapsed:.0f} s.{status}\n"
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "environment": env,
        "argv": argv,
        "args": {k: str(v) for k, v in vars(args).items()},
        "datasets": ds_info,
        "unavailable": unavailable,
        "results": results,
        "ceilings": ceilings,
        "elapsed_s": elapsed,
        "complete": final,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=1, default=str))
    (args.out / "results.md").write_text(report)
    if args.save_results:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        dest = args.results_dir / f"{env['date']}-{args.machine or machine_slug(env)}.md"
        dest.write_text(report)
    if final:
        log(
            f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}"
            + (f" and {dest}" if args.save_results else "")
        )
    return report


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    env = environment(args.device)

    impls = implementations(args.device)
    impl_names = _select([i.name for i in impls], args.only)
    impls = [i for i in impls if i.name in impl_names]
    unavailable: dict[str, str] = {}
    for impl in list(impls):
        note = impl.unavailable()
        if note is not None:
            unavailable[impl.name] = note
            log(f"skipping {impl.name}: {note}")
    usable = [i for i in impls if i.name not in unavailable]
    datasets = [d for d in DATASETS if d.name in _select(DATASET_NAMES, args.only)]
    workloads = _select(WORKLOADS, args.only)

    data = DataDir(args.data_dir, args.size_mib, log=log)
    t_start = time.perf_counter()
    results: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []
    ds_info: dict[str, Any] = {}
    for spec in datasets:
        log(f"dataset {spec.name}: {spec.description}")
        results += bench_dataset(spec, data, usable, workloads, args)
        truth = data.truth(spec.kind)
        # After the workloads: the data is as warm in the page cache as for their reads, and the
        # GPU ceilings' buffers cannot disturb their timings.
        if "full-read" in workloads:
            ceilings += bench_ceilings(spec, data.root / f"{spec.name}.zarr", truth.nbytes, args)
            add_fractions(results, ceilings)
        ds_info[spec.name] = {
            "description": spec.description,
            "shape": list(truth.shape),
            "dtype": str(truth.dtype),
            "nbytes": truth.nbytes,
            "stored_bytes": stored_bytes(data.root / f"{spec.name}.zarr"),
        }
        for name, note in unavailable.items():
            for wl in workloads:
                if wl == "shard-partial" and not spec.sharded:
                    continue
                results.append(
                    {
                        "dataset": spec.name,
                        "workload": wl,
                        "impl": name,
                        "status": "skipped",
                        "note": note,
                        "items": 1,
                    }
                )
        # Written after every dataset, so an interrupted run still leaves its results.
        write_outputs(
            args, argv, env, ds_info, unavailable, results, ceilings, time.perf_counter() - t_start, final=False
        )
    elapsed = time.perf_counter() - t_start
    report = write_outputs(args, argv, env, ds_info, unavailable, results, ceilings, elapsed, final=True)
    print(report)
    bad = [r for r in results if r["status"] == "MISMATCH"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
