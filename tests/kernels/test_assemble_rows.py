"""``assemble_rows`` (kernels/assemble.cu) without a GPU: the kernel's loops ported line by line
to Python (every block, warp and lane of a small grid) must write what the NumPy model of
``assemble_chunks`` writes, on random geometries; and the host's choice between the two kernels
and its grid."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuzarr.backends.cuda import kernel_reference as ref
from gpuzarr.backends.cuda import kernels
from gpuzarr.backends.cuda.launch_checks import check_assemble

from .assemble_geometry import random_chunk_geometry

POISON = 0xAB


def walk_rows(
    out: np.ndarray[Any, Any],
    out_strides: np.ndarray[Any, Any],
    sources: list[np.ndarray[Any, Any] | None],
    src_strides: np.ndarray[Any, Any],
    src_offsets: np.ndarray[Any, Any],
    src_steps: np.ndarray[Any, Any],
    dst_offsets: np.ndarray[Any, Any],
    extents: np.ndarray[Any, Any],
    fill_value: np.ndarray[Any, Any],
    nchunks: int,
    ndim: int,
    itemsize: int,
    grid: tuple[int, int, int],
    block: int,
) -> None:
    """assemble_rows_typed's loops, as written in assemble.cu (byte swapping left out)."""
    out_items = out.view(f"V{itemsize}")
    warps = grid[0] * block >> 5
    for by in range(grid[1]):
        for c in range(by, nchunks, grid[1]):
            # thread 0's geometry
            src_base = out_base = 0
            rows = 1
            extent, src_step, out_stride = [0] * 8, [0] * 8, [0] * 8
            for d in range(ndim):
                extent[d] = int(extents[c, d])
                src_step[d] = int(src_strides[c, d] * src_steps[c, d])
                out_stride[d] = int(out_strides[d])
                src_base += int(src_offsets[c, d] * src_strides[c, d])
                out_base += int(dst_offsets[c, d] * out_strides[d])
                if d < ndim - 1:
                    rows *= int(extents[c, d])
            inner = extent[ndim - 1] if ndim > 0 else 1
            inner_src = src_step[ndim - 1] if ndim > 0 else 0
            inner_out = out_stride[ndim - 1] if ndim > 0 else 0
            rows = rows if inner > 0 else 0
            source = sources[c]
            src_items = None if source is None else source.view(f"V{itemsize}")
            fill = fill_value[:itemsize].view(f"V{itemsize}")[0]
            for first_warp in range(warps):
                for r in range(first_warp, rows, warps):
                    rem, s, o = r, src_base, out_base
                    for d in range(ndim - 2, 0, -1):
                        q = rem // extent[d]
                        k = rem - q * extent[d]
                        s += k * src_step[d]
                        o += k * out_stride[d]
                        rem = q
                    if ndim > 1:
                        s += rem * src_step[0]
                        o += rem * out_stride[0]
                    for lane in range(32):
                        for k in range(lane, inner, 32):
                            out_items[o + k * inner_out] = fill if src_items is None else src_items[s + k * inner_src]


def _geometry(rng: np.random.Generator, ndim: int, nchunks: int, most: int) -> dict[str, Any]:
    """:func:`random_chunk_geometry` plus each chunk's element strides in a random axis order."""
    g = random_chunk_geometry(rng, ndim, nchunks, most)
    strides = []
    for shape in g["chunk_shapes"]:
        order = rng.permutation(ndim)
        stored = np.cumprod([1, *[int(shape[a]) for a in order][::-1]])[:-1][::-1]
        strides.append([int(stored[list(order).index(d)]) for d in range(ndim)])
    return {**g, "shapes": g["chunk_shapes"], "strides": np.array(strides, np.int64).reshape(nchunks, ndim)}


@pytest.mark.parametrize("ndim", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("itemsize", [1, 2, 8])
@pytest.mark.parametrize("grid_x", [None, 1, 3])
def test_the_rows_walk_writes_what_the_model_writes(ndim: int, itemsize: int, grid_x: int | None) -> None:
    rng = np.random.default_rng(ndim * 100 + itemsize * 10 + (grid_x or 0))
    nchunks = int(rng.integers(1, 12))
    g = _geometry(rng, ndim, nchunks, most=40 if ndim <= 2 else 9)
    out_elems = int(np.prod(g["out_shape"]))
    out_strides = [int(x) for x in np.cumprod([1, *g["out_shape"][::-1]])[:-1][::-1]]
    sources: list[np.ndarray[Any, Any] | None] = [
        None if c % 4 == 3 else rng.integers(0, 256, int(np.prod(shape)) * itemsize, dtype=np.uint8)
        for c, shape in enumerate(g["shapes"])
    ]
    fill = rng.integers(0, 256, 8, dtype=np.uint8)
    tables = check_assemble(
        out_elems * itemsize, out_strides, [None if s is None else s.nbytes for s in sources], g["strides"],
        g["offsets"], g["steps"], g["dst"], g["extents"], itemsize, 0,
    )  # fmt: skip
    expected = np.full(out_elems * itemsize, POISON, np.uint8)
    ref.assemble_rows(expected, tables[0], sources, *tables[1:], fill, nchunks, ndim, itemsize, 0)
    name, grid = kernels.assemble_kernel_and_grid(tables[5], ndim, variant="rows")
    assert name == "assemble_rows"
    if grid_x is not None:  # fewer warps than rows: the grid-stride loop over rows
        grid = (grid_x, min(grid[1], 2), 1)
    got = np.full(out_elems * itemsize, POISON, np.uint8)
    walk_rows(got, tables[0], sources, *tables[1:], fill, nchunks, ndim, itemsize, grid, 64)
    np.testing.assert_array_equal(got, expected)


def test_the_rows_walk_of_a_zero_dimensional_chunk() -> None:
    tables = check_assemble(8, [], [8], np.zeros((1, 0)), np.zeros((1, 0)), np.ones((1, 0)), np.zeros((1, 0)),
                            np.ones((1, 0)), 8, 0)  # fmt: skip
    source = np.arange(8, dtype=np.uint8)
    got = np.full(8, POISON, np.uint8)
    walk_rows(got, tables[0], [source], *tables[1:], np.zeros(8, np.uint8), 1, 0, 8, (1, 1, 1), 32)
    np.testing.assert_array_equal(got, source)


def _extents(rows: list[list[int]]) -> np.ndarray[Any, Any]:
    table = np.ones((len(rows), 8), np.int64)
    for i, row in enumerate(rows):
        table[i, : len(row)] = row
    return table


def test_long_rows_take_the_row_kernel_short_ones_the_item_kernel() -> None:
    crops = _extents([[1, 64, 64, 64], [1, 30, 64, 17], [1, 34, 5, 47]])
    assert kernels.assemble_kernel_and_grid(crops, 4)[0] == "assemble_rows"
    columns = _extents([[512, 1], [512, 3]])
    assert kernels.assemble_kernel_and_grid(columns, 2)[0] == "assemble_chunks"
    assert kernels.assemble_kernel_and_grid(columns, 2, variant="rows")[0] == "assemble_rows"
    assert kernels.assemble_kernel_and_grid(crops, 4, variant="items")[0] == "assemble_chunks"
    assert kernels.assemble_kernel_and_grid(_extents([[]]), 0)[0] == "assemble_chunks"  # 0-d
    with pytest.raises(ValueError, match="variant"):
        kernels.assemble_kernel_and_grid(crops, 4, variant="warps")


def test_the_row_grid_follows_the_mean_chunk_and_bounds_the_largest() -> None:
    block = kernels.BLOCK_THREADS
    per_block = block // kernels.WARP_THREADS
    # 100 small pieces of 16 rows and one of 4096: the grid covers the mean, and a
    # ROWS_LOOP_LIMIT-th of the largest.
    pieces = _extents([[1, 4, 4, 64]] * 100 + [[1, 64, 64, 64]])
    _, (x, y, z) = kernels.assemble_kernel_and_grid(pieces, 4, block)
    assert (y, z) == (101, 1)
    assert x * per_block >= 4096 // kernels.ROWS_LOOP_LIMIT
    assert x * per_block < 4096  # not sized by the largest piece
    uniform = _extents([[64, 64, 64]] * 8)
    _, (x, _, _) = kernels.assemble_kernel_and_grid(uniform, 3, block)
    assert x == 64 * 64 // per_block
    many = _extents([[1, 64]] * 70_000)
    _, (_, y, _) = kernels.assemble_kernel_and_grid(many, 2, block)
    assert y == kernels.MAX_GRID_Y


@pytest.mark.parametrize("block", [0, 16, 48, 100, 2048])
def test_blocks_that_are_not_whole_warps_are_refused(block: int) -> None:
    # assemble_rows takes 32 consecutive threads for a warp: a block of 48 would leave elements
    # unwritten, so neither kernel takes one.
    with pytest.raises(ValueError, match="multiple of 32"):
        kernels.assemble_kernel_and_grid(_extents([[1, 64, 64, 64]]), 4, block)
    with pytest.raises(ValueError, match="multiple of 32"):
        kernels.assemble_kernel_and_grid(_extents([[64, 3]]), 2, block, variant="items")


@pytest.mark.parametrize("block", [32, 64, 1024])
def test_whole_warp_blocks_are_taken(block: int) -> None:
    name, (x, y, z) = kernels.assemble_kernel_and_grid(_extents([[1, 64, 64, 64]]), 4, block)
    assert name == "assemble_rows" and x >= 1 and (y, z) == (1, 1)
