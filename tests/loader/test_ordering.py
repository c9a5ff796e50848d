"""The CUDA ordering's consumer-side device objects: made once per consumer stream handle, not
once per batch. A stand-in reader and device factory (no CUDA here)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpuzarr.loader import ordering
from gpuzarr.loader.ordering import CudaOrdering


class TorchLikeStream:
    """A new object for the same stream at every call, as ``torch.cuda.current_stream()``."""

    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


def _ordering(made: list[tuple[Any, Any]]) -> CudaOrdering:
    cuda = CudaOrdering.__new__(CudaOrdering)  # no reader for a real device here
    cuda._reader = SimpleNamespace(name="reader")
    cuda._consumers = {}

    def device_on(reader: Any, stream: Any) -> Any:
        made.append((reader, stream))
        return SimpleNamespace(stream=stream)

    cuda._device_on = device_on
    return cuda


def test_stream_handles_of_cupy_and_torch_streams() -> None:
    assert ordering._stream_handle(SimpleNamespace(ptr=0)) == 0  # CuPy's null stream
    assert ordering._stream_handle(SimpleNamespace(ptr=123)) == 123
    assert ordering._stream_handle(TorchLikeStream(456)) == 456
    assert ordering._stream_handle(None) is None
    assert ordering._stream_handle(SimpleNamespace(ptr=True)) is None
    assert ordering._stream_handle(object()) is None


def test_one_consumer_device_per_stream_handle() -> None:
    made: list[tuple[Any, Any]] = []
    cuda = _ordering(made)
    first = cuda._consumer(TorchLikeStream(7))
    for _ in range(5):
        assert cuda._consumer(TorchLikeStream(7)) is first
    other = cuda._consumer(SimpleNamespace(ptr=8))
    assert other is not first
    assert len(made) == 2
    # A stream without a handle is never cached.
    cuda._consumer(None)
    cuda._consumer(None)
    assert len(made) == 4


def test_consumer_devices_are_let_go_past_the_limit() -> None:
    made: list[tuple[Any, Any]] = []
    cuda = _ordering(made)
    for handle in range(ordering.MAX_CONSUMER_STREAMS * 3):
        cuda._consumer(TorchLikeStream(handle))
        assert len(cuda._consumers) <= ordering.MAX_CONSUMER_STREAMS
    assert len(made) == ordering.MAX_CONSUMER_STREAMS * 3
