"""Regions of an array for work spread over threads: boxes made of whole stored objects.

A region is a box of whole stored objects (chunks, or shards when sharded) of one array's
grid, so that writers of different regions never write the same stored object, and a region
written whole is encoded from its new data alone (no read-modify-write). Neighbouring objects
are grouped, last axis first, until a region holds about ``target_bytes`` of decoded data; an
object larger than that is a region alone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.info import stored_chunk_coords
from ..errors import InvalidArgumentError
from ..metadata.limits import format_bytes

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from ..core.array import Array
    from ..layout import AnyDimension

#: Decoded bytes a region aims at: large enough that per-read overheads vanish, small enough
#: that ``--jobs`` regions (and a second copy to compare with) fit in memory.
TARGET_BYTES = 64 * 2**20

Box = tuple[tuple[int, int], ...]  # [start, stop) per axis


@dataclass(frozen=True)
class Region:
    """A box of an array and the grid coordinates of the stored objects it is made of."""

    selection: tuple[slice, ...]
    object_ranges: tuple[range, ...]

    def objects(self) -> Iterator[tuple[int, ...]]:
        """Grid coordinates of the stored objects in the region, in C order."""
        return itertools.product(*self.object_ranges)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.selection)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _box_along(dim: AnyDimension, chunks: range) -> slice:
    start = int(dim.chunk_start(chunks.start))
    last = chunks[-1]
    return slice(start, min(dim.size, int(dim.chunk_start(last)) + dim.chunk_extent(last)))


def object_box(dims: Sequence[AnyDimension], coords: tuple[int, ...]) -> Box:
    """The part of the array the stored object at ``coords`` covers."""
    return tuple(
        (s.start, s.stop) for s in (_box_along(d, range(c, c + 1)) for d, c in zip(dims, coords, strict=True))
    )


#: The most regions a plan lists whole (each covers about TARGET_BYTES of the array).
MAX_REGIONS = 1 << 22
#: The most stored objects in one region.
MAX_OBJECTS_PER_REGION = 1 << 16


def _largest_extent(dim: AnyDimension) -> int:
    """The largest chunk extent along ``dim``: the chunk size of a regular grid (looping over
    2**40 chunks to find it did not end), the largest listed one of a rectilinear grid."""
    if not dim.nchunks:
        return 0
    size = getattr(dim, "chunk_size", None)
    if isinstance(size, int):
        return size
    return max(dim.chunk_extent(c) for c in range(dim.nchunks))


class RegionPlan:
    """An array cut into regions aligned to its stored objects (see the module docstring)."""

    def __init__(self, array: Array, target_bytes: int | None = None, read_from: Array | None = None) -> None:
        """``read_from``: the array each region is read from (a copy's source), when it is not
        ``array``: a region also covers at most about MAX_OBJECTS_PER_REGION of its chunks."""
        if target_bytes is None:
            target_bytes = TARGET_BYTES
        self.dims = array.metadata.chunk_grid.dimensions(array.shape)
        grid = tuple(d.nchunks for d in self.dims)
        largest = math.prod(_largest_extent(d) for d in self.dims)
        # Objects per region: by bytes, and at most MAX_OBJECTS_PER_REGION (a region of 2**26
        # one-byte chunks took minutes to read, and its plan was refused).
        budget = min(MAX_OBJECTS_PER_REGION, max(1, target_bytes // max(1, largest * array.dtype.itemsize)))
        if read_from is not None:
            # Read in smaller chunks than it is written in (a convert to larger chunks), a region
            # of 64 MiB covered 1.7 million 10-element chunks of a sparse source, whose read plan
            # alone held 1 GiB.
            read_chunk = max(1, math.prod(read_from.layout.chunk_shape))
            budget = min(budget, max(1, MAX_OBJECTS_PER_REGION * read_chunk // max(1, largest)))
        group = [1] * len(grid)
        for axis in reversed(range(len(grid))):
            group[axis] = max(1, min(grid[axis], budget))
            budget //= group[axis]
            if group[axis] < grid[axis]:
                break
        self.group = tuple(group)
        self.blocks = tuple(-(-n // g) for n, g in zip(grid, group, strict=True))
        #: how many regions the array makes (only those holding stored objects are listed where
        #: the store lists: the metadata may declare 10**12 chunks, a few of them stored)
        self.count = math.prod(self.blocks)
        self._where = f"{array.path or '/'}: shape {list(array.shape)} in chunks of {list(array.chunks)}"
        self._target = target_bytes

    @property
    def regions(self) -> list[Region]:
        """Every region, in C order (for a store that cannot list, or a copy that must write the
        fill value everywhere); refused beyond MAX_REGIONS."""
        if self.count > MAX_REGIONS:
            raise InvalidArgumentError(
                f"{self._where} makes {self.count} regions of up to {format_bytes(self._target)}, more than a copy "
                f"or a check walks ({MAX_REGIONS}) where the store cannot say which hold data"
            )
        return [self._region(block) for block in itertools.product(*(range(b) for b in self.blocks))]

    def _region(self, block: tuple[int, ...]) -> Region:
        ranges = tuple(
            range(b * g, min((b + 1) * g, d.nchunks)) for b, g, d in zip(block, self.group, self.dims, strict=True)
        )
        return Region(tuple(_box_along(d, r) for d, r in zip(self.dims, ranges, strict=True)), ranges)

    def touching(self, boxes: Iterable[Box]) -> list[Region]:
        """The regions that overlap any of ``boxes``, in the plan's order."""
        hit: set[int] = set()
        strides = [math.prod(self.blocks[a + 1 :]) for a in range(len(self.blocks))]
        for box in boxes:
            if any(start >= stop for start, stop in box):
                continue
            spans = [
                range(int(d.chunk_of(start)) // g, int(d.chunk_of(stop - 1)) // g + 1)
                for (start, stop), d, g in zip(box, self.dims, self.group, strict=True)
            ]
            hit.update(sum(i * s for i, s in zip(block, strides, strict=True)) for block in itertools.product(*spans))
        return [self._region(tuple(i // s % b for s, b in zip(strides, self.blocks, strict=True))) for i in sorted(hit)]


def stored_boxes(array: Array) -> list[Box] | None:
    """The boxes of the array's stored objects, from a listing of its keys; None when the store
    cannot list (then every region must be looked at)."""
    if not array.store.supports_listing:
        return None
    dims = array.metadata.chunk_grid.dimensions(array.shape)
    return [object_box(dims, coords) for coords in stored_chunk_coords(array, complete=True)]


def slices(box: Box) -> tuple[slice, ...]:
    """The selection of a box."""
    return tuple(slice(start, stop) for start, stop in box)


def stored_chunks(array: Array, coords: tuple[int, ...]) -> int:
    """Chunks in the stored object at ``coords`` that lie in the array (inner chunks of a shard)."""
    layout = array.layout
    return 1 if layout.sharding is None else layout.inner_chunks_in_bounds(coords)


def chunks_in(array: Array, selection: tuple[slice, ...]) -> int:
    """How many chunks (inner chunks, when sharded) of ``array`` a box touches."""
    count = 1
    for s, dim in zip(selection, array.layout.dimensions(), strict=True):
        if s.stop <= s.start:
            return 0
        count *= int(dim.chunk_of(s.stop - 1)) - int(dim.chunk_of(s.start)) + 1
    return count
