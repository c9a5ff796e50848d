"""``Array``: the user-facing handle of one Zarr array (a thin facade over plan, layout and reader).

A read is ``plan_selection`` (or its orthogonal / vectorised siblings) over the layout's planning
grid, then one call of the array's :class:`~gpuzarr.backends.Reader`, chosen once from its device.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import backends, config
from ..attributes import Attributes
from ..backends.cpu import as_host_array, write_plan
from ..backends.cpu.host_arrays import is_device_array
from ..backends.select import resolve_device_for
from ..consolidated import record_metadata_write, recorded_if_interrupted
from ..errors import (
    ArrayNotFoundError,
    BoundsCheckError,
    GpuZarrError,
    InvalidArgumentError,
    MetadataError,
    ReadOnlyError,
    UnwritableValueError,
)
from ..futures import Future, submit
from ..hierarchy import write_documents
from ..layout import ArrayLayout
from ..metadata.json_util import check_attributes
from ..metadata.rectilinear import RectilinearChunkGrid
from ..metadata.v2 import ArrayMetadataV2
from ..plan.selection import (
    ChunkProjection,
    SelectionPlan,
    plan_box_batch,
    plan_orthogonal,
    plan_selection,
    plan_vectorized,
)
from ..store.local import LocalStore
from ..store.memory import MemoryStore
from .array_config import ArrayConfig, write_empty_chunks_of
from .info import ArrayInfo, array_info, codec_parts, count_chunks, count_initialized, nbytes_stored
from .shape_lock import ShapeLock

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..backends.cuda.handoff import CallerContext
    from ..metadata.json_types import CodecJSON, TensorStoreSpecJSON
    from ..metadata.v3 import ArrayMetadata
    from ..store.base import Store


#: A shrinking resize erases every grid position it cuts off up to this many; beyond, those a
#: listing of the store finds (a grid of 10**7 empty positions shrinks at once).
WALKED_RESIZE_POSITIONS = 1 << 16
#: How many keys a local store lists in the time it erases one missing key (3.6 against 14.2 µs
#: measured on ext4)
ERASE_TO_LIST_COST = 4


def _read_before_writing(plan: SelectionPlan) -> SelectionPlan:
    """``plan`` with no chunk taken as written whole: each one is read, changed and written."""
    projections = [
        ChunkProjection(p.chunk_coords, p.chunk_selection, p.out_selection, False) for p in plan.projections
    ]
    return SelectionPlan(plan.shape, plan.buffer_shape, projections)


def written_value(value: Any, dtype: np.dtype[Any], where: str) -> np.ndarray[Any, Any]:
    """``value`` as a host array of ``dtype``, to write.

    UnwritableValueError (naming ``where``) for one NumPy cannot convert.
    """
    try:
        return as_host_array(value, dtype)
    except GpuZarrError:
        raise
    # NumPy's conversion refused it; or PyTorch's (a meta tensor's NotImplementedError, a nested
    # tensor's RuntimeError).
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
        raise UnwritableValueError(f"{where}: cannot write {_described(value)} as {dtype} ({exc})") from exc


#: values whose conversion to an array makes a new one, which nothing else holds
_FRESH_VALUES = (bool, int, float, complex, str, bytes, list, tuple, np.generic)


def _own_copy(host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of ``host`` that shares no memory with it, no larger than its distinct elements.

    An axis of stride 0 (a broadcast, a PyTorch ``expand``) is copied once and broadcast again.
    """
    strides = zip(host.strides, host.shape, strict=True)
    repeated = tuple(slice(0, 1) if stride == 0 and n > 1 else slice(None) for stride, n in strides)
    return np.broadcast_to(host[repeated].copy(), host.shape)


def broadcast_value(arr: np.ndarray[Any, Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """``arr`` broadcast to a selection's ``shape`` as NumPy's assignment broadcasts it.

    Leading axes of length 1 beyond the selection's are dropped (``a[0:2, 0:3] =
    np.ones((1, 2, 3))``); a value that does not broadcast is an InvalidArgumentError.
    """
    extra = arr.ndim - len(shape)
    if extra > 0 and all(n == 1 for n in arr.shape[:extra]):
        arr = arr.reshape(arr.shape[extra:])
    try:
        return np.broadcast_to(arr, shape)
    except ValueError as exc:
        message = f"could not broadcast value of shape {arr.shape} to selection shape {shape}"
        raise InvalidArgumentError(message) from exc


def _described(value: Any) -> str:
    """A short description of a value to write, for a message.

    A scalar as itself, anything else by its type and shape (whose repr may be long, or fail:
    a PyTorch int4 tensor's).
    """
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        shown = repr(value)
        if len(shown) <= 60:
            return shown
    shape = getattr(value, "shape", None)
    return f"a {type(value).__name__}" + ("" if shape is None else f" of shape {tuple(shape)}")


class Array:
    """A Zarr array in a store. Create with :func:`gpuzarr.open` or :func:`gpuzarr.create`.

    Indexing reads (``a[...]``, ``a.oindex[...]``, ``a.vindex[...]``) and writes
    (``a[...] = x``) with NumPy's semantics on the whole array.
    """

    @classmethod
    def open(cls, store: Any, *, device: str = "auto") -> Array:
        """The array at ``store`` (a path, URL, Store or kvstore dict), as zarr-python names it.

        :func:`gpuzarr.open_array` with no mode.

        ArrayNotFoundError where a group or nothing is there.
        """
        from .group import open_node_of_kind

        return open_node_of_kind(store, Array, ArrayNotFoundError, device)[0]

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: ArrayMetadata | ArrayMetadataV2,
        device: str = "auto",
        *,
        fill_missing_data_reads: bool = True,
        store_data_equal_to_fill_value: bool = False,
        strict: bool | None = None,
        metadata_writable: bool = True,
        metadata_source: str | None = None,
    ) -> None:
        self.store = store
        self.path = path.strip("/")
        self._requested_device = device  # what a pickled copy resolves again in its process
        self._device = resolve_device_for(device, np.dtype(metadata.dtype))
        self._reader = backends.reader_for(self._device)
        #: GPU reads: raise DeviceError instead of running any part on the CPU (None: the
        #: ``strict`` setting of gpuzarr.config)
        self.strict = strict
        # TensorStore's options: raise on missing chunks / store chunks equal to the fill value.
        self._fill_missing_data_reads = fill_missing_data_reads
        self._store_data_equal_to_fill_value = store_data_equal_to_fill_value
        # False for TensorStore's assume_metadata: the metadata was never read, so never write it.
        self._metadata_writable = metadata_writable
        self._set_metadata(metadata, metadata_source)

    # The locks are made on first use: a group of 10**4 arrays listed, whose arrays are only
    # read, made 10**4 of each, which Python's garbage collector then walked again and again.

    @property
    def _metadata_lock(self) -> threading.RLock:
        """The lock held from reading the metadata to writing its change.

        Attributes, resize and append take it, so that changes made through this handle from
        several threads keep each other.
        """
        lock: threading.RLock = self._made_on_first_use("_metadata_lock_made", threading.RLock)
        return lock

    @property
    def _shape_lock(self) -> ShapeLock:
        """The lock writes share from plan to last chunk, and resize and append hold alone.

        See :mod:`.shape_lock`; it is taken before the metadata lock.
        """
        lock: ShapeLock = self._made_on_first_use("_shape_lock_made", ShapeLock)
        return lock

    def _made_on_first_use(self, name: str, make: Callable[[], Any]) -> Any:
        """The object this handle keeps as ``name``, made by ``make`` on first use.

        ``dict.setdefault`` is atomic: two threads asking at once get the same one.
        """
        made = self.__dict__.get(name)
        return made if made is not None else self.__dict__.setdefault(name, make())

    def _set_metadata(self, metadata: ArrayMetadata | ArrayMetadataV2, source: str | None = None) -> None:
        """Take ``metadata``, resolving its codec chain.

        An error names the document it came from: ``source`` where that is not the array's
        own (an entry of a group's consolidated metadata).
        """
        self._metadata = metadata
        self._bump_generation()
        try:
            self._layout = ArrayLayout.from_metadata(
                metadata,
                self._prefix,
                fill_missing_data_reads=self._fill_missing_data_reads,
                store_data_equal_to_fill_value=self._store_data_equal_to_fill_value,
            )
        except MetadataError as exc:
            # The codec chain is resolved here, after the document was parsed: name its key.
            document = ".zarray" if metadata.zarr_format == 2 else "zarr.json"
            raise type(exc)(f"{source or self._prefix + document}: {exc}") from exc

    def _bump_generation(self) -> None:
        #: Counts the changes made through this object (writes, new metadata): caches of its
        #: decoded chunks (the loader's) drop what they hold of it when it moves. Its twins
        #: (:meth:`_twin_on`) count them too.
        self.data_generation = getattr(self, "data_generation", 0) + 1
        for twin in list(getattr(self, "_twins", ())):
            twin._bump_generation()

    def _twin_on(self, device: str, bits: np.dtype[Any] | None = None) -> Array:
        """A twin of the array on ``device``, whose ``data_generation`` follows this one's.

        The same store, path, metadata and options, rebuilt through the pickling state, so
        nothing is read again. Every change made through this array moves the twin's
        ``data_generation`` too: a loader reading a CPU-opened array on the GPU reads through
        such a twin, and its caches must see the user's writes. With ``bits`` (an integer type
        of the element size), the twin reads the elements as their bits
        (:func:`gpuzarr.metadata.bits.as_bits_of`): a type CuPy cannot hold, on the GPU.
        """
        state = self.__getstate__()
        state["device"] = device
        if bits is not None:
            from ..metadata.bits import as_bits_of

            state["metadata"] = as_bits_of(self._metadata, bits)
        twin = Array.__new__(Array)
        twin.__setstate__(state)
        twins = self.__dict__.setdefault("_twins", weakref.WeakSet())
        twins.add(twin)
        # the array this twin reads for: a loader checks that its shape did not change
        twin.__dict__["_twin_of"] = self
        return twin

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled Array carries: the store, path, metadata and options.

        No lock, pool, reader, CUDA object or file handle travels: the copy resolves its
        device again (``device="auto"`` may pick the CPU in a process without a GPU) and builds
        its own layout, which is what DataLoader workers and Dask's process schedulers need.
        """
        return {
            "store": self.store,
            "path": self.path,
            "metadata": self._metadata,
            "device": self._requested_device,
            "strict": self.strict,
            "fill_missing_data_reads": self._fill_missing_data_reads,
            "store_data_equal_to_fill_value": self._store_data_equal_to_fill_value,
            "metadata_writable": self._metadata_writable,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Rebuild an Array from :meth:`__getstate__`'s state."""
        Array.__init__(
            self,
            state["store"],
            state["path"],
            state["metadata"],
            state["device"],
            fill_missing_data_reads=state["fill_missing_data_reads"],
            store_data_equal_to_fill_value=state["store_data_equal_to_fill_value"],
            strict=state["strict"],
            metadata_writable=state["metadata_writable"],
        )

    def __dask_tokenize__(self) -> Any:
        """What Dask names this array's graphs by (``da.from_array``, :func:`gpuzarr.to_dask`).

        The store, path, metadata and options: never the data, which Dask would otherwise pickle
        whole to hash it (all of it, for a MemoryStore). As for h5py and zarr-python arrays, a
        graph made before a write and one made after it share their names.
        """
        # Only Dask calls this, so Dask is there; it hashes what this returns as text, so the
        # store (whose repr is not unique) is normalised here, as Dask's documentation does it.
        from dask.base import normalize_token

        return normalize_token(
            (
                "gpuzarr.Array",
                self.store,
                self.path,
                self._metadata.to_json(),
                self._requested_device,
                self.strict,
                self._fill_missing_data_reads,
                self._store_data_equal_to_fill_value,
            )
        )

    @property
    def config(self) -> ArrayConfig:
        """zarr-python's ``config`` of this array (``a.config.write_empty_chunks``).

        ``write_empty_chunks``: whether chunks equal to the fill value are stored; ``order``:
        always "C" (reads return C-ordered arrays).
        """
        return ArrayConfig(write_empty_chunks=self._store_data_equal_to_fill_value)

    def with_config(self, config: Any) -> Array:
        """A new handle of this array with zarr-python's ``config``, as zarr-python's ``with_config``.

        ``config`` is an ``ArrayConfig``, or a dict of some of its keys (the others as they are here).
        """
        merged = {**self.config.to_dict(), **config} if isinstance(config, dict) else config
        return Array(
            self.store,
            self.path,
            self._metadata,
            self._requested_device,
            fill_missing_data_reads=self._fill_missing_data_reads,
            store_data_equal_to_fill_value=write_empty_chunks_of(merged),
            strict=self.strict,
            metadata_writable=self._metadata_writable,
        )

    @property
    def fill_missing_data_reads(self) -> bool:
        """False: reading a missing chunk raises ChunkNotFoundError (TensorStore's option)."""
        return self._fill_missing_data_reads

    @property
    def store_data_equal_to_fill_value(self) -> bool:
        """True: chunks equal to the fill value are stored, not erased (TensorStore's option)."""
        return self._store_data_equal_to_fill_value

    @property
    def layout(self) -> ArrayLayout:
        """The resolved array that readers and writers work from.

        Metadata, prepared codec pipelines, planning grid and shard addressing.
        """
        return self._layout

    @property
    def _prefix(self) -> str:
        return self.path + "/" if self.path else ""

    # -- description -----------------------------------------------------------------------------

    @property
    def metadata(self) -> ArrayMetadata | ArrayMetadataV2:
        """The array's metadata (Zarr v3, or v2 normalised to the v3 chain)."""
        return self._metadata

    @property
    def zarr_format(self) -> int:
        """The Zarr format version: 2 or 3."""
        return self._metadata.zarr_format

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self._metadata.shape

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy data type of the elements."""
        return self._metadata.dtype

    @property
    def nbytes(self) -> int:
        """The size of the whole array, decoded, in bytes."""
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[Any, ...]:
        """The shape of a chunk as read and decoded: the inner chunk when sharded.

        For a rectilinear grid, each axis is its chunk size or the tuple of the sizes of its
        chunks within the array: they add up to the array's extent, as the ``chunks`` of a Dask
        array do (a listed chunk past the edge is left out and the last one is cut at the edge,
        which a shrinking resize leaves; ``(0,)`` for an empty axis).
        """
        if self._layout.sharding is not None:
            return self._layout.sharding.chunk_shape
        listed = getattr(self._metadata.chunk_grid, "chunk_shapes", None)
        if listed is None:
            return self._metadata.chunk_shape
        return tuple(
            sizes if isinstance(sizes, int) else (dim.valid_extents() or (0,))
            for sizes, dim in zip(listed, self._layout.dimensions(), strict=True)
        )

    @property
    def shards(self) -> tuple[Any, ...] | None:
        """The shard shape, or None when the array is not sharded.

        For a rectilinear grid of shards, each axis is its shard size or the tuple of the sizes
        of its shards that start within the array, whole (the last may reach past the edge):
        ``create(..., chunks=a.chunks, shards=a.shards)`` makes the same grid. (The largest
        shard, given before, made it regular; shards cut at the edge, after a resize, were not
        multiples of the inner chunk.)
        """
        if self._layout.sharding is None:
            return None
        grid = self._metadata.chunk_grid
        listed = getattr(grid, "chunk_shapes", None)
        if listed is None:
            return self._metadata.chunk_shape
        return tuple(
            sizes if isinstance(sizes, int) else sizes[: max(dim.nchunks, 1)]
            for sizes, dim in zip(listed, grid.dimensions(self.shape), strict=True)
        )

    @property
    def fill_value(self) -> Any:
        """The value of elements never written (a missing chunk reads as it).

        None for a Zarr v2 array whose ``fill_value`` is ``null``, as zarr-python gives; its
        missing chunks read as the data type's default, again as in zarr-python: zero for
        numbers, NaT for times, empty text or bytes.
        """
        if isinstance(self._metadata, ArrayMetadataV2) and self._metadata.fill_value_v2 is None:
            return None
        return self._metadata.fill_value

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The name of each axis (v3 ``dimension_names``), or None."""
        return self._metadata.dimension_names

    @property
    def codecs(self) -> list[CodecJSON]:
        """The codec chain as Zarr v3 JSON (for v2, the chain the metadata maps to)."""
        return self._layout.pipeline.to_json()

    @property
    def filters(self) -> tuple[dict[str, Any], ...]:
        """The array -> array codecs (v2: the filters) as JSON, split as zarr-python splits them.

        A sharded array's are those of its inner chunks, as for :attr:`serializer` and
        :attr:`compressors`.
        """
        return codec_parts(self)[0]

    @property
    def serializer(self) -> CodecJSON | None:
        """The array -> bytes codec as JSON (None for Zarr v2), as zarr-python gives it."""
        return codec_parts(self)[1]

    @property
    def compressors(self) -> tuple[dict[str, Any], ...]:
        """The bytes -> bytes codecs (v2: the compressor, if any), as JSON."""
        return codec_parts(self)[2]

    @property
    def compressor(self) -> dict[str, Any] | None:
        """A Zarr v2 array's compressor as JSON (None: uncompressed).

        TypeError for Zarr v3, whose codec chain has no one compressor (:attr:`compressors`),
        as zarr-python raises.
        """
        if self.zarr_format != 2:
            raise TypeError("compressor is not available for Zarr format 3 arrays: see compressors")
        compressors = self.compressors
        return compressors[0] if compressors else None

    @property
    def device(self) -> str:
        """Where reads land: ``"cpu"`` (NumPy) or ``"cuda:N"`` (CuPy)."""
        return self._device

    @property
    def read_only(self) -> bool:
        """Whether the store refuses writes."""
        return self.store.read_only

    @property
    def attrs(self) -> Attributes:
        """The user attributes, a mutable mapping written through to the store."""
        return Attributes(lambda: self._metadata.attributes, self._put_attributes, self._metadata_lock)

    def update_attributes(self, new_attributes: dict[str, Any]) -> Array:
        """Merge ``new_attributes`` into the attributes (one metadata write); returns the array."""
        with self._metadata_lock:
            self._put_attributes({**self._metadata.attributes, **new_attributes})
        return self

    @property
    def name(self) -> str:
        """The array's path with a leading "/" ("/" for an array at the store's root), as zarr-python names it."""
        return "/" + self.path

    @property
    def basename(self) -> str:
        """The last component of :attr:`name` ("" for an array at the store's root)."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def order(self) -> str:
        """The memory order of the arrays reads return, "C", and a Zarr v2 array's stored order."""
        return self._metadata.order if isinstance(self._metadata, ArrayMetadataV2) else "C"

    @property
    def cdata_shape(self) -> tuple[int, ...]:
        """How many chunks (inner chunks when sharded, as zarr-python counts) each axis has."""
        return tuple(d.nchunks for d in self._layout.dimensions())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        where = f"{self.store!r}" + (f" path={self.path!r}" if self.path else "")
        return f"<gpuzarr.Array {where} shape={self.shape} dtype={self.dtype} chunks={self.chunks}>"

    # -- reading ---------------------------------------------------------------------------------

    def _dims(self) -> Any:
        return self._layout.dimensions()

    def _strict(self) -> bool:
        return bool(config.get("strict") if self.strict is None else self.strict)

    def _execute_read(
        self, plan: SelectionPlan, out: Any = None, stream: Any = None, strict: bool | None = None
    ) -> Any:
        strict = self._strict() if strict is None else strict
        return self._reader.read(self._layout, self.store, plan, out, stream=stream, strict=strict)

    def __getitem__(self, selection: Any) -> Any:
        result = self._execute_read(plan_selection(selection, self._dims()))
        return result[()] if result.ndim == 0 and not self._keep_0d(selection) else result

    def _keep_0d(self, selection: Any) -> bool:
        # NumPy returns a scalar for a[()] on a 0-d array and a[i, j] on 2-d; an Ellipsis keeps 0-d.
        entries = selection if isinstance(selection, tuple) else (selection,)
        return any(s is Ellipsis for s in entries)

    def read(self, selection: Any = Ellipsis, *, out: Any = None, stream: Any = None) -> Any:
        """Read a (basic or single-array) selection, optionally into ``out``.

        ``out`` has the selection's shape and the array's dtype: a NumPy array on the CPU, a
        CuPy array on a GPU.

        ``stream`` (GPU reads: a CuPy or PyTorch CUDA stream, or a ``cudaStream_t`` int) is the
        stream the read is ordered on; the result is ready for work queued on that stream
        afterwards, e.g. a ``torch.from_dlpack`` on it. On the CPU it is ignored, so one data
        loader runs on both.
        """
        return self._execute_read(plan_selection(selection, self._dims()), out, stream)

    def read_async(self, selection: Any = Ellipsis, *, out: Any = None, stream: Any = None) -> Future[Any]:
        """:meth:`read`, started and returned at once as a :class:`gpuzarr.futures.Future`.

        ``.result()`` waits for the array (or ``out``); ``await`` waits without blocking an
        asyncio event loop.

        The selection is checked here (an IndexError or BoundsCheckError raises now); errors of
        ``out``, the store and decoding are raised by ``result()``. The ``strict`` setting is
        the one in force now. On a GPU the read runs as :meth:`read` called here would: on this
        thread's current device, allocator and stream (or ``stream``); the result is ready for
        work queued on that stream once the future is done.

        Many of them run at once (``async_concurrency`` in :mod:`gpuzarr.config`), unordered
        among themselves and against writes: wait for a write's future before reading what it
        writes.
        """
        return self._read_plan_async(plan_selection(selection, self._dims()), out, stream)

    def _read_plan_async(self, plan: SelectionPlan, out: Any, stream: Any) -> Future[Any]:
        strict = self._strict()
        context = self._caller_context(stream)
        if context is None:
            return submit(self._execute_read, plan, out, stream, strict)
        if out is None and context.needs_output:
            out = context.output(plan.shape, self.dtype)
        return submit(self._read_in, context, plan, out, strict)

    def _caller_context(self, stream: Any) -> CallerContext | None:
        """What of this thread a GPU read run on another thread keeps.

        None on the CPU and on an emulated device, which take ``stream`` as it is.
        """
        if self._device == "cpu":
            return None
        from ..backends.cuda.handoff import caller_context
        from ..backends.cuda.reader import CudaReader

        return caller_context(self._reader, stream) if isinstance(self._reader, CudaReader) else None

    def _read_in(self, context: CallerContext, plan: SelectionPlan, out: Any, strict: bool) -> Any:
        with context.entered() as stream:
            return self._execute_read(plan, out, stream, strict)

    def read_batch(self, selections: Any, *, out: Any = None, stream: Any = None) -> Any:
        """Read many selections of one shape at once and stack them: shape ``(n, *shape)``.

        The data-loader case: all crops are planned together and their chunks decoded in one
        parallel pass (on a GPU: one batched decode and one assemble launch), so a batch costs
        little more than its chunks.
        """
        return self._execute_read(self._batch_plan(selections), out, stream)

    def read_batch_async(self, selections: Any, *, out: Any = None, stream: Any = None) -> Future[Any]:
        """:meth:`read_batch`, started and returned at once as a :class:`gpuzarr.futures.Future`.

        The selections are checked here; the rest is as :meth:`read_async`: a loader of its own
        asks for the next batch while the last one trains.
        """
        return self._read_plan_async(self._batch_plan(selections), out, stream)

    def _batch_plan(self, selections: Any) -> SelectionPlan:
        """One plan of ``selections`` stacked (read_batch's)."""
        try:
            selections = list(selections)
        except TypeError:
            raise InvalidArgumentError(
                f"read_batch: expected an iterable of selections, got {type(selections).__name__}"
            ) from None
        if not selections:
            raise InvalidArgumentError("read_batch: no selections given")
        batched = plan_box_batch(selections, self._dims())
        if batched is not None:  # crops: planned together, in one pass
            return batched
        plans = [plan_selection(s, self._dims()) for s in selections]
        shape = plans[0].shape
        for i, p in enumerate(plans):
            if p.buffer_shape != p.shape:
                raise InvalidArgumentError(
                    f"read_batch: selection {i} selects points (several index arrays, or one of "
                    "several dimensions); read_batch takes integers, slices and one 1-d index array or mask an axis"
                )
            if p.shape != shape:
                raise InvalidArgumentError(
                    f"read_batch: selection {i} has shape {p.shape}, expected {shape} (the shape of "
                    f"selection 0); every crop must have the same shape"
                )
        full_shape = (len(plans), *shape)
        return SelectionPlan(
            full_shape,
            full_shape,
            [
                ChunkProjection(
                    p.chunk_coords, p.chunk_selection, (_batch_index(i, p.out_selection), *p.out_selection), False
                )
                for i, plan in enumerate(plans)
                for p in plan.projections
            ],
        )

    def get_basic_selection(self, selection: Any = Ellipsis, *, out: Any = None) -> Any:
        """Read a basic selection (integers, slices, ``...``): ``a[selection]``, into ``out`` when given."""
        if out is not None:
            return self.read(selection, out=out)
        return self[selection]

    @property
    def blocks(self) -> _BlockIndexer:
        """Block indexing, as zarr-python's.

        ``a.blocks[i, 1:3]`` reads (and writes) whole blocks of the stored grid (shards when
        sharded) by their grid position; an integer keeps its axis.
        """
        return _BlockIndexer(self)

    def get_block_selection(self, selection: Any) -> Any:
        """Read the blocks ``selection`` names: what ``a.blocks[selection]`` reads."""
        return self._execute_read(plan_selection(self._block_slices(selection), self._dims()))

    def _block_slices(self, selection: Any) -> tuple[slice, ...]:
        """The element slices that the blocks ``selection`` names cover, clipped to the array.

        Each axis takes an integer or a slice of step 1 over its blocks; ``...`` fills axes.
        """
        dims = self._metadata.chunk_grid.dimensions(self.shape)
        entries = selection if isinstance(selection, tuple) else (selection,)
        if sum(e is Ellipsis for e in entries) > 1:
            raise BoundsCheckError(f"blocks: at most one '...' in {selection!r}")
        if Ellipsis in entries:
            at = next(i for i, e in enumerate(entries) if e is Ellipsis)
            entries = (*entries[:at], *(slice(None),) * (self.ndim - len(entries) + 1), *entries[at + 1 :])
        if len(entries) > self.ndim:
            raise BoundsCheckError(f"blocks: {len(entries)} entries in {selection!r} for {self.ndim} dimensions")
        entries = (*entries, *(slice(None),) * (self.ndim - len(entries)))
        slices = []
        for axis, (entry, dim, size) in enumerate(zip(entries, dims, self.shape, strict=True)):
            nblocks = dim.nchunks
            if isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
                block = int(entry) + nblocks if int(entry) < 0 else int(entry)
                if not 0 <= block < nblocks:
                    raise BoundsCheckError(f"blocks: index {entry} on axis {axis}, which has {nblocks} blocks")
                first, end = block, block + 1
            elif isinstance(entry, slice):
                if entry.step not in (None, 1):
                    raise BoundsCheckError(f"blocks: axis {axis}: only slices of step 1 select blocks, got {entry}")
                if any(b is not None and not isinstance(b, (int, np.integer)) for b in (entry.start, entry.stop)):
                    raise BoundsCheckError(f"blocks: axis {axis}: a slice of block numbers takes integers, got {entry}")
                if isinstance(entry.start, (int, np.integer)) and not -nblocks <= int(entry.start) < nblocks:
                    # As zarr-python: a slice starting past the blocks is a mistake, which
                    # read nothing and, written to, wrote nothing (its stop is clipped).
                    raise BoundsCheckError(f"blocks: slice {entry} on axis {axis}, which has {nblocks} blocks")
                first, end, _ = entry.indices(nblocks)
                end = max(end, first)
            else:
                raise BoundsCheckError(f"blocks: axis {axis}: expected an integer or a slice, got {entry!r}")
            start = size if first >= nblocks else int(dim.chunk_start(first))
            stop = size if end >= nblocks else min(size, int(dim.chunk_start(end)))
            slices.append(slice(start, stop))
        return tuple(slices)

    def get_orthogonal_selection(self, selection: Any) -> Any:
        """Read an orthogonal (outer) selection: what ``a.oindex[selection]`` reads."""
        return self._execute_read(plan_orthogonal(selection, self._dims()))

    def get_coordinate_selection(self, selection: Any) -> Any:
        """Read a vectorised (point) selection: what ``a.vindex[selection]`` reads."""
        return self._execute_read(plan_vectorized(selection, self._dims()))

    def get_orthogonal_selection_async(self, selection: Any, *, stream: Any = None) -> Future[Any]:
        """:meth:`get_orthogonal_selection` (``a.oindex[selection]``), started at once.

        A :class:`gpuzarr.futures.Future`, as :meth:`read_async` returns: the selection is
        checked here, and the read runs on gpuzarr's request threads (on a GPU, on this
        thread's device and stream, or ``stream``).
        """
        return self._read_plan_async(plan_orthogonal(selection, self._dims()), None, stream)

    def get_coordinate_selection_async(self, selection: Any, *, stream: Any = None) -> Future[Any]:
        """:meth:`get_coordinate_selection` (``a.vindex[selection]``), started at once.

        A :class:`gpuzarr.futures.Future`, as :meth:`get_orthogonal_selection_async` returns.
        """
        return self._read_plan_async(plan_vectorized(selection, self._dims()), None, stream)

    def get_mask_selection(self, mask: Any) -> Any:
        """Read the elements where ``mask`` is True, in C order: ``a.vindex[mask]``.

        ``mask`` holds booleans of the array's shape; anything else is a BoundsCheckError.
        """
        return self.get_coordinate_selection(_checked_mask(mask, self.shape))

    @property
    def oindex(self) -> _OrthogonalIndexer:
        """Orthogonal indexing: ``a.oindex[[1, 5], :, 3]`` reads and writes outer products."""
        return _OrthogonalIndexer(self)

    @property
    def vindex(self) -> _VectorizedIndexer:
        """Vectorised indexing: ``a.vindex[i, j, k]`` reads and writes points."""
        return _VectorizedIndexer(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        data = self._execute_read(plan_selection(Ellipsis, self._dims()))
        if not isinstance(data, np.ndarray):
            data = data.get()  # a device array: NumPy asked for host memory
        host: np.ndarray[Any, Any] = data if dtype is None else data.astype(dtype, copy=False)
        return host

    # -- writing ---------------------------------------------------------------------------------

    def _execute_write(self, make_plan: Callable[[], SelectionPlan], value: Any) -> None:
        """Plan the write and do it with one shape (see :mod:`.shape_lock`)."""
        with self._shape_lock.shared():
            plan = make_plan()
            self._write_prepared(plan, self._prepared_value(plan, value))

    def _prepared_value(self, plan: SelectionPlan, value: Any, *, detached: bool = False) -> np.ndarray[Any, Any]:
        """``value`` on the host, of the array's type and the plan's buffer shape.

        Its checks raise here, before anything is written. ``detached``: a value that is not a
        NumPy array (a PyTorch CPU tensor, an ``array.array``, a memmap, anything with
        ``__array__``) is copied, so that changing it afterwards changes nothing; Python
        scalars, lists and tuples are converted to new arrays anyway.
        """
        if self.read_only:
            raise ReadOnlyError(f"array {self.path or '/'!r} is read-only")
        host = written_value(value, self.dtype, f"array {self.path or '/'!r}")
        if detached and type(value) is not np.ndarray and not isinstance(value, _FRESH_VALUES) and not (
            is_device_array(value)  # copied to the host already
        ):
            host = _own_copy(host)
        arr = broadcast_value(host, plan.shape)
        if plan.buffer_shape != plan.shape:
            arr = arr.reshape(plan.buffer_shape)
        return arr

    def _write_prepared(self, plan: SelectionPlan, arr: np.ndarray[Any, Any]) -> None:
        try:
            write_plan(self._layout, self.store, plan, arr)
        finally:  # a failed write may have changed some chunks
            self._bump_generation()

    def __setitem__(self, selection: Any, value: Any) -> None:
        self._execute_write(lambda: plan_selection(selection, self._dims()), value)

    def write(self, selection: Any, value: Any) -> None:
        """Write ``value`` (broadcast to the selection) to a basic selection: ``a[selection] = value``."""
        self._execute_write(lambda: plan_selection(selection, self._dims()), value)

    def write_async(self, selection: Any, value: Any) -> Future[None]:
        """:meth:`write`, started and returned at once as a :class:`gpuzarr.futures.Future` of None.

        ``.result()`` or ``await`` waits for it and raises its error.

        The selection and ``value`` are checked and ``value`` is brought to the host here (a
        device array is copied on the calling thread's stream, as :meth:`write` does; any other
        value that is not a NumPy array is copied where it would be shared). A NumPy ``value``
        is read while the write runs: keep it unchanged until the future is done. Writes run at
        once, unordered among themselves and against ``resize`` and ``append``: two that touch
        the same elements leave either's values there. A write that runs after a shape change
        of this handle writes the elements its selection named at the call, reading each chunk
        first, so nothing the change wrote is erased; after a shrink, its elements past the new
        end are written again. Wait for one before starting the other.
        """
        dims = self._dims()  # the plan's shape, taken once: an append meanwhile changes self.shape
        plan = plan_selection(selection, dims)
        arr = self._prepared_value(plan, value, detached=True)
        return submit(self._write_planned_at_call, tuple(d.size for d in dims), plan, arr)

    def _write_planned_at_call(self, shape: tuple[int, ...], plan: SelectionPlan, arr: np.ndarray[Any, Any]) -> None:
        """A :meth:`write_async`'s write, planned when it was called (under ``shape``).

        Where the shape changed meanwhile, every chunk it touches is read first: a chunk whole
        under the old shape (an edge chunk) may hold what the change wrote since. The elements
        written are the ones the selection named at the call.
        """
        with self._shape_lock.shared():
            if self.shape != shape:
                plan = _read_before_writing(plan)
            self._write_prepared(plan, arr)

    def set_basic_selection(self, selection: Any, value: Any) -> None:
        """Write ``value`` to a basic selection: ``a[selection] = value``."""
        self._execute_write(lambda: plan_selection(selection, self._dims()), value)

    def set_block_selection(self, selection: Any, value: Any) -> None:
        """Write ``value`` to the blocks ``selection`` names: ``a.blocks[selection] = value``."""
        self._execute_write(lambda: plan_selection(self._block_slices(selection), self._dims()), value)

    def set_orthogonal_selection(self, selection: Any, value: Any) -> None:
        """Write ``value`` to an orthogonal selection: ``a.oindex[selection] = value``."""
        self._execute_write(lambda: plan_orthogonal(selection, self._dims()), value)

    def set_coordinate_selection(self, selection: Any, value: Any) -> None:
        """Write ``value`` to a vectorised selection: ``a.vindex[selection] = value``."""
        self._execute_write(lambda: plan_vectorized(selection, self._dims()), value)

    def set_mask_selection(self, mask: Any, value: Any) -> None:
        """Write ``value`` where ``mask`` is True: ``a.vindex[mask] = value``.

        ``mask`` holds booleans of the array's shape; anything else is a BoundsCheckError.
        """
        self.set_coordinate_selection(_checked_mask(mask, self.shape), value)

    # -- metadata changes ------------------------------------------------------------------------

    def _write_metadata(self, metadata: ArrayMetadata | ArrayMetadataV2) -> None:
        if not self._metadata_writable:
            raise MetadataError(
                "assume_metadata: the array was opened without its stored metadata; resizing or "
                "changing attributes is not supported"
            )
        if self.read_only:
            raise ReadOnlyError(f"array {self.path or '/'!r} is read-only")
        with recorded_if_interrupted(self.store, self.path):
            write_documents(self.store, self.path, metadata.documents())
            self._set_metadata(metadata)
            record_metadata_write(self.store, self.path)

    def _put_attributes(self, attrs: dict[str, Any]) -> None:
        with self._metadata_lock:
            check_attributes(attrs, self._metadata.attributes)
            self._write_metadata(self._metadata.evolve(attributes=attrs))

    def resize(self, *shape: Any) -> None:
        """Change the shape.

        Growing reads the new region as fill; shrinking erases the data outside the new shape
        (so it never reappears when the array grows again).
        """
        # Alone: no write of this handle is planned with the old shape while it changes; then
        # the metadata lock, as an attribute change meanwhile wrote the old shape back.
        with self._shape_lock.alone(), self._metadata_lock:
            self._resize(shape)

    def _resize(self, shape: tuple[Any, ...]) -> None:
        if not self._metadata_writable:  # before anything is erased
            raise MetadataError(
                "assume_metadata: the array was opened without its stored metadata; resizing is not supported"
            )
        one: Any = shape[0] if len(shape) == 1 else None
        # A sequence of the sizes: a tuple, a list, a NumPy array (``resize(np.array(a.shape) * 2)``,
        # not a 0-d one, which is a size), a range.
        is_sequence = isinstance(one, (tuple, list, range)) or (isinstance(one, np.ndarray) and one.ndim > 0)
        given = tuple(one) if is_sequence else shape
        # A 0-d integer array is the integer it holds, as NumPy takes it.
        given = tuple(s[()] if isinstance(s, np.ndarray) and s.ndim == 0 and s.dtype.kind in "iu" else s for s in given)
        for s in given:
            # int() would cut 5.7 down to 5 and erase what lies beyond (zarr-python refuses it).
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
                raise InvalidArgumentError(f"resize: shape entries must be integers, got {s!r}")
        new_shape = tuple(int(s) for s in given)
        if len(new_shape) != self.ndim:
            raise InvalidArgumentError(f"resize: expected {self.ndim} dimensions, got {len(new_shape)}")
        if any(s < 0 for s in new_shape):
            raise InvalidArgumentError(f"resize: shape entries must be >= 0, got {new_shape}")
        if self.read_only:
            raise ReadOnlyError(f"array {self.path or '/'!r} is read-only")
        old_shape = self.shape
        grid = self._metadata.chunk_grid
        if isinstance(grid, RectilinearChunkGrid):  # an axis grown past its listed sizes gets a chunk more
            inner = self._layout.sharding.chunk_shape if self._layout.sharding is not None else None
            new_metadata = self._metadata.evolve(shape=new_shape, chunk_grid=grid.grown_to(new_shape, inner))
        else:
            new_metadata = self._metadata.evolve(shape=new_shape)
        # The new documents are made before anything is erased: metadata that cannot be written
        # stops the resize with the data intact, instead of after the chunks outside the new
        # shape are gone.
        new_metadata.documents()
        for axis, (new, old, dim) in enumerate(
            zip(new_shape, old_shape, self._metadata.chunk_grid.dimensions(old_shape), strict=True)
        ):
            if new < old:
                edge = int(dim.chunk_of(new))
                edge_start = int(dim.chunk_start(edge))
                if edge_start != new:
                    # Clear the tail of the stored chunk that straddles the new edge, through a
                    # handle that erases chunks left all fill and stores none that were absent
                    # (with ``write_empty_chunks``, this one would store every absent chunk
                    # along the edge, full of fill).
                    edge_stop = min(old, edge_start + dim.chunk_extent(edge))
                    sel = tuple(slice(new, edge_stop) if a == axis else slice(None) for a in range(self.ndim))
                    Array(self.store, self.path, self._metadata, "cpu")[sel] = self._metadata.fill_value
        old_grid = self._metadata.chunk_grid.grid_shape(old_shape)
        new_grid = new_metadata.chunk_grid.grid_shape(new_shape)
        if any(n < o for n, o in zip(new_grid, old_grid, strict=True)):
            for coords in self._stored_outside(new_grid):
                self.store.erase(self._layout.key(coords))
        self._write_metadata(new_metadata)

    def _stored_outside(self, grid: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The grid positions of this array's chunks (shards) outside ``grid`` that may be stored.

        From a listing where the store lists (what is stored, however large the grid: an array
        of 10**7 chunks with a few stored shrinks at once), else every position of the current
        grid outside it.
        """
        old = self._metadata.chunk_grid.grid_shape(self.shape)
        if math.prod(old) == 0:
            # No position on the grid (an axis of length 0): nothing stored to erase. The slabs
            # below walked the other axes' ranges first (10**8 of them: a MemoryError).
            return []
        outside = math.prod(old) - math.prod(min(n, o) for n, o in zip(grid, old, strict=True))
        # A local or in-memory store lists exactly what is there, a key several times faster
        # than a missing key is erased: where even a full grid's listing costs less than the
        # walk, it is listed (cutting 65,536 positions of a grid of ten stored chunks walked
        # them all: 1-2 s).
        exact = type(self.store) in (LocalStore, MemoryStore)
        listing_pays = exact and math.prod(old) < outside * ERASE_TO_LIST_COST
        if self.store.supports_listing and (outside > WALKED_RESIZE_POSITIONS or listing_pays):
            from .info import stored_chunk_coords

            stored = stored_chunk_coords(self, complete=True)
            return [c for c in stored if any(i >= n for i, n in zip(c, grid, strict=True))]
        # A few positions: each one is erased, whatever a listing (which may lag behind writes,
        # or be cached) would say. Only those cut off are walked, one slab an axis (each
        # position once: the axes before the slab's stay inside), not the whole old grid.
        kept = [min(n, o) for n, o in zip(grid, old, strict=True)]
        slabs = (
            itertools.product(*map(range, kept[:k]), range(kept[k], old[k]), *map(range, old[k + 1 :]))
            for k in range(len(old))
        )
        return list(itertools.chain.from_iterable(slabs))

    def append(self, data: Any, axis: int = 0) -> tuple[int, ...]:
        """Grow the array along ``axis`` and write ``data`` into the new part, as zarr-python's ``append``.

        ``data`` (NumPy, CuPy, PyTorch, a gpuzarr Array or a nested list) must have the array's
        extent on every other axis; the array grows by its extent along ``axis``.

        Returns
        -------
        tuple of int
            The new shape.
        """
        from .from_data import as_data  # it imports this module

        values = as_data(data)
        if values is self:
            # Read before the array grows: read during the write, it would have its new shape.
            values = self[...]
        shape = tuple(int(n) for n in values.shape)
        ndim = self.ndim
        if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
            raise InvalidArgumentError(f"append: axis {axis!r} is out of range for an array of {ndim} dimensions")
        axis = int(axis) % ndim
        # The shape read, grown and written into alone and under the metadata lock: appends from
        # several threads through this handle each get rows of their own, and no write of this
        # handle planned with the old shape erases them.
        with self._shape_lock.alone(), self._metadata_lock:
            old = self.shape
            if len(shape) != ndim or any(n != m for i, (n, m) in enumerate(zip(shape, old, strict=True)) if i != axis):
                raise InvalidArgumentError(
                    f"append: data of shape {shape} does not fit an array of shape {old} along axis {axis} "
                    "(every other axis must match)"
                )
            new = tuple(n + shape[axis] if i == axis else n for i, n in enumerate(old))
            self.resize(new)
            try:
                self[tuple(slice(old[axis], None) if i == axis else slice(None) for i in range(ndim))] = values
            except BaseException:
                # A value that cannot be written (one NumPy cannot cast) leaves the array as it was,
                # not longer by rows of fill value.
                with contextlib.suppress(Exception):
                    self.resize(old)
                raise
            return new

    def spec(self) -> TensorStoreSpecJSON:
        """A TensorStore-style JSON spec (driver, kvstore, metadata) that reopens this array.

        :func:`gpuzarr.open` opens it, and, for a local store, ``tensorstore.open`` too.
        """
        from ..tensorstore.spec import array_spec_json

        options = {
            "fill_missing_data_reads": self.fill_missing_data_reads,
            "store_data_equal_to_fill_value": self.store_data_equal_to_fill_value,
        }
        return array_spec_json(self.store.kvstore_json(), self.path, self._metadata.to_json(), options)

    @property
    def info(self) -> ArrayInfo:
        """A summary that prints as zarr-python's ``Array.info``.

        Type, Zarr format, data type, fill value, shape, shard and chunk shapes, order,
        read-only, store type, filters, serializer, compressors and the decoded size; the
        fields are attributes of the returned :class:`~gpuzarr.core.info.ArrayInfo`.
        Nothing is read from the store: :meth:`info_complete` adds the stored sizes.
        """
        return array_info(self)

    def info_complete(self) -> ArrayInfo:
        """:attr:`info` plus what a listing of the store tells.

        Bytes stored (chunks and metadata documents), the storage ratio, and how many of the
        grid's chunks (and shards, when sharded) are stored.
        """
        return array_info(self, complete=True)

    @property
    def nchunks(self) -> int:
        """The number of chunks in the grid: inner chunks when sharded, as zarr-python counts."""
        return count_chunks(self)

    @property
    def nchunks_initialized(self) -> int:
        """The number of chunks stored; every inner chunk of a stored shard counts.

        Lists the keys under the array's path, as zarr-python does.
        """
        return count_initialized(self)[1]

    def nbytes_stored(self) -> int:
        """The bytes stored under the array's path: chunks and metadata documents."""
        return nbytes_stored(self)


def _checked_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """``mask`` as a NumPy array of booleans, where it is one of the array's ``shape``.

    What a mask selection takes; the vectorised planner also takes integer arrays.
    """
    if isinstance(mask, tuple) and len(mask) == 1:  # ``(mask,)``, as zarr-python takes it too
        mask = mask[0]
    mask = mask.get() if hasattr(mask, "__cuda_array_interface__") and hasattr(mask, "get") else mask
    found = np.asarray(mask)
    if found.dtype != bool or found.shape != shape:
        raise BoundsCheckError(
            f"mask selection: expected booleans of the array's shape {shape}, got {found.dtype} of shape {found.shape}"
        )
    return found


class _OrthogonalIndexer:
    def __init__(self, array: Array) -> None:
        self.array = array

    def __getitem__(self, selection: Any) -> Any:
        return self.array.get_orthogonal_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self.array.set_orthogonal_selection(selection, value)


def _batch_index(i: int, out_selection: tuple[Any, ...]) -> int | slice:
    """Selection ``i``'s place on a batch's first axis.

    An integer there beside an index array with a slice between them would be two advanced
    indices to NumPy, which moves their axis first (and transposed the crop): a slice of one
    then, a length-1 axis the copy broadcasts over.
    """
    return slice(i, i + 1) if any(isinstance(s, np.ndarray) for s in out_selection) else i


class _BlockIndexer:
    def __init__(self, array: Array) -> None:
        self.array = array

    def __getitem__(self, selection: Any) -> Any:
        return self.array.get_block_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self.array.set_block_selection(selection, value)


class _VectorizedIndexer:
    def __init__(self, array: Array) -> None:
        self.array = array

    def __getitem__(self, selection: Any) -> Any:
        return self.array.get_coordinate_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self.array.set_coordinate_selection(selection, value)
