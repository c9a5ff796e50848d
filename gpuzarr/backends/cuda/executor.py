"""Execute a GpuReadPlan through a device object.

The executor holds the order of work and nothing device-specific. Per batch, on a helper thread
while the device works on the previous batch, it reads the encoded bytes on the host (shard
indexes first, then coalesced inner-chunk ranges, through ``store.sharding``), or, for zstd and
uncompressed chunks in local files, lists the file spans the device reads itself (kvikio); then
it binds them to the plan (``bind.bind_batch``: streams, staging layout, kernel arguments, all
validated). On the device: one host-to-device copy of the staging buffer, the file reads, one
batched decompression per nvCOMP algorithm, checksums, the Blosc un-shuffles and one assemble
launch. A device is any object with the methods of :class:`Device`:

* ``emulated.CpuEmulatedDevice`` — NumPy buffers, CPU decoders of each nvCOMP bitstream (zstd
  frames, raw deflate, LZ4 blocks) and the NumPy kernel models of ``kernel_reference``. CI runs
  the whole host side through it against the CPU engine.
* ``cuda_device.CudaDevice`` — CuPy buffers, kvikio reads, nvCOMP's batched decoders and the
  kernels of kernels/*.cu.

Chunks the GPU has no decoder for (see ``plan.decode_route``) are decoded on the CPU while the
batch is bound; chunks whose streams the device fails are decoded on the CPU afterwards, and
only the CPU calls a chunk corrupt. Each reason is reported once per read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ...codecs.zstd import frame_content_size
from ...errors import CorruptChunkError
from ...layout import ArrayLayout
from ...parallel import run_tasks
from ...plan.selection import SelectionPlan
from ...store.base import Buffer, Store
from ...store.local import LocalStore
from ...store.sharding import ShardIndex, read_inner_chunks, read_shard_index
from .bind import bind_batch, decode_on_host, reads_directly
from .launches import AssembleLaunch, BoundBatch, FileRead, FileSpan
from .plan import ALIGNMENT, BATCH_BYTES, ChunkTask, GpuReadPlan, build_gpu_read_plan

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

    def checksums(self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]) -> list[int]:
        """CRC-32 / Adler-32 of spans of ``buffer``."""

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
    layout: ArrayLayout,
    store: Store,
    plan: SelectionPlan,
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
    layout: ArrayLayout,
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
    the CPU (once per reason and read; it may raise to stop the read); by default it is logged.
    """
    indexes: dict[str, ShardIndex | None] = {}
    direct = device.reads_files and isinstance(store, LocalStore)
    reported: set[str] = set()

    def fallback(reason: str) -> None:
        if reason in reported:
            return
        reported.add(reason)
        if on_fallback is not None:
            on_fallback(reason)
        else:
            logger.info("gpuzarr: decoding on the CPU and copying to the GPU: %s", reason)

    def prepare(batch: int) -> BoundBatch:
        # The helper thread needs the device current too (pinned staging memory is allocated
        # in its context).
        with device.activate():
            encoded = fetch_batch(layout, store, plan, batch, indexes, direct=direct)
            return bind_batch(layout, plan, batch, encoded, getattr(device, "host_empty", None))

    def run(bound: BoundBatch) -> None:
        for decoded in bound.host_decoded:
            fallback(decoded.reason)
        run_batch(plan, bound, device, out, layout=layout, on_fallback=fallback)

    nbatches = len(plan.batches)
    if nbatches == 1:
        run(prepare(0))
        return
    prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuzarr-prefetch")
    try:
        pending: Future[BoundBatch] = prefetch.submit(prepare, 0)
        for batch in range(nbatches):
            bound = pending.result()
            if batch + 1 < nbatches:
                pending = prefetch.submit(prepare, batch + 1)
            run(bound)
    finally:
        # On an error, do not wait for the next batch to be read and bound for nothing.
        prefetch.shutdown(wait=True, cancel_futures=True)


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
    layout: ArrayLayout,
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
            path = local.path_of(key)
            found = _stat(path)
            if found is None:
                raise CorruptChunkError(key, "shard disappeared while it was being read")
            return [(i, _inner_span(key, path, found, index, tasks[i])) for i in members]
        wanted = [tasks[i].inner for i in members]
        blobs = read_inner_chunks(store, key, index, [w for w in wanted if w is not None], shard_layout)
        return list(zip(members, blobs, strict=True))

    result: list[Buffer | FileSpan | None] = [None] * len(tasks)
    for part in run_tasks(fetch, list(by_shard.items())):
        for i, blob in part:
            result[i] = blob
    return result


def _inner_span(
    key: str, path: str, found: tuple[int, tuple[int, int]], index: ShardIndex, task: ChunkTask
) -> FileSpan | None:
    """Where inner chunk ``task.inner`` lies in the shard file (None: empty in the index)."""
    assert task.inner is not None  # a task of a sharded plan
    if index.is_empty(task.inner):
        return None
    size, version = found
    start, n = int(index.offsets[task.inner]), int(index.nbytes[task.inner])
    if start + n > size:
        raise CorruptChunkError(
            key, f"inner chunk {task.inner} (offset {start}, nbytes {n}) lies past the shard end ({size} bytes)"
        )
    return FileSpan(path, start, n, version)


def run_batch(
    plan: GpuReadPlan,
    bound: BoundBatch,
    device: Device,
    out: Any,
    *,
    layout: ArrayLayout | None = None,
    on_fallback: Callable[[str], None] | None = None,
) -> None:
    """The device work of one bound batch: copy, read files, decompress, verify, un-shuffle,
    assemble.

    A stream the device fails to decode (or whose checksum differs) does not prove the chunk
    corrupt: the CPU engine is the reference. With ``layout`` given, such chunks are decoded on
    the CPU, which raises CorruptChunkError naming the key when the chunk really is corrupt, and
    the result replaces the device's before the assemble launch (``on_fallback`` hears why).
    """
    staging = device.alloc(max(bound.staging_nbytes, ALIGNMENT))
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
    layout: ArrayLayout | None,
    on_fallback: Callable[[str], None] | None,
) -> None:
    """Decode the chunks the device failed on the CPU, into their place in ``work``.

    The CPU decodes first: a chunk it cannot decode either raises CorruptChunkError (with what
    the device found), whatever the fallback policy; only then does ``on_fallback`` hear that
    valid data needed the CPU (and may refuse, under strict)."""
    first = min(failed)
    task = plan.tasks[first]
    if layout is None:
        raise CorruptChunkError(task.key, f"{task.where}{failed[first]}")
    reason = f"the device could not decode a chunk ({task.key}: {task.where}{failed[first]})"
    decoded = []
    for t in sorted(failed):
        blob, offset = bound.encoded[t]
        data = _read_span(plan.tasks[t].key, blob) if isinstance(blob, FileSpan) else blob
        try:
            decoded.append(decode_on_host(layout, plan, t, offset, data, reason))
        except CorruptChunkError as exc:  # the CPU agrees: the chunk is corrupt
            raise CorruptChunkError(exc.key, f"{exc.reason} (the device found: {failed[t]})") from exc
    if on_fallback is not None:
        on_fallback(reason)
    else:
        logger.warning("gpuzarr: %s; decoding it on the CPU", reason)
    for chunk in decoded:
        device.copy_host_to_device(chunk.data, work, chunk.offset)


def read_file_span(span: FileSpan) -> bytes:
    """The bytes of ``span`` on the host (fewer when the file is shorter)."""
    with open(span.path, "rb") as f:
        f.seek(span.offset)
        return f.read(span.nbytes)


def _read_span(key: str, span: FileSpan) -> npt.NDArray[np.uint8]:
    data = read_file_span(span)
    if len(data) != span.nbytes:
        raise CorruptChunkError(key, f"the file ended after {len(data)} of {span.nbytes} bytes")
    return np.frombuffer(data, dtype=np.uint8)


def peek_index(
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


__all__ = ["Device", "execute", "fetch_batch", "peek_index", "read_file_span", "read_gpu_plan", "run_batch"]
