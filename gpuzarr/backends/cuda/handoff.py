"""What a caller that reads on a side stream and hands results to another stream needs (the data
loader): the side stream itself, and device objects to record events on one stream and make
another wait for them, without importing CuPy outside this package."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import kernels
from .cupy_device import CudaDevice, keep_stream_codecs

if TYPE_CHECKING:
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


def caller_stream(reader: CudaReader) -> Any:
    """The stream a read by ``reader`` started in the calling thread is ordered on: CuPy's
    current stream on its device, for a read run on another thread (``Array.read_async``); None
    where the reader's devices are not CuPy devices (the emulated device takes no stream)."""
    if reader.device_factory is not CudaDevice:
        return None
    return current_stream(reader.index)


def memory_owner(array: Any) -> Any:
    """The object holding a CuPy array's memory: its ``MemoryPointer``'s ``mem``, which every
    view of the array (and a DLPack capsule made from one) keeps a reference to."""
    pointer = getattr(array, "data", None)
    owner = getattr(pointer, "mem", None)
    return array if owner is None else owner


__all__ = ["caller_stream", "current_stream", "device_on", "memory_owner", "side_stream"]
