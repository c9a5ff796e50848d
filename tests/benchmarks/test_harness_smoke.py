"""The benchmark harness, end to end on a tiny dataset, so that it cannot rot.

No timing assertions: only that every step runs, every result is checked against the ground
truth, and the reports are written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_harness_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "benchmarks.run",
        "--size-mib", "1", "--repeats", "1", "--crops", "4", "--boxes", "2",
        "--data-dir", str(tmp_path / "data"), "--out", str(out),
        "--save-results", "--results-dir", str(tmp_path / "results"), "--machine", "smoke",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "### Throughput" in proc.stdout

    payload = json.loads((out / "results.json").read_text())
    results = payload["results"]
    assert {r["workload"] for r in results} == {
        "full-read", "crops-each", "crops-batch", "shard-partial", "full-write"
    }  # fmt: skip
    assert {r["dataset"] for r in results} == set(payload["datasets"])
    assert "sharded-zstd-32" not in payload["datasets"]  # run only when named
    assert not [r for r in results if r["status"] == "MISMATCH"]
    # The reference peers must always work; gpuzarr must at least run somewhere.
    peers = [r for r in results if r["impl"] in ("zarr-python", "tensorstore")]
    assert peers and all(r["status"] == "ok" for r in peers), [r for r in peers if r["status"] != "ok"]
    assert any(r["impl"] == "gpuzarr-cpu" and r["status"] == "ok" for r in results)
    assert (out / "results.md").exists()
    # Every dataset's full read has its host-read ceiling, and gpuzarr-cpu its fraction of it.
    host_reads = [c for c in payload["ceilings"] if c["ceiling"] == "host-read"]
    assert {c["dataset"] for c in host_reads} == set(payload["datasets"])
    assert all(c["status"] == "ok" for c in host_reads), host_reads
    assert "### Raw ceilings" in proc.stdout
    assert any("fraction_of_ceiling" in r for r in results if r["impl"] == "gpuzarr-cpu")
    assert list((tmp_path / "results").glob("*-smoke.md"))

    # A second run reuses the generated data (no "generated"/"wrote dataset" lines).
    proc2 = subprocess.run(
        [*cmd[:-5], "--only", "zstd", "full-read", "gpuzarr-cpu"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    assert "wrote dataset" not in proc2.stderr and "generated ground truth" not in proc2.stderr


def run_tiny(tmp_path: Path, crops: int, only: list[str], timeout: int) -> Path:
    """``benchmarks.run`` on 1 MiB datasets in ``tmp_path``, once each, of ``only``: its out dir."""
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "benchmarks.run",
        "--size-mib", "1", "--repeats", "1", "--crops", str(crops),
        "--data-dir", str(tmp_path / "data"), "--out", str(out), "--only", *only,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_an_optional_dataset_runs_when_named(tmp_path: Path) -> None:
    pytest.importorskip("tensorstore")
    out = run_tiny(tmp_path, 4, ["sharded-zstd-32", "crops-each", "full-read", "gpuzarr-cpu", "tensorstore"], 120)
    payload = json.loads((out / "results.json").read_text())
    assert set(payload["datasets"]) == {"sharded-zstd-32"}
    metadata = json.loads((tmp_path / "data" / "sharded-zstd-32.zarr" / "zarr.json").read_text())
    assert metadata["codecs"][0]["configuration"]["chunk_shape"] == [32, 32, 32]
    results = payload["results"]
    assert {(r["impl"], r["workload"]) for r in results} == {
        (impl, workload) for impl in ("gpuzarr-cpu", "tensorstore") for workload in ("crops-each", "full-read")
    }
    assert all(r["status"] == "ok" for r in results), results


@pytest.mark.slow
def test_loader_workload_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")
    pytest.importorskip("torch")
    only = ["loader", "sharded-zstd", "v2-blosc-lz4", "gpuzarr-cpu", "zarr-python", "tensorstore"]
    out = run_tiny(tmp_path, 3, only, 300)
    results = json.loads((out / "results.json").read_text())["results"]
    # an 80^3 volume holds 64^3 crops, not 128^3 ones
    assert {(r["dataset"], r["workload"]) for r in results} == {
        (dataset, workload)
        for dataset in ("sharded-zstd", "v2-blosc-lz4")
        for workload in ("loader-64^3", "loader-64^3-cached")
    }
    assert {r["impl"] for r in results} == {"gpuzarr-cpu", "zarr-python", "tensorstore"}
    # every batch of every implementation was checked against the ground truth; zarr-python
    # keeps no decoded chunks, so it has no cached row
    for r in results:
        expected = "skipped" if r["impl"] == "zarr-python" and r["workload"].endswith("-cached") else "ok"
        assert r["status"] == expected, r
    cached = [r for r in results if r["workload"].endswith("-cached") and r["impl"] == "zarr-python"]
    assert all(r["note"] == "no cache of decoded chunks" for r in cached)
