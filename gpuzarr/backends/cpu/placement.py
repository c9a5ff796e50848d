"""Where a decoded chunk lands in a read's output: whether it can be decoded straight there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ChunkNotFoundError

if TYPE_CHECKING:
    import numpy as np

    from ...layout import ArrayLayout
    from ...plan.selection import ChunkProjection


def place_missing(layout: ArrayLayout, key: str, targets: list[ChunkProjection], out: np.ndarray[Any, Any]) -> None:
    """What a chunk that is not stored gives every place ``targets`` name: the fill value, or
    ChunkNotFoundError where the layout says missing chunks are errors."""
    if not layout.fill_missing_data_reads:
        raise ChunkNotFoundError(key)
    for p in targets:
        out[p.out_selection] = layout.metadata.fill_value


def is_direct(out: np.ndarray[Any, Any], p: ChunkProjection, chunk_shape: tuple[int, ...]) -> bool:
    """Whether the whole chunk maps onto a C-contiguous region of ``out``."""
    if not p.is_complete or (out.ndim == len(chunk_shape) and not spans_trailing_axes(out.shape, chunk_shape)):
        return False
    if not all(isinstance(s, slice) for s in p.out_selection):
        return False
    # The chunk must be taken whole and in order (a complete selection may still reverse it).
    if not all(
        isinstance(s, slice) and s.indices(n) == (0, n, 1)
        for s, n in zip(p.chunk_selection, chunk_shape, strict=True)
    ):
        return False
    # The trailing Ellipsis keeps ``target`` a view where ``out`` is 0-d: ``out[()]`` of an array
    # of objects (strings, bytes) is the element itself.
    target = out[(*p.out_selection, Ellipsis)]
    return target.shape == chunk_shape and bool(target.flags.c_contiguous)


def spans_trailing_axes(out_shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> bool:
    """Whether a chunk has the extent of ``out`` (of as many axes) on every axis after its first
    one longer than 1: else no whole chunk lands in a C-contiguous region of ``out``. Checked
    first, since it rules out at once the inner chunks of a crop, which take ``is_direct``'s
    walk over the selections otherwise (a few µs each, many thousands of small inner chunks)."""
    first = 0
    while first < len(chunk_shape) and chunk_shape[first] == 1:
        first += 1
    return out_shape[first + 1 :] == chunk_shape[first + 1 :]
