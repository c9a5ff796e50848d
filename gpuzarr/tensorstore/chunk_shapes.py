"""Choosing the chunk shapes of a new array from chunk layout constraints, as TensorStore does.

:func:`choose_chunk_shapes` picks what TensorStore's ``zarr3`` driver (and, with
``zarr_format=2``, its ``zarr`` driver) picks when it creates an array, so an array that gpuzarr
creates from a chunk layout is chunked like one that TensorStore would create. In short:

1. explicit sizes (``shape``, with -1 meaning the dimension's extent) are taken as given;
2. the remaining sizes follow the aspect ratio, scaled by a common factor found by bisection so
   that the chunk holds about ``elements`` elements (default 1024 * 1024) and not more; each size
   is clamped to ``[1, extent]``. The bisection stops at a fixed resolution, so the result is not
   always the largest fitting chunk; it is reproduced step for step to agree with TensorStore;
3. the write (shard) chunk must be a multiple of the read chunk in every dimension: a soft read
   size moves to the nearest divisor of the write size, a soft write size to the nearest multiple
   of the read size; two hard sizes that disagree are an error. The read chunk is chosen first,
   then the write chunk in multiples of it. zarr v2 has one chunk: read and write constraints are
   merged (a conflict between hard ones is an error) and one shape is chosen.

The data type plays no part in the choice (only in rejecting chunks too large to encode). Pure
Python. The constraints themselves are parsed in :mod:`gpuzarr.tensorstore.chunk_layout`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MetadataError
from ._divisors import nearest_divisor
from .chunk_layout import _INT64_MAX, _MAX_FINITE_INDEX, ChunkLayoutConstraints, _Grid

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "ChosenLayout", "choose_chunk_shapes"]

#: Target number of elements per chunk when no ``elements`` constraint is given.
DEFAULT_CHUNK_ELEMENTS = 1024 * 1024

#: Most inner chunks one shard may hold (the sharding codec's limit on its index).
MAX_INNER_CHUNKS_PER_SHARD = 1024**3



@dataclass(frozen=True)
class ChosenLayout:
    """The chunking chosen for a new array.

    ``write_chunk`` is the stored chunk (the shard when sharded), ``read_chunk`` the inner chunk;
    they are equal when no sharding is needed, always for ``zarr_format=2``. ``inner_order`` is
    the storage order of dimensions within a chunk, outermost first.
    """

    read_chunk: tuple[int, ...]
    write_chunk: tuple[int, ...]
    inner_order: tuple[int, ...]

    @property
    def sharded(self) -> bool:
        """Whether the write chunk holds several read chunks (a sharding codec is needed)."""
        return self.read_chunk != self.write_chunk


def _nearest_multiple(divisor: int, target: int) -> int:
    """The multiple of ``divisor`` nearest ``target``, at least ``divisor``; ties go down."""
    if target < divisor:
        return divisor
    lower = target // divisor * divisor
    upper = lower + divisor
    if upper > _MAX_FINITE_INDEX:  # the next multiple up would not be a valid size
        return lower
    return lower if target - lower <= upper - target else upper


def _fill_from_aspect_ratio(  # noqa: C901 - TensorStore's algorithm step by step
    aspect_ratio: Sequence[float],
    chunk: list[int],
    target_elements: int,
    extent: Sequence[int],
    map_size: Callable[[int, int], int],
) -> None:
    """Fill the 0 entries of ``chunk`` in proportion to ``aspect_ratio``.

    Every free size is ``ratio[i] * factor`` (clamped to ``[1, extent]``, then passed through
    ``map_size``), where the ratios are scaled so that the largest free one is 1. ``factor`` is
    searched by bisection (geometric while the bracket spans more than a factor of 4, then
    arithmetic) for the largest chunk not above ``target_elements``; the search stops once the
    bracket is narrower than half a step of the finest dimension, so it can settle just short of
    the best size. The arithmetic is IEEE double throughout, as in TensorStore, so every midpoint
    and hence the result is the same.
    """
    rank = len(chunk)
    # Just below 2**62, so that a size converted back to an integer stays a finite index.
    size_cap = float.fromhex("0x1.fffffffffffffp61")
    max_size = [min(float(target_elements), max(1.0, float(n)), size_cap) for n in extent]

    largest = 0.0
    for i in range(rank):
        if chunk[i] == 0 and math.isfinite(aspect_ratio[i]) and aspect_ratio[i] > largest:
            largest = aspect_ratio[i]
    ratio: list[float] = []
    for a in aspect_ratio:
        if not math.isfinite(a) or a <= 0:
            r = 1.0
        elif largest > 0:
            r = a / largest
            if r == 0:  # underflow: keep the dimension alive at the smallest normal double
                r = sys.float_info.min
        else:
            r = a
        ratio.append(r)

    def size_at(i: int, factor: float) -> int:
        if chunk[i] != 0:
            return chunk[i]
        return map_size(i, max(1, int(min(ratio[i] * factor, max_size[i]))))

    def elements_at(factor: float) -> int:
        total = 1
        for i in range(rank):
            total *= size_at(i, factor)
            if total > _INT64_MAX:  # saturate like the int64 product it mirrors
                return _INT64_MAX
        return total

    min_factor_increment = math.inf
    max_factor = 0.0
    for i in range(rank):
        if chunk[i] == 0:
            min_factor_increment = min(min_factor_increment, 1.0 / ratio[i])
            max_factor = max(max_factor, max_size[i] / ratio[i])
    # Leeway for rounding at both ends of the search range, kept finite and nonzero.
    min_factor_increment = max(min_factor_increment / 2, sys.float_info.min)
    max_factor = min(max_factor, sys.float_info.max / 4.0) * 2.0

    min_factor = min_factor_increment
    max_factor_elements = elements_at(max_factor)
    for _ in range(100):
        if not min_factor + min_factor_increment < max_factor:
            break
        if max_factor > min_factor * 4.0 and min_factor > 0:
            mid_factor = math.sqrt(min_factor * max_factor)
        else:
            mid_factor = min_factor + (max_factor - min_factor) / 2.0
        if not math.isfinite(mid_factor) or mid_factor <= min_factor or mid_factor >= max_factor:
            break
        mid_elements = elements_at(mid_factor)
        if mid_elements >= target_elements:
            max_factor = mid_factor
            max_factor_elements = mid_elements
        if mid_elements <= target_elements:
            min_factor = mid_factor
    factor = max_factor if max_factor_elements == target_elements else min_factor
    for i in range(rank):
        chunk[i] = size_at(i, factor)


def _initial_chunk(grid: _Grid, extent: Sequence[int]) -> tuple[list[int], list[bool]]:
    """Sizes fixed by the shape constraint (0 = still free) and which of them are hard."""
    chunk = list(grid.shape.values)
    hard = list(grid.shape.hard)
    for i, size in enumerate(chunk):
        if size == 0:
            hard[i] = False
        elif size == -1:
            chunk[i] = max(1, extent[i])
    return chunk, hard


def _complete_chunk(
    grid: _Grid, extent: Sequence[int], chunk: list[int], map_size: Callable[[int, int], int]
) -> None:
    """Choose the still-free sizes of ``chunk`` from the grid's aspect ratio and element count."""
    if 0 not in chunk:
        return
    # An aspect ratio of 0 means "unconstrained", which is the same as 1.
    aspect_ratio = [a if a != 0 else 1.0 for a in grid.aspect_ratio.values]
    target = grid.elements if grid.elements is not None else DEFAULT_CHUNK_ELEMENTS
    _fill_from_aspect_ratio(aspect_ratio, chunk, target, extent, map_size)


def _choose_read_write(read: _Grid, write: _Grid, extent: Sequence[int]) -> tuple[list[int], list[int]]:
    """Read and write chunk shapes for a format with sharding (zarr v3)."""
    write_chunk, write_hard = _initial_chunk(write, extent)
    read_chunk, read_hard = _initial_chunk(read, extent)
    # Where both sizes are given, the write size must be a multiple of the read size.
    for i in range(len(extent)):
        read_size, write_size = read_chunk[i], write_chunk[i]
        if read_size == 0 or write_size == 0 or write_size % read_size == 0:
            continue
        if read_hard[i] and write_hard[i]:
            raise MetadataError(
                f"chunk_layout: incompatible chunk size constraints for dimension {i}: "
                f"read size of {read_size}, write size of {write_size}"
            )
        if read_hard[i]:
            write_chunk[i] = _nearest_multiple(read_size, write_size)
        else:
            # The write size wins when it is hard, and also when neither is.
            read_chunk[i] = nearest_divisor(write_size, read_size)

    def map_read_size(i: int, size: int) -> int:
        return nearest_divisor(write_chunk[i], size) if write_chunk[i] != 0 else size

    _complete_chunk(read, extent, read_chunk, map_read_size)

    def map_write_size(i: int, size: int) -> int:
        return _nearest_multiple(read_chunk[i], size)

    _complete_chunk(write, extent, write_chunk, map_write_size)
    return read_chunk, write_chunk


def _choose_single(read: _Grid, write: _Grid, extent: Sequence[int]) -> list[int]:
    """One chunk shape serving both reads and writes (zarr v2, which cannot shard)."""
    try:
        read.merge_grid(write, "chunk_layout.write_chunk")
    except MetadataError as error:
        raise MetadataError(
            "chunk_layout: write_chunk constraints not compatible with existing read_chunk "
            f"constraints: {error}"
        ) from None
    chunk, _ = _initial_chunk(read, extent)
    _complete_chunk(read, extent, chunk, lambda i, size: size)
    return chunk


def _check_encodable(chunk: Sequence[int], itemsize: int) -> None:
    """Reject a chunk whose size in bytes does not fit in an int64."""
    if math.prod(chunk) * itemsize > _INT64_MAX:
        raise MetadataError(
            f"chunk_layout: a chunk of shape {list(chunk)} with {itemsize}-byte elements is too large "
            f"to encode (more than 2**63 - 1 bytes)"
        )


def _check_shard_grid(read_chunk: Sequence[int], write_chunk: Sequence[int]) -> None:
    """Reject a shard that would hold more inner chunks than a shard index may list."""
    grid = [w // r for r, w in zip(read_chunk, write_chunk)]
    if math.prod(grid) > MAX_INNER_CHUNKS_PER_SHARD:
        raise MetadataError(
            f"chunk_layout: write chunk {list(write_chunk)} holds a grid of {grid} read chunks, "
            f"more than {MAX_INNER_CHUNKS_PER_SHARD} entries"
        )


def choose_chunk_shapes(
    shape: tuple[int, ...] | Sequence[int],
    constraints: ChunkLayoutConstraints | None = None,
    *,
    zarr_format: int = 3,
    itemsize: int = 1,
    single_chunk: bool = False,
) -> ChosenLayout:
    """Choose read and write chunk shapes for a new array, as TensorStore does.

    Parameters
    ----------
    shape
        The array shape (finite; dimensions of length 0 get chunk size 1).
    constraints
        Chunk layout constraints; ``None`` means none.
    zarr_format
        3 for TensorStore's ``zarr3`` driver: the write chunk may be a multiple of the read
        chunk, which then calls for a sharding codec. 2 for its ``zarr`` driver: read and write
        constraints are merged and a single chunk shape is chosen.
    itemsize
        Bytes per element. The data type never changes the choice; it only decides whether a
        (huge) chosen chunk is too large to encode, which TensorStore rejects.
    single_chunk
        For ``zarr_format=3``: the codecs are fixed without sharding, so read and write
        constraints are merged into one chunk shape, as for zarr v2 (TensorStore does the same).

    Returns
    -------
    ChosenLayout

    Raises
    ------
    MetadataError
        If the constraints cannot be met: rank mismatch, conflicting hard sizes, a hard nonzero
        ``grid_origin`` (Zarr grids start at 0), hard ``codec_chunk`` shape (not supported by
        Zarr), for zarr v2 a hard ``inner_order`` that is neither C nor Fortran order, or a
        chosen chunk that is too large (its byte size overflows int64, or a shard would hold more
        than 2**30 inner chunks).
    """
    if isinstance(itemsize, bool) or not isinstance(itemsize, int) or itemsize < 1:
        raise MetadataError(f"itemsize must be a positive integer, got {itemsize!r}")
    if zarr_format not in (2, 3):
        raise MetadataError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
    extent = [int(n) for n in shape]
    if any(n < 0 for n in extent):
        raise MetadataError(f"shape must not be negative, got {list(extent)}")
    if constraints is None:
        constraints = ChunkLayoutConstraints()
    rank = len(extent)
    if constraints.rank is not None and constraints.rank != rank:
        raise MetadataError(
            f"chunk_layout: rank {constraints.rank} does not match the rank of the array shape {rank}"
        )
    if constraints.grid_origin is not None:
        for i, origin in enumerate(constraints.grid_origin):
            if origin is not None and origin != 0:
                raise MetadataError(
                    f"chunk_layout.grid_origin: Zarr chunk grids start at 0, but dimension {i} "
                    f"requires {origin}"
                )
    if constraints.codec_chunk.shape is not None:
        raise MetadataError("chunk_layout.codec_chunk.shape: codec chunk shape constraints are not supported")

    read = constraints.read_chunk._to_grid(rank, "chunk_layout.read_chunk")
    write = constraints.write_chunk._to_grid(rank, "chunk_layout.write_chunk")
    order = constraints.inner_order or constraints.inner_order_soft_constraint
    c_order = tuple(range(rank))

    if zarr_format == 3 and not single_chunk:
        read_chunk, write_chunk = _choose_read_write(read, write, extent)
        _check_encodable(read_chunk, itemsize)
        if read_chunk != write_chunk:
            _check_shard_grid(read_chunk, write_chunk)
        # Any permutation can be stored (a transpose codec does it).
        return ChosenLayout(tuple(read_chunk), tuple(write_chunk), order if order is not None else c_order)

    chunk = tuple(_choose_single(read, write, extent))
    _check_encodable(chunk, itemsize)
    if zarr_format == 3:
        return ChosenLayout(chunk, chunk, order if order is not None else c_order)
    return ChosenLayout(chunk, chunk, _v2_inner_order(order, constraints.inner_order, c_order))


def _v2_inner_order(
    order: tuple[int, ...] | None, hard: tuple[int, ...] | None, c_order: tuple[int, ...]
) -> tuple[int, ...]:
    """Zarr v2 stores C or F order only: another soft order is dropped, a hard one refused."""
    if order is None or order in (c_order, c_order[::-1]):
        return order if order is not None else c_order
    if hard is not None:
        raise MetadataError(f"chunk_layout.inner_order: zarr v2 stores chunks in C or F order only, got {list(order)}")
    return c_order
