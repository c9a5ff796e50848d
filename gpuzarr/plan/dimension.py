"""Per-axis projection of a selection onto a chunk grid.

Each axis selection (an integer, a slice, or an integer array) becomes a list of
:class:`DimensionProjection` — one per chunk the selection touches along that axis — giving the
chunk number, what to take from the chunk, and where it lands in the output. The plan for the
whole array is the product of the per-axis lists, so the work is O(sum of chunks per axis) in
NumPy plus O(chunks touched) to emit projections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidSelectionError

if TYPE_CHECKING:
    from ..metadata.chunk_grid import DimensionGrid

IntArray = np.ndarray[Any, np.dtype[np.intp]]
AxisSelection = int | slice | IntArray


@dataclass(frozen=True, slots=True)
class DimensionProjection:
    """One chunk's share of one axis selection.

    ``out`` is None when the axis is dropped from the output (an integer selection).
    ``complete`` means the selection covers every in-bounds element of the chunk along the axis.
    """

    chunk: int
    selection: AxisSelection
    out: slice | IntArray | None
    complete: bool


#: The most chunks one read plans: a projection is a few hundred bytes, and a read of an array
#: declared with 2**40 one-element chunks grew to gigabytes of them before any output was made
#: (then a bare MemoryError). Far more than any output that fits in memory needs.
MAX_PLANNED_CHUNKS = 1 << 24


def refuse_too_many_chunks(n: int) -> None:
    """InvalidSelectionError where a read would plan ``n`` chunks, more than ``MAX_PLANNED_CHUNKS``."""
    if n > MAX_PLANNED_CHUNKS:
        raise InvalidSelectionError(
            f"the selection touches {n} chunks, more than one read plans ({MAX_PLANNED_CHUNKS}); read it in parts"
        )


def project_integer(index: int, dim: DimensionGrid) -> list[DimensionProjection]:
    chunk = int(dim.chunk_of(index))
    local = index - int(dim.chunk_start(chunk))
    return [DimensionProjection(chunk, local, None, dim.chunk_valid(chunk) == 1)]


def project_slice(start: int, stop: int, step: int, dim: DimensionGrid) -> list[DimensionProjection]:
    """Project ``range(start, stop, step)`` (already normalised by ``slice.indices``)."""
    count = len(range(start, stop, step))
    if count == 0:
        return []
    if step < 0:
        # Walk the same elements in ascending order, then flip both sides per chunk: the chunk is
        # read with a negative step and the output stays a forward, contiguous slice.
        lowest = start + (count - 1) * step
        ascending = project_slice(lowest, start + 1, -step, dim)
        flipped = []
        for p in ascending:
            assert isinstance(p.selection, slice) and isinstance(p.out, slice)
            s = -step
            n = len(range(p.selection.start, p.selection.stop, s))
            first = p.selection.start + (n - 1) * s
            end = p.selection.start - s
            sel = slice(first, end if end >= 0 else None, -s)
            out = slice(count - p.out.stop, count - p.out.start)
            flipped.append(DimensionProjection(p.chunk, sel, out, p.complete))
        return flipped[::-1]
    last = start + (count - 1) * step
    first_chunk = int(dim.chunk_of(start))
    last_chunk = int(dim.chunk_of(last))
    refuse_too_many_chunks(min(count, last_chunk - first_chunk + 1))
    if last_chunk - first_chunk >= count:
        # A step longer than the chunks (a[::10**8] over chunks of 1): most chunks between the
        # first and the last hold no selected element; the selected elements name theirs.
        return _sparse_slice_projections(start, step, count, dim)
    if last_chunk - first_chunk < _VECTORISE_ABOVE:
        # Few chunks (a crop): plain integer arithmetic beats NumPy's per-call overhead.
        chunk_list = list(range(first_chunk, last_chunk + 2))
        bounds = [int(dim.chunk_start(c)) for c in chunk_list]
        starts_list = bounds[:-1]
        ends_list = [min(b, dim.size) for b in bounds[1:]]
        firsts_list = [start + -(-max(cs - start, 0) // step) * step for cs in starts_list]
        counts_list = [
            max(-(-(min(ce, stop) - f) // step), 0) for f, ce in zip(firsts_list, ends_list, strict=True)
        ]
        outs_list = [(f - start) // step for f in firsts_list]
        return _slice_projections(
            chunk_list[:-1], starts_list, ends_list, firsts_list, counts_list, outs_list, step
        )
    chunks = np.arange(first_chunk, last_chunk + 1, dtype=np.int64)
    chunk_starts = np.asarray(dim.chunk_start(chunks), dtype=np.int64)
    chunk_ends = np.minimum(np.asarray(dim.chunk_start(chunks + 1), dtype=np.int64), dim.size)
    # First selected index at or after each chunk's start.
    offset = np.maximum(chunk_starts - start, 0)
    firsts = start + -(-offset // step) * step
    ends = np.minimum(chunk_ends, stop)
    counts = np.maximum(-(-(ends - firsts) // step), 0)
    out_starts = (firsts - start) // step
    return _slice_projections(
        chunks.tolist(),
        chunk_starts.tolist(),
        chunk_ends.tolist(),
        firsts.tolist(),
        counts.tolist(),
        out_starts.tolist(),
        step,
    )


#: Above this many chunks along an axis, project_slice computes with NumPy arrays.
_VECTORISE_ABOVE = 64


def _sparse_slice_projections(start: int, step: int, count: int, dim: DimensionGrid) -> list[DimensionProjection]:
    """The projections of ``count`` elements from ``start`` by ``step`` (> 0) found from the
    elements themselves: work and memory in the selection's size, not the span of chunks."""
    indices = start + np.arange(count, dtype=np.int64) * step
    chunks = np.asarray(dim.chunk_of(indices), dtype=np.int64)
    # Indices ascend, so each chunk's elements are one run.
    runs = np.flatnonzero(np.diff(chunks)) + 1
    run_starts = np.concatenate(([0], runs)).tolist()
    run_ends = [*runs.tolist(), count]
    result = []
    for i, j in zip(run_starts, run_ends, strict=True):
        c = int(chunks[i])
        cs = int(dim.chunk_start(c))
        ce = min(int(dim.chunk_start(c + 1)), dim.size)
        local = int(indices[i]) - cs
        n = j - i
        complete = local == 0 and n == ce - cs and (step == 1 or n == 1)
        result.append(DimensionProjection(c, slice(local, local + (n - 1) * step + 1, step), slice(i, j), complete))
    return result


def _slice_projections(
    chunks: list[int],
    chunk_starts: list[int],
    chunk_ends: list[int],
    firsts: list[int],
    counts: list[int],
    out_starts: list[int],
    step: int,
) -> list[DimensionProjection]:
    result = []
    for c, cs, ce, f, n, o in zip(chunks, chunk_starts, chunk_ends, firsts, counts, out_starts, strict=True):
        if n <= 0:
            continue
        local = f - cs
        sel = slice(local, local + (n - 1) * step + 1, step)
        # A step > 1 still covers a chunk whose only in-bounds element it selects.
        complete = f == cs and n == ce - cs and (step == 1 or n == 1)
        result.append(DimensionProjection(c, sel, slice(o, o + n), complete))
    return result


def project_array(indices: IntArray, dim: DimensionGrid) -> list[DimensionProjection]:
    """Project an integer array (any order, duplicates allowed, already bounds-checked)."""
    if indices.size == 0:
        return []
    chunk_ids = np.asarray(dim.chunk_of(indices))
    if indices.size > 1 and np.all(indices[1:] >= indices[:-1]):
        order = np.arange(indices.size)
        sorted_chunks = chunk_ids
    else:
        order = np.argsort(chunk_ids, kind="stable")
        sorted_chunks = chunk_ids[order]
    bounds = np.flatnonzero(np.diff(sorted_chunks)) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [indices.size]))
    result = []
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        positions = order[a:b]
        chunk = int(sorted_chunks[a])
        local = indices[positions] - int(dim.chunk_start(chunk))
        out: slice | IntArray
        # A stable sort keeps positions ascending within a chunk, so this means "contiguous".
        if positions[-1] - positions[0] == b - a - 1:
            out = slice(int(positions[0]), int(positions[-1]) + 1)
        else:
            out = positions
        complete = np.unique(local).size == dim.chunk_valid(chunk)
        result.append(DimensionProjection(chunk, local, out, bool(complete)))
    return result
