"""The many-arrays benchmark (``python -m benchmarks.many_arrays``) end to end on three arrays,
so that it cannot rot: every implementation runs and reads the values written (it raises
otherwise), and the table and results.json come out. No timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_many_arrays_benchmark_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")
    pytest.importorskip("obstore")
    cmd = [
        sys.executable, "-m", "benchmarks.many_arrays", "--arrays", "3", "--latency-ms", "1", "--repeats", "2",
        "--out", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert [row["impl"] for row in result["rows"]] == [
        "gpuzarr", "gpuzarr futures", "zarr-python", "zarr-python asyncio", "tensorstore", "tensorstore futures",
    ]  # fmt: skip
    assert all(row["median_ms"] > 0 for row in result["rows"])
    assert "| gpuzarr futures | all at once |" in proc.stdout


def test_bad_arguments_are_refused() -> None:
    cmd = [sys.executable, "-m", "benchmarks.many_arrays", "--arrays", "0"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--arrays" in proc.stderr
