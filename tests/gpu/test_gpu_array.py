"""``Array`` on device="gpu" on a real GPU: CuPy results equal to the CPU engine's bit for bit,
through kvikio file reads, nvCOMP and the kernels; out=, stream=, read_batch, gathers, strict,
corrupt input, kvikio's compatibility mode and DLPack hand-off. Skipped without a usable GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import DeviceError

from ..backends.cuda_matrix import ARRAYS, SELECTIONS, assert_bitwise_equal, cpu_result, make_array
from ..file_times import wait_for_a_new_change_time

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.gpu


def _host(x: Any) -> np.ndarray[Any, Any]:
    import cupy

    assert isinstance(x, cupy.ndarray), type(x)
    return np.asarray(x.get())


def _on_gpu(array: gpuzarr.Array) -> gpuzarr.Array:
    opened = gpuzarr.open(array.store, device="gpu")
    assert isinstance(opened, gpuzarr.Array) and opened.device.startswith("cuda:")
    return opened


@pytest.fixture(scope="module", params=sorted(ARRAYS))
def local_array(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> gpuzarr.Array:
    root = tmp_path_factory.mktemp("gpu-matrix") / f"{request.param}.zarr"
    return make_array(request.param, gpuzarr.LocalStore(root))


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_matches_cpu(local_array: gpuzarr.Array, selection: str) -> None:
    sel = SELECTIONS[selection]
    assert_bitwise_equal(_host(_on_gpu(local_array).read(sel)), cpu_result(local_array, sel))


@pytest.mark.parametrize("direct", [True, False])
def test_both_file_routes_match_cpu(local_array: gpuzarr.Array, direct: bool) -> None:
    with gpuzarr.config.set(gpu_direct_reads=direct):
        got = _on_gpu(local_array)[...]
    assert_bitwise_equal(_host(got), cpu_result(local_array, Ellipsis))


def test_memory_store_matches_cpu() -> None:
    array = make_array("v3-sharded-zstd-crc32c")
    assert_bitwise_equal(_host(_on_gpu(array)[...]), cpu_result(array, Ellipsis))


@pytest.mark.parametrize("small_reads", [None, 0], ids=["default", "device-path"])
def test_gathers_match_cpu(local_array: gpuzarr.Array, small_reads: int | None) -> None:
    """Small selections that are no boxes go to the CPU engine by default; with the rule off
    (0) the device reads their bounding box and gathers."""
    from gpuzarr import config

    gpu = _on_gpu(local_array)
    cpu = gpuzarr.open(local_array.store, device="cpu")
    rows = np.array([40, 3, 9, 3])
    with config.set(gpu_small_read_chunks=small_reads):
        assert_bitwise_equal(_host(gpu.oindex[rows, 5:20]), cpu.oindex[rows, 5:20])
        assert_bitwise_equal(_host(gpu.vindex[rows, rows + 1]), cpu.vindex[rows, rows + 1])
        assert_bitwise_equal(_host(gpu[40:2:-7, ::-3]), cpu[40:2:-7, ::-3])


def _check_out_forms(read: Callable[..., Any], expected: np.ndarray[Any, Any]) -> None:
    """``read()``, ``read(out=...)`` on a stream of the caller's, and a strided ``out`` of one
    2-d result: all equal to ``expected``."""
    import cupy

    assert_bitwise_equal(_host(read()), expected)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = cupy.full(expected.shape, 0xAB, dtype=expected.dtype)
    assert read(out=out, stream=stream) is out
    stream.synchronize()
    assert_bitwise_equal(_host(out), expected)


def _check_strided_out(gpu: gpuzarr.Array, box: tuple[slice, ...], expected: np.ndarray[Any, Any]) -> None:
    import cupy

    strided = cupy.zeros((expected.shape[0], expected.shape[1] * 2), expected.dtype)[:, ::2]
    gpu.read(box, out=strided)
    assert_bitwise_equal(_host(strided), expected)


def test_read_batch_out_and_stream() -> None:
    array = make_array("v3-blosc-lz4-shuffle-u2")
    gpu = _on_gpu(array)
    boxes = [(slice(3, 20), slice(7, 30)), (slice(20, 37), slice(30, 53))]
    expected = np.stack([cpu_result(array, b) for b in boxes])
    _check_out_forms(lambda **kw: gpu.read_batch(boxes, **kw), expected)
    _check_strided_out(gpu, boxes[0], expected[0])


def _callers_streams() -> list[tuple[str, Callable[[], Any]]]:
    """Ways a caller names a stream: (name, a factory of (stream argument, object to synchronise))."""
    import cupy

    def as_int() -> tuple[int, Any]:
        stream = cupy.cuda.Stream(non_blocking=True)
        return int(stream.ptr), stream

    def as_torch() -> tuple[Any, Any]:
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch has no CUDA device here (a CPU build)")
        stream = torch.cuda.Stream()
        return stream, stream

    return [("a cudaStream_t int", as_int), ("a torch stream", as_torch)]


@pytest.mark.parametrize("form", ["a cudaStream_t int", "a torch stream"])
def test_reads_on_a_stream_named_by_handle_or_torch(form: str) -> None:
    """``stream=`` as a raw handle and as a PyTorch stream: the read lands in ``out`` in that
    stream's order, equal to the CPU engine (a sharded zstd array: the decode's codecs are made
    for the caller's stream, per read)."""
    import cupy

    array = make_array("v3-sharded-zstd-crc32c")
    gpu = _on_gpu(array)
    box = (slice(3, 41), slice(5, 60))
    expected = cpu_result(array, box)
    stream, sync = dict(_callers_streams())[form]()
    out = cupy.full(expected.shape, 0xAB, dtype=expected.dtype)
    assert gpu.read(box, out=out, stream=stream) is out
    sync.synchronize()
    assert_bitwise_equal(_host(out), expected)


_SPIN_THEN_FILL = r"""
extern "C" __global__ void spin_then_fill(unsigned char* out, long long n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = 0xEE;
}
"""


@pytest.mark.parametrize("small_read_chunks", [0, 64], ids=["device path", "small read on the CPU engine"])
def test_a_read_comes_after_the_work_already_queued_on_the_callers_stream(small_read_chunks: int) -> None:
    """Work queued on a non-blocking stream of the caller's (a kernel that spins about 0.1 s,
    then fills ``out``) runs before the read that names that stream writes ``out``: the read's
    bytes are what is left. A read that ran on another stream, or waited on none, would finish
    first and be overwritten (the small-read route once copied on a stream of its own)."""
    import cupy

    array = make_array("v3-blosc-lz4-shuffle-u2")
    gpu = _on_gpu(array)
    box = (slice(0, 40), slice(0, 50))
    expected = cpu_result(array, box)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = cupy.zeros(expected.shape, dtype=expected.dtype)
    spin = cupy.RawKernel(_SPIN_THEN_FILL, "spin_then_fill")
    clock_khz = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["clockRate"]
    with stream:
        spin((8,), (128,), (out, np.int64(out.nbytes), np.int64(clock_khz * 100)))  # about 100 ms
    with gpuzarr.config.set(gpu_small_read_chunks=small_read_chunks):
        gpu.read(box, out=out, stream=stream)
    stream.synchronize()
    assert_bitwise_equal(_host(out), expected)


def test_streams_destroyed_between_reads_leave_the_next_reads_right() -> None:
    """Reads on a new stream each time, each stream dropped after its read (the codecs made for
    a caller's stream go with the read, and none is kept for the stream's handle)."""
    import gc

    import cupy

    from gpuzarr.backends.cuda import cupy_device

    array = make_array("v3-sharded-zstd-crc32c")
    gpu = _on_gpu(array)
    expected = cpu_result(array, Ellipsis)
    for _ in range(4):
        stream = cupy.cuda.Stream(non_blocking=True)
        out = cupy.zeros(expected.shape, dtype=expected.dtype)
        gpu.read(Ellipsis, out=out, stream=stream)
        stream.synchronize()
        assert not cupy_device._CODECS.keeps(int(stream.ptr))
        del stream
        gc.collect()
        assert_bitwise_equal(_host(out), expected)


def test_small_reads_on_the_cpu_engine_match_cpu(local_array: gpuzarr.Array) -> None:
    """The small-read rule (read on the CPU engine, copied once) in every form of ``out``."""
    box = (slice(3, 20), slice(7, 30))
    expected = cpu_result(local_array, box)
    with gpuzarr.config.set(gpu_small_read_chunks=64):
        gpu = _on_gpu(local_array)
        _check_out_forms(lambda **kw: gpu.read(box, **kw), expected)
        _check_strided_out(gpu, box, expected)


def test_strict_refuses_cpu_codecs() -> None:
    array = make_array("v2-delta-filter-cpu")
    gpu = _on_gpu(array)
    assert_bitwise_equal(_host(gpu[...]), cpu_result(array, Ellipsis))
    gpu.strict = True
    with pytest.raises(DeviceError, match="strict"):
        gpu[...]


def _in_subprocess(code: str, timeout: int = 300) -> None:
    """Run ``code`` in a fresh interpreter: nvCOMP documents corrupt input as undefined behaviour,
    and a sticky CUDA error it leaves would fail every later test of this process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=timeout)


_EXPECT_CORRUPT = (
    "import gpuzarr, sys\n"
    "from gpuzarr.errors import CorruptChunkError\n"
    "try:\n"
    "    gpuzarr.open(PATH, device='gpu')[...]\n"
    "except CorruptChunkError as exc:\n"
    "    assert exc.key == KEY, exc\n"
    "else:\n"
    "    sys.exit('no CorruptChunkError')\n"
)


def _expect_corrupt(path: Path, key: str) -> None:
    _in_subprocess(f"PATH = {str(path)!r}\nKEY = {key!r}\n" + _EXPECT_CORRUPT)


def test_corrupt_chunks_name_their_key(tmp_path: Path) -> None:
    """Damage the host's checks catch before nvCOMP sees the stream. (Zeros inside one
    compressed zstd block pass them, and nvCOMP 6.0 may then fault: docs/gpu.md.)"""
    make_array("v3-zstd-f4", gpuzarr.LocalStore(tmp_path / "a.zarr"))
    victim = tmp_path / "a.zarr" / "c" / "1" / "1"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])  # a cut frame: its last block runs past the chunk
    _expect_corrupt(tmp_path / "a.zarr", "c/1/1")
    make_array("v3-gzip-crc32c-f8", gpuzarr.LocalStore(tmp_path / "g.zarr"))
    victim = tmp_path / "g.zarr" / "c" / "1" / "1"
    spoilt = bytearray(victim.read_bytes())
    spoilt[len(spoilt) // 2 : -4] = bytes(len(spoilt) - 4 - len(spoilt) // 2)  # the crc32c no longer matches
    victim.write_bytes(bytes(spoilt))
    _expect_corrupt(tmp_path / "g.zarr", "c/1/1")
    make_array("v3-raw-u1", gpuzarr.LocalStore(tmp_path / "r.zarr"))
    os.truncate(tmp_path / "r.zarr" / "c" / "0" / "0", 7)
    _expect_corrupt(tmp_path / "r.zarr", "c/0/0")


def test_kvikio_compat_mode_reads(tmp_path: Path) -> None:
    pytest.importorskip("kvikio")
    make_array("v3-zstd-f4", gpuzarr.LocalStore(tmp_path / "a.zarr"))
    code = (
        "import numpy as np, gpuzarr\n"
        "gpuzarr.config.set(gpu_direct_reads=True)\n"  # as "auto" does now; stated, so the test stays one of kvikio
        f"p = {str(tmp_path / 'a.zarr')!r}\n"
        "g = gpuzarr.open(p, device='gpu')[...].get()\n"
        "c = gpuzarr.open(p, device='cpu')[...]\n"
        "assert g.tobytes() == c.tobytes()\n"
    )
    env = {**os.environ, "KVIKIO_COMPAT_MODE": "ON"}  # POSIX reads; never forced OFF
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)


@pytest.mark.parametrize(
    ("how", "reads"), [("chmod", 1), ("access time set", 2), ("rewritten, modification time put back", 2)]
)
def test_a_file_changed_during_direct_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, reads: int
) -> None:
    """kvikio's reads straight into device memory, with a chunk file changed in place (same
    bytes, same size and modification time) while the device reads it: a chmod reads on, what
    moves only the change time has the batch read again, and the result is the CPU's."""
    from gpuzarr.backends.cuda.cupy_device import CudaDevice

    array = make_array("v3-zstd-f4", gpuzarr.LocalStore(tmp_path / "a.zarr"))
    expected = cpu_result(array, Ellipsis)
    victim = tmp_path / "a.zarr" / "c" / "1" / "1"
    content = victim.read_bytes()
    original = CudaDevice.read_files
    calls: list[int] = []

    def changing(self: Any, file_reads: Any, staging: Any, work: Any) -> list[int]:
        calls.append(1)
        if len(calls) == 1:
            wait_for_a_new_change_time(victim)
            before = victim.stat()
            if how == "chmod":
                victim.chmod(0o600)
            elif how == "access time set":
                os.utime(victim, ns=(before.st_atime_ns + 1_000_000_000, before.st_mtime_ns))
            else:
                with open(victim, "r+b") as f:
                    f.write(content)
                os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
        got: list[int] = original(self, file_reads, staging, work)
        return got

    monkeypatch.setattr(CudaDevice, "read_files", changing)
    with gpuzarr.config.set(gpu_direct_reads=True):
        got = _on_gpu(array)[...]
    assert_bitwise_equal(_host(got), expected)
    assert len(calls) == reads


def test_dlpack_to_torch() -> None:
    torch = pytest.importorskip("torch")
    array = make_array("v3-zstd-f4")
    tensor = torch.from_dlpack(_on_gpu(array)[...])
    assert tensor.is_cuda
    np.testing.assert_array_equal(tensor.cpu().numpy(), cpu_result(array, Ellipsis))


@pytest.mark.parametrize(
    "codecs",
    [
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}],
        [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 8}},
        ],
    ],
    ids=["zstd", "gzip", "blosc-lz4"],
)
def test_large_chunks(tmp_path: Path, codecs: list[dict[str, Any]]) -> None:
    """Chunks of 2 MiB, far above nvCOMP's 64 KiB default chunk size for its own formats."""
    array = gpuzarr.create(
        gpuzarr.LocalStore(tmp_path / "big.zarr"), shape=(1024, 768), dtype="<f8", chunks=(512, 512), codecs=codecs
    )
    array[...] = np.cumsum(np.random.default_rng(0).normal(size=1024 * 768)).reshape(1024, 768)
    assert_bitwise_equal(_host(_on_gpu(array)[...]), cpu_result(array, Ellipsis))


@pytest.mark.parametrize("name", ["v2-lz4-f8", "v2-zlib-bigendian-i4", "v3-gzip-i2", "v3-blosc-lz4-shuffle-u2"])
def test_corrupt_streams_of_every_decoder(tmp_path: Path, name: str) -> None:
    array = make_array(name, gpuzarr.LocalStore(tmp_path / "a.zarr"))
    key = array.layout.key((1, 1))
    raw = bytes(array.store.get(key))  # type: ignore[arg-type]
    array.store.set(key, raw[: len(raw) // 2])
    _expect_corrupt(tmp_path / "a.zarr", key)


@pytest.mark.parametrize(
    "name",
    ["gzip", "zstd-no-size", "zstd-declares-1TiB", "blosc-nbytes", "numcodecs.lz4", "v2-gzip", "sharded-gzip"],
)
def test_bombs_are_refused_on_the_device_without_device_memory_sized_by_them(tmp_path: Path, name: str) -> None:
    """The bombs of tests/codecs/test_bombs.py on the real device: a CorruptChunkError naming
    the key, and the device's memory pool never grows to anything near what the bomb decodes to
    (run under compute-sanitizer by ``benchmarks/gpu_session.sh sanitize``)."""
    import cupy

    from tests.codecs.test_bombs import _write_case

    key = _write_case(tmp_path, name)
    array = gpuzarr.open_array(str(tmp_path / name), mode="r", device="gpu")
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    with pytest.raises(gpuzarr.errors.CorruptChunkError) as caught:
        array[...]
    assert caught.value.key == key
    # The chunk is 1 MiB; the bombs decode to 1 GiB or declare more.
    assert pool.total_bytes() < 256 << 20, f"device pool holds {pool.total_bytes() >> 20} MiB"


def test_transposed_chunks_decoded_on_the_host_match_cpu(tmp_path: Path) -> None:
    """Chunks of transposed layouts that the device path hands to the host (a zstd frame that
    declares no content size, a v2 order="F" gzip of two members) came back transposed; the
    emulated device's test (tests/backends/test_gpu_transposed_host_decodes.py) on hardware."""
    import gzip

    import zstandard

    data = np.arange(8 * 12, dtype="<u2").reshape(8, 12)
    codecs = [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {}},
              {"name": "zstd", "configuration": {"level": 1}}]  # fmt: skip
    gpuzarr.create(str(tmp_path / "t.zarr"), data=data, chunks=(4, 6), codecs=codecs, device="cpu")
    chunk = tmp_path / "t.zarr" / "c" / "1" / "0"
    stored = zstandard.ZstdDecompressor().decompress(chunk.read_bytes())
    chunk.write_bytes(zstandard.ZstdCompressor(write_content_size=False).compress(stored))
    np.testing.assert_array_equal(_host(gpuzarr.open(str(tmp_path / "t.zarr"), device="gpu")[...]), data)
    f = data.astype("<i4")
    gpuzarr.create(str(tmp_path / "f.zarr"), data=f, chunks=(8, 12), order="F", zarr_format=2,
                   compressor={"id": "gzip", "level": 1}, device="cpu")  # fmt: skip
    stored = gzip.decompress((tmp_path / "f.zarr" / "0.0").read_bytes())
    (tmp_path / "f.zarr" / "0.0").write_bytes(gzip.compress(stored[:100]) + gzip.compress(stored[100:]))
    np.testing.assert_array_equal(_host(gpuzarr.open(str(tmp_path / "f.zarr"), device="gpu")[...]), f)


def test_read_async_on_the_callers_current_stream() -> None:
    """``read_async`` under a non-blocking stream of the caller's: ordered on that stream (the
    request thread's own default stream does not wait for it), equal to the CPU engine once the
    stream is synchronised; awaited in asyncio too."""
    import asyncio

    import cupy

    array = make_array("v3-sharded-zstd-crc32c")
    gpu = _on_gpu(array)
    box = (slice(3, 41), slice(7, 59))
    expected = cpu_result(array, box)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = cupy.full(expected.shape, 0xAB, dtype=expected.dtype)
        future = gpu.read_async(box, out=out)
    assert future.result(60) is out
    stream.synchronize()
    assert_bitwise_equal(_host(out), expected)

    async def both() -> list[Any]:
        with stream:
            started = [gpu.read_async(box), gpu.read_async(np.s_[::3, 5])]
        return list(await asyncio.gather(*started))

    whole, column = asyncio.run(both())
    stream.synchronize()
    assert_bitwise_equal(_host(whole), expected)
    assert_bitwise_equal(_host(column), cpu_result(array, np.s_[::3, 5]))

    # The per-thread default stream is another stream on the request thread: the future is done
    # once the read has finished there.
    with cupy.cuda.Stream.ptds:
        on_ptds = gpu.read_async(box)
    assert_bitwise_equal(_host(on_ptds.result(60)), expected)
