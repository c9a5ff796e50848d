"""Box copies between separate device arrays in one assemble launch (``box_copies_launch`` and
``Device.assemble_boxes``), on the emulated device: what the loader's chunk caches use to put a
batch together. The same launch on a GPU: tests/gpu/test_kernels_gpu.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuzarr.backends.cuda.launches import box_copies_launch
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice


def _random_boxes(
    rng: np.random.Generator, ndim: int, rows: int, nboxes: int
) -> tuple[tuple[int, ...], list[np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
    """Sources of random shapes and one box of each, copied to a random place in a row of the
    output of its own (``nboxes <= rows``), so that no two boxes overlap there."""
    row_shape = tuple(int(n) for n in rng.integers(3, 9, size=ndim))
    shapes = rng.integers(1, 7, size=(nboxes, ndim))
    extent = np.minimum(rng.integers(1, 7, size=(nboxes, ndim)), np.minimum(shapes, row_shape))
    src_start = rng.integers(0, shapes - extent + 1)
    dst_start = rng.integers(0, np.asarray(row_shape) - extent + 1)
    sources = [rng.integers(0, 1 << 30, size=tuple(s), dtype=np.int32) for s in shapes.tolist()]
    boxes = {
        "shapes": shapes,
        "src_start": src_start,
        "row": rng.permutation(rows)[:nboxes],
        "dst_start": dst_start,
        "extent": extent,
    }
    return (rows, *row_shape), sources, boxes


def _expected(out_shape: tuple[int, ...], sources: list[np.ndarray[Any, Any]], b: dict[str, Any]) -> Any:
    out = np.full(out_shape, -1, dtype=np.int32)
    for i, source in enumerate(sources):
        src = tuple(slice(s, s + e) for s, e in zip(b["src_start"][i], b["extent"][i], strict=True))
        dst = tuple(slice(d, d + e) for d, e in zip(b["dst_start"][i], b["extent"][i], strict=True))
        out[(int(b["row"][i]), *dst)] = source[src]
    return out


def _launch(out_shape: tuple[int, ...], b: dict[str, Any], itemsize: int = 4) -> Any:
    return box_copies_launch(out_shape, itemsize, b["shapes"], b["src_start"], b["row"], b["dst_start"], b["extent"])


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_box_copies_equal_numpy_slicing(ndim: int) -> None:
    rng = np.random.default_rng(ndim)
    for _ in range(5):
        out_shape, sources, boxes = _random_boxes(rng, ndim, rows=12, nboxes=10)
        out = np.full(out_shape, -1, dtype=np.int32)
        device = CpuEmulatedDevice()
        device.assemble_boxes(out, sources, _launch(out_shape, boxes))
        np.testing.assert_array_equal(out, _expected(out_shape, sources, boxes))
        assert device.calls == [("assemble_chunks", 10)]  # one launch for every box


def test_one_source_serves_several_boxes() -> None:
    source = np.arange(16, dtype=np.uint16).reshape(4, 4)
    out = np.zeros((2, 2, 2), dtype=np.uint16)
    launch = box_copies_launch((2, 2, 2), 2, [(4, 4), (4, 4)], [(0, 0), (2, 2)], [0, 1], [(0, 0), (0, 0)], [(2, 2)] * 2)
    CpuEmulatedDevice().assemble_boxes(out, [source, source], launch)
    np.testing.assert_array_equal(out, [source[:2, :2], source[2:, 2:]])


def test_a_box_past_its_source_or_the_output_is_refused() -> None:
    source = np.zeros((4, 4), dtype=np.uint16)
    out = np.zeros((1, 4, 4), dtype=np.uint16)
    device = CpuEmulatedDevice()
    past_source = box_copies_launch((1, 4, 4), 2, [(4, 4)], [(2, 0)], [0], [(0, 0)], [(3, 4)])
    with pytest.raises(ValueError, match="outside its decoded buffer"):
        device.assemble_boxes(out, [source], past_source)
    past_out = box_copies_launch((1, 4, 4), 2, [(4, 4)], [(0, 0)], [1], [(0, 0)], [(2, 2)])
    with pytest.raises(ValueError, match="outside the output"):
        device.assemble_boxes(out, [source], past_out)
    assert device.calls == [("assemble_chunks", 1)] * 2 and not out.any()


def test_sources_that_do_not_match_the_launch_are_refused() -> None:
    launch = box_copies_launch((1, 4, 4), 2, [(4, 4)], [(0, 0)], [0], [(0, 0)], [(2, 2)])
    out = np.zeros((1, 4, 4), dtype=np.uint16)
    device = CpuEmulatedDevice()
    with pytest.raises(ValueError, match="source 0 holds 18 bytes, its shape needs 32"):
        device.assemble_boxes(out, [np.zeros(9, dtype=np.uint16)], launch)
    with pytest.raises(ValueError, match="2 sources for 1 boxes"):
        device.assemble_boxes(out, [np.zeros((4, 4), np.uint16)] * 2, launch)
    with pytest.raises(ValueError, match="C-contiguous"):
        device.assemble_boxes(out, [np.zeros((4, 8), np.uint16)[:, ::2]], launch)
    with pytest.raises(ValueError, match="C-contiguous"):
        device.assemble_boxes(np.zeros((1, 4, 8), np.uint16)[..., ::2], [np.zeros((4, 4), np.uint16)], launch)
