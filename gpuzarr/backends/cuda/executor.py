"""Execute a GpuReadPlan through a device object.

The executor holds the order of work and nothing device-specific: per batch it reads the encoded
bytes on the host (shard indexes first, then coalesced inner-chunk ranges, through
``store.sharding``), binds them to the plan (``plan.bind_batch``: streams, staging layout, kernel
arguments, all validated), copies the staging buffer to the device once, runs one batched
decompression per nvCOMP algorithm, the Blosc un-shuffles and one assemble launch. A device is
any object with the methods of :class:`Device`:

* :class:`CpuEmulatedDevice` — NumPy buffers, CPU decoders of each nvCOMP bitstream (zstd frames,
  raw deflate, LZ4 blocks) and the NumPy kernel models of ``kernel_reference``. CI runs the whole
  host side through it against the CPU engine.
* :class:`CudaDevice` — CuPy buffers, nvCOMP's batched decoders and the kernels of kernels/*.cu.

Chunks the GPU cannot decode (see ``plan.decode_route``) are decoded on the CPU and copied; the
first time each reason occurs it is logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ... import config
from ...codecs.zstd import frame_content_size
from ...engine.layout import StorageLayout
from ...engine.parallel import run_tasks
from ...errors import CorruptChunkError
from ...plan.selection import ReadPlan
from ...store.base import Buffer, Store
from ...store.local import LocalStore
from ...store.sharding import ShardIndex, read_inner_chunks, read_shard_index
from . import kernel_reference, kernels
from .plan import (
    ALIGNMENT,
    BATCH_BYTES,
    AssembleLaunch,
    BoundBatch,
    ChunkTask,
    FileRead,
    FileSpan,
    GpuReadPlan,
    bind_batch,
    build_gpu_read_plan,
    check_assemble_launch,
    decode_on_host,
    reads_directly,
)

logger = logging.getLogger("gpuzarr")

ChecksumKind = Literal["crc32", "adler32"]


class Device(Protocol):
    """What the executor needs from a device. Buffers are flat ``uint8`` device arrays."""

    #: whether :meth:`read_files` reads local files straight into device buffers
    reads_files: bool

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        """Make this device (and its stream) current for the work inside the block."""

    def free_memory(self) -> int | None:
        """Free device memory in bytes, None when unknown."""

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is an array in this device's memory."""

    def is_contiguous(self, value: Any) -> bool:
        """Whether the device array ``value`` is C-contiguous."""

    def from_host(self, host: np.ndarray[Any, Any]) -> Any:
        """A device copy of a host array."""

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[...] = src`` between device arrays of one shape and dtype."""

    def read_files(self, reads: Sequence[FileRead], staging: Any, work: Any) -> list[int]:
        """Read each file span into its place in ``staging`` or ``work``; bytes read per span."""

    def gather(self, box: Any, index: npt.NDArray[np.intp]) -> Any:
        """``box.ravel()[index]``: a new device array of ``index``'s shape."""

    def peek(self, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], width: int) -> npt.NDArray[np.uint8]:
        """The first ``width`` bytes of each span of ``buffer`` on the host, (n, width), zero past
        a span's end."""

    def alloc(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes`` bytes (contents undefined), 8-byte aligned."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A C-contiguous output array (contents undefined)."""

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: Any, offset: int = 0) -> None:
        """Copy ``host`` to ``dst[offset:]``."""

    def decompress_batch(
        self,
        algorithm: str,
        src: Any,
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: Any,
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> npt.NDArray[np.int64]:
        """Decode raw ``algorithm`` streams ("zstd", "deflate", "lz4") from spans of ``src`` into
        spans of ``dst``; return each stream's decoded size (-1 where decoding failed)."""

    def copy_spans(
        self, src: Any, src_offsets: Sequence[int], dst: Any, dst_offsets: Sequence[int], nbytes: Sequence[int]
    ) -> None:
        """Copy stored (uncompressed) streams."""

    def checksums(
        self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]
    ) -> list[int] | None:
        """CRC-32 / Adler-32 of spans of ``buffer``, or None when the device cannot compute them."""

    def launch_unshuffle(
        self,
        kernel: str,
        buffer: Any,
        src_offsets: Sequence[int],
        dst_offsets: Sequence[int],
        nbytes: Sequence[int],
        typesizes: Sequence[int],
        partial_rule: int,
    ) -> None:
        """``byte_unshuffle`` / ``bit_unshuffle`` between spans of one buffer."""

    def launch_assemble(self, out: Any, work: Any, launch: AssembleLaunch) -> None:
        """``assemble_chunks`` from the decoded chunks in ``work`` into ``out``."""


# --- executing a plan ---------------------------------------------------------------------------


def read_gpu_plan(
    layout: StorageLayout,
    store: Store,
    plan: ReadPlan,
    device: Device,
    *,
    budget: int = BATCH_BYTES,
) -> Any:
    """Read the (basic) selection ``plan`` describes into a new device array of ``plan.shape``."""
    gpu_plan = build_gpu_read_plan(layout, plan, budget)
    out = device.empty(gpu_plan.buffer_shape, gpu_plan.dtype)
    execute(layout, store, gpu_plan, device, out)
    return out


def execute(
    layout: StorageLayout,
    store: Store,
    plan: GpuReadPlan,
    device: Device,
    out: Any,
    *,
    on_fallback: Callable[[str], None] | None = None,
) -> None:
    """Run every batch of ``plan`` into ``out`` (a C-contiguous device array of the plan's shape).

    The host prepares batch k+1 (reads, stream splitting, launch arguments) on a helper thread
    while the device works on batch k. ``on_fallback`` hears each reason a chunk is decoded on
    the CPU (once per reason and read); by default it is logged.
    """
    indexes: dict[str, ShardIndex | None] = {}
    direct = bool(getattr(device, "reads_files", False)) and isinstance(store, LocalStore)
    reported: set[str] = set()

    def prepare(batch: int) -> BoundBatch:
        encoded = fetch_batch(layout, store, plan, batch, indexes, direct=direct)
        return bind_batch(layout, plan, batch, encoded, getattr(device, "host_empty", None))

    def report(bound: BoundBatch) -> None:
        for decoded in bound.host_decoded:
            if decoded.reason not in reported:
                reported.add(decoded.reason)
                if on_fallback is not None:
                    on_fallback(decoded.reason)
                else:
                    logger.info("gpuzarr: decoding on the CPU and copying to the GPU: %s", decoded.reason)

    nbatches = len(plan.batches)
    if nbatches == 1:
        bound = prepare(0)
        report(bound)
        run_batch(plan, bound, device, out, layout=layout, on_fallback=on_fallback)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuzarr-prefetch") as prefetch:
        pending: Future[BoundBatch] = prefetch.submit(prepare, 0)
        for batch in range(nbatches):
            bound = pending.result()
            if batch + 1 < nbatches:
                pending = prefetch.submit(prepare, batch + 1)
            report(bound)
            try:
                run_batch(plan, bound, device, out, layout=layout, on_fallback=on_fallback)
            except BaseException:
                pending.cancel()
                raise


def _stat(path: str) -> tuple[int, tuple[int, int]] | None:
    """(size, version) of a regular file, None when there is none."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_size, (info.st_ino, info.st_mtime_ns)


def fetch_batch(
    layout: StorageLayout,
    store: Store,
    plan: GpuReadPlan,
    batch: int,
    indexes: dict[str, ShardIndex | None] | None = None,
    *,
    direct: bool = False,
) -> list[Buffer | FileSpan | None]:
    """The encoded bytes of every task of a batch (None: missing), read on the host.

    With ``direct`` (a LocalStore and a device that reads files), tasks whose route lets the
    device read their bytes as they are (:func:`reads_directly`) get a :class:`FileSpan`
    instead; shard indexes are still read on the host.
    """
    task_ids = plan.batches[batch]
    tasks = [plan.tasks[t] for t in task_ids]
    local = store if direct and isinstance(store, LocalStore) else None

    def whole(task: ChunkTask) -> Buffer | FileSpan | None:
        if local is not None and reads_directly(task.route):
            path = local.path_of(task.key)
            found = _stat(path)
            return None if found is None else FileSpan(path, 0, found[0], found[1])
        return store.get(task.key)

    if not plan.sharded:
        return run_tasks(whole, tasks)
    indexes = {} if indexes is None else indexes
    by_shard: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_shard.setdefault(task.key, []).append(i)

    def fetch(item: tuple[str, list[int]]) -> list[tuple[int, Buffer | FileSpan | None]]:
        key, members = item
        shard = layout.shard_of(tasks[members[0]].coords)[0]
        shard_layout = layout.sharding_at(shard).layout
        if key not in indexes:
            indexes[key] = read_shard_index(store, key, shard_layout)
        index = indexes[key]
        if index is None:
            return [(i, None) for i in members]
        if local is not None and all(reads_directly(tasks[i].route) for i in members):
            return [(i, _inner_span(local, key, index, tasks[i])) for i in members]
        wanted = [tasks[i].inner for i in members]
        blobs = read_inner_chunks(store, key, index, [w for w in wanted if w is not None], shard_layout)
        return list(zip(members, blobs, strict=True))

    result: list[Buffer | FileSpan | None] = [None] * len(tasks)
    for part in run_tasks(fetch, list(by_shard.items())):
        for i, blob in part:
            result[i] = blob
    return result


def _inner_span(store: LocalStore, key: str, index: ShardIndex, task: ChunkTask) -> FileSpan | None:
    inner = task.inner if task.inner is not None else 0
    if index.is_empty(inner):
        return None
    path = store.path_of(key)
    found = _stat(path)
    if found is None:
        raise CorruptChunkError(key, "shard disappeared while it was being read")
    size, version = found
    start, n = int(index.offsets[inner]), int(index.nbytes[inner])
    if start + n > size:
        raise CorruptChunkError(
            key, f"inner chunk {inner} (offset {start}, nbytes {n}) lies past the shard end ({size} bytes)"
        )
    return FileSpan(path, start, n, version)


def run_batch(
    plan: GpuReadPlan,
    bound: BoundBatch,
    device: Device,
    out: Any,
    *,
    layout: StorageLayout | None = None,
    on_fallback: Callable[[str], None] | None = None,
) -> None:
    """The device work of one bound batch: copy, read files, decompress, verify, un-shuffle,
    assemble.

    A stream the device fails to decode (or whose checksum differs) does not prove the chunk
    corrupt: the CPU engine is the reference. With ``layout`` given, such chunks are decoded on
    the CPU, which raises CorruptChunkError naming the key when the chunk really is corrupt, and
    the result replaces the device's before the assemble launch (``on_fallback`` hears why).
    """
    staging = device.alloc(max(bound.staging_nbytes, bound.staging.size, ALIGNMENT))
    if bound.staging.size:
        device.copy_host_to_device(bound.staging, staging)
    work = device.alloc(max(bound.work_nbytes, ALIGNMENT))
    if bound.file_reads:
        got_bytes = device.read_files(bound.file_reads, staging, work)
        for read, n in zip(bound.file_reads, got_bytes, strict=True):
            if n != read.span.nbytes:
                task = plan.tasks[read.task]
                what = "could not be read" if n < 0 else f"ended after {n} of {read.span.nbytes} bytes"
                raise CorruptChunkError(task.key, f"{task.where}the file {what} at offset {read.span.offset}")
    failed: dict[int, str] = {}  # task -> what the device said
    _check_direct_zstd_headers(plan, bound, device, staging, failed)
    for algorithm, group in bound.groups.items():
        if algorithm == "copy":
            device.copy_spans(staging, group.src_offsets, work, group.dst_offsets, group.src_nbytes)
            continue
        got = np.asarray(
            device.decompress_batch(
                algorithm,
                staging,
                group.src_offsets,
                group.src_nbytes,
                work,
                group.dst_offsets,
                group.dst_nbytes,
            ),
            dtype=np.int64,
        )
        expected = np.asarray(group.dst_nbytes, dtype=np.int64)
        for s in np.flatnonzero(got != expected).tolist():
            what = "failed" if got[s] < 0 else f"gave {int(got[s])} bytes"
            message = f"{algorithm} stream {s} of the batch {what}, expected {int(expected[s])}"
            failed.setdefault(group.owners[s], message)
    for kind in ("crc32", "adler32"):
        checks = [c for c in bound.checksums if c.checksum.kind == kind and c.task not in failed]
        if not checks:
            continue
        values = device.checksums(kind, work, [c.offset for c in checks], [c.nbytes for c in checks])
        if values is None:
            continue
        for check, value in zip(checks, values, strict=True):
            if value != check.checksum.value:
                failed[check.task] = f"{kind} mismatch: stored {check.checksum.value:#010x}, computed {value:#010x}"
    for launch in bound.unshuffles:
        device.launch_unshuffle(
            launch.kernel,
            work,
            launch.src_offsets,
            launch.dst_offsets,
            launch.nbytes,
            launch.typesizes,
            launch.partial_rule,
        )
    if failed:
        _decode_failed_on_cpu(plan, bound, device, work, failed, layout, on_fallback)
    if bound.assemble.nchunks:
        device.launch_assemble(out, work, bound.assemble)


#: the longest Zstandard frame header: magic, descriptor, window, dictionary id, content size
ZSTD_HEADER_BYTES = 18


def _check_direct_zstd_headers(
    plan: GpuReadPlan, bound: BoundBatch, device: Device, staging: Any, failed: dict[int, str]
) -> None:
    """The host checks every zstd frame header it sees (streams.split_zstd); frames the device
    read from files get the same check from one small device-to-host copy. A frame that does not
    declare the chunk's size goes to the CPU."""
    reads = [r for r in bound.file_reads if r.target == "staging"]
    if not reads:
        return
    headers = device.peek(staging, [r.offset for r in reads], [r.span.nbytes for r in reads], ZSTD_HEADER_BYTES)
    for read, header in zip(reads, headers, strict=True):
        expected = plan.tasks[read.task].decoded_nbytes
        declared = frame_content_size(header[: read.span.nbytes])
        if declared is None:
            failed[read.task] = "zstd frame header declares no content size (or is not a frame header)"
        elif declared != expected:
            failed[read.task] = f"zstd frame declares {declared} decoded bytes, expected {expected}"


def _decode_failed_on_cpu(
    plan: GpuReadPlan,
    bound: BoundBatch,
    device: Device,
    work: Any,
    failed: dict[int, str],
    layout: StorageLayout | None,
    on_fallback: Callable[[str], None] | None,
) -> None:
    """Decode the chunks the device failed on the CPU, into their place in ``work``."""
    first = min(failed)
    task = plan.tasks[first]
    if layout is None:
        raise CorruptChunkError(task.key, f"{task.where}{failed[first]}")
    reason = f"the device could not decode a chunk ({task.key}: {task.where}{failed[first]})"
    if on_fallback is not None:
        on_fallback(reason)
    else:
        logger.warning("gpuzarr: %s; decoding it on the CPU", reason)
    for t in sorted(failed):
        blob, offset = bound.encoded[t]
        data = _read_span(plan.tasks[t].key, blob) if isinstance(blob, FileSpan) else blob
        try:
            decoded = decode_on_host(layout, plan, t, offset, data, reason)
        except CorruptChunkError as exc:  # the CPU agrees: the chunk is corrupt
            raise CorruptChunkError(exc.key, f"{exc.reason} (the device found: {failed[t]})") from exc
        device.copy_host_to_device(decoded.data, work, offset)


def _read_span(key: str, span: FileSpan) -> npt.NDArray[np.uint8]:
    with open(span.path, "rb") as f:
        f.seek(span.offset)
        data = f.read(span.nbytes)
    if len(data) != span.nbytes:
        raise CorruptChunkError(key, f"the file ended after {len(data)} of {span.nbytes} bytes")
    return np.frombuffer(data, dtype=np.uint8)


# --- devices ------------------------------------------------------------------------------------

POISON = 0xAB


def _decode_stream_on_cpu(algorithm: str, data: bytes, limit: int) -> bytes:
    """Decode one raw nvCOMP bitstream with a CPU library (at most ``limit`` + 1 bytes)."""
    if algorithm == "deflate":
        d = zlib.decompressobj(wbits=-15)
        result = d.decompress(data, limit + 1)
        if not d.eof:
            raise ValueError("raw deflate stream is truncated or longer than its output")
        return result
    if algorithm == "zstd":
        from numcodecs import Zstd

        return bytes(Zstd().decode(data))
    if algorithm == "lz4":
        from numcodecs import LZ4

        # numcodecs' LZ4 format is the raw block behind a 4-byte decoded size.
        return bytes(LZ4().decode(struct.pack("<I", limit) + data))
    raise ValueError(f"unknown algorithm {algorithm!r}")


class CpuEmulatedDevice:
    """A device made of NumPy buffers, CPU decoders of nvCOMP's raw formats and the NumPy models
    of the kernels: the executor's host-side logic runs unchanged and can be checked on any
    machine. New buffers are filled with 0xAB so that bytes nobody writes show up."""

    def __init__(self, index: int = 0, stream: Any = None, *, reads_files: bool = True) -> None:
        self.index = index
        self.stream = stream
        self.reads_files = reads_files
        self.calls: list[tuple[str, int]] = []

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def free_memory(self) -> int | None:
        return None

    def is_array(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def is_contiguous(self, value: Any) -> bool:
        return bool(value.flags.c_contiguous)

    def from_host(self, host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        self.calls.append(("from_host", host.nbytes))
        return np.array(host, copy=True)

    def copy(self, dst: np.ndarray[Any, Any], src: np.ndarray[Any, Any]) -> None:
        dst[...] = src

    def peek(
        self, buffer: npt.NDArray[np.uint8], offsets: Sequence[int], nbytes: Sequence[int], width: int
    ) -> npt.NDArray[np.uint8]:
        self.calls.append(("peek", len(offsets)))
        return np.asarray(_peek_index(buffer.size, offsets, nbytes, width, lambda i: buffer[i]))

    def gather(self, box: np.ndarray[Any, Any], index: npt.NDArray[np.intp]) -> np.ndarray[Any, Any]:
        self.calls.append(("gather", index.size))
        if index.size and (index.min() < 0 or index.max() >= box.size):
            raise ValueError(f"gather: an index leaves the {box.size}-element box")
        return np.ascontiguousarray(box).reshape(-1)[index]

    def read_files(
        self, reads: Sequence[FileRead], staging: npt.NDArray[np.uint8], work: npt.NDArray[np.uint8]
    ) -> list[int]:
        self.calls.append(("read_files", len(reads)))
        done = []
        for read in reads:
            buffer = staging if read.target == "staging" else work
            n = read.span.nbytes
            if read.offset < 0 or read.offset + n > buffer.size:
                raise ValueError(f"file read of {n} bytes at {read.offset} leaves the {buffer.size}-byte buffer")
            with open(read.span.path, "rb") as f:
                f.seek(read.span.offset)
                data = f.read(n)
            buffer[read.offset : read.offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
            done.append(len(data))
        return done

    def alloc(self, nbytes: int) -> npt.NDArray[np.uint8]:
        return np.full(nbytes, POISON, dtype=np.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return np.full(nbytes, POISON, dtype=np.uint8).view(dtype).reshape(shape)

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8], offset: int = 0) -> None:
        if offset < 0 or offset + host.size > dst.size:
            raise ValueError(f"copy of {host.size} bytes to offset {offset} leaves the {dst.size}-byte buffer")
        dst[offset : offset + host.size] = host

    def decompress_batch(
        self,
        algorithm: str,
        src: npt.NDArray[np.uint8],
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: npt.NDArray[np.uint8],
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> npt.NDArray[np.int64]:
        self.calls.append((algorithm, len(src_offsets)))
        sizes = np.full(len(src_offsets), -1, dtype=np.int64)
        for i, (so, sn, do, dn) in enumerate(zip(src_offsets, src_nbytes, dst_offsets, dst_nbytes, strict=True)):
            if so + sn > src.size or do + dn > dst.size:
                raise ValueError(f"{algorithm}: stream {i} span leaves its buffer")
            try:
                result = _decode_stream_on_cpu(algorithm, src[so : so + sn].tobytes(), dn)
            except Exception:
                continue
            if len(result) <= dn:  # nvCOMP fails streams whose output does not fit
                dst[do : do + len(result)] = np.frombuffer(result, dtype=np.uint8)
                sizes[i] = len(result)
        return sizes

    def copy_spans(
        self,
        src: npt.NDArray[np.uint8],
        src_offsets: Sequence[int],
        dst: npt.NDArray[np.uint8],
        dst_offsets: Sequence[int],
        nbytes: Sequence[int],
    ) -> None:
        self.calls.append(("copy", len(nbytes)))
        for so, do, n in zip(src_offsets, dst_offsets, nbytes, strict=True):
            dst[do : do + n] = src[so : so + n]

    def checksums(
        self, kind: ChecksumKind, buffer: npt.NDArray[np.uint8], offsets: Sequence[int], nbytes: Sequence[int]
    ) -> list[int]:
        self.calls.append((kind, len(offsets)))
        views = [buffer[o : o + n] for o, n in zip(offsets, nbytes, strict=True)]
        sizes = kernels.check_crc32c([v.size for v in views], nbytes, kind)
        sums = np.zeros(sizes.size, dtype=np.uint32)
        model = kernel_reference.crc32_batch if kind == "crc32" else kernel_reference.adler32_batch
        model(views, sizes, sums, sizes.size, block_threads=kernels.BLOCK_THREADS)
        return [int(v) for v in sums]

    def launch_unshuffle(
        self,
        kernel: str,
        buffer: npt.NDArray[np.uint8],
        src_offsets: Sequence[int],
        dst_offsets: Sequence[int],
        nbytes: Sequence[int],
        typesizes: Sequence[int],
        partial_rule: int,
    ) -> None:
        self.calls.append((kernel, len(nbytes)))
        src = [buffer[o:] for o in src_offsets]
        dst = [buffer[o:] for o in dst_offsets]
        sizes, types = kernels.check_blocks(kernel, [s.size for s in src], [d.size for d in dst], nbytes, typesizes)
        if kernel == "byte_unshuffle":
            kernel_reference.byte_unshuffle(src, dst, sizes, types, sizes.size)
        else:
            kernel_reference.bit_unshuffle(src, dst, sizes, types, sizes.size, partial_rule)

    def launch_assemble(self, out: np.ndarray[Any, Any], work: npt.NDArray[np.uint8], launch: AssembleLaunch) -> None:
        self.calls.append(("assemble_chunks", launch.nchunks))
        if not out.flags.c_contiguous:
            raise ValueError("assemble: the output must be C-contiguous")
        check_assemble_launch(launch, out.nbytes, work.size)
        sources = [
            None if o < 0 else work[o : o + n]
            for o, n in zip(launch.source_offsets.tolist(), launch.source_nbytes.tolist())
        ]
        kernel_reference.assemble_chunks(
            out.reshape(-1).view(np.uint8),
            launch.out_strides,
            sources,
            launch.src_strides,
            launch.src_offsets,
            launch.src_steps,
            launch.dst_offsets,
            launch.extents,
            launch.fill_value,
            launch.nchunks,
            launch.ndim,
            launch.itemsize,
            launch.swap_width,
        )


_NVCOMP_ALGORITHMS = {"zstd": "Zstd", "deflate": "Deflate", "lz4": "LZ4"}
#: open kvikio file handles, keyed by path and file version (see FileSpan.version), so that a
#: file replaced by a writer is reopened rather than read through a stale handle
_FILE_HANDLES: OrderedDict[tuple[str, tuple[int, int]], Any] = OrderedDict()
_FILE_HANDLES_MAX = 256
_file_lock = threading.Lock()
_kvikio_threads: int | None = None
#: nvCOMP codecs by (algorithm, device, stream handle)
_CODECS: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
_CODECS_MAX = 32
_CUDA_STREAM_LEGACY = 1
_codec_lock = threading.Lock()


def _kvikio() -> Any:
    """kvikio, configured with ``gpuzarr.config`` ``io_threads``; None when it is not installed.

    gpuzarr never sets kvikio's compatibility mode: kvikio chooses GDS where cuFile works and
    POSIX reads through host bounce buffers otherwise.
    """
    global _kvikio_threads
    try:
        import kvikio
        import kvikio.defaults
    except ImportError:
        return None
    threads = config.get("io_threads")
    if threads is not None and threads != _kvikio_threads:
        kvikio.defaults.set("num_threads", int(threads))
        _kvikio_threads = threads
    return kvikio


def as_cupy_stream(stream: Any) -> Any:
    """A CuPy stream for ``stream``: a cupy Stream, anything with ``cuda_stream`` (a PyTorch
    stream) or ``ptr``, or a raw ``cudaStream_t`` as an int."""
    cupy = kernels.import_cupy()
    if isinstance(stream, cupy.cuda.Stream | cupy.cuda.ExternalStream):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            return cupy.cuda.ExternalStream(int(getattr(stream, attribute)))
    if isinstance(stream, int):
        return cupy.cuda.ExternalStream(stream)
    raise TypeError(f"stream: expected a CuPy or PyTorch CUDA stream or a cudaStream_t int, got {stream!r}")


class CudaDevice:
    """CuPy buffers, nvCOMP's batched decoders (``nvidia.nvcomp``, RAW bitstreams), kvikio file
    reads and the CUDA kernels of kernels/*.cu, on device ``index`` and ``stream`` (the current
    CuPy stream when None). Every import happens inside the methods.

    Written against the documented APIs of CuPy, kvikio 26 and ``nvidia.nvcomp`` 6 and NOT YET
    RUN ON A GPU: tests/gpu/ is the check that has to pass before this is trusted. Choices:

    * nvCOMP 6 carves a batch out of one buffer (``nvcomp.as_arrays(buffer, offsets, sizes)``),
      so streams decode straight into the work buffer; with an older nvCOMP each stream is
      decoded into its own allocation and copied. When a batched call fails, its streams are
      decoded one at a time to name the corrupt chunk.
    * kvikio writes device memory outside CuPy's stream order, so the stream is synchronised
      before file reads land in buffers that the memory pool may have handed back from work
      still queued.
    * The CRC-32 of gzip and the Adler-32 of zlib streams are computed by our kernels
      (kernels/crc32c.cu, kernels/adler32.cu) and compared on the host; stored streams (Blosc
      memcpy'd blocks, uncompressed chunks from other stores, chunks decoded on the CPU) are one
      device-to-device memcpy each.
    """

    def __init__(self, index: int = 0, stream: Any = None) -> None:
        self.index = index
        self._user_stream = stream
        self.reads_files = _kvikio() is not None

    @staticmethod
    def _cupy() -> Any:
        return kernels.import_cupy()

    # -- context ---------------------------------------------------------------------------------

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        cupy = self._cupy()
        stream = None if self._user_stream is None else as_cupy_stream(self._user_stream)
        stack = contextlib.ExitStack()
        stack.enter_context(cupy.cuda.Device(self.index))
        if stream is not None:
            stack.enter_context(stream)
        return stack

    def _stream(self) -> Any:
        return self._cupy().cuda.get_current_stream()

    def free_memory(self) -> int | None:
        cupy = self._cupy()
        free, _ = cupy.cuda.runtime.memGetInfo()
        return int(free) + int(cupy.get_default_memory_pool().free_bytes())

    # -- arrays ----------------------------------------------------------------------------------

    def is_array(self, value: Any) -> bool:
        return isinstance(value, self._cupy().ndarray)

    def is_contiguous(self, value: Any) -> bool:
        return bool(value.flags.c_contiguous)

    def from_host(self, host: np.ndarray[Any, Any]) -> Any:
        return self._cupy().asarray(host)

    def copy(self, dst: Any, src: Any) -> None:
        self._cupy().copyto(dst, src)

    def gather(self, box: Any, index: npt.NDArray[np.intp]) -> Any:
        if index.size and (index.min() < 0 or index.max() >= box.size):
            raise ValueError(f"gather: an index leaves the {box.size}-element box")
        cupy = self._cupy()
        compact = index.astype(np.int32) if box.size < 2**31 else index  # half the bytes to copy
        return cupy.take(box.reshape(-1), cupy.asarray(compact))

    def peek(self, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], width: int) -> npt.NDArray[np.uint8]:
        cupy = self._cupy()
        return _peek_index(buffer.size, offsets, nbytes, width, lambda i: cupy.take(buffer, cupy.asarray(i)).get())

    def alloc(self, nbytes: int) -> Any:
        cupy = self._cupy()
        return cupy.empty(nbytes, dtype=cupy.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return self._cupy().empty(shape, dtype=dtype)

    def host_empty(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """A page-locked host staging buffer: copies from it run at full PCIe speed."""
        import cupyx

        return cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: Any, offset: int = 0) -> None:
        if offset < 0 or offset + host.size > dst.size:
            raise ValueError(f"copy of {host.size} bytes to offset {offset} leaves the {dst.size}-byte buffer")
        stream = self._stream()
        dst[offset : offset + host.size].set(host, stream=stream)
        # From pinned memory the copy is asynchronous; the host buffer returns to CuPy's pinned
        # pool when the batch is dropped, so wait here rather than let a later batch refill it
        # while the copy still reads it.
        stream.synchronize()

    # -- file reads ------------------------------------------------------------------------------

    def _file(self, kvikio: Any, span: FileSpan) -> Any:
        key = (span.path, span.version)
        with _file_lock:
            handle = _FILE_HANDLES.get(key)
            if handle is not None:
                _FILE_HANDLES.move_to_end(key)
                return handle
        handle = kvikio.CuFile(span.path, "r")
        with _file_lock:
            _FILE_HANDLES[key] = handle
            while len(_FILE_HANDLES) > _FILE_HANDLES_MAX:
                _FILE_HANDLES.popitem(last=False)  # closed when the last reader drops it
        return handle

    def read_files(self, reads: Sequence[FileRead], staging: Any, work: Any) -> list[int]:
        kvikio = _kvikio()
        if kvikio is None:
            raise RuntimeError("read_files needs kvikio")
        self._stream().synchronize()
        futures: list[Any] = []
        # The handles stay referenced until every read has finished: a handle evicted from the
        # cache meanwhile would otherwise be closed under its own read.
        handles: list[Any] = []
        for read in reads:
            buffer = staging if read.target == "staging" else work
            n = read.span.nbytes
            if read.offset < 0 or read.offset + n > buffer.size:
                raise ValueError(f"file read of {n} bytes at {read.offset} leaves the {buffer.size}-byte buffer")
            if n == 0:
                futures.append(None)
                continue
            view = buffer[read.offset : read.offset + n]
            handles.append(self._file(kvikio, read.span))
            futures.append(handles[-1].pread(view, n, read.span.offset))
        done = []
        for future in futures:
            try:
                done.append(0 if future is None else int(future.get()))
            except (OSError, RuntimeError) as exc:  # e.g. the file shrank after it was located
                logger.debug("gpuzarr: kvikio read failed: %s", exc)
                done.append(-1)
        del handles
        return done

    # -- decoding --------------------------------------------------------------------------------

    def _stream_handle(self) -> int:
        """The current stream as a ``cudaStream_t`` for nvCOMP. CuPy's null stream is handle 0,
        which nvCOMP's Codec would read as "no stream given" and make its own; the legacy
        default stream's special handle (cudaStreamLegacy, 1) names it explicitly."""
        return int(self._stream().ptr) or _CUDA_STREAM_LEGACY

    def _codec(self, algorithm: str) -> Any:
        """nvCOMP's codec for ``algorithm`` on this device and the current stream, made once per
        process (a Codec sets up its own scratch state; reads are many and short)."""
        key = (algorithm, self.index, self._stream_handle())
        with _codec_lock:
            codec = _CODECS.get(key)
            if codec is not None:
                _CODECS.move_to_end(key)
                return codec
        nvcomp = _nvcomp()
        codec = nvcomp.Codec(
            algorithm=_NVCOMP_ALGORITHMS[algorithm],
            bitstream_kind=nvcomp.BitstreamKind.RAW,
            device_id=self.index,
            cuda_stream=key[2],
        )
        with _codec_lock:
            _CODECS[key] = codec
            while len(_CODECS) > _CODECS_MAX:
                _CODECS.popitem(last=False)
        return codec

    def decompress_batch(
        self,
        algorithm: str,
        src: Any,
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: Any,
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> npt.NDArray[np.int64]:
        nvcomp = _nvcomp()
        codec = self._codec(algorithm)
        handle = self._stream_handle()
        try:
            srcs = nvcomp.as_arrays(src, list(src_offsets), list(src_nbytes), cuda_stream=handle)
            outs = nvcomp.as_arrays(dst, list(dst_offsets), list(dst_nbytes), cuda_stream=handle)
        except TypeError as exc:  # nvCOMP before 6 cannot carve a batch out of one buffer
            _log_once(f"nvCOMP cannot carve batches ({exc}); decoding {algorithm} streams one at a time")
            return self._decode_one_by_one(codec, src, src_offsets, src_nbytes, dst, dst_offsets, dst_nbytes)
        try:
            result = codec.decode(srcs, out=outs)
            sizes = result.buffer_sizes
        except Exception as exc:
            _reraise_device_errors(exc)
            # A corrupt stream fails the whole call: decode one at a time to find which.
            logger.debug("gpuzarr: batched %s decode failed (%s); decoding one at a time", algorithm, exc)
            return self._decode_one_by_one(codec, src, src_offsets, src_nbytes, dst, dst_offsets, dst_nbytes)
        return np.asarray([int(n) for n in sizes], dtype=np.int64)

    def _decode_one_by_one(
        self,
        codec: Any,
        src: Any,
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: Any,
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> npt.NDArray[np.int64]:
        """Decode each stream into its own allocation and copy it to its place; -1 where a
        stream fails or does not fit."""
        nvcomp = _nvcomp()
        cupy = self._cupy()
        sizes = np.full(len(src_offsets), -1, dtype=np.int64)
        for i, (so, sn, do, dn) in enumerate(zip(src_offsets, src_nbytes, dst_offsets, dst_nbytes, strict=True)):
            try:
                decoded = codec.decode(nvcomp.as_array(src[so : so + sn]))
                data = cupy.asarray(decoded).reshape(-1).view(cupy.uint8)
            except Exception as exc:
                _reraise_device_errors(exc)
                logger.debug("gpuzarr: nvCOMP could not decode a stream: %s", exc)
                continue
            if data.size <= dn:
                dst[do : do + data.size] = data
                sizes[i] = data.size
        return sizes

    def copy_spans(
        self, src: Any, src_offsets: Sequence[int], dst: Any, dst_offsets: Sequence[int], nbytes: Sequence[int]
    ) -> None:
        """One asynchronous device-to-device memcpy per span, on the current stream."""
        runtime = self._cupy().cuda.runtime
        stream = int(self._stream().ptr)
        src_base, dst_base = int(src.data.ptr), int(dst.data.ptr)
        for so, do, n in zip(src_offsets, dst_offsets, nbytes, strict=True):
            if so < 0 or do < 0 or so + n > src.size or do + n > dst.size:
                raise ValueError(f"copy of {n} bytes from {so} to {do} leaves its buffer")
            if n:
                runtime.memcpyAsync(dst_base + do, src_base + so, n, runtime.memcpyDeviceToDevice, stream)

    def checksums(self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]) -> list[int]:
        views = [buffer[o : o + n] for o, n in zip(offsets, nbytes, strict=True)]
        sums = kernels.launch_checksums(kind, views, np.asarray(nbytes, dtype=np.int64))
        return [int(v) for v in sums.get().tolist()]

    # -- kernels ---------------------------------------------------------------------------------

    def launch_unshuffle(
        self,
        kernel: str,
        buffer: Any,
        src_offsets: Sequence[int],
        dst_offsets: Sequence[int],
        nbytes: Sequence[int],
        typesizes: Sequence[int],
        partial_rule: int,
    ) -> None:
        kernels.launch_unshuffle(
            kernel,
            [buffer[o : o + n] for o, n in zip(src_offsets, nbytes, strict=True)],
            [buffer[o : o + n] for o, n in zip(dst_offsets, nbytes, strict=True)],
            nbytes,
            typesizes,
            partial_rule=partial_rule,
        )

    def launch_assemble(self, out: Any, work: Any, launch: AssembleLaunch) -> None:
        cupy = self._cupy()
        if not out.flags.c_contiguous:
            raise ValueError("assemble: the output must be C-contiguous")
        check_assemble_launch(launch, out.nbytes, work.size)
        if out.size == 0 or launch.nchunks == 0:
            return
        base = work.data.ptr
        pointers = np.array([0 if o < 0 else base + o for o in launch.source_offsets.tolist()], dtype=np.uint64)
        largest = int(launch.extents[:, : launch.ndim].prod(axis=1).max()) if launch.ndim else 1
        block = kernels.BLOCK_THREADS
        grid = (
            max(1, min(-(-largest // block), kernels.MAX_GRID_X)),
            max(1, min(launch.nchunks, kernels.MAX_GRID_Y)),
            1,
        )
        kernels.get_kernel("assemble_chunks")(
            grid,
            (block,),
            (
                out,
                cupy.asarray(launch.out_strides),
                cupy.asarray(pointers),
                cupy.asarray(launch.src_strides),
                cupy.asarray(launch.src_offsets),
                cupy.asarray(launch.src_steps),
                cupy.asarray(launch.dst_offsets),
                cupy.asarray(launch.extents),
                cupy.asarray(launch.fill_value),
                np.int32(launch.nchunks),
                np.int32(launch.ndim),
                np.int32(launch.itemsize),
                np.int32(launch.swap_width),
            ),
        )


def _peek_index(
    size: int, offsets: Sequence[int], nbytes: Sequence[int], width: int, take: Callable[[Any], Any]
) -> npt.NDArray[np.uint8]:
    """``take(flat indices)`` of the first ``width`` bytes of each span, zeroed past its end."""
    start = np.asarray(offsets, dtype=np.int64).reshape(-1, 1)
    length = np.asarray(nbytes, dtype=np.int64).reshape(-1, 1)
    if start.size and (start.min() < 0 or (start + length).max() > size):
        raise ValueError(f"peek: a span leaves the {size}-byte buffer")
    column = np.arange(width, dtype=np.int64).reshape(1, -1)
    inside = column < length
    index = np.where(inside, start + column, 0)
    if size == 0:
        return np.zeros(index.shape, dtype=np.uint8)
    got = np.asarray(take(index.reshape(-1)), dtype=np.uint8).reshape(index.shape)
    return np.where(inside, got, 0).astype(np.uint8)


_logged_notes: set[str] = set()


def _log_once(note: str) -> None:
    if note not in _logged_notes:
        _logged_notes.add(note)
        logger.info("gpuzarr: %s", note)


def _reraise_device_errors(exc: Exception) -> None:
    """Out-of-memory and CUDA errors are not corrupt data: let them through."""
    if isinstance(exc, MemoryError):
        raise exc
    cupy = kernels.import_cupy()
    if isinstance(exc, (cupy.cuda.memory.OutOfMemoryError, cupy.cuda.runtime.CUDARuntimeError)):
        raise exc


def _nvcomp() -> Any:
    try:
        from nvidia import nvcomp
    except ImportError as exc:
        raise ImportError(f"gpuzarr's GPU decoders need nvidia-nvcomp; {kernels.GPU_EXTRA_HINT}") from exc
    return nvcomp


__all__ = [
    "CpuEmulatedDevice",
    "CudaDevice",
    "Device",
    "as_cupy_stream",
    "execute",
    "fetch_batch",
    "read_gpu_plan",
    "run_batch",
]
