"""Negative steps on the GPU path: read the same elements ascending, then reverse on the device.

The assemble kernel copies boxes with positive steps only. A basic selection with a negative
step (``a[::-1]``, ``a[40:2:-7, ::-3]``) selects the same elements as a positive-step box, in
the opposite order along those axes. :func:`mirrored_plan` rewrites such a plan into that
ascending box (each chunk read with the positive step, each output slice mirrored), so the
ordinary path reads it; the reader then reverses the flipped axes with one device copy.

Without this, the selection was read as its bounding box and gathered through an index of one
8-byte offset per result element (a 16 MiB result built and uploaded a 128 MiB index).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from ...plan.selection import ChunkProjection, SelectionPlan

if TYPE_CHECKING:
    from ...layout import ArrayLayout


def _is_integer(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _mirror_projection(
    p: ChunkProjection, chunk_shape: tuple[int, ...], out_shape: tuple[int, ...]
) -> tuple[ChunkProjection, frozenset[int]] | None:
    """``p`` with every negative-step chunk slice walked ascending and its output slice
    mirrored, and the output axes so mirrored; None where ``p`` holds anything but integers and
    slices, or an output selection that is not a unit-step slice for each slice."""
    chunk_selection: list[Any] = []
    out_selection = list(p.out_selection)
    flipped: set[int] = set()
    out_axis = 0
    for axis, sel in enumerate(p.chunk_selection):
        if _is_integer(sel):
            chunk_selection.append(sel)
            continue
        if not isinstance(sel, slice) or out_axis >= len(out_selection):
            return None
        out = out_selection[out_axis]
        if not isinstance(out, slice) or out.step not in (None, 1) or out.start is None or out.stop is None:
            return None
        start, stop, step = sel.indices(chunk_shape[axis])
        if step < 0:
            count = len(range(start, stop, step))
            lowest = start + (count - 1) * step
            chunk_selection.append(slice(lowest, start + 1, -step))
            extent = out_shape[out_axis]
            out_selection[out_axis] = slice(extent - out.stop, extent - out.start)
            flipped.add(out_axis)
        else:
            chunk_selection.append(sel)
        out_axis += 1
    if out_axis != len(out_selection):  # a batched read's leading axes: not a plain box
        return None
    mirrored = ChunkProjection(p.chunk_coords, tuple(chunk_selection), tuple(out_selection), p.is_complete)
    return mirrored, frozenset(flipped)


def mirrored_plan(layout: ArrayLayout, plan: SelectionPlan) -> tuple[SelectionPlan, tuple[int, ...]] | None:
    """``plan`` read ascending and the output axes to reverse afterwards, or None when ``plan``
    has no negative step or is no basic selection (index arrays, points, batches)."""
    if plan.buffer_shape != plan.shape or not plan.projections:
        return None
    projections = []
    axes: frozenset[int] | None = None
    for p in plan.projections:
        result = _mirror_projection(p, layout.chunk_shape_at(p.chunk_coords), plan.shape)
        if result is None:
            return None
        mirrored, flipped = result
        if axes is None:
            axes = flipped
        elif flipped != axes:  # every chunk of one basic selection walks an axis the same way
            return None
        projections.append(mirrored)
    if not axes:
        return None
    return SelectionPlan(plan.shape, plan.buffer_shape, projections), tuple(sorted(axes))


def reversed_view(data: Any, axes: tuple[int, ...]) -> Any:
    """``data`` (a NumPy or CuPy array) viewed backwards along ``axes``."""
    index = tuple(slice(None, None, -1) if axis in axes else slice(None) for axis in range(data.ndim))
    return data[index]


__all__ = ["mirrored_plan", "reversed_view"]
