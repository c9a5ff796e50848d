"""Selections the assemble kernel cannot express, read as a box and gathered on the device.

The assemble kernel copies strided boxes: per axis, a start, a positive step and a count. Index
arrays (``oindex``, ``vindex``, ``a[[3, 1, 2]]``), negative steps and batches of single
elements are not boxes. For those, :func:`gather_plan` (pure NumPy, no device) finds the
bounding box of every element the selection touches and, for each output element, its flat
offset inside that box. The reader then reads the box through the ordinary GPU path and takes
the output with one device gather (``box.ravel()[index]``).

The box is only worth reading when it is not much larger than the result: beyond
:data:`MAX_BOX_GROWTH` times the result (and :data:`SMALL_BOX_BYTES`), or beyond
:data:`MAX_BOX_GROWTH` times the chunks the selection touches (and :data:`SMALL_BOX_CHUNKS`),
:func:`gather_plan` returns None and the selection is read on the CPU instead. The second rule
is for small chunks: three rows far apart of a (1572864, 4) int32 array of (3, 2) chunks make a
box of 24 MiB but a million chunks, whose planning alone took 42 s on the emulated device,
against 9 ms for the CPU engine's nine chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ...layout import ArrayLayout
    from ...plan.selection import SelectionPlan

#: a box up to this many times the result's size is read whole
MAX_BOX_GROWTH = 8
#: boxes below this size are always read whole (small reads cost their latency, not their bytes)
SMALL_BOX_BYTES = 64 * 1024 * 1024
#: boxes of at most this many chunks are read whole, however few of them the selection touches
SMALL_BOX_CHUNKS = 64


@dataclass(frozen=True)
class GatherPlan:
    """Read ``box`` (a basic selection of slices), then ``out = box.ravel()[index]``."""

    box: tuple[slice, ...]
    box_shape: tuple[int, ...]
    #: flat offset in the box of each output element, shape ``SelectionPlan.buffer_shape``
    index: npt.NDArray[np.intp]


def _axis_coordinates(
    start: int, length: int, axis: int, chunk_shape: tuple[int, ...], selection: tuple[Any, ...]
) -> npt.NDArray[np.intp]:
    """Global coordinates along ``axis`` of the elements ``chunk[selection]`` selects, without
    materialising the chunk: index a broadcast view of that axis's coordinates."""
    shape = [1] * len(chunk_shape)
    shape[axis] = length
    coords = np.arange(start, start + length, dtype=np.intp).reshape(shape)
    return np.asarray(np.broadcast_to(coords, chunk_shape)[selection])


def gather_plan(layout: ArrayLayout, plan: SelectionPlan) -> GatherPlan | None:
    """The box and gather index of ``plan``, or None when the box would be too large."""
    dims = layout.dimensions()
    ndim = len(dims)
    per_projection: list[list[npt.NDArray[np.intp]]] = []
    low = [math.inf] * ndim
    high = [-math.inf] * ndim
    for p in plan.projections:
        chunk_shape = layout.chunk_shape_at(p.chunk_coords)
        axes = []
        for axis in range(ndim):
            start = int(dims[axis].chunk_start(p.chunk_coords[axis]))
            coords = _axis_coordinates(start, chunk_shape[axis], axis, chunk_shape, p.chunk_selection)
            if coords.size:
                low[axis] = min(low[axis], int(coords.min()))
                high[axis] = max(high[axis], int(coords.max()))
            axes.append(coords)
        per_projection.append(axes)
    if not plan.projections or any(math.isinf(x) for x in low):
        return None
    box = tuple(slice(int(lo), int(hi) + 1) for lo, hi in zip(low, high, strict=True))
    box_shape = tuple(s.stop - s.start for s in box)
    itemsize = np.dtype(layout.metadata.dtype).itemsize
    box_nbytes = math.prod(box_shape) * itemsize
    out_nbytes = math.prod(plan.buffer_shape) * itemsize
    if box_nbytes > max(MAX_BOX_GROWTH * out_nbytes, SMALL_BOX_BYTES):
        return None
    touched = len({p.chunk_coords for p in plan.projections})
    if _box_chunks(dims, box) > max(MAX_BOX_GROWTH * touched, SMALL_BOX_CHUNKS):
        return None
    strides = [1] * ndim
    for axis in range(ndim - 2, -1, -1):
        strides[axis] = strides[axis + 1] * box_shape[axis + 1]
    index = np.full(plan.buffer_shape, -1, dtype=np.intp)
    for p, axes in zip(plan.projections, per_projection, strict=True):
        flat = sum(((c - s.start) * stride for c, s, stride in zip(axes, box, strides, strict=True)), np.intp(0))
        index[p.out_selection] = flat
    if index.size and int(index.min()) < 0:
        raise ValueError("gather: the projections do not cover the output")
    return GatherPlan(box, box_shape, index)


def _box_chunks(dims: Any, box: tuple[slice, ...]) -> int:
    """How many chunks ``box`` (slices of element indices, each non-empty) crosses."""
    return math.prod(
        int(dim.chunk_of(s.stop - 1)) - int(dim.chunk_of(s.start)) + 1 for dim, s in zip(dims, box, strict=True)
    )


__all__ = ["MAX_BOX_GROWTH", "SMALL_BOX_BYTES", "SMALL_BOX_CHUNKS", "GatherPlan", "gather_plan"]
