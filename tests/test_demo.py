"""``python -m gpuzarr demo``: the README's first command runs, verifies and reports."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np

import gpuzarr
from gpuzarr.__main__ import main
from gpuzarr.cli.demo import sample_volume

if TYPE_CHECKING:
    from pathlib import Path


def test_demo_runs_as_the_readme_says(tmp_path: Path) -> None:
    env = {**os.environ, "GPUZARR_DEVICE": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuzarr", "demo", "--size", "48", "--keep", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "verify  full read and a 48x48x48 crop at (0, 0, 0) equal the source: OK" in done.stdout
    assert "device cpu" in done.stdout
    kept = gpuzarr.open_array(tmp_path / "volume.zarr", mode="r", device="cpu")
    assert kept.shape == (48, 48, 48) and kept.shards == (256, 256, 256)
    np.testing.assert_array_equal(kept[...], sample_volume((48, 48, 48)))


def test_demo_reports_a_mismatch(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # A reader that returns wrong data must make the demo fail, not print OK.
    original = gpuzarr.Array.__getitem__
    monkeypatch.setattr(gpuzarr.Array, "__getitem__", lambda self, sel: original(self, sel) + 1)
    assert main(["demo", "--size", "32", "--device", "cpu"]) == 1
    assert "MISMATCH" in capsys.readouterr().err
