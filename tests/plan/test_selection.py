"""Selection planning checked against NumPy.

Every plan is executed the way the engines execute it: a zero-padded chunk is decoded for each
projection, ``out[out_selection] = chunk[chunk_selection]`` fills a buffer of
``plan.buffer_shape``, and the buffer is reshaped to ``plan.shape``. The result must equal NumPy's
answer on the whole array.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuzarr.errors import BoundsCheckError, InvalidArgumentError, InvalidSelectionError
from gpuzarr.metadata.chunk_grid import DimensionGrid
from gpuzarr.plan import SelectionPlan, expand_ellipsis, plan_orthogonal, plan_selection, plan_vectorized
from gpuzarr.plan.selection import ChunkProjection, plan_box, plan_box_batch

PAD = -1  # padding beyond the array's edge; data is >= 0, so reading padding shows up


def dims_of(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[DimensionGrid, ...]:
    return tuple(DimensionGrid(s, c) for s, c in zip(shape, chunks, strict=True))


def values_of(shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def padded_chunk(a: np.ndarray[Any, Any], chunks: tuple[int, ...], coords: tuple[int, ...]) -> Any:
    block = a[tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, chunks, strict=True))]
    chunk = np.full(chunks, PAD, dtype=a.dtype)
    chunk[tuple(slice(0, n) for n in block.shape)] = block
    return chunk


def check_plan(plan: SelectionPlan, a: np.ndarray[Any, Any], chunks: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """Execute ``plan`` over ``a`` cut into ``chunks``, checking its invariants on the way."""
    dims = dims_of(a.shape, chunks)
    grid = tuple(d.nchunks for d in dims)
    out = np.full(plan.buffer_shape, -2, dtype=a.dtype)
    cover = np.zeros(plan.buffer_shape, dtype=np.int64)
    seen = set()
    for p in plan.projections:
        assert len(p.chunk_coords) == a.ndim
        assert all(0 <= c < n for c, n in zip(p.chunk_coords, grid, strict=True)), p.chunk_coords
        assert p.chunk_coords not in seen, f"chunk {p.chunk_coords} projected twice"
        seen.add(p.chunk_coords)
        chunk = padded_chunk(a, chunks, p.chunk_coords)
        values = chunk[p.chunk_selection]
        assert not np.any(values == PAD), "plan reads chunk padding"
        out[p.out_selection] = values
        cover[p.out_selection] += 1
        # is_complete iff every in-bounds element of the chunk is selected.
        marked = np.zeros(chunks, dtype=bool)
        marked[p.chunk_selection] = True
        valid = tuple(
            slice(0, d.chunk_valid(c)) for d, c in zip(dims, p.chunk_coords, strict=True)
        )
        assert p.is_complete == bool(marked[valid].all()), (p, marked)
    assert np.all(cover == 1), "output elements written zero or several times"
    assert math.prod(plan.buffer_shape) == math.prod(plan.shape)
    return out.reshape(plan.shape)


def oindex_reference(a: np.ndarray[Any, Any], selection: tuple[Any, ...]) -> np.ndarray[Any, Any]:
    """Orthogonal indexing with NumPy, one axis at a time."""
    sel = expand_ellipsis(selection, a.ndim)
    out = a
    axis = 0
    for s in sel:
        if isinstance(s, slice):
            out = out[(slice(None),) * axis + (s,)]
            axis += 1
        elif isinstance(s, (int, np.integer)):
            out = np.take(out, s, axis=axis)
        else:
            arr = np.asarray(s)
            if arr.dtype == bool:
                arr = np.flatnonzero(arr)
            out = np.take(out, arr.astype(np.intp), axis=axis)
            axis += 1
    return out


def numpy_index(sel: tuple[Any, ...]) -> tuple[Any, ...]:
    """The selection as NumPy takes it (an empty list would otherwise become a float array)."""
    return tuple(np.asarray(s, dtype=np.intp) if isinstance(s, list) else s for s in sel)


# -- strategies -----------------------------------------------------------------------------------


@st.composite
def shapes_and_chunks(draw: st.DrawFn, min_ndim: int = 0, max_ndim: int = 3, min_size: int = 0) -> Any:
    ndim = draw(st.integers(min_ndim, max_ndim))
    largest = 9 if ndim < 3 else 6  # keeps 3-D plans to a few hundred chunks at most
    shape = tuple(draw(st.lists(st.integers(min_size, largest), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    return shape, chunks


def slices(size: int) -> st.SearchStrategy[slice]:
    bound = st.none() | st.integers(-size - 3, size + 3)
    step = st.none() | st.integers(-4, 4).filter(lambda s: s != 0)
    return st.builds(slice, bound, bound, step)


def in_range_ints(size: int) -> st.SearchStrategy[int]:
    return st.integers(-size, size - 1)


def int_arrays(size: int) -> st.SearchStrategy[Any]:
    elems = st.lists(in_range_ints(size), min_size=0, max_size=6) if size else st.just([])
    return elems.map(lambda v: np.asarray(v, dtype=np.int64)) | elems


def bool_arrays(size: int) -> st.SearchStrategy[Any]:
    return st.lists(st.booleans(), min_size=size, max_size=size).map(lambda v: np.asarray(v, dtype=bool))


def with_ellipsis_or_short(draw: st.DrawFn, entries: list[Any], keep: int = -1) -> tuple[Any, ...]:
    """Leave out trailing entries, or stand Ellipsis in for a run of them (they become ``:``);
    entry ``keep`` is never left out."""
    how = draw(st.sampled_from(["full", "short", "ellipsis"]))
    if how == "short":
        return tuple(entries[: draw(st.integers(keep + 1, len(entries)))])
    if how == "ellipsis":
        if draw(st.booleans()):
            i = draw(st.integers(keep + 1, len(entries)))
        else:
            i = draw(st.integers(0, max(keep, 0)))
        j = draw(st.integers(i, len(entries) if i > keep else max(keep, i)))
        return (*entries[:i], Ellipsis, *entries[j:])
    return tuple(entries)


@st.composite
def basic_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    entries: list[Any] = []
    for size in shape:
        options = [slices(size)]
        if size:
            options.append(in_range_ints(size))
        entries.append(draw(st.one_of(*options)))
    return with_ellipsis_or_short(draw, entries)


@st.composite
def orthogonal_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    entries: list[Any] = []
    for size in shape:
        options = [slices(size), int_arrays(size), bool_arrays(size)]
        if size:
            options.append(in_range_ints(size))
        entries.append(draw(st.one_of(*options)))
    return tuple(entries)


# -- basic selections -----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_basic_matches_numpy(data: st.DataObject) -> None:
    shape, chunks = data.draw(shapes_and_chunks())
    sel = data.draw(basic_selections(shape))
    a = values_of(shape)
    expected = a[sel]
    for plan in (plan_orthogonal(sel, dims_of(shape, chunks), allow_arrays=False),
                 plan_selection(sel, dims_of(shape, chunks))):
        assert plan.shape == expected.shape
        np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


@st.composite
def boxes(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """What a crop is: per axis a slice without a step (any bounds) or a Python int."""
    entries: list[Any] = []
    for size in shape:
        bound = st.integers(-size - 3, size + 3)
        options = [st.builds(slice, st.none() | bound, st.none() | bound, st.sampled_from([None, 1]))]
        if size:
            options.append(st.integers(-size, size - 1))
        entries.append(draw(st.one_of(*options)))
    return tuple(entries)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_box_plan_equals_the_orthogonal_plan(data: st.DataObject) -> None:
    # plan_box is the crop fast path of plan_selection: it must give the very plan of the
    # general planner, projection for projection, and match NumPy.
    shape, chunks = data.draw(shapes_and_chunks())
    assume(shape)  # a 0-d array goes to the general planner
    sel = data.draw(boxes(shape))
    dims = dims_of(shape, chunks)
    box = plan_box(sel, dims)
    assert box is not None
    assert box == plan_orthogonal(sel, dims, allow_arrays=False)
    a = values_of(shape)
    np.testing.assert_array_equal(check_plan(box, a, chunks), a[sel])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_box_written_short_is_planned_as_the_box(data: st.DataObject) -> None:
    """``a[:]``, ``a[...]``, ``a[3]``, ``a[..., 2]`` of an n-d array: the box fast path, with
    the missing axes whole (they took the general planner, twice as slow)."""
    shape, chunks = data.draw(shapes_and_chunks())
    assume(len(shape) >= 2)
    full = data.draw(boxes(shape))
    keep = data.draw(st.integers(0, len(shape) - 1))
    form = data.draw(st.sampled_from(["leading", "ellipsis-first", "ellipsis-last", "bare"]))
    sel: Any = {
        "leading": full[:keep],
        "ellipsis-first": (Ellipsis, *full[len(shape) - keep :]),
        "ellipsis-last": (*full[:keep], Ellipsis),
        "bare": full[0],
    }[form]
    dims = dims_of(shape, chunks)
    box = plan_box(sel, dims)
    assert box is not None, sel
    assert box == plan_orthogonal(sel, dims, allow_arrays=False)
    a = values_of(shape)
    np.testing.assert_array_equal(check_plan(box, a, chunks), a[sel])


def _slice_boxes(shape: tuple[int, ...], length: tuple[int, ...]) -> st.SearchStrategy[tuple[slice, ...]]:
    """Boxes of shape ``length`` that fit inside ``shape``, their starts written from the front
    or (negative) from the back."""

    def axis(n: int, size: int) -> st.SearchStrategy[slice]:
        def write(start: int) -> slice:
            return slice(start, start + n)

        def from_the_back(start: int) -> slice:
            if start == size:
                return write(start)
            return slice(start - size, start + n - size if start + n < size else None)

        starts = st.integers(0, size - n)
        return st.one_of(starts.map(write), starts.map(from_the_back))

    return st.tuples(*(axis(n, size) for n, size in zip(length, shape, strict=True)))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_box_batch_plan_equals_the_boxes_planned_one_by_one(data: st.DataObject) -> None:
    # plan_box_batch is read_batch's planner: box i's projections, in order, with i in front
    # of every output selection; its split cache must never hand one box another's chunks.
    # Up to 4-d: 3-d boxes take loops of their own, the others the general product.
    shape, chunks = data.draw(shapes_and_chunks(max_ndim=4))
    assume(shape)
    length = tuple(data.draw(st.integers(0, n)) for n in shape)
    sels = data.draw(st.lists(_slice_boxes(shape, length), min_size=1, max_size=6))
    dims = dims_of(shape, chunks)
    batch = plan_box_batch(sels, dims)
    assert batch is not None
    expected = _planned_one_by_one(sels, dims, length)
    assert batch.shape == batch.buffer_shape == (len(sels), *length)
    assert batch.projections == expected
    a = values_of(shape)
    np.testing.assert_array_equal(_stacked(batch, a, chunks), np.stack([a[s] for s in sels]))


def _planned_one_by_one(
    sels: list[Any], dims: tuple[Any, ...], shape: tuple[int, ...] | None = None
) -> list[ChunkProjection]:
    """What ``plan_box_batch(sels, dims)`` must equal: each box planned by :func:`plan_box` (of
    ``shape`` where given), box i's index in front of its output selections."""
    expected = []
    for i, sel in enumerate(sels):
        one = plan_box(sel, dims)
        assert one is not None and (shape is None or one.shape == shape)
        expected += [
            ChunkProjection(p.chunk_coords, p.chunk_selection, (i, *p.out_selection), p.is_complete)
            for p in one.projections
        ]
    return expected


def _stacked(plan: SelectionPlan, a: np.ndarray[Any, Any], chunks: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """Execute a batch plan on NumPy chunks of ``a``."""
    out = np.full(plan.shape, -1, dtype=a.dtype)
    for p in plan.projections:
        start = tuple(k * c for k, c in zip(p.chunk_coords, chunks, strict=True))
        chunk = a[tuple(slice(s, s + c) for s, c in zip(start, chunks, strict=True))]
        out[p.out_selection] = chunk[p.chunk_selection]
    return out


@pytest.mark.parametrize(
    "sels",
    [
        [(slice(0, 4), slice(0, 3)), (slice(1, 5), slice(0, 2))],  # shapes differ
        [(slice(0, 4), slice(0, 3)), (slice(0, 4), 2)],  # an integer: not a crop
        [(slice(0, 4, 2), slice(0, 3))],  # a step
        [(slice(0, 4),)],  # fewer entries than axes
        [(Ellipsis, slice(0, 3))],
        [(slice(0, 4), slice(0, 3)), [slice(0, 4), slice(0, 3)]],  # a list is not a box
        [],
    ],
)
def test_box_batch_plan_leaves_other_batches_to_the_one_by_one_planner(sels: list[Any]) -> None:
    assert plan_box_batch(sels, dims_of((9, 7), (4, 3))) is None


def test_box_batch_plan_leaves_other_chunk_grids_to_the_one_by_one_planner() -> None:
    from gpuzarr.metadata.rectilinear import VariableDimensionGrid

    grid = VariableDimensionGrid(9, np.array([0, 2, 5, 9], dtype=np.int64))
    assert plan_box_batch([(slice(1, 5),)], (grid,)) is None


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_box_batch_plan_of_boxes_across_chunks_on_every_axis(ndim: int) -> None:
    # 13 elements in chunks of 4: the last chunk (12..13) is short. Every box has 5 elements
    # a side and crosses a chunk boundary on every axis (2**ndim chunks each).
    # - box 0 starts at 4: chunk 1 whole, chunk 2 in part (its split is cached);
    # - box 1 starts at 8, the same place within its chunk and the same length (the cache's
    #   key), but reaches the short last chunk: chunks 2 and 3 are both whole;
    # - the others start at different places on each axis.
    shape, chunks, starts = (13,) * ndim, (4,) * ndim, (2, 5, 8, 6, 1)
    sels = [(slice(4, 9),) * ndim, (slice(8, 13),) * ndim]
    sels += [tuple(slice(starts[(i + d) % 5], starts[(i + d) % 5] + 5) for d in range(ndim)) for i in range(4)]
    dims = dims_of(shape, chunks)
    batch = plan_box_batch(sels, dims)
    assert batch is not None
    expected = _planned_one_by_one(sels, dims)
    n = 2**ndim
    assert len(batch.projections) == len(sels) * n
    assert batch.projections == expected
    box0, box1 = batch.projections[:n], batch.projections[n : 2 * n]
    assert [p.is_complete for p in box0] == [True] + [False] * (n - 1)  # only chunk (1, ..., 1) is whole
    assert all(p.is_complete for p in box1)
    assert [p.chunk_coords for p in box1][-1] == (3,) * ndim
    a = values_of(shape)
    np.testing.assert_array_equal(_stacked(batch, a, chunks), np.stack([a[s] for s in sels]))


def test_box_batch_plan_of_the_last_chunk_knows_it_is_short() -> None:
    # The split cache is keyed by where a box starts within its chunk and its length; boxes
    # that reach the array's (short) last chunk are split afresh, so completeness is right.
    dims = dims_of((10,), (4,))
    plan = plan_box_batch([(slice(0, 2),), (slice(8, 10),), (slice(4, 6),)], dims)
    assert plan is not None
    assert [(p.chunk_coords, p.is_complete) for p in plan.projections] == [((0,), False), ((2,), True), ((1,), False)]


@pytest.mark.parametrize(
    "sel",
    [
        (slice(0, 4, 2), slice(None)),  # a step
        (np.int64(1), slice(None)),  # a NumPy integer
        (True, slice(None)),  # a bool is no index here
        (Ellipsis, Ellipsis),  # two: the general path raises
        (slice(None), slice(None), 0),  # more entries than axes
        (9, slice(None)),  # out of bounds: the general path raises
        (np.array([1, 2]), slice(None)),
    ],
)
def test_box_plan_leaves_other_selections_to_the_general_planner(sel: tuple[Any, ...]) -> None:
    assert plan_box(sel, dims_of((9, 7), (4, 3))) is None


def test_box_plan_leaves_other_chunk_grids_to_the_general_planner() -> None:
    from gpuzarr.metadata.rectilinear import VariableDimensionGrid

    grid = VariableDimensionGrid(9, np.array([0, 2, 5, 9], dtype=np.int64))
    assert plan_box((slice(1, 5),), (grid,)) is None
    assert plan_selection((slice(1, 5),), (grid,)).shape == (4,)


@pytest.mark.parametrize(
    "sel",
    [
        (),
        (Ellipsis,),
        (0,),
        (-1,),
        (-9, slice(None)),
        (slice(None, None, -1),),
        (slice(None, None, -3), slice(None, None, -2)),
        (slice(8, 2, -2), slice(-1, None, -1)),
        (slice(-100, 100), slice(100, -100, -1)),
        (slice(5, 2), slice(None)),
        (slice(3, 3), 1),
        (slice(None, None, 4), 1),
        (Ellipsis, 2),
        (1, Ellipsis),
        (1, Ellipsis, 2),
        (np.int64(3), slice(1, 5)),
        (np.int32(-2), np.uint8(4)),
        (slice(np.int64(1), np.int64(7), np.int64(3)),),
    ],
)
def test_basic_examples(sel: tuple[Any, ...]) -> None:
    shape, chunks = (9, 7), (4, 3)
    a = values_of(shape)
    plan = plan_selection(sel, dims_of(shape, chunks))
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[sel])


@pytest.mark.parametrize("sel", [(), Ellipsis, (Ellipsis,)])
def test_zero_dimensional(sel: Any) -> None:
    a = np.array(42, dtype=np.int64)
    plan = plan_selection(sel, ())
    assert plan.shape == ()
    assert len(plan.projections) == 1 and plan.projections[0].chunk_coords == ()
    assert plan.projections[0].is_complete
    assert check_plan(plan, a, ()) == 42


def test_zero_dimensional_too_many_indices() -> None:
    with pytest.raises(IndexError):
        plan_selection(0, ())
    with pytest.raises(IndexError):
        plan_orthogonal(([0],), ())
    with pytest.raises(IndexError):
        plan_vectorized((), ())


def test_empty_selections_have_no_projections() -> None:
    dims = dims_of((9, 7), (4, 3))
    for sel in [(slice(5, 2),), (slice(None), slice(0, 0)), (slice(None, None, -1), slice(7, None))]:
        plan = plan_selection(sel, dims)
        assert plan.projections == [] and 0 in plan.shape
    plan = plan_selection((), dims_of((0, 3), (2, 2)))
    assert plan.shape == (0, 3) and plan.projections == []


def test_single_slice_of_chunks_is_complete() -> None:
    dims = dims_of((10,), (4,))
    plan = plan_selection(slice(None), dims)
    assert [p.is_complete for p in plan.projections] == [True, True, True]  # last chunk is partial
    plan = plan_selection(slice(1, None), dims)
    assert [p.is_complete for p in plan.projections] == [False, True, True]
    plan = plan_selection(slice(None, None, -1), dims)
    assert [p.is_complete for p in plan.projections] == [True, True, True]
    plan = plan_selection(slice(None, None, 2), dims_of((10,), (1,)))
    assert all(p.is_complete for p in plan.projections)


@pytest.mark.parametrize(
    "sel", [(9,), (-10,), (0, 7), (0, -8), (100,), (slice(None), 7)]
)
def test_out_of_range_integer(sel: tuple[Any, ...]) -> None:
    with pytest.raises(IndexError, match="out of bounds"):
        plan_selection(sel, dims_of((9, 7), (4, 3)))
    with pytest.raises(BoundsCheckError):
        plan_orthogonal(sel, dims_of((9, 7), (4, 3)))


@pytest.mark.parametrize(
    "sel", [(0, 0, 0), (slice(None),) * 3, (Ellipsis, 0, 0, 0), (0, Ellipsis, 0, 0)]
)
def test_too_many_indices(sel: tuple[Any, ...]) -> None:
    with pytest.raises(IndexError, match="too many indices"):
        plan_selection(sel, dims_of((9, 7), (4, 3)))
    with pytest.raises(IndexError, match="too many indices"):
        plan_orthogonal(sel, dims_of((9, 7), (4, 3)))


@pytest.mark.parametrize(
    "sel", [(Ellipsis, Ellipsis), (None,), ("a",), (1.5,), (True,), (slice(None, None, 0),)]
)
def test_invalid_basic(sel: tuple[Any, ...]) -> None:
    # gpuzarr's own errors, which name the axis, and are also the builtin NumPy raises
    with pytest.raises((InvalidSelectionError, InvalidArgumentError)) as raised:
        plan_selection(sel, dims_of((9, 7), (4, 3)))
    assert isinstance(raised.value, (IndexError, ValueError))


@pytest.mark.parametrize(
    ("sel", "error", "message"),
    [
        ((slice(0.5, 2),), InvalidSelectionError, "slice.*axis 0"),
        ((slice(None), slice(0, "x")), InvalidSelectionError, "axis 1"),
        ((slice(None), slice(None, None, 0)), InvalidArgumentError, "step cannot be zero.*axis 1"),
        ((np.array([0.0]),), InvalidSelectionError, "integers or booleans"),
        ((0, 0, 0), InvalidSelectionError, "too many indices"),
    ],
)
def test_invalid_selections_raise_gpuzarr_errors(sel: tuple[Any, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        plan_orthogonal(sel, dims_of((9, 7), (4, 3)), allow_arrays=True)


def test_a_batch_of_crops_with_a_bad_slice_names_its_axis() -> None:
    import gpuzarr

    a = gpuzarr.zeros((4, 5, 6), chunks=(2, 2, 2))
    with pytest.raises(InvalidSelectionError, match="axis 2"):
        a.read_batch([(slice(0, 2), slice(0, 2), slice(0.5, 2))])
    with pytest.raises(InvalidArgumentError, match="iterable of selections"):
        a.read_batch(None)
    with pytest.raises(InvalidSelectionError, match="do not broadcast"):
        a.vindex[[0, 1, 2], [0, 1], [0, 1]]


def test_basic_rejects_arrays_when_asked() -> None:
    with pytest.raises(IndexError):
        plan_orthogonal(([1, 2],), dims_of((9,), (4,)), allow_arrays=False)


# -- orthogonal selections ------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_orthogonal_matches_numpy(data: st.DataObject) -> None:
    shape, chunks = data.draw(shapes_and_chunks())
    sel = data.draw(orthogonal_selections(shape))
    a = values_of(shape)
    expected = oindex_reference(a, sel)
    plan = plan_orthogonal(sel, dims_of(shape, chunks))
    assert plan.shape == expected.shape
    np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


@pytest.mark.parametrize(
    "sel",
    [
        ([3, 0, 8, 0, -1], slice(None)),
        ([5, 5, 5], [6, 0, 6, -7]),
        (np.array([True, False] * 4 + [True]), [2, 1]),
        (0, slice(None), [1, 2]),  # integer and array separated by a slice
        ([1, 2], slice(None), 0),
        (2, [4, 0], 1),
        ([0, 8], 3, [1, 0, 1]),
        (slice(None, None, -2), [1, 4], slice(1, None, 3)),
        ([], slice(None), 0),
        (Ellipsis, [2, 0]),
        ([1, 2],),
    ],
)
def test_orthogonal_examples(sel: tuple[Any, ...]) -> None:
    shape, chunks = (9, 7, 5), (4, 3, 2)
    a = values_of(shape)
    plan = plan_orthogonal(sel, dims_of(shape, chunks))
    expected = oindex_reference(a, sel)
    np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


def test_orthogonal_matches_ix() -> None:
    shape, chunks = (9, 7), (4, 3)
    a = values_of(shape)
    rows, cols = np.array([8, 1, 1, -3]), np.array([6, 0, 2, 2])
    plan = plan_orthogonal((rows, cols), dims_of(shape, chunks))
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[np.ix_(rows % 9, cols)])


@pytest.mark.parametrize(
    "sel",
    [
        ([9],),
        ([-10],),
        ([0, 1, 100],),
        (np.array([True, False]),),  # wrong length
        (np.ones(10, dtype=bool),),
        (np.ones((9, 1), dtype=bool),),
        ([[0, 1]],),  # 2-D index arrays have no orthogonal meaning
        ([0.5],),
        (slice(None), [7]),
    ],
)
def test_orthogonal_invalid(sel: tuple[Any, ...]) -> None:
    with pytest.raises(IndexError):
        plan_orthogonal(sel, dims_of((9, 7), (4, 3)))


def test_orthogonal_completeness() -> None:
    dims = dims_of((10, 6), (4, 3))
    plan = plan_orthogonal(([3, 2, 1, 0, 0], slice(None)), dims)
    by_chunk = {p.chunk_coords: p.is_complete for p in plan.projections}
    assert by_chunk == {(0, 0): True, (0, 1): True}
    plan = plan_orthogonal((np.arange(8, 10), [5, 4, 3]), dims)
    assert [p.is_complete for p in plan.projections] == [True]  # the last chunk holds only 2 rows


# -- vectorised selections ------------------------------------------------------------------------


@st.composite
def vectorized_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    ndim = len(shape)
    bshape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
    entries: list[Any] = []
    for size in shape:
        # Each array takes the broadcast shape or a broadcast-compatible reduction of it.
        own = tuple(n if draw(st.booleans()) else 1 for n in bshape)
        own = own[draw(st.integers(0, len(own))):]
        if draw(st.integers(0, 4)) == 0:
            entries.append(draw(in_range_ints(size)))
            continue
        values = draw(st.lists(in_range_ints(size), min_size=math.prod(own), max_size=math.prod(own)))
        entries.append(np.asarray(values, dtype=np.int64).reshape(own))
    assert len(entries) == ndim
    return tuple(entries)


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_vectorized_matches_numpy(data: st.DataObject) -> None:
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1, min_size=1))
    sel = data.draw(vectorized_selections(shape))
    a = values_of(shape)
    expected = a[sel]
    for plan in (plan_vectorized(sel, dims_of(shape, chunks)), plan_selection(sel, dims_of(shape, chunks))):
        assert plan.shape == expected.shape
        np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_vectorized_mask_matches_numpy(data: st.DataObject) -> None:
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1))
    mask = np.asarray(
        data.draw(st.lists(st.booleans(), min_size=math.prod(shape), max_size=math.prod(shape))), dtype=bool
    ).reshape(shape)
    a = values_of(shape)
    plan = plan_vectorized(mask, dims_of(shape, chunks))
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[mask])
    plan = plan_vectorized((mask,), dims_of(shape, chunks))
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[mask])
    plan = plan_selection(mask, dims_of(shape, chunks))
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[mask])


def test_vectorized_full_cover_is_complete() -> None:
    shape, chunks = (5, 4), (2, 3)
    a = values_of(shape)
    rows, cols = np.indices(shape)
    plan = plan_vectorized((rows[::-1], cols), dims_of(shape, chunks))
    assert all(p.is_complete for p in plan.projections)
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[rows[::-1], cols])
    plan = plan_vectorized(np.ones(shape, dtype=bool), dims_of(shape, chunks))
    assert all(p.is_complete for p in plan.projections)
    plan = plan_vectorized(([0, 0, 1, 1], [0, 1, 0, 1]), dims_of(shape, chunks))
    assert [p.is_complete for p in plan.projections] == [False]


def test_vectorized_empty() -> None:
    dims = dims_of((5, 4), (2, 3))
    plan = plan_vectorized((np.zeros((0, 2), dtype=int), 1), dims)
    assert plan.shape == (0, 2) and plan.projections == []
    plan = plan_vectorized(([], []), dims)
    assert plan.shape == (0,) and plan.projections == []


@pytest.mark.parametrize(
    "sel",
    [
        ([0, 5], [0, 0]),
        ([0, -6], [0, 0]),
        ([0], [4]),
        (np.ones((5, 3), dtype=bool),),  # mask of the wrong shape
        ([0, 1], [0, 1, 2]),  # does not broadcast
        ([0, 1],),  # one array for two axes
        ([0], [0], [0]),
        (slice(None), [0]),
        ([0.5], [1]),
        ([True, False], [0, 1]),
    ],
)
def test_vectorized_invalid(sel: tuple[Any, ...]) -> None:
    with pytest.raises(IndexError):
        plan_vectorized(sel, dims_of((5, 4), (2, 3)))


# -- plan_selection dispatch: NumPy's meaning -----------------------------------------------------


@st.composite
def numpy_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A selection with exactly one 1-D index array among integers, slices and maybe Ellipsis."""
    axis = draw(st.integers(0, len(shape) - 1))
    entries: list[Any] = []
    for i, size in enumerate(shape):
        if i == axis:
            entries.append(draw(int_arrays(size) | bool_arrays(size)))
        else:
            options = [slices(size)]
            if size:
                options.append(in_range_ints(size))
            entries.append(draw(st.one_of(*options)))
    sel = with_ellipsis_or_short(draw, entries, keep=axis)
    assert any(isinstance(s, (list, np.ndarray)) for s in sel)
    return sel


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_selection_with_one_array_matches_numpy(data: st.DataObject) -> None:
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1))
    sel = data.draw(numpy_selections(shape))
    a = values_of(shape)
    expected = a[numpy_index(sel)]
    plan = plan_selection(sel, dims_of(shape, chunks))
    assert plan.shape == expected.shape
    np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


@pytest.mark.parametrize(
    "sel",
    [
        (0, slice(None), [1, 2]),
        (0, slice(None), [3, 0, 3]),
        ([2, 1], slice(1, 3), 1),
        (1, slice(None), slice(None, None, -1), [4, 0]),
        (Ellipsis, 0, slice(None), [1]),
        (0, Ellipsis, [1, 1]),
        (0, [1, 2], slice(None)),
        ([0, 1], [1, 2], [0, 0]),
        ([[0, 1], [2, 3]], 1, [[0], [3]]),
        (np.int64(2), slice(None)),
        (np.int64(2),),
    ],
)
def test_selection_examples_match_numpy(sel: tuple[Any, ...]) -> None:
    shape = (4, 5, 5) if len(expand_ellipsis(sel, 3) if Ellipsis in sel else sel) <= 3 else (4, 5, 5, 6)
    if len([s for s in sel if s is not Ellipsis]) == 4:
        shape = (4, 5, 5, 6)
    chunks = (3, 2, 4, 5)[: len(shape)]
    a = values_of(shape)
    expected = a[numpy_index(sel)]
    plan = plan_selection(sel, dims_of(shape, chunks))
    assert plan.shape == expected.shape
    np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


MIXED_ADVANCED = [
    ([0, 1], slice(None), [1, 2]),  # apart: the points' axis first
    ([0, 1], [1, 2]),  # adjacent, trailing axis left out
    (slice(1, 4), [3, 0], [[1], [2]]),  # adjacent after a slice: in place
    (slice(None), [0, 1], Ellipsis, [0, 1]),  # an Ellipsis between parts them, though it stands for no axis
    ([0, 3], np.array([True, False, False, True, False]), slice(None)),  # a mask among arrays
    (np.arange(20).reshape(4, 5) % 2 == 0, [1, 0, 5, 2, 3, 4, 0, 1, 2, 3]),
    (np.array(0), slice(None), [1, 2]),  # a 0-d array is the integer it holds
    (np.arange(20).reshape(4, 5) % 3 == 0,),  # a mask over the first two axes
    (Ellipsis, np.arange(30).reshape(5, 6) % 4 == 1),  # over the last two
    (np.arange(120).reshape(4, 5, 6) > 100, Ellipsis),
    ([[0], [3]], slice(None, None, -2), [-1, 0, 5]),  # negative step, negative index
    (2, [1, 4], slice(1, 5)),  # an integer with an array: NumPy takes both as advanced
    ([1, 1, 1], slice(0, 0), [0, 1, 2]),  # an empty slice
]


@pytest.mark.parametrize("sel", MIXED_ADVANCED, ids=[str(i) for i in range(len(MIXED_ADVANCED))])
def test_mixes_of_index_arrays_masks_and_slices_read_as_numpy_does(sel: tuple[Any, ...]) -> None:
    """Several index arrays (masks over some axes, 0-d arrays) with slices were refused as
    ambiguous; NumPy's rule places the points' axes."""
    shape, chunks = (4, 5, 6), (3, 2, 4)
    a = values_of(shape)
    expected = a[sel]
    plan = plan_selection(sel, dims_of(shape, chunks))
    assert plan.shape == expected.shape
    np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


@given(data=st.data())
@settings(max_examples=120, deadline=None)
def test_random_mixes_of_index_arrays_and_slices_read_as_numpy_does(data: st.DataObject) -> None:
    shape, chunks = (5, 4, 6), (2, 3, 4)
    sel: list[Any] = []
    for size in shape:
        kind = data.draw(st.sampled_from(["array", "array", "slice", "int"]))
        if kind == "slice":
            start, stop = data.draw(st.integers(-size, size)), data.draw(st.integers(-size, size))
            sel.append(slice(start, stop, data.draw(st.sampled_from([None, 1, 2, -1, -3]))))
        elif kind == "int":
            sel.append(data.draw(st.integers(-size, size - 1)))
        else:
            n = data.draw(st.sampled_from([(2,), (3,), (1, 2), (2, 1)]))
            sel.append(np.array(data.draw(st.lists(st.integers(-size, size - 1), min_size=math.prod(n),
                                                   max_size=math.prod(n)))).reshape(n))  # fmt: skip
    a = values_of(shape)
    try:
        expected = a[tuple(sel)]
    except IndexError:  # arrays that do not broadcast together
        with pytest.raises(InvalidSelectionError):
            plan_selection(tuple(sel), dims_of(shape, chunks))
        return
    plan = plan_selection(tuple(sel), dims_of(shape, chunks))
    assert plan.shape == expected.shape
    np.testing.assert_array_equal(check_plan(plan, a, chunks), expected)


@pytest.mark.parametrize("mask", [np.array([True]), np.array([True, False, True, True])])
def test_a_mask_of_other_extents_than_its_axes_is_refused(mask: np.ndarray[Any, Any]) -> None:
    # Its length was never checked: NumPy raises, gpuzarr read and wrote its nonzero() points.
    with pytest.raises(BoundsCheckError, match="a boolean index of shape"):
        plan_selection(([0, 1], slice(None), mask), dims_of((4, 5, 6), (3, 2, 4)))


def test_index_arrays_that_do_not_broadcast_are_refused() -> None:
    with pytest.raises(InvalidSelectionError, match="do not broadcast"):
        plan_selection(([0, 1], slice(None), [1, 2, 3]), dims_of((4, 5, 6), (3, 2, 4)))
    with pytest.raises(InvalidSelectionError, match="0-d boolean"):
        plan_selection((np.array(True), slice(None), [0, 1]), dims_of((4, 5, 6), (3, 2, 4)))


def test_selection_one_dimensional_mask_is_orthogonal() -> None:
    shape, chunks = (7,), (3,)
    a = values_of(shape)
    mask = np.array([True, False, True, True, False, False, True])
    plan = plan_selection(mask, dims_of(shape, chunks))
    np.testing.assert_array_equal(check_plan(plan, a, chunks), a[mask])


@given(shape_chunks=shapes_and_chunks(min_ndim=1, min_size=1), data=st.data())
@settings(max_examples=60, deadline=None)
def test_out_of_range_arrays_raise(shape_chunks: Any, data: st.DataObject) -> None:
    shape, chunks = shape_chunks
    axis = data.draw(st.integers(0, len(shape) - 1))
    size = shape[axis]
    bad = data.draw(st.integers(size, size + 5) | st.integers(-size - 5, -size - 1))
    sel: list[Any] = [slice(None)] * len(shape)
    sel[axis] = [0, bad]
    with pytest.raises(IndexError, match="out of bounds"):
        plan_orthogonal(tuple(sel), dims_of(shape, chunks))
    with pytest.raises(IndexError, match="out of bounds"):
        plan_selection(tuple(sel), dims_of(shape, chunks))
    points: list[Any] = [[0, 0]] * len(shape)
    points[axis] = [0, bad]
    with pytest.raises(IndexError, match="out of bounds"):
        plan_vectorized(tuple(points), dims_of(shape, chunks))


# -- whole-grid invariants ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(shape_chunks=shapes_and_chunks())
def test_full_selection_touches_every_chunk_once_and_completely(shape_chunks: Any) -> None:
    shape, chunks = shape_chunks
    assume(0 not in shape)
    dims = dims_of(shape, chunks)
    plan = plan_selection(Ellipsis, dims)
    coords = sorted(p.chunk_coords for p in plan.projections)
    grid = tuple(d.nchunks for d in dims)
    assert coords == list(itertools.product(*(range(n) for n in grid)))
    assert all(p.is_complete for p in plan.projections)
    np.testing.assert_array_equal(check_plan(plan, values_of(shape), chunks), values_of(shape))


@pytest.mark.parametrize("value", [2**63, 2**64 - 1])
def test_unsigned_indices_past_intp_are_out_of_bounds_not_wrapped(value: int) -> None:
    """Cast to intp, 2**64 - 1 would be -1 and select the last element (as NumPy's own indexing
    does): it is out of bounds, and the message gives the index as it was."""
    import gpuzarr

    a = gpuzarr.zeros((5,), chunks=(2,))
    index = np.array([value], dtype=np.uint64)
    for read in (lambda: a[index], lambda: a.oindex[index], lambda: a.vindex[index]):
        with pytest.raises(BoundsCheckError, match=rf"index {value} is out of bounds"):
            read()
    assert a.vindex[np.array([4], dtype=np.uint64)].tolist() == [0.0]


def test_a_large_point_selection_is_planned_in_a_few_times_its_indices() -> None:
    """Each intermediate of the grouping by chunk is dropped once it has served, and indices
    without negative ones are not copied: about 23 bytes a point at the peak (it was 47)."""
    import tracemalloc

    from gpuzarr.plan.selection import plan_vectorized

    indices = np.random.default_rng(0).integers(0, 1000, 1_000_000)
    tracemalloc.start()
    try:
        plan = plan_vectorized((indices,), dims_of((1000,), (100,)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(p.chunk_selection[0].size for p in plan.projections) == indices.size
    assert peak < 32 * indices.size


@pytest.mark.parametrize("selection", [np.s_[...], np.s_[::3], np.s_[5:], np.s_[[1, 2, 3]]])
def test_a_read_of_more_chunks_than_one_read_plans_is_refused_at_once(selection: Any) -> None:
    """An array declared with 2**40 one-element chunks: a[...] built gigabytes of projections
    for 11 s, then raised a bare MemoryError (zarr-python fails at once, allocating the output)."""
    import gpuzarr
    from gpuzarr.errors import InvalidSelectionError
    from gpuzarr.plan.dimension import MAX_PLANNED_CHUNKS

    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(1 << 40,), dtype="u1", chunks=(1,), device="cpu")
    if isinstance(selection, list):
        assert array[selection].tolist() == [0, 0, 0]  # a few chunks: read
        return
    refused = rf"touches \d+ chunks, more than one read plans \({MAX_PLANNED_CHUNKS}\)"
    with pytest.raises(InvalidSelectionError, match=refused):
        array[selection]


def test_a_selection_of_nothing_splits_no_other_axis_into_chunks() -> None:
    """An axis of length 0 beside one of 2 * 10**7 chunks: every read, write and batch was
    refused as touching 2 * 10**7 chunks (10**6 of them took 2 s to plan)."""
    import gpuzarr

    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(2 * 10**7, 0), dtype="u1", chunks=(1, 1), device="cpu")
    assert array[...].shape == (2 * 10**7, 0)
    assert array[5:, :].shape == (2 * 10**7 - 5, 0)
    assert array.oindex[:, []].shape == (2 * 10**7, 0)
    assert array.oindex[[1, 2], :].shape == (2, 0)
    assert array.read_batch([(slice(0, 3), slice(None)), (slice(4, 7), slice(None))]).shape == (2, 3, 0)
    array[...] = 0
    array[:, :] = np.zeros((2 * 10**7, 0), dtype="u1")
    with pytest.raises(gpuzarr.errors.BoundsCheckError):  # the other entries are still checked
        array.oindex[[2 * 10**7], :]


class CountingIndex:
    """An index array of another library (a Dask array computes its graph at each
    ``np.asarray``): counts how often it is made a NumPy array."""

    def __init__(self, values: Any) -> None:
        self.values = np.asarray(values)
        self.conversions = 0

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        self.conversions += 1
        return self.values if dtype is None else self.values.astype(dtype)


@pytest.mark.parametrize(
    ("make", "planner"),
    [
        (lambda i: i, plan_selection),  # one index array
        (lambda i: (i, slice(1, 4)), plan_selection),
        (lambda i: (slice(None), i), plan_orthogonal),
        (lambda i: (i, i), plan_vectorized),
        (lambda i: (i, 2), plan_selection),  # vectorised with an integer
    ],
)
def test_an_index_array_of_another_library_is_converted_once(make: Any, planner: Any) -> None:
    dims = dims_of((10, 8), (3, 3))
    index = CountingIndex([[1, 7], [4, 2]] if planner is plan_vectorized else [1, 7, 4])
    plan = planner(make(index), dims)
    assert index.conversions == 1
    expected = planner(make(index.values), dims)
    assert plan.shape == expected.shape and len(plan.projections) == len(expected.projections)


def test_a_mask_of_another_library_is_converted_once() -> None:
    dims = dims_of((6, 5), (3, 3))
    mask = CountingIndex(np.arange(30).reshape(6, 5) % 4 == 0)
    assert plan_selection(mask, dims).shape == (8,)
    assert mask.conversions == 1
