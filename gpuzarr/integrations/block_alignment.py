"""Blocks of a parallel read or write (Dask's ``chunks``: the block sizes along each axis) set
against a Zarr chunk grid. Pure NumPy, so that it is tested without Dask.

A block boundary that falls inside a chunk means that two blocks touch that chunk. Reading, the
chunk is then decoded by two tasks (slower, still correct). Writing, two tasks read, modify and
write the same stored object (a chunk, or a whole shard): correct only where the store's lock
or conditional writes reach every writer (docs/reliability.md), so the writers refuse it unless
told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..layout import AnyDimension


def grid_blocks(dims: Sequence[AnyDimension]) -> tuple[tuple[int, ...], ...]:
    """The grid's chunks within the array, as block sizes per axis (Dask's ``chunks``).

    An empty axis is ``(0,)``, as Dask writes it. InvalidArgumentError where an axis has more
    than :data:`MAX_BLOCKS_PER_AXIS` chunks: Dask lists every block's size (an array declaring
    2**40 chunks along an axis ended in a bare MemoryError).
    """
    for axis, dim in enumerate(dims):
        if dim.nchunks > MAX_BLOCKS_PER_AXIS:
            raise InvalidArgumentError(
                f"to_dask: axis {axis} has {dim.nchunks} chunks, more than a Dask array's blocks "
                f"({MAX_BLOCKS_PER_AXIS}: Dask lists every block's size)"
            )
    return tuple(dim.valid_extents() or (0,) for dim in dims)


#: The most stored chunks along one axis that become Dask blocks one for one.
MAX_BLOCKS_PER_AXIS = 1 << 24


@dataclass(frozen=True)
class SplitChunk:
    """Blocks ``block`` and ``next_block`` of ``axis`` meet at ``index``, inside grid chunk
    ``chunk`` (indices ``chunk_start`` to ``chunk_stop``) of that axis."""

    axis: int
    block: int
    next_block: int
    index: int
    chunk: int
    chunk_start: int
    chunk_stop: int

    def describe(self, unit: str) -> str:
        """``"axis 1: Dask blocks 2 and 3 meet at index 150, inside shard 1 (indices 128 to 256)"``."""
        return (
            f"axis {self.axis}: Dask blocks {self.block} and {self.next_block} meet at index {self.index}, "
            f"inside {unit} {self.chunk} (indices {self.chunk_start} to {self.chunk_stop})"
        )


def first_split(
    blocks: Sequence[Sequence[int]], dims: Sequence[AnyDimension], offset: Sequence[int] | None = None
) -> SplitChunk | None:
    """The first place where two blocks share a chunk of the grid ``dims``, or None.

    ``blocks`` are the block sizes per axis, laid from ``offset`` (default: the origin) in the
    array that ``dims`` cut into chunks. Empty blocks touch nothing; an array region with no
    elements has no shared chunk.
    """
    if any(sum(sizes) == 0 for sizes in blocks):
        return None
    for axis, (sizes, dim) in enumerate(zip(blocks, dims, strict=True)):
        lengths = np.asarray(sizes, dtype=np.int64)
        filled = np.flatnonzero(lengths)  # empty blocks neither write nor split anything
        if filled.size < 2:
            continue
        start = 0 if offset is None else int(offset[axis])
        ends = start + np.cumsum(lengths)
        # Where each non-empty block (but the last) ends, the next non-empty one starts.
        boundaries = ends[filled[:-1]]
        chunks = np.asarray(dim.chunk_of(boundaries), dtype=np.int64)
        starts = np.asarray(dim.chunk_start(chunks), dtype=np.int64)
        inside = np.flatnonzero(starts != boundaries)
        if inside.size:
            k = int(inside[0])
            chunk = int(chunks[k])
            chunk_start = int(starts[k])
            return SplitChunk(
                axis,
                int(filled[k]),
                int(filled[k + 1]),
                int(boundaries[k]),
                chunk,
                chunk_start,
                min(chunk_start + dim.chunk_extent(chunk), dim.size),
            )
    return None
