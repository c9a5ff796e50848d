"""The GPU read plan: what to read, how to decode it and where it lands, decided on the host.

Two pure steps, both testable without a GPU:

1. :func:`build_gpu_read_plan` (layout + ReadPlan, no I/O): one :class:`ChunkTask` per stored
   chunk or inner chunk the selection touches (inner chunks of many shards mixed), each with its
   store key (the shard's key for an inner chunk, plus its position in the shard), its
   :class:`DecodeRoute` (which nvCOMP route decodes it, or a CPU fallback with the reason), and
   its rows of the assemble launch (source offsets and steps, destination offsets, extents,
   transpose expressed as source strides). Tasks are cut into batches that fit a device-memory
   budget.
2. :func:`bind_batch` (a batch + the encoded bytes read for it): checks and strips crc32c,
   splits every chunk into raw streams (``streams``), lays the streams out in one host staging
   buffer at 8-byte aligned offsets, lays the decoded chunks (and Blosc's shuffled scratch) out
   in one device work buffer at 8-byte aligned offsets, groups the streams per nvCOMP algorithm,
   lists the Blosc blocks to un-shuffle, decodes CPU-fallback chunks, and fills the
   ``assemble_chunks`` arguments in exactly the layout of kernels/assemble.cu. Every launch is
   validated with the ``check_*`` functions of :mod:`.kernels` before a device sees it.

Alignment: nvCOMP documents 1-byte input/output and 8-byte scratch alignment for its batched
zstd and LZ4 decompressors (``nvcomp<Alg>DecompressRequiredAlignments``) and asks for at most
8 bytes for any of its algorithms; every stream and every decoded chunk starts at a multiple of
:data:`ALIGNMENT` (8), which also meets assemble.cu's ``min(itemsize, 8)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ...codecs.base import as_uint8
from ...codecs.blosc import BloscCodec
from ...codecs.bytes import BytesCodec, has_byte_order
from ...codecs.crc32c import Crc32cCodec, crc32c
from ...codecs.gzip import GzipCodec
from ...codecs.numcodecs_codec import NumcodecsCodec
from ...codecs.pipeline import CodecPipeline
from ...codecs.transpose import TransposeCodec
from ...codecs.zstd import ZstdCodec
from ...engine.layout import StorageLayout
from ...engine.parallel import batches_by_bytes, run_tasks
from ...errors import ChunkNotFoundError, CorruptChunkError
from ...plan.selection import ReadPlan
from ...store.base import Buffer
from . import kernels
from .streams import Algorithm, Checksum, SplitChunk, UnsupportedStreamError, split_chunk

ALIGNMENT = 8
MAX_NDIM = kernels.MAX_NDIM
#: Default device-memory budget of one batch (encoded + decoded bytes).
BATCH_BYTES = 256 * 1024 * 1024
ITEMSIZES = (1, 2, 4, 8, 16)

RouteName = Literal["raw", "zstd", "gzip", "zlib", "lz4", "blosc", "cpu"]
Int64Array = npt.NDArray[np.int64]


class GpuPlanError(ValueError):
    """The selection or the array cannot be read by the GPU path at all (say why)."""


def align(n: int, alignment: int = ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


# --- routes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeRoute:
    """How the chunks of one pipeline are decoded.

    ``name`` is the stream splitter (``streams.split_chunk``) or "cpu" (decode with the CPU
    pipeline and copy, ``reason`` says why); ``crc32c`` means a trailing crc32c is verified and
    stripped on the host first; ``source_strides`` are the element strides of a decoded chunk
    along each (decoded) chunk axis, which is where the transpose codecs go.
    """

    name: RouteName
    crc32c: bool = False
    reason: str | None = None
    source_strides: tuple[int, ...] = ()
    #: Blosc routes: whether the chunks need an un-shuffle scratch buffer.
    shuffled: bool = False


def _c_strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * int(shape[d + 1])
    return strides


def _cpu(reason: str, shape: tuple[int, ...]) -> DecodeRoute:
    return DecodeRoute("cpu", reason=reason, source_strides=tuple(_c_strides(shape)))


def decode_route(pipeline: CodecPipeline) -> DecodeRoute:
    """The GPU route of a chunk pipeline, or a CPU fallback naming what the GPU cannot do."""
    shape = pipeline.spec.shape
    a2b, a2b_spec = pipeline.array_to_bytes
    if not isinstance(a2b, BytesCodec):
        return _cpu(f"array->bytes codec {a2b.name!r} (e.g. transpose before sharding) has no GPU path", shape)
    strides = _c_strides(a2b_spec.shape)
    for codec, _ in reversed(pipeline.array_to_array):
        if not isinstance(codec, TransposeCodec):
            return _cpu(f"array->array codec {codec.name!r} has no GPU path", shape)
        inverse = codec.inverse
        strides = [strides[inverse[d]] for d in range(len(inverse))]
    b2b = list(pipeline.bytes_to_bytes)
    has_crc = bool(b2b) and isinstance(b2b[-1], Crc32cCodec)
    if has_crc:
        b2b.pop()
    names = [c.name if not isinstance(c, NumcodecsCodec) else f"numcodecs.{c.codec_id}" for c in b2b]
    if any(isinstance(c, Crc32cCodec) for c in b2b):
        return _cpu(f"crc32c inside the chain {names} (only a final crc32c is checked on the host)", shape)
    if len(b2b) > 1:
        return _cpu(f"more than one bytes->bytes codec {names} (filters run on the CPU)", shape)
    route: RouteName = "raw"
    shuffled = False
    if b2b:
        compressor = b2b[0]
        if isinstance(compressor, ZstdCodec):
            route = "zstd"
        elif isinstance(compressor, GzipCodec):
            route = "gzip"
        elif isinstance(compressor, BloscCodec):
            if compressor.cname not in ("lz4", "lz4hc", "zstd", "zlib"):
                return _cpu(f"blosc compressor {compressor.cname!r} has no nvCOMP decoder", shape)
            route = "blosc"
            shuffled = compressor.shuffle != "noshuffle"
        elif isinstance(compressor, NumcodecsCodec) and compressor.codec_id in ("zlib", "lz4"):
            route = "zlib" if compressor.codec_id == "zlib" else "lz4"
        else:
            return _cpu(f"codec {names[0]!r} has no GPU decoder", shape)
    return DecodeRoute(route, has_crc, None, tuple(strides), shuffled)


def swap_width(pipeline: CodecPipeline, dtype: np.dtype[Any]) -> int:
    """assemble.cu's ``swap_width`` for the chain's ``bytes`` codec (0: no swap)."""
    bc = pipeline.bytes_codec
    # Raw bytes and structured types have no byte order of their own to swap.
    if bc is None or bc.is_native or not has_byte_order(dtype):
        return 0
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


# --- the static plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkTask:
    """One stored chunk, or inner chunk ``inner`` of the shard stored at ``key``."""

    coords: tuple[int, ...]
    key: str
    inner: int | None
    shape: tuple[int, ...]
    decoded_nbytes: int
    route: DecodeRoute
    #: rows of the plan's assemble tables that read this chunk
    rows: tuple[int, ...]

    @property
    def where(self) -> str:
        """What an error message names beside the key."""
        return "" if self.inner is None else f"inner chunk {self.inner}: "


@dataclass(frozen=True)
class GpuReadPlan:
    """Everything about a read that is known before any byte is read."""

    buffer_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    #: assemble.cu ``out_strides``: output element strides along each chunk axis (0 where an
    #: integer index drops the axis), padded to 8
    out_strides: Int64Array
    ndim: int
    fill_value: bytes
    swap_width: int
    fill_missing: bool
    tasks: tuple[ChunkTask, ...]
    #: per assemble row (n, 8) tables, padded as check_assemble pads them
    src_offsets: Int64Array
    src_steps: Int64Array
    dst_offsets: Int64Array
    extents: Int64Array
    batches: tuple[tuple[int, ...], ...]
    sharded: bool = False

    @property
    def out_nbytes(self) -> int:
        return math.prod(self.buffer_shape) * self.dtype.itemsize


def _row(
    chunk_selection: tuple[Any, ...], out_selection: tuple[Any, ...], chunk_shape: tuple[int, ...]
) -> tuple[list[int], list[int], list[int], list[int]]:
    offsets, steps, dst, extents = [], [], [], []
    kept = iter(out_selection)
    for axis, (sel, n) in enumerate(zip(chunk_selection, chunk_shape, strict=True)):
        if isinstance(sel, (int, np.integer)) and not isinstance(sel, bool):
            offsets.append(int(sel))
            steps.append(1)
            dst.append(0)
            extents.append(1)
            continue
        if not isinstance(sel, slice):
            raise GpuPlanError(f"axis {axis}: index arrays are not supported by the GPU assemble kernel")
        start, stop, step = sel.indices(n)
        if step < 1:
            raise GpuPlanError(f"axis {axis}: negative steps are not supported by the GPU assemble kernel")
        count = len(range(start, stop, step))
        out = next(kept)
        if not isinstance(out, slice) or out.step not in (None, 1):
            raise GpuPlanError(f"axis {axis}: the output selection {out!r} is not a unit-step slice")
        if out.stop - out.start != count:
            raise GpuPlanError(f"axis {axis}: chunk selection of {count} elements maps to {out!r}")
        offsets.append(start)
        steps.append(step)
        dst.append(int(out.start))
        extents.append(count)
    return offsets, steps, dst, extents


def _padded(rows: list[list[int]], ndim: int, pad: int) -> Int64Array:
    table = np.full((len(rows), MAX_NDIM), pad, dtype=np.int64)
    if rows and ndim:
        table[:, :ndim] = np.asarray(rows, dtype=np.int64).reshape(len(rows), ndim)
    return table


def build_gpu_read_plan(layout: StorageLayout, plan: ReadPlan, budget: int = BATCH_BYTES) -> GpuReadPlan:
    """Plan a read of ``plan`` (a basic selection) for the GPU path.

    Raises :class:`GpuPlanError` where the assemble kernel cannot express the read (index arrays,
    point selections, negative steps, item sizes other than 1/2/4/8/16, more than 8 dimensions).
    """
    dtype = np.dtype(layout.metadata.dtype)
    if dtype.itemsize not in ITEMSIZES or dtype.hasobject:
        raise GpuPlanError(f"data type {dtype} ({dtype.itemsize}-byte items) is not supported by the GPU path")
    ndim = len(layout.chunk_shape)
    if ndim > MAX_NDIM:
        raise GpuPlanError(f"{ndim}-d arrays exceed the assemble kernel's {MAX_NDIM} dimensions")
    if plan.buffer_shape != plan.shape:
        raise GpuPlanError("point (vectorised) selections are not supported by the GPU assemble kernel")
    # Group projections by chunk (a chunk shared by several selections is decoded once).
    by_chunk: dict[tuple[int, ...], list[int]] = {}
    rows_src: list[list[int]] = []
    rows_step: list[list[int]] = []
    rows_dst: list[list[int]] = []
    rows_ext: list[list[int]] = []
    first_kept: list[bool] | None = None
    # A batched read (Array.read_batch) prefixes each out_selection with the selection's index
    # along a leading output axis. The kernel knows only chunk axes, so that index becomes an
    # element offset on the last kept axis, whose output stride is 1.
    lead = 0
    for p in plan.projections:
        kept = [isinstance(s, slice) for s in p.chunk_selection]
        if first_kept is None:
            first_kept = kept
            lead = len(p.out_selection) - sum(kept)
            if lead == 1 and not isinstance(p.out_selection[0], (int, np.integer)):
                raise GpuPlanError("point (vectorised) selections are not supported by the GPU assemble kernel")
            if lead not in (0, 1) or len(plan.buffer_shape) != sum(kept) + lead:
                raise GpuPlanError("the output selection does not match the chunk selection")
            if lead and not any(kept):
                raise GpuPlanError("a batch of single-element selections has no axis to carry the batch index")
        elif kept != first_kept:
            raise GpuPlanError("projections drop different axes")
        out_selection = p.out_selection[lead:]
        o, s, d, e = _row(p.chunk_selection, out_selection, layout.chunk_shape_at(p.chunk_coords))
        if lead:
            index = p.out_selection[0]
            if not isinstance(index, (int, np.integer)) or not 0 <= int(index) < plan.buffer_shape[0]:
                raise GpuPlanError(f"batch index {index!r} is not an integer within the batch")
            last_kept = len(kept) - 1 - kept[::-1].index(True)
            d[last_kept] += int(index) * math.prod(plan.buffer_shape[1:])
        by_chunk.setdefault(p.chunk_coords, []).append(len(rows_src))
        rows_src.append(o)
        rows_step.append(s)
        rows_dst.append(d)
        rows_ext.append(e)
    buffer_strides = iter(_c_strides(plan.buffer_shape[lead:]))
    out_strides = np.zeros(MAX_NDIM, dtype=np.int64)
    for axis, is_kept in enumerate(first_kept or [True] * ndim):
        out_strides[axis] = next(buffer_strides, 0) if is_kept else 0
    routes: dict[tuple[int, ...], DecodeRoute] = {}
    tasks: list[ChunkTask] = []
    for coords, rows in by_chunk.items():
        pipeline = layout.pipeline_at(coords)
        shape = pipeline.spec.shape
        route = routes.get(shape)
        if route is None:
            route = routes[shape] = decode_route(pipeline)
        if layout.sharding is not None:
            shard, inner = layout.shard_of(coords)
            key, position = layout.key(shard), inner
        else:
            key, position = layout.key(coords), None
        tasks.append(ChunkTask(coords, key, position, shape, pipeline.spec.nbytes, route, tuple(rows)))
    # Inner chunks of one shard next to each other (one index read per shard and batch).
    tasks.sort(key=lambda t: (t.key, -1 if t.inner is None else t.inner))
    sizes = [align(t.decoded_nbytes) * (3 if t.route.shuffled else 2) for t in tasks]
    batches = tuple(tuple(r) for r in batches_by_bytes(sizes, budget))
    spec = layout.chunk_pipeline.spec
    fill = np.full((), spec.fill_value, dtype=dtype).tobytes()
    return GpuReadPlan(
        buffer_shape=plan.buffer_shape,
        dtype=dtype,
        out_strides=out_strides,
        ndim=ndim,
        fill_value=fill,
        swap_width=swap_width(layout.chunk_pipeline, dtype),
        fill_missing=layout.fill_missing_data_reads,
        tasks=tuple(tasks),
        src_offsets=_padded(rows_src, ndim, 0),
        src_steps=_padded(rows_step, ndim, 1),
        dst_offsets=_padded(rows_dst, ndim, 0),
        extents=_padded(rows_ext, ndim, 1),
        batches=batches,
        sharded=layout.sharding is not None,
    )


# --- binding a batch to its bytes ---------------------------------------------------------------


@dataclass
class StreamGroup:
    """Streams of one algorithm: ``src`` spans of the staging buffer decode into ``dst`` spans of
    the work buffer; ``owners`` are task indices (for error messages)."""

    algorithm: Algorithm
    src_offsets: list[int] = field(default_factory=list)
    src_nbytes: list[int] = field(default_factory=list)
    dst_offsets: list[int] = field(default_factory=list)
    dst_nbytes: list[int] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.owners)


@dataclass
class UnshuffleLaunch:
    """One ``byte_unshuffle`` / ``bit_unshuffle`` launch (kernels/shuffle.cu) over work-buffer spans."""

    kernel: Literal["byte_unshuffle", "bit_unshuffle"]
    partial_rule: int
    src_offsets: list[int] = field(default_factory=list)
    dst_offsets: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    typesizes: list[int] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class AssembleLaunch:
    """The arguments of ``assemble_chunks`` (kernels/assemble.cu), in its order.

    ``source_offsets`` are byte offsets into the work buffer (-1: missing chunk, a null pointer,
    written with ``fill_value``); a device turns them into pointers. Tables are (nchunks, 8).
    """

    out_strides: Int64Array
    source_offsets: Int64Array
    source_nbytes: Int64Array
    src_strides: Int64Array
    src_offsets: Int64Array
    src_steps: Int64Array
    dst_offsets: Int64Array
    extents: Int64Array
    fill_value: npt.NDArray[np.uint8]
    nchunks: int
    ndim: int
    itemsize: int
    swap_width: int


@dataclass(frozen=True)
class ChecksumCheck:
    task: int
    checksum: Checksum
    offset: int
    nbytes: int


@dataclass(frozen=True)
class FileSpan:
    """Encoded bytes that stay in a local file, for the device to read straight into its buffer
    (kvikio): ``nbytes`` bytes at ``offset`` of ``path``."""

    path: str
    offset: int
    nbytes: int
    #: (inode, modification time in ns) when the span was located: tells a replaced file apart
    version: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class FileRead:
    """One device read: ``span`` into ``target`` ("staging" or "work") at byte ``offset``."""

    task: int
    span: FileSpan
    target: Literal["staging", "work"]
    offset: int


#: routes whose stored bytes are their own nvCOMP stream (or the decoded chunk), so the device
#: can read them from the file without the host looking at them
DIRECT_ROUTES = ("raw", "zstd")


def reads_directly(route: DecodeRoute) -> bool:
    """Whether chunks of ``route`` may go from a file straight to the device."""
    return route.name in DIRECT_ROUTES and not route.crc32c


@dataclass(frozen=True)
class HostDecoded:
    """A chunk decoded on the CPU (``reason`` says why), bound for ``offset`` of the work buffer
    through the staging buffer and the batch's "copy" streams."""

    task: int
    offset: int
    data: npt.NDArray[np.uint8]
    reason: str


@dataclass
class BoundBatch:
    """One batch with its bytes: a host staging buffer and the launches that decode it."""

    tasks: tuple[int, ...]
    staging: npt.NDArray[np.uint8]
    work_nbytes: int
    groups: dict[str, StreamGroup]
    unshuffles: list[UnshuffleLaunch]
    checksums: list[ChecksumCheck]
    host_decoded: list[HostDecoded]
    assemble: AssembleLaunch
    #: device reads from files; their staging spans follow the host-filled prefix of the
    #: staging buffer (``staging``), so the two never overlap
    file_reads: list[FileRead] = field(default_factory=list)
    staging_nbytes: int = 0
    #: task -> (its encoded bytes or file span, its decoded chunk's work offset): what a CPU
    #: decode needs when the device fails a stream
    encoded: dict[int, tuple[npt.NDArray[np.uint8] | FileSpan, int]] = field(default_factory=dict)


def _swap_bytes(data: npt.NDArray[np.uint8], itemsize: int, width: int) -> npt.NDArray[np.uint8]:
    groups = data.reshape(-1, itemsize // width, width)
    return np.ascontiguousarray(groups[..., ::-1]).reshape(-1)


def _host_decode(
    layout: StorageLayout, plan: GpuReadPlan, task: ChunkTask, raw: Buffer
) -> npt.NDArray[np.uint8]:
    """The CPU pipeline's decoding of a chunk, as C-ordered bytes in the byte order the assemble
    launch expects (the stored order when the launch byte-swaps)."""
    pipeline = layout.pipeline_at(task.coords)
    chunk = pipeline.decode(raw, task.key)
    native = np.ascontiguousarray(chunk).astype(plan.dtype, copy=False)
    data = np.ascontiguousarray(native).reshape(-1).view(np.uint8)
    if plan.swap_width:
        data = _swap_bytes(data, plan.dtype.itemsize, plan.swap_width)
    return data


def decode_on_host(
    layout: StorageLayout, plan: GpuReadPlan, t: int, offset: int, data: npt.NDArray[np.uint8], reason: str
) -> HostDecoded:
    task = plan.tasks[t]
    try:
        decoded = _host_decode(layout, plan, task, data)
    except CorruptChunkError as exc:
        raise CorruptChunkError(task.key, f"{task.where}{exc.reason}") from exc
    if decoded.size != task.decoded_nbytes:
        raise CorruptChunkError(
            task.key, f"{task.where}decoded to {decoded.size} bytes, expected {task.decoded_nbytes}"
        )
    return HostDecoded(t, offset, decoded, reason)


def bind_batch(
    layout: StorageLayout,
    plan: GpuReadPlan,
    batch: int,
    encoded: Sequence[Buffer | FileSpan | None],
    host_empty: Callable[[int], npt.NDArray[np.uint8]] | None = None,
) -> BoundBatch:
    """Bind batch ``batch`` of ``plan`` to the encoded bytes read for its tasks (None: missing;
    a :class:`FileSpan`: bytes the device reads from a file itself, see :func:`reads_directly`).

    Raises CorruptChunkError naming the key for malformed chunks, ChunkNotFoundError for missing
    chunks when the array does not fill them, and ValueError if a launch would leave a buffer.
    """
    task_ids = plan.batches[batch]
    if len(encoded) != len(task_ids):
        raise ValueError(f"batch {batch}: {len(task_ids)} tasks, {len(encoded)} encoded chunks")
    staging_parts: list[tuple[int, npt.NDArray[np.uint8]]] = []
    staging_nbytes = 0
    work_nbytes = 0
    groups: dict[str, StreamGroup] = {}
    unshuffles: dict[tuple[str, int], UnshuffleLaunch] = {}
    checksums: list[ChecksumCheck] = []
    source_of: dict[int, tuple[int, int]] = {}  # task -> (work offset, nbytes)
    encoded_of: dict[int, npt.NDArray[np.uint8] | FileSpan] = {}

    direct: list[tuple[int, FileSpan]] = []
    on_host: list[tuple[int, int, npt.NDArray[np.uint8], str]] = []
    for t, raw in zip(task_ids, encoded, strict=True):
        task = plan.tasks[t]
        if raw is None:
            if not plan.fill_missing:
                raise ChunkNotFoundError(task.key)
            continue
        if isinstance(raw, FileSpan):
            if not reads_directly(task.route):
                raise ValueError(f"{task.key}: route {task.route.name!r} cannot be read straight from a file")
            direct.append((t, raw))
            continue
        data = original = as_uint8(raw)
        encoded_of[t] = original
        if task.route.crc32c:
            if data.size < 4:
                raise CorruptChunkError(task.key, f"{task.where}crc32c: {data.size} bytes cannot hold a checksum")
            stored = int.from_bytes(data[-4:].tobytes(), "little")
            actual = crc32c(data[:-4])
            if stored != actual:
                raise CorruptChunkError(
                    task.key, f"{task.where}crc32c checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
                )
            data = data[:-4]
        offset = work_nbytes
        work_nbytes = align(offset + task.decoded_nbytes)
        source_of[t] = (offset, task.decoded_nbytes)
        split: SplitChunk | None = None
        reason = task.route.reason
        if task.route.name != "cpu":
            try:
                split = split_chunk(task.route.name, data, task.decoded_nbytes)
            except UnsupportedStreamError as exc:
                reason = str(exc)
            except ValueError as exc:
                raise CorruptChunkError(task.key, f"{task.where}{exc}") from exc
        if split is None:
            on_host.append((t, offset, original, reason or "cpu route"))
            continue
        target = offset
        if split.shuffle != "none":
            target = work_nbytes
            work_nbytes = align(target + split.decoded_nbytes)
            kernel: Literal["byte_unshuffle", "bit_unshuffle"] = (
                "byte_unshuffle" if split.shuffle == "byte" else "bit_unshuffle"
            )
            rule = split.partial_rule if kernel == "bit_unshuffle" else 0
            launch = unshuffles.setdefault((kernel, rule), UnshuffleLaunch(kernel, rule))
            for block in split.blocks:
                launch.src_offsets.append(target + block.offset)
                launch.dst_offsets.append(offset + block.offset)
                launch.nbytes.append(block.nbytes)
                launch.typesizes.append(split.typesize)
                launch.owners.append(t)
        for stream in split.streams:
            start = align(staging_nbytes)
            staging_parts.append((start, data[stream.offset : stream.offset + stream.nbytes]))
            staging_nbytes = start + stream.nbytes
            group = groups.setdefault(stream.algorithm, StreamGroup(stream.algorithm))
            group.src_offsets.append(start)
            group.src_nbytes.append(stream.nbytes)
            group.dst_offsets.append(target + stream.decoded_offset)
            group.dst_nbytes.append(stream.decoded_nbytes)
            group.owners.append(t)
        if split.checksum is not None:
            checksums.append(ChecksumCheck(t, split.checksum, offset, split.decoded_nbytes))

    # Chunks the GPU cannot decode are decoded here, in parallel, and travel in the staging
    # buffer with everything else: one host-to-device copy per batch.
    host_decoded = run_tasks(lambda item: decode_on_host(layout, plan, *item), on_host)
    for decoded in host_decoded:
        start = align(staging_nbytes)
        staging_parts.append((start, decoded.data))
        staging_nbytes = start + decoded.data.size
        group = groups.setdefault("copy", StreamGroup("copy"))
        group.src_offsets.append(start)
        group.src_nbytes.append(decoded.data.size)
        group.dst_offsets.append(decoded.offset)
        group.dst_nbytes.append(decoded.data.size)
        group.owners.append(decoded.task)
    # The bytes between streams are never read; the device's allocator (pinned memory on a GPU)
    # may leave them uninitialised.
    staging = (host_empty or _zeros)(align(staging_nbytes))
    for start, part in staging_parts:
        staging[start : start + part.size] = part
    # Chunks the device reads from files go after the host-filled prefix of the staging buffer
    # (zstd streams) or straight to their place in the work buffer (uncompressed chunks).
    file_reads: list[FileRead] = []
    staging_nbytes = staging.size
    for t, span in direct:
        task = plan.tasks[t]
        encoded_of[t] = span
        offset = work_nbytes
        work_nbytes = align(offset + task.decoded_nbytes)
        source_of[t] = (offset, task.decoded_nbytes)
        if task.route.name == "raw":
            if span.nbytes != task.decoded_nbytes:
                raise CorruptChunkError(
                    task.key,
                    f"{task.where}uncompressed chunk has {span.nbytes} bytes, expected {task.decoded_nbytes}",
                )
            file_reads.append(FileRead(t, span, "work", offset))
            continue
        if span.nbytes < 6:
            raise CorruptChunkError(task.key, f"{task.where}zstd: {span.nbytes}-byte chunk cannot hold a frame")
        start = staging_nbytes
        staging_nbytes = align(start + span.nbytes)
        file_reads.append(FileRead(t, span, "staging", start))
        group = groups.setdefault("zstd", StreamGroup("zstd"))
        group.src_offsets.append(start)
        group.src_nbytes.append(span.nbytes)
        group.dst_offsets.append(offset)
        group.dst_nbytes.append(task.decoded_nbytes)
        group.owners.append(t)
    assemble = _assemble_launch(plan, task_ids, source_of, work_nbytes)
    for launch in unshuffles.values():
        kernels.check_blocks(
            launch.kernel,
            [work_nbytes - o for o in launch.src_offsets],
            [work_nbytes - o for o in launch.dst_offsets],
            launch.nbytes,
            launch.typesizes,
        )
    for group in groups.values():
        _check_spans(group, staging_nbytes, work_nbytes)
    for read in file_reads:
        limit = staging_nbytes if read.target == "staging" else work_nbytes
        if read.offset < 0 or read.offset + read.span.nbytes > limit:
            raise ValueError(f"file read of {read.span.nbytes} bytes at {read.offset} leaves the {read.target} buffer")
    return BoundBatch(
        tuple(task_ids),
        staging,
        work_nbytes,
        groups,
        list(unshuffles.values()),
        checksums,
        host_decoded,
        assemble,
        file_reads,
        staging_nbytes,
        {t: (blob, source_of[t][0]) for t, blob in encoded_of.items()},
    )


def _zeros(nbytes: int) -> npt.NDArray[np.uint8]:
    return np.zeros(nbytes, dtype=np.uint8)


def _check_spans(group: StreamGroup, staging_nbytes: int, work_nbytes: int) -> None:
    src = np.asarray(group.src_offsets, np.int64) + np.asarray(group.src_nbytes, np.int64)
    dst = np.asarray(group.dst_offsets, np.int64) + np.asarray(group.dst_nbytes, np.int64)
    if src.size and (src.max() > staging_nbytes or dst.max() > work_nbytes):
        raise ValueError(f"{group.algorithm}: a stream span leaves its buffer")


def _assemble_launch(
    plan: GpuReadPlan, task_ids: Sequence[int], source_of: dict[int, tuple[int, int]], work_nbytes: int
) -> AssembleLaunch:
    rows: list[int] = []
    offsets: list[int] = []
    nbytes: list[int] = []
    strides: list[tuple[int, ...]] = []
    for t in task_ids:
        task = plan.tasks[t]
        where = source_of.get(t)
        for r in task.rows:
            rows.append(r)
            offsets.append(-1 if where is None else where[0])
            nbytes.append(0 if where is None else where[1])
            strides.append(task.route.source_strides)
    ndim = plan.ndim
    index = np.asarray(rows, dtype=np.int64)
    src_strides = np.zeros((len(rows), MAX_NDIM), dtype=np.int64)
    if rows and ndim:
        src_strides[:, :ndim] = np.asarray(strides, dtype=np.int64).reshape(len(rows), ndim)
    launch = AssembleLaunch(
        out_strides=plan.out_strides.copy(),
        source_offsets=np.asarray(offsets, dtype=np.int64),
        source_nbytes=np.asarray(nbytes, dtype=np.int64),
        src_strides=src_strides,
        src_offsets=plan.src_offsets[index],
        src_steps=plan.src_steps[index],
        dst_offsets=plan.dst_offsets[index],
        extents=plan.extents[index],
        fill_value=np.frombuffer(plan.fill_value, dtype=np.uint8).copy(),
        nchunks=len(rows),
        ndim=ndim,
        itemsize=plan.dtype.itemsize,
        swap_width=plan.swap_width,
    )
    check_assemble_launch(launch, plan.out_nbytes, work_nbytes)
    return launch


def check_assemble_launch(launch: AssembleLaunch, out_nbytes: int, work_nbytes: int) -> None:
    """Validate an assemble launch with :func:`kernels.check_assemble` and the work buffer's size."""
    for c, (offset, n) in enumerate(zip(launch.source_offsets.tolist(), launch.source_nbytes.tolist())):
        if offset >= 0 and (offset % min(launch.itemsize, ALIGNMENT) or offset + n > work_nbytes):
            raise ValueError(f"assemble: source {c} ({n} bytes at {offset}) is misaligned or leaves the work buffer")
    nd = launch.ndim
    kernels.check_assemble(
        out_nbytes,
        launch.out_strides[:nd].tolist(),
        [None if o < 0 else n for o, n in zip(launch.source_offsets.tolist(), launch.source_nbytes.tolist())],
        launch.src_strides[:, :nd],
        launch.src_offsets[:, :nd],
        launch.src_steps[:, :nd],
        launch.dst_offsets[:, :nd],
        launch.extents[:, :nd],
        launch.itemsize,
        launch.swap_width,
    )

