"""Where each part of a batch's crops lies in the chunks they cross: one row per (crop, chunk).

The chunk caches hold whole decoded chunks, so a cached batch is put together from pieces: for
every crop, the part of every chunk it crosses. :func:`crop_pieces` finds them for a whole batch
at once with NumPy (a 64^3 crop of 64^3 chunks crosses up to 8 chunks: a batch of 32 has about
250 pieces), so that the copies can be made in one batched device launch, or spread over the
CPU threads, rather than one Python call per piece.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Sequence

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CropPieces:
    """The pieces of a batch of crops, one row each, ordered by crop.

    Attributes
    ----------
    chunks
        ``(K, ndim)``: the coordinates of every chunk the crops cross, each once, sorted.
    chunk_shapes
        ``(K, ndim)``: each of those chunks' shape (edge chunks are cut at the array's end).
    crop
        ``(P,)``: the crop (row of the batch) each piece belongs to.
    chunk
        ``(P,)``: the row of ``chunks`` each piece comes from.
    src_start, dst_start, extent
        ``(P, ndim)``: where the piece starts in its chunk and in its crop, and its shape.
    """

    chunks: IntArray
    chunk_shapes: IntArray
    crop: IntArray
    chunk: IntArray
    src_start: IntArray
    dst_start: IntArray
    extent: IntArray

    def chunk_keys(self) -> list[tuple[int, ...]]:
        """``chunks`` as tuples of ints (cache keys)."""
        return [tuple(row) for row in self.chunks.tolist()]

    def crop_rows(self) -> list[tuple[int, int]]:
        """[start, stop) of each crop's pieces (they are ordered by crop)."""
        n = int(self.crop.max()) + 1 if self.crop.size else 0
        bounds = np.searchsorted(self.crop, np.arange(n + 1))
        return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


@functools.lru_cache(maxsize=64)
def _steps(most: tuple[int, ...]) -> IntArray:
    """Every offset on the chunk grid below ``most`` (``(prod(most), ndim)``, C order), read-only:
    a loader asks for the same few (2^ndim for crops no larger than a chunk) batch after batch."""
    steps = np.stack(np.meshgrid(*(np.arange(m) for m in most), indexing="ij"), axis=-1)
    steps = steps.reshape(-1, len(most)).astype(np.int64)
    steps.flags.writeable = False
    return steps


def crop_pieces(
    origins: npt.ArrayLike, crop_shape: tuple[int, ...], chunk_shape: tuple[int, ...], array_shape: tuple[int, ...]
) -> CropPieces:
    """The pieces of the crops of ``crop_shape`` at ``origins`` (``(N, ndim)``) of an array of
    ``array_shape`` with a regular grid of ``chunk_shape``. Every crop must lie inside the
    array (the loader checks its origins first)."""
    return crop_pieces_of_runs([origins], crop_shape, chunk_shape, array_shape)[0]


def crop_pieces_of_runs(
    runs: Sequence[npt.ArrayLike],
    crop_shape: tuple[int, ...],
    chunk_shape: tuple[int, ...],
    array_shape: tuple[int, ...],
) -> list[CropPieces]:
    """:func:`crop_pieces` of each of ``runs`` (origins of crops of one array, ``(N_i, ndim)``
    each), worked out together: a window of a loader plans 8 to 16 batches, and most of the
    time of one batch's pieces is NumPy's per-call overhead, not its arithmetic."""
    ndim = len(crop_shape)
    cells = math.prod(-(-n // c) for n, c in zip(array_shape, chunk_shape, strict=True))
    if len(runs) > 1 and cells * len(runs) >= 2**62:  # run numbers above the flat index would overflow
        return [crop_pieces_of_runs([o], crop_shape, chunk_shape, array_shape)[0] for o in runs]
    parts = [np.asarray(o, dtype=np.int64).reshape(-1, ndim) for o in runs]
    origin = np.concatenate(parts) if len(parts) > 1 else parts[0]
    sizes = [len(part) for part in parts]
    run_of_crop = np.repeat(np.arange(len(parts), dtype=np.int64), sizes)
    first_crop = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    crop = np.asarray(crop_shape, dtype=np.int64)
    chunk = np.asarray(chunk_shape, dtype=np.int64)
    shape = np.asarray(array_shape, dtype=np.int64)
    first = origin // chunk
    counts = (origin + crop - 1) // chunk - first + 1  # (N, ndim) chunks crossed along each axis
    # Every combination of up to the most chunks any crop crosses per axis, kept where the crop
    # crosses that many.
    most = counts.max(axis=0) if len(origin) else np.zeros(ndim, dtype=np.int64)
    steps = _steps(tuple(most.tolist()))
    keep = (steps[None, :, :] < counts[:, None, :]).all(axis=-1)
    crop_index, step_index = np.nonzero(keep)
    coords = first[crop_index] + steps[step_index]
    piece_origin = origin[crop_index]
    low = np.maximum(piece_origin, coords * chunk)
    high = np.minimum(piece_origin + crop, (coords + 1) * chunk)
    # Unique chunks of each run by their flat index on the grid, the run's number above it:
    # sorted by run, then as their coordinates are, and much quicker than ``np.unique(axis=0)``.
    grid = tuple((-(-shape // chunk)).tolist())
    piece_run = run_of_crop[crop_index]
    flat, which = np.unique(
        piece_run * cells + np.ravel_multi_index(tuple(coords.T), grid), return_inverse=True
    )
    which = np.asarray(which, dtype=np.int64).reshape(-1)
    chunks = np.stack(np.unravel_index(flat % cells, grid), axis=-1).astype(np.int64).reshape(-1, ndim)
    chunk_shapes = np.minimum(chunk, shape - chunks * chunk)
    src_start = low - coords * chunk
    dst_start = low - piece_origin
    extent = high - low
    # Each run's pieces and chunks are contiguous (crops in order; chunks sorted by run).
    piece_bounds = np.searchsorted(piece_run, np.arange(len(parts) + 1)).tolist()
    chunk_bounds = np.searchsorted(flat // cells, np.arange(len(parts) + 1)).tolist()
    out = []
    for r in range(len(parts)):
        p0, p1, k0, k1 = piece_bounds[r], piece_bounds[r + 1], chunk_bounds[r], chunk_bounds[r + 1]
        out.append(
            CropPieces(
                chunks=chunks[k0:k1],
                chunk_shapes=chunk_shapes[k0:k1],
                crop=crop_index[p0:p1] - first_crop[r],
                chunk=which[p0:p1] - k0,
                src_start=src_start[p0:p1],
                dst_start=dst_start[p0:p1],
                extent=extent[p0:p1],
            )
        )
    return out


def copy_pieces(out: Any, sources: list[Any], pieces: CropPieces, rows: tuple[int, int]) -> None:
    """Copy pieces ``rows`` ([start, stop)) into ``out`` (``(N, *crop_shape)``) from
    ``sources`` (the decoded chunks, by row of ``pieces.chunks``), one array copy each."""
    start, stop = rows
    crop = pieces.crop[start:stop].tolist()
    chunk = pieces.chunk[start:stop].tolist()
    src = pieces.src_start[start:stop].tolist()
    dst = pieces.dst_start[start:stop].tolist()
    ext = pieces.extent[start:stop].tolist()
    for i, c, s, d, e in zip(crop, chunk, src, dst, ext, strict=True):
        out[(i, *(slice(a, a + n) for a, n in zip(d, e, strict=True)))] = sources[c][
            tuple(slice(a, a + n) for a, n in zip(s, e, strict=True))
        ]
