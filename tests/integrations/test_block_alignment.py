"""Block boundaries against chunk grids (regular and rectilinear), without Dask."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuzarr.integrations.block_alignment import SplitChunk, first_split, grid_blocks
from gpuzarr.metadata.chunk_grid import RegularChunkGrid
from gpuzarr.metadata.rectilinear import RectilinearChunkGrid

REGULAR = RegularChunkGrid((8, 10)).dimensions((37, 29))
# Axis 0 lists 5 + 12 + 30 = 47 for an extent of 37: the last chunk reaches past the edge.
RECTILINEAR = RectilinearChunkGrid(((5, 12, 30), (3, 26))).dimensions((37, 29))


def test_grid_blocks_are_the_chunks_within_the_array() -> None:
    assert grid_blocks(REGULAR) == ((8, 8, 8, 8, 5), (10, 10, 9))
    assert grid_blocks(RECTILINEAR) == ((5, 12, 20), (3, 26))
    assert grid_blocks(RegularChunkGrid((4,)).dimensions((0,))) == ((0,),)
    assert grid_blocks(RectilinearChunkGrid(((4, 4),)).dimensions((0,))) == ((0,),)


@pytest.mark.parametrize("dims", [REGULAR, RECTILINEAR], ids=["regular", "rectilinear"])
def test_the_grid_itself_and_its_unions_split_nothing(dims: Any) -> None:
    blocks = grid_blocks(dims)
    assert first_split(blocks, dims) is None
    merged = tuple((sum(sizes[:2]), *sizes[2:]) if len(sizes) > 2 else sizes for sizes in blocks)
    assert first_split(merged, dims) is None


def test_a_boundary_inside_a_chunk_is_named() -> None:
    assert first_split(((8, 8, 21), (12, 17)), REGULAR) == SplitChunk(1, 0, 1, 12, 1, 10, 20)
    split = first_split(((8, 4, 25), (29,)), REGULAR)
    assert split == SplitChunk(0, 1, 2, 12, 1, 8, 16)
    assert split.describe("shard") == "axis 0: Dask blocks 1 and 2 meet at index 12, inside shard 1 (indices 8 to 16)"
    # On a rectilinear axis the chunk is [5, 17); the last chunk is cut at the array's edge.
    assert first_split(((10, 27), (29,)), RECTILINEAR) == SplitChunk(0, 0, 1, 10, 1, 5, 17)
    assert first_split(((17, 10, 10), (29,)), RECTILINEAR) == SplitChunk(0, 1, 2, 27, 2, 17, 37)


def test_offsets_shift_the_blocks() -> None:
    # Blocks of 8 from index 4 end at 12, inside chunk 1; from index 8 they end on boundaries.
    assert first_split(((8, 8), (29,)), REGULAR, offset=(4, 0)) == SplitChunk(0, 0, 1, 12, 1, 8, 16)
    assert first_split(((8, 8), (29,)), REGULAR, offset=(8, 0)) is None
    # One block has no inner boundary, wherever it starts.
    assert first_split(((3,), (29,)), REGULAR, offset=(5, 0)) is None


def test_empty_blocks_share_nothing() -> None:
    assert first_split(((8, 0, 8, 0, 21), (29,)), REGULAR) is None
    # An empty block between two others does not hide their shared chunk; they are named.
    assert first_split(((12, 0, 25), (29,)), REGULAR) == SplitChunk(0, 0, 2, 12, 1, 8, 16)
    # A region without elements writes nothing.
    assert first_split(((12, 25), (0,)), REGULAR) is None


def test_many_blocks_are_checked_at_once() -> None:
    dims = RegularChunkGrid((10,)).dimensions((10**6,))
    blocks = (tuple(np.full(10**5, 10)),)
    assert first_split(blocks, dims) is None
    shifted = ((*blocks[0][:-2], 5, 15),)
    assert first_split(shifted, dims) == SplitChunk(0, 99998, 99999, 999985, 99998, 999980, 999990)


def test_an_axis_of_more_chunks_than_dask_lists_is_refused_by_name() -> None:
    """An array declaring 2**40 chunks along an axis: building Dask's block sizes ended in a
    bare MemoryError (as dask.array.from_zarr does with zarr-python)."""
    import gpuzarr
    from gpuzarr.errors import InvalidArgumentError

    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(1 << 40,), dtype="u1", chunks=(1,), device="cpu")
    with pytest.raises(InvalidArgumentError, match=r"axis 0 has 1099511627776 chunks, more than a Dask array's blocks"):
        gpuzarr.to_dask(array)


def test_block_sizes_given_need_no_listing_of_the_stored_chunks() -> None:
    """``chunks=`` of sizes lays few blocks over such an axis, as ``da.from_array`` does; it
    was refused for the stored grid. ``"auto"``, which grows blocks from the stored chunks,
    says to give sizes."""
    import gpuzarr
    from gpuzarr.errors import InvalidArgumentError

    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(1 << 40,), dtype="u1", chunks=(1,), fill_value=7)
    blocks = gpuzarr.to_dask(array, chunks=1 << 30)
    assert blocks.numblocks == (1024,) and blocks.chunks[0][:2] == (1 << 30, 1 << 30)
    small = gpuzarr.create(gpuzarr.MemoryStore(), shape=(1 << 26,), dtype="u1", chunks=(1,), fill_value=7)
    np.testing.assert_array_equal(gpuzarr.to_dask(small, chunks={0: 4096})[:3].compute(), [7, 7, 7])
    with pytest.raises(InvalidArgumentError, match=r"chunks='auto' grows blocks from them: give block sizes"):
        gpuzarr.to_dask(array, chunks="auto")


@pytest.mark.parametrize(("chunks", "extent", "stored"), [("1MiB", 1000, 300), (["auto", "auto"], 20000, 3000)])
def test_sizes_dask_chooses_still_start_from_the_stored_chunks(chunks: Any, extent: int, stored: int) -> None:
    """A byte size and a list of "auto" are sized by Dask, which lays them in multiples of the
    stored chunks where it is told them (it cut chunks in two otherwise)."""
    import gpuzarr

    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(extent, extent), dtype="f8", chunks=(stored, stored))
    blocks = gpuzarr.to_dask(array, chunks=chunks)
    assert all(size % stored == 0 for size in blocks.chunks[0][:-1]), blocks.chunks[0]
