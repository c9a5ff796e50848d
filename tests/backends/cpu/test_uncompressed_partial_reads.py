"""Uncompressed chunks that a selection only partly covers are read as the byte span between
their first and last selected element (backends/cpu/read._read_uncompressed_part)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cpu import read as read_module
from gpuzarr.backends.cpu.read import _selected_byte_span
from gpuzarr.errors import CorruptChunkError
from gpuzarr.plan.selection import ChunkProjection

if TYPE_CHECKING:
    from pathlib import Path

RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]
SELECTIONS: list[Any] = [
    (slice(3, 40), slice(5, 29), slice(0, 1)),
    (slice(None, None, -3), 7, slice(2, 9, 2)),
    (17, 18, 19),
    (slice(30, 31), slice(None), slice(None)),
]


@pytest.fixture(params=["local", "memory"])
def array(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[gpuzarr.Array, np.ndarray[Any, Any]]:
    store = gpuzarr.LocalStore(tmp_path / "a.zarr") if request.param == "local" else gpuzarr.MemoryStore()
    a = gpuzarr.create(store, shape=(45, 33, 21), dtype="<u4", chunks=(16, 16, 16), codecs=RAW)
    values = np.arange(45 * 33 * 21, dtype="<u4").reshape(45, 33, 21)
    a[...] = values
    return a, values


@pytest.mark.parametrize("selection", SELECTIONS)
def test_partial_reads_match_numpy(
    array: tuple[gpuzarr.Array, Any], selection: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, values = array
    spans: list[tuple[int, int] | None] = []
    whole_reads: list[str] = []

    def span(*args: Any) -> tuple[int, int] | None:
        spans.append(_selected_byte_span(*args))
        return spans[-1]

    def general(layout: Any, raw: Any, key: str, *rest: Any) -> None:
        whole_reads.append(key)
        store_chunk_into(layout, raw, key, *rest)

    store_chunk_into = read_module._store_chunk_into
    monkeypatch.setattr(read_module, "_selected_byte_span", span)
    monkeypatch.setattr(read_module, "_store_chunk_into", general)
    np.testing.assert_array_equal(a[selection], values[selection])
    # Every chunk took the partial-span path: none was read whole and decoded.
    assert spans and not whole_reads
    # A span is the whole chunk only where the selection covers the chunk's first axis (then
    # the exact span would miss less than two rows of it).
    assert all(s is None or s[1] - s[0] < 16**3 * 4 or s == (0, 16**3 * 4) for s in spans)
    assert any(s is not None and s[1] - s[0] < 16**3 * 4 for s in spans)


def test_orthogonal_and_point_reads(array: tuple[gpuzarr.Array, Any]) -> None:
    a, values = array
    rows = np.array([40, 2, 17])
    np.testing.assert_array_equal(a.oindex[rows, 3:30, [0, 20]], values[np.ix_(rows, np.arange(3, 30), [0, 20])])
    np.testing.assert_array_equal(a.vindex[rows, rows % 33, rows % 21], values[rows, rows % 33, rows % 21])


def test_truncated_chunk_is_corrupt_even_when_the_span_is_intact(tmp_path: Path) -> None:
    store = gpuzarr.LocalStore(tmp_path / "t.zarr")
    a = gpuzarr.create(store, shape=(32, 32), dtype="<u2", chunks=(32, 32), codecs=RAW)
    a[...] = 1
    os.truncate(tmp_path / "t.zarr" / "c" / "0" / "0", 32 * 32 * 2 - 2)
    with pytest.raises(CorruptChunkError, match="c/0/0"):
        a[0:2, 0:2]


def test_selected_byte_span() -> None:
    def p(*sel: Any) -> ChunkProjection:
        return ChunkProjection((0, 0), sel, (), False)

    assert _selected_byte_span([p(slice(2, 4), slice(1, 3))], (8, 10), 4) == ((2 * 10 + 1) * 4, (3 * 10 + 2 + 1) * 4)
    assert _selected_byte_span([p(1, slice(None, None, -1))], (8, 10), 1) == (10, 20)
    assert _selected_byte_span([p(np.array([[5], [2]]), np.array([[7, 0]]))], (8, 10), 2) == (40, 116)
    assert _selected_byte_span([p(slice(3, 3), slice(None))], (8, 10), 1) is None
    # Several selections whose union spans the first axis: the whole chunk, inner axes unread.
    assert _selected_byte_span([p(slice(0, 4), slice(2, 3)), p(slice(5, 8), slice(1, 2))], (8, 10), 2) == (0, 160)
    assert _selected_byte_span([p(slice(0, 8), slice(3, 3))], (8, 10), 1) == (0, 80)
    assert _selected_byte_span([p(slice(0, 4), slice(2, 3)), p(slice(5, 7), slice(1, 2))], (8, 10), 2) == (
        (0 * 10 + 1) * 2,
        (6 * 10 + 2 + 1) * 2,
    )
    # Leading axes of one index are not the outermost: a (1, 8, 10) chunk's rows are its second
    # axis, so a selection of some of them is a part of the chunk.
    def q(*sel: Any) -> ChunkProjection:
        return ChunkProjection((0, 0, 0), sel, (), False)

    assert _selected_byte_span([q(slice(0, 1), slice(2, 4), slice(1, 3))], (1, 8, 10), 4) == (
        (2 * 10 + 1) * 4,
        (3 * 10 + 2 + 1) * 4,
    )
    assert _selected_byte_span([q(0, slice(0, 8), slice(3, 4))], (1, 8, 10), 1) == (0, 80)
    assert _selected_byte_span([q(0, 0, slice(0, 8), slice(3, 4))], (1, 1, 8, 10), 2) == (0, 160)
