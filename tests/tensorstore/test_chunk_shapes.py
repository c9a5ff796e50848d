"""Chunk layout constraints and chunk shape choice, checked against TensorStore itself.

Every case creates an in-memory array with TensorStore's ``zarr3`` (or ``zarr``) driver from the
same ChunkLayout JSON and compares the read / write chunk shapes and inner order it picked with
:func:`choose_chunk_shapes`; where TensorStore refuses, gpuzarr must raise ``MetadataError``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuzarr.errors import MetadataError
from gpuzarr.tensorstore.chunk_layout import ChunkGridConstraints, ChunkLayoutConstraints
from gpuzarr.tensorstore.chunk_shapes import ChosenLayout, choose_chunk_shapes

if TYPE_CHECKING:
    from collections.abc import Callable

ts = pytest.importorskip("tensorstore")

DTYPES = ("uint8", "uint16", "float32", "float64", "complex128")

Outcome = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | str


def tensorstore_layout(shape: list[int], layout: dict[str, Any], dtype: str, zarr_format: int) -> Outcome:
    """What TensorStore picks: (read_chunk, write_chunk, inner_order), or "error"."""
    spec = {
        "driver": "zarr3" if zarr_format == 3 else "zarr",
        "kvstore": {"driver": "memory"},
        "schema": {"chunk_layout": layout},
    }
    try:
        store = ts.open(spec, create=True, dtype=dtype, shape=shape).result()
    except ValueError:
        return "error"
    chosen = store.chunk_layout
    return tuple(chosen.read_chunk.shape), tuple(chosen.write_chunk.shape), tuple(chosen.inner_order)


def gpuzarr_layout(shape: list[int], layout: dict[str, Any], dtype: str, zarr_format: int) -> Outcome:
    try:
        constraints = ChunkLayoutConstraints.from_json(layout)
        chosen = choose_chunk_shapes(
            tuple(shape), constraints, zarr_format=zarr_format, itemsize=np.dtype(dtype).itemsize
        )
    except MetadataError:
        return "error"
    return chosen.read_chunk, chosen.write_chunk, chosen.inner_order


def assert_same_as_tensorstore(
    shape: list[int], layout: dict[str, Any], dtype: str, zarr_format: int
) -> Outcome:
    expected = tensorstore_layout(shape, layout, dtype, zarr_format)
    assert gpuzarr_layout(shape, layout, dtype, zarr_format) == expected, (shape, layout, dtype, zarr_format)
    return expected


# ---------------------------------------------------------------------------------------------
# The examples in TensorStore's zarr3 and zarr driver documentation
# ---------------------------------------------------------------------------------------------

DOCUMENTED = [
    # zarr3: unconstrained -> about a million elements per chunk, equal sides.
    (3, {}, (101, 101, 101), (101, 101, 101)),
    # zarr3: separate read and write constraints -> sharding.
    (
        3,
        {
            "chunk": {"aspect_ratio": [2, 1, 1]},
            "read_chunk": {"elements": 2000000},
            "write_chunk": {"elements": 1000000000},
        },
        (200, 100, 100),
        (1000, 1000, 1000),
    ),
    # zarr3: explicit read and write chunk shapes.
    (
        3,
        {"read_chunk": {"shape": [64, 64, 64]}, "write_chunk": {"shape": [512, 512, 512]}},
        (64, 64, 64),
        (512, 512, 512),
    ),
    # zarr (v2) driver examples.
    (2, {}, (101, 101, 101), (101, 101, 101)),
    (2, {"chunk": {"shape": [100, 200, 300]}}, (100, 200, 300), (100, 200, 300)),
    (2, {"chunk": {"aspect_ratio": [1, 2, 2]}}, (64, 128, 128), (64, 128, 128)),
    (2, {"chunk": {"aspect_ratio": [1, 2, 2], "elements": 2000000}}, (79, 159, 159), (79, 159, 159)),
]


@pytest.mark.parametrize(("zarr_format", "layout", "read_chunk", "write_chunk"), DOCUMENTED)
def test_documented_examples(
    zarr_format: int, layout: dict[str, Any], read_chunk: tuple[int, ...], write_chunk: tuple[int, ...]
) -> None:
    shape = (1000, 2000, 3000)
    chosen = choose_chunk_shapes(
        shape, ChunkLayoutConstraints.from_json(layout), zarr_format=zarr_format, itemsize=2
    )
    assert chosen == ChosenLayout(read_chunk, write_chunk, (0, 1, 2))
    assert chosen.sharded == (read_chunk != write_chunk)
    assert assert_same_as_tensorstore(list(shape), layout, "uint16", zarr_format) == (
        read_chunk,
        write_chunk,
        (0, 1, 2),
    )


def test_default_is_a_mebi_element() -> None:
    # 1024**2 elements: a 1-D array gets exactly that, a cube the largest side not exceeding it.
    assert choose_chunk_shapes((10**8,)).write_chunk == (1024 * 1024,)
    assert choose_chunk_shapes((4096, 4096)).write_chunk == (1024, 1024)


# ---------------------------------------------------------------------------------------------
# A deterministic grid of shapes x constraints x formats x dtypes
# ---------------------------------------------------------------------------------------------

SHAPES = [
    [1],
    [7],
    [1000],
    [1048583],
    [1, 1],
    [13, 17],
    [1000, 2000],
    [0, 5],
    [3, 1, 4],
    [101, 101, 101],
    [1000, 2000, 3000],
    [2, 3, 5, 7],
    [64, 1, 97, 1],
    [1, 1, 1, 1],
]


def _cycle(values: list[Any], rank: int) -> list[Any]:
    return [values[i % len(values)] for i in range(rank)]


# Each builds ChunkLayout JSON for a given rank.
CONSTRAINTS: dict[str, Callable[[int], dict[str, Any]]] = {
    "none": lambda r: {},
    "chunk_elements": lambda r: {"chunk": {"elements": 1000}},
    "chunk_elements_odd": lambda r: {"chunk": {"elements": 123457}},
    "read_elements": lambda r: {"read_chunk": {"elements": 5000}},
    "write_elements": lambda r: {"write_chunk": {"elements": 10**7}},
    "read_write_elements": lambda r: {"read_chunk": {"elements": 4096}, "write_chunk": {"elements": 10**6}},
    "elements_zero": lambda r: {"read_chunk": {"elements": 0}},
    "aspect_ratio_with_zeros": lambda r: {"chunk": {"aspect_ratio": _cycle([0, 1, 2, 4], r)}},
    "aspect_ratio_soft_and_elements": lambda r: {
        "chunk": {"aspect_ratio_soft_constraint": _cycle([3, 0.5, 10], r), "elements": 50000}
    },
    "aspect_ratio_read_write": lambda r: {
        "read_chunk": {"aspect_ratio": _cycle([10, 1, 3], r), "elements": 777},
        "write_chunk": {"aspect_ratio": _cycle([1, 7], r), "elements": 10**6},
    },
    "shape_with_zeros": lambda r: {"chunk": {"shape": _cycle([50, 0], r)}},
    "shape_full_extent": lambda r: {"read_chunk": {"shape": _cycle([-1, 0], r)}},
    "shape_soft": lambda r: {"chunk": {"shape_soft_constraint": _cycle([100, 0, 7], r)}},
    "shape_soft_vs_hard": lambda r: {
        "chunk": {"shape_soft_constraint": _cycle([10, 0], r)},
        "write_chunk": {"shape": _cycle([20, 0], r)},
    },
    "sharded_shapes": lambda r: {"read_chunk": {"shape": [8] * r}, "write_chunk": {"shape": [64] * r}},
    "read_hard_write_soft": lambda r: {
        "read_chunk": {"shape": [30] * r},
        "write_chunk": {"shape_soft_constraint": [100] * r},
    },
    "read_soft_write_hard": lambda r: {
        "read_chunk": {"shape_soft_constraint": [30] * r},
        "write_chunk": {"shape": [100] * r},
    },
    "read_write_hard_conflict": lambda r: {
        "read_chunk": {"shape": [30] * r},
        "write_chunk": {"shape": [100] * r},
    },
    "read_hard_only": lambda r: {"read_chunk": {"shape": [64] + [0] * (r - 1)}},
    "read_shape_write_elements": lambda r: {
        "read_chunk": {"shape": _cycle([0, 16], r)},
        "write_chunk": {"elements": 10**5},
    },
    "elements_hard_vs_soft": lambda r: {
        "read_chunk": {"elements": 100},
        "write_chunk": {"elements_soft_constraint": 200},
    },
    "inner_order_reversed": lambda r: {"inner_order": list(range(r))[::-1]},
    "inner_order_soft_shuffled": lambda r: {"inner_order_soft_constraint": [*range(1, r), 0]},
    "inner_order_hard_shuffled": lambda r: {"inner_order": [*range(1, r), 0]},
    "grid_origin_hard_nonzero": lambda r: {"grid_origin": [1] * r},
    "grid_origin_soft_nonzero": lambda r: {"grid_origin_soft_constraint": [3] * r},
    "codec_chunk_shape": lambda r: {"codec_chunk": {"shape": [4] * r}},
    "codec_chunk_aspect_ratio": lambda r: {"codec_chunk": {"aspect_ratio": [2] * r, "elements": 10}},
}

GRID = [
    pytest.param(shape, name, zarr_format, id=f"{'x'.join(map(str, shape))}-{name}-v{zarr_format}")
    for shape, name, zarr_format in itertools.product(SHAPES, CONSTRAINTS, (3, 2))
]


@pytest.mark.parametrize(("shape", "name", "zarr_format"), GRID)
def test_grid_matches_tensorstore(shape: list[int], name: str, zarr_format: int) -> None:
    layout = CONSTRAINTS[name](len(shape))
    outcomes = {dtype: assert_same_as_tensorstore(shape, layout, dtype, zarr_format) for dtype in DTYPES}
    # The data type never changes the choice.
    assert len(set(outcomes.values())) == 1


def test_grid_covers_errors_and_sharding() -> None:
    """The grid is only useful if it exercises refusals and sharded results as well."""
    outcomes = [
        gpuzarr_layout(shape, CONSTRAINTS[name](len(shape)), "uint8", zarr_format)
        for shape, name, zarr_format in itertools.product(SHAPES, CONSTRAINTS, (3, 2))
    ]
    assert sum(o == "error" for o in outcomes) > 50
    assert sum(o != "error" and o[0] != o[1] for o in outcomes) > 50


# ---------------------------------------------------------------------------------------------
# Random cases
# ---------------------------------------------------------------------------------------------

_SIZES = st.sampled_from([0, 1, 2, 3, 5, 7, 13, 64, 100, 101, 997, 1000, 4096, 10007, 65536])
_SHAPE_ENTRY = st.sampled_from([0, 0, 0, -1, 1, 2, 5, 7, 16, 64, 100, 128, 1000, None])
_ASPECT_ENTRY = st.sampled_from([0, 0, 0.5, 1, 2, 3, 1.5, 10, 0.1, 7])
_ELEMENTS = st.sampled_from([0, 1, 7, 100, 1000, 4096, 12345, 100000, 1000000, 2000000, 10**9])


@st.composite
def _grid_json(draw: st.DrawFn, rank: int, allow_shape: bool) -> dict[str, Any]:
    grid: dict[str, Any] = {}
    for name, entry in (("shape", _SHAPE_ENTRY), ("aspect_ratio", _ASPECT_ENTRY)):
        if name == "shape" and not allow_shape:
            continue
        for suffix in ("", "_soft_constraint"):
            if draw(st.integers(0, 3)) == 0:
                grid[name + suffix] = draw(st.lists(entry, min_size=rank, max_size=rank))
    for member in ("elements", "elements_soft_constraint"):
        if draw(st.integers(0, 3)) == 0:
            grid[member] = draw(_ELEMENTS)
    return grid


@st.composite
def random_cases(draw: st.DrawFn) -> tuple[list[int], dict[str, Any], str, int]:
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(_SIZES, min_size=rank, max_size=rank))
    layout: dict[str, Any] = {}
    for key in ("chunk", "read_chunk", "write_chunk", "codec_chunk"):
        if draw(st.booleans()):
            layout[key] = draw(_grid_json(rank, allow_shape=key != "codec_chunk" or draw(st.booleans())))
    if draw(st.integers(0, 5)) == 0:
        order = draw(st.permutations(range(rank)))
        layout[draw(st.sampled_from(["inner_order", "inner_order_soft_constraint"]))] = list(order)
    if draw(st.integers(0, 10)) == 0:
        origin = draw(st.lists(st.sampled_from([0, 0, 1, None]), min_size=rank, max_size=rank))
        layout[draw(st.sampled_from(["grid_origin", "grid_origin_soft_constraint"]))] = origin
    return shape, layout, draw(st.sampled_from(DTYPES)), draw(st.sampled_from([2, 3]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cases())
def test_random_cases_match_tensorstore(case: tuple[list[int], dict[str, Any], str, int]) -> None:
    assert_same_as_tensorstore(*case)


# ---------------------------------------------------------------------------------------------
# Parsing: from_json / to_json against tensorstore.ChunkLayout
# ---------------------------------------------------------------------------------------------

VALID_JSON: list[dict[str, Any]] = [
    {},
    {"rank": 2},
    {"inner_order": [1, 0]},
    {"inner_order": [0, 1], "inner_order_soft_constraint": [1, 0]},
    {"inner_order_soft_constraint": [2, 0, 1]},
    {"grid_origin": [0, None], "grid_origin_soft_constraint": [5, 6]},
    {"chunk": {"shape": [1, -1], "aspect_ratio": [1, 2], "elements": 5}},
    {"chunk": {"elements_soft_constraint": 7}, "read_chunk": {"elements_soft_constraint": 9}},
    {"chunk": {"elements": 100}, "write_chunk": {"elements_soft_constraint": 200}},
    {"chunk": {"shape_soft_constraint": [10, 0]}, "write_chunk": {"shape": [20, 0]}},
    {"read_chunk": {"shape": [5, 0], "shape_soft_constraint": [7, 8]}},
    {"read_chunk": {"shape": [-1, 0], "shape_soft_constraint": [7, 8]}},
    {"read_chunk": {"shape": [None, 0]}},
    {"read_chunk": {"shape": [1.0], "elements": 1000.0}},
    {"read_chunk": {"aspect_ratio": [None, 0.5], "aspect_ratio_soft_constraint": [3, 4]}},
    {"read_chunk": {"elements": 0}},
    {"write_chunk": {"elements": 2**62 - 2}, "read_chunk": {"shape": [2**62 - 2]}},
    {"codec_chunk": {"aspect_ratio": [2, 0, 1]}, "chunk": {"aspect_ratio_soft_constraint": [1, 1, 1]}},
    {"read_chunk": {"shape": []}},
    {"inner_order": []},
]

INVALID_JSON: list[tuple[Any, str]] = [
    (None, "chunk_layout"),
    ([1], "chunk_layout"),
    ({"foo": 1}, "foo"),
    ({"read_chunk": {"foo": 1}}, "read_chunk"),
    ({"read_chunk": None}, "read_chunk"),
    ({"read_chunk": {"shape": None}}, "read_chunk.shape"),
    ({"read_chunk": {"shape": [-2]}}, "read_chunk.shape"),
    ({"read_chunk": {"shape": [1.5]}}, "read_chunk.shape"),
    ({"read_chunk": {"shape": ["5"]}}, "read_chunk.shape"),
    ({"read_chunk": {"shape": [True]}}, "read_chunk.shape"),
    ({"read_chunk": {"shape": [2**62 - 1]}}, "read_chunk.shape"),
    ({"read_chunk": {"shape": [1] * 33}}, "read_chunk.shape"),
    ({"read_chunk": {"aspect_ratio": [-1]}}, "read_chunk.aspect_ratio"),
    ({"read_chunk": {"aspect_ratio": ["1.5"]}}, "read_chunk.aspect_ratio"),
    ({"read_chunk": {"aspect_ratio": 1}}, "read_chunk.aspect_ratio"),
    ({"read_chunk": {"elements": -1}}, "read_chunk.elements"),
    ({"read_chunk": {"elements": None}}, "read_chunk.elements"),
    ({"read_chunk": {"elements": "5"}}, "read_chunk.elements"),
    ({"read_chunk": {"elements": 2**62 - 1}}, "read_chunk.elements"),
    ({"read_chunk": {"shape": [1, 2]}, "write_chunk": {"aspect_ratio": [1]}}, "rank"),
    ({"rank": 2, "inner_order": [0]}, "inner_order"),
    ({"rank": 33}, "rank"),
    ({"rank": -1}, "rank"),
    ({"inner_order": [0, 0]}, "inner_order"),
    ({"inner_order": [0, 2]}, "inner_order"),
    ({"inner_order": [32]}, "inner_order"),
    ({"grid_origin": [2**62]}, "grid_origin"),
    ({"chunk": {"shape": [10, 0]}, "write_chunk": {"shape": [20, 0]}}, "write_chunk.shape"),
    ({"chunk": {"elements": 100}, "write_chunk": {"elements": 200}}, "write_chunk.elements"),
    (
        {"chunk": {"aspect_ratio": [1, 0, 2]}, "codec_chunk": {"aspect_ratio": [3, 0, 0]}},
        "codec_chunk.aspect_ratio",
    ),
    ({"inner_order": [0, 1], "chunk": {"shape": [1, 2, 3]}}, "rank"),
]


@pytest.mark.parametrize("layout", VALID_JSON)
def test_json_matches_tensorstore(layout: dict[str, Any]) -> None:
    constraints = ChunkLayoutConstraints.from_json(layout)
    assert constraints.to_json() == ts.ChunkLayout(layout).to_json()
    # What to_json writes parses back to the same constraints.
    assert ChunkLayoutConstraints.from_json(constraints.to_json()) == constraints


@pytest.mark.parametrize(("layout", "field_name"), INVALID_JSON)
def test_invalid_json_raises_naming_the_field(layout: Any, field_name: str) -> None:
    with pytest.raises(ValueError):
        ts.ChunkLayout(layout)
    with pytest.raises(MetadataError, match=field_name.replace(".", r"\.")):
        ChunkLayoutConstraints.from_json(layout)


def test_chunk_feeds_read_and_write() -> None:
    constraints = ChunkLayoutConstraints.from_json(
        {"chunk": {"shape": [4, 0], "aspect_ratio": [1, 2], "elements": 9}}
    )
    for grid in (constraints.read_chunk, constraints.write_chunk):
        assert grid == ChunkGridConstraints(shape=(4, 0), aspect_ratio=(1.0, 2.0), elements=9)
    # Only the aspect ratio reaches the codec chunk.
    assert constraints.codec_chunk == ChunkGridConstraints(aspect_ratio=(1.0, 2.0))


def test_direct_construction_normalises() -> None:
    # -1 ("full extent") is always soft; an all-zero vector is no constraint at all.
    grid = ChunkGridConstraints(shape=(-1, 0, 5), aspect_ratio=(0, 0, 0))
    assert grid == ChunkGridConstraints(shape=(0, 0, 5), shape_soft_constraint=(-1, 0, 0))
    assert grid.aspect_ratio is None
    layout = ChunkLayoutConstraints(read_chunk=grid)
    assert layout.rank == 3
    assert layout == ChunkLayoutConstraints.from_json(layout.to_json())
    with pytest.raises(MetadataError):
        ChunkLayoutConstraints(inner_order=(0, 1), read_chunk=grid)


def test_choose_rejects_bad_arguments() -> None:
    constraints = ChunkLayoutConstraints.from_json({"chunk": {"shape": [1, 2]}})
    with pytest.raises(MetadataError, match="rank"):
        choose_chunk_shapes((10,), constraints)
    with pytest.raises(MetadataError, match="zarr_format"):
        choose_chunk_shapes((10, 10), constraints, zarr_format=1)
    with pytest.raises(MetadataError, match="itemsize"):
        choose_chunk_shapes((10, 10), constraints, itemsize=0)


def test_rank_zero() -> None:
    assert choose_chunk_shapes(()) == ChosenLayout((), (), ())


def test_huge_chunks_are_refused_like_tensorstore() -> None:
    # Chunk byte sizes that overflow int64, and shards with more than 2**30 inner chunks.
    cases: list[tuple[list[int], dict[str, Any], str, int]] = [
        ([3, 7, 5, 1], {"chunk": {"shape": [2**31 - 1, -1, 3, 2**31 - 1]}}, "uint8", 2),
        ([10**6, 10**6], {"chunk": {"shape": [2**31, 2**31]}}, "uint8", 3),
        ([10**6, 10**6], {"chunk": {"shape": [2**30, 2**30]}}, "complex128", 3),
        ([10**6, 10**6], {"chunk": {"shape": [2**30, 2**30]}}, "uint8", 3),
        ([7], {"read_chunk": {"elements": 3}, "write_chunk": {"shape": [2**31 - 1]}}, "uint8", 3),
        ([1, 10**9 + 7], {"write_chunk": {"aspect_ratio": [1, 1e5], "elements": 2**62 - 2}}, "uint8", 3),
    ]
    for case in cases:
        assert_same_as_tensorstore(*case)
