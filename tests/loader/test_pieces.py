"""The pieces of a batch of crops (gpuzarr/loader/pieces.py): every (crop, chunk) pair once,
each piece where slicing puts it, and the copies they describe equal to NumPy slicing."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from gpuzarr.loader.pieces import copy_pieces, crop_pieces

CASES = [
    # array shape, chunk shape, crop shape
    ((40,), (7,), (9,)),
    ((19, 17, 16), (4, 5, 6), (5, 6, 7)),
    ((20, 20), (5, 5), (5, 5)),  # crops as large as a chunk: aligned ones cross one chunk
    ((10, 9, 8, 7), (3, 4, 3, 2), (4, 4, 4, 3)),
    ((64, 64, 64), (64, 64, 64), (16, 16, 16)),  # one chunk holds the whole array
]


def _origins(rng: np.random.Generator, shape: tuple[int, ...], crop: tuple[int, ...], n: int) -> np.ndarray[Any, Any]:
    return np.stack([rng.integers(0, s - c + 1, size=n) for s, c in zip(shape, crop, strict=True)], axis=1)


def _expected(origin: np.ndarray[Any, Any], crop: tuple[int, ...], chunk: tuple[int, ...]) -> set[tuple[int, ...]]:
    ranges = [range(o // c, (o + n - 1) // c + 1) for o, n, c in zip(origin.tolist(), crop, chunk, strict=True)]
    return set(itertools.product(*ranges))


@pytest.mark.parametrize(("shape", "chunk", "crop"), CASES)
def test_every_crop_gets_one_piece_per_chunk_it_crosses(
    shape: tuple[int, ...], chunk: tuple[int, ...], crop: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(len(shape))
    origins = _origins(rng, shape, crop, 25)
    pieces = crop_pieces(origins, crop, chunk, shape)
    keys = pieces.chunk_keys()
    assert keys == sorted(set(keys))
    for i, origin in enumerate(origins):
        rows = np.flatnonzero(pieces.crop == i)
        assert {keys[c] for c in pieces.chunk[rows].tolist()} == _expected(origin, crop, chunk)
        # The pieces tile the crop: their volumes add up to it, and none is empty.
        extents = pieces.extent[rows]
        assert (extents > 0).all() and int(extents.prod(axis=1).sum()) == int(np.prod(crop))
    assert list(pieces.crop) == sorted(pieces.crop)
    # Edge chunks are cut at the array's end.
    for coords, size in zip(keys, pieces.chunk_shapes.tolist(), strict=True):
        assert size == [min(c, n - k * c) for k, c, n in zip(coords, chunk, shape, strict=True)]


@pytest.mark.parametrize(("shape", "chunk", "crop"), CASES)
def test_copying_the_pieces_equals_numpy_slicing(
    shape: tuple[int, ...], chunk: tuple[int, ...], crop: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(7)
    source = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    origins = _origins(rng, shape, crop, 12)
    pieces = crop_pieces(origins, crop, chunk, shape)
    chunks = [
        source[tuple(slice(k * c, (k + 1) * c) for k, c in zip(coords, chunk, strict=True))].copy()
        for coords in pieces.chunk_keys()
    ]
    out = np.full((len(origins), *crop), 0xABAB, dtype=np.uint16)
    for rows in pieces.crop_rows():
        copy_pieces(out, chunks, pieces, rows)
    for i, origin in enumerate(origins):
        expected = source[tuple(slice(o, o + c) for o, c in zip(origin.tolist(), crop, strict=True))]
        np.testing.assert_array_equal(out[i], expected)


def test_crop_rows_bound_each_crops_pieces() -> None:
    pieces = crop_pieces([[0, 0], [3, 3], [5, 0]], (4, 4), (4, 4), (12, 12))
    rows = pieces.crop_rows()
    assert [stop - start for start, stop in rows] == [1, 4, 2]
    assert rows[0][0] == 0 and rows[-1][1] == len(pieces.crop)


def test_no_origins_give_no_pieces() -> None:
    pieces = crop_pieces(np.zeros((0, 3), dtype=np.int64), (4, 4, 4), (8, 8, 8), (16, 16, 16))
    assert pieces.crop.size == 0 and pieces.chunks.shape == (0, 3) and pieces.crop_rows() == []


@pytest.mark.parametrize(("shape", "chunk", "crop"), CASES)
def test_the_pieces_of_several_runs_at_once_are_those_of_each_alone(
    shape: tuple[int, ...], chunk: tuple[int, ...], crop: tuple[int, ...]
) -> None:
    """A window's batches worked out together (``crop_pieces_of_runs``): each run's pieces, its
    chunks and their rows, exactly as its own ``crop_pieces``; runs of no crop included."""
    from gpuzarr.loader.pieces import crop_pieces_of_runs

    rng = np.random.default_rng(10 + len(shape))
    runs = [_origins(rng, shape, crop, n) for n in (7, 0, 12, 1, 9)]
    together = crop_pieces_of_runs(runs, crop, chunk, shape)
    assert len(together) == len(runs)
    for origins, got in zip(runs, together, strict=True):
        alone = crop_pieces(origins, crop, chunk, shape)
        for name in ("chunks", "chunk_shapes", "crop", "chunk", "src_start", "dst_start", "extent"):
            np.testing.assert_array_equal(getattr(got, name), getattr(alone, name), err_msg=name)
            assert getattr(got, name).dtype == np.int64, name
        volume = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
        sources = [_box(volume, [k * c for k, c in zip(key, chunk, strict=True)], chunk) for key in got.chunk_keys()]
        out = np.full((len(origins), *crop), -1, dtype=np.int32)
        for rows in got.crop_rows():
            copy_pieces(out, sources, got, rows)
        for i, origin in enumerate(origins):
            np.testing.assert_array_equal(out[i], _box(volume, origin, crop))


def _box(volume: np.ndarray[Any, Any], start: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    return volume[tuple(slice(int(a), int(a) + n) for a, n in zip(start, shape, strict=True))]
