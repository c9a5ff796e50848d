"""Where the time of the ``s3`` workload goes: requests, bytes, concurrency and CPU per library.

    python -m benchmarks.s3_trace [--data-dir DIR] [--size-mib 64] [--crops 64] [--only NAME ...] [--floor]

Runs the reads of :mod:`benchmarks.s3_workload` (full read and crops on a fresh handle, the
crops again on the same handle) once per implementation against moto with a request log
(:mod:`benchmarks.s3_request_log`), and prints per phase: requests by kind (metadata, whole
GETs, ranged GETs, HEADs, lists), MiB sent, connections opened, requests in flight (peak and
time-weighted mean) and the fraction of the time with none in flight (``idle``: the server
waiting on the client), wall time, the client's CPU time (every thread of this process) and the
server's (its process, from ``/proc``). The server shares the cores with the client, so CPU the
client spends is CPU the server cannot spend on answering.

``--floor`` adds a ``fetch-all`` phase per dataset that decodes nothing: every object under the
dataset's chunk prefix fetched whole by the bare clients (``obstore-get``: ``obstore.get`` and
``bytes()`` on a thread pool, as gpuzarr and zarr-python reach S3; ``tensorstore-kvstore``:
TensorStore's ``s3`` kvstore reads, all in flight at once). It is the HTTP client's own cost per
request, the floor under every reader built on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .datasets import DATASETS, DataDir, chunks_for
from .measure import log
from .s3_server import S3Server
from .s3_workload import CROP, MAX_CROPS, S3_DATASETS, S3_DEFAULT_MIB, S3Impl, implementations, upload
from .workloads import random_boxes

METADATA_NAMES = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")
#: what kind_of tells apart (other methods count under their own name)
KINDS = ("meta", "whole", "range", "head", "list")
#: the server writes a request's line after its last byte: wait this long before reading
SETTLE_S = 0.3


@dataclass
class Phase:
    """One timed stretch of client work: wall-clock bounds and CPU times."""

    t0: float
    t1: float
    client_cpu: float
    server_cpu: float


def server_cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(server: S3Server, func: Any) -> Phase:
    c0, s0, t0 = time.process_time(), server_cpu_seconds(server.pid), time.time()
    func()
    t1, c1 = time.time(), time.process_time()
    time.sleep(SETTLE_S)  # (the server's CPU for the last answers is counted too)
    return Phase(t0, t1, c1 - c0, server_cpu_seconds(server.pid) - s0)


def requests_in(log_path: Path, phase: Phase) -> list[dict[str, Any]]:
    with open(log_path) as f:
        records = [json.loads(line) for line in f]
    return [r for r in records if phase.t0 <= r["t0"] <= phase.t1]


def kind_of(record: dict[str, Any]) -> str:
    if record["method"] == "HEAD":
        return "head"
    if record["method"] != "GET":
        return record["method"].lower()
    path = record["path"]
    if path.rstrip("/").count("/") <= 1 or "list-type" in path:
        return "list"
    if path.rsplit("/", 1)[-1] in METADATA_NAMES:
        return "meta"
    return "range" if record["range"] else "whole"


def in_flight(records: list[dict[str, Any]], phase: Phase) -> tuple[int, float, float]:
    """Peak and time-weighted mean of requests in flight over the phase, and the fraction of
    the phase with none in flight (the server waiting on the client)."""
    events = sorted([(r["t0"], 1) for r in records] + [(r["t1"], -1) for r in records])
    peak = level = 0
    area, idle, last = 0.0, 0.0, phase.t0
    for t, step in events:
        area += level * (t - last)
        if level == 0:
            idle += t - last
        last = t
        level += step
        peak = max(peak, level)
    wall = max(phase.t1 - phase.t0, 1e-9)
    idle += max(phase.t1 - last, 0.0) if level == 0 else 0.0
    return peak, area / wall, idle / wall


def summary(records: list[dict[str, Any]], phase: Phase) -> dict[str, Any]:
    kinds = dict.fromkeys(KINDS, 0)
    for r in records:
        k = kind_of(r)
        kinds[k] = kinds.get(k, 0) + 1
    peak, mean, idle = in_flight(records, phase)
    nbytes = sum(r.get("nbytes", 0) for r in records)
    data = [r for r in records if kind_of(r) in ("range", "whole")]
    return {
        "requests": len(records),
        **kinds,
        "if_match": sum(r["if_match"] for r in records),
        "errors": sum(r.get("status", 0) >= 400 for r in records),
        "mib": nbytes / 2**20,
        "kib_per_data_request": (sum(r.get("nbytes", 0) for r in data) / len(data) / 1024) if data else 0.0,
        "connections": len({r["conn"] for r in records}),
        "peak_in_flight": peak,
        "mean_in_flight": mean,
        "idle": idle,
        "wall_s": phase.t1 - phase.t0,
        "client_cpu_s": phase.client_cpu,
        "server_cpu_s": phase.server_cpu,
    }


COLUMNS = (
    ("requests", "{}"), ("meta", "{}"), ("whole", "{}"), ("range", "{}"), ("head", "{}"), ("list", "{}"),
    ("if_match", "{}"), ("mib", "{:.1f}"), ("kib_per_data_request", "{:.0f}"), ("connections", "{}"),
    ("peak_in_flight", "{}"), ("mean_in_flight", "{:.1f}"), ("idle", "{:.0%}"), ("wall_s", "{:.2f}"),
    ("client_cpu_s", "{:.2f}"), ("server_cpu_s", "{:.2f}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    head = ["dataset", "phase", "impl", *(c for c, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * len(COLUMNS)]
    for row in rows:
        cells = [row["dataset"], row["phase"], row["impl"]]
        cells += [fmt.format(row.get(c, 0)) for c, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def trace_impl(
    server: S3Server,
    log_path: Path,
    impl: S3Impl,
    dataset: str,
    truth: np.ndarray[Any, Any],
    sels: list[tuple[slice, ...]],
) -> list[dict[str, Any]]:
    """The phases of one implementation on one dataset (opened once first, untraced, so that
    imports and first-use set-up are not counted)."""
    path = f"{dataset}.zarr"
    impl.open(path)
    holder: dict[str, Any] = {}

    def full() -> None:
        if not np.array_equal(impl.read(impl.open(path), ...), truth):
            raise AssertionError(f"{impl.name} read {dataset} wrongly")

    def crops(fresh: bool = True) -> None:
        if fresh:
            holder["h"] = impl.open(path)
        for sel in sels:
            impl.read(holder["h"], sel)

    phases = (("full-read", full), ("crops", crops), ("crops-repeat", lambda: crops(fresh=False)))
    return [traced(server, log_path, dataset, name, impl.name, func) for name, func in phases]


def traced(server: S3Server, log_path: Path, dataset: str, phase_name: str, impl: str, func: Any) -> dict[str, Any]:
    """One row: ``func`` run as a measured phase, and the requests it sent."""
    phase = measured(server, func)
    row = {"dataset": dataset, "phase": phase_name, "impl": impl, **summary(requests_in(log_path, phase), phase)}
    log(f"{dataset} {phase_name} {impl}: {row['requests']} requests, {row['wall_s']:.2f} s, "
        f"{row['client_cpu_s']:.2f} s client CPU")  # fmt: skip
    return row


#: threads of the bare obstore fetch (as many requests in flight as gpuzarr's full read has)
FLOOR_THREADS = 32


def trace_fetch_floor(server: S3Server, log_path: Path, dataset: str) -> list[dict[str, Any]]:
    """``fetch-all`` by the bare HTTP clients: every chunk object of ``dataset`` fetched whole,
    nothing decoded (after one untraced pass, so that set-up and connection pools are warm)."""
    from concurrent.futures import ThreadPoolExecutor

    import obstore
    import tensorstore as ts

    store = server.obstore_store()
    prefix = f"{dataset}.zarr/"
    keys = [
        o["path"]
        for batch in obstore.list(store, prefix=prefix)
        for o in batch
        if o["path"].rsplit("/", 1)[-1] not in METADATA_NAMES
    ]
    kvstore = ts.KvStore.open(server.tensorstore_kvstore(prefix)).result()

    def obstore_get() -> None:
        with ThreadPoolExecutor(FLOOR_THREADS) as pool:
            got = sum(len(b) for b in pool.map(lambda k: obstore.get(store, k).bytes(), keys))
        if got == 0:
            raise AssertionError(f"obstore fetched nothing under {prefix}")

    def tensorstore_read() -> None:
        futures = [kvstore.read(k[len(prefix) :]) for k in keys]
        if sum(len(f.result().value) for f in futures) == 0:
            raise AssertionError(f"TensorStore fetched nothing under {prefix}")

    rows = []
    for name, func in (("obstore-get", obstore_get), ("tensorstore-kvstore", tensorstore_read)):
        func()
        rows.append(traced(server, log_path, dataset, "fetch-all", name, func))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.s3_trace", description=__doc__)
    p.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parent / "data")
    p.add_argument("--crops", type=int, default=MAX_CROPS)
    p.add_argument("--size-mib", type=float, default=S3_DEFAULT_MIB, help="size of each dataset")
    p.add_argument("--only", nargs="+", default=[], metavar="NAME", help="datasets and/or implementations")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    p.add_argument("--floor", action="store_true", help="also fetch every chunk with the bare HTTP clients")
    args = p.parse_args(argv)
    os.environ.update(S3Server.environ())
    data = DataDir(args.data_dir / "s3", args.size_mib, log=log)
    log_path = Path(tempfile.mkdtemp(prefix="s3-trace-")) / "requests.jsonl"
    server = S3Server.start(request_log=log_path)
    rows: list[dict[str, Any]] = []
    try:
        impls = implementations(server)
        named = [i for i in impls if i.name in args.only]
        impls = named or impls
        for spec in (d for d in DATASETS if d.name in S3_DATASETS):
            if set(args.only) & set(S3_DATASETS) and spec.name not in args.only:
                continue
            upload(server, data.dataset(spec), f"{spec.name}.zarr")
            truth = data.truth(spec.kind)
            sels = random_boxes(truth.shape, (CROP,) * truth.ndim, chunks_for(spec), args.crops, seed=5)
            for impl in impls:
                rows += trace_impl(server, log_path, impl, spec.name, truth, sels)
            if args.floor:
                rows += trace_fetch_floor(server, log_path, spec.name)
    finally:
        server.stop()
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
