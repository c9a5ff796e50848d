"""Random geometries of ``assemble_chunks`` / ``assemble_rows`` launches, shared by the kernels'
CPU tests and their GPU tests."""

from __future__ import annotations

from typing import Any

import numpy as np


def random_chunk_geometry(rng: np.random.Generator, ndim: int, nchunks: int, most: int = 6) -> dict[str, Any]:
    """Chunks of random shape (below ``most`` per axis), random axis permutations, steps and
    offsets, tiled along axis 0 of the output so that their destination regions are disjoint."""
    chunk_shapes = rng.integers(1, most, size=(nchunks, ndim))
    steps = rng.integers(1, 3, size=(nchunks, ndim))
    offsets = np.zeros((nchunks, ndim), np.int64)
    extents = np.zeros((nchunks, ndim), np.int64)
    for c in range(nchunks):
        for d in range(ndim):
            offsets[c, d] = rng.integers(0, chunk_shapes[c, d])
            extents[c, d] = rng.integers(0, (chunk_shapes[c, d] - 1 - offsets[c, d]) // steps[c, d] + 2)
    out_shape = [int(extents[:, 0].sum())] + [int(extents[:, d].max()) for d in range(1, ndim)]
    dst = np.zeros((nchunks, ndim), np.int64)
    dst[:, 0] = np.concatenate([[0], np.cumsum(extents[:, 0])[:-1]])
    return {
        "chunk_shapes": chunk_shapes,
        "steps": steps,
        "offsets": offsets,
        "extents": extents,
        "dst": dst,
        "out_shape": out_shape,
    }
