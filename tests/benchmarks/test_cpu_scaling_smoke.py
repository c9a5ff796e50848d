"""benchmarks/cpu_scaling.py on a tiny dataset: every configuration runs, every batch is checked
against the ground truth (a wrong crop raises), and the table has a row per configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cpu_scaling_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("tensorstore")
    cmd = [
        sys.executable, "-m", "benchmarks.cpu_scaling",
        "--size-mib", "1", "--crop", "16", "--batches", "1", "--repeats", "1", "--threads", "1", "2",
        "--data-dir", str(tmp_path / "data"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "crops/s" not in line]
    # two datasets x two thread counts x (TensorStore + three gpuzarr variants + the bare decode)
    assert len(rows) == 2 * 2 * 5
    assert {row.split(" | ")[2] for row in rows} == {
        "tensorstore", "gpuzarr default", "gpuzarr no-link-check", "gpuzarr switch-0.5ms", "bare decode"
    }  # fmt: skip
