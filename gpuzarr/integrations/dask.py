"""Dask arrays whose blocks gpuzarr reads (:func:`to_dask`), and Dask arrays written into gpuzarr
arrays (:func:`store_dask`, :func:`from_dask`). See docs/dask.md.

Reading: the graph is Dask's own ``da.from_array`` graph: one key holds the gpuzarr ``Array``
(store, path, metadata and options; no data, no open file, no CUDA object), and one task per
block calls ``Array.read`` on it with the block's slices. Graphs stay small and cheap to build
for 10**6 blocks, and a worker unpickles the Array once and reuses it (and the shard indexes it
has read) for all its blocks. Each worker resolves the Array's device again: CuPy blocks on a
worker with a GPU, NumPy blocks on the CPU.

Writing: Dask's ``da.store`` writes each block into its region (one task per block), through a
small proxy of the target array. Before that, the block boundaries are checked against the
target's stored chunks (its shards, when sharded): two blocks writing one stored object is a
read-modify-write race between tasks, which gpuzarr's locks and conditional writes settle on
one host or an object store, but not between hosts sharing a network file system, nor on a
store without locks. Like xarray's ``to_zarr``, writes with such blocks are refused
(:class:`~gpuzarr.errors.UnalignedChunksError`) unless ``safe_chunks=False``.
"""

from __future__ import annotations

import os
import warnings
from inspect import signature
from typing import TYPE_CHECKING, Any, Literal, overload

try:
    import dask.array as da
    from dask.base import normalize_token, tokenize
except ImportError as exc:  # pragma: no cover - the test environment has dask
    raise ImportError(
        "gpuzarr's Dask integration (to_dask, from_dask, store_dask) needs dask[array]; install it "
        "with: pip install 'gpuzarr[dask]'"
    ) from exc

from ..api import create
from ..core.array import Array
from ..errors import InvalidArgumentError, ReadOnlyError, UnalignedChunksError
from ..metadata.build import build_metadata
from ..metadata.chunk_grid import DimensionGrid
from ..store.memory import MemoryStore
from .block_alignment import first_split, grid_blocks

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..layout import AnyDimension

__all__ = ["from_dask", "store_dask", "to_dask"]

#: The keywords of gpuzarr.create that shape the metadata (and so the chunk grid) of a new array.
_METADATA_KEYWORDS = frozenset(signature(build_metadata).parameters) - {"shape", "dtype", "chunks", "shards"}


# -- reading ---------------------------------------------------------------------------------------


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
    stored = grid_blocks(array.metadata.chunk_grid.dimensions(array.shape))
    blocks = stored if chunks is None else _normalize(chunks, array, stored)
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


def _normalize(chunks: Any, array: Array, stored: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    def normalize(previous: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
        try:
            blocks = da.core.normalize_chunks(  # type: ignore[no-untyped-call]
                chunks, array.shape, dtype=array.dtype, previous_chunks=previous
            )
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(f"to_dask: chunks={chunks!r} for shape {array.shape}: {exc}") from exc
        return tuple(tuple(int(n) for n in sizes) for sizes in blocks)

    blocks = normalize(stored)
    decoded = array.layout.dimensions()
    if _mentions_auto(chunks) and first_split(blocks, decoded) is not None:
        # Dask grows "auto" blocks in multiples of the previous chunks only while one of those
        # fits its size target; a shard larger than that is cut anywhere. Whole decoded chunks
        # (a shard's inner chunks) are the next best unit: each is still decoded once.
        blocks = normalize(grid_blocks(decoded))
    return blocks


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
    # zero-size selection: its one element is read.
    if array.ndim == 0:
        return array.read(Ellipsis)
    return array.read((slice(0, 0),) * array.ndim)


def _read_block(array: Array, selection: tuple[slice, ...]) -> Any:
    """The task of one block: its slices read into a new NumPy or CuPy array."""
    return array.read(selection)


# -- writing ---------------------------------------------------------------------------------------


class _BlockWriter:
    """What ``da.store`` writes blocks into: the target array, one region per task.

    A MemoryStore lives in one process's memory: a block written by a worker process would
    land in that worker's copy and be lost, so such writes raise instead.
    """

    def __init__(self, array: Array) -> None:
        self.array = array
        self.owner_pid = os.getpid() if isinstance(array.store, MemoryStore) else None

    def __setitem__(self, selection: Any, block: Any) -> None:
        if self.owner_pid is not None and os.getpid() != self.owner_pid:
            raise InvalidArgumentError(
                f"store_dask: a block for {selection!r} was computed in process {os.getpid()}, but the "
                f"target's MemoryStore lives in process {self.owner_pid}: the write would be lost. Write "
                "to a LocalStore or an object store, or compute in one process (threads)."
            )
        self.array[selection] = block

    def __dask_tokenize__(self) -> Any:
        return normalize_token(("gpuzarr.integrations.dask._BlockWriter", self.array, self.owner_pid))


def store_dask(
    source: da.Array,
    target: Array,
    *,
    region: tuple[slice, ...] | None = None,
    safe_chunks: bool = True,
    compute: bool = True,
    **compute_kwargs: Any,
) -> da.Array | None:
    """Write a Dask array into a gpuzarr array, one task per block, in parallel.

    Parameters
    ----------
    source
        The Dask array; its blocks may be NumPy or CuPy arrays.
    target
        The gpuzarr array written (opened writable).
    region
        Where in ``target`` to write: a tuple of slices, one per axis, of ``source``'s shape.
        Default: all of ``target``, whose shape must then be ``source``'s.
    safe_chunks
        True (default): refuse, with :class:`~gpuzarr.errors.UnalignedChunksError`, blocks
        two of which would write one stored chunk of ``target`` (one shard, when sharded).
        False writes them anyway, correct only where the store's lock or conditional writes
        reach every writer; docs/dask.md says where that holds.
    compute
        True: write now and return None. False: return a Dask array whose computation
        writes (compute it with ``dask.compute`` or ``.compute()``).
    **compute_kwargs
        Passed on to ``dask.compute`` (``scheduler=...``).

    Raises
    ------
    UnalignedChunksError
        Naming the axis, the two blocks and the chunk or shard they would share.
    ReadOnlyError
        ``target`` is read-only.
    InvalidArgumentError
        ``source`` is not a Dask array, or its shape does not match ``region``.
    """
    if not isinstance(source, da.Array):
        raise InvalidArgumentError(f"store_dask: source must be a dask.array.Array, got {type(source).__name__}")
    if target.read_only:
        raise ReadOnlyError(f"store_dask: array {target.path or '/'!r} is read-only")
    box = _region(region, source.shape, target.shape)
    if safe_chunks:
        offset = None if box is None else [s.start for s in box]
        dims = target.metadata.chunk_grid.dimensions(target.shape)
        _check_aligned("store_dask", source.chunks, dims, _unit(target), offset)
    # da.store's annotation lists NumPy-like targets only; any object with __setitem__ works.
    writer: Any = _BlockWriter(target)
    stored: da.Array | None = da.store(source, writer, regions=box, lock=False, compute=compute, **compute_kwargs)
    return stored


def _unit(array: Array) -> str:
    return "shard" if array.shards is not None else "stored chunk"


def _region(region: Any, shape: tuple[int, ...], target_shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    if region is None:
        if shape != target_shape:
            raise InvalidArgumentError(
                f"store_dask: the Dask array's shape {shape} is not the target's {target_shape}; "
                "give region= (one slice per axis) to write part of the target"
            )
        return None
    if not isinstance(region, tuple) or len(region) != len(target_shape):
        raise InvalidArgumentError(
            f"store_dask: region must be a tuple of {len(target_shape)} slices, one per axis, got {region!r}"
        )
    box = []
    for axis, (item, n, extent) in enumerate(zip(region, shape, target_shape, strict=True)):
        if not isinstance(item, slice):
            raise InvalidArgumentError(f"store_dask: region[{axis}] must be a slice, got {item!r}")
        start, stop, step = item.indices(extent)
        if step != 1:
            raise InvalidArgumentError(f"store_dask: region[{axis}] must have step 1, got {item!r}")
        if max(stop - start, 0) != n:
            raise InvalidArgumentError(
                f"store_dask: region[{axis}] {item!r} covers {max(stop - start, 0)} elements of the "
                f"target's {extent}, but the Dask array has {n} on axis {axis}"
            )
        box.append(slice(start, start + n))
    return tuple(box)


def _check_aligned(
    caller: str,
    blocks: Sequence[Sequence[int]],
    dims: Sequence[AnyDimension],
    unit: str,
    offset: Sequence[int] | None = None,
) -> None:
    """Raise UnalignedChunksError where two blocks would write one chunk (or shard) of ``dims``."""
    split = first_split(blocks, dims, offset)
    if split is None:
        return
    dim = dims[split.axis]
    hint = ""
    if isinstance(dim, DimensionGrid) and (offset is None or offset[split.axis] % dim.chunk_size == 0):
        hint = f" (e.g. source.rechunk({{{split.axis}: {dim.chunk_size}}}))"
    raise UnalignedChunksError(
        f"{caller}: {split.describe(unit)} of the target: both blocks would write that {unit}, and "
        f"parallel writers of one {unit} can lose each other's data. Rechunk the Dask array so that its "
        f"blocks end on {unit} boundaries{hint}, or pass safe_chunks=False where the store's locks "
        "reach every writer (see docs/dask.md)"
    )


@overload
def from_dask(
    source: da.Array,
    store: Any = None,
    *,
    chunks: Any = None,
    shards: Any = None,
    safe_chunks: bool = True,
    compute: Literal[True] = True,
    **create_kwargs: Any,
) -> Array: ...


@overload
def from_dask(
    source: da.Array,
    store: Any = None,
    *,
    chunks: Any = None,
    shards: Any = None,
    safe_chunks: bool = True,
    compute: bool,
    **create_kwargs: Any,
) -> Array | da.Array: ...


def from_dask(
    source: da.Array,
    store: Any = None,
    *,
    chunks: Any = None,
    shards: Any = None,
    safe_chunks: bool = True,
    compute: bool = True,
    **create_kwargs: Any,
) -> Array | da.Array:
    """Create a gpuzarr array of a Dask array's shape and type, and write the Dask array into it.

    Parameters
    ----------
    source
        The Dask array.
    store
        Where to create the array: anything :func:`gpuzarr.create` takes (a path, a URL, a
        Store). Give a LocalStore or an object store when the blocks are computed by worker
        processes: a MemoryStore lives in one process.
    chunks
        The chunk shape (the inner chunk shape with ``shards``). Default without ``shards``:
        the Dask block shape, which must then be regular (all blocks of an axis but the last of
        one size, the last no larger); ``chunks=source.chunks`` makes a rectilinear grid
        instead. With ``shards`` and no ``chunks``, :func:`gpuzarr.create` picks the inner
        chunks.
    shards
        The shard shape (v3), e.g. ``source.chunksize`` for one shard per block.
    safe_chunks
        As in :func:`store_dask`: True refuses blocks two of which would write one stored chunk
        (one shard), before anything is created.
    compute
        True: write now and return the new array. False: return a Dask array whose computation
        writes; the new array exists already (its metadata is written) and reads as its fill
        value until then.
    **create_kwargs
        Passed on to :func:`gpuzarr.create`: ``path``, ``codecs``/``compressors``,
        ``fill_value``, ``zarr_format``, ``dimension_names``, ``attributes``, ``overwrite``,
        ``device``, ... ``dtype`` converts the blocks; ``shape`` and ``data`` come from
        ``source``.

    Returns
    -------
    Array, or a Dask array to compute when ``compute=False``.

    Raises
    ------
    UnalignedChunksError
        Blocks that would share a stored chunk or shard (with ``safe_chunks=True``).
    InvalidArgumentError
        Irregular blocks with no ``chunks`` given; ``shape`` or ``data`` given.
    """
    if not isinstance(source, da.Array):
        raise InvalidArgumentError(f"from_dask: source must be a dask.array.Array, got {type(source).__name__}")
    for taken in ("shape", "data"):
        if taken in create_kwargs:
            raise InvalidArgumentError(f"from_dask: {taken}= is not accepted: it comes from the Dask array")
    dtype = create_kwargs.pop("dtype", None)
    if dtype is not None:
        source = source.astype(dtype)  # type: ignore[no-untyped-call]
    if chunks is None and shards is None:
        chunks = _regular_block_shape(source)
    metadata = build_metadata(
        shape=source.shape,
        dtype=source.dtype,
        chunks=chunks,
        shards=shards,
        **{key: value for key, value in create_kwargs.items() if key in _METADATA_KEYWORDS},
    )
    if safe_chunks:
        # Before anything is created: a refused write leaves no empty array behind.
        unit = "shard" if shards is not None else "stored chunk"
        _check_aligned("from_dask", source.chunks, metadata.chunk_grid.dimensions(source.shape), unit)
    target = create(store, shape=source.shape, dtype=source.dtype, chunks=chunks, shards=shards, **create_kwargs)
    pending = store_dask(source, target, safe_chunks=False, compute=compute)
    return target if pending is None else pending


def _regular_block_shape(source: da.Array) -> tuple[int, ...]:
    shape = []
    for axis, sizes in enumerate(source.chunks):
        first = sizes[0]
        if any(n != first for n in sizes[:-1]) or sizes[-1] > first:
            shown = ", ".join(map(str, sizes[:6])) + (", ..." if len(sizes) > 6 else "")
            raise InvalidArgumentError(
                f"from_dask: the Dask array's blocks along axis {axis} ({shown}) are not of one size, "
                "so they are no regular chunk grid; give chunks= (a chunk shape its blocks end on), "
                "rechunk it (source.rechunk(...)), or give chunks=source.chunks for a rectilinear grid"
            )
        shape.append(max(first, 1))  # an empty axis still has a chunk size
    return tuple(shape)
