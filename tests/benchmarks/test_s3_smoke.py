"""The s3 benchmark (``--only s3``) end to end on tiny datasets against moto's loopback server,
so that it cannot rot; and its table when an implementation cannot open the data.

No timing assertions: only that every step runs and every result matches the ground truth.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.s3_workload import S3Impl, table, unavailable

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_s3_benchmark_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")
    pytest.importorskip("obstore")
    pytest.importorskip("moto.server", reason="moto's server (moto[server]) is not installed")
    cmd = [
        sys.executable, "-m", "benchmarks.run", "--only", "s3", "zstd", "sharded-zstd",
        "--size-mib", "1", "--repeats", "1", "--crops", "2", "--data-dir", str(tmp_path / "data"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "Address already in use" in proc.stderr:
        pytest.skip("moto's server could not bind a loopback port")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    for dataset in ("zstd", "sharded-zstd"):
        for impl in ("zarr-python", "tensorstore"):
            workloads = {r.split(" | ")[1] for r in rows if r.startswith(f"| {dataset} |") and f"| {impl} |" in r}
            assert workloads == {"full-read", "crops", "crops-repeat"}, (dataset, impl, rows)
        gpuzarr_rows = [r for r in rows if r.startswith(f"| {dataset} |") and "| gpuzarr" in r]
        assert gpuzarr_rows  # numbers, or "unavailable: <why>"
    assert "MISMATCH" not in proc.stdout


def test_an_implementation_that_cannot_open_is_reported_not_fatal() -> None:
    def refuse(path: str) -> None:
        raise TypeError(f"open: cannot open {path}")

    impl = S3Impl("gpuzarr", refuse, lambda handle, sel: handle)
    note = unavailable(impl, "zstd.zarr")
    assert note == "TypeError: open: cannot open zstd.zarr"
    records = [
        {"dataset": "zstd", "impl": "gpuzarr", "workload": "all", "status": "unavailable", "note": note},
        {"dataset": "zstd", "impl": "tensorstore", "workload": "crops", "status": "ok", "gb_s": 0.5, "crops_s": 3.0},
    ]
    text = table(records)
    assert "| zstd | all | gpuzarr | unavailable: TypeError: open: cannot open zstd.zarr |" in text
    assert "| zstd | crops | tensorstore | 0.500 | 3.0 |  |" in text
