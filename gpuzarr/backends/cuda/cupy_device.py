"""The CUDA device: CuPy buffers, kvikio file reads, nvCOMP's batched decoders and the kernels
of kernels/*.cu. This module and ``kernels`` are where cupy, nvidia.nvcomp and kvikio are
imported, always inside functions.

Process-wide state serves every :class:`CudaDevice`: :class:`FileHandleCache` (open kvikio
handles), :class:`CodecCache` (nvCOMP codecs per algorithm, device, stream and thread) and
``PINNED_STAGING`` (page-locked staging buffers per device, a :class:`.device.StagingPool`
each).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import threading
import warnings
import weakref
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ... import config
from ...errors import GpuZarrError
from . import kernels
from .box_copies import source_facts
from .device import BatchDecodeLog, ChecksumKind, StagingPools, decode_batch_or_each, is_device_failure
from .launches import AssembleLaunch, FileRead, FileSpan, check_assemble_sources

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ...store.local import FileVersion
    from .box_copies import BoxCopies
    from .device import PendingSizes

logger = logging.getLogger("gpuzarr")

_NVCOMP_ALGORITHMS = {"zstd": "Zstd", "deflate": "Deflate", "lz4": "LZ4"}
#: the thread count gpuzarr last gave kvikio (None: not yet)
_kvikio_threads: int | None = None
_kvikio_lock = threading.Lock()
_CUDA_STREAM_LEGACY = 1

K = TypeVar("K")
V = TypeVar("V")


class _LruCache(Generic[K, V]):
    """A thread-safe mapping that keeps its ``capacity`` most recently used entries."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def discard(self, drop: Callable[[K], bool]) -> list[V]:
        """Take out the entries whose keys ``drop`` picks, and give their values back."""
        with self._lock:
            keys = [key for key in self._entries if drop(key)]
            return [self._entries.pop(key) for key in keys]


class FileHandleCache:
    """Open kvikio file handles, keyed by path and file version (see ``FileSpan.version``), so
    that a file replaced by a writer is reopened rather than read through a stale handle. An
    evicted handle is closed when the last reader drops it.

    ``capacity`` None follows ``gpuzarr.config`` ``file_handles`` (by default sized from the
    open-file limit, see :func:`gpuzarr.config.default_file_handles`), read at each lookup: an
    LRU smaller than the files one read cycles through reopens every file on every read."""

    def __init__(self, capacity: int | None = None) -> None:
        self._fixed = capacity
        self._handles: _LruCache[tuple[str, FileVersion | None], Any] = _LruCache(capacity or 0)

    @property
    def capacity(self) -> int:
        if self._fixed is not None:
            return self._fixed
        wanted = config.get("file_handles")
        return int(wanted) if wanted is not None else config.default_file_handles()

    def handle(self, kvikio: Any, span: FileSpan) -> Any:
        """The ``kvikio.CuFile`` that reads ``span``'s file, opened on first use."""
        self._handles.capacity = self.capacity
        key = (span.path, span.version)
        handle = self._handles.get(key)
        if handle is None:
            try:
                handle = kvikio.CuFile(span.path, "r")
            except Exception as exc:
                # kvikio's own error does not say why: the system's, where it refuses the open
                # too, goes to the executor, which knows the chunk and the store.
                refused = _open_refusal(span.path)
                if refused is None:
                    raise
                raise refused from exc
            self._handles.put(key, handle)
        return handle


def _read_failure(read: FileRead, exc: Exception) -> Exception:
    """kvikio's failure to open or read ``read``'s file as an OSError naming the file (kvikio
    raises a RuntimeError for the system's errors), which the executor turns into the store's
    error naming the chunk. Anything else is left as it is: OSErrors and gpuzarr's own errors,
    failures of the device (a CUDA error, out of memory: :func:`.device.is_device_failure`),
    which must not pass for a store's, and errors of other types (a bug)."""
    if not isinstance(exc, RuntimeError) or isinstance(exc, GpuZarrError) or is_device_failure(exc):
        return exc
    failure = OSError(errno.EIO, f"kvikio could not read it ({type(exc).__name__}: {exc})", read.span.path)
    failure.__cause__ = exc
    return failure


def _open_refusal(path: str) -> OSError | None:
    """The system's refusal to open ``path`` for reading (None: it opens)."""
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        return exc
    return None


class CodecCache:
    """nvCOMP codecs by (algorithm, device, stream handle, thread), kept across reads: a Codec
    sets up its own scratch state, and reads are many and short. The thread is in the key
    because nothing says a Codec may be used by two threads at once. The stream must outlive
    its codecs: the legacy default stream does, and so does a stream registered with
    :meth:`keep_stream`, which the cache holds until it is released (see ``CudaDevice._codec``).

    :meth:`release_stream` may run in a finalizer, which the garbage collector can start on a
    thread that holds this cache's lock: it only notes the handle. The next call of the cache
    (or :meth:`drain`) then waits for the stream's queued work, drops its codecs and then the
    stream, outside the lock."""

    def __init__(self, capacity: int = 32) -> None:
        self._codecs: _LruCache[tuple[str, int, int, int], Any] = _LruCache(capacity)
        #: streams whose codecs are kept, by handle; holding the stream object keeps its handle
        #: from naming another stream while codecs made for it are cached
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()
        #: handles released and not yet drained (``deque.append`` takes no lock of ours)
        self._released: deque[int] = deque()

    def keep_stream(self, stream: Any) -> int:
        """Keep the codecs of ``stream`` (a CuPy stream) across reads from now on, and hold the
        stream until the handle this returns is released."""
        self.drain()
        handle = int(stream.ptr)
        with self._lock:
            self._streams[handle] = stream
        return handle

    def release_stream(self, handle: int) -> None:
        """Let the stream ``handle`` and its codecs go (at the next call of the cache)."""
        self._released.append(handle)

    def drain(self) -> None:
        """Drop the codecs, then the streams, of the handles released so far: after the work
        queued on such a stream, which may still use its codecs' scratch."""
        while self._released:
            try:
                handle = self._released.popleft()
            except IndexError:  # another thread drained it
                return
            with self._lock:
                stream = self._streams.pop(handle, None)
                codecs = self._take_codecs(handle)
            if stream is not None:
                stream.synchronize()
            codecs.clear()  # the last references: each codec is destroyed here, then the stream
            del stream

    def _take_codecs(self, handle: int) -> list[Any]:
        return self._codecs.discard(lambda key: key[2] == handle)

    def keeps(self, handle: int) -> bool:
        """Whether the codecs of the stream ``handle`` are kept across reads."""
        self.drain()
        return handle == _CUDA_STREAM_LEGACY or handle in self._streams

    def kept_codec(self, algorithm: str, device: int, stream: int, thread: int) -> Any | None:
        """nvCOMP's RAW-bitstream codec for ``algorithm`` on ``device`` and ``stream`` for the
        thread ``thread``, kept across reads (made on first use); None where the codecs of
        ``stream`` are not kept. Whether they are and the codec itself are decided under one
        hold of the lock, so that a stream released meanwhile gets no codec cached for it."""
        self.drain()
        with self._lock:
            if stream != _CUDA_STREAM_LEGACY and stream not in self._streams:
                return None
            key = (algorithm, device, stream, thread)
            codec = self._codecs.get(key)
            if codec is None:
                codec = _new_codec(algorithm, device, stream)
                self._codecs.put(key, codec)
            return codec


def _new_codec(algorithm: str, device: int, stream: int) -> Any:
    """nvCOMP's RAW-bitstream codec for ``algorithm`` on ``device`` and ``stream``."""
    nvcomp = _nvcomp()
    return nvcomp.Codec(
        algorithm=_NVCOMP_ALGORITHMS[algorithm],
        bitstream_kind=nvcomp.BitstreamKind.RAW,
        device_id=device,
        cuda_stream=stream,
    )


_FILE_HANDLES = FileHandleCache()
_CODECS = CodecCache()


def keep_stream_codecs(stream: Any, owner: object) -> None:
    """Keep the nvCOMP codecs of ``stream`` (a CuPy stream gpuzarr made) across reads for as long
    as ``owner`` lives, and the stream with them.

    Codecs of any other stream than the legacy one live as long as a read, because a caller's
    stream may be destroyed after it; a side stream that serves many reads (the data loader's)
    would then make new codecs, with new scratch, for every one."""
    cache = _CODECS
    weakref.finalize(owner, cache.release_stream, cache.keep_stream(stream))


def _pinned_block(nbytes: int) -> npt.NDArray[np.uint8]:
    """A page-locked host block of its own (``cudaHostAlloc``), freed when the last view of it
    goes: not from CuPy's pinned pool, which keeps every size it has ever allocated."""
    cupy = kernels.import_cupy()
    memory = cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(nbytes), 0)
    return np.ndarray((nbytes,), dtype=np.uint8, buffer=memory)


#: page-locked host staging buffers per device (copies from them run at full PCIe speed)
PINNED_STAGING = StagingPools(_pinned_block)


def _device_block(nbytes: int) -> Any:
    """A device block for a batch's staging or work buffer, from CuPy's pool on the current
    stream. The pool may hand back memory that work still queued on that stream uses; uploads
    (the copy stream) and kvikio write outside that order, so the stream is synchronised before
    the block is used. Pooled blocks are made rarely (when the pool grows); after that they are
    reused under the events of their batches, without a synchronisation."""
    cupy = kernels.import_cupy()
    block = cupy.empty(nbytes, dtype=cupy.uint8)
    cupy.cuda.get_current_stream().synchronize()
    return block


#: device staging and work buffers per device: two batches in flight, two buffers each
DEVICE_BUFFERS = StagingPools(_device_block, max_blocks=4, fallback=_device_block, address=lambda b: int(b.data.ptr))


def release_gpu_buffers() -> None:
    """Give back the idle buffers that GPU reads keep between reads: the pinned host staging
    blocks, and the device staging and work blocks (up to four per device, each up to the batch
    budget, ``gpuzarr.config`` ``gpu_batch_bytes``); and the nvCOMP codecs (with their scratch)
    of data loaders that are gone, if no read has let them go since.

    Blocks in use stay with their reads, and return to the pools when those end (call again
    then to give them back too). Device blocks return to CuPy's
    memory pool, where nvCOMP's scratch also lives; ``cupy.get_default_memory_pool().free_all_blocks()``
    then hands the pool's idle memory back to the driver (for PyTorch, say)."""
    PINNED_STAGING.clear()
    DEVICE_BUFFERS.clear()
    _CODECS.drain()


def _kvikio() -> Any:
    """kvikio, configured with ``gpuzarr.config`` ``io_threads``; None when it is not installed.

    ``io_threads`` None gives kvikio :func:`gpuzarr.config.default_io_threads` threads, once per
    process (kvikio's own default is one), unless ``KVIKIO_NTHREADS`` is set; a number is given
    to kvikio whenever it differs from the last one given.

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
    with _kvikio_lock:
        if threads is None:
            if _kvikio_threads is None and "KVIKIO_NTHREADS" in os.environ:
                return kvikio
            threads = config.default_io_threads()
        if threads != _kvikio_threads:
            kvikio.defaults.set("num_threads", int(threads))
            _kvikio_threads = int(threads)
    return kvikio


def _gds_available(kvikio: Any) -> bool:
    """Whether kvikio reads through GPUDirect Storage (not its POSIX compatibility mode)."""
    try:
        return not bool(kvikio.defaults.is_compat_mode_preferred())
    except AttributeError:  # an older kvikio: take it for compatibility mode
        return False


def as_cupy_stream(stream: Any, device: int = 0) -> Any:
    """A CuPy stream for ``stream`` on device ``device``: a cupy Stream, an object with
    ``__cuda_stream__`` (the CUDA stream protocol, e.g. a recent PyTorch stream), anything with
    ``cuda_stream`` or ``ptr``, or a raw ``cudaStream_t`` as an int.

    The protocol goes through ``cupy.cuda.Stream.from_external``; other handles through
    ``cupy.cuda.ExternalStream`` (deprecated since CuPy 14, so its warning is silenced), told
    its device."""
    cupy = kernels.import_cupy()
    if isinstance(stream, cupy.cuda.Stream | cupy.cuda.ExternalStream):
        return stream
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(stream, "__cuda_stream__"):
        return from_external(stream)
    handle: int | None = None
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            handle = int(getattr(stream, attribute))
            break
    else:
        if isinstance(stream, int) and not isinstance(stream, bool):
            handle = stream
    if handle is None:
        raise TypeError(f"stream: expected a CuPy or PyTorch CUDA stream or a cudaStream_t int, got {stream!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(handle, device_id=device)


class CudaDevice:
    """CuPy buffers, nvCOMP's batched decoders (``nvidia.nvcomp``, RAW bitstreams), kvikio file
    reads and the CUDA kernels of kernels/*.cu, on device ``index`` and ``stream`` (the current
    CuPy stream when None). Every import happens inside the methods.

    Written against the documented APIs of CuPy, kvikio 26 and ``nvidia.nvcomp`` 6; tests/gpu/
    runs it on a GPU (it passed on H100 and H200 hosts: benchmarks/results/). Choices:

    * nvCOMP 6 carves a batch out of one buffer (``nvcomp.as_arrays(buffer, offsets, sizes)``),
      so streams decode straight into the work buffer; with an older nvCOMP each stream is
      decoded into its own allocation and copied. When a batched call fails for bad data, the
      context is checked (a broken one is a DeviceError) and its streams are decoded one at a
      time to name the corrupt chunk; CUDA and out-of-memory errors pass through
      (``device.decode_batch_or_each``).
    * Each batched decode is given a ``decompression_config`` built from the decoded sizes the
      host already knows, so nvCOMP neither synchronises to configure it nor makes its
      size-finding pass over LZ4 and Deflate streams (the call form of nvCOMP 6's
      ``Codec.decode`` documentation; an nvCOMP that refuses it decodes without one).
    * Host-to-device copies are asynchronous: each records a CUDA event, and its pinned staging
      buffer serves again only once the event has completed (``device.StagingPool``).
    * A batch's device buffers come from ``DEVICE_BUFFERS`` (two batches, two buffers each), so
      the upload of batch k+1 (on a copy stream of its own) and kvikio's reads into them run on
      the executor's helper thread while batch k decodes; the compute stream waits for the
      upload's event on the device, not the host.
    * One host wait per batch (:meth:`synchronize`, called by the executor once every decode
      and checksum is queued); nvCOMP's ``buffer_sizes`` and the checksums are read after it.
    * The CRC-32 of gzip and the Adler-32 of zlib streams are computed by our kernels
      (kernels/crc32c.cu, kernels/adler32.cu) and compared on the host; stored streams (Blosc
      memcpy'd blocks, uncompressed chunks from other stores, chunks decoded on the CPU) are one
      device-to-device memcpy each.
    """

    def __init__(self, index: int = 0, stream: Any = None) -> None:
        self.index = index
        self._user_stream = stream
        kvikio = _kvikio()
        self.reads_files = kvikio is not None
        self.gds = kvikio is not None and _gds_available(kvikio)
        self._batch_log = BatchDecodeLog()
        self.staging = PINNED_STAGING.pool(index)
        self.buffers = DEVICE_BUFFERS.pool(index)
        self._copy_stream: Any = None
        self._lock = threading.Lock()
        self._made_stream: Any = None
        #: codecs of this read for a stream the cache must not keep (see :meth:`_codec`)
        self._read_codecs: dict[tuple[str, int], Any] = {}

    @staticmethod
    def _cupy() -> Any:
        return kernels.import_cupy()

    # -- context ---------------------------------------------------------------------------------

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        cupy = self._cupy()
        stream = self._cupy_stream()
        stack = contextlib.ExitStack()
        stack.enter_context(cupy.cuda.Device(self.index))
        if stream is not None:
            stack.enter_context(stream)
        return stack

    def _cupy_stream(self) -> Any:
        """The caller's stream as a CuPy stream, made once per read (None: CuPy's current one)."""
        if self._user_stream is None:
            return None
        with self._lock:
            if self._made_stream is None:
                self._made_stream = as_cupy_stream(self._user_stream, self.index)
            return self._made_stream

    def _stream(self) -> Any:
        return self._cupy().cuda.get_current_stream()

    def synchronize(self) -> None:
        self._stream().synchronize()

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

    def alloc(self, nbytes: int) -> Any:
        cupy = self._cupy()
        return cupy.empty(nbytes, dtype=cupy.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return self._cupy().empty(shape, dtype=dtype)

    def upload(self, host: npt.NDArray[np.uint8], dst: Any) -> Any:
        """The copy on this read's copy stream (non-blocking, so that it does not wait for the
        legacy default stream either) and the event recorded after it."""
        if host.size > dst.size:
            raise ValueError(f"upload of {host.size} bytes leaves the {dst.size}-byte buffer")
        cupy = self._cupy()
        with self._lock:
            if self._copy_stream is None:
                self._copy_stream = cupy.cuda.Stream(non_blocking=True)
            stream = self._copy_stream
        dst[: host.size].set(host, stream=stream)
        return stream.record()

    def wait_for(self, event: Any) -> None:
        self._stream().wait_event(event)

    def record(self) -> Any:
        return self._stream().record()

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: Any, offset: int = 0) -> Any:
        """The copy, asynchronous from pinned memory, and the CUDA event recorded after it on the
        current stream (``Stream.record()``). Nothing waits here: the staging buffer goes back
        to its StagingPool with the event, and is refilled only once the event has completed,
        so the copy of a batch overlaps the decode of the one before. From pageable memory CUDA
        returns once the bytes have been staged, so such a buffer may go at once."""
        if offset < 0 or offset + host.size > dst.size:
            raise ValueError(f"copy of {host.size} bytes to offset {offset} leaves the {dst.size}-byte buffer")
        stream = self._stream()
        dst[offset : offset + host.size].set(host, stream=stream)
        return stream.record()

    # -- file reads ------------------------------------------------------------------------------

    def read_files(self, reads: Sequence[FileRead], staging: Any, work: Any) -> list[int]:
        kvikio = _kvikio()
        if kvikio is None:
            raise RuntimeError("read_files needs kvikio")
        # The buffers come from ``buffers``: no queued work uses them (see _device_block), so
        # kvikio may write them without a synchronisation.
        futures: list[Any] = []
        # The handles stay referenced until every read has finished: a handle evicted from the
        # cache meanwhile would otherwise be closed under its own read.
        handles: list[Any] = []
        error: BaseException | None = None
        try:
            for read in reads:
                buffer = staging if read.target == "staging" else work
                n = read.span.nbytes
                if read.offset < 0 or read.offset + n > buffer.size:
                    # Raised here so that the reads already started are awaited below, like any error.
                    raise ValueError(  # noqa: TRY301
                        f"file read of {n} bytes at {read.offset} leaves the {buffer.size}-byte buffer"
                    )
                if n == 0:
                    futures.append(None)
                    continue
                try:
                    handles.append(_FILE_HANDLES.handle(kvikio, read.span))
                    futures.append(handles[-1].pread(buffer[read.offset : read.offset + n], n, read.span.offset))
                except Exception as exc:
                    failure = _read_failure(read, exc)
                    if failure is exc:
                        raise
                    raise failure from exc
        except BaseException as exc:
            error = exc
        # Every read started must finish before its buffers can go back to the memory pool.
        done: list[int] = []
        for read, future in zip(reads, futures):
            try:
                done.append(0 if future is None else int(future.get()))
            except Exception as exc:
                error = error or _read_failure(read, exc)
                done.append(-1)
            except BaseException as exc:
                error = error or exc
                done.append(-1)
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no cycle through this frame, which holds the read buffers
        return done

    # -- decoding --------------------------------------------------------------------------------

    def _stream_handle(self) -> int:
        """The current stream as a ``cudaStream_t`` for nvCOMP. CuPy's null stream is handle 0,
        which nvCOMP's Codec would read as "no stream given" and make its own; the legacy
        default stream's special handle (cudaStreamLegacy, 1) names it explicitly."""
        return int(self._stream().ptr) or _CUDA_STREAM_LEGACY

    def _codec(self, algorithm: str) -> Any:
        """nvCOMP's codec for ``algorithm`` on this device, the current stream and this thread.

        Codecs hold scratch state and nvCOMP releases the GIL, so a codec serves one thread.
        Codecs of the legacy default stream and of streams registered with
        :func:`keep_stream_codecs` are kept across reads: any other stream is the caller's and
        may be destroyed after the read, so its codecs live as long as the read."""
        handle = self._stream_handle()
        thread = threading.get_ident()
        kept = _CODECS.kept_codec(algorithm, self.index, handle, thread)
        if kept is not None:
            return kept
        key = (algorithm, thread)
        codec = self._read_codecs.get(key)
        if codec is None:
            codec = self._read_codecs[key] = _new_codec(algorithm, self.index, handle)
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
    ) -> PendingSizes:
        nvcomp = _nvcomp()
        codec = self._codec(algorithm)
        misaligned = _misaligned_streams(codec, algorithm, src, src_offsets, dst, dst_offsets)
        if misaligned.size:
            # Those streams come out failed (-1), and the executor decodes their chunks on the
            # CPU (logged as a fallback; an error under ``strict``): nvCOMP's contract excludes
            # them. The others are decoded as a batch.
            count = len(src_offsets)
            keep = np.setdiff1d(np.arange(count), misaligned)
            _log_once(
                f"nvCOMP's {algorithm} decoder requires {_required_alignment(codec, algorithm)}-byte alignment; "
                f"{misaligned.size} of {count} streams of a batch are not aligned and go to the CPU"
            )
            so, sn, do, dn = ([int(v[i]) for i in keep] for v in (src_offsets, src_nbytes, dst_offsets, dst_nbytes))
            kept = self.decompress_batch(algorithm, src, so, sn, dst, do, dn) if keep.size else None
            return _failed_except(count, keep, kept)
        handle = self._stream_handle()
        try:
            srcs = nvcomp.as_arrays(src, list(src_offsets), list(src_nbytes), cuda_stream=handle)
            outs = nvcomp.as_arrays(dst, list(dst_offsets), list(dst_nbytes), cuda_stream=handle)
        except TypeError as exc:  # nvCOMP before 6 cannot carve a batch out of one buffer
            _log_once(f"nvCOMP cannot carve batches ({exc}); decoding {algorithm} streams one at a time")
            return self._decode_one_by_one(codec, src, src_offsets, src_nbytes, dst, dst_offsets, dst_nbytes)

        config = _decompression_config(codec, algorithm, dst_nbytes)

        def batched() -> Callable[[], list[int]]:
            result = decode_carved(codec, algorithm, srcs, outs, config)
            # ``buffer_sizes`` waits for the decode: read once the executor has synchronised.
            return lambda: [int(n) for n in result.buffer_sizes]

        return decode_batch_or_each(
            algorithm,
            len(src_offsets),
            batched,
            lambda i: _decode_into(codec, algorithm, srcs[i], outs[i]),
            self._context_error,
            self._batch_log,
        )

    def _context_error(self) -> BaseException | None:
        """The error a device synchronisation raises (a sticky CUDA error left by a decoder that
        read or wrote out of bounds), None when the context is healthy."""
        try:
            self._cupy().cuda.runtime.deviceSynchronize()
        except Exception as exc:
            return exc
        return None

    def _decode_one(self, codec: Any, src: Any, so: int, sn: int, dst: Any, do: int, dn: int) -> int:
        """Decode one stream into its own allocation and copy it to its place; -1 when it does
        not fit. Only for nvCOMP before 6, which cannot decode into a carved output: its decoder
        sizes that allocation from the stream itself, so this route is not bounded by the
        chunk's size (docs/reliability.md says so)."""
        nvcomp = _nvcomp()
        cupy = self._cupy()
        decoded = codec.decode(nvcomp.as_array(src[so : so + sn]))
        data = cupy.asarray(decoded).reshape(-1).view(cupy.uint8)
        if data.size > dn:
            return -1
        dst[do : do + data.size] = data
        return int(data.size)

    def _decode_one_by_one(
        self,
        codec: Any,
        src: Any,
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: Any,
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> PendingSizes:
        """Each stream decoded on its own (nvCOMP before 6); -1 where a stream fails or does not fit."""
        return decode_batch_or_each(
            "stream",
            len(src_offsets),
            None,
            lambda i: self._decode_one(codec, src, src_offsets[i], src_nbytes[i], dst, dst_offsets[i], dst_nbytes[i]),
            self._context_error,
            BatchDecodeLog(),
        )

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

    def checksums(
        self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]
    ) -> Callable[[], list[int]]:
        sums = kernels.launch_checksum_spans(kind, buffer, offsets, nbytes)
        return lambda: [int(v) for v in sums.get().tolist()]

    def check_lz4(
        self, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], decoded_nbytes: Sequence[int]
    ) -> Callable[[], list[int]]:
        verdicts = kernels.launch_lz4_check_spans(buffer, offsets, nbytes, decoded_nbytes)
        return lambda: [int(v) for v in verdicts.get().tolist()]

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
        kernels.launch_unshuffle_spans(kernel, buffer, src_offsets, dst_offsets, nbytes, typesizes, partial_rule)

    def launch_assemble(self, out: Any, work: Any, launch: AssembleLaunch) -> None:
        if not out.flags.c_contiguous:
            raise ValueError("assemble: the output must be C-contiguous")
        check_assemble_sources(launch, work.size)
        offsets, nbytes = launch.source_offsets.tolist(), launch.source_nbytes.tolist()
        _launch(out, [None if o < 0 else work[o : o + n] for o, n in zip(offsets, nbytes, strict=True)], launch)

    def assemble_boxes(self, out: Any, sources: Sequence[Any], copies: BoxCopies) -> None:
        # ``out`` is checked against the boxes by the launcher.
        pointers, nbytes = source_facts(sources)
        copies.check_sources(nbytes)
        alignment = min(copies.itemsize, 8)
        if int(out.data.ptr) % alignment or any(p % alignment for p in pointers):
            raise ValueError(f"assemble: the output and every source must be aligned to {alignment} bytes")
        copies.set_pointers(pointers)
        kernels.launch_box_copies(out, copies)


def _launch(out: Any, sources: list[Any], launch: AssembleLaunch) -> None:
    """``assemble_chunks`` of ``launch``'s tables from ``sources`` (device arrays or None, one per
    row); :func:`.kernels.launch_assemble` checks the geometry and the alignment again."""
    nd = launch.ndim
    kernels.launch_assemble(
        out,
        sources,
        launch.src_strides[:, :nd],
        launch.src_offsets[:, :nd],
        launch.src_steps[:, :nd],
        launch.dst_offsets[:, :nd],
        launch.extents[:, :nd],
        launch.fill_value.tobytes(),
        out_strides=launch.out_strides[:nd].tolist(),
        swap_width=launch.swap_width,
    )


#: the input and output alignment each algorithm's decoder asks for, learnt from its first codec
_REQUIRED_ALIGNMENT: dict[str, int] = {}


def _required_alignment(codec: Any, algorithm: str) -> int:
    """The alignment nvCOMP's ``algorithm`` decoder requires of its streams
    (``get_required_decompression_alignment``; 1 where this nvCOMP cannot say)."""
    known = _REQUIRED_ALIGNMENT.get(algorithm)
    if known is None:
        ask = getattr(codec, "get_required_decompression_alignment", None)
        known = _REQUIRED_ALIGNMENT[algorithm] = max(int(ask()), 1) if callable(ask) else 1
    return known


def _misaligned_streams(
    codec: Any, algorithm: str, src: Any, src_offsets: Sequence[int], dst: Any, dst_offsets: Sequence[int]
) -> npt.NDArray[np.intp]:
    """The streams of a batch whose input or output is not aligned as nvCOMP's decoder requires.

    The plan aligns streams and outputs to 8 bytes, except the zstd frames of one shard file the
    device reads at once, which keep their file layout on the strength of nvCOMP's documented
    1-byte zstd alignment (1, 4 and 1 byte for zstd, deflate and LZ4 on an H100 with nvCOMP 6.0),
    and the split streams of a Blosc block of an odd size set by its writer."""
    alignment = _required_alignment(codec, algorithm)
    if alignment == 1:
        return np.zeros(0, dtype=np.intp)
    starts = int(src.data.ptr) + np.asarray(src_offsets, dtype=np.int64)
    ends = int(dst.data.ptr) + np.asarray(dst_offsets, dtype=np.int64)
    return np.flatnonzero((starts % alignment != 0) | (ends % alignment != 0))


def _failed_except(count: int, keep: npt.NDArray[np.intp], sizes_of_kept: PendingSizes | None) -> PendingSizes:
    """The sizes of a batch of ``count`` streams of which only ``keep`` were decoded (their
    sizes: ``sizes_of_kept``, None when there are none); the others failed (-1)."""

    def sizes() -> npt.NDArray[np.int64]:
        out = np.full(count, -1, dtype=np.int64)
        if sizes_of_kept is not None:
            out[keep] = sizes_of_kept()
        return out

    return sizes


#: algorithms whose codec took no ``decompression_config`` (an nvCOMP older than 6)
_NO_DECOMPRESSION_CONFIG: set[str] = set()


def _decompression_config(codec: Any, algorithm: str, dst_nbytes: Sequence[int]) -> Any:
    """nvCOMP's decompression config for streams of the given decoded sizes, built from what the
    host knows (nvCOMP 6: ``codec.decompression_config(codec.compression_config(sizes))``), so
    that ``decode`` neither synchronises to configure itself nor, for LZ4 and Deflate, walks
    every stream once without output to learn its size. None when this nvCOMP cannot build one:
    ``decode`` then configures itself, as before (logged once)."""
    if algorithm in _NO_DECOMPRESSION_CONFIG:
        return None
    try:
        return codec.decompression_config(codec.compression_config(list(dst_nbytes)))
    except (TypeError, AttributeError) as exc:
        _NO_DECOMPRESSION_CONFIG.add(algorithm)
        _log_once(f"nvCOMP builds no {algorithm} decompression config ({exc}); its decode configures itself")
        return None


def _decode_into(codec: Any, algorithm: str, src: Any, out: Any) -> int:
    """Decode one stream of a failed batch into its own place of the batch's output (a batch of
    one): the output stays the chunk's size, whatever the stream would decode to, so finding the
    bad stream of a batch allocates nothing sized by the data. Waits for the decode."""
    result = decode_carved(codec, algorithm, [src], [out], None)
    return int(result.buffer_sizes[0])


def decompression_config(codec: Any, algorithm: str, dst_nbytes: Sequence[int]) -> Any:
    """The decompression config gpuzarr gives ``codec`` for streams that decode to
    ``dst_nbytes`` (see :func:`_decompression_config`; None: none can be built)."""
    return _decompression_config(codec, algorithm, dst_nbytes)


def decode_carved(codec: Any, algorithm: str, srcs: Any, outs: Any, config: Any) -> Any:
    """nvCOMP's batched decode as gpuzarr calls it: ``codec.decode(srcs, out=outs)`` into
    outputs carved out of one buffer, given ``config`` as ``decompression_config`` when there
    is one; a ``decode`` that does not take that keyword is called without it (logged once)."""
    if config is not None:
        try:
            return codec.decode(srcs, out=outs, decompression_config=config)
        except TypeError as exc:
            if "decompression_config" not in str(exc):
                raise
            _NO_DECOMPRESSION_CONFIG.add(algorithm)
            _log_once(f"nvCOMP's decode takes no decompression_config ({exc}); its decode configures itself")
    return codec.decode(srcs, out=outs)


_logged_notes: set[str] = set()


def _log_once(note: str) -> None:
    if note not in _logged_notes:
        _logged_notes.add(note)
        logger.info("gpuzarr: %s", note)


_allocator_lock = threading.Lock()
_allocator_routed = False


def _nvcomp() -> Any:
    """``nvidia.nvcomp``, its device allocations routed through CuPy's memory pool."""
    try:
        from nvidia import nvcomp
    except ImportError as exc:
        raise ImportError(f"gpuzarr's GPU decoders need nvidia-nvcomp; {kernels.GPU_EXTRA_HINT}") from exc
    if not _allocator_routed:
        _route_allocations(nvcomp)
    return nvcomp


def _route_allocations(nvcomp: Any) -> None:
    """Once per process: nvCOMP allocates its scratch (for zstd about three times a batch's
    decoded bytes) from CuPy's memory pool, so the free blocks the pool holds serve it too and
    ``free_memory`` means what it says. nvCOMP's ``set_device_allocator`` docstring recommends
    composing CuPy's memory classes; the allocator is called as ``allocate(nbytes, stream)``."""
    global _allocator_routed
    with _allocator_lock:
        if _allocator_routed:
            return
        set_allocator = getattr(nvcomp, "set_device_allocator", None)
        if set_allocator is None:
            _log_once("this nvCOMP has no set_device_allocator; its scratch is allocated outside CuPy's pool")
        else:
            cupy = kernels.import_cupy()

            def allocate(nbytes: int, stream: Any) -> Any:
                return cupy.cuda.alloc(nbytes)

            set_allocator(allocate)
            _outlive_interpreter(allocate)
        _allocator_routed = True


def _outlive_interpreter(allocate: Callable[[int, Any], Any]) -> None:
    """Keep one reference to ``allocate`` for ever. nvCOMP holds the allocator in a C++ static
    that is destroyed after the interpreter has finalised; were its reference the last one, that
    destructor would run the interpreter's deallocator and the process would die with SIGSEGV
    at exit (seen on an H100 with nvCOMP 6.0). With this reference the destructor only lowers
    a count. The cost is one function object that is never freed."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(allocate))


__all__ = ["CodecCache", "CudaDevice", "FileHandleCache", "as_cupy_stream", "release_gpu_buffers"]
