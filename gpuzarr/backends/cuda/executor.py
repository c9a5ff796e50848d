"""Execute a GpuReadPlan through a device object (:class:`.device.Device`).

The executor holds the order of work and nothing device-specific. Per batch, on a helper thread
while the device works on the previous batch, it reads the encoded bytes on the host
(:func:`.fetch.fetch_batch`), then binds them to the plan (``bind.bind_batch``: streams, staging
layout, kernel arguments, all validated). On the device (:func:`run_batch`): one host-to-device
copy of the staging buffer, the file reads, one batched decompression per nvCOMP algorithm,
checksums, one host wait for the decoded sizes and checksums, the Blosc un-shuffles and one
assemble launch.

Chunks the GPU has no decoder for (see ``routes.decode_route``) are decoded on the CPU while the
batch is bound, and chunks whose structure the host finds malformed (``streams``) are rejected
then; chunks whose streams the device fails are left out of their batch when the host already
knows, and decoded on the CPU afterwards, which decides whether they are corrupt. Each reason is
reported once per read. docs/gpu.md lists what is verified where.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError
from ...store.base import os_failure
from ...store.local import FileVersion, LocalStore, same_bytes
from ...store.sharding import SHARD_READ_ATTEMPTS
from .bind import bind_batch, decode_on_host
from .device import Device, DeviceEvent, read_file_span, uses_direct_reads
from .fetch import fetch_batch, file_version
from .gpu_plan import ALIGNMENT, GpuReadPlan
from .launches import BoundBatch, ChecksumCheck, FileChanged, FileSpan, StreamGroup, merged_copies, span_read_failure
from .phases import phase

if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping

    from ...layout import ArrayLayout
    from ...store.base import Store
    from ...store.sharding import ShardIndex
    from .device import ChecksumKind, PendingSizes

logger = logging.getLogger("gpuzarr")


@dataclass
class PreparedBatch:
    """A bound batch whose device buffers are filled or being filled: ``staging`` and ``work``
    come from the device's buffer pool; ``copied`` is the event of the upload of the host
    staging buffer into ``staging`` (None: nothing to upload); the device's own file reads have
    finished."""

    bound: BoundBatch
    staging: Any
    work: Any
    copied: DeviceEvent | None


#: the helper threads that prepare the next batch of each multi-batch read (made on first use)
_prefetch_pool: ThreadPoolExecutor | None = None
_prefetch_lock = threading.Lock()
#: reads whose next batch can be prepared at once; a read beyond them waits for a free thread
PREFETCH_THREADS = 8
#: preparations of a batch whose files change while the device reads them, before giving up
#: (as many as the CPU path's reads of a shard rewritten in place)
FILE_READ_ATTEMPTS = SHARD_READ_ATTEMPTS


def _prefetcher() -> ThreadPoolExecutor:
    global _prefetch_pool
    with _prefetch_lock:
        if _prefetch_pool is None:
            _prefetch_pool = ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="gpuzarr-prefetch")
        return _prefetch_pool


def execute(
    layout: ArrayLayout,
    store: Store,
    plan: GpuReadPlan,
    device: Device,
    out: Any,
    *,
    on_fallback: Callable[[str], None] | None = None,
    budget: int | None = None,
) -> None:
    """Run every batch of ``plan`` into ``out`` (a C-contiguous device array of the plan's shape).

    While the device works on batch k, a helper thread prepares batch k+1 (:func:`prepare`):
    host reads, stream splitting and launch arguments, then the upload of its host staging
    buffer on the device's copy stream and the device's own file reads (kvikio), so neither
    sits on the batch's critical path. ``on_fallback`` hears each reason a chunk is decoded on
    the CPU (once per reason and read; it may raise to stop the read); by default it is logged.

    Buffers come from pools (:class:`.device.StagingPool`, grown up to ``budget``, the batch
    budget): host staging from ``device.staging``, device staging and work from
    ``device.buffers``. Each goes back with the event after which nothing reads it (the upload,
    or the batch's last kernel), and serves again only once that event has completed.
    """
    # The array's shard indexes (used again where the shard's version confirms them) under
    # this read's own.
    indexes = layout.shard_indexes.for_read()
    direct = isinstance(store, LocalStore) and uses_direct_reads(device)
    reported: set[str] = set()

    def fallback(reason: str) -> None:
        if reason in reported:
            return
        reported.add(reason)
        if on_fallback is not None:
            on_fallback(reason)
        else:
            logger.info("gpuzarr: decoding on the CPU and copying to the GPU: %s", reason)

    def prepare_batch(batch: int) -> PreparedBatch:
        # The helper thread needs the device current too (pinned staging memory is allocated
        # in its context, and the device's buffers on its stream).
        with device.activate():
            return prepare(layout, store, plan, batch, device, indexes=indexes, direct=direct, budget=budget)

    def run(prepared: PreparedBatch) -> None:
        try:
            for decoded in prepared.bound.host_decoded:
                fallback(decoded.reason)
            run_batch(plan, prepared, device, out, layout=layout, on_fallback=fallback)
        finally:
            release(device, prepared, device.record())

    nbatches = len(plan.batches)
    if nbatches == 1:
        run(prepare_batch(0))
        return
    prefetch = _prefetcher()
    pending: Future[PreparedBatch] | None = prefetch.submit(prepare_batch, 0)
    try:
        for batch in range(nbatches):
            assert pending is not None  # submitted for every batch before its turn
            with phase("batch-wait"):
                prepared = pending.result()
            pending = prefetch.submit(prepare_batch, batch + 1) if batch + 1 < nbatches else None
            run(prepared)
    finally:
        # On an error, stop the next batch if it has not started; else wait for it (its buffers
        # are in use until it returns) and give them back.
        if pending is not None and not pending.cancel():
            with contextlib.suppress(Exception):
                release(device, pending.result(), None)


def prepare(
    layout: ArrayLayout,
    store: Store,
    plan: GpuReadPlan,
    batch: int,
    device: Device,
    *,
    indexes: MutableMapping[str, ShardIndex | None] | None = None,
    direct: bool = False,
    budget: int | None = None,
) -> PreparedBatch:
    """Read, bind and upload one batch, and run the device's file reads: everything of a batch
    that does not wait for the batch before it.

    A file that changed while the device read it (see :func:`_check_files_unchanged`) has the
    batch prepared again from the host's reads on, at most ``FILE_READ_ATTEMPTS`` times in all,
    as the CPU path reads a shard rewritten in place again: a writer replacing a chunk, or a
    chown, meanwhile costs a second read, not the read."""
    for _ in range(FILE_READ_ATTEMPTS - 1):
        with contextlib.suppress(FileChanged):
            return _prepare_once(layout, store, plan, batch, device, indexes, direct, budget)
    try:
        return _prepare_once(layout, store, plan, batch, device, indexes, direct, budget)
    except FileChanged as changed:
        reason = f"{changed.reason} during each of {FILE_READ_ATTEMPTS} reads of it"
        raise CorruptChunkError(changed.key, reason) from None


def _prepare_once(
    layout: ArrayLayout,
    store: Store,
    plan: GpuReadPlan,
    batch: int,
    device: Device,
    indexes: MutableMapping[str, ShardIndex | None] | None,
    direct: bool,
    budget: int | None,
) -> PreparedBatch:
    with phase("fetch"):
        encoded = fetch_batch(layout, store, plan, batch, indexes, direct=direct)
    with phase("bind"):
        bound = bind_batch(layout, plan, batch, encoded, lambda nbytes: device.staging.acquire(nbytes, budget))
    buffers = device.buffers
    staging = work = None
    copied: DeviceEvent | None = None
    try:
        with phase("buffers"):
            staging = buffers.acquire(max(bound.staging_nbytes, ALIGNMENT), budget)
            work = buffers.acquire(max(bound.work_nbytes, ALIGNMENT), budget)
        if bound.staging.size:
            with phase("upload"):
                copied = device.upload(bound.staging, staging)
        prepared = PreparedBatch(bound, staging, work, copied)
        if bound.file_reads:
            with phase("file-reads"):
                _read_files(plan, bound, device, staging, work)
    except BaseException:
        # The upload may still be running: every buffer goes back with its event.
        device.staging.release(bound.staging, copied)
        for buffer in (staging, work):
            if buffer is not None:
                buffers.release(buffer, copied)
        raise
    return prepared


def release(device: Device, prepared: PreparedBatch, done: DeviceEvent | None) -> None:
    """Give a batch's buffers back to their pools: the host staging buffer once its upload has
    finished, the device buffers once ``done`` (the batch's last work) has."""
    device.staging.release(prepared.bound.staging, prepared.copied)
    device.buffers.release(prepared.staging, done or prepared.copied)
    device.buffers.release(prepared.work, done or prepared.copied)


def run_batch(
    plan: GpuReadPlan,
    prepared: PreparedBatch,
    device: Device,
    out: Any,
    *,
    layout: ArrayLayout | None = None,
    on_fallback: Callable[[str], None] | None = None,
) -> None:
    """The device work of one prepared batch: wait for its upload (on the device, not the
    host), decompress, verify, un-shuffle, assemble.

    A stream the device fails to decode (or whose checksum differs) does not prove the chunk
    corrupt: the CPU engine is the reference. With ``layout`` given, such chunks are decoded on
    the CPU, which raises CorruptChunkError naming the key when the chunk really is corrupt, and
    the result replaces the device's before the assemble launch (``on_fallback`` hears why).
    """
    bound, staging, work = prepared.bound, prepared.staging, prepared.work
    if prepared.copied is not None:
        device.wait_for(prepared.copied)
    failed: dict[int, str] = {}  # task -> what the device said
    with phase("queue-decode"):
        pending = _decompress(bound, device, staging, work)
        walks = _queue_lz4_checks(pending, device, staging)
        sums = _queue_checksums(bound, device, work, failed)
    if pending or sums:
        # The one host wait of a batch: every decode and checksum is queued, and what follows
        # (un-shuffles, the CPU's chunks, the assemble) depends on which streams failed.
        with phase("device-wait"):
            device.synchronize()
    for group, verdicts in walks:
        _note_malformed_lz4(group, verdicts(), failed)
    for group, sizes in pending:
        _note_wrong_sizes(group, sizes(), failed)
    for checks, values in sums:
        _note_checksum_mismatches(checks, values(), failed)
    with phase("unshuffle"):
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
        with phase("cpu-fallback"):
            _decode_failed_on_cpu(plan, bound, device, work, failed, layout, on_fallback)
    if bound.assemble.nchunks:
        with phase("assemble"):
            device.launch_assemble(out, work, bound.assemble)


def _read_files(plan: GpuReadPlan, bound: BoundBatch, device: Device, staging: Any, work: Any) -> None:
    """The device's file reads of a batch; a short read, or a file replaced since the host
    checked it, raises CorruptChunkError naming the chunk."""
    try:
        got_bytes = device.read_files(bound.file_reads, staging, work)
    except OSError as exc:
        # The read of the file the system refused: devices name its path in the error.
        read = next((r for r in bound.file_reads if r.span.path == exc.filename), None)
        failure: Exception
        if read is None:  # not known: the store, and no chunk, is named
            first = bound.file_reads[0].span
            failure = os_failure(first.store_url or first.path, None, "read a chunk file", exc)
        else:
            task = plan.tasks[read.task]
            failure = span_read_failure(read.span, task.key, task.where, exc)
        if failure is exc:
            raise
        raise failure from exc
    _check_files_unchanged(plan, bound)  # a replaced file also explains a short read
    for read, n in zip(bound.file_reads, got_bytes, strict=True):
        if n == read.span.nbytes:
            continue
        for part in read.chunks():  # the first chunk the short read did not cover
            got = n - (part.offset - read.offset)
            if n < 0 or got < part.span.nbytes:
                task = plan.tasks[part.task]
                what = "could not be read" if n < 0 else f"ended after {max(got, 0)} of {part.span.nbytes} bytes"
                raise CorruptChunkError(task.key, f"{task.where}the file {what} at offset {part.span.offset}")


def _queue_checksums(
    bound: BoundBatch, device: Device, work: Any, failed: dict[int, str]
) -> list[tuple[list[ChecksumCheck], Callable[[], list[int]]]]:
    """Queue the CRC-32 / Adler-32 kernels of a batch (streams already known bad left out)."""
    sums: list[tuple[list[ChecksumCheck], Callable[[], list[int]]]] = []
    kinds: tuple[ChecksumKind, ...] = ("crc32", "adler32")
    for kind in kinds:
        checks = [c for c in bound.checksums if c.checksum.kind == kind and c.task not in failed]
        if checks:
            values = device.checksums(kind, work, [c.offset for c in checks], [c.nbytes for c in checks])
            sums.append((checks, values))
    return sums


def _note_checksum_mismatches(checks: list[ChecksumCheck], values: list[int], failed: dict[int, str]) -> None:
    for check, value in zip(checks, values, strict=True):
        stored = check.checksum.value
        if value != stored:
            what = f"{check.checksum.kind} mismatch: stored {stored:#010x}, computed {value:#010x}"
            failed.setdefault(check.task, what)


def _decompress(bound: BoundBatch, device: Device, staging: Any, work: Any) -> list[tuple[StreamGroup, PendingSizes]]:
    """Queue one batched decode per nvCOMP algorithm (a copy for stored streams); returns each
    group with the callable that gives its streams' sizes once the device has synchronised.

    Frames the host finds malformed never get here: binding the batch raised CorruptChunkError
    for them (nvCOMP's behaviour on corrupt input is undefined)."""
    pending: list[tuple[StreamGroup, PendingSizes]] = []
    for algorithm, group in bound.groups.items():
        if not group.owners:
            continue
        if algorithm == "copy":
            src_offsets, dst_offsets, nbytes = merged_copies(group.src_offsets, group.dst_offsets, group.src_nbytes)
            device.copy_spans(staging, src_offsets, work, dst_offsets, nbytes)
            continue
        sizes = device.decompress_batch(
            algorithm,
            staging,
            group.src_offsets,
            group.src_nbytes,
            work,
            group.dst_offsets,
            group.dst_nbytes,
        )
        pending.append((group, sizes))
    return pending


def _queue_lz4_checks(
    pending: list[tuple[StreamGroup, PendingSizes]], device: Device, staging: Any
) -> list[tuple[StreamGroup, Callable[[], list[int]]]]:
    """Queue the walk of every LZ4 stream of a batch (kernels/lz4_check.cu) beside its decode.

    nvCOMP's LZ4 decoder reports no error for a truncated or corrupt block (it fills the output
    and returns the full size, seen on an H100 with nvCOMP 6.0), so a stream is trusted only when
    its walk finds the block well formed and decoding to its expected size. The walk only reads
    the compressed bytes, so it runs in the same queue as the decode, and its verdicts are read
    after the batch's one host wait."""
    return [
        (group, device.check_lz4(staging, group.src_offsets, group.src_nbytes, group.dst_nbytes))
        for group, _ in pending
        if group.algorithm == "lz4" and group.owners
    ]


def _note_malformed_lz4(group: StreamGroup, verdicts: list[int], failed: dict[int, str]) -> None:
    for s, verdict in enumerate(verdicts):
        if verdict >= 0:
            what = f"is malformed at byte {verdict}, or does not decode to {group.dst_nbytes[s]} bytes"
            failed.setdefault(group.owners[s], f"lz4 stream {s} of the batch {what}")


def _note_wrong_sizes(group: StreamGroup, sizes: npt.NDArray[np.int64], failed: dict[int, str]) -> None:
    """Mark in ``failed`` the task of each stream that decoded to the wrong size (or failed)."""
    got = np.asarray(sizes, dtype=np.int64)
    expected = np.asarray(group.dst_nbytes, dtype=np.int64)
    for s in np.flatnonzero(got != expected).tolist():
        what = "failed" if got[s] < 0 else f"gave {int(got[s])} bytes"
        message = f"{group.algorithm} stream {s} of the batch {what}, expected {int(expected[s])}"
        failed.setdefault(group.owners[s], message)


def _check_files_unchanged(plan: GpuReadPlan, bound: BoundBatch) -> None:
    """Raise FileChanged when a file the device has just read is no longer the file whose
    structure the host checked (``FileSpan.version``; ``store.local.same_bytes`` compares): a
    writer replaced or rewrote it meanwhile, so its bytes may not be the frames that were
    walked, and must not reach nvCOMP (undefined behaviour on corrupt input). A chmod or a
    new link meanwhile leaves the bytes alone and passes; what moves only the change time
    (a chown, an access time set, an extended attribute) cannot be told from a rewrite that
    put the modification time back, and has the batch read again. Costs one ``stat`` per
    file, not a device round trip."""
    seen: dict[str, FileVersion | None] = {}
    for read in bound.file_reads:
        span = read.span
        if span.path not in seen:
            try:
                found = file_version(span.path)
            except OSError:  # no longer ours to look at (a chmod): read again, where the host says why
                found = None
            seen[span.path] = None if found is None else found[1]
        now = seen[span.path]
        if now is None or span.version is None or not same_bytes(span.version, now):
            task = plan.tasks[read.task]
            raise FileChanged(task.key, f"{task.where}the file changed while it was being read ({span.path})")


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
        # Pageable arrays of their own, which nothing else writes: no event to wait for.
        device.copy_host_to_device(chunk.data, work, chunk.offset)


def _read_span(key: str, span: FileSpan) -> npt.NDArray[np.uint8]:
    try:
        data = read_file_span(span)
    except OSError as exc:  # after the batch was read: too late to read it again
        raise os_failure(span.store_url or span.path, key, f"read {span.path}", exc) from exc
    if len(data) != span.nbytes:
        raise CorruptChunkError(key, f"the file ended after {len(data)} of {span.nbytes} bytes")
    return np.frombuffer(data, dtype=np.uint8)


__all__ = ["PreparedBatch", "execute", "prepare", "release", "run_batch"]
