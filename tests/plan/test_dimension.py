"""project_slice: the chunks a strided slice touches, found without visiting the chunks between
its elements when its step is longer than they are."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuzarr
from gpuzarr.metadata.chunk_grid import DimensionGrid
from gpuzarr.metadata.rectilinear import VariableDimensionGrid
from gpuzarr.plan.dimension import DimensionProjection, project_slice


def _selected(projections: list[DimensionProjection], dim: DimensionGrid | VariableDimensionGrid) -> list[int]:
    """The array indices the projections select, in output order (checking the output slices
    follow each other and each chunk's selection stays inside it)."""
    out, position = [], 0
    for p in projections:
        assert isinstance(p.selection, slice) and isinstance(p.out, slice)
        start, stop = int(dim.chunk_start(p.chunk)), min(int(dim.chunk_start(p.chunk + 1)), dim.size)
        local = list(range(stop - start))[p.selection]
        assert p.out.start == position and p.out.stop == position + len(local)
        position = p.out.stop
        out += [start + i for i in local]
        assert p.complete == (len(local) == stop - start)
    return out


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 400),
    chunk=st.integers(1, 9),
    start=st.integers(0, 400),
    stop=st.integers(0, 400),
    step=st.integers(-60, 60).filter(lambda s: s != 0),
)
def test_every_slice_projects_to_its_elements(size: int, chunk: int, start: int, stop: int, step: int) -> None:
    start, stop, step = slice(start, stop, step).indices(size)
    dims = [
        DimensionGrid(size, chunk),
        VariableDimensionGrid(size, np.concatenate(([0], np.cumsum([chunk, 1] * (size // 2 + 1)))).astype(np.int64)),
    ]
    for dim in dims:
        got = _selected(project_slice(start, stop, step, dim), dim)
        assert got == list(range(start, stop, step))


def test_a_long_step_over_a_huge_grid_visits_only_its_elements() -> None:
    dim = DimensionGrid(10**18, 1)
    projections = project_slice(0, 10**18, 10**17, dim)
    assert [p.chunk for p in projections] == [k * 10**17 for k in range(10)]
    a = gpuzarr.zeros((10**12,), chunks=(1,), dtype="int8")
    a[5 * 10**11] = 7
    np.testing.assert_array_equal(a[:: 10**11], [0, 0, 0, 0, 0, 7, 0, 0, 0, 0])
    np.testing.assert_array_equal(a[5 * 10**11 :: -(10**11)], [7, 0, 0, 0, 0, 0])
