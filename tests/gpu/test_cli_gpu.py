"""The command line on a real GPU: ``verify --device gpu`` finds what the CPU finds, ``bench``
measures the GPU row, ``demo --device gpu`` reads on the device. Skipped without a usable GPU."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from gpuzarr.cli.main import main

from ..cli.conftest import make_hierarchy
from ..cli.test_verify import EXPECTED, damaged  # noqa: F401 - the fixture, used by name

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.gpu


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    status = main(list(args))
    return status, json.loads(capsys.readouterr().out)


def test_verify_on_the_gpu_lists_what_the_cpu_lists(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    status_cpu, cpu = _json(capsys, "verify", str(damaged), "--json")
    status_gpu, gpu = _json(capsys, "verify", str(damaged), "--json", "--device", "gpu")
    assert status_cpu == status_gpu == 1
    assert gpu["device"].startswith("cuda:")
    keys = sorted(c["key"] for a in gpu["arrays"] for c in a["corrupt"])
    assert keys == [key for key, _ in EXPECTED]
    assert [(a["name"], a["missing"]) for a in gpu["arrays"]] == [(a["name"], a["missing"]) for a in cpu["arrays"]]


def test_verify_a_sound_hierarchy_on_the_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = make_hierarchy(tmp_path / "h.zarr")
    status, doc = _json(capsys, "verify", str(path), "--json", "--device", "gpu")
    assert status == 0 and doc["ok"] is True


def test_bench_measures_the_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = make_hierarchy(tmp_path / "h.zarr")
    status, doc = _json(capsys, "bench", str(path / "raw"), "--crops", "4", "--repeats", "1", "--json")
    assert status == 0
    cpu, gpu = doc["rows"]
    assert cpu["device"] == "cpu" and gpu["device"].startswith("cuda:") and gpu["unavailable"] is None
    assert gpu["full_read_gbps"] > 0 and gpu["crops_per_s"] > 0


def test_demo_on_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--size", "64", "--device", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "device cuda:" in out and "equal the source: OK" in out
