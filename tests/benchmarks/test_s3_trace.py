"""The request trace of the s3 benchmark (``python -m benchmarks.s3_trace``): its arithmetic on a
hand-made request log, and a run on tiny datasets against moto with the request log, which also
pins gpuzarr's request pattern (what each phase sends) end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.s3_trace import Phase, in_flight, kind_of, summary

ROOT = Path(__file__).resolve().parents[2]


def _request(t0: float, t1: float, method: str = "GET", path: str = "/b/x.zarr/c/0/0", **extra: object) -> dict:
    return {"t0": t0, "t1": t1, "method": method, "path": path, "range": None, "if_match": False,
            "status": 200, "nbytes": 1024, "conn": int(t0 * 1000), **extra}  # fmt: skip


def test_requests_in_flight_and_idle_time() -> None:
    phase = Phase(t0=0.0, t1=10.0, client_cpu=1.0, server_cpu=2.0)
    # Two overlapping requests (1-4, 2-3), then one (6-7): 3 s with one in flight, 1 s with two,
    # 6 s with none.
    records = [_request(1, 4), _request(2, 3), _request(6, 7)]
    peak, mean, idle = in_flight(records, phase)
    assert peak == 2
    assert mean == pytest.approx(0.5)  # (3 * 1 + 1 * 2) / 10
    assert idle == pytest.approx(0.6)


def test_requests_are_told_apart_by_kind() -> None:
    assert kind_of(_request(0, 1, path="/b/x.zarr/zarr.json")) == "meta"
    assert kind_of(_request(0, 1, path="/b/v2.zarr/.zattrs")) == "meta"
    assert kind_of(_request(0, 1, method="HEAD")) == "head"
    assert kind_of(_request(0, 1, path="/b")) == "list"
    assert kind_of(_request(0, 1, range="bytes=-1028")) == "range"
    assert kind_of(_request(0, 1)) == "whole"
    row = summary([_request(0, 1), _request(0, 2, range="bytes=0-9", if_match=True, status=412)], Phase(0, 2, 0, 0))
    assert (row["requests"], row["whole"], row["range"], row["if_match"], row["errors"]) == (2, 1, 1, 1, 1)
    assert row["connections"] == 1  # (both opened at t0 = 0 in this hand-made log)


@pytest.mark.slow
def test_trace_of_tiny_datasets_pins_gpuzarr_requests(tmp_path: Path) -> None:
    pytest.importorskip("moto.server", reason="moto's server (moto[server]) is not installed")
    out = tmp_path / "trace.json"
    cmd = [
        sys.executable, "-m", "benchmarks.s3_trace", "--only", "zstd", "sharded-zstd", "gpuzarr",
        "--size-mib", "1", "--crops", "3", "--data-dir", str(tmp_path / "data"), "--json", str(out), "--floor",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "Address already in use" in proc.stderr:
        pytest.skip("moto's server could not bind a loopback port")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    every = json.loads(out.read_text())
    rows = {(r["dataset"], r["phase"]): r for r in every if r["impl"] == "gpuzarr"}
    # The bare clients fetch every chunk object once, whole: 8 chunk files, or 1 shard.
    floor = {(r["dataset"], r["impl"]): r for r in every if r["phase"] == "fetch-all"}
    assert {k: (r["requests"], r["whole"], r["errors"]) for k, r in floor.items()} == {
        (d, c): (n, n, 0)
        for d, n in (("zstd", 8), ("sharded-zstd", 1))
        for c in ("obstore-get", "tensorstore-kvstore")
    }
    assert set(rows) == {(d, p) for d in ("zstd", "sharded-zstd") for p in ("full-read", "crops", "crops-repeat")}
    # 80^3 uint16, chunks 64^3: 8 chunks. A fresh handle reads zarr.json (no HEAD), then each
    # chunk with one plain GET; 64^3 crops touch all 8 chunks.
    assert {k: rows["zstd", "full-read"][k] for k in ("requests", "meta", "whole", "range", "head")} == {
        "requests": 9, "meta": 1, "whole": 8, "range": 0, "head": 0
    }  # fmt: skip
    assert rows["zstd", "crops"]["requests"] == 1 + 3 * 8
    assert rows["zstd", "crops-repeat"]["requests"] == 3 * 8
    # Shards 256^3 of inner chunks 64^3: one shard, wanted whole by the full read (one request,
    # its index included). A fresh handle's crops read the index once, then ranges only; the
    # crops again need no index and send no HEAD: every request carries the kept ETag.
    sharded = rows["sharded-zstd", "full-read"]
    assert (sharded["requests"], sharded["meta"], sharded["whole"], sharded["head"]) == (2, 1, 1, 0)
    repeat = rows["sharded-zstd", "crops-repeat"]
    assert repeat["head"] == 0 and repeat["meta"] == 0
    assert repeat["requests"] == repeat["range"] == repeat["if_match"] > 0
    assert rows["sharded-zstd", "crops"]["head"] == 0
    assert all(r["errors"] == 0 for r in rows.values())
