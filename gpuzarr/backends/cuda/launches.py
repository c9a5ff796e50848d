"""The records of one bound batch: the streams, launches and file reads a device runs, as plain
data decided on the host (see :mod:`.bind`), in the argument order of kernels/*.cu; and the
checks of an assemble launch against its buffers, which bind and both devices run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from ...errors import GpuZarrError
from ...store.base import os_failure
from .gpu_plan import ALIGNMENT, Int64Array
from .launch_checks import check_assemble

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...store.local import FileVersion
    from .streams import Algorithm, Checksum


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


@dataclass
class UnshuffleLaunch:
    """One ``byte_unshuffle`` / ``bit_unshuffle`` launch (kernels/shuffle.cu) over work-buffer spans."""

    kernel: Literal["byte_unshuffle", "bit_unshuffle"]
    partial_rule: int
    src_offsets: list[int] = field(default_factory=list)
    dst_offsets: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    typesizes: list[int] = field(default_factory=list)


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
    #: the file's ``store.local.stat_version`` when the span was located: tells a replaced or
    #: rewritten file apart (None: not known, and the read is refused)
    version: FileVersion | None = None
    #: the store the file belongs to (its URL, as its errors name it; None: the path is named)
    store_url: str | None = None


class FileChanged(Exception):
    """A file the device reads is no longer the one the host located its spans in: replaced,
    rewritten or removed by a writer meanwhile. The batch is prepared again from the host's
    reads on (``executor.prepare``), which see what the store now holds."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason


def span_read_failure(span: FileSpan, key: str, where: str, exc: OSError) -> Exception:
    """What a file system's refusal to open or read ``span``'s file (for chunk ``key``; ``where``
    names an inner chunk) is: :class:`FileChanged` where the file is gone (removed, or renamed
    over, since the host located it), else the store's typed error, as the host path raises it
    (``StorePermissionError`` for permission denied, ``StoreError`` otherwise, naming the key).
    A gpuzarr error comes back as it is: the caller raises it again, not ``from`` itself."""
    if isinstance(exc, GpuZarrError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return FileChanged(key, f"{where}the file went while it was being read ({span.path})")
    return os_failure(span.store_url or span.path, key, f"{where}read {span.path}", exc)


@dataclass(frozen=True)
class FileRead:
    """One device read: ``span`` into ``target`` ("staging" or "work") at byte ``offset``.

    A read of several nearby spans of one file (inner chunks of a shard) lists them in
    ``parts``, each with its own task, span and place in ``target``; ``task`` is the first's."""

    task: int
    span: FileSpan
    target: Literal["staging", "work"]
    offset: int
    parts: tuple[FileRead, ...] = ()

    def chunks(self) -> tuple[FileRead, ...]:
        """The one-chunk reads this read covers: its ``parts``, or itself."""
        return self.parts or (self,)


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


def check_assemble_sources(launch: AssembleLaunch, work_nbytes: int) -> None:
    """Check that every decoded chunk an assemble launch reads lies in the work buffer, aligned
    to ``min(itemsize, 8)``."""
    offsets, nbytes = launch.source_offsets, launch.source_nbytes
    present = offsets >= 0
    bad = present & ((offsets % min(launch.itemsize, ALIGNMENT) != 0) | (offsets + nbytes > work_nbytes))
    if bad.any():
        c = int(np.argmax(bad))
        where = f"source {c} ({int(nbytes[c])} bytes at {int(offsets[c])})"
        raise ValueError(f"assemble: {where} is misaligned or leaves the work buffer")


def check_assemble_launch(launch: AssembleLaunch, out_nbytes: int, work_nbytes: int) -> None:
    """Validate an assemble launch: its sources (:func:`check_assemble_sources`) and its
    geometry (:func:`.launch_checks.check_assemble`)."""
    check_assemble_sources(launch, work_nbytes)
    sources = [None if o < 0 else n for o, n in zip(launch.source_offsets.tolist(), launch.source_nbytes.tolist())]
    _check_geometry(launch, out_nbytes, sources)


def _check_geometry(launch: AssembleLaunch, out_nbytes: int, source_nbytes: list[int | None]) -> None:
    """:func:`.launch_checks.check_assemble` of a launch's tables (None: a missing chunk)."""
    nd = launch.ndim
    check_assemble(
        out_nbytes,
        launch.out_strides[:nd].tolist(),
        source_nbytes,
        launch.src_strides[:, :nd],
        launch.src_offsets[:, :nd],
        launch.src_steps[:, :nd],
        launch.dst_offsets[:, :nd],
        launch.extents[:, :nd],
        launch.itemsize,
        launch.swap_width,
    )


def check_box_geometry(launch: AssembleLaunch, out_nbytes: int, source_nbytes: list[int]) -> None:
    """:func:`.launch_checks.check_assemble` of box copies between separate arrays
    (:meth:`.box_copies.BoxCopies.launch`), given the bytes of each box's source."""
    _check_geometry(launch, out_nbytes, list(source_nbytes))


def merged_copies(
    src_offsets: Sequence[int], dst_offsets: Sequence[int], nbytes: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """Copies of stored streams (staging to work), the ones that follow each other in both
    buffers merged into one: (source offsets, destination offsets, sizes).

    A copy joins the one before where it starts the same distance after that one's end in both
    buffers, less than ``ALIGNMENT`` bytes: the gap is the padding that aligns the next span,
    which belongs to no other span in either buffer, so copying it too changes nothing. A batch
    of uncompressed chunks read on the host (a memory or object store) is then one copy, not
    one a chunk."""
    out_src: list[int] = []
    out_dst: list[int] = []
    out_n: list[int] = []
    for so, do, n in zip(src_offsets, dst_offsets, nbytes, strict=True):
        if out_n:
            gap = so - (out_src[-1] + out_n[-1])
            if 0 <= gap < ALIGNMENT and do - (out_dst[-1] + out_n[-1]) == gap:
                out_n[-1] += gap + n
                continue
        out_src.append(so)
        out_dst.append(do)
        out_n.append(n)
    return out_src, out_dst, out_n


__all__ = [
    "AssembleLaunch",
    "BoundBatch",
    "ChecksumCheck",
    "FileRead",
    "FileSpan",
    "HostDecoded",
    "StreamGroup",
    "UnshuffleLaunch",
    "check_assemble_launch",
    "check_assemble_sources",
    "check_box_geometry",
    "merged_copies",
]
