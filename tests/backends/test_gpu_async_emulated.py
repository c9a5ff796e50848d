"""``Array.read_async`` on the GPU path (emulated device): the CPU engine's results bit for bit,
and the read ordered on the stream current in the calling thread when it was asked for, not on
whatever stream the request thread has."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr import config, futures
from gpuzarr.backends import select as device_module
from gpuzarr.backends.cuda import handoff
from gpuzarr.backends.cuda.cupy_device import CudaDevice
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice
from gpuzarr.errors import DeviceError

from .cuda_matrix import SELECTIONS, assert_bitwise_equal, cpu_result, make_array, open_on_gpu

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .emulated_gpu import EmulatedGpu

TIMEOUT = 60


@pytest.mark.parametrize("name", ["v3-zstd-f4", "v3-blosc-lz4-shuffle-u2", "v3-sharded-zstd-crc32c"])
def test_read_async_equals_the_cpu_engine(emulated_gpu: EmulatedGpu, name: str) -> None:
    array = make_array(name)
    gpu = open_on_gpu(array)
    started = [(sel, gpu.read_async(sel)) for sel in SELECTIONS.values()]
    for sel, future in started:
        assert_bitwise_equal(np.asarray(future.result(TIMEOUT)), cpu_result(array, sel))


class _Context:
    """A stand-in for handoff.CallerContext: says on which thread, and around what, it was entered."""

    #: whether the calling thread is inside one of them
    inside = threading.local()

    needs_output = False

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.entered_on: list[str] = []

    @contextlib.contextmanager
    def entered(self) -> Iterator[Any]:
        self.entered_on.append(threading.current_thread().name)
        self.inside.yes = True
        try:
            yield None  # the emulated device takes no stream
        finally:
            self.inside.yes = False


def test_read_async_runs_inside_the_callers_context(emulated_gpu: EmulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's device, allocator and stream are taken at the call (``caller_context``) and
    entered around the read on the request thread, which then reads on that current stream."""
    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    contexts: list[_Context] = []

    def caller_context(reader: Any, stream: Any = None) -> _Context:
        contexts.append(_Context(stream))
        return contexts[-1]

    monkeypatch.setattr(handoff, "caller_context", caller_context)
    made_inside: list[tuple[bool, Any]] = []

    class Noted(CpuEmulatedDevice):
        def __init__(self, index: int, stream: Any, **kwargs: Any) -> None:
            made_inside.append((getattr(_Context.inside, "yes", False), stream))
            super().__init__(index, stream, **kwargs)

    emulated_gpu.device_class = Noted
    first = gpu.read_async(np.s_[0:20, 5:30])
    second = gpu.read_async(np.s_[3:9], stream="given-stream")
    assert_bitwise_equal(np.asarray(first.result(TIMEOUT)), cpu_result(array, np.s_[0:20, 5:30]))
    assert_bitwise_equal(np.asarray(second.result(TIMEOUT)), cpu_result(array, np.s_[3:9]))
    assert [c.stream for c in contexts] == [None, "given-stream"]
    assert all(len(c.entered_on) == 1 for c in contexts)
    # Every device of the reads was made inside the context, on its current stream (None).
    assert made_inside and all(inside and stream is None for inside, stream in made_inside)


def test_a_context_that_needs_an_output_makes_it_at_the_call(
    emulated_gpu: EmulatedGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a per-thread default stream the result is made on the caller's thread (its stream's
    memory pool), and the read fills it."""
    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    made: list[tuple[str, np.ndarray[Any, Any]]] = []

    class Needs(_Context):
        needs_output = True

        def output(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
            made.append((threading.current_thread().name, np.full(shape, -1, dtype)))
            return made[-1][1]

    monkeypatch.setattr(handoff, "caller_context", lambda reader, stream=None: Needs(stream))
    result = gpu.read_async(np.s_[2:30, 4:50]).result(TIMEOUT)
    assert [name for name, _ in made] == [threading.current_thread().name]
    assert result is made[0][1]
    assert_bitwise_equal(np.asarray(result), cpu_result(array, np.s_[2:30, 4:50]))
    given = np.zeros((28, 46), "<f4")
    assert gpu.read_async(np.s_[2:30, 4:50], out=given).result(TIMEOUT) is given
    assert len(made) == 1  # an out= of the caller's is used as it is


def test_strict_is_the_setting_at_the_call(emulated_gpu: EmulatedGpu) -> None:
    gpu = open_on_gpu(make_array("v2-delta-filter-cpu"))  # a codec the GPU path decodes on the CPU
    selection = np.s_[0:40, 0:40]
    gate = threading.Event()
    with config.set(async_concurrency=1):
        blocker = futures.submit(gate.wait, TIMEOUT)
        with config.set(strict=True):
            strict = gpu.read_async(selection)  # queued behind the blocker, run after the block
        relaxed = gpu.read_async(selection)
        gate.set()
        blocker.result(TIMEOUT)
        concurrent.futures.wait([strict, relaxed], timeout=TIMEOUT)
    assert isinstance(strict.exception(), DeviceError)
    assert_bitwise_equal(np.asarray(relaxed.result()), cpu_result(gpu, selection))


def test_open_async_takes_the_callers_current_device(
    emulated_gpu: EmulatedGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA's current device is per thread (``cupy.cuda.Device(1).use()``, torch.cuda.set_device):
    "gpu" and "auto" in open_async mean the caller's, not the request thread's."""
    current = threading.local()
    monkeypatch.setattr(device_module, "_current_device", lambda: getattr(current, "device", 0))
    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(8,), chunks=(4,), dtype="f4")
    current.device = 1
    for device in ("gpu", "cuda", "auto"):
        assert gpuzarr.open(array.store, device=device).device == "cuda:1"
        assert gpuzarr.open_async(array.store, device=device).result(TIMEOUT).device == "cuda:1"
    assert gpuzarr.open_async(array.store, device="cuda:0").result(TIMEOUT).device == "cuda:0"
    strings = gpuzarr.create(gpuzarr.MemoryStore(), shape=(2,), chunks=(2,), dtype="U3")
    assert gpuzarr.open_async(strings.store, device="auto").result(TIMEOUT).device == "cpu"


def test_read_async_into_out(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-gzip-i2")
    gpu = open_on_gpu(array)
    out = np.zeros((10, 20), dtype="<i2")
    assert gpu.read_async(np.s_[30:40, 1:21], out=out).result(TIMEOUT) is out
    assert_bitwise_equal(out, cpu_result(array, np.s_[30:40, 1:21]))


class _FakeStream:
    def __init__(self, ptr: int, log: list[str], name: str) -> None:
        self.ptr, self.log, self.name = ptr, log, name

    def __enter__(self) -> _FakeStream:
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(f"exit {self.name}")

    def record(self) -> str:
        self.log.append(f"record on {self.name}")
        return f"event of {self.name}"

    def wait_event(self, event: str) -> None:
        self.log.append(f"{self.name} waits for {event}")

    def synchronize(self) -> None:
        self.log.append(f"synchronize {self.name}")


def _fake_cupy(current_ptr: int, log: list[str]) -> Any:
    """Just what handoff.caller_context and CallerContext.entered call of CuPy, logged."""

    @contextlib.contextmanager
    def device(index: int) -> Iterator[None]:
        log.append(f"device {index}")
        yield

    @contextlib.contextmanager
    def using_allocator(allocator: Any) -> Iterator[None]:
        log.append(f"allocator {allocator}")
        yield

    current = _FakeStream(current_ptr, log, "current")

    def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
        log.append(f"empty {shape}")
        return np.empty(shape, dtype)

    cuda = types.SimpleNamespace(
        Device=device,
        using_allocator=using_allocator,
        get_allocator=lambda: "caller's allocator",
        get_current_stream=lambda: current,
        Stream=lambda non_blocking: _FakeStream(0x99, log, f"own non_blocking={non_blocking}"),
    )
    return types.SimpleNamespace(cuda=cuda, empty=empty)


def test_caller_context_enters_the_callers_device_allocator_and_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    monkeypatch.setattr(handoff.kernels, "import_cupy", lambda: _fake_cupy(0x1234, log))
    reader = types.SimpleNamespace(device_factory=CudaDevice, index=1)
    context = handoff.caller_context(reader)  # type: ignore[arg-type]
    assert context is not None and context.event is None
    log.clear()
    with context.entered() as stream:
        log.append("read")
    assert stream is context.stream
    assert log == ["device 1", "allocator caller's allocator", "enter current", "read", "exit current"]
    assert not context.needs_output
    emulated = types.SimpleNamespace(device_factory=lambda index, stream: None, index=0)
    assert handoff.caller_context(emulated) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("fails", [False, True])
def test_a_per_thread_default_stream_is_ordered_by_an_event(monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    """``Stream.ptds`` names another stream on each thread: the read runs on a stream of its own
    that waits for an event recorded on the caller's at the call, and is synchronised before the
    future is done, also when the read fails."""
    log: list[str] = []
    monkeypatch.setattr(handoff.kernels, "import_cupy", lambda: _fake_cupy(handoff.PER_THREAD_STREAM, log))
    reader = types.SimpleNamespace(device_factory=CudaDevice, index=0)
    context = handoff.caller_context(reader)  # type: ignore[arg-type]
    assert context is not None
    assert log[-1] == "record on current"  # on the caller's thread, at the call
    log.clear()
    assert context.needs_output
    assert context.output((2, 3), "<f4").shape == (2, 3)
    assert log == ["device 0", "allocator caller's allocator", "enter current", "empty (2, 3)", "exit current"]
    log.clear()
    with contextlib.suppress(RuntimeError), context.entered() as stream:
        log.append(f"read on {stream.name}")
        if fails:
            raise RuntimeError("the read failed")
    own = "own non_blocking=True"
    assert log == [
        "device 0",
        "allocator caller's allocator",
        f"{own} waits for event of current",
        f"enter {own}",
        f"read on {own}",
        f"exit {own}",
        f"synchronize {own}",
    ]
