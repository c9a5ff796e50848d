"""``benchmarks.loader_host_share``: one checked pass on the emulated device, then passes whose
box-copy launches only check their arguments (no timing is looked at)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from benchmarks import loader_host_share
from gpuzarr.backends.cuda.box_copies import box_copies
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice

if TYPE_CHECKING:
    from pathlib import Path


def test_a_run_checks_its_crops_and_reports_the_hosts_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert loader_host_share.main(["--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "40", "--passes", "2",
                                   "--phases"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "host share of a pass: median" in out and "over 2 passes" in out
    assert "| loader-assemble | 2 |" in out  # 40 crops: two batches, each one launch
    assert "| loader-window-plan |" in out


def test_launches_that_only_check_still_refuse_wrong_arguments_and_copy_nothing() -> None:
    copies = box_copies((1, 4, 4), 2, [(4, 4)], [0], [0], [(0, 0)], [(0, 0)], [(2, 2)])
    out = np.zeros((1, 4, 4), dtype=np.uint16)
    source = np.ones((4, 4), dtype=np.uint16)
    device = CpuEmulatedDevice()
    with loader_host_share.launches_checked_only():
        device.assemble_boxes(out, [source], copies)
        with pytest.raises(ValueError, match="its shape needs 32"):
            device.assemble_boxes(out, [source[:2]], copies)
    assert not out.any() and device.calls == [("assemble_chunks", 1)] * 2
    device.assemble_boxes(out, [source], copies)  # copies again after the block
    assert out.sum() == 4
