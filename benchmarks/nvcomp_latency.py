"""How long one batched nvCOMP decode takes, by the size of its streams and their number: the
cost a GPU read pays once per executor batch.

    python -m benchmarks.nvcomp_latency [--algorithms zstd lz4 deflate] [--sizes-kib 64 128 512 2048]
                                        [--counts 1 8 64 512] [--repeats 5] [--cupy-allocator]

The streams are chunks of the benchmarks' uint16 volume (the generator of ``benchmarks.datasets``,
about 1.7x compressible), each compressed on the host as Zarr stores it: zstd level 3 (numcodecs),
raw deflate level 5 (zlib) or raw LZ4 blocks (numcodecs' LZ4, its size prefix dropped). They are
uploaded once, then decoded by one ``nvcomp.Codec.decode`` call per repeat, with the call
gpuzarr makes (a batch carved out of one buffer, outputs of the chunk size, a decompression
config built from the known sizes), on a stream of its own. Each row gives the median host time
from the call until the stream has finished, and the median time between CUDA events recorded on
the stream before and after the call: where the two differ, the host, not the device, holds the
decode up. ``--cupy-allocator`` routes nvCOMP's scratch through CuPy's pool first, as gpuzarr
does. Prints a Markdown table; no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from typing import Any

import numpy as np

from .datasets import make_volume

#: nvCOMP's names of the algorithms
ALGORITHMS = {"zstd": "Zstd", "lz4": "LZ4", "deflate": "Deflate"}
ALIGNMENT = 8


def compress(algorithm: str, data: bytes) -> bytes:
    """``data`` as the stream nvCOMP's RAW bitstream of ``algorithm`` decodes."""
    if algorithm == "zstd":
        from numcodecs import Zstd

        return bytes(Zstd(level=3).encode(data))
    if algorithm == "deflate":
        packer = zlib.compressobj(5, zlib.DEFLATED, -15)
        return packer.compress(data) + packer.flush()
    from numcodecs import LZ4

    return bytes(LZ4(acceleration=1).encode(data))[4:]  # numcodecs prefixes the decoded size


def streams(algorithm: str, chunk_nbytes: int, count: int) -> tuple[list[bytes], int]:
    """``count`` compressed chunks of ``chunk_nbytes`` decoded bytes each (cut from one
    volume; repeated when the volume holds fewer)."""
    side = 64
    volume = make_volume((side, side, side * 4))  # 2 MiB of uint16
    flat = volume.reshape(-1).view(np.uint8)
    pieces = max(1, flat.size // chunk_nbytes)
    distinct = [
        compress(algorithm, flat[i * chunk_nbytes : (i + 1) * chunk_nbytes].tobytes())
        for i in range(min(pieces, count))
    ]
    return [distinct[i % len(distinct)] for i in range(count)], chunk_nbytes


def measure(
    nvcomp: Any, cupy: Any, algorithm: str, chunk_nbytes: int, count: int, repeats: int
) -> tuple[float, float, float, float]:
    """Median seconds of one batched decode: building its decompression config, the host's
    wait with that config, the device's time between events, and the host's wait without a
    config (nvCOMP configuring itself)."""
    encoded, decoded_nbytes = streams(algorithm, chunk_nbytes, count)
    offsets = np.cumsum([0] + [-(-len(s) // ALIGNMENT) * ALIGNMENT for s in encoded])
    packed = np.zeros(int(offsets[-1]), dtype=np.uint8)
    for s, o in zip(encoded, offsets, strict=False):
        packed[o : o + len(s)] = np.frombuffer(s, dtype=np.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        src = cupy.asarray(packed)
        dst = cupy.empty(count * decoded_nbytes, dtype=cupy.uint8)
    handle = int(stream.ptr)
    srcs = nvcomp.as_arrays(src, [int(o) for o in offsets[:-1]], [len(s) for s in encoded], cuda_stream=handle)
    sizes = [decoded_nbytes] * count
    outs = nvcomp.as_arrays(dst, [i * decoded_nbytes for i in range(count)], sizes, cuda_stream=handle)
    codec = nvcomp.Codec(algorithm=ALGORITHMS[algorithm], bitstream_kind=nvcomp.BitstreamKind.RAW, cuda_stream=handle)
    config = codec.decompression_config(codec.compression_config(sizes))
    stream.synchronize()

    def configured() -> float:
        t0 = time.perf_counter()
        codec.decompression_config(codec.compression_config(sizes))
        return time.perf_counter() - t0

    def once(config: Any = config) -> tuple[float, float]:
        before, after = cupy.cuda.Event(), cupy.cuda.Event()
        t0 = time.perf_counter()
        before.record(stream)
        options = {} if config is None else {"decompression_config": config}
        result = codec.decode(srcs, out=outs, **options)
        after.record(stream)
        stream.synchronize()
        host_seconds = time.perf_counter() - t0
        got = [int(n) for n in result.buffer_sizes]
        if got != sizes:
            raise RuntimeError(f"decoded sizes {sorted(set(got))}, expected {decoded_nbytes}")
        return host_seconds, cupy.cuda.get_elapsed_time(before, after) / 1e3

    once()  # warm-up: scratch allocated, kernels loaded
    times = [once() for _ in range(repeats)]
    once(None)
    unconfigured = [once(None)[0] for _ in range(repeats)]
    config_seconds = statistics.median(configured() for _ in range(repeats))
    expected = np.frombuffer(host_decode(algorithm, encoded[0], decoded_nbytes), dtype=np.uint8)
    if not np.array_equal(dst[: expected.size].get(), expected):
        raise RuntimeError("the first decoded stream differs from the host's decode")
    waited = statistics.median(t[0] for t in times)
    return config_seconds, waited, statistics.median(t[1] for t in times), statistics.median(unconfigured)


def host_decode(algorithm: str, stream: bytes, decoded_nbytes: int) -> bytes:
    """The host's decode of one stream of ``decoded_nbytes``, to check the device's."""
    if algorithm == "zstd":
        from numcodecs import Zstd

        return bytes(Zstd().decode(stream))
    if algorithm == "deflate":
        return zlib.decompress(stream, -15)
    from numcodecs import LZ4

    return bytes(LZ4().decode(decoded_nbytes.to_bytes(4, "little") + stream))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.nvcomp_latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithms", nargs="+", choices=sorted(ALGORITHMS), default=["zstd", "lz4", "deflate"])
    p.add_argument("--sizes-kib", type=int, nargs="+", default=[64, 128, 512, 2048])
    p.add_argument("--counts", type=int, nargs="+", default=[1, 8, 64, 512])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cupy-allocator", action="store_true", help="nvCOMP's scratch from CuPy's pool, as in gpuzarr")
    args = p.parse_args(argv)
    try:
        import cupy
        from nvidia import nvcomp
    except ImportError as exc:
        print(f"skipped: {exc}")
        return 0
    if args.cupy_allocator:
        # gpuzarr's own routing, which also keeps the allocator alive past the interpreter's end.
        from gpuzarr.backends.cuda.cupy_device import _nvcomp

        _nvcomp()
    print("| algorithm | stream KiB | streams | config ms | host ms | device ms | decoded GB/s | host ms, no config |")
    print("|---|---|---|---|---|---|---|---|")
    for algorithm in args.algorithms:
        for kib in args.sizes_kib:
            for count in args.counts:
                try:
                    timings = measure(nvcomp, cupy, algorithm, kib * 1024, count, args.repeats)
                except Exception as exc:  # reported, not raised: the other rows still run
                    print(f"| {algorithm} | {kib} | {count} | error: {type(exc).__name__}: {exc} | | | | |", flush=True)
                    continue
                config, host, device, unconfigured = (f"{t * 1e3:.2f}" for t in timings)
                cells = f"{config} | {host} | {device} | {kib * 1024 * count / timings[1] / 1e9:.2f} | {unconfigured}"
                print(f"| {algorithm} | {kib} | {count} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
