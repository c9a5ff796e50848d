"""First checks on a GPU host, each in its own subprocess with a timeout, so that a hang or a
poisoned CUDA context in one cannot hide the others: the environment, kvikio (AUTO and
compatibility mode) and what nvCOMP does with the streams gpuzarr hands it.

    python -m benchmarks.gpu_probe [--timeout 90] [STEP ...]

Each step prints what it saw; the exit status is the number of steps that failed. Nothing here
changes the GPU's settings.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def _step_environment() -> None:
    import cupy

    print("driver", cupy.cuda.runtime.driverGetVersion(), "runtime", cupy.cuda.runtime.runtimeGetVersion())
    print("nvrtc", cupy.cuda.nvrtc.getVersion())
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print("device", props["name"].decode(), "sm", props["major"], props["minor"])
    kernel = cupy.RawKernel(r'extern "C" __global__ void add1(int* x) { x[threadIdx.x] += 1; }', "add1")
    x = cupy.arange(32, dtype=cupy.int32)
    kernel((1,), (32,), (x,))
    assert (x.get() == list(range(1, 33))).all(), x
    print("RawKernel ok")
    from nvidia import nvcomp

    print("nvcomp", getattr(nvcomp, "__version__", "?"))
    for algorithm in ("zstd", "deflate", "lz4"):
        codec = nvcomp.Codec(algorithm=algorithm, bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0, cuda_stream=1)
        alignment = (
            codec.get_required_decompression_alignment()
            if hasattr(codec, "get_required_decompression_alignment")
            else "?"
        )
        print(algorithm, "codec ok, decompression alignment", alignment)
    import kvikio
    import kvikio.defaults

    print("kvikio", kvikio.__version__, "compat preferred", kvikio.defaults.is_compat_mode_preferred())
    import cuda.bindings

    print("cuda.bindings", getattr(cuda.bindings, "__version__", "?"))


def _kvikio_smoke() -> None:
    import tempfile

    import cupy
    import kvikio
    import kvikio.defaults
    import numpy as np

    data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.bin")
        data.tofile(path)
        out = cupy.zeros(4096 + 8, dtype=cupy.uint8)
        with kvikio.CuFile(path, "r") as f:
            n = f.pread(out[8:], 4096, 12345).get()
        assert n == 4096 and (out[8:].get() == data[12345 : 12345 + 4096]).all()
        print("pread into a device slice at offset 8: ok")
        big = np.random.default_rng(1).integers(0, 256, 512 * 256 * 1024, dtype=np.uint8)
        big.tofile(path)
        dst = cupy.empty(big.size, dtype=cupy.uint8)
        for threads in (1, 8):
            kvikio.defaults.set("num_threads", threads)
            with kvikio.CuFile(path, "r") as f:
                start = time.perf_counter()
                futures = [f.pread(dst[i * 262144 : (i + 1) * 262144], 262144, i * 262144) for i in range(512)]
                total = sum(fut.get() for fut in futures)
                seconds = time.perf_counter() - start
            assert total == big.size
            print(
                f"512 x 256 KiB preads, {threads} threads: {seconds * 1e3:.1f} ms, {big.size / seconds / 1e9:.2f} GB/s"
            )
        assert (dst.get() == big).all()


def _step_kvikio_auto() -> None:
    _kvikio_smoke()


def _step_kvikio_compat() -> None:
    # Set before kvikio is imported (the step runs in a fresh process).
    _kvikio_smoke()


def _streams() -> dict[str, tuple[str, bytes]]:
    import numcodecs
    import numpy as np

    raw = np.arange(1 << 18, dtype=np.uint16).tobytes()
    streams: dict[str, tuple[str, bytes]] = {}
    import zlib

    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    streams["deflate"] = ("deflate", compressor.compress(raw) + compressor.flush())
    streams["zstd"] = ("zstd", numcodecs.Zstd(level=3).encode(raw))
    streams["zstd-checksum"] = ("zstd", numcodecs.Zstd(level=3, checksum=True).encode(raw))
    import zstandard

    streams["zstd-no-content-size"] = ("zstd", zstandard.ZstdCompressor(write_content_size=False).compress(raw))
    half = len(raw) // 2
    streams["zstd-two-frames"] = ("zstd", numcodecs.Zstd().encode(raw[:half]) + numcodecs.Zstd().encode(raw[half:]))
    from numcodecs import lz4

    # numcodecs' LZ4 prefixes the size: nvCOMP's RAW LZ4 wants the bare block after it.
    streams["lz4"] = ("lz4", lz4.LZ4().encode(raw)[4:])
    return {name: (algorithm, stream) for name, (algorithm, stream) in streams.items()} | {"_raw": ("", raw)}


def _step_nvcomp_semantics() -> None:
    import cupy
    import numpy as np
    from nvidia import nvcomp

    streams = _streams()
    raw = streams.pop("_raw")[1]
    for name, (algorithm, stream) in streams.items():
        codec = nvcomp.Codec(algorithm=algorithm, bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0, cuda_stream=0)
        src = cupy.asarray(np.frombuffer(stream, np.uint8))
        buffer = cupy.zeros(len(raw) + 100 + 256, dtype=cupy.uint8)
        try:
            srcs = nvcomp.as_arrays(src, [0], [len(stream)], cuda_stream=0)
            outs = nvcomp.as_arrays(buffer, [256], [len(raw) + 100], cuda_stream=0)
            result = codec.decode(srcs, out=outs)
            sizes = [int(n) for n in result.buffer_sizes] if hasattr(result, "buffer_sizes") else "?"
            cupy.cuda.runtime.deviceSynchronize()
            same = bytes(buffer[256 : 256 + len(raw)].get()) == raw
            print(f"{name}: carved decode ok={same} buffer_sizes={sizes} (expected {len(raw)})")
            # With the decompression config gpuzarr passes, built from a size 100 bytes larger
            # than the stream's: do buffer_sizes still report what was decoded, or echo the
            # config? (The executor trusts them to catch streams of the wrong size.)
            from gpuzarr.backends.cuda.cupy_device import decode_carved, decompression_config

            config = decompression_config(codec, algorithm, [len(raw) + 100])
            result = decode_carved(codec, algorithm, srcs, outs, config)
            cupy.cuda.runtime.deviceSynchronize()
            sized = [int(n) for n in result.buffer_sizes]
            print(f"{name}: with a config of {len(raw) + 100} bytes, buffer_sizes={sized} (decoded {len(raw)})")
        except Exception as exc:
            print(f"{name}: {type(exc).__name__}: {exc}")
    # Corrupt streams: does the decoder raise, and does the context survive?
    codec = nvcomp.Codec(algorithm="lz4", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0, cuda_stream=0)
    for name, stream in (("truncated lz4", streams["lz4"][1][: len(streams["lz4"][1]) // 2]),):
        _decode_corrupt(nvcomp, cupy, codec, name, stream, len(raw))
    codec = nvcomp.Codec(algorithm="zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0, cuda_stream=0)
    zstd = streams["zstd"][1]
    _decode_corrupt(nvcomp, cupy, codec, "zero-filled zstd frame", b"\x28\xb5\x2f\xfd" + bytes(len(zstd) - 4), len(raw))
    try:
        codec.decode([nvcomp.as_array(cupy.asarray(np.frombuffer(zstd, np.uint8)))])
        print("codec.decode(list): no error")
    except Exception as exc:
        print(f"codec.decode(list): {type(exc).__name__}: {exc}")


def _decode_corrupt(nvcomp: Any, cupy: Any, codec: Any, name: str, stream: bytes, size: int) -> None:
    import numpy as np

    src = cupy.asarray(np.frombuffer(stream, np.uint8))
    out = cupy.zeros(size, dtype=cupy.uint8)
    try:
        result = codec.decode(
            nvcomp.as_arrays(src, [0], [len(stream)], cuda_stream=0),
            out=nvcomp.as_arrays(out, [0], [size], cuda_stream=0),
        )
        sizes = [int(n) for n in result.buffer_sizes]
        print(f"{name}: no exception, buffer_sizes={sizes}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
    try:
        cupy.cuda.runtime.deviceSynchronize()
        print(f"{name}: context healthy after")
    except Exception as exc:
        print(f"{name}: CONTEXT POISONED: {type(exc).__name__}: {exc}")


def _nvcomp_decode(stream: int = 1, config: bool = False) -> Any:
    """A zstd decode through nvCOMP directly on ``stream`` (with a decompression config built from
    the sizes when ``config``); returns the codec and buffers, so that a caller can keep them."""
    import cupy
    import numpy as np
    from nvidia import nvcomp

    streams = _streams()
    raw = streams["_raw"][1]
    codec = nvcomp.Codec(algorithm="zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0, cuda_stream=stream)
    src = cupy.asarray(np.frombuffer(streams["zstd"][1], np.uint8))
    out = cupy.zeros(len(raw), dtype=cupy.uint8)
    options = (
        {"decompression_config": codec.decompression_config(codec.compression_config([len(raw)]))} if config else {}
    )
    result = codec.decode(
        nvcomp.as_arrays(src, [0], [src.size], cuda_stream=stream),
        out=nvcomp.as_arrays(out, [0], [len(raw)], cuda_stream=stream),
        **options,
    )
    print("decoded sizes", [int(n) for n in result.buffer_sizes])
    cupy.cuda.runtime.deviceSynchronize()
    return codec, src, out


def _step_exit_nvcomp_config() -> None:
    _nvcomp_decode(config=True)


def _step_exit_nvcomp_legacy_stream() -> None:
    _nvcomp_decode(1)


def _step_exit_nvcomp_default_stream() -> None:
    _nvcomp_decode(0)


def _gpuzarr_read(name: str) -> None:
    import gpuzarr
    from tests.backends.cuda_matrix import make_array

    array = make_array(name)
    got = gpuzarr.open(array.store, device="gpu")[...]
    print(name, "read", type(got).__name__, got.shape)


def _step_exit_gpuzarr_zstd() -> None:
    _gpuzarr_read("v3-sharded-zstd-crc32c")


def _step_exit_gpuzarr_raw() -> None:
    _gpuzarr_read("v3-raw-u1")


def _step_exit_gpuzarr_zstd_cleared() -> None:
    _gpuzarr_read("v3-sharded-zstd-crc32c")
    from gpuzarr.backends.cuda import cupy_device, executor

    cupy_device._CODECS._codecs = type(cupy_device._CODECS._codecs)(32)
    if executor._prefetch_pool is not None:
        executor._prefetch_pool.shutdown()
    import gc

    gc.collect()
    print("codec cache and prefetch pool cleared")


def _step_exit_gpuzarr_zstd_plain() -> None:
    _gpuzarr_read("v3-zstd-f4")


def _step_exit_gpuzarr_zstd_noconfig() -> None:
    from gpuzarr.backends.cuda import cupy_device

    cupy_device._decompression_config = lambda *args: None  # type: ignore[assignment]
    _gpuzarr_read("v3-zstd-f4")


def _step_exit_gpuzarr_zstd_pools() -> None:
    _gpuzarr_read("v3-zstd-f4")
    import gc

    from gpuzarr.backends.cuda import cupy_device

    cupy_device._CODECS._codecs = type(cupy_device._CODECS._codecs)(32)
    for pools in (cupy_device.PINNED_STAGING, cupy_device.DEVICE_BUFFERS):
        for pool in pools._pools.values():
            pool.clear()
            pool._pending.clear()
        pools._pools.clear()
    gc.collect()
    print("pools cleared")


_KEEP: list[Any] = []


def _step_exit_nvcomp_kvikio_import() -> None:
    _KEEP.append(_nvcomp_decode())
    import kvikio  # noqa: F401


def _step_exit_nvcomp_kvikio_read() -> None:
    _KEEP.append(_nvcomp_decode())
    _kvikio_smoke()


def _step_exit_nvcomp_global_codec() -> None:
    _KEEP.append(_nvcomp_decode())


def _step_exit_nvcomp_rawkernel() -> None:
    import cupy

    _KEEP.append(_nvcomp_decode())
    kernel = cupy.RawKernel(r'extern "C" __global__ void add1(int* x) { x[threadIdx.x] += 1; }', "add1")
    x = cupy.arange(32, dtype=cupy.int32)
    kernel((1,), (32,), (x,))
    cupy.cuda.runtime.deviceSynchronize()


def _step_exit_nvcomp_pinned() -> None:
    import cupy

    _KEEP.append(_nvcomp_decode())
    _KEEP.append(cupy.cuda.PinnedMemory(1 << 20))


def _step_exit_gpuzarr_no_kvikio() -> None:
    sys.modules["kvikio"] = None  # type: ignore[assignment]
    _gpuzarr_read("v3-zstd-f4")


def _step_corrupt() -> None:
    import cupy
    import numpy as np
    from nvidia import nvcomp

    streams = _streams()
    raw = streams["_raw"][1]
    rng = np.random.default_rng(0)
    payload = rng.normal(size=len(raw) // 8).cumsum().astype("<f8").tobytes()
    import numcodecs
    from numcodecs import lz4

    good = {"zstd": numcodecs.Zstd(level=3).encode(payload), "lz4": lz4.LZ4().encode(payload)[4:]}
    only = os.environ.get("GZ_CORRUPT", "")
    for algorithm, stream in good.items():
        cases = {
            "intact": stream,
            "second half zeroed": stream[: len(stream) // 2] + bytes(len(stream) - len(stream) // 2),
            "truncated to half": stream[: len(stream) // 2],
            "one byte flipped mid": stream[: len(stream) // 2]
            + bytes([stream[len(stream) // 2] ^ 0xFF])
            + stream[len(stream) // 2 + 1 :],
        }
        for case, data in cases.items():
            if only and only != f"{algorithm}:{case}":
                continue
            for with_config in (True, False):
                codec = nvcomp.Codec(
                    algorithm=algorithm, bitstream_kind=nvcomp.BitstreamKind.RAW, device_id=0, cuda_stream=0
                )
                src = cupy.asarray(np.frombuffer(data, np.uint8))
                out = cupy.zeros(len(payload), dtype=cupy.uint8)
                srcs = nvcomp.as_arrays(src, [0], [len(data)], cuda_stream=0)
                outs = nvcomp.as_arrays(out, [0], [len(payload)], cuda_stream=0)
                label = f"{algorithm} {case} config={with_config}"
                try:
                    if with_config:
                        config = codec.decompression_config(codec.compression_config([len(payload)]))
                        result = codec.decode(srcs, out=outs, decompression_config=config)
                    else:
                        config = None
                        result = codec.decode(srcs, out=outs)
                    sizes = [int(n) for n in result.buffer_sizes]
                    cupy.cuda.runtime.deviceSynchronize()
                    same = bytes(out.get()) == payload
                    status = "?"
                    if config is not None:
                        status = {a: repr(getattr(config, a)) for a in dir(config) if not a.startswith("_")}
                    print(f"{label}: sizes={sizes} equal={same} config={status}")
                except Exception as exc:
                    print(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
                try:
                    cupy.cuda.runtime.deviceSynchronize()
                except Exception as exc:
                    print(f"{label}: CONTEXT POISONED {exc}")
                    return
    print("result attributes:", [a for a in dir(result) if not a.startswith("_")])


STEPS: dict[str, tuple[Callable[[], None], dict[str, str]]] = {
    "environment": (_step_environment, {}),
    "kvikio-auto": (_step_kvikio_auto, {}),
    "kvikio-compat": (_step_kvikio_compat, {"KVIKIO_COMPAT_MODE": "ON"}),
    "nvcomp": (_step_nvcomp_semantics, {}),
    "corrupt": (_step_corrupt, {}),
    "corrupt-zstd-second-half-zeroed": (_step_corrupt, {"GZ_CORRUPT": "zstd:second half zeroed"}),
    "corrupt-zstd-truncated-to-half": (_step_corrupt, {"GZ_CORRUPT": "zstd:truncated to half"}),
    "corrupt-zstd-one-byte-flipped-mid": (_step_corrupt, {"GZ_CORRUPT": "zstd:one byte flipped mid"}),
    "corrupt-lz4-second-half-zeroed": (_step_corrupt, {"GZ_CORRUPT": "lz4:second half zeroed"}),
    "corrupt-lz4-truncated-to-half": (_step_corrupt, {"GZ_CORRUPT": "lz4:truncated to half"}),
    "corrupt-lz4-one-byte-flipped-mid": (_step_corrupt, {"GZ_CORRUPT": "lz4:one byte flipped mid"}),
    "exit-nvcomp-legacy": (_step_exit_nvcomp_legacy_stream, {}),
    "exit-nvcomp-default": (_step_exit_nvcomp_default_stream, {}),
    "exit-gpuzarr-zstd": (_step_exit_gpuzarr_zstd, {}),
    "exit-gpuzarr-raw": (_step_exit_gpuzarr_raw, {}),
    "exit-gpuzarr-zstd-cleared": (_step_exit_gpuzarr_zstd_cleared, {}),
    "exit-nvcomp-config": (_step_exit_nvcomp_config, {}),
    "exit-gpuzarr-zstd-plain": (_step_exit_gpuzarr_zstd_plain, {}),
    "exit-gpuzarr-zstd-noconfig": (_step_exit_gpuzarr_zstd_noconfig, {}),
    "exit-gpuzarr-zstd-pools": (_step_exit_gpuzarr_zstd_pools, {}),
    "exit-nvcomp-kvikio-import": (_step_exit_nvcomp_kvikio_import, {}),
    "exit-nvcomp-kvikio-read": (_step_exit_nvcomp_kvikio_read, {}),
    "exit-nvcomp-global-codec": (_step_exit_nvcomp_global_codec, {}),
    "exit-nvcomp-rawkernel": (_step_exit_nvcomp_rawkernel, {}),
    "exit-nvcomp-pinned": (_step_exit_nvcomp_pinned, {}),
    "exit-gpuzarr-no-kvikio": (_step_exit_gpuzarr_no_kvikio, {}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", nargs="*", default=list(STEPS))
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--run-step", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_step:
        try:
            STEPS[args.run_step][0]()
        except Exception:
            traceback.print_exc()
            return 1
        return 0
    failed = 0
    for step in args.steps:
        env = os.environ | {"PYTHONFAULTHANDLER": "1"} | STEPS[step][1]
        print(f"== {step}", flush=True)
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.gpu_probe", "--run-step", step],
                env=env,
                timeout=args.timeout,
                check=False,
            )
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        print(f"== {step}: exit {code} in {time.perf_counter() - start:.1f} s", flush=True)
        failed += code != 0
    return failed


if __name__ == "__main__":
    sys.exit(main())
