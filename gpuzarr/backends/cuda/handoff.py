"""What reads that run on one stream or thread and hand results to another need, without importing
CuPy outside this package: the data loader's side stream and device objects to record events on
one stream and make another wait for them; and the caller's device, allocator and stream that a
read started on one thread and run on another (``Array.read_async``) keeps (``CallerContext``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from . import kernels
from .cupy_device import CudaDevice, as_cupy_stream, keep_stream_codecs

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .device import Device
    from .reader import CudaReader


def side_stream(reader: CudaReader, owner: object) -> Any:
    """A new non-blocking CUDA stream on the reader's device, for reads that overlap the work on
    the consumer's stream; None where the reader's devices are not CuPy devices (the emulated
    device of the tests runs everything in host order and takes no stream).

    The stream's nvCOMP codecs are kept from read to read for as long as ``owner`` lives (the
    stream too): made anew for each read, they cost a loader's every window their set-up."""
    if reader.device_factory is not CudaDevice:
        return None
    cupy = kernels.import_cupy()
    with cupy.cuda.Device(reader.index):
        stream = cupy.cuda.Stream(non_blocking=True)
    keep_stream_codecs(stream, owner)
    return stream


def device_on(reader: CudaReader, stream: Any) -> Device:
    """A device object of the reader's device ordered on ``stream`` (a CuPy or PyTorch stream;
    None: CuPy's current stream), for ``record``, ``wait_for``, ``empty`` and ``from_host``
    inside its ``activate()`` block."""
    return reader.device_factory(reader.index, stream)


def current_stream(index: int) -> Any:
    """CuPy's current stream on device ``index`` in the calling thread (the stream a consumer of
    CuPy arrays works on)."""
    cupy = kernels.import_cupy()
    with cupy.cuda.Device(index):
        return cupy.cuda.get_current_stream()


#: ``cudaStreamPerThread``: a handle each host thread resolves to its own default stream
PER_THREAD_STREAM = 2


class CallerContext:
    """What a read asked for on one thread and run on another keeps of the first.

    That is its device, the stream it is ordered on and CuPy's allocator (kept per thread).

    A per-thread default stream (``cupy.cuda.Stream.ptds``, CuPy's default under
    ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``) means another stream on the thread that runs the
    read. There an event recorded on the caller's stream at the call orders the read after the
    caller's work, on a stream of its own that is waited for before the read ends: the result is
    complete when the future is done.
    """

    def __init__(self, index: int, stream: Any, allocator: Any, event: Any) -> None:
        self.index = index
        self.stream = stream
        self.allocator = allocator
        self.event = event

    @property
    def needs_output(self) -> bool:
        """Whether a read without ``out`` must be given one made by :meth:`output` here.

        Memory CuPy hands out on a stream goes back to that stream's pool; a result made on the
        read's own stream (a per-thread default stream's case) would be handed out again there,
        unordered with the caller's work on it.
        """
        return self.event is not None

    def output(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new CuPy array for the read's result, made on the calling thread's stream and allocator."""
        cupy = kernels.import_cupy()
        with cupy.cuda.Device(self.index), cupy.cuda.using_allocator(self.allocator), self.stream:
            return cupy.empty(shape, dtype)

    @contextlib.contextmanager
    def entered(self) -> Iterator[Any]:
        """The device, allocator and stream current on this thread for the read inside.

        It yields the stream, which the read is given as ``stream`` too.
        """
        cupy = kernels.import_cupy()
        with cupy.cuda.Device(self.index), cupy.cuda.using_allocator(self.allocator):
            if self.event is None:
                with self.stream:
                    yield self.stream
                return
            own = cupy.cuda.Stream(non_blocking=True)
            own.wait_event(self.event)
            try:
                with own:
                    yield own
            except BaseException:
                # Nothing of a failed read may write into ``out`` afterwards either; its own
                # error is the one raised.
                with contextlib.suppress(Exception):
                    own.synchronize()
                raise
            own.synchronize()


def caller_context(reader: CudaReader, stream: Any = None) -> CallerContext | None:
    """The :class:`CallerContext` of a read by ``reader`` asked for on this thread.

    The read is ordered on ``stream`` (None: CuPy's current stream on the reader's device).
    None where the reader's devices are not CuPy devices (the emulated device takes no stream).
    """
    if reader.device_factory is not CudaDevice:
        return None
    cupy = kernels.import_cupy()
    ordered_on = current_stream(reader.index) if stream is None else as_cupy_stream(stream, reader.index)
    with cupy.cuda.Device(reader.index):
        allocator = cupy.cuda.get_allocator()
        event = ordered_on.record() if int(ordered_on.ptr) == PER_THREAD_STREAM else None
    return CallerContext(reader.index, ordered_on, allocator, event)


def memory_owner(array: Any) -> Any:
    """The object holding a CuPy array's memory: its ``MemoryPointer``'s ``mem``, which every
    view of the array (and a DLPack capsule made from one) keeps a reference to."""
    pointer = getattr(array, "data", None)
    owner = getattr(pointer, "mem", None)
    return array if owner is None else owner


__all__ = ["CallerContext", "caller_context", "current_stream", "device_on", "memory_owner", "side_stream"]
