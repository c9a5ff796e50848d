"""``gpuzarr demo`` through the command line (tests/test_demo.py runs the demo itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpuzarr.backends.select import gpu_unavailable_reason
from gpuzarr.cli.main import main

from .conftest import run_module

if TYPE_CHECKING:
    from pathlib import Path


def test_gpu_demo_without_a_gpu_says_why_in_one_line(tmp_path: Path) -> None:
    reason = gpu_unavailable_reason()
    if reason is None:
        pytest.skip("this machine has a usable GPU")
    done = run_module("demo", "--device", "gpu", "--size", "16", "--keep", tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"gpuzarr demo: error: device='gpu': the GPU read path cannot run here: {reason}\n"
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_demo_size_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--size", "0"])
    assert exit_info.value.code == 2
    assert "argument --size: expected a positive integer, got 0" in capsys.readouterr().err
