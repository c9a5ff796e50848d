"""Chunk shapes for new arrays when the caller gives none: zarr-python 3's rules.

:func:`guess_chunks` is zarr-python's ``_guess_chunks`` (itself h5py's heuristic): start from the
whole array and halve the axes in turn, first axis first, until a chunk is near a target size
that grows with the array (``256 KiB * 2 ** log10(array MiB)``, clamped to 128 KiB .. 64 MiB).
:func:`normalize_chunks` is the ``chunks=`` argument of ``zarr.create``: None, True or "auto"
guess; False is one chunk; an integer applies to every axis; a short tuple is completed with the
array's extents; -1 or None in a tuple means the whole axis. With ``shards`` and no chunks,
zarr-python aims the guess at 1 MiB chunks (:data:`SHARDED_MAX_BYTES`).

Using the same arithmetic (float64, in the same order) keeps gpuzarr's choices identical to
zarr-python's, which tests/metadata/test_auto_chunks.py checks against zarr-python itself.
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import numpy as np

from ..errors import MetadataError

__all__ = ["DEFAULT_MAX_BYTES", "SHARDED_MAX_BYTES", "guess_chunks", "normalize_chunks"]

#: the hard upper bound of a guessed chunk
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: the upper bound of a guessed inner chunk when ``shards`` is given (zarr-python's ``_auto_partition``)
SHARDED_MAX_BYTES = 1024 * 1024
_INCREMENT_BYTES = 256 * 1024
_MIN_BYTES = 128 * 1024


def guess_chunks(shape: tuple[int, ...], typesize: int, *, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[int, ...]:
    """A chunk shape for an array of ``shape`` with ``typesize``-byte elements.

    Parameters
    ----------
    shape
        The array's shape (zero extents count as 1).
    typesize
        The size of one element in bytes.
    max_bytes
        The hard upper bound of the chunk's size in bytes (a single element larger than it is
        still one chunk).

    Returns
    -------
    tuple of int
        The chunk shape: each entry at least 1 and at most the array's extent (or 1).
    """
    if typesize == 0 or not shape:
        return tuple(shape)
    ndim = len(shape)
    chunks = np.maximum(np.array(shape, dtype="=f8"), 1)
    array_bytes = np.prod(chunks) * typesize
    # PyTables' target: grows by 2x per decade of array size.
    target = _INCREMENT_BYTES * (2 ** np.log10(array_bytes / (1024.0 * 1024)))
    target = min(max(target, _MIN_BYTES), max_bytes)
    axis = 0
    while True:
        chunk_bytes = np.prod(chunks) * typesize
        near_target = chunk_bytes < target or abs(chunk_bytes - target) / target < 0.5
        if (near_target and chunk_bytes < max_bytes) or np.prod(chunks) == 1:
            break
        chunks[axis % ndim] = math.ceil(chunks[axis % ndim] / 2.0)
        axis += 1
    return tuple(int(c) for c in chunks)


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def normalize_chunks(
    chunks: Any, shape: tuple[int, ...], typesize: int, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[int, ...]:
    """The regular chunk shape that ``chunks`` (``gpuzarr.create``'s argument) asks for.

    Parameters
    ----------
    chunks
        None, True or "auto": guessed by :func:`guess_chunks`; False: one chunk holding the array;
        an integer: that size on every axis; a sequence: one entry per leading axis (missing
        trailing axes, and entries -1 or None, take the array's extent).
    shape
        The array's shape.
    typesize
        The size of one element in bytes (for the guess).
    max_bytes
        The upper bound of a guessed chunk.

    Returns
    -------
    tuple of int
        One positive size per axis (positivity is checked by the chunk grid).

    Raises
    ------
    MetadataError
        ``chunks`` has more entries than ``shape`` or an entry that is not an integer.
    """
    if chunks is None or chunks is True or (isinstance(chunks, str) and chunks == "auto"):
        return guess_chunks(shape, typesize, max_bytes=max_bytes)
    if chunks is False:
        return tuple(max(s, 1) for s in shape)
    if _is_int(chunks):
        return tuple(int(chunks) for _ in shape)
    if isinstance(chunks, str) or not hasattr(chunks, "__iter__"):
        raise MetadataError(f"chunks: expected an integer, a sequence of integers or 'auto', got {chunks!r}")
    given = list(chunks)
    if len(given) > len(shape):
        raise MetadataError(f"chunks: must have at most {len(shape)} entries, got {len(given)}: {given}")
    given += list(shape[len(given) :])
    out = []
    for axis, (c, s) in enumerate(zip(given, shape, strict=True)):
        if c is None or (_is_int(c) and c == -1):
            out.append(max(s, 1))
        elif _is_int(c):
            out.append(int(c))
        else:
            raise MetadataError(f"chunks[{axis}]: expected an integer, -1 or None, got {c!r}")
    return tuple(out)
