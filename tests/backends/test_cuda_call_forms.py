"""How ``cupy_device`` calls CuPy and nvCOMP, checked against fake ``cupy`` and
``nvidia.nvcomp`` modules: the stream forms CuPy 14 wants, nvCOMP's allocator set once, and
nvCOMP codecs neither shared between threads nor kept for a caller's stream."""

from __future__ import annotations

import gc
import sys
import threading
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuzarr.backends.cuda import cupy_device


class _Stream:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *args: object) -> None:
        pass


class FakeCupy(types.ModuleType):
    """What cupy_device touches of CuPy, recording the calls."""

    def __init__(self, *, from_external: bool = True) -> None:
        super().__init__("cupy")
        self.made: list[tuple[str, Any, Any]] = []
        self.current = _Stream(0)
        made = self.made

        class Stream(_Stream):
            pass

        class ExternalStream(_Stream):
            def __init__(self, ptr: int, device_id: int = -1) -> None:
                warnings.warn("ExternalStream is deprecated", DeprecationWarning, stacklevel=2)
                made.append(("ExternalStream", ptr, device_id))
                super().__init__(ptr)

        if from_external:

            def _from_external(obj: Any) -> Stream:
                made.append(("from_external", obj, None))
                return Stream(int(obj.__cuda_stream__()[1]))

            Stream.from_external = staticmethod(_from_external)  # type: ignore[attr-defined]

        class Device:
            def __init__(self, index: int) -> None:
                self.index = index

            def __enter__(self) -> Device:
                return self

            def __exit__(self, *args: object) -> None:
                pass

        def alloc(nbytes: int) -> tuple[str, int]:
            made.append(("alloc", nbytes, None))
            return ("memory", nbytes)

        class PinnedMemory:
            def __init__(self, nbytes: int) -> None:
                made.append(("PinnedMemory", nbytes, None))
                self.buffer = bytearray(nbytes)

        class PinnedMemoryPointer(bytearray):  # a buffer, as CuPy's pointer is
            def __init__(self, memory: PinnedMemory, offset: int) -> None:
                made.append(("PinnedMemoryPointer", offset, None))
                super().__init__(len(memory.buffer) - offset)

        self.cuda = types.SimpleNamespace(
            Stream=Stream,
            ExternalStream=ExternalStream,
            Device=Device,
            alloc=alloc,
            PinnedMemory=PinnedMemory,
            PinnedMemoryPointer=PinnedMemoryPointer,
            get_current_stream=lambda: self.current,
        )


class FakeNvcomp(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("nvidia.nvcomp")
        self.allocators: list[Any] = []
        self.codecs: list[dict[str, Any]] = []
        self.BitstreamKind = types.SimpleNamespace(RAW="RAW")
        codecs = self.codecs

        class Codec:
            def __init__(self, **kwargs: Any) -> None:
                codecs.append(kwargs)

        self.Codec = Codec

    def set_device_allocator(self, allocator: Any) -> None:
        self.allocators.append(allocator)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeCupy, FakeNvcomp]:
    cupy, nvcomp = FakeCupy(), FakeNvcomp()
    nvidia = types.ModuleType("nvidia")
    nvidia.nvcomp = nvcomp  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "nvidia", nvidia)
    monkeypatch.setitem(sys.modules, "nvidia.nvcomp", nvcomp)
    monkeypatch.setitem(sys.modules, "kvikio", None)  # not installed: no file reads
    monkeypatch.setattr(cupy_device, "_allocator_routed", False)
    monkeypatch.setattr(cupy_device, "_CODECS", cupy_device.CodecCache())
    return cupy, nvcomp


class _TorchLikeStream:
    """A stream with the CUDA stream protocol and a ``cuda_stream`` attribute, like PyTorch's."""

    cuda_stream = 0x5000

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.cuda_stream)


def test_protocol_streams_go_through_from_external(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    cupy, _ = fakes
    stream = _TorchLikeStream()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = cupy_device.as_cupy_stream(stream, 1)
    assert made.ptr == 0x5000
    assert [m[0] for m in cupy.made] == ["from_external"]


@pytest.mark.parametrize(
    "stream", [0x7000, types.SimpleNamespace(cuda_stream=0x7000), types.SimpleNamespace(ptr=0x7000)]
)
def test_other_handles_use_external_stream_on_the_device_without_a_warning(
    monkeypatch: pytest.MonkeyPatch, stream: Any
) -> None:
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = cupy_device.as_cupy_stream(stream, 3)
    assert made.ptr == 0x7000
    assert cupy.made == [("ExternalStream", 0x7000, 3)]


def test_protocol_without_from_external_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = FakeCupy(from_external=False)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    cupy_device.as_cupy_stream(_TorchLikeStream(), 0)
    assert cupy.made == [("ExternalStream", 0x5000, 0)]


def test_streams_that_are_not_streams_are_refused(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    for wrong in ("stream", 1.5, True):
        with pytest.raises(TypeError, match="stream"):
            cupy_device.as_cupy_stream(wrong, 0)


def test_the_callers_stream_is_made_once_per_read(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    cupy, _ = fakes
    device = cupy_device.CudaDevice(0, 0x7000)
    for _ in range(3):  # the read, and each batch prepared on the helper thread
        with device.activate():
            pass
    assert [m[0] for m in cupy.made] == ["ExternalStream"]


def test_nvcomp_allocates_through_cupy_set_once(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    cupy, nvcomp = fakes
    for _ in range(3):
        assert cupy_device._nvcomp() is nvcomp
    assert len(nvcomp.allocators) == 1
    assert nvcomp.allocators[0](4096, 0) == ("memory", 4096)
    assert ("alloc", 4096, None) in cupy.made


def test_the_allocator_outlives_the_interpreter(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    """nvCOMP keeps the allocator in a C++ static destroyed after the interpreter finalises; the
    reference gpuzarr keeps for ever means that destructor never frees it (a SIGSEGV at exit)."""
    _, nvcomp = fakes
    cupy_device._nvcomp()
    (allocate,) = nvcomp.allocators
    held = sys.getrefcount(allocate)
    nvcomp.allocators.clear()  # what nvCOMP's static holds goes, as at exit
    assert sys.getrefcount(allocate) == held - 1
    del nvcomp
    gc.collect()
    # The reference kept for ever, and this function's: never freed by the static's release.
    assert sys.getrefcount(allocate) >= 3


def test_codecs_of_the_default_stream_are_kept_per_thread(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    _, nvcomp = fakes
    first = cupy_device.CudaDevice(0)._codec("zstd")
    again = cupy_device.CudaDevice(0)._codec("zstd")  # another read, same thread: the same codec
    assert first is again
    assert nvcomp.codecs == [
        {"algorithm": "Zstd", "bitstream_kind": "RAW", "device_id": 0, "cuda_stream": cupy_device._CUDA_STREAM_LEGACY}
    ]
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(cupy_device.CudaDevice(0)._codec("zstd")))
    thread.start()
    thread.join()
    assert other[0] is not first
    assert len(nvcomp.codecs) == 2


def test_codecs_of_a_callers_stream_live_as_long_as_the_read(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    cupy, nvcomp = fakes
    cupy.current = _Stream(0x7000)  # the caller's stream is current during the read
    device = cupy_device.CudaDevice(0, 0x7000)
    assert device._codec("lz4") is device._codec("lz4")  # one codec for the whole read
    assert cupy_device.CudaDevice(0, 0x7000)._codec("lz4") is not device._codec("lz4")
    assert [c["cuda_stream"] for c in nvcomp.codecs] == [0x7000, 0x7000]
    cupy.current = _Stream(0)
    cupy_device.CudaDevice(0)._codec("lz4")
    assert [c["cuda_stream"] for c in nvcomp.codecs] == [0x7000, 0x7000, cupy_device._CUDA_STREAM_LEGACY]


class _DroppedLog:
    """Objects that note their own destruction, in order."""

    def __init__(self) -> None:
        self.dropped: list[str] = []

    def stream(self, ptr: int) -> Any:
        log = self.dropped

        class Stream(_Stream):
            def synchronize(self) -> None:
                log.append(f"synchronize {self.ptr:#x}")

            def __del__(self) -> None:
                log.append(f"stream {self.ptr:#x}")

        return Stream(ptr)

    def codec_class(self) -> type:
        log = self.dropped

        class Codec:
            def __init__(self, **kwargs: Any) -> None:
                self.stream = kwargs["cuda_stream"]

            def __del__(self) -> None:
                log.append(f"codec {self.stream:#x}")

        return Codec


def test_codecs_of_a_kept_stream_serve_every_read_until_its_owner_goes(
    fakes: tuple[FakeCupy, FakeNvcomp],
) -> None:
    cupy, nvcomp = fakes
    log = _DroppedLog()
    nvcomp.Codec = log.codec_class()  # type: ignore[attr-defined]

    class Owner:
        pass

    owner = Owner()
    stream = log.stream(0x7100)
    cupy_device.keep_stream_codecs(stream, owner)
    del stream  # the cache holds it now
    cupy.current = _Stream(0x7100)  # the stream is current during each read
    first = cupy_device.CudaDevice(0, 0x7100)._codec("zstd")
    assert cupy_device.CudaDevice(0, 0x7100)._codec("zstd") is first  # another read: kept
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(cupy_device.CudaDevice(0, 0x7100)._codec("zstd")))
    thread.start()
    thread.join()
    assert other[0] is not first  # still one codec per thread
    other.clear()
    del first
    assert log.dropped == []
    del owner
    gc.collect()
    # The owner's finalizer only notes the stream (it may run wherever the collector does);
    # the cache's next call waits for the stream's work, drops every codec, then the stream.
    assert log.dropped == []
    assert not cupy_device._CODECS.keeps(0x7100)
    assert log.dropped == ["synchronize 0x7100", "codec 0x7100", "codec 0x7100", "stream 0x7100"]
    # The handle is an ordinary caller's stream again: its codecs live as long as a read.
    device = cupy_device.CudaDevice(0, 0x7100)
    assert device._codec("zstd") is device._codec("zstd")
    assert cupy_device.CudaDevice(0, 0x7100)._codec("zstd") is not device._codec("zstd")


def test_releasing_a_stream_leaves_other_streams_codecs(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    del fakes  # the fake modules are in place; the cache is a fresh one
    cache = cupy_device._CODECS
    kept, other = _Stream(0x7200), _Stream(0x7300)
    for stream in (kept, other):
        cache.keep_stream(stream)
    codecs = {s.ptr: cache.kept_codec("lz4", 0, s.ptr, 1) for s in (kept, other)}
    legacy = cache.kept_codec("lz4", 0, cupy_device._CUDA_STREAM_LEGACY, 1)
    assert None not in codecs.values() and legacy is not None
    assert cache.kept_codec("lz4", 0, 0x7500, 1) is None  # a caller's stream: not kept
    cache.release_stream(0x7200)
    cache.release_stream(0x7200)  # twice: nothing more
    assert not cache.keeps(0x7200)
    assert cache.keeps(0x7300)
    assert cache.keeps(cupy_device._CUDA_STREAM_LEGACY)
    assert cache.kept_codec("lz4", 0, 0x7300, 1) is codecs[0x7300]
    assert cache.kept_codec("lz4", 0, cupy_device._CUDA_STREAM_LEGACY, 1) is legacy
    assert cache.kept_codec("lz4", 0, 0x7200, 1) is None


def test_a_release_while_the_cache_is_locked_waits_for_nothing(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    """A finalizer the garbage collector starts on a thread inside the cache's lock only notes
    the stream: taking the lock there would deadlock that thread."""
    del fakes
    cache = cupy_device._CODECS
    cache.keep_stream(_Stream(0x7600))
    assert cache.kept_codec("zstd", 0, 0x7600, 1) is not None
    with cache._lock:
        done = threading.Event()
        threading.Thread(target=lambda: (cache.release_stream(0x7600), done.set())).start()
        assert done.wait(5)
        cache.release_stream(0x7600)  # on the thread that holds the lock, too
    assert not cache.keeps(0x7600)


def test_the_loaders_side_stream_keeps_its_codecs_while_the_loader_lives(
    fakes: tuple[FakeCupy, FakeNvcomp],
) -> None:
    from gpuzarr.backends.cuda import handoff

    cupy, _ = fakes
    made: list[dict[str, Any]] = []

    class Stream(_Stream):
        def __init__(self, **kwargs: Any) -> None:
            made.append(kwargs)
            super().__init__(0x7400)

    cupy.cuda.Stream = Stream
    reader = types.SimpleNamespace(device_factory=cupy_device.CudaDevice, index=0)

    class Owner:
        pass

    owner = Owner()
    stream = handoff.side_stream(reader, owner)  # type: ignore[arg-type]
    assert made == [{"non_blocking": True}]
    assert cupy_device._CODECS.keeps(stream.ptr)
    del owner
    gc.collect()
    assert not cupy_device._CODECS.keeps(stream.ptr)


def test_pinned_staging_blocks_are_their_own_allocations(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    cupy, _ = fakes
    block = cupy_device._pinned_block(64)
    assert block.dtype == np.uint8 and block.size == 64
    assert [m[0] for m in cupy.made] == ["PinnedMemory", "PinnedMemoryPointer"]
    assert cupy_device.CudaDevice(0).staging is cupy_device.PINNED_STAGING.pool(0)


def _probe_cupy(monkeypatch: pytest.MonkeyPatch, get_version: Any) -> None:
    import importlib.machinery

    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cuda = types.ModuleType("cupy.cuda")
    nvrtc = types.ModuleType("cupy.cuda.nvrtc")
    nvrtc.getVersion = get_version  # type: ignore[attr-defined]
    cuda.nvrtc = nvrtc  # type: ignore[attr-defined]
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 2)  # type: ignore[attr-defined]
    cupy.cuda = cuda  # type: ignore[attr-defined]
    cupy.is_available = lambda: True  # type: ignore[attr-defined]
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda)):
        monkeypatch.setitem(sys.modules, name, module)
    # As in CuPy 14: ``cupy.cuda.nvrtc`` is an attribute (it lives in cupy_backends), and
    # ``import cupy.cuda.nvrtc`` fails.
    monkeypatch.setitem(sys.modules, "cupy.cuda.nvrtc", None)
    monkeypatch.setitem(sys.modules, "nvidia", None)  # no nvCOMP


def test_probe_needs_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuzarr.backends.cuda import runtime

    def missing() -> tuple[int, int]:
        raise RuntimeError("libnvrtc.so.13: cannot open shared object file")

    _probe_cupy(monkeypatch, missing)
    reason, count = runtime.probe.__wrapped__()
    assert reason is not None and reason.startswith("NVRTC not found") and "libnvrtc" in reason
    assert count == 2


def test_probe_with_nvrtc_goes_on_to_nvcomp(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuzarr.backends.cuda import runtime

    _probe_cupy(monkeypatch, lambda: (13, 0))
    reason, _ = runtime.probe.__wrapped__()
    assert reason is not None and reason.startswith("nvCOMP")


class _DecodeResult:
    def __init__(self, sizes: list[int]) -> None:
        self.buffer_sizes = sizes


class _ConfigCodec:
    """A codec with nvCOMP 6's decode call forms, recording how it was called."""

    def __init__(self, *, configs: bool = True, keyword: bool = True) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.configs = configs
        self.keyword = keyword

    def compression_config(self, sizes: list[int]) -> tuple[str, list[int]]:
        if not self.configs:
            raise AttributeError("'Codec' object has no attribute 'compression_config'")
        self.calls.append(("compression_config", sizes))
        return ("compression", sizes)

    def decompression_config(self, comp: tuple[str, list[int]]) -> tuple[str, list[int]]:
        self.calls.append(("decompression_config", comp))
        return ("decompression", comp[1])

    def decode(self, srcs: Any, out: Any = None, **kwargs: Any) -> _DecodeResult:
        if kwargs and not self.keyword:
            raise TypeError("decode() got an unexpected keyword argument 'decompression_config'")
        self.calls.append(("decode", kwargs.get("decompression_config")))
        return _DecodeResult([n for _, n in out])


def _decode_with(fakes: tuple[FakeCupy, FakeNvcomp], codec: _ConfigCodec, algorithm: str) -> list[int]:
    _, nvcomp = fakes
    nvcomp.as_arrays = lambda buffer, offsets, sizes, cuda_stream: list(zip(offsets, sizes, strict=True))  # type: ignore[attr-defined]
    device = cupy_device.CudaDevice(0)
    device._codec = lambda algorithm: codec  # type: ignore[method-assign]
    sizes = device.decompress_batch(algorithm, None, [0, 10], [10, 5], None, [0, 64], [64, 32])
    return sizes().tolist()


def test_decode_gets_a_config_built_from_the_known_sizes(
    fakes: tuple[FakeCupy, FakeNvcomp], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cupy_device, "_NO_DECOMPRESSION_CONFIG", set())
    codec = _ConfigCodec()
    assert _decode_with(fakes, codec, "lz4") == [64, 32]
    assert codec.calls == [
        ("compression_config", [64, 32]),
        ("decompression_config", ("compression", [64, 32])),
        ("decode", ("decompression", [64, 32])),
    ]


@pytest.mark.parametrize("configs, keyword", [(False, True), (True, False)])
def test_an_nvcomp_without_configs_decodes_as_before_and_says_so_once(
    fakes: tuple[FakeCupy, FakeNvcomp],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    configs: bool,
    keyword: bool,
) -> None:
    monkeypatch.setattr(cupy_device, "_NO_DECOMPRESSION_CONFIG", set())
    monkeypatch.setattr(cupy_device, "_logged_notes", set())
    caplog.set_level("INFO", logger="gpuzarr")
    codec = _ConfigCodec(configs=configs, keyword=keyword)
    for _ in range(2):
        assert _decode_with(fakes, codec, "deflate") == [64, 32]
    assert [c for c in codec.calls if c[0] == "decode"] == [("decode", None)] * 2
    assert len([r for r in caplog.records if "decompression" in r.getMessage()]) == 1


class _Buffer:
    """A device buffer with a made-up address."""

    def __init__(self, ptr: int) -> None:
        self.data = types.SimpleNamespace(ptr=ptr)


def test_streams_out_of_the_decoders_alignment_fail_without_nvcomp_seeing_them(
    fakes: tuple[FakeCupy, FakeNvcomp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams (or outputs) outside the alignment nvCOMP's decoder asks for come out failed
    (-1), which sends their chunks to the CPU; the others are decoded as one batch."""
    monkeypatch.setattr(cupy_device, "_REQUIRED_ALIGNMENT", {})
    monkeypatch.setattr(cupy_device, "_NO_DECOMPRESSION_CONFIG", set())
    _, nvcomp = fakes
    nvcomp.as_arrays = lambda buffer, offsets, sizes, cuda_stream: list(zip(offsets, sizes, strict=True))  # type: ignore[attr-defined]

    class Aligned4(_ConfigCodec):
        asked = 0

        def get_required_decompression_alignment(self) -> int:
            Aligned4.asked += 1
            return 4

    codec = Aligned4()
    device = cupy_device.CudaDevice(0)
    device._codec = lambda algorithm: codec  # type: ignore[method-assign]
    base = _Buffer(0x10000)
    assert device.decompress_batch("deflate", base, [0, 12], [12, 5], base, [0, 64], [64, 32])().tolist() == [64, 32]
    # stream 1's input and, in the second batch, stream 0's output are 2 bytes off
    sizes = device.decompress_batch("deflate", base, [0, 10, 20], [10, 5, 4], base, [0, 64, 96], [64, 32, 16])
    assert sizes().tolist() == [64, -1, 16]
    decoded = [c[1] for c in codec.calls if c[0] == "decode"]
    assert decoded[-1] == ("decompression", [64, 16])  # nvCOMP saw streams 0 and 2 only
    assert device.decompress_batch("deflate", base, [0], [12], _Buffer(0x10002), [0], [64])().tolist() == [-1]
    assert len([c for c in codec.calls if c[0] == "decode"]) == 2  # no batch of nothing was decoded
    assert Aligned4.asked == 1  # asked once per algorithm
    # A decoder that asks for 1 byte (zstd and LZ4), or cannot say: any offset goes.
    assert _decode_with(fakes, _ConfigCodec(), "zstd") == [64, 32]


def test_a_failed_batch_decodes_each_stream_into_its_own_place_of_the_output(
    fakes: tuple[FakeCupy, FakeNvcomp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a batch fails, each stream is decoded alone as a batch of one into its carved
    output (never ``codec.decode(src)``, whose output nvCOMP would size from the stream)."""
    monkeypatch.setattr(cupy_device, "_NO_DECOMPRESSION_CONFIG", set())
    outs_seen: list[Any] = []

    class FailingBatch(_ConfigCodec):
        def decode(self, srcs: Any, out: Any = None, **kwargs: Any) -> _DecodeResult:
            if out is None:
                raise AssertionError("a stream was decoded without a pre-allocated output")
            if len(srcs) > 1:
                raise RuntimeError("nvCOMP: the batch holds an invalid stream")
            outs_seen.append(out)
            if srcs[0][0] == 10:  # the second stream is the bad one
                raise RuntimeError("nvCOMP: invalid stream")
            return _DecodeResult([n for _, n in out])

    monkeypatch.setattr(cupy_device.CudaDevice, "_context_error", lambda self: None)
    assert _decode_with(fakes, FailingBatch(), "lz4") == [64, -1]
    assert outs_seen == [[(0, 64)], [(64, 32)]]


class _RecordingBuffer:
    """A 16-byte device buffer whose slices record the copies into them."""

    size = 16

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    def __getitem__(self, key: slice) -> Any:
        self.calls.append(("slice", (key.start, key.stop)))
        calls = self.calls

        class Span:
            def set(self, host: Any, stream: Any = None) -> None:
                calls.append(("set", stream.ptr))

        return Span()


def test_host_to_device_copies_record_an_event_and_do_not_wait(fakes: tuple[FakeCupy, FakeNvcomp]) -> None:
    cupy, _ = fakes
    calls: list[tuple[str, Any]] = []

    class RecordingStream(_Stream):
        def record(self) -> str:
            calls.append(("record", self.ptr))
            return "event"

        def synchronize(self) -> None:
            calls.append(("synchronize", self.ptr))

    cupy.current = RecordingStream(0x7000)
    event = cupy_device.CudaDevice(0).copy_host_to_device(np.zeros(8, dtype=np.uint8), _RecordingBuffer(calls), 4)
    assert event == "event"
    assert calls == [("slice", (4, 12)), ("set", 0x7000), ("record", 0x7000)]


def test_uploads_run_on_a_non_blocking_copy_stream_and_the_compute_stream_waits_on_the_device(
    fakes: tuple[FakeCupy, FakeNvcomp],
) -> None:
    cupy, _ = fakes
    calls: list[tuple[str, Any]] = []

    class CopyStream(_Stream):
        def __init__(self, non_blocking: bool = False) -> None:
            calls.append(("Stream", non_blocking))
            super().__init__(0x9000)

        def record(self) -> str:
            calls.append(("record", self.ptr))
            return "copied"

    class ComputeStream(_Stream):
        def wait_event(self, event: Any) -> None:
            calls.append(("wait_event", event))

        def synchronize(self) -> None:  # recorded so that the assertion below catches a host wait
            calls.append(("synchronize", self.ptr))

    cupy.cuda.Stream = CopyStream
    cupy.current = ComputeStream(0x7000)
    device = cupy_device.CudaDevice(0)
    for _ in range(2):
        event = device.upload(np.zeros(8, dtype=np.uint8), _RecordingBuffer(calls))
        device.wait_for(event)
    upload = [("slice", (None, 8)), ("set", 0x9000), ("record", 0x9000), ("wait_event", "copied")]
    assert calls == [("Stream", True), *upload, *upload]  # one copy stream per device object
    with pytest.raises(ValueError, match="leaves"):
        device.upload(np.zeros(32, dtype=np.uint8), _RecordingBuffer(calls))


class FakeKvikio(types.ModuleType):
    """kvikio's CuFile in compatibility mode: reads that succeed, fail when started, or fail
    when awaited (as kvikio raises the system's errors, a RuntimeError)."""

    def __init__(self, failing: dict[str, str]) -> None:
        super().__init__("kvikio")
        self.defaults = types.ModuleType("kvikio.defaults")
        self.defaults.set = lambda name, value: None  # type: ignore[attr-defined]
        self.defaults.is_compat_mode_preferred = lambda: True  # type: ignore[attr-defined]
        self.awaited: list[str] = []
        awaited = self.awaited

        class Future:
            def __init__(self, path: str, n: int) -> None:
                self.path, self.n = path, n

            def get(self) -> int:
                awaited.append(self.path)
                how = failing.get(self.path)
                if how == "get":
                    raise RuntimeError("kvikio: pread failed (Input/output error)")
                if how == "device":
                    raise RuntimeError("CUDA error at: ... an illegal memory access was encountered")
                if how == "bug":
                    raise TypeError("pread() got an unexpected argument")
                return self.n

        class CuFile:
            def __init__(self, path: str, mode: str) -> None:
                if failing.get(path) == "open":  # a refusal that the system's own open does not repeat
                    raise RuntimeError("kvikio: cannot open the file")
                self.path = path

            def pread(self, buffer: Any, n: int, offset: int) -> Future:
                if failing.get(self.path) == "start":
                    raise RuntimeError("kvikio: cannot start the read")
                return Future(self.path, n)

        self.CuFile = CuFile


@pytest.mark.parametrize("when", ["get", "start", "open"])
def test_kvikio_read_failures_are_os_errors_naming_the_file(
    fakes: tuple[FakeCupy, FakeNvcomp], monkeypatch: pytest.MonkeyPatch, tmp_path: Any, when: str
) -> None:
    from gpuzarr.backends.cuda.launches import FileRead, FileSpan

    paths = [str(tmp_path / name) for name in ("a", "b", "c")]
    for path in paths:  # files the system opens: what fails is kvikio's own open or read
        Path(path).write_bytes(b"\0" * 8)
    kvikio = FakeKvikio({paths[1]: when})
    monkeypatch.setitem(sys.modules, "kvikio", kvikio)
    monkeypatch.setitem(sys.modules, "kvikio.defaults", kvikio.defaults)
    monkeypatch.setattr(cupy_device, "_FILE_HANDLES", cupy_device.FileHandleCache())
    reads = [FileRead(i, FileSpan(path, 0, 8, None, None), "staging", 8 * i) for i, path in enumerate(paths)]
    device = cupy_device.CudaDevice(0)
    with pytest.raises(OSError, match="kvikio could not read it") as info:
        device.read_files(reads, np.zeros(64, np.uint8), np.zeros(8, np.uint8))
    assert info.value.filename == paths[1]
    assert isinstance(info.value.__cause__, RuntimeError)
    # Every read that started was awaited, the failed one too, before the error went up.
    assert kvikio.awaited == (paths if when == "get" else paths[:1])


@pytest.mark.parametrize(("how", "raised"), [("device", RuntimeError), ("bug", TypeError)])
def test_device_failures_and_bugs_in_kvikio_reads_are_not_taken_for_store_errors(
    fakes: tuple[FakeCupy, FakeNvcomp], monkeypatch: pytest.MonkeyPatch, tmp_path: Any, how: str, raised: type
) -> None:
    from gpuzarr.backends.cuda.launches import FileRead, FileSpan

    path = str(tmp_path / "a")
    kvikio = FakeKvikio({path: how})
    monkeypatch.setitem(sys.modules, "kvikio", kvikio)
    monkeypatch.setitem(sys.modules, "kvikio.defaults", kvikio.defaults)
    monkeypatch.setattr(cupy_device, "_FILE_HANDLES", cupy_device.FileHandleCache())
    reads = [FileRead(0, FileSpan(path, 0, 8, None, None), "staging", 0)]
    with pytest.raises(raised) as info:
        cupy_device.CudaDevice(0).read_files(reads, np.zeros(8, np.uint8), np.zeros(8, np.uint8))
    assert not isinstance(info.value, OSError)


def test_kvikio_reads_that_succeed_give_their_byte_counts(
    fakes: tuple[FakeCupy, FakeNvcomp], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from gpuzarr.backends.cuda.launches import FileRead, FileSpan

    kvikio = FakeKvikio({})
    monkeypatch.setitem(sys.modules, "kvikio", kvikio)
    monkeypatch.setitem(sys.modules, "kvikio.defaults", kvikio.defaults)
    monkeypatch.setattr(cupy_device, "_FILE_HANDLES", cupy_device.FileHandleCache())
    reads = [FileRead(0, FileSpan(str(tmp_path / "a"), 0, 8, None, None), "staging", 0),
             FileRead(1, FileSpan(str(tmp_path / "b"), 0, 0, None, None), "work", 0)]  # fmt: skip
    assert cupy_device.CudaDevice(0).read_files(reads, np.zeros(8, np.uint8), np.zeros(8, np.uint8)) == [8, 0]
