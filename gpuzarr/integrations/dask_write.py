"""Writing Dask arrays into gpuzarr arrays: :func:`store_dask` and :func:`from_dask` (see
:mod:`gpuzarr.integrations.dask`)."""

from __future__ import annotations

import math
import os
import weakref
from inspect import signature
from typing import TYPE_CHECKING, Any, Literal, overload

import dask.array as da
from dask.base import normalize_token

from ..api import create
from ..errors import InvalidArgumentError, ReadOnlyError, UnalignedChunksError
from ..metadata.build import build_metadata
from ..metadata.chunk_grid import DimensionGrid
from ..store.memory import MemoryStore
from ..store.zip import ZipStore
from .block_alignment import first_split

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..core.array import Array
    from ..layout import AnyDimension

#: The keywords of gpuzarr.create that shape the metadata (and so the chunk grid) of a new array.
_METADATA_KEYWORDS = frozenset(signature(build_metadata).parameters) - {"shape", "dtype", "chunks", "shards"}



class _BlockWriter:
    """What ``da.store`` writes blocks into: the target array, one region per task.

    A MemoryStore lives in one process's memory: a block written by a worker process would
    land in that worker's copy and be lost, so such writes raise instead. So does a zip archive
    being written, which one process's writer holds open (a copy could not even be made: its
    store refuses to pickle, and dask.distributed reported that as its own ``TypeError``).
    Within its own process the writer is pickled by reference (dask.distributed pickles tasks
    for in-process workers too, ``LocalCluster(processes=False)``): a pickled MemoryStore is a
    copy, and every block was written into a copy of its own and lost.
    """

    def __init__(self, array: Array) -> None:
        self.array: Array | None = array
        store = array.store
        in_process = isinstance(store, MemoryStore) or (isinstance(store, ZipStore) and not store.read_only)
        self.owner_pid = os.getpid() if in_process else None
        self.store_kind = type(store).__name__

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self.owner_pid is None:
            return _BlockWriter, (self.array,)
        token = f"{self.owner_pid}:{id(self)}"
        _WRITERS[token] = self
        # Elsewhere the copy only refuses to write: a zip archive being written is not sent.
        copy = self.array if self.array is not None and isinstance(self.array.store, MemoryStore) else None
        return _writer_by_reference, (token, copy, self.owner_pid, self.store_kind)

    def __setitem__(self, selection: Any, block: Any) -> None:
        if self.array is None or (self.owner_pid is not None and os.getpid() != self.owner_pid):
            raise InvalidArgumentError(
                f"store_dask: a block for {selection!r} was computed in process {os.getpid()}, but the "
                f"target's {self.store_kind} lives in process {self.owner_pid}: the write would be lost. "
                "Write to a LocalStore or an object store, or compute in one process (threads)."
            )
        self.array[selection] = block

    def __dask_tokenize__(self) -> Any:
        return normalize_token(("gpuzarr.integrations.dask._BlockWriter", self.array, self.owner_pid))


#: MemoryStore writers pickled in this process, by token: unpickled here, they are themselves.
_WRITERS: weakref.WeakValueDictionary[str, _BlockWriter] = weakref.WeakValueDictionary()


def _writer_by_reference(
    token: str, array: Array | None, owner_pid: int, store_kind: str = "MemoryStore"
) -> _BlockWriter:
    """The writer pickled as ``token``: itself in its own process (while it lives), elsewhere a
    writer of the copy (or of nothing), which refuses to write (``_BlockWriter.__setitem__``)."""
    if os.getpid() == owner_pid:
        live = _WRITERS.get(token)
        if live is not None:
            return live
    writer = _BlockWriter.__new__(_BlockWriter)
    writer.array, writer.owner_pid, writer.store_kind = array, owner_pid, store_kind
    return writer


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
        ``source`` is not a Dask array, its block sizes are unknown (NaN), or its shape does
        not match ``region``.
    """
    _check_source("store_dask", source)
    if target.read_only:
        raise ReadOnlyError(f"store_dask: array {target.path or '/'!r} is read-only")
    box = _region(region, source.shape, target.shape)
    if safe_chunks:
        offset = None if box is None else [s.start for s in box]
        dims = target.metadata.chunk_grid.dimensions(target.shape)
        _check_aligned("store_dask", source.chunks, dims, _unit(target.shards is not None), offset)
    # da.store's annotation lists NumPy-like targets only; any object with __setitem__ works.
    writer: Any = _BlockWriter(target)
    stored: da.Array | None = da.store(source, writer, regions=box, lock=False, compute=compute, **compute_kwargs)
    return stored


def _unit(sharded: bool) -> str:
    """What one writer must own whole: a shard, or a stored chunk."""
    return "shard" if sharded else "stored chunk"


def _check_source(caller: str, source: Any) -> None:
    """A Dask array whose block sizes are known: blocks of unknown size (NaN, after boolean
    indexing or ``to_dask_array()`` of a DataFrame) cannot be placed in the target."""
    if not isinstance(source, da.Array):
        raise InvalidArgumentError(f"{caller}: source must be a dask.array.Array, got {type(source).__name__}")
    unknown = [axis for axis, sizes in enumerate(source.chunks) if any(math.isnan(n) for n in sizes)]
    if unknown:
        raise InvalidArgumentError(
            f"{caller}: the Dask array's block sizes along axis {unknown[0]} are unknown (NaN; its shape is "
            f"{source.shape}), so its blocks cannot be placed in the target: call "
            "source.compute_chunk_sizes() first (or build it with known sizes)"
        )


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
    compute_kwargs: dict[str, Any] | None = None,
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
    compute_kwargs: dict[str, Any] | None = None,
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
    compute_kwargs: dict[str, Any] | None = None,
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
    compute_kwargs
        Passed on to ``dask.compute`` when ``compute=True`` (``{"scheduler": "threads"}``, ...):
        the other keywords go to :func:`gpuzarr.create`.
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
        Irregular blocks with no ``chunks`` given; blocks of unknown size (NaN); ``shape`` or
        ``data`` given.
    """
    _check_source("from_dask", source)
    for taken in ("shape", "data"):
        if taken in create_kwargs:
            raise InvalidArgumentError(f"from_dask: {taken}= is not accepted: it comes from the Dask array")
    dtype = create_kwargs.pop("dtype", None)
    if dtype is not None:
        source = source.astype(dtype)  # type: ignore[no-untyped-call]
    if "chunk_shape" in create_kwargs:  # create's other name for chunks (zarr-python's)
        if chunks is not None:
            raise InvalidArgumentError("from_dask: chunks and chunk_shape: give one of them")
        chunks = create_kwargs.pop("chunk_shape")
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
        unit = _unit(shards is not None)
        _check_aligned("from_dask", source.chunks, metadata.chunk_grid.dimensions(source.shape), unit)
    target = create(store, shape=source.shape, dtype=source.dtype, chunks=chunks, shards=shards, **create_kwargs)
    pending = store_dask(source, target, safe_chunks=False, compute=compute, **(compute_kwargs or {}))
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
