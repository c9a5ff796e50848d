"""Negative steps on the GPU path: the same elements read ascending through the assemble kernel,
then reversed by one device copy, with no gather index (it took 8 bytes per result element)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr import config
from gpuzarr.backends.cuda.mirror import mirrored_plan
from gpuzarr.plan.selection import plan_selection

if TYPE_CHECKING:
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu

DATA = np.arange(37 * 29 * 6, dtype=">i4").reshape(37, 29, 6)

SELECTIONS: dict[str, Any] = {
    "all-reversed": np.s_[::-1, ::-1, ::-1],
    "one-axis": np.s_[:, ::-1],
    "steps-across-chunks": np.s_[35:2:-7, ::-3, 1:5],
    "with-an-integer": np.s_[30:0:-4, 7, ::-2],
    "a-single-element-per-chunk": np.s_[::-11, 0:3, -1],
    "reversed-mixed-with-forward-steps": np.s_[::2, 28::-5, ::-1],
    "stop-before-zero": np.s_[5::-1, 3:1:-1, :],
}


def _write(path: str, *, shards: tuple[int, ...] | None = None, zarr_format: int = 3) -> None:
    gpuzarr.create(
        path, data=DATA, chunks=(8, 5, 4), shards=shards, zarr_format=zarr_format, device="cpu"
    )


@pytest.mark.parametrize("layout", ["v3", "v3-sharded", "v2"])
@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_negative_steps_read_ascending_without_a_gather(
    emulated_gpu: EmulatedGpu, tmp_path: Path, layout: str, name: str
) -> None:
    path = str(tmp_path / "a.zarr")
    _write(
        path,
        shards=(16, 10, 8) if layout == "v3-sharded" else None,
        zarr_format=2 if layout == "v2" else 3,
    )
    selection = SELECTIONS[name]
    gpu = gpuzarr.open(path, device="gpu")
    with config.set(gpu_small_read_chunks=0):  # the device path, however small the read
        before = len(emulated_gpu.names())
        got = gpu[selection]
        calls = emulated_gpu.names()[before:]
    np.testing.assert_array_equal(np.asarray(got), DATA[selection])
    assert np.asarray(got).flags.c_contiguous
    assert "gather" not in calls, calls
    assert any(name.startswith("assemble") for name in calls), calls


def test_negative_steps_into_out(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _write(path)
    gpu = gpuzarr.open(path, device="gpu")
    selection = np.s_[35:2:-7, ::-3, 1:5]
    expected = DATA[selection].astype("=i4")  # the device holds native byte order
    with config.set(gpu_small_read_chunks=0):
        out = np.full(expected.shape, -1, dtype=expected.dtype)
        assert gpu.read(selection, out=out) is out
        np.testing.assert_array_equal(out, expected)
        strided = np.full((expected.shape[0] * 2, *expected.shape[1:]), -1, dtype=expected.dtype)[::2]
        assert gpu.read(selection, out=strided) is strided
        np.testing.assert_array_equal(strided, expected)


def test_the_small_read_rule_still_takes_small_negative_steps(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _write(path)
    gpu = gpuzarr.open(path, device="gpu")
    with config.set(gpu_small_read_chunks=None):
        before = len(emulated_gpu.names())
        got = gpu[3::-1, 0:4, 0]
        calls = emulated_gpu.names()[before:]
    np.testing.assert_array_equal(np.asarray(got), DATA[3::-1, 0:4, 0])
    assert "copy_host_to_device" in calls and "zstd" not in calls and "gather" not in calls, calls


def test_plans_that_are_no_negative_step_box_are_left_alone(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _write(path)
    array = gpuzarr.open(path, device="cpu")
    layout = array.layout
    dims = layout.dimensions()
    assert mirrored_plan(layout, plan_selection(np.s_[1:30:3, :, 2], dims)) is None  # no negative step
    ascending = mirrored_plan(layout, plan_selection(np.s_[::-1, 4, 1:3], dims))
    assert ascending is not None
    plan, axes = ascending
    assert axes == (0,)
    assert all(
        sel.step is None or sel.step > 0
        for p in plan.projections
        for sel in p.chunk_selection
        if isinstance(sel, slice)
    )
