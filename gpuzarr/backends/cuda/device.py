"""What the executor needs from a device, and the helpers both device implementations use.

A device is any object with the methods of :class:`Device`:

* ``numpy_device.CpuEmulatedDevice``: NumPy buffers, CPU decoders of each nvCOMP bitstream (zstd
  frames, raw deflate, LZ4 blocks) and the NumPy kernel models of ``kernel_reference``. CI runs
  the whole host side through it against the CPU engine.
* ``cupy_device.CudaDevice``: CuPy buffers, kvikio reads, nvCOMP's batched decoders and the
  kernels of kernels/*.cu.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from ... import config
from ...errors import DeviceError

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable, Sequence

    from .box_copies import BoxCopies
    from .launches import AssembleLaunch, FileRead, FileSpan

    #: each stream's decoded size (-1: failed), to be called once the device has run the batch
    PendingSizes: TypeAlias = Callable[[], npt.NDArray[np.int64]]

ChecksumKind = Literal["crc32", "adler32"]

logger = logging.getLogger("gpuzarr")


class DeviceEvent(Protocol):
    """The completion of queued device work (a host-to-device copy, or a whole batch): on a GPU,
    a CUDA event recorded on the stream right after that work."""

    def synchronize(self) -> None:
        """Wait until the work has finished (a copy: has finished reading its host buffer)."""


class Device(Protocol):
    """What the executor needs from a device. Buffers are flat ``uint8`` device arrays."""

    #: whether :meth:`read_files` reads local files straight into device buffers
    reads_files: bool
    #: whether those reads go storage -> device without host memory (GPUDirect Storage)
    gds: bool
    #: the host staging buffers of this device's batches
    staging: StagingPool
    #: the device buffers (staging and work) of this device's batches, reused from batch to
    #: batch: a block serves again only once the event of the batch that used it has completed
    buffers: StagingPool

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

    def alloc(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes`` bytes (contents undefined), 8-byte aligned."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A C-contiguous output array (contents undefined)."""

    def upload(self, host: npt.NDArray[np.uint8], dst: Any) -> DeviceEvent:
        """Start copying ``host`` to the start of ``dst`` on the device's copy stream, out of
        order with the work already queued (it runs while the previous batch decodes); work
        that reads ``dst`` must :meth:`wait_for` the returned event, and ``host`` must not
        change until it has completed."""

    def wait_for(self, event: DeviceEvent) -> None:
        """Make the work queued after this call wait for ``event`` (without a host wait)."""

    def record(self) -> DeviceEvent:
        """An event that completes once the work queued so far has run."""

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: Any, offset: int = 0) -> DeviceEvent:
        """Start copying ``host`` to ``dst[offset:]``, in stream order with the device work after
        it; ``host`` must not change until the returned event has completed."""

    def decompress_batch(
        self,
        algorithm: str,
        src: Any,
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: Any,
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> PendingSizes:
        """Start decoding raw ``algorithm`` streams ("zstd", "deflate", "lz4") from spans of
        ``src`` into spans of ``dst``; the returned callable gives each stream's decoded size
        (-1 where decoding failed) once called after :meth:`synchronize`."""

    def copy_spans(
        self, src: Any, src_offsets: Sequence[int], dst: Any, dst_offsets: Sequence[int], nbytes: Sequence[int]
    ) -> None:
        """Copy stored (uncompressed) streams."""

    def checksums(
        self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]
    ) -> Callable[[], list[int]]:
        """Start computing the CRC-32 / Adler-32 of spans of ``buffer``; the returned callable
        gives them once called after :meth:`synchronize`."""

    def check_lz4(
        self, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], decoded_nbytes: Sequence[int]
    ) -> Callable[[], list[int]]:
        """Start walking raw LZ4 blocks at spans of ``buffer`` (kernels/lz4_check.cu); the
        returned callable gives, once called after :meth:`synchronize`, -1 for each well-formed
        block that decodes to its ``decoded_nbytes``, else the offset where it breaks the format."""

    def synchronize(self) -> None:
        """Wait for the work queued so far (the one host wait of a batch)."""

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

    def assemble_boxes(self, out: Any, sources: Sequence[Any], copies: BoxCopies) -> None:
        """The box copies ``copies`` (:func:`.box_copies.box_copies`) from the separate device
        arrays ``sources`` (one per source the boxes name) into ``out``: one launch for all."""


#: words of an error message that mark a failure of the device rather than of the data: nvCOMP
#: raises a plain RuntimeError for CUDA failures ("cudaError...", "CUDA error ..."), and CuPy's
#: CUDARuntimeError and OutOfMemoryError say the same
_DEVICE_FAILURE_WORDS = ("cuda", "out of memory")


def is_device_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a decoder, is a failure of the device (CUDA, out of memory)
    and not of the data: such errors pass through instead of a retry stream by stream."""
    if isinstance(exc, MemoryError):
        return True
    message = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(word in message for word in _DEVICE_FAILURE_WORDS)


class BatchDecodeLog:
    """Reports a device's failed batched decodes: the first one at WARNING, later ones at DEBUG
    (a device object serves one read)."""

    def __init__(self) -> None:
        self.failures = 0

    def failed(self, note: str) -> None:
        self.failures += 1
        level = logging.WARNING if self.failures == 1 else logging.DEBUG
        logger.log(level, "gpuzarr: %s", note)


def decode_batch_or_each(
    algorithm: str,
    count: int,
    batched: Callable[[], Callable[[], Sequence[int]]] | None,
    one: Callable[[int], int],
    context_error: Callable[[], BaseException | None],
    log: BatchDecodeLog,
) -> PendingSizes:
    """The decoded size of each of ``count`` streams (-1: failed), as a callable to call once the
    device has run the batch: ``batched()`` queues one batched decode and returns the callable
    that reads its sizes; when queueing or reading raises for bad data (or ``batched`` is None),
    ``one(i)`` decodes each stream alone to find the bad ones.

    Device failures (:func:`is_device_failure`) pass through. After any other error the
    device's context is checked (``context_error()``: the error a synchronisation raises, None
    when healthy); a broken context raises DeviceError, since every later call would fail too.
    """

    def each() -> npt.NDArray[np.int64]:
        sizes = np.full(count, -1, dtype=np.int64)
        for i in range(count):
            try:
                sizes[i] = one(i)
            except Exception as exc:
                if is_device_failure(exc):
                    raise
                _check_context(algorithm, exc, context_error)
                logger.debug("gpuzarr: %s stream %d of the batch could not be decoded: %s", algorithm, i, exc)
        return sizes

    def after_failure(exc: Exception) -> npt.NDArray[np.int64]:
        if is_device_failure(exc):
            raise exc
        _check_context(algorithm, exc, context_error)
        log.failed(f"batched {algorithm} decode of {count} streams failed ({exc}); decoding them one at a time")
        return each()

    if batched is None:
        sizes = each()
        return lambda: sizes
    try:
        pending = batched()
    except Exception as exc:
        sizes = after_failure(exc)
        return lambda: sizes

    def result() -> npt.NDArray[np.int64]:
        try:
            return np.asarray(pending(), dtype=np.int64)
        except Exception as exc:
            return after_failure(exc)

    return result


def _check_context(algorithm: str, exc: Exception, context_error: Callable[[], BaseException | None]) -> None:
    broken = context_error()
    if broken is not None:
        raise DeviceError(
            f"the CUDA context failed after nvCOMP's {algorithm} decode raised ({exc}): {broken}; "
            "later GPU work in this process will fail too"
        ) from exc


class StagingPool:
    """Reusable host staging buffers of one device: at most ``max_blocks`` blocks, handed out
    with :meth:`acquire` and given back with :meth:`release`.

    Page-locked memory is slow to allocate and CuPy's pinned pool keeps every size it ever
    allocated, so a run of reads of varying sizes would pin ever more host memory. Here a
    request is served from a free block that is large enough, else a free block is replaced by
    one grown geometrically (at least doubled, but not beyond ``cap`` unless the request itself
    is larger). Two blocks cover the executor's overlap (batch k+1 is bound on a helper thread
    while batch k runs); when every block is in use, for instance with several reads in
    parallel, the request gets an ordinary pageable buffer (``unpooled`` counts them), so
    pinned memory stays bounded and no caller waits for another.

    Host-to-device copies are asynchronous: a buffer is released with the :class:`DeviceEvent` of
    the copy that reads it, and its block is handed out again (or dropped) only after that event
    has completed, so batch k+1 can be bound while batch k's copy and decode still run.
    """

    def __init__(
        self,
        allocate: Callable[[int], npt.NDArray[np.uint8]],
        *,
        max_blocks: int = 2,
        fallback: Callable[[int], npt.NDArray[np.uint8]] | None = None,
        address: Callable[[Any], int] | None = None,
    ) -> None:
        self._allocate = allocate
        self._fallback = fallback or _host_empty
        self._address = address or _address
        self.max_blocks = max_blocks
        self._free: list[npt.NDArray[np.uint8]] = []
        self._in_use: dict[int, npt.NDArray[np.uint8]] = {}  # data address -> block
        #: data address of a free block -> the event of the copy that may still read it
        self._pending: dict[int, DeviceEvent] = {}
        self._lock = threading.Lock()
        #: blocks allocated over the pool's life, and requests served outside the pool
        self.allocations = 0
        self.unpooled = 0

    @property
    def nblocks(self) -> int:
        """Blocks the pool holds, free or in use."""
        with self._lock:
            return len(self._free) + len(self._in_use)

    @property
    def nin_use(self) -> int:
        """Blocks handed out and not yet given back."""
        with self._lock:
            return len(self._in_use)

    @property
    def nbytes(self) -> int:
        """Bytes the pool holds, free or in use."""
        with self._lock:
            return sum(b.size for b in self._free) + sum(b.size for b in self._in_use.values())

    def acquire(self, nbytes: int, cap: int | None = None) -> npt.NDArray[np.uint8]:
        """A buffer of exactly ``nbytes`` bytes (a view of a pooled block); give it back with
        :meth:`release` once nothing reads it any more."""
        if nbytes <= 0:
            return self._fallback(0)
        waits: list[DeviceEvent] = []  # copies still reading the block handed out or dropped
        dropped: npt.NDArray[np.uint8] | None = None
        with self._lock:
            fitting = [i for i, b in enumerate(self._free) if b.size >= nbytes]
            if fitting:
                block = self._free.pop(min(fitting, key=lambda i: self._free[i].size))
                waits += self._take_pending(block)
            elif len(self._free) + len(self._in_use) < self.max_blocks or self._free:
                if self._free:  # replace the largest free block by a bigger one
                    dropped = self._free.pop(max(range(len(self._free)), key=lambda i: self._free[i].size))
                    waits += self._take_pending(dropped)
                    grown = 2 * dropped.size
                else:
                    grown = nbytes
                size = max(nbytes, min(grown, cap) if cap is not None else grown)
                block = self._allocate(size)
                self.allocations += 1
            else:
                self.unpooled += 1
                return self._fallback(nbytes)
            self._in_use[self._address(block)] = block
        # Outside the lock: another thread may release or acquire another block meanwhile.
        try:
            for event in waits:
                event.synchronize()
        except BaseException:
            with self._lock:  # the caller never gets the block, and its state is unknown: drop it
                self._in_use.pop(self._address(block), None)
            raise
        del dropped  # freed only once no copy reads it
        return block[:nbytes]

    def _take_pending(self, block: npt.NDArray[np.uint8]) -> list[DeviceEvent]:
        event = self._pending.pop(self._address(block), None)
        return [] if event is None else [event]

    def release(self, buffer: npt.NDArray[np.uint8], ready: DeviceEvent | None = None) -> None:
        """Give back a buffer from :meth:`acquire` (others are ignored); ``ready`` is the event of
        a copy that may still read it, waited for before its block serves again."""
        if buffer.size == 0:
            return
        with self._lock:
            address = self._address(buffer)
            block = self._in_use.pop(address, None)
            if block is not None:
                self._free.append(block)
                if ready is not None:
                    self._pending[address] = ready

    def clear(self) -> None:
        """Drop the free blocks, once their copies have finished. Blocks in use stay: they come
        back to the free list when released, for a later clear."""
        with self._lock:
            dropped, self._free = self._free, []
            waits = [e for b in dropped for e in self._take_pending(b)]
        for event in waits:
            event.synchronize()


class StagingPools:
    """One :class:`StagingPool` per device index, made on first use."""

    def __init__(
        self,
        allocate: Callable[[int], Any],
        *,
        max_blocks: int = 2,
        fallback: Callable[[int], Any] | None = None,
        address: Callable[[Any], int] | None = None,
    ) -> None:
        self._allocate = allocate
        self._max_blocks = max_blocks
        self._fallback = fallback
        self._address = address
        self._pools: dict[int, StagingPool] = {}
        self._lock = threading.Lock()

    def pool(self, index: int) -> StagingPool:
        with self._lock:
            pool = self._pools.get(index)
            if pool is None:
                pool = self._pools[index] = StagingPool(
                    self._allocate, max_blocks=self._max_blocks, fallback=self._fallback, address=self._address
                )
            return pool

    def clear(self) -> None:
        """Drop the free blocks of every device's pool (see :meth:`StagingPool.clear`)."""
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.clear()


def _host_empty(nbytes: int) -> npt.NDArray[np.uint8]:
    return np.empty(nbytes, dtype=np.uint8)


def _address(buffer: npt.NDArray[np.uint8]) -> int:
    return int(buffer.__array_interface__["data"][0])


def uses_direct_reads(device: Device) -> bool:
    """Whether ``device`` reads local chunk files itself (kvikio) rather than getting their bytes
    through the host staging copy: ``gpuzarr.config`` ``gpu_direct_reads``, where "auto" means
    whenever kvikio can, with GPUDirect Storage or in its compatibility mode. Measured without
    GDS (H100 and H200 hosts, benchmarks/results/2026-11-28-h200-loader-and-direct-reads.md):
    kvikio's threads reading spans into device memory beat the prefetch thread's host read and
    staging copy by about 8 % on sharded zstd (0.97-1.22 in nine comparisons) and 27-49 % on
    uncompressed chunks, and were level on unsharded zstd."""
    if not device.reads_files:
        return False
    wanted = config.get("gpu_direct_reads")
    return True if wanted == "auto" else bool(wanted)


def read_file_span(span: FileSpan) -> bytes:
    """The bytes of ``span`` on the host (fewer when the file is shorter)."""
    with open(span.path, "rb") as f:
        f.seek(span.offset)
        return f.read(span.nbytes)


__all__ = [
    "BatchDecodeLog",
    "ChecksumKind",
    "DeviceEvent",
    "Device",
    "StagingPool",
    "StagingPools",
    "decode_batch_or_each",
    "is_device_failure",
    "read_file_span",
    "uses_direct_reads",
]
