"""Limits that metadata read from a store must respect before anything is sized from it.

Metadata comes from stores other people control, and a shape or chunk shape decides how much
memory a read allocates. Everything here is checked when an array is opened or created, so that
absurd metadata fails there with a :class:`~gpuzarr.errors.MetadataError` naming the field,
rather than later, in NumPy, as a MemoryError, OverflowError or ValueError.

* rank: at most :data:`MAX_RANK` dimensions (NumPy's ``NPY_MAXDIMS``);
* extents: every entry, and the number of elements, below 2**63 (NumPy indexes with int64);
* one chunk: its decoded size at most the ``max_chunk_bytes`` setting of :mod:`gpuzarr.config`.
  A chunk is what one decode allocates: the chunk of the chunk grid, or, when the chain is
  ``[sharding_indexed]`` alone, each inner chunk (the shard is then never decoded whole), plus the
  shard index (16 bytes per inner chunk). Variable-length types count the 8-byte object
  reference per element that NumPy allocates from the shape; their strings are sized by the
  stored bytes, not by the metadata.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

#: NumPy's NPY_MAXDIMS: no ndarray has more dimensions (NumPy 2 raised it from 32 to 64).
MAX_RANK = 64
#: NumPy sizes and indexes arrays with int64 (npy_intp).
MAX_EXTENT = 2**63 - 1


def format_bytes(n: int) -> str:
    """``1073741824`` -> ``"1.0 GiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def check_shape(shape: Sequence[int], field: str) -> None:
    """Refuse a shape NumPy cannot hold: more than 64 dimensions, an entry or an element count
    of 2**63 or more. ``field`` names the shape in the message ("shape", "chunks", ...)."""
    if len(shape) > MAX_RANK:
        raise MetadataError(f"{field}: at most {MAX_RANK} dimensions are supported, got {len(shape)}")
    for i, n in enumerate(shape):
        if n > MAX_EXTENT:
            raise MetadataError(f"{field}[{i}]: must be less than 2**63, got {n}")
    if math.prod(shape) > MAX_EXTENT:
        raise MetadataError(
            f"{field}: {list(shape)} has {math.prod(shape)} elements, more than the 2**63 - 1 NumPy can index"
        )


def max_chunk_bytes() -> int:
    """The ``max_chunk_bytes`` setting (imported late: config is the top layer's module)."""
    from .. import config

    value: int = config.get("max_chunk_bytes")
    return value


def check_chunk_bytes(chunk_shape: Sequence[int], dtype: np.dtype[Any], field: str) -> None:
    """Refuse a chunk whose decoded size exceeds ``max_chunk_bytes``, naming ``field``."""
    nbytes = math.prod(chunk_shape) * dtype.itemsize
    _check_bytes(nbytes, f"{field} {list(chunk_shape)} makes one chunk of {format_bytes(nbytes)}")


def check_encoded_bytes(nbytes: int, what: str) -> None:
    """Refuse a codec's intermediate encoding larger than ``max_chunk_bytes`` (a filter's
    configured type wider than the chunk's)."""
    _check_bytes(nbytes, f"{what} is {format_bytes(nbytes)}")


def check_shard_index_bytes(chunks_per_shard: Sequence[int], field: str) -> None:
    """Refuse a shard whose index (16 bytes per inner chunk) exceeds ``max_chunk_bytes``."""
    n = math.prod(chunks_per_shard)
    nbytes = 16 * n
    _check_bytes(nbytes, f"{field} makes {n} inner chunks per shard, an index of {format_bytes(nbytes)}")


def _check_bytes(nbytes: int, what: str) -> None:
    limit = max_chunk_bytes()
    if nbytes > limit:
        raise MetadataError(
            f"{what}, more than config max_chunk_bytes ({format_bytes(limit)}); "
            "raise it with gpuzarr.config.set(max_chunk_bytes=...)"
        )
