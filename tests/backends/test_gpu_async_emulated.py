"""``Array.read_async`` on the GPU path (emulated device): the CPU engine's results bit for bit,
and the read ordered on the stream current in the calling thread when it was asked for, not on
whatever stream the request thread has."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from gpuzarr.backends.cuda import handoff
from gpuzarr.backends.cuda.cupy_device import CudaDevice

from .cuda_matrix import SELECTIONS, assert_bitwise_equal, cpu_result, make_array, open_on_gpu

if TYPE_CHECKING:
    from .emulated_gpu import EmulatedGpu

TIMEOUT = 60


@pytest.mark.parametrize("name", ["v3-zstd-f4", "v3-blosc-lz4-shuffle-u2", "v3-sharded-zstd-crc32c"])
def test_read_async_equals_the_cpu_engine(emulated_gpu: EmulatedGpu, name: str) -> None:
    array = make_array(name)
    gpu = open_on_gpu(array)
    started = [(sel, gpu.read_async(sel)) for sel in SELECTIONS.values()]
    for sel, future in started:
        assert_bitwise_equal(np.asarray(future.result(TIMEOUT)), cpu_result(array, sel))


def test_read_async_orders_the_read_on_the_callers_stream(
    emulated_gpu: EmulatedGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    callers = iter(["stream-of-call-1", "stream-of-call-2"])
    monkeypatch.setattr(handoff, "caller_stream", lambda reader: next(callers))
    first = gpu.read_async(np.s_[0:20, 5:30])
    first.result(TIMEOUT)
    seen_first = {d.stream for d in emulated_gpu.devices}
    second = gpu.read_async(np.s_[3:9], stream="given-stream")  # a stream given wins
    second.result(TIMEOUT)
    assert seen_first == {"stream-of-call-1"}
    assert {d.stream for d in emulated_gpu.devices} - seen_first == {"given-stream"}
    assert_bitwise_equal(np.asarray(first.result()), cpu_result(array, np.s_[0:20, 5:30]))


def test_read_async_into_out(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-gzip-i2")
    gpu = open_on_gpu(array)
    out = np.zeros((10, 20), dtype="<i2")
    assert gpu.read_async(np.s_[30:40, 1:21], out=out).result(TIMEOUT) is out
    assert_bitwise_equal(out, cpu_result(array, np.s_[30:40, 1:21]))


def test_caller_stream_is_cupys_current_stream_on_the_readers_device(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def current_stream(index: int) -> Any:
        asked.append(index)
        return f"current on {index}"

    monkeypatch.setattr(handoff, "current_stream", current_stream)
    cuda = types.SimpleNamespace(device_factory=CudaDevice, index=1)
    assert handoff.caller_stream(cuda) == "current on 1"  # type: ignore[arg-type]
    emulated = types.SimpleNamespace(device_factory=lambda index, stream: None, index=0)
    assert handoff.caller_stream(emulated) is None  # type: ignore[arg-type]
    assert asked == [1]
