"""Selections that are not boxes (negative steps, points, index arrays) of a few chunks take the
small-read rule on the GPU path as boxes do: the CPU engine reads them and one copy takes them
to the device, instead of a whole nvCOMP batch for the bounding box."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr import config

if TYPE_CHECKING:
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu

DATA = np.arange(64 * 64, dtype="<f4").reshape(64, 64)

SMALL = {
    "negative-step": lambda a: a[3::-1, 0:4],
    "vindex": lambda a: a.vindex[[0, 1], [2, 3]],
    "oindex": lambda a: a.oindex[[5, 1], 0:4],
    "index-array": lambda a: a[[2, 0], 1:3],
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_small_selection_that_is_no_box_is_read_on_the_cpu(
    emulated_gpu: EmulatedGpu, tmp_path: Path, name: str
) -> None:
    path = str(tmp_path / "a.zarr")
    gpuzarr.create(path, data=DATA, chunks=(32, 32), device="cpu")
    read: Any = SMALL[name]
    expected = read(gpuzarr.open(path, device="cpu"))
    gpu = gpuzarr.open(path, device="gpu")
    with config.set(gpu_small_read_chunks=None):
        before = len(emulated_gpu.names())
        got = np.asarray(read(gpu))
        calls = emulated_gpu.names()[before:]
    np.testing.assert_array_equal(got, expected)
    assert "copy_host_to_device" in calls and "zstd" not in calls, calls
    with config.set(gpu_small_read_chunks=0):  # off: the device path
        before = len(emulated_gpu.names())
        np.testing.assert_array_equal(np.asarray(read(gpu)), expected)
        calls = emulated_gpu.names()[before:]
    assert "zstd" in calls, calls
    # a negative step is read ascending and reversed; the others gather from their box
    assert ("gather" in calls) == (name != "negative-step"), calls


#: (the read, what NumPy selects)
UNTOUCHED_INSIDE_THE_BOX = {
    "oindex-rows": (lambda a: a.oindex[[0, 7], :], np.s_[[0, 7], :]),
    "index-array": (lambda a: a[[0, 7]], np.s_[[0, 7]]),
    "vindex-points": (lambda a: a.vindex[[0, 7], [0, 5]], np.s_[[0, 7], [0, 5]]),
}


@pytest.mark.parametrize("name", sorted(UNTOUCHED_INSIDE_THE_BOX))
@pytest.mark.parametrize("case", ["corrupt", "missing"])
def test_a_gathered_read_reads_only_the_chunks_its_selection_touches(
    emulated_gpu: EmulatedGpu, tmp_path: Path, name: str, case: str
) -> None:
    """The whole bounding box was read: a corrupt chunk inside it that the selection does not
    touch failed the GPU read (and a missing one under fill_missing_data_reads=False), where the
    CPU path reads only the chunks it needs, and every chunk of the box cost its decode."""
    path = tmp_path / "a.zarr"
    data = np.arange(48, dtype="<i4").reshape(8, 6)
    gpuzarr.create(str(path), data=data, chunks=(2, 6), device="cpu")
    untouched = path / "c" / "1" / "0"  # rows 2 and 3
    if case == "corrupt":
        untouched.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 5)
    else:
        untouched.unlink()
    read, selection = UNTOUCHED_INSIDE_THE_BOX[name]
    for device in ("cpu", "gpu"):
        opened = gpuzarr.open(str(path), device=device)
        array = gpuzarr.Array(opened.store, opened.path, opened.metadata, device=device, fill_missing_data_reads=False)
        np.testing.assert_array_equal(np.asarray(read(array)), data[selection])
