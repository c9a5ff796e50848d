"""Selections -> chunk projections.

Three kinds of selection, all with NumPy's meaning on the whole array:

* basic: integers (negative allowed), slices with any step, Ellipsis;
* orthogonal (``oindex``): per-axis integers, slices, integer arrays or boolean arrays, combined
  as an outer product;
* vectorised (``vindex``): integer arrays broadcast together (or one boolean mask of the array's
  shape) selecting points.

Every kind produces a :class:`SelectionPlan`: the output shape and a list of
:class:`ChunkProjection` records that the CPU and GPU engines execute alike.
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BoundsCheckError, InvalidArgumentError, InvalidSelectionError
from ..metadata.chunk_grid import DimensionGrid
from .dimension import (
    DimensionProjection,
    project_array,
    project_integer,
    project_slice,
    refuse_too_many_chunks,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(slots=True)
class ChunkProjection:
    """How one chunk contributes to a selection.

    ``chunk_selection`` indexes the decoded chunk and ``out_selection`` the output buffer (which
    has shape ``SelectionPlan.buffer_shape``); ``is_complete`` means every in-bounds element of the
    chunk is selected, so a write needs no read-modify-write.

    Treated as immutable, though not declared frozen: a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``, which makes it three times as expensive to build,
    and a batch of crops builds tens of thousands of them (2.7 against 0.5 µs each, measured).
    """

    chunk_coords: tuple[int, ...]
    chunk_selection: tuple[Any, ...]
    out_selection: tuple[Any, ...]
    is_complete: bool


@dataclass(frozen=True)
class SelectionPlan:
    """The output ``shape``, the ``buffer_shape`` the projections index (they differ only for
    vectorised selections, which fill a flat buffer), and the projections themselves."""

    shape: tuple[int, ...]
    buffer_shape: tuple[int, ...]
    projections: list[ChunkProjection]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _is_integer(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def _is_array_like(x: Any) -> bool:
    # NumPy scalars have __array__ too, but index like the Python scalars they hold.
    return isinstance(x, (list, np.ndarray)) or (
        hasattr(x, "__array__") and not isinstance(x, (str, bytes, np.generic))
    )


def _index_arrays_on_the_host(selection: Any) -> Any:
    """``selection`` with its index arrays of other libraries (Dask, xarray, PyTorch, anything
    with ``__array__``) made NumPy arrays, once: planning looks at an index array several times,
    and each ``np.asarray`` of a Dask array computes its graph again."""
    entries = selection if isinstance(selection, tuple) else (selection,)
    if not any(_is_foreign_array(s) for s in entries):
        return selection
    arrays: dict[int, np.ndarray[Any, Any]] = {}
    for s in entries:
        if _is_foreign_array(s) and id(s) not in arrays:  # one object given twice: once
            arrays[id(s)] = np.asarray(s)
    converted = tuple(arrays.get(id(s), s) for s in entries)
    return converted if isinstance(selection, tuple) else converted[0]


def _is_foreign_array(x: Any) -> bool:
    # Device arrays are left as they are: their host copy is the reader's to make (or refuse).
    return _is_array_like(x) and not isinstance(x, (list, np.ndarray)) and not hasattr(x, "__cuda_array_interface__")


def _check_integer(index: int, size: int, axis: int) -> int:
    i = int(index)
    if i < -size or i >= size:
        raise BoundsCheckError(f"index {i} is out of bounds for axis {axis} with size {size}")
    return i + size if i < 0 else i


def _normalize_int_array(value: Any, size: int, axis: int) -> np.ndarray[Any, Any]:
    arr = np.asarray(value)
    if arr.dtype == bool:
        if arr.ndim != 1 or arr.shape[0] != size:
            raise BoundsCheckError(
                f"boolean index for axis {axis} must have shape ({size},), got {arr.shape}"
            )
        return np.flatnonzero(arr)
    if arr.size == 0:
        return np.zeros(0, dtype=np.intp)
    if arr.dtype.kind not in "iu":
        raise InvalidSelectionError(f"index arrays must hold integers or booleans, got dtype {arr.dtype}")
    _refuse_wrapping_indices(arr, size, axis)
    arr = arr.astype(np.intp, copy=False)
    if arr.min() < -size or arr.max() >= size:
        bad = arr[(arr < -size) | (arr >= size)][0]
        raise BoundsCheckError(f"index {bad} is out of bounds for axis {axis} with size {size}")
    return np.where(arr < 0, arr + size, arr)


def _refuse_wrapping_indices(arr: np.ndarray[Any, Any], size: int, axis: int) -> None:
    """Unsigned indices too large for ``intp`` are out of bounds: cast, 2**64 - 1 would wrap
    to -1 and select the last element (NumPy's indexing does)."""
    if arr.size and arr.dtype.kind == "u" and arr.dtype.itemsize >= np.dtype(np.intp).itemsize:
        largest = int(arr.max())
        if largest >= size:
            raise BoundsCheckError(f"index {largest} is out of bounds for axis {axis} with size {size}")


def expand_ellipsis(selection: Any, ndim: int) -> tuple[Any, ...]:
    """Make a selection a tuple of exactly ``ndim`` entries (Ellipsis and missing -> ``:``)."""
    if not isinstance(selection, tuple):
        selection = (selection,)
    n_ellipsis = sum(1 for s in selection if s is Ellipsis)
    if n_ellipsis > 1:
        raise InvalidSelectionError("an index can only have a single ellipsis ('...')")
    if n_ellipsis == 1:
        i = next(k for k, s in enumerate(selection) if s is Ellipsis)
        fill = ndim - (len(selection) - 1)
        selection = selection[:i] + (slice(None),) * max(fill, 0) + selection[i + 1 :]
    if len(selection) > ndim:
        raise InvalidSelectionError(
            f"too many indices for array: array is {ndim}-dimensional, "
            f"but {len(selection)} were indexed"
        )
    expanded: tuple[Any, ...] = selection + (slice(None),) * (ndim - len(selection))
    return expanded


def slice_indices(sel: slice, size: int, axis: int) -> tuple[int, int, int]:
    """``sel.indices(size)``, its refusals as gpuzarr's errors naming the axis: a step of zero
    (InvalidArgumentError, a ValueError as NumPy's) and bounds that are not integers
    (InvalidSelectionError, an IndexError)."""
    if sel.step == 0:
        raise InvalidArgumentError(f"slice step cannot be zero (axis {axis})")
    try:
        return sel.indices(size)
    except (TypeError, ValueError) as exc:
        raise InvalidSelectionError(f"unsupported slice {sel!r} for axis {axis}: {exc}") from None


def _project_axis(
    sel: Any, dim: DimensionGrid, axis: int, allow_arrays: bool
) -> tuple[list[DimensionProjection], int | None]:
    """Projections for one axis, and its output length (None if the axis is dropped)."""
    # Slices first: they are what crops are made of, and the Integral check is an ABC lookup.
    if isinstance(sel, slice):
        start, stop, step = slice_indices(sel, dim.size, axis)
        return project_slice(start, stop, step, dim), len(range(start, stop, step))
    if _is_integer(sel):
        return project_integer(_check_integer(sel, dim.size, axis), dim), None
    if allow_arrays and _is_array_like(sel):
        arr = _normalize_int_array(sel, dim.size, axis)
        if arr.ndim != 1:
            raise InvalidSelectionError(f"orthogonal index arrays must be 1-D, axis {axis} got {arr.ndim}-D")
        return project_array(arr, dim), int(arr.size)
    if sel is None:
        raise InvalidSelectionError("np.newaxis is not supported in array selections")
    raise InvalidSelectionError(
        f"unsupported selection {sel!r} for axis {axis}: expected an integer, a slice"
        + (", an integer array or a boolean array" if allow_arrays else "")
    )


def _slice_to_indices(s: slice) -> np.ndarray[Any, Any]:
    step = s.step or 1
    stop = s.stop if s.stop is not None else (-1 if step < 0 else None)
    return np.arange(s.start or 0, stop, step)


def _ix(selection: list[Any], lengths: list[int | None]) -> tuple[Any, ...]:
    """With two or more array entries, or an array beside an integer, turn slices into ranges
    and make an outer product.

    NumPy broadcasts an integer with the index arrays and, when a slice separates them, moves the
    broadcast axes to the front; turning every kept axis into an ``np.ix_`` grid keeps the output
    axes in order whatever the mix.
    """
    n_arrays = sum(isinstance(s, np.ndarray) for s in selection)
    n_integers = sum(n is None for n in lengths)
    if n_arrays == 0 or (n_arrays == 1 and n_integers == 0):
        return tuple(selection)
    kept = [i for i, n in enumerate(lengths) if n is not None]
    arrays = []
    for i in kept:
        s = selection[i]
        arrays.append(_slice_to_indices(s) if isinstance(s, slice) else s)
    grids = np.ix_(*arrays)
    out = list(selection)
    for i, g in zip(kept, grids, strict=True):
        out[i] = g
    return tuple(out)


def _box_axis(sel: Any, dim: DimensionGrid) -> list[tuple[Any, ...]] | None:
    """(chunk, chunk selection, output selection, complete) per chunk that ``sel`` (a slice
    without a step, or an int) touches on a regular grid; None for anything else."""
    size, c = dim.size, dim.chunk_size
    if type(sel) is slice:
        if sel.step is not None and sel.step != 1:
            return None
        try:
            start, stop, _ = sel.indices(size)
        except (TypeError, ValueError):  # the general plan refuses it, naming the axis
            return None
        if stop <= start:
            return []
        refuse_too_many_chunks((stop - 1) // c - start // c + 1)
        entries = []
        for k in range(start // c, (stop - 1) // c + 1):
            cs = k * c
            lo, hi = max(start, cs), min(stop, cs + c)
            complete = lo == cs and hi == min(cs + c, size)
            entries.append((k, slice(lo - cs, hi - cs, 1), slice(lo - start, hi - start), complete))
        return entries
    if type(sel) is int:
        if not -size <= sel < size:
            return None  # the general path raises the bounds error
        i = sel + size if sel < 0 else sel
        return [(i // c, i % c, None, min(c, size - (i // c) * c) == 1)]
    return None


def plan_box(selection: Any, dims: tuple[Any, ...]) -> SelectionPlan | None:
    """The plan of a box (Python ints and slices without a step over regular chunk grids): what
    a crop is, planned in a few microseconds a chunk; None when ``selection`` is anything else,
    for :func:`plan_orthogonal` to plan (and to raise on). The plan equals
    ``plan_orthogonal(selection, dims, allow_arrays=False)``."""
    selection = _whole_axes_filled(selection, len(dims))
    if selection is None or len(selection) != len(dims) or not dims:
        return None
    empty = _empty_box(selection, dims)
    if empty is not None:
        return empty
    per_axis = []
    for sel, dim in zip(selection, dims, strict=True):
        if type(dim) is not DimensionGrid:
            return None
        entries = _box_axis(sel, dim)
        if entries is None:
            return None
        per_axis.append(entries)
    refuse_too_many_chunks(math.prod(len(e) for e in per_axis))
    shape = tuple(
        (e[-1][2].stop if e else 0) for e, sel in zip(per_axis, selection, strict=True) if type(sel) is slice
    )
    dropped = len(shape) != len(dims)
    projections = []
    for combo in itertools.product(*per_axis):
        chunks, selections, outs, complete = zip(*combo)
        if dropped:
            outs = tuple(o for o in outs if o is not None)
        projections.append(ChunkProjection(chunks, selections, outs, all(complete)))
    return SelectionPlan(shape, shape, projections)


def _slice_length(sel: Any, size: int) -> int | None:
    """How many elements the slice ``sel`` selects of an axis of ``size`` (None: no slice, or
    one the planners refuse)."""
    if type(sel) is not slice:
        return None
    try:
        return len(range(*sel.indices(size)))
    except (TypeError, ValueError):
        return None


def _empty_crops(selections: Sequence[Any], dims: tuple[Any, ...]) -> SelectionPlan | None:
    """:func:`plan_box_batch`'s plan of crops that all select nothing, of one shape: no chunk
    (their other axes were split into chunks for nothing); None for any other batch."""
    plans = [_empty_box(s, dims) if type(s) is tuple and len(s) == len(dims) else None for s in selections]
    shapes = {None if plan is None else plan.shape for plan in plans}
    if len(shapes) != 1 or None in shapes:
        return None
    (shape,) = shapes
    assert shape is not None
    stacked = (len(selections), *shape)
    return SelectionPlan(stacked, stacked, [])


def _empty_box(selection: tuple[Any, ...], dims: tuple[Any, ...]) -> SelectionPlan | None:
    """The plan of a box (ints and slices) one of whose slices selects nothing: no chunk, and
    the shape NumPy gives; None for any other selection. The axes were split into chunks one by
    one before the empty one was seen: a (10**6, 0) array of (1, 1) chunks took 2 s to read
    as empty, a (2 * 10**7, 0) one was refused as touching too many chunks."""
    lengths = [_slice_length(sel, dim.size) for sel, dim in zip(selection, dims, strict=True)]
    if 0 not in lengths:
        return None
    for sel, dim in zip(selection, dims, strict=True):
        if type(sel) is int and not -dim.size <= sel < dim.size:
            return None  # the general planner raises the bounds error
        if type(sel) is not int and type(sel) is not slice:
            return None
    shape = tuple(n for n in lengths if n is not None)
    return SelectionPlan(shape, shape, [])


def _whole_axes_filled(selection: Any, ndim: int) -> tuple[Any, ...] | None:
    """``selection`` as one entry per axis where it is ints and slices, with an Ellipsis or
    missing trailing axes as whole axes (``a[:]``, ``a[...]``, ``a[3]`` of an n-d array took the
    general planner, twice as slow); None for anything else."""
    entries: tuple[Any, ...] = selection if type(selection) is tuple else (selection,)
    if len(entries) == ndim and not any(s is Ellipsis for s in entries):
        return entries  # the common case (a crop): nothing to fill
    if not all(type(s) in (int, slice) or s is Ellipsis for s in entries):
        return None
    try:
        return expand_ellipsis(entries, ndim)
    except InvalidSelectionError:  # two Ellipses, too many entries: the general planner says so
        return None


#: One axis of a box split into chunks: a row per chunk of (chunk index less the first chunk's,
#: chunk selection, output selection, whether the chunk is taken whole), and the first chunk's index.
_AxisSplit = tuple[list[tuple[int, Any, Any, bool]], int]


def _split_box_axis(sel: Any, dim: DimensionGrid, cache: dict[tuple[int, int], list[Any]]) -> _AxisSplit | None:
    """:func:`_box_axis` of a slice, its chunk indices less the first's. Away from the array's
    last chunk, the split depends only on where the slice starts within its first chunk and on
    its length (the chunk indices shift with the start), so boxes that share those share one
    split from ``cache``: a (1, 256, 256)-chunked stack's crops split 64 chunks each along the
    first axis."""
    if type(sel) is not slice:
        return None
    if sel.step is not None and sel.step != 1:
        return None
    try:
        start, stop, _ = sel.indices(dim.size)
    except (TypeError, ValueError):  # the general plan refuses it, naming the axis
        return None
    c = dim.chunk_size
    first = start // c
    if stop <= start or (stop - 1) // c == (dim.size - 1) // c:
        # Empty, or reaching the last chunk, whose completeness depends on the array's size.
        return _relative(_box_axis(sel, dim), 0), 0
    key = (start - first * c, stop - start)
    rows = cache.get(key)
    if rows is None:
        rows = cache[key] = _relative(_box_axis(sel, dim), first)
    return rows, first


def _relative(entries: list[tuple[Any, ...]] | None, first: int) -> list[tuple[int, Any, Any, bool]]:
    """:func:`_box_axis`'s rows of a slice without a step, chunk indices less ``first``."""
    assert entries is not None  # a slice without a step always splits
    return [(k - first, chunk_sel, out, complete) for k, chunk_sel, out, complete in entries]


def plan_box_batch(selections: Sequence[Any], dims: tuple[Any, ...]) -> SelectionPlan | None:
    """The plan of a batch of boxes of one shape (tuples of slices without a step, one per axis,
    over regular chunk grids), stacked along a new first axis: what ``Array.read_batch`` reads
    for a batch of crops. None when any selection is something else, or the boxes' shapes
    differ, for the caller to plan them one by one (and to say what is wrong).

    Equal to planning each box with :func:`plan_box` and prefixing its output selections with
    the box's index, in a fraction of the time: each axis is split into chunks once per box
    (shared between boxes that start at the same place in a chunk), and the projections are
    the product of those splits. The planning runs before any chunk is read, on one thread, so
    its time adds to the whole read's: 256 crops of 64^3 over 64^3 chunks (2,048 projections)
    took 2.8-4.1 ms with ``itertools.product`` over each field's values, and 1.9-2.0 ms with the
    loops of a 3-d box written out (2 cores; reading that batch from the v2 Blosc benchmark
    volume takes 60-75 ms)."""
    if not dims or any(type(dim) is not DimensionGrid for dim in dims):
        return None
    empty = _empty_crops(selections, dims)
    if empty is not None:
        return empty
    ndim = len(dims)
    shape: tuple[int, ...] | None = None
    projections: list[ChunkProjection] = []
    append = projections.append
    caches: list[dict[tuple[int, int], list[Any]]] = [{} for _ in dims]
    for index, selection in enumerate(selections):
        if type(selection) is not tuple or len(selection) != ndim:
            return None
        rows: list[list[tuple[int, Any, Any, bool]]] = []
        firsts: list[int] = []
        for sel, dim, cache in zip(selection, dims, caches, strict=True):
            split = _split_box_axis(sel, dim, cache)
            if split is None:
                return None
            rows.append(split[0])
            firsts.append(split[1])
        box_shape = tuple(r[-1][2].stop if r else 0 for r in rows)
        if shape is None:
            shape = box_shape
        elif box_shape != shape:
            return None
        if ndim == 3:  # crops of volumes, the common case, without a tuple per combination
            (r0, r1, r2), (f0, f1, f2) = rows, firsts
            for k0, s0, o0, c0 in r0:
                a0 = k0 + f0
                for k1, s1, o1, c1 in r1:
                    a1, c01 = k1 + f1, c0 and c1
                    for k2, s2, o2, c2 in r2:
                        append(ChunkProjection((a0, a1, k2 + f2), (s0, s1, s2), (index, o0, o1, o2), c01 and c2))
            continue
        for combo in itertools.product(*rows):
            ks, chunk_sel, out, completes = zip(*combo, strict=True)
            coords = tuple(k + f for k, f in zip(ks, firsts, strict=True))
            append(ChunkProjection(coords, chunk_sel, (index, *out), all(completes)))
    if shape is None:
        return None
    full_shape = (len(selections), *shape)
    return SelectionPlan(full_shape, full_shape, projections)


def plan_orthogonal(
    selection: Any, dims: tuple[DimensionGrid, ...], allow_arrays: bool = True
) -> SelectionPlan:
    """Plan a basic (``allow_arrays=False``) or orthogonal selection."""
    sel = expand_ellipsis(_index_arrays_on_the_host(selection), len(dims))
    per_axis: list[list[DimensionProjection]] = []
    out_lengths: list[int | None] = []
    # A slice that selects nothing empties the result: the other slices are not split into
    # chunks (an axis of millions of them took seconds), the other entries still checked.
    # The other entries (integers, index arrays: a few chunks at most) are projected first.
    slice_lengths = [_slice_length(s, dim.size) for s, dim in zip(sel, dims, strict=True)]
    projected: dict[int, tuple[list[DimensionProjection], int | None]] = {}
    for axis, (s, dim) in enumerate(zip(sel, dims, strict=True)):
        if slice_lengths[axis] is None:
            projected[axis] = _project_axis(s, dim, axis, allow_arrays)
    nothing = 0 in slice_lengths or any(length == 0 for _, length in projected.values())
    for axis, (s, dim) in enumerate(zip(sel, dims, strict=True)):
        if axis in projected:
            projections, length = projected[axis]
        elif nothing:
            projections, length = [], slice_lengths[axis]
        else:
            projections, length = _project_axis(s, dim, axis, allow_arrays)
        per_axis.append(projections)
        out_lengths.append(length)
    shape = tuple(n for n in out_lengths if n is not None)
    kept = [axis for axis, n in enumerate(out_lengths) if n is not None]
    # np.ix_ grids (see _ix) only where NumPy's outer product needs them: two index arrays, or
    # one beside an integer. Otherwise every chunk's selection indexes as it is.
    refuse_too_many_chunks(math.prod(len(p) for p in per_axis))
    n_arrays = sum(isinstance(p[0].selection, np.ndarray) for p in per_axis if p)
    grids = n_arrays >= 2 or (n_arrays == 1 and len(kept) < len(dims))
    chunk_lengths: list[int | None] = [None if n is None else 0 for n in out_lengths]
    result = []
    for combo in itertools.product(*per_axis):
        chunk_sel = tuple(p.selection for p in combo)
        out_sel = tuple(combo[axis].out for axis in kept)
        if grids:
            chunk_sel = _ix(list(chunk_sel), chunk_lengths)
            out_sel = _ix(list(out_sel), [0] * len(kept))
        complete = all(p.complete for p in combo)
        result.append(ChunkProjection(tuple(p.chunk for p in combo), chunk_sel, out_sel, complete))
    return SelectionPlan(shape, shape, result)


def plan_vectorized(selection: Any, dims: tuple[DimensionGrid, ...]) -> SelectionPlan:
    """Plan a point selection: integer arrays broadcast together, or one full-shape mask."""
    ndim = len(dims)
    if ndim == 0:
        raise InvalidSelectionError("vectorised selection: a 0-d array has no axes to index with arrays")
    shape_of_array = tuple(d.size for d in dims)
    selection = _index_arrays_on_the_host(selection)
    if not isinstance(selection, tuple):
        selection = (selection,)
    if len(selection) == 1 and _is_array_like(selection[0]):
        mask = np.asarray(selection[0])
        if mask.dtype == bool:
            if mask.shape != shape_of_array:
                raise BoundsCheckError(
                    f"boolean mask must have the array's shape {shape_of_array}, got {mask.shape}"
                )
            selection = tuple(np.nonzero(mask))
    if len(selection) != ndim:
        raise InvalidSelectionError(
            f"vectorised selection needs one integer array per axis ({ndim}), got {len(selection)}"
        )
    arrays = []
    for axis, s in enumerate(selection):
        if isinstance(s, slice) or not (_is_integer(s) or _is_array_like(s)):
            raise InvalidSelectionError(
                f"vectorised selection: axis {axis} must be an integer array, got {s!r}"
            )
        arr = np.asarray(s)
        if arr.dtype.kind not in "iu" and arr.size:
            raise InvalidSelectionError(f"vectorised selection: axis {axis} must hold integers, got {arr.dtype}")
        _refuse_wrapping_indices(arr, dims[axis].size, axis)
        arrays.append(arr.astype(np.intp, copy=False))
    try:
        broadcast = np.broadcast_arrays(*arrays)
    except ValueError as exc:
        raise InvalidSelectionError(f"vectorised selection: index arrays do not broadcast ({exc})") from exc
    out_shape = broadcast[0].shape if broadcast else ()
    flat = [_in_range(arr.reshape(-1), dim, axis) for axis, (arr, dim) in enumerate(zip(broadcast, dims, strict=True))]
    npoints = math.prod(out_shape)
    if npoints == 0:
        return SelectionPlan(out_shape, (0,), [])
    grid_shape = tuple(max(d.nchunks, 1) for d in dims)
    order, starts, stops, group_chunks = _points_by_chunk(flat, dims, grid_shape)
    result = []
    for a, b, chunk in zip(starts, stops, group_chunks, strict=True):
        positions = order[a:b]
        coords = tuple(int(c) for c in np.unravel_index(chunk, grid_shape))
        local = tuple(
            flat[k][positions] - int(dims[k].chunk_start(coords[k])) for k in range(ndim)
        )
        valid = [dims[k].chunk_valid(coords[k]) for k in range(ndim)]
        # Complete when the points, duplicates aside, cover every in-bounds element of the chunk.
        complete = b - a >= math.prod(valid) and (
            np.unique(np.ravel_multi_index(local, valid)).size == math.prod(valid)
        )
        result.append(ChunkProjection(coords, local, (positions,), bool(complete)))
    return SelectionPlan(out_shape, (npoints,), result)


def _in_range(indices: np.ndarray[Any, Any], dim: DimensionGrid, axis: int) -> np.ndarray[Any, Any]:
    """One axis's flat point indices, bounds-checked, negative ones counted from the end (a
    copy only where there are some)."""
    if not indices.size:
        return indices
    lowest, highest = int(indices.min()), int(indices.max())
    if lowest < -dim.size or highest >= dim.size:
        bad = indices[(indices < -dim.size) | (indices >= dim.size)][0]
        raise BoundsCheckError(f"index {bad} is out of bounds for axis {axis} with size {dim.size}")
    return np.where(indices < 0, indices + dim.size, indices) if lowest < 0 else indices


def _points_by_chunk(
    flat: list[np.ndarray[Any, Any]], dims: tuple[DimensionGrid, ...], grid_shape: tuple[int, ...]
) -> tuple[np.ndarray[Any, Any], list[int], list[int], list[int]]:
    """The points (``flat``: one index array per axis, in range) grouped by chunk: their order
    sorted by chunk (stable), each group's start and stop in it, and its chunk's flat number.

    Memory is a few times the indices' (10**7 points: about 230 MiB at the peak, half of it
    before each intermediate was dropped as soon as it had served)."""
    per_axis = tuple(np.asarray(d.chunk_of(a)) for a, d in zip(flat, dims, strict=True))
    linear = per_axis[0] if len(per_axis) == 1 else np.ravel_multi_index(per_axis, grid_shape)
    del per_axis
    order = np.argsort(linear, kind="stable")
    sorted_linear = linear[order]
    del linear
    bounds = np.flatnonzero(sorted_linear[1:] != sorted_linear[:-1]) + 1
    firsts = np.concatenate(([0], bounds))
    chunks = sorted_linear[firsts].tolist()
    return order, firsts.tolist(), [*bounds.tolist(), len(order)], chunks


def _numpy_axis_order(plan: SelectionPlan, selection: Any, ndim: int) -> SelectionPlan:
    """Move the index array's output axis first where NumPy does.

    NumPy broadcasts integers together with the index array; when a slice separates two of these
    advanced indices (``a[0, :, [1, 2]]``), the broadcast axis goes to the front of the result.
    """
    sel = expand_ellipsis(selection, ndim)
    # Adjacency is judged in the index as written: an Ellipsis separates advanced indices even
    # when it stands for no axis at all.
    written = selection if isinstance(selection, tuple) else (selection,)
    advanced = [i for i, s in enumerate(written) if _is_integer(s) or _is_array_like(s)]
    if advanced[-1] - advanced[0] == len(advanced) - 1:
        return plan
    kept = [s for s in sel if not _is_integer(s)]
    axis = next(i for i, s in enumerate(kept) if _is_array_like(s))
    order = [axis, *(i for i in range(len(kept)) if i != axis)]
    shape = tuple(plan.shape[i] for i in order)
    # With an integer beside the array, every kept axis of a chunk selection is an np.ix_ grid
    # (see _ix); transposing the grids reorders the axes of what they select.
    projections = [
        ChunkProjection(
            p.chunk_coords,
            tuple(s.transpose(order) if isinstance(s, np.ndarray) else s for s in p.chunk_selection),
            tuple(p.out_selection[i] for i in order),
            p.is_complete,
        )
        for p in plan.projections
    ]
    return SelectionPlan(shape, shape, projections)


def _plan_one_index_array_of_any_rank(entries: tuple[Any, ...], dims: tuple[DimensionGrid, ...]) -> SelectionPlan:
    """One integer index array that is not 1-D, with integers and slices: a 0-d one is an
    integer; one of more dimensions is planned flattened, and its axis of the result takes
    the array's shape, as in NumPy (``a[idx]`` with ``idx`` of shape (2, 2) on a (3, 4) array
    has shape (2, 2, 4))."""
    at = next(i for i, s in enumerate(entries) if _is_array_like(s))
    index = np.asarray(entries[at])
    if index.ndim == 0:
        return plan_selection((*entries[:at], int(index), *entries[at + 1 :]), dims)
    flat = (*entries[:at], index.reshape(-1), *entries[at + 1 :])
    plan = _numpy_axis_order(plan_orthogonal(flat, dims), flat, len(dims))
    axis = _array_output_axis(flat, len(dims))
    shape = (*plan.shape[:axis], *index.shape, *plan.shape[axis + 1 :])
    return SelectionPlan(shape, plan.buffer_shape, plan.projections)


def _array_output_axis(selection: tuple[Any, ...], ndim: int) -> int:
    """The result's axis of a selection's one index array, as :func:`_numpy_axis_order` puts
    it: first where an integer and the array are apart, else where the array stands among the
    axes the selection keeps."""
    advanced = [i for i, s in enumerate(selection) if _is_integer(s) or _is_array_like(s)]
    if advanced[-1] - advanced[0] != len(advanced) - 1:
        return 0
    kept = [s for s in expand_ellipsis(selection, ndim) if not _is_integer(s)]
    return next(i for i, s in enumerate(kept) if _is_array_like(s))


def plan_selection(selection: Any, dims: tuple[DimensionGrid, ...]) -> SelectionPlan:
    """Plan ``array[selection]`` with NumPy's meaning.

    Basic selections and selections with a single index array are orthogonal (where NumPy agrees);
    selections made only of integer arrays and integers are vectorised, as in NumPy. Other mixes
    of several index arrays (or masks over some axes) with slices are planned point by point
    (:func:`_plan_advanced`), with NumPy's axis order.
    """
    box = plan_box(selection, dims)
    if box is not None:
        return box
    selection = _index_arrays_on_the_host(selection)
    entries = selection if isinstance(selection, tuple) else (selection,)
    arrays = [s for s in entries if _is_array_like(s)]
    if not arrays:
        return plan_orthogonal(selection, dims, allow_arrays=False)
    if len(arrays) == 1 and len(entries) == 1:
        first = np.asarray(arrays[0])
        if first.dtype == bool and first.ndim == len(dims) and len(dims) > 1:
            return plan_vectorized(selection, dims)
    if len(arrays) == 1 and np.asarray(arrays[0]).ndim == 1:
        return _numpy_axis_order(plan_orthogonal(selection, dims), selection, len(dims))
    if len(arrays) == 1 and np.asarray(arrays[0]).dtype.kind in "iu":
        return _plan_one_index_array_of_any_rank(entries, dims)
    if (
        len(entries) == len(dims)
        and all(_is_array_like(s) or _is_integer(s) for s in entries)
        and not any(_is_array_like(s) and np.asarray(s).dtype == bool for s in entries)
    ):
        return plan_vectorized(selection, dims)
    return _plan_advanced(entries, dims)


def _expand_advanced(entries: tuple[Any, ...], dims: tuple[DimensionGrid, ...]) -> tuple[tuple[Any, ...], bool]:
    """``entries`` as one entry an axis (a mask as the ``nonzero()`` arrays of the axes it
    covers, checked to have their extents; a 0-d array as its integer; an Ellipsis and missing
    trailing axes as whole slices), and whether the advanced entries (arrays, masks, integers)
    stand together: an Ellipsis between two of them parts them, even where it stands for no
    axis, as in NumPy."""
    masks = [np.asarray(s) if _is_array_like(s) and np.asarray(s).dtype == bool else None for s in entries]
    taken = [0 if s is Ellipsis else (m.ndim if m is not None else 1) for s, m in zip(entries, masks, strict=True)]
    if sum(s is Ellipsis for s in entries) > 1:
        raise InvalidSelectionError("an index can only have a single ellipsis ('...')")
    spare = len(dims) - sum(taken)
    if spare < 0:
        raise InvalidSelectionError(
            f"too many indices for array: array is {len(dims)}-dimensional, but {sum(taken)} were indexed"
        )
    sel: list[Any] = []
    marks: list[bool | None] = []  # per entry: advanced, basic, or None for an Ellipsis
    for s, mask in zip(entries, masks, strict=True):
        if s is Ellipsis:
            sel.extend([slice(None)] * spare)
            marks.append(None)
        elif mask is not None:
            if mask.ndim == 0:
                raise InvalidSelectionError("a 0-d boolean index (it adds an axis in NumPy) is not supported")
            extents = tuple(d.size for d in dims[len(sel) : len(sel) + mask.ndim])
            if mask.shape != extents:
                raise BoundsCheckError(f"a boolean index of shape {mask.shape} for axes of extents {extents}")
            sel.extend(np.nonzero(mask))
            marks.append(True)
        elif _is_array_like(s) and np.asarray(s).ndim == 0:
            sel.append(np.asarray(s)[()])  # NumPy takes a 0-d array for the integer it holds
            marks.append(True)
        else:
            sel.append(s)
            marks.append(_is_array_like(s) or _is_integer(s))
    sel.extend([slice(None)] * (len(dims) - len(sel)))
    flagged = [i for i, m in enumerate(marks) if m]
    adjacent = flagged[-1] - flagged[0] == len(flagged) - 1
    return tuple(sel), adjacent


def _plan_advanced(entries: tuple[Any, ...], dims: tuple[DimensionGrid, ...]) -> SelectionPlan:
    """NumPy's advanced indexing in general: several index arrays (a mask standing for its
    ``nonzero()`` arrays, over as many axes as it has) with integers and slices. The arrays and
    integers broadcast together; their axes of the result go where NumPy puts them (in place of
    the indexed axes where these are adjacent, else first), and the slices' axes keep their
    order around them. Planned as points (each element of the result one point), so its cost
    grows with the result's size; ``oindex`` and one-array selections plan by chunk instead."""
    sel, adjacent = _expand_advanced(entries, dims)
    advanced = [axis for axis, s in enumerate(sel) if _is_array_like(s) or _is_integer(s)]
    for axis in advanced:
        index = np.asarray(sel[axis])
        if index.dtype.kind not in "iu" and index.size:
            raise InvalidSelectionError(f"axis {axis}: index arrays must hold integers, got {index.dtype}")
    try:
        points_shape = np.broadcast_shapes(*(np.shape(sel[axis]) for axis in advanced))
    except ValueError as exc:
        raise InvalidSelectionError(f"index arrays do not broadcast together ({exc})") from exc
    sliced = [axis for axis in range(len(dims)) if axis not in advanced]
    for axis in sliced:
        if not isinstance(sel[axis], slice):
            raise InvalidSelectionError(
                f"axis {axis}: expected an integer, a slice or an index array, got {sel[axis]!r}"
            )
    at = sum(1 for axis in sliced if axis < advanced[0]) if adjacent else 0  # where the points' axes go
    ranges = {axis: range(*sel[axis].indices(dims[axis].size)) for axis in sliced}
    result_ndim = len(sliced) + len(points_shape)
    coords: list[np.ndarray[Any, Any]] = []
    for axis in range(len(dims)):
        if axis in ranges:
            k = sliced.index(axis)
            position = k if k < at else k + len(points_shape)
            shape = [1] * result_ndim
            shape[position] = len(ranges[axis])
            coords.append(np.arange(ranges[axis].start, ranges[axis].stop, ranges[axis].step).reshape(shape))
        else:
            points = np.broadcast_to(np.asarray(sel[axis]), points_shape)
            coords.append(points.reshape((1,) * at + points_shape + (1,) * (result_ndim - at - len(points_shape))))
    return plan_vectorized(tuple(coords), dims)
