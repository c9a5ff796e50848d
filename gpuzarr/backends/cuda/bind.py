"""Binding one batch of a GpuReadPlan to its bytes: everything decided once the encoded bytes
(or the file spans the device reads itself) are known, still on the host and pure.

:func:`bind_batch` checks and strips crc32c, splits every chunk into raw nvCOMP streams
(``streams``), lays the streams out in one host staging buffer and the decoded chunks (and
Blosc's shuffled scratch) in one device work buffer, all at 8-byte aligned offsets, groups the
streams per nvCOMP algorithm, lists the Blosc blocks to un-shuffle, decodes CPU-fallback chunks
(in parallel) into the staging buffer, and fills the ``assemble_chunks`` arguments in exactly
the layout of kernels/assemble.cu. Every launch is validated with the ``check_*`` functions of
:mod:`.launch_checks` before a device sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from ...codecs.base import as_uint8
from ...codecs.crc32c import crc32c
from ...errors import ChunkNotFoundError, CorruptChunkError
from ...layout import ArrayLayout
from ...parallel import run_tasks
from ...store.base import Buffer
from . import launch_checks
from .gpu_plan import MAX_NDIM, ChunkTask, GpuReadPlan, align
from .launches import (
    AssembleLaunch,
    BoundBatch,
    ChecksumCheck,
    FileRead,
    FileSpan,
    HostDecoded,
    StreamGroup,
    UnshuffleLaunch,
    check_assemble_launch,
)
from .routes import reads_directly
from .streams import SplitChunk, UnsupportedStreamError, split_chunk


def _swap_bytes(data: npt.NDArray[np.uint8], itemsize: int, width: int) -> npt.NDArray[np.uint8]:
    groups = data.reshape(-1, itemsize // width, width)
    return np.ascontiguousarray(groups[..., ::-1]).reshape(-1)


def _host_decode(
    layout: ArrayLayout, plan: GpuReadPlan, task: ChunkTask, raw: Buffer
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
    layout: ArrayLayout, plan: GpuReadPlan, t: int, offset: int, data: npt.NDArray[np.uint8], reason: str
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
    layout: ArrayLayout,
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
        launch_checks.check_blocks(
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
