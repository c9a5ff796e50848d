"""``gpuzarr bench``: the table and JSON of CPU (and GPU) throughput, and its refusals."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from gpuzarr.backends.select import gpu_unavailable_reason
from gpuzarr.cli.bench import random_crops

from .conftest import run_module

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    Cli = Callable[..., tuple[int, str, str]]


def test_table(hierarchy: Path) -> None:
    done = run_module("bench", hierarchy / "raw", "--crops", "4", "--crop-shape", "8,8,8", "--repeats", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"gpuzarr bench {hierarchy / 'raw'}: (40, 30, 20) uint16")
    assert "crops: 4 random (8, 8, 8) boxes in one read_batch" in lines[1]
    assert lines[3].split() == ["device", "full", "read", "GB/s", "crops", "GB/s", "crops/s"]
    cpu = lines[4].split()
    # GB/s of such small reads may round to 0.000; crops per second cannot.
    assert cpu[0] == "cpu" and all(float(v) >= 0 for v in cpu[1:3]) and float(cpu[3]) > 0
    reason = gpu_unavailable_reason()
    if reason is not None:  # without a GPU, its row says why
        assert lines[5] == f"gpu       not measured: no usable GPU: {reason}"


def test_json_and_clipped_crops(hierarchy: Path, cli: Cli) -> None:
    status, out, _ = cli(
        "bench", hierarchy / "labels" / "mask", "--crops", "3", "--crop-shape", "64", "--repeats", "2",
        "--device", "cpu", "--json",
    )
    assert status == 0
    doc = json.loads(out)
    assert (doc["shape"], doc["crop_shape"], doc["crops"], doc["repeats"]) == ([30, 30], [30, 30], 3, 2)
    (row,) = doc["rows"]
    assert row["device"] == "cpu" and row["unavailable"] is None
    assert row["full_read_gbps"] == pytest.approx(3600 / row["full_read_s"] / 1e9)
    assert row["crops_per_s"] == pytest.approx(3 / row["crops_s"])


def test_no_full_read_and_no_crops(hierarchy: Path, cli: Cli) -> None:
    status, out, _ = cli("bench", hierarchy / "raw", "--no-full-read", "--crops", "0", "--device", "cpu", "--json")
    row = json.loads(out)["rows"][0]
    assert status == 0 and row["full_read_s"] is None and row["crops_s"] is None


def test_refusals(hierarchy: Path, cli: Cli) -> None:
    status, _, err = cli("bench", hierarchy)
    assert status == 1 and err.startswith(f"gpuzarr bench: error: {hierarchy} is a group; name one of its arrays")
    status, _, err = cli("bench", hierarchy / "raw", "--crop-shape", "8,8")
    assert status == 1 and "--crop-shape 8,8: " in err and "has 3 dimensions, got 2 sizes" in err
    reason = gpu_unavailable_reason()
    if reason is not None:
        status, out, err = cli("bench", hierarchy / "raw", "--device", "gpu")
        assert (status, out) == (1, "")
        assert err == f"gpuzarr bench: error: --device gpu: the GPU read path cannot run here: {reason}\n"


def test_random_crops_stay_inside_the_array() -> None:
    crops = random_crops((10, 5), (4, 8), 50, seed=3)
    assert len(crops) == 50 and crops == random_crops((10, 5), (4, 8), 50, seed=3)
    for a, b in crops:
        assert a.start >= 0 and a.stop <= 10 and a.stop - a.start == 4
        assert (b.start, b.stop) == (0, 5)  # clipped to the axis


def test_a_negative_seed_is_a_usage_error(cli: Callable[..., tuple[int, str, str]]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("bench", "memory://nothing", "--seed", "-1")
    assert exited.value.code == 2
