"""Resizing arrays at the edges of what grids hold (an axis of length 0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gpuzarr

if TYPE_CHECKING:
    import pytest


def test_shrinking_an_array_with_an_axis_of_length_0_walks_no_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its grid has no position, so nothing can be stored: the positions outside the new shape
    were walked a slab an axis, and the first slab built a range of every chunk of the other
    axis (10**8 of them: a MemoryError)."""
    import itertools

    from gpuzarr.core import array as array_module

    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(10**8, 0), dtype="u1", chunks=(1, 1), device="cpu")

    class NoProduct:
        def __getattr__(self, name: str) -> Any:
            if name == "product":
                raise AssertionError("the grid's positions were walked")
            return getattr(itertools, name)

    monkeypatch.setattr(array_module, "itertools", NoProduct())
    array.resize((0, 0))
    assert array.shape == (0, 0)


def test_a_shrink_cutting_most_of_a_local_grid_lists_instead_of_walking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local or in-memory store lists a key several times faster than it erases a missing
    one: where the whole grid lists for less than the cut positions walk, it is listed.
    Cutting 59,000 positions of a grid holding ten chunks erased all 59,000 keys (1-2 s)."""
    import numpy as np

    erased: list[str] = []
    real = gpuzarr.MemoryStore.erase

    def counted(self: gpuzarr.MemoryStore, key: str) -> None:
        erased.append(key)
        real(self, key)

    monkeypatch.setattr(gpuzarr.MemoryStore, "erase", counted)
    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(60000,), chunks=(1,), dtype="u1", fill_value=0)
    array[:5] = 1
    array[59995:] = 2
    array.resize((1000,))
    assert sorted(erased) == [f"c/{i}" for i in range(59995, 60000)]  # the stored ones cut off
    array.resize((60000,))
    np.testing.assert_array_equal(array[59990:], 0)  # nothing came back
    np.testing.assert_array_equal(array[:6], [1, 1, 1, 1, 1, 0])
    erased.clear()
    small = gpuzarr.create(gpuzarr.MemoryStore(), shape=(100,), chunks=(1,), dtype="u1", fill_value=0)
    small.resize((90,))  # a few positions of a grid: walked, as before
    assert sorted(erased) == sorted(f"c/{i}" for i in range(90, 100))
