"""Binding one batch of a GpuReadPlan to its bytes: everything decided once the encoded bytes
(or the file spans the device reads itself) are known, still on the host and pure.

:func:`bind_batch` checks and strips crc32c, splits every chunk into raw nvCOMP streams
(``streams``), lays the streams out in one host staging buffer and the decoded chunks (and
Blosc's shuffled scratch) in one device work buffer, all at 8-byte aligned offsets (except zstd
frames inside one coalesced read of a shard file, which keep their file layout), groups the
streams per nvCOMP algorithm, lists the Blosc blocks to un-shuffle, decodes CPU-fallback chunks
(in parallel) into the staging buffer, and fills the ``assemble_chunks`` arguments in exactly
the layout of kernels/assemble.cu. Every launch is validated with the ``check_*`` functions of
:mod:`.launch_checks` before a device sees it. The work is done by a small builder with one
method per phase, in that order.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from ...codecs.base import as_uint8
from ...codecs.crc32c import crc32c
from ...errors import ChunkNotFoundError, CorruptChunkError, GpuZarrError
from ...parallel import run_coding_tasks
from ...store.sharding import COALESCE_GAP_BYTES
from . import launch_checks
from .gpu_plan import ALIGNMENT, ChunkTask, GpuReadPlan, align
from .launch_checks import MAX_NDIM
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
    span_read_failure,
)
from .routes import c_strides, reads_directly
from .streams import Algorithm, SplitChunk, UnsupportedStreamError, check_zstd_frame, split_chunk
from .walked_frames import WALKED_FRAMES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ...layout import ArrayLayout
    from ...store.base import Buffer
    from ...store.local import FileVersion


def _swap_bytes(data: npt.NDArray[np.uint8], itemsize: int, width: int) -> npt.NDArray[np.uint8]:
    groups = data.reshape(-1, itemsize // width, width)
    return np.ascontiguousarray(groups[..., ::-1]).reshape(-1)


def _host_decode(layout: ArrayLayout, plan: GpuReadPlan, task: ChunkTask, raw: Buffer) -> npt.NDArray[np.uint8]:
    """The CPU pipeline's decoding of a chunk, as the bytes the device's decode would give: laid
    out as the task's route says (``source_strides``: still transposed where the chunk is stored
    transposed, since the assemble launch reads every chunk of the batch so, those decoded here
    after the device failed on them too) and in the byte order the launch expects (the stored
    order when the launch byte-swaps)."""
    pipeline = layout.pipeline_at(task.coords)
    chunk = pipeline.decode(raw, task.key)
    native = np.ascontiguousarray(chunk).astype(plan.dtype, copy=False)
    strides = task.route.source_strides
    if strides and list(strides) != c_strides(native.shape):
        laid_out = np.empty(native.size, dtype=native.dtype)
        byte_strides = tuple(int(s) * native.itemsize for s in strides)
        np.lib.stride_tricks.as_strided(laid_out, shape=native.shape, strides=byte_strides)[...] = native
        native = laid_out
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
    builder = _BatchBuilder(layout, plan)
    direct: list[tuple[int, FileSpan]] = []
    for t, raw in zip(task_ids, encoded, strict=True):
        task = plan.tasks[t]
        if raw is None:
            if not plan.fill_missing:
                raise ChunkNotFoundError(task.key)
        elif isinstance(raw, FileSpan):
            if not reads_directly(task.route):
                raise ValueError(f"{task.key}: route {task.route.name!r} cannot be read straight from a file")
            host_bytes = _check_direct_frame(task, raw) if task.route.name == "zstd" else None
            if host_bytes is None:
                direct.append((t, raw))
            else:  # a frame a batch cannot hold: read on the host, for the CPU
                builder.add_host_chunk(t, host_bytes)
        else:
            builder.add_host_chunk(t, raw)
    host_decoded = builder.add_cpu_decoded()
    staging = builder.fill_staging(host_empty or _zeros)
    builder.add_file_spans(direct)
    return builder.validate(task_ids, staging, host_decoded)


class _BatchBuilder:
    """The layout of one batch, built phase by phase: host chunks (:meth:`add_host_chunk`), then
    the chunks decoded on the CPU (:meth:`add_cpu_decoded`), then the staging buffer
    (:meth:`fill_staging`), then the spans the device reads from files (:meth:`add_file_span`),
    then the assemble launch and the checks of every launch (:meth:`validate`)."""

    def __init__(self, layout: ArrayLayout, plan: GpuReadPlan) -> None:
        self.layout = layout
        self.plan = plan
        #: (offset, bytes) to copy into the host-filled prefix of the staging buffer
        self.staging_parts: list[tuple[int, npt.NDArray[np.uint8]]] = []
        self.staging_nbytes = 0
        self.work_nbytes = 0
        self.groups: dict[str, StreamGroup] = {}
        self.unshuffles: dict[tuple[str, int], UnshuffleLaunch] = {}
        self.checksums: list[ChecksumCheck] = []
        self.file_reads: list[FileRead] = []
        #: task -> (work offset, nbytes) of its decoded chunk
        self.source_of: dict[int, tuple[int, int]] = {}
        self.encoded_of: dict[int, npt.NDArray[np.uint8] | FileSpan] = {}
        #: (task, work offset, encoded bytes, reason) of the chunks to decode on the CPU
        self.on_host: list[tuple[int, int, npt.NDArray[np.uint8], str]] = []

    def _decoded_slot(self, t: int) -> int:
        """Reserve task ``t``'s decoded chunk in the work buffer; its offset."""
        nbytes = self.plan.tasks[t].decoded_nbytes
        offset = self.work_nbytes
        self.work_nbytes = align(offset + nbytes)
        self.source_of[t] = (offset, nbytes)
        return offset

    def _stage(self, part: npt.NDArray[np.uint8]) -> int:
        """Place ``part`` in the host-filled prefix of the staging buffer; its offset."""
        start = align(self.staging_nbytes)
        self.staging_parts.append((start, part))
        self.staging_nbytes = start + part.size
        return start

    def _add_stream(
        self, algorithm: Algorithm, t: int, src_offset: int, src_nbytes: int, dst_offset: int, dst_nbytes: int
    ) -> None:
        group = self.groups.setdefault(algorithm, StreamGroup(algorithm))
        group.src_offsets.append(src_offset)
        group.src_nbytes.append(src_nbytes)
        group.dst_offsets.append(dst_offset)
        group.dst_nbytes.append(dst_nbytes)
        group.owners.append(t)

    def add_host_chunk(self, t: int, raw: Buffer) -> None:
        """A chunk read on the host: check and strip its crc32c, split it into streams, stage
        them and reserve its decoded chunk (and Blosc's shuffled scratch) in the work buffer; or
        queue it for the CPU when the GPU cannot decode it."""
        task = self.plan.tasks[t]
        data = original = as_uint8(raw)
        self.encoded_of[t] = original
        if task.route.crc32c:
            data = _strip_crc32c(task, data)
        offset = self._decoded_slot(t)
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
            self.on_host.append((t, offset, original, reason or "cpu route"))
            return
        target = self._add_unshuffle(split, offset)
        for stream in split.streams:
            start = self._stage(data[stream.offset : stream.offset + stream.nbytes])
            self._add_stream(
                stream.algorithm, t, start, stream.nbytes, target + stream.decoded_offset, stream.decoded_nbytes
            )
            if stream.checksum is not None:
                decoded_at = target + stream.decoded_offset
                self.checksums.append(ChecksumCheck(t, stream.checksum, decoded_at, stream.decoded_nbytes))
        if split.checksum is not None:
            self.checksums.append(ChecksumCheck(t, split.checksum, offset, split.decoded_nbytes))

    def _add_unshuffle(self, split: SplitChunk, offset: int) -> int:
        """Where the streams of ``split`` decode to: the chunk at ``offset``, or for shuffled
        Blosc frames a scratch span that the un-shuffle launches turn into the chunk."""
        if split.shuffle == "none":
            return offset
        target = self.work_nbytes
        self.work_nbytes = align(target + split.decoded_nbytes)
        kernel: Literal["byte_unshuffle", "bit_unshuffle"] = (
            "byte_unshuffle" if split.shuffle == "byte" else "bit_unshuffle"
        )
        rule = split.partial_rule if kernel == "bit_unshuffle" else 0
        launch = self.unshuffles.setdefault((kernel, rule), UnshuffleLaunch(kernel, rule))
        for block in split.blocks:
            launch.src_offsets.append(target + block.offset)
            launch.dst_offsets.append(offset + block.offset)
            launch.nbytes.append(block.nbytes)
            launch.typesizes.append(split.typesize)
        return target

    def add_cpu_decoded(self) -> list[HostDecoded]:
        """Decode the chunks the GPU cannot decode, here and in parallel, and stage them as
        "copy" streams: they travel in the staging buffer with everything else (one
        host-to-device copy per batch)."""
        host_decoded = run_coding_tasks(
            self.layout.chunk_pipeline, lambda item: decode_on_host(self.layout, self.plan, *item), self.on_host
        )
        for decoded in host_decoded:
            start = self._stage(decoded.data)
            size = decoded.data.size
            self._add_stream("copy", decoded.task, start, size, decoded.offset, size)
        return host_decoded

    def fill_staging(self, host_empty: Callable[[int], npt.NDArray[np.uint8]]) -> npt.NDArray[np.uint8]:
        """The host staging buffer, with every staged part in place."""
        # The bytes between streams are never read; the device's allocator (pinned memory on a
        # GPU) may leave them uninitialised.
        staging = host_empty(align(self.staging_nbytes))
        for start, part in self.staging_parts:
            staging[start : start + part.size] = part
        self.staging_nbytes = staging.size
        return staging

    def add_file_spans(self, direct: Sequence[tuple[int, FileSpan]]) -> None:
        """The chunks the device reads from files: uncompressed chunks straight to their place in
        the work buffer; zstd frames after the host-filled prefix of the staging buffer, where
        frames of one file that lie close together (inner chunks of a shard, gaps of at most
        ``store.sharding.COALESCE_GAP_BYTES``) keep their file layout and are read at once (see
        :func:`_coalesce`). nvCOMP's zstd decoder asks for 1-byte input alignment, so the frames
        inside such a read need not start at multiples of 8. Uncompressed chunks that follow
        each other in a file with no gap, each a multiple of 8 bytes, get places that follow
        each other in the work buffer too and are read at once (:func:`_back_to_back`)."""
        frames: list[tuple[int, FileSpan]] = []
        raw: list[tuple[int, FileSpan]] = []
        for t, span in direct:
            task = self.plan.tasks[t]
            if task.route.name != "raw":
                frames.append((t, span))
                continue
            if span.nbytes != task.decoded_nbytes:
                raise CorruptChunkError(
                    task.key,
                    f"{task.where}uncompressed chunk has {span.nbytes} bytes, expected {task.decoded_nbytes}",
                )
            raw.append((t, span))
        for run in _coalesce(raw):
            for back_to_back in _back_to_back(run):
                self._add_raw_run(back_to_back)
        for run in _coalesce(frames):
            self._add_frame_run(run)

    def _add_raw_run(self, run: list[tuple[int, FileSpan]]) -> None:
        """Uncompressed chunks back to back in one file, as one read into their places in the
        work buffer (which follow each other: each chunk is a multiple of the alignment)."""
        parts: list[FileRead] = []
        for t, span in run:
            self.encoded_of[t] = span
            parts.append(FileRead(t, span, "work", self._decoded_slot(t)))
        first, last = run[0][1], run[-1][1]
        if len(parts) == 1:
            self.file_reads.append(parts[0])
            return
        merged = FileSpan(
            first.path, first.offset, last.offset + last.nbytes - first.offset, first.version, first.store_url
        )
        self.file_reads.append(FileRead(run[0][0], merged, "work", parts[0].offset, tuple(parts)))

    def _add_frame_run(self, run: list[tuple[int, FileSpan]]) -> None:
        """zstd frames of one file, in file order without overlaps, as one read into staging."""
        first = run[0][1]
        start = self.staging_nbytes
        parts: list[FileRead] = []
        for t, span in run:
            task = self.plan.tasks[t]
            if span.nbytes < 6:
                raise CorruptChunkError(task.key, f"{task.where}zstd: {span.nbytes}-byte chunk cannot hold a frame")
            self.encoded_of[t] = span
            offset = self._decoded_slot(t)
            at = start + span.offset - first.offset
            parts.append(FileRead(t, span, "staging", at))
            self._add_stream("zstd", t, at, span.nbytes, offset, task.decoded_nbytes)
        last = run[-1][1]
        merged = FileSpan(
            first.path, first.offset, last.offset + last.nbytes - first.offset, first.version, first.store_url
        )
        self.file_reads.append(FileRead(run[0][0], merged, "staging", start, tuple(parts) if len(parts) > 1 else ()))
        self.staging_nbytes = align(start + merged.nbytes)

    def validate(
        self, task_ids: Sequence[int], staging: npt.NDArray[np.uint8], host_decoded: list[HostDecoded]
    ) -> BoundBatch:
        """The assemble launch, every launch checked against the buffers, as a bound batch."""
        assemble = _assemble_launch(self.plan, task_ids, self.source_of, self.work_nbytes)
        work_nbytes, staging_nbytes = self.work_nbytes, self.staging_nbytes
        for launch in self.unshuffles.values():
            launch_checks.check_blocks(
                launch.kernel,
                [work_nbytes - o for o in launch.src_offsets],
                [work_nbytes - o for o in launch.dst_offsets],
                launch.nbytes,
                launch.typesizes,
            )
        for group in self.groups.values():
            _check_spans(group, staging_nbytes, work_nbytes)
        for read in self.file_reads:
            limit = staging_nbytes if read.target == "staging" else work_nbytes
            if read.offset < 0 or read.offset + read.span.nbytes > limit:
                raise ValueError(
                    f"file read of {read.span.nbytes} bytes at {read.offset} leaves the {read.target} buffer"
                )
        return BoundBatch(
            staging,
            work_nbytes,
            self.groups,
            list(self.unshuffles.values()),
            self.checksums,
            host_decoded,
            assemble,
            self.file_reads,
            staging_nbytes,
            {t: (blob, self.source_of[t][0]) for t, blob in self.encoded_of.items()},
        )


def _back_to_back(run: list[tuple[int, FileSpan]]) -> list[list[tuple[int, FileSpan]]]:
    """A run of :func:`_coalesce` cut where a span does not start where the one before ends, or
    the one before is not a multiple of ``ALIGNMENT`` bytes (its place in the work buffer would
    be followed by padding, which a single read would fill with the next chunk's bytes)."""
    pieces: list[list[tuple[int, FileSpan]]] = []
    for t, span in run:
        if pieces:
            before = pieces[-1][-1][1]
            if span.offset == before.offset + before.nbytes and before.nbytes % ALIGNMENT == 0:
                pieces[-1].append((t, span))
                continue
        pieces.append([(t, span)])
    return pieces


def _coalesce(spans: Sequence[tuple[int, FileSpan]]) -> list[list[tuple[int, FileSpan]]]:
    """Spans grouped into runs to read at once: same file and version, in file order, each
    starting at or after the previous one's end and at most ``COALESCE_GAP_BYTES`` after it (the
    rule of ``store.sharding``'s host reads). Files keep the order they first appear in."""
    by_file: dict[tuple[str, FileVersion | None], list[tuple[int, FileSpan]]] = {}
    for t, span in spans:
        by_file.setdefault((span.path, span.version), []).append((t, span))
    runs: list[list[tuple[int, FileSpan]]] = []
    for group in by_file.values():
        group.sort(key=lambda item: (item[1].offset, item[1].nbytes))
        run: list[tuple[int, FileSpan]] = []
        for t, span in group:
            if run:
                end = run[-1][1].offset + run[-1][1].nbytes
                if not (0 <= span.offset - end <= COALESCE_GAP_BYTES):
                    runs.append(run)
                    run = []
            run.append((t, span))
        if run:
            runs.append(run)
    return runs


def _strip_crc32c(task: ChunkTask, data: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """``data`` without its trailing crc32c, once the checksum matches."""
    if data.size < 4:
        raise CorruptChunkError(task.key, f"{task.where}crc32c: {data.size} bytes cannot hold a checksum")
    stored = int.from_bytes(data[-4:].tobytes(), "little")
    actual = crc32c(data[:-4])
    if stored != actual:
        raise CorruptChunkError(
            task.key, f"{task.where}crc32c checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
        )
    return data[:-4]


#: bytes read around each header by the walk of a frame in a file
_PEEK_WINDOW = 512


class _FileWindow:
    """``read(offset, n)`` of a span of an open file, through a small window of ``_PEEK_WINDOW``
    bytes: a frame's walk costs about one ``pread`` per block."""

    def __init__(self, fd: int, span: FileSpan) -> None:
        self.fd, self.span = fd, span
        self.start, self.data = 0, b""

    def __call__(self, offset: int, n: int) -> bytes:
        if not (self.start <= offset and offset + n <= self.start + len(self.data)):
            width = max(n, _PEEK_WINDOW)
            self.start = offset
            self.data = os.pread(self.fd, min(width, max(self.span.nbytes - offset, 0)), self.span.offset + offset)
        got = self.data[offset - self.start : offset - self.start + n]
        if len(got) < n:
            raise ValueError(f"zstd: the file ended inside the {self.span.nbytes}-byte chunk (at offset {offset})")
        return got


def _check_direct_frame(task: ChunkTask, span: FileSpan) -> npt.NDArray[np.uint8] | None:
    """Walk the zstd frame of a chunk the device will read from a file, with small host reads of
    its headers (``streams.check_zstd_frame``). None: the frame may join a batch; the chunk's
    bytes, read on the host, when the CPU has to decide (several frames, no content size, ...).
    Raises CorruptChunkError naming the key for a malformed frame, and what
    :func:`~.launches.span_read_failure` makes of a file the system will not open or read.

    A frame that passed before, in a file of the same version, is not walked again
    (:mod:`.walked_frames`)."""
    key = WALKED_FRAMES.key(span, task.decoded_nbytes)
    if WALKED_FRAMES.passed(key):
        return None
    try:
        fd = os.open(span.path, os.O_RDONLY)
    except OSError as exc:
        raise span_read_failure(span, task.key, task.where, exc) from exc
    try:
        if hasattr(os, "posix_fadvise"):  # header reads should not pull the file into the page cache
            os.posix_fadvise(fd, span.offset, span.nbytes, os.POSIX_FADV_RANDOM)
        try:
            check_zstd_frame(_FileWindow(fd, span), span.nbytes, task.decoded_nbytes)
        except UnsupportedStreamError:
            data = os.pread(fd, span.nbytes, span.offset)
        except ValueError as exc:
            raise CorruptChunkError(task.key, f"{task.where}{exc}") from exc
        else:
            WALKED_FRAMES.add(key)
            return None
    except GpuZarrError:
        raise
    except OSError as exc:  # a read the file system refused (an I/O error)
        raise span_read_failure(span, task.key, task.where, exc) from exc
    finally:
        os.close(fd)
    if len(data) != span.nbytes:
        raise CorruptChunkError(task.key, f"{task.where}the file ended after {len(data)} of {span.nbytes} bytes")
    return np.frombuffer(data, dtype=np.uint8)


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
