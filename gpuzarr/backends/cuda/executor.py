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

import logging
import struct
import zlib
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ...engine.layout import StorageLayout
from ...engine.parallel import run_tasks
from ...errors import CorruptChunkError
from ...plan.selection import ReadPlan
from ...store.base import Buffer, Store
from ...store.sharding import ShardIndex, read_inner_chunks, read_shard_index
from . import kernel_reference, kernels
from .plan import (
    ALIGNMENT,
    BATCH_BYTES,
    AssembleLaunch,
    BoundBatch,
    GpuReadPlan,
    bind_batch,
    build_gpu_read_plan,
    check_assemble_launch,
)

logger = logging.getLogger("gpuzarr")

ChecksumKind = Literal["crc32", "adler32"]


class Device(Protocol):
    """What the executor needs from a device. Buffers are flat ``uint8`` device arrays."""

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


def execute(layout: StorageLayout, store: Store, plan: GpuReadPlan, device: Device, out: Any) -> None:
    """Run every batch of ``plan`` into ``out`` (a C-contiguous device array of the plan's shape)."""
    indexes: dict[str, ShardIndex | None] = {}
    logged: set[str] = set()
    for batch in range(len(plan.batches)):
        encoded = fetch_batch(layout, store, plan, batch, indexes)
        bound = bind_batch(layout, plan, batch, encoded)
        for decoded in bound.host_decoded:
            if decoded.reason not in logged:
                logged.add(decoded.reason)
                logger.info("gpuzarr: decoding on the CPU and copying to the GPU: %s", decoded.reason)
        run_batch(plan, bound, device, out)


def fetch_batch(
    layout: StorageLayout,
    store: Store,
    plan: GpuReadPlan,
    batch: int,
    indexes: dict[str, ShardIndex | None] | None = None,
) -> list[Buffer | None]:
    """The encoded bytes of every task of a batch (None: missing), read on the host."""
    task_ids = plan.batches[batch]
    tasks = [plan.tasks[t] for t in task_ids]
    if not plan.sharded:
        return run_tasks(lambda task: store.get(task.key), tasks)
    indexes = {} if indexes is None else indexes
    by_shard: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_shard.setdefault(task.key, []).append(i)

    def fetch(item: tuple[str, list[int]]) -> list[tuple[int, Buffer | None]]:
        key, members = item
        shard = layout.shard_of(tasks[members[0]].coords)[0]
        shard_layout = layout.sharding_at(shard).layout
        if key not in indexes:
            indexes[key] = read_shard_index(store, key, shard_layout)
        index = indexes[key]
        if index is None:
            return [(i, None) for i in members]
        wanted = [tasks[i].inner for i in members]
        blobs = read_inner_chunks(store, key, index, [w for w in wanted if w is not None], shard_layout)
        return list(zip(members, blobs, strict=True))

    result: list[Buffer | None] = [None] * len(tasks)
    for part in run_tasks(fetch, list(by_shard.items())):
        for i, blob in part:
            result[i] = blob
    return result


def run_batch(plan: GpuReadPlan, bound: BoundBatch, device: Device, out: Any) -> None:
    """The device work of one bound batch: copy, decompress, verify, un-shuffle, assemble."""
    staging = device.alloc(max(bound.staging.size, ALIGNMENT))
    if bound.staging.size:
        device.copy_host_to_device(bound.staging, staging)
    work = device.alloc(max(bound.work_nbytes, ALIGNMENT))
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
        bad = np.flatnonzero(got != expected)
        if bad.size:
            s = int(bad[0])
            task = plan.tasks[group.owners[s]]
            what = "failed" if got[s] < 0 else f"gave {int(got[s])} bytes"
            raise CorruptChunkError(
                task.key, f"{task.where}{algorithm} stream {s} of the batch {what}, expected {int(expected[s])}"
            )
    for decoded in bound.host_decoded:
        device.copy_host_to_device(decoded.data, work, decoded.offset)
    for kind in ("crc32", "adler32"):
        checks = [c for c in bound.checksums if c.checksum.kind == kind]
        if not checks:
            continue
        values = device.checksums(kind, work, [c.offset for c in checks], [c.nbytes for c in checks])
        if values is None:
            continue
        for check, value in zip(checks, values, strict=True):
            if value != check.checksum.value:
                task = plan.tasks[check.task]
                raise CorruptChunkError(
                    task.key,
                    f"{task.where}{kind} mismatch: stored {check.checksum.value:#010x}, computed {value:#010x}",
                )
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
    if bound.assemble.nchunks:
        device.launch_assemble(out, work, bound.assemble)


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

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

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
        fn = zlib.crc32 if kind == "crc32" else zlib.adler32
        return [fn(buffer[o : o + n].tobytes()) & 0xFFFFFFFF for o, n in zip(offsets, nbytes, strict=True)]

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


class CudaDevice:
    """CuPy buffers, nvCOMP's batched decoders (``nvidia.nvcomp``, RAW bitstreams) and the CUDA
    kernels of kernels/*.cu. Every import happens inside the methods.

    Written against the documented APIs of CuPy and ``nvidia.nvcomp`` and NOT YET RUN ON A GPU:
    tests/gpu/test_gpu_read.py is the check that has to pass before this is used. Known costs:
    nvCOMP's Python ``Codec.decode`` allocates its own outputs, so each decoded stream is copied
    once more into the work buffer; stored streams are copied one slice at a time; checksums of
    gzip/zlib streams are not verified on the device (their sizes are).
    """

    def __init__(self) -> None:
        self._codecs: dict[str, Any] = {}

    @staticmethod
    def _cupy() -> Any:
        return kernels.import_cupy()

    def _codec(self, algorithm: str) -> Any:
        codec = self._codecs.get(algorithm)
        if codec is None:
            try:
                from nvidia import nvcomp
            except ImportError as exc:
                raise ImportError(f"gpuzarr's GPU decoders need nvidia-nvcomp; {kernels.GPU_EXTRA_HINT}") from exc
            codec = nvcomp.Codec(algorithm=_NVCOMP_ALGORITHMS[algorithm], bitstream_kind=nvcomp.BitstreamKind.RAW)
            self._codecs[algorithm] = codec
        return codec

    def alloc(self, nbytes: int) -> Any:
        cupy = self._cupy()
        return cupy.empty(nbytes, dtype=cupy.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return self._cupy().empty(shape, dtype=dtype)

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: Any, offset: int = 0) -> None:
        if offset < 0 or offset + host.size > dst.size:
            raise ValueError(f"copy of {host.size} bytes to offset {offset} leaves the {dst.size}-byte buffer")
        dst[offset : offset + host.size].set(host)

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
        from nvidia import nvcomp

        cupy = self._cupy()
        inputs = [nvcomp.as_array(src[o : o + n]) for o, n in zip(src_offsets, src_nbytes, strict=True)]
        sizes = np.full(len(inputs), -1, dtype=np.int64)
        try:
            outputs = self._codec(algorithm).decode(inputs)
        except Exception:
            return sizes  # the batch failed as a whole: every stream is reported as failed
        for i, (decoded, do, dn) in enumerate(zip(outputs, dst_offsets, dst_nbytes, strict=True)):
            data = cupy.asarray(decoded).reshape(-1).view(cupy.uint8)
            if data.size <= dn:
                dst[do : do + data.size] = data
                sizes[i] = data.size
        return sizes

    def copy_spans(
        self, src: Any, src_offsets: Sequence[int], dst: Any, dst_offsets: Sequence[int], nbytes: Sequence[int]
    ) -> None:
        for so, do, n in zip(src_offsets, dst_offsets, nbytes, strict=True):
            dst[do : do + n] = src[so : so + n]

    def checksums(self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]) -> None:
        return None

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


__all__ = ["CpuEmulatedDevice", "CudaDevice", "Device", "execute", "fetch_batch", "read_gpu_plan", "run_batch"]
