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
