"""Reading gpuzarr arrays as Dask arrays: :func:`to_dask` (see :mod:`gpuzarr.integrations.dask`)."""

from __future__ import annotations

import warnings
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from ..core.array import Array
from ..core.field_array import FieldArray
from ..errors import InvalidArgumentError
from .block_alignment import first_split, grid_blocks


def to_dask(array: Array, chunks: Any = None, *, name: str | None = None, inline_array: bool = False) -> da.Array:
    """A Dask array whose blocks are read from ``array`` by gpuzarr, one task per block.

    Parameters
    ----------
    array
        The gpuzarr array. Blocks are NumPy arrays when ``array.device`` is ``"cpu"`` and CuPy
        arrays on a GPU, and the Dask array's ``meta`` says which. An array opened with
        ``device="auto"`` reads on the kind of device it resolved to here ("cpu" or "gpu") in
        every worker, so that blocks match ``meta``.
    chunks
        None (the default): one block per stored chunk, or per shard for a sharded array (one
        task reads one shard, which is fastest), following rectilinear grids too. Otherwise
        anything ``dask.array.from_array`` accepts (``"auto"``, an int, a tuple, per-axis block
        sizes, a dict by axis, -1 for a whole axis); ``"auto"`` builds blocks of about Dask's
        ``array.chunk-size`` from whole shards, or from whole inner chunks where one shard is
        larger.
        Blocks that cut through decoded chunks (the inner chunks of a shard) read correctly but
        decode those chunks once per block: that is warned about with Dask's
        ``PerformanceWarning``.
    name
        The Dask name of the array's keys; default ``"gpuzarr-<token>"`` from the array's
        store, path, metadata and the blocks (never its data).
    inline_array
        Put the Array into every task instead of one key of its own (``da.from_array``'s
        option): fewer keys, a larger graph.

    Returns
    -------
    dask.array.Array

    Raises
    ------
    InvalidArgumentError
        ``chunks`` that Dask cannot lay over the array's shape.
    """
    given: object = array  # callers without type checks pass anything
    if not isinstance(given, Array):
        hint = (
            " (a field of a structured array: dask.array.from_array(field, chunks=field.chunks) reads it)"
            if isinstance(given, FieldArray)
            else ""
        )
        raise InvalidArgumentError(f"to_dask: expected a gpuzarr.Array, got {type(given).__name__}{hint}")
    if chunks is None:
        blocks = grid_blocks(array.metadata.chunk_grid.dimensions(array.shape))
    else:
        blocks = _normalize(chunks, array)
    split = first_split(blocks, array.layout.dimensions())
    if split is not None:
        warnings.warn(
            da.PerformanceWarning(
                f"to_dask: {split.describe('inner chunk' if array.shards else 'chunk')}: a chunk that a "
                "block boundary cuts is read and decoded by every block it spans. Blocks that end on "
                f"chunk boundaries (chunks=None, or multiples of {tuple(array.chunks)}) decode each once."
            ),
            stacklevel=2,
        )
    source = _pin_device(array)
    dask_array: da.Array = da.from_array(  # type: ignore[no-untyped-call]
        source,
        chunks=blocks,
        name=name if name is not None else f"gpuzarr-{tokenize(source, blocks)}",
        getitem=_read_block,
        meta=_meta(source),
        asarray=False,
        fancy=False,
        lock=False,
        inline_array=inline_array,
    )
    return dask_array


def _normalize(chunks: Any, array: Array) -> tuple[tuple[int, ...], ...]:
    """``chunks`` as Dask's block sizes. Block sizes given need nothing of the stored grid (an
    axis of 2**40 chunks read in 1,024 blocks); ``"auto"`` grows blocks from the stored chunks,
    which must then be few enough for Dask to list (:func:`grid_blocks`)."""

    def normalize(previous: tuple[tuple[int, ...], ...] | None) -> tuple[tuple[int, ...], ...]:
        try:
            blocks = da.core.normalize_chunks(  # type: ignore[no-untyped-call]
                chunks, array.shape, dtype=array.dtype, previous_chunks=previous
            )
        except (ValueError, TypeError, ZeroDivisionError) as exc:  # Dask divides by a block size of 0
            raise InvalidArgumentError(f"to_dask: chunks={chunks!r} for shape {array.shape}: {exc}") from exc
        return tuple(tuple(int(n) for n in sizes) for sizes in blocks)

    try:
        stored: tuple[tuple[int, ...], ...] | None = grid_blocks(array.metadata.chunk_grid.dimensions(array.shape))
    except InvalidArgumentError as exc:
        if _sized_by_dask(chunks):
            raise InvalidArgumentError(
                f"{exc}; chunks={chunks!r} grows blocks from them: give block sizes instead"
            ) from None
        stored = None  # block sizes given: Dask needs no stored chunks to lay them
    blocks = normalize(stored)
    decoded = array.layout.dimensions()
    if first_split(blocks, decoded) is not None:
        # Dask grows "auto" blocks in multiples of the previous chunks only while one of those
        # fits its size target; a shard larger than that is cut anywhere. Whole decoded chunks
        # (a shard's inner chunks) are the next best unit: each is still decoded once.
        blocks = normalize(grid_blocks(decoded))
    return blocks


def _sized_by_dask(chunks: Any) -> bool:
    """Whether Dask chooses some block sizes itself (``"auto"``, a byte size such as ``"1MiB"``,
    -1 aside), which it does from the stored chunks."""
    if isinstance(chunks, str):
        return True
    if isinstance(chunks, dict):
        return any(_sized_by_dask(v) for v in chunks.values())
    if isinstance(chunks, list | tuple):
        return any(_sized_by_dask(v) for v in chunks)
    return False


def _mentions_auto(chunks: Any) -> bool:
    if isinstance(chunks, dict):
        chunks = tuple(chunks.values())
    if isinstance(chunks, tuple):
        return any(isinstance(c, str) and c == "auto" for c in chunks)
    return isinstance(chunks, str) and chunks == "auto"


def _pin_device(array: Array) -> Array:
    # "auto" resolves again in each worker, and could give CuPy blocks where meta says NumPy (a
    # worker with a GPU) or the reverse: the graph carries the kind of device it resolved to here.
    state = array.__getstate__()
    if state["device"] != "auto":
        return array
    state["device"] = "cpu" if array.device == "cpu" else "gpu"
    pinned = Array.__new__(Array)
    pinned.__setstate__(state)
    return pinned


def _meta(array: Array) -> Any:
    # A zero-size read is an empty array of the reader's own kind (NumPy, or CuPy on a GPU)
    # without touching the store, so a CPU array never imports CuPy. A 0-d array has no
    # zero-size selection: on the CPU its meta is made, not read (a damaged chunk raised in
    # to_dask, before any compute); on a GPU its one element is read, for the reader's kind.
    if array.ndim == 0:
        return np.empty((), dtype=array.dtype) if array.device == "cpu" else array.read(Ellipsis)
    return array.read((slice(0, 0),) * array.ndim)


def _read_block(array: Array, selection: tuple[slice, ...]) -> Any:
    """The task of one block: its slices read into a new NumPy or CuPy array."""
    return array.read(selection)
