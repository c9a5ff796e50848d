"""``benchmarks.loader_sweep`` runs every row and checks every crop: on the CPU, and on the GPU
rows through the emulated device (no timing is looked at)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from benchmarks import loader_sweep

from ..backends.emulated_gpu import emulated_gpu  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from pathlib import Path

    from ..backends.emulated_gpu import EmulatedGpu


def _rows(output: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in output.splitlines() if line.startswith("| ")]


def test_cpu_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert loader_sweep.main(["--device", "cpu", "--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "40",
                              "--passes", "1"]) == 0  # fmt: skip
    rows = _rows(capsys.readouterr().out)[1:]
    workers = [f"workers {n}" for n in loader_sweep.worker_counts()]
    names = ["no cache", "no cache, one batch at a time", "host cache", *workers]
    assert [(r[0], r[1]) for r in rows] == [(d, n) for d in ("sharded-zstd", "v2-blosc-lz4") for n in names]
    assert all(float(r[2]) > 0 for r in rows), rows


def test_worker_counts_double_up_to_the_cpus() -> None:
    assert loader_sweep.worker_counts(1) == loader_sweep.worker_counts(2) == [2]
    assert loader_sweep.worker_counts(16) == [2, 4, 8, 16]
    assert loader_sweep.worker_counts(12) == [2, 4, 8]


def test_gpu_rows_on_the_emulated_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], emulated_gpu: EmulatedGpu  # noqa: F811
) -> None:
    assert loader_sweep.main(["--device", "gpu", "--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "40",
                              "--passes", "1"]) == 0  # fmt: skip
    rows = _rows(capsys.readouterr().out)[1:]
    names = [
        "ahead off",
        "ahead default",
        "ahead default, host reads",
        "ahead default, CPU decode",
        "ahead default, 2 lanes",
        "ahead default, frames walked every pass",
        "ahead 1 GiB, batch 4 GiB",
        "device cache",
    ]
    assert [(r[0], r[1]) for r in rows] == [(d, n) for d in ("sharded-zstd", "v2-blosc-lz4") for n in names]
    assert all(not r[2].startswith("error") for r in rows), rows


def test_rows_and_switch_interval_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], emulated_gpu: EmulatedGpu  # noqa: F811
) -> None:
    before = sys.getswitchinterval()
    try:
        assert loader_sweep.main(["--device", "gpu", "--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "40",
                                  "--passes", "1", "--rows", "device cache", "ahead off",
                                  "--switch-interval", "0.0005"]) == 0  # fmt: skip
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    finally:
        sys.setswitchinterval(before)
    rows = _rows(capsys.readouterr().out)[1:]
    assert [(r[0], r[1]) for r in rows] == [
        (d, n) for d in ("sharded-zstd", "v2-blosc-lz4") for n in ("ahead off", "device cache")
    ]


def test_phases_of_one_more_pass_follow_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], emulated_gpu: EmulatedGpu  # noqa: F811
) -> None:
    assert loader_sweep.main(["--device", "gpu", "--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "40",
                              "--passes", "1", "--rows", "device cache", "ahead off", "--phases"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    tables = out.split("\n### ")[1:]
    assert [t.splitlines()[0] for t in tables] == [
        f"{d}, {n}: one pass" for d in ("sharded-zstd", "v2-blosc-lz4") for n in ("ahead off", "device cache")
    ]
    names = [{r[0] for r in _rows(table)[1:]} for table in tables]
    assert all({"loader-next", "loader-slot", "loader-hand-over", "(wall)"} <= n for n in names), tables
    # Without decoding ahead or a cache, each batch is one read_batch: the read's own steps.
    # With a device cache holding the volume, crops are put together from cached chunks only.
    for ahead_off, cached in (names[0:2], names[2:4]):
        assert {"plan", "fetch", "device-wait"} <= ahead_off and "loader-assemble" not in ahead_off
        assert "loader-assemble" in cached and "fetch" not in cached
