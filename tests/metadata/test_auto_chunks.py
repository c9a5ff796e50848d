"""Chunk shapes chosen when ``chunks`` is omitted: the same as zarr-python 3 picks, compared live
for a table of shapes and data types (v3, v2, sharded, and zarr.create's argument forms)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.auto_chunks import guess_chunks, normalize_chunks

zarr = pytest.importorskip("zarr")

SHAPES_AND_DTYPES: list[tuple[tuple[int, ...], str]] = [
    ((8000, 8000), "float32"),
    ((8000, 8000), "float64"),
    ((8000, 8000), "uint8"),
    ((1000,), "int64"),
    ((10_000_000,), "float32"),
    ((3, 5), "bool"),
    ((0, 100), "int16"),
    ((100, 0, 7), "float64"),
    ((1, 1, 1), "complex128"),
    ((512, 512, 512), "uint16"),
    ((2, 3000, 3000), "float32"),
    ((4096, 4096, 3), "uint8"),
    ((123, 4567, 89), "int32"),
    ((100_000, 128), "float16"),
    ((7, 11, 13, 17, 19), "float64"),
    ((), "float32"),
]


def _id(case: tuple[tuple[int, ...], str]) -> str:
    return f"{'x'.join(map(str, case[0])) or 'scalar'}-{case[1]}"


@pytest.mark.parametrize("case", SHAPES_AND_DTYPES, ids=_id)
def test_v3_default_chunks_match_zarr_python(case: tuple[tuple[int, ...], str]) -> None:
    shape, dtype = case
    ours = gpuzarr.create(shape=shape, dtype=dtype)
    theirs = zarr.create_array({}, shape=shape, dtype=dtype)
    assert ours.chunks == theirs.chunks
    # The legacy zarr.create / zarr.zeros path guesses the same way.
    assert gpuzarr.zeros(shape, dtype=dtype).chunks == zarr.zeros(shape, dtype=dtype).chunks


@pytest.mark.parametrize("case", SHAPES_AND_DTYPES, ids=_id)
def test_v2_default_chunks_match_zarr_python(case: tuple[tuple[int, ...], str]) -> None:
    shape, dtype = case
    ours = gpuzarr.create(shape=shape, dtype=dtype, zarr_format=2)
    theirs = zarr.create_array({}, shape=shape, dtype=dtype, zarr_format=2)
    assert ours.chunks == theirs.chunks


@pytest.mark.parametrize(
    ("shape", "dtype", "shards"),
    [
        ((1000, 1000), "float32", (500, 500)),
        ((8000, 8000), "float32", (2000, 4000)),
        ((4096, 4096), "uint8", (4096, 4096)),
        ((10_000_000,), "float64", (1_250_000,)),
        ((64, 64, 64), "int32", (64, 64, 64)),
    ],
)
def test_sharded_default_inner_chunks_match_zarr_python(shape: Any, dtype: str, shards: Any) -> None:
    theirs = zarr.create_array({}, shape=shape, dtype=dtype, shards=shards)
    ours = gpuzarr.create(shape=shape, dtype=dtype, shards=shards)
    assert (ours.chunks, ours.shards) == (theirs.chunks, theirs.shards)
    # zarr-python aims at 1 MiB inner chunks, not the 64 MiB bound of unsharded arrays.
    assert np.prod(ours.chunks) * np.dtype(dtype).itemsize <= 1024 * 1024


def test_guessed_inner_chunks_divide_the_shards_where_zarr_python_refuses() -> None:
    # The guess for 1000x1000 float32 is (250, 500): zarr-python refuses shards of 100, which
    # cannot hold it; gpuzarr takes the largest sizes that divide the shards, no larger than it.
    with pytest.raises(ValueError, match="divisible"):
        zarr.create_array({}, shape=(1000, 1000), dtype="float32", shards=(100, 100))
    assert gpuzarr.create(shape=(1000, 1000), dtype="float32", shards=(100, 100)).chunks == (100, 100)
    assert gpuzarr.create(shape=(1000, 1000), dtype="float32", shards=(1000, 1000)).chunks == (250, 500)
    assert gpuzarr.create(shape=(1000, 1000), dtype="float32", shards=(300, 700)).chunks == (150, 350)
    assert gpuzarr.create(shape=(97,), dtype="uint8", shards=(97,)).chunks == (97,)  # a prime
    # Chunks given are never changed: a size the shards cannot hold is still refused.
    with pytest.raises(MetadataError, match="shards"):
        gpuzarr.create(shape=(1000, 1000), dtype="float32", chunks=(300, 300), shards=(100, 100))


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        (100, (100, 100)),
        ((100,), (100, 1000)),
        ((100, -1), (100, 1000)),
        ((100, None), (100, 1000)),
        ((-1, 10), (1000, 10)),
        (True, (250, 500)),
        ("auto", (250, 500)),
        (None, (250, 500)),
    ],
)
def test_chunks_argument_forms_match_zarr_create(chunks: Any, expected: tuple[int, ...]) -> None:
    ours = gpuzarr.create(shape=(1000, 1000), dtype="float32", chunks=chunks)
    assert ours.chunks == expected
    if chunks == "auto":  # zarr.create does not take "auto" (zarr.create_array does)
        return
    try:
        theirs = zarr.create((1000, 1000), dtype="float32", chunks=chunks)
    except (TypeError, ValueError):
        # zarr-python 3.1 takes every form above; later releases refuse the short tuple, a
        # None entry and True. gpuzarr keeps taking them, as 3.1 reads them.
        assert chunks in ((100,), (100, None), True, None)
        return
    assert theirs.chunks == expected


def test_chunks_false_is_one_chunk() -> None:
    # zarr.create documents False as "one chunk for the whole array" (its implementation treats
    # the falsy value as "guess"); gpuzarr does what the documentation says.
    assert gpuzarr.create(shape=(1000, 1000), dtype="float32", chunks=False).chunks == (1000, 1000)
    assert gpuzarr.create(shape=(0, 5), dtype="float32", chunks=False).chunks == (1, 5)


def test_guess_examples() -> None:
    # Worked by hand from the rule in create()'s docstring: 244 MiB gives a target of about
    # 1.3 MiB; halving axis 0, 1, 0, ... reaches 2 MB (within 50% of it) at 500 x 1000.
    assert guess_chunks((8000, 8000), 4) == (500, 1000)
    assert guess_chunks((1000,), 8) == (1000,)  # 8 KB: under the 128 KiB floor, one chunk
    assert guess_chunks((10, 10), 0) == (10, 10)
    # A single element larger than the bound stays one element.
    assert guess_chunks((4, 4), 100 * 1024 * 1024) == (1, 1)


def test_one_element_write_touches_one_small_chunk() -> None:
    a = gpuzarr.create(shape=(8000, 8000), dtype="float32")
    a[1234, 4321] = 1.5
    assert a.nchunks_initialized == 1
    assert a.nchunks == 16 * 8
    chunk_keys = [k for k in a.store.list_prefix("") if k != "zarr.json"]
    assert chunk_keys == ["c/2/4"]
    assert a[1234, 4321] == np.float32(1.5)


@pytest.mark.parametrize(
    ("chunks", "field"),
    [((10, 10, 10), "at most 2 entries"), ((10, 2.5), "chunks\\[1\\]"), ("big", "'auto'"), (1.5, "chunks")],
)
def test_bad_chunks_name_the_field(chunks: Any, field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        gpuzarr.create(shape=(100, 100), dtype="int8", chunks=chunks)


def test_normalize_never_guesses_for_explicit_shapes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert normalize_chunks(np.array([3, 4]), (10, 10), 4) == (3, 4)
    assert normalize_chunks([np.int64(5)], (10, 10), 4) == (5, 10)


def test_numpy_integers_and_arrays_as_chunks_and_shards() -> None:
    assert gpuzarr.create(shape=(100, 100), shards=(10, 10), chunks=np.array([5, 5]), dtype="f4").chunks == (5, 5)
    assert gpuzarr.create(shape=(100, 100), shards=(np.int64(10), np.int64(10)), dtype="f4").chunks == (10, 10)
    sharded = gpuzarr.create(shape=(100, 100), shards=[[40, 60], np.int64(50)], dtype="f4")
    assert sharded.chunks == (20, 50)  # the largest sizes dividing 40 and 60, and 50
    assert gpuzarr.create(shape=(100, 100), chunks=[[np.int64(40), 60], np.int64(50)], dtype="f4").chunks == (
        (40, 60),
        50,
    )
