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


@pytest.mark.parametrize(
    ("size", "layout", "crop"),
    [
        (32, "chunks 64^3 in shards 256^3 (1 shard(s) holding 1 chunk(s))", "a 32x32x32 crop at (0, 0, 0)"),
        (100, "chunks 64^3 in shards 256^3 (1 shard(s) holding 8 chunk(s))", "a 64x64x64 crop at (10, 36, 33)"),
    ],
)
def test_demo_prints_the_layout_and_crop_it_used(
    capsys: pytest.CaptureFixture[str], size: int, layout: str, crop: str
) -> None:
    assert main(["demo", "--size", str(size), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"  array   ({size}, {size}, {size}) uint16, {layout}, zstd level 3, device cpu" in out
    assert f"  verify  full read and {crop} equal the source: OK" in out


def test_crop_box_lies_in_the_volume() -> None:
    from gpuzarr.cli.demo import crop_box

    assert crop_box(256) == (slice(10, 74), slice(100, 164), slice(33, 97))
    assert crop_box(1) == (slice(0, 1),) * 3
    for size in range(1, 200, 7):
        assert all(0 <= s.start < s.stop <= size and s.stop - s.start == min(64, size) for s in crop_box(size))


def test_a_demo_larger_than_memory_is_a_one_line_error() -> None:
    done = run_module("demo", "--size", "100000")
    assert done.returncode == 1
    assert "gpuzarr demo: error: out of memory" in done.stderr and "Traceback" not in done.stderr
