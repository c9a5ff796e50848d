"""A NumPy model of random resizes and block writes, shared by the resize property tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import gpuzarr


def check_random_resizes(
    a: gpuzarr.Array,
    store: gpuzarr.Store,
    steps: list[tuple[int, int, int]],
    fill: int,
    *,
    check_after_write: bool = True,
    **open_kwargs: Any,
) -> None:
    """Resize ``a`` (2-D int16) and write a random block per step, comparing with NumPy."""
    model = np.full(a.shape, fill, dtype="int16")
    for rows, cols, seed in steps:
        a.resize((rows, cols))
        grown = np.full((rows, cols), fill, dtype="int16")
        keep = (slice(0, min(rows, model.shape[0])), slice(0, min(cols, model.shape[1])))
        grown[keep] = model[keep]
        model = grown
        np.testing.assert_array_equal(a[...], model)
        rng = np.random.default_rng(seed)
        r0, r1 = sorted(rng.integers(0, rows + 1, size=2))
        c0, c1 = sorted(rng.integers(0, cols + 1, size=2))
        block = rng.integers(0, 5, size=(r1 - r0, c1 - c0)).astype("int16")
        a[r0:r1, c0:c1] = block
        model[r0:r1, c0:c1] = block
        if check_after_write:
            np.testing.assert_array_equal(a[...], model)
    np.testing.assert_array_equal(gpuzarr.open(store, mode="r", **open_kwargs)[...], model)
