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

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError
from ...store.local import LocalStore
from .bind import bind_batch, decode_on_host
from .device import CopyEvent, Device, read_file_span, uses_direct_reads
from .fetch import fetch_batch, file_version
from .gpu_plan import ALIGNMENT, GpuReadPlan
from .launches import BoundBatch, ChecksumCheck, FileSpan, StreamGroup

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...layout import ArrayLayout
    from ...store.base import Store
    from ...store.sharding import ShardIndex
    from .device import ChecksumKind, PendingSizes

logger = logging.getLogger("gpuzarr")


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

    The host prepares batch k+1 (reads, stream splitting, launch arguments) on a helper thread
    while the device works on batch k. ``on_fallback`` hears each reason a chunk is decoded on
    the CPU (once per reason and read; it may raise to stop the read); by default it is logged.
    Host staging buffers come from the device's :class:`.device.StagingPool` (grown up to
    ``budget``, the batch budget) and go back to it once their batch has run, with the event of
    the copy that reads them: the pool hands a block out again only after that copy has
    finished, and nothing else waits for it, so batch k+1's copy overlaps batch k's decode. At
    most two are in use per read.
    """
    indexes: dict[str, ShardIndex | None] = {}
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

    staging = device.staging

    def host_empty(nbytes: int) -> npt.NDArray[np.uint8]:
        return staging.acquire(nbytes, budget)

    def prepare(batch: int) -> BoundBatch:
        # The helper thread needs the device current too (pinned staging memory is allocated
        # in its context).
        with device.activate():
            encoded = fetch_batch(layout, store, plan, batch, indexes, direct=direct)
            return bind_batch(layout, plan, batch, encoded, host_empty)

    def run(bound: BoundBatch) -> None:
        # The host-to-device copy may still be reading the staging buffer when run_batch
        # returns: the pool waits for its event before the buffer serves another batch.
        copied: list[CopyEvent] = []
        try:
            for decoded in bound.host_decoded:
                fallback(decoded.reason)
            run_batch(plan, bound, device, out, layout=layout, on_fallback=fallback, on_copied=copied.append)
        finally:
            staging.release(bound.staging, copied[0] if copied else None)

    nbatches = len(plan.batches)
    if nbatches == 1:
        run(prepare(0))
        return
    prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuzarr-prefetch")
    pending: Future[BoundBatch] | None = None
    try:
        next_batch = pending = prefetch.submit(prepare, 0)
        for batch in range(nbatches):
            bound = next_batch.result()
            pending = None
            if batch + 1 < nbatches:
                next_batch = pending = prefetch.submit(prepare, batch + 1)
            run(bound)
    finally:
        # On an error, do not wait for the next batch to be read and bound for nothing.
        prefetch.shutdown(wait=True, cancel_futures=True)
        if pending is not None and pending.done() and not pending.cancelled() and pending.exception() is None:
            staging.release(pending.result().staging)


def run_batch(
    plan: GpuReadPlan,
    bound: BoundBatch,
    device: Device,
    out: Any,
    *,
    layout: ArrayLayout | None = None,
    on_fallback: Callable[[str], None] | None = None,
    on_copied: Callable[[CopyEvent], None] | None = None,
) -> None:
    """The device work of one bound batch: copy, read files, decompress, verify, un-shuffle,
    assemble. ``on_copied`` hears the event of the staging copy as soon as it is started:
    ``bound.staging`` must not change until that event has completed.

    A stream the device fails to decode (or whose checksum differs) does not prove the chunk
    corrupt: the CPU engine is the reference. With ``layout`` given, such chunks are decoded on
    the CPU, which raises CorruptChunkError naming the key when the chunk really is corrupt, and
    the result replaces the device's before the assemble launch (``on_fallback`` hears why).
    """
    staging = device.alloc(max(bound.staging_nbytes, ALIGNMENT))
    if bound.staging.size:
        event = device.copy_host_to_device(bound.staging, staging)
        if on_copied is not None:
            on_copied(event)
    work = device.alloc(max(bound.work_nbytes, ALIGNMENT))
    if bound.file_reads:
        _read_files(plan, bound, device, staging, work)
    failed: dict[int, str] = {}  # task -> what the device said
    pending = _decompress(bound, device, staging, work, failed)
    sums = _queue_checksums(bound, device, work, failed)
    if pending or sums:
        # The one host wait of a batch: every decode and checksum is queued, and what follows
        # (un-shuffles, the CPU's chunks, the assemble) depends on which streams failed.
        device.synchronize()
    for group, sizes in pending:
        _note_wrong_sizes(group, sizes(), failed)
    for checks, values in sums:
        _note_checksum_mismatches(checks, values(), failed)
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


def _read_files(plan: GpuReadPlan, bound: BoundBatch, device: Device, staging: Any, work: Any) -> None:
    """The device's file reads of a batch; a short read, or a file replaced since the host
    checked it, raises CorruptChunkError naming the chunk."""
    got_bytes = device.read_files(bound.file_reads, staging, work)
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


def _decompress(
    bound: BoundBatch, device: Device, staging: Any, work: Any, failed: dict[int, str]
) -> list[tuple[StreamGroup, PendingSizes]]:
    """Queue one batched decode per nvCOMP algorithm (a copy for stored streams); returns each
    group with the callable that gives its streams' sizes once the device has synchronised."""
    pending: list[tuple[StreamGroup, PendingSizes]] = []
    for algorithm, whole_group in bound.groups.items():
        # Frames the host already knows are bad never reach nvCOMP (undefined behaviour on
        # corrupt input); the CPU decodes their chunks below.
        group = _without_failed(whole_group, failed)
        if not group.owners:
            continue
        if algorithm == "copy":
            device.copy_spans(staging, group.src_offsets, work, group.dst_offsets, group.src_nbytes)
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


def _note_wrong_sizes(group: StreamGroup, sizes: npt.NDArray[np.int64], failed: dict[int, str]) -> None:
    """Mark in ``failed`` the task of each stream that decoded to the wrong size (or failed)."""
    got = np.asarray(sizes, dtype=np.int64)
    expected = np.asarray(group.dst_nbytes, dtype=np.int64)
    for s in np.flatnonzero(got != expected).tolist():
        what = "failed" if got[s] < 0 else f"gave {int(got[s])} bytes"
        message = f"{group.algorithm} stream {s} of the batch {what}, expected {int(expected[s])}"
        failed.setdefault(group.owners[s], message)


def _without_failed(group: StreamGroup, failed: dict[int, str]) -> StreamGroup:
    """``group`` without the streams of tasks in ``failed``."""
    if not failed or not any(t in failed for t in group.owners):
        return group
    keep = [i for i, t in enumerate(group.owners) if t not in failed]
    return StreamGroup(
        group.algorithm,
        [group.src_offsets[i] for i in keep],
        [group.src_nbytes[i] for i in keep],
        [group.dst_offsets[i] for i in keep],
        [group.dst_nbytes[i] for i in keep],
        [group.owners[i] for i in keep],
    )


def _check_files_unchanged(plan: GpuReadPlan, bound: BoundBatch) -> None:
    """Raise CorruptChunkError when a file the device has just read is no longer the file whose
    structure the host checked (``FileSpan.version``: inode and modification time): a writer
    replaced or rewrote it meanwhile, so its bytes may not be the frames that were walked, and
    must not reach nvCOMP (undefined behaviour on corrupt input). Costs one ``stat`` per file,
    not a device round trip."""
    seen: dict[str, tuple[int, int] | None] = {}
    for read in bound.file_reads:
        span = read.span
        if span.path not in seen:
            found = file_version(span.path)
            seen[span.path] = None if found is None else found[1]
        if seen[span.path] != span.version:
            task = plan.tasks[read.task]
            raise CorruptChunkError(
                task.key, f"{task.where}the file changed while it was being read ({span.path}); read it again"
            )


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
    data = read_file_span(span)
    if len(data) != span.nbytes:
        raise CorruptChunkError(key, f"the file ended after {len(data)} of {span.nbytes} bytes")
    return np.frombuffer(data, dtype=np.uint8)


__all__ = ["execute", "run_batch"]
