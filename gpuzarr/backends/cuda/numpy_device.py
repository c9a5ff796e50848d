"""A device made of NumPy buffers, for running the GPU read path on any machine.

CPU decoders of nvCOMP's raw bitstreams (zstd frames, raw deflate, LZ4 blocks) and the NumPy
models of the kernels (``kernel_reference``) stand in for the device calls, so the executor's
host-side logic (batching, stream splitting, staging layout, kernel arguments) is checked in CI
against the CPU engine, bit for bit.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import kernel_reference, kernels, launch_checks
from .device import BatchDecodeLog, ChecksumKind, StagingPools, decode_batch_or_each, read_file_span
from .launches import AssembleLaunch, FileRead, check_assemble_launch, check_box_geometry

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .box_copies import BoxCopies
    from .device import PendingSizes

POISON = 0xAB


def host_block(nbytes: int) -> npt.NDArray[np.uint8]:
    """A host staging block, filled with POISON like every new buffer of this device."""
    return np.full(nbytes, POISON, dtype=np.uint8)


#: the staging pools of emulated devices, by index (the pinned pools of ``cupy_device``)
HOST_STAGING = StagingPools(host_block)
#: the device buffer pools of emulated devices, by index (``cupy_device.DEVICE_BUFFERS``): reused
#: blocks keep the bytes of their last batch, as device memory does
DEVICE_BUFFERS = StagingPools(host_block, max_blocks=4)


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


class EmulatedEvent:
    """The event of an emulated host-to-device copy. The bytes are copied at once, but the event
    completes only when waited on (:meth:`synchronize`), as a real copy may read its host buffer
    until then; completing checks that the host bytes are still those copied, so a staging
    buffer refilled before its copy's event completed raises."""

    def __init__(self, host: npt.NDArray[np.uint8]) -> None:
        self.host = host
        self._copied = host.copy()
        #: whether the event has completed
        self.done = False

    def synchronize(self) -> None:
        if self.done:
            return
        self.done = True
        if not np.array_equal(self.host, self._copied):
            raise RuntimeError("a host buffer changed before the event of the copy reading it had completed")


class CpuEmulatedDevice:
    """A device made of NumPy buffers, CPU decoders of nvCOMP's raw formats and the NumPy models
    of the kernels: the executor's host-side logic runs unchanged and can be checked on any
    machine. New buffers are filled with 0xAB so that bytes nobody writes show up."""

    def __init__(
        self,
        index: int = 0,
        stream: Any = None,
        *,
        reads_files: bool = True,
        gds: bool = True,
        staging: StagingPools | None = None,
        buffers: StagingPools | None = None,
    ) -> None:
        self.index = index
        self.stream = stream
        self.reads_files = reads_files
        #: emulates GPUDirect Storage by default, so that "auto" takes the direct route in CI
        self.gds = gds
        self.calls: list[tuple[str, int]] = []
        #: raised by every batched decode, as nvCOMP raises for bad data or a CUDA failure
        self.decode_error: BaseException | None = None
        #: what a synchronisation raises after a decoder error (None: the context is healthy)
        self.context_error: BaseException | None = None
        self._batch_log = BatchDecodeLog()
        #: the event of every host-to-device copy, in order
        self.copies: list[EmulatedEvent] = []
        #: host staging buffers, shared by the devices of one index like the CUDA device's
        self.staging = (staging or HOST_STAGING).pool(index)
        self.buffers = (buffers or DEVICE_BUFFERS).pool(index)
        #: (call, thread name) of the calls a helper thread may make: uploads and file reads
        self.threads: list[tuple[str, str]] = []
        #: synchronisations so far: results read before the next one are an error, as on a GPU
        #: they would not be ready (nvCOMP's sizes would wait; a checksum would be stale)
        self.synchronizations = 0

    def synchronize(self) -> None:
        self.calls.append(("synchronize", 0))
        self.synchronizations += 1

    def _after_synchronize(self, what: str, value: Any) -> Callable[[], Any]:
        """``value``, readable only after the next :meth:`synchronize`."""
        queued_at = self.synchronizations

        def result() -> Any:
            if self.synchronizations == queued_at:
                raise RuntimeError(f"{what} read before the device was synchronised")
            return value

        return result

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

    def gather(self, box: np.ndarray[Any, Any], index: npt.NDArray[np.intp]) -> np.ndarray[Any, Any]:
        self.calls.append(("gather", index.size))
        if index.size and (index.min() < 0 or index.max() >= box.size):
            raise ValueError(f"gather: an index leaves the {box.size}-element box")
        return np.ascontiguousarray(box).reshape(-1)[index]

    def read_files(
        self, reads: Sequence[FileRead], staging: npt.NDArray[np.uint8], work: npt.NDArray[np.uint8]
    ) -> list[int]:
        self.calls.append(("read_files", len(reads)))
        self.threads.append(("read_files", threading.current_thread().name))
        done = []
        for read in reads:
            buffer = staging if read.target == "staging" else work
            n = read.span.nbytes
            if read.offset < 0 or read.offset + n > buffer.size:
                raise ValueError(f"file read of {n} bytes at {read.offset} leaves the {buffer.size}-byte buffer")
            try:
                data = read_file_span(read.span)
            except OSError as exc:
                exc.filename = exc.filename or read.span.path  # which read failed (an EIO names none)
                raise
            buffer[read.offset : read.offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
            done.append(len(data))
        return done

    def alloc(self, nbytes: int) -> npt.NDArray[np.uint8]:
        return np.full(nbytes, POISON, dtype=np.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return np.full(nbytes, POISON, dtype=np.uint8).view(dtype).reshape(shape)

    def copy_host_to_device(
        self, host: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8], offset: int = 0
    ) -> EmulatedEvent:
        if offset < 0 or offset + host.size > dst.size:
            raise ValueError(f"copy of {host.size} bytes to offset {offset} leaves the {dst.size}-byte buffer")
        self.calls.append(("copy_host_to_device", host.size))
        return self._copy(host, dst, offset)

    def _copy(self, host: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8], offset: int) -> EmulatedEvent:
        dst[offset : offset + host.size] = host
        self.copies.append(EmulatedEvent(host))
        return self.copies[-1]

    def upload(self, host: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8]) -> EmulatedEvent:
        self.calls.append(("upload", host.size))
        self.threads.append(("upload", threading.current_thread().name))
        if host.size > dst.size:
            raise ValueError(f"upload of {host.size} bytes leaves the {dst.size}-byte buffer")
        return self._copy(host, dst, 0)

    def wait_for(self, event: Any) -> None:
        self.calls.append(("wait_for", 0))

    def record(self) -> EmulatedEvent:
        return EmulatedEvent(np.empty(0, dtype=np.uint8))

    def decompress_batch(
        self,
        algorithm: str,
        src: npt.NDArray[np.uint8],
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: npt.NDArray[np.uint8],
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> PendingSizes:
        self.calls.append((algorithm, len(src_offsets)))
        for i, (so, sn, do, dn) in enumerate(zip(src_offsets, src_nbytes, dst_offsets, dst_nbytes, strict=True)):
            if so + sn > src.size or do + dn > dst.size:
                raise ValueError(f"{algorithm}: stream {i} span leaves its buffer")

        def one(i: int) -> int:
            so, sn, do, dn = src_offsets[i], src_nbytes[i], dst_offsets[i], dst_nbytes[i]
            try:
                result = _decode_stream_on_cpu(algorithm, src[so : so + sn].tobytes(), dn)
            except Exception:
                return -1
            if len(result) > dn:  # nvCOMP fails streams whose output does not fit
                return -1
            dst[do : do + len(result)] = np.frombuffer(result, dtype=np.uint8)
            return len(result)

        def batched() -> Callable[[], list[int]]:
            if self.decode_error is not None:
                raise self.decode_error
            sizes: Callable[[], list[int]] = self._after_synchronize(
                f"{algorithm} sizes", [one(i) for i in range(len(src_offsets))]
            )
            return sizes

        def one_alone(i: int) -> int:
            self.calls.append((f"{algorithm} alone", 1))
            return one(i)

        return decode_batch_or_each(
            algorithm, len(src_offsets), batched, one_alone, lambda: self.context_error, self._batch_log
        )

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
    ) -> Callable[[], list[int]]:
        self.calls.append((kind, len(offsets)))
        views = [buffer[o : o + n] for o, n in zip(offsets, nbytes, strict=True)]
        sizes = launch_checks.check_span_lengths([v.size for v in views], nbytes, kind)
        sums = np.zeros(sizes.size, dtype=np.uint32)
        model = kernel_reference.crc32_batch if kind == "crc32" else kernel_reference.adler32_batch
        model(views, sizes, sums, sizes.size, block_threads=kernels.BLOCK_THREADS)
        values: Callable[[], list[int]] = self._after_synchronize(f"{kind} sums", [int(v) for v in sums])
        return values

    def check_lz4(
        self,
        buffer: npt.NDArray[np.uint8],
        offsets: Sequence[int],
        nbytes: Sequence[int],
        decoded_nbytes: Sequence[int],
    ) -> Callable[[], list[int]]:
        self.calls.append(("lz4_check", len(offsets)))
        views = [buffer[o : o + n] for o, n in zip(offsets, nbytes, strict=True)]
        sizes, decoded = launch_checks.check_lz4([v.size for v in views], nbytes, decoded_nbytes)
        verdicts = np.full(sizes.size, -1, dtype=np.int64)
        kernel_reference.lz4_check_batch(views, sizes, decoded, verdicts, sizes.size)
        values: Callable[[], list[int]] = self._after_synchronize("lz4 verdicts", [int(v) for v in verdicts])
        return values

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
        sizes, types = launch_checks.check_blocks(
            kernel, [s.size for s in src], [d.size for d in dst], nbytes, typesizes
        )
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
        _assemble(out, sources, launch)

    def assemble_boxes(
        self, out: np.ndarray[Any, Any], sources: Sequence[np.ndarray[Any, Any]], copies: BoxCopies
    ) -> None:
        self.calls.append(("assemble_chunks", copies.nboxes))
        copies.check_output(out)
        if any(not s.flags.c_contiguous for s in sources):
            raise ValueError("assemble: every source must be C-contiguous")
        copies.check_sources([int(s.nbytes) for s in sources])
        launch = copies.launch()
        # The general check of the kernel's geometry as well: in the test-suite it proves that
        # the boxes' own checks leave nothing a launch could reach outside its buffers.
        boxes = [sources[k].reshape(-1).view(np.uint8) for k in copies.source.tolist()]
        check_box_geometry(launch, out.nbytes, [b.size for b in boxes])
        _assemble(out, boxes, launch)


def _assemble(
    out: np.ndarray[Any, Any], sources: list[npt.NDArray[np.uint8] | None], launch: AssembleLaunch
) -> None:
    """The NumPy model of the assemble kernel a GPU would launch (``assemble_rows`` or
    ``assemble_chunks``, chosen, with its grid, as :func:`.kernels.launch_assemble` chooses) on
    ``launch``'s tables, one source's bytes per row."""
    name, _grid = kernels.assemble_kernel_and_grid(launch.extents, launch.ndim)
    model = kernel_reference.assemble_rows if name == "assemble_rows" else kernel_reference.assemble_chunks
    model(
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


__all__ = ["DEVICE_BUFFERS", "HOST_STAGING", "POISON", "CpuEmulatedDevice", "EmulatedEvent", "host_block"]
