"""How the loader's background reads are ordered against the consumer: on the CPU, by the queue
between the threads alone; on a GPU, by CUDA events between a side stream and the consumer's
stream, and the hand-over of finished batches as NumPy arrays, CuPy arrays or PyTorch tensors.

On a GPU the producer thread reads batch k+1 on the loader's side stream while the consumer's
stream works on batch k. After each batch it records an event on the side stream; the consumer's
stream (PyTorch's current stream for ``output="torch"``, CuPy's for ``"cupy"``) waits for that
event when the batch is handed over, without a host wait, and ``torch.from_dlpack`` wraps the
buffer without a copy. The consumer's stream is remembered with the buffer: before the buffer is
read into again, an event recorded on that stream makes the side stream wait for the work the
consumer queued on the batch.

torch is imported only when ``output="torch"``; CuPy only inside ``backends/cuda``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import backends
from ..backends.cpu import empty as host_empty
from ..backends.cpu import torch_types
from ..backends.select import device_index
from ..errors import InvalidArgumentError
from ..parallel import run_tasks
from .pieces import copy_pieces

if TYPE_CHECKING:
    from ..backends.cuda.reader import CudaReader
    from .pieces import CropPieces

OUTPUTS = ("torch", "cupy", "numpy")


class HostOrdering:
    """The CPU: buffers are NumPy arrays and the queue between the threads orders everything."""

    stream: Any = None
    #: whether buffers live in device memory
    on_device = False

    def producing(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return host_empty(shape, dtype)

    def from_host(self, host: np.ndarray[Any, Any]) -> Any:
        return host

    def to_host(self, value: Any) -> np.ndarray[Any, Any]:
        return np.asarray(value)

    def plan_copies(
        self, crop_shape: tuple[int, ...], dtype: np.dtype[Any], runs: list[tuple[int, CropPieces]]
    ) -> list[Any] | None:
        """What :meth:`assemble` will need for each of ``runs`` ((crops, their pieces)) worked
        out ahead, all together; None where it needs nothing (the CPU copies piece by piece)."""
        return None

    def assemble(self, out: Any, sources: list[Any], pieces: CropPieces, copies: Any = None) -> None:
        """Copy every piece of a batch into ``out`` from ``sources`` (the decoded chunks, by row
        of ``pieces.chunks``): each crop's pieces on one of the CPU threads, NumPy copies that
        let go of the GIL while they copy. ``copies``: what :meth:`plan_copies` gave (none here)."""
        run_tasks(lambda rows: copy_pieces(out, sources, pieces, rows), pieces.crop_rows())

    def batch_budget(self) -> int:
        """Decoded bytes one read may hold on the device (none on the CPU)."""
        return 0

    def record(self) -> Any:
        return None

    def hand_over(self, event: Any, output: str) -> None:
        return None

    def memory_owner(self, buffer: Any) -> Any:
        """The object every view of ``buffer`` references: the array NumPy points views at (the
        one owning the memory, or the first array over a buffer of another kind, such as shared
        memory; not that buffer, which views do not reference)."""
        owner = buffer
        while isinstance(owner, np.ndarray) and isinstance(owner.base, np.ndarray):
            owner = owner.base
        return owner

    def consumer_stream(self, output: str) -> Any:
        return None

    def reuse_event(self, stream: Any) -> Any:
        return None

    def wait_before_reuse(self, event: Any) -> None:
        self.wait_for(event)

    def wait_for(self, event: Any) -> None:
        """Make the work queued from now on (on the loader's stream) wait for ``event``."""
        return None

    def settle(self, event: Any) -> None:
        return None

    def decode_lane(self) -> HostOrdering:
        """The ordering a second thread decodes windows ahead on (see
        ``ChunkAssembler.decode_window``): this one, where there is no stream to keep apart."""
        return self


class CudaOrdering(HostOrdering):
    """A CUDA device: reads on a side stream of the loader's own, handed over with events.

    With the emulated device of the test-suite (no CuPy) there is no side stream: the device
    runs every call at once, and hand-overs wait for the (already complete) events on the host.
    """

    on_device = True

    def __init__(self, device: str) -> None:
        from ..backends.cuda.reader import CudaReader

        reader = backends.reader_for(device)
        assert isinstance(reader, CudaReader)
        self._start(reader, device_index(device) or 0, self)

    def _start(self, reader: CudaReader, index: int, owner: object) -> None:
        """Set up on a new side stream of ``reader``'s device, whose codecs ``owner`` keeps."""
        from ..backends.cuda.handoff import device_on, side_stream

        self._reader = reader
        self._device_on = device_on
        #: device objects ordered on the consumer's streams, by stream handle: two are needed
        #: per batch (its hand-over and its buffers' return), on the same stream in a training loop
        self._consumers: dict[int, Any] = {}
        self.index = index
        self.stream = side_stream(reader, owner)
        self._side = device_on(reader, self.stream)
        self._lane: CudaOrdering | None = None

    @property
    def _real(self) -> bool:
        return self.stream is not None

    def producing(self) -> contextlib.AbstractContextManager[Any]:
        # The loader's side stream (and device) current for every device call of the producer.
        return self._side.activate()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        with self._side.activate():
            return self._side.empty(shape, dtype)

    def from_host(self, host: np.ndarray[Any, Any]) -> Any:
        with self._side.activate():
            return self._side.from_host(host)

    def to_host(self, value: Any) -> np.ndarray[Any, Any]:
        if isinstance(value, np.ndarray):
            # Host memory already (the emulated device): copied all the same, because the
            # buffer goes back to the pool at once and the next batch may be read into it
            # while the consumer still holds this one, as after a real device's .get().
            return value.copy()
        return np.asarray(value.get())  # a CuPy array; .get() waits for its stream

    def plan_copies(
        self, crop_shape: tuple[int, ...], dtype: np.dtype[Any], runs: list[tuple[int, CropPieces]]
    ) -> list[Any]:
        """The box copies of each run, checked and packed together (``box_copies_of_runs``)."""
        from ..backends.cuda.box_copies import BoxRun, box_copies_of_runs

        boxes = [BoxRun(n, p.chunk_shapes, p.chunk, p.crop, p.src_start, p.dst_start, p.extent) for n, p in runs]
        return list(box_copies_of_runs(tuple(crop_shape), np.dtype(dtype).itemsize, boxes))

    def assemble(self, out: Any, sources: list[Any], pieces: CropPieces, copies: Any = None) -> None:
        """Every piece of a batch in one launch of the assemble kernel, on the side stream, by
        the box copies :meth:`plan_copies` planned (``copies``) or planned here."""
        if copies is None:
            copies = self.plan_copies(tuple(out.shape[1:]), out.dtype, [(int(out.shape[0]), pieces)])[0]
        with self._side.activate():
            self._side.assemble_boxes(out, sources, copies)

    def batch_budget(self) -> int:
        from ..backends.cuda.reader import batch_budget

        with self._side.activate():
            return batch_budget(self._side)

    def record(self) -> Any:
        with self._side.activate():
            return self._side.record()

    def hand_over(self, event: Any, output: str) -> None:
        if event is None:
            return
        if not self._real or output == "numpy":
            event.synchronize()  # the batch goes to the host, or the device is emulated
            return
        consumer = self._consumer(self.consumer_stream(output))
        with consumer.activate():
            consumer.wait_for(event)

    def _consumer(self, stream: Any) -> Any:
        """The device object ordered on the consumer's ``stream``, made once per stream handle
        (PyTorch gives a new object for the same stream at every ``current_stream()``)."""
        handle = _stream_handle(stream)
        if handle is None:
            return self._device_on(self._reader, stream)
        consumer = self._consumers.get(handle)
        if consumer is None:
            if len(self._consumers) >= MAX_CONSUMER_STREAMS:
                self._consumers.clear()
            consumer = self._consumers[handle] = self._device_on(self._reader, stream)
        return consumer

    def memory_owner(self, buffer: Any) -> Any:
        if isinstance(buffer, np.ndarray):
            return super().memory_owner(buffer)
        from ..backends.cuda.handoff import memory_owner

        return memory_owner(buffer)

    def consumer_stream(self, output: str) -> Any:
        """The stream the consumer works on (in the consumer's thread, at hand-over); None for
        NumPy output, copied to the host at hand-over, and on the emulated device."""
        if not self._real or output == "numpy":
            return None
        if output == "torch":
            import torch

            return torch.cuda.current_stream(torch.device("cuda", self.index))
        from ..backends.cuda.handoff import current_stream

        return current_stream(self.index)

    def reuse_event(self, stream: Any) -> Any:
        """An event recorded now on the consumer's ``stream``: after the work it queued on a
        batch it no longer holds."""
        if stream is None:
            return None
        consumer = self._consumer(stream)
        with consumer.activate():
            return consumer.record()

    def wait_for(self, event: Any) -> None:
        if event is not None:
            with self._side.activate():
                self._side.wait_for(event)

    def decode_lane(self) -> HostOrdering:
        """The ordering of the loader's second decode lane: the same device and reader on a
        stream of its own (made once; its nvCOMP codecs are kept as long as this ordering).

        On the loader's side stream, a window's decode queued by the second lane and the batches
        of the window before, put together meanwhile by the producer, run one after the other
        on the device: a batch queued after part of the next window's decode waits for that
        part. On a stream of its own the decode overlaps them; the window then carries an event
        for the side stream to wait for (``ChunkAssembler.use_window``). Itself where there is
        no real stream (the emulated device runs every call at once)."""
        if not self._real:
            return self
        if self._lane is None:
            lane = CudaOrdering.__new__(CudaOrdering)
            lane._start(self._reader, self.index, self)
            self._lane = lane
        return self._lane

    def settle(self, event: Any) -> None:
        if event is not None:
            event.synchronize()


#: consumer streams whose device objects are kept (a loop uses one; more is a consumer switching
#: streams, whose old ones are let go)
MAX_CONSUMER_STREAMS = 4


def _stream_handle(stream: Any) -> int | None:
    """The ``cudaStream_t`` of a CuPy (``ptr``) or PyTorch (``cuda_stream``) stream; None for
    anything else (not cached)."""
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def ordering_for(device: str) -> HostOrdering:
    """The ordering of a resolved device."""
    return HostOrdering() if device == "cpu" else CudaOrdering(device)


def convert(buffer: Any, output: str, ordering: HostOrdering, dtype: np.dtype[Any] | None = None) -> Any:
    """One field of a handed-over batch as the loader's output type (no copy, except NumPy
    output of a GPU loader, which comes to the host). ``dtype``: the type the batch is handed
    over as, where the device read its bits as an integer type of that size (a ``bfloat16``
    field on a GPU: ``Volumes.batch_dtypes``); the memory is viewed as it, not converted."""
    as_bits = dtype is not None and np.dtype(buffer.dtype) != dtype
    if output == "numpy":
        host = ordering.to_host(buffer)
        return host.view(dtype) if as_bits else host
    if output == "cupy":
        return buffer
    try:
        from torch.utils.dlpack import from_dlpack
    except ImportError as exc:
        raise InvalidArgumentError(f"output='torch' needs PyTorch ({exc}); install it, or pass output='numpy'") from exc
    if isinstance(buffer, np.ndarray):
        # bfloat16 and float8 batches too, a host buffer of their bits viewed as them first
        return torch_types.as_tensor(buffer.view(dtype) if as_bits else buffer)
    tensor = from_dlpack(buffer)
    return torch_types.viewed_as(tensor, dtype) if as_bits and dtype is not None else tensor
