"""Inflate speed of the gzip/zlib libraries gpuzarr could decode with, on the benchmark's chunks.

    python -m benchmarks.inflate_candidates [--chunks 24] [--repeats 7] [--level 5]

Each candidate decodes the same 64³ uint16 chunks of the benchmarks' sample volume (gzip streams
as TensorStore and numcodecs' GZip write them, zlib streams as numcodecs' Zlib writes them),
bounded as gpuzarr decodes: at most the chunk's size (plus the one byte that tells a bomb), never
a size read from the stream. Reported, best of ``--repeats`` rounds that rotate the candidates:

* decoded MB per CPU second on one thread: on a machine shared with other work this is steadier
  than the wall clock, which other processes' time inflates;
* decoded MB per wall second with two threads sharing the chunks;
* the GIL stall: the longest the main thread waits while another thread inflates one large
  stream, as a fraction of that inflate's time: about 1 when the decoder holds the GIL (the
  control row, ``bytes.count``, does), about 0 when it releases it. Two-thread throughput only
  shows this on an idle machine; the stall shows it on a busy one too.

A candidate whose package is missing is left out.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .datasets import make_volume

#: decode(stream, decoded size) -> decoded bytes
Decode = Callable[[bytes, int], Any]
STDLIB = "zlib (stdlib) decompressobj"


def _streaming(module: Any, wbits: int) -> Decode:
    """A zlib-style module's ``decompressobj``, limited to one byte more than the chunk."""
    return lambda data, n: module.decompressobj(wbits).decompress(data, n + 1)


def candidates() -> dict[str, tuple[Decode, Decode]]:
    """name -> (gzip decoder, zlib decoder), for the candidates that import here."""
    found: dict[str, tuple[Decode, Decode]] = {STDLIB: (_streaming(zlib, 31), _streaming(zlib, 15))}
    try:
        deflate: Any = importlib.import_module("deflate")
        # Whole-buffer decoders: the output buffer has the chunk's size.
        found["deflate (libdeflate) gzip/zlib_decompress(data, n)"] = (
            lambda d, n: deflate.gzip_decompress(d, n),
            lambda d, n: deflate.zlib_decompress(d, n),
        )
    except ImportError:
        pass
    try:
        isal_zlib: Any = importlib.import_module("isal.isal_zlib")
        igzip_lib: Any = importlib.import_module("isal.igzip_lib")
        found["isal isal_zlib.decompressobj"] = (_streaming(isal_zlib, 31), _streaming(isal_zlib, 15))
        found["isal igzip_lib.IgzipDecompressor"] = (
            lambda d, n: igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_GZIP).decompress(d, n + 1),
            lambda d, n: igzip_lib.IgzipDecompressor(igzip_lib.DECOMP_ZLIB).decompress(d, n + 1),
        )
    except ImportError:
        pass
    try:
        zlib_ng: Any = importlib.import_module("zlib_ng.zlib_ng")
        found["zlib-ng zlib_ng.decompressobj"] = (_streaming(zlib_ng, 31), _streaming(zlib_ng, 15))
    except ImportError:
        pass
    return found


def gzip_stream(data: bytes, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def sample_chunks(count: int, level: int) -> tuple[list[bytes], list[bytes], int]:
    """(gzip streams, zlib streams, decoded size) of ``count`` 64³ uint16 chunks."""
    side = 64
    volume = make_volume((side * count, side, side))
    raw = [volume[i * side : (i + 1) * side].tobytes() for i in range(count)]
    return [gzip_stream(r, level) for r in raw], [zlib.compress(r, level) for r in raw], len(raw[0])


def cpu_rate(decode: Decode, streams: list[bytes], n: int) -> float:
    """Decoded MB per CPU second of this thread."""
    cpu = time.thread_time()
    for s in streams:
        decode(s, n)
    return len(streams) * n / (time.thread_time() - cpu) / 1e6


def wall_rate(decode: Decode, streams: list[bytes], n: int, pool: ThreadPoolExecutor) -> float:
    """Decoded MB per wall second, the streams shared by the pool's threads."""
    wall = time.perf_counter()
    list(pool.map(lambda s: decode(s, n), streams))
    return len(streams) * n / (time.perf_counter() - wall) / 1e6


def gil_stall(decode: Decode, stream: bytes, n: int) -> float:
    """The longest the main thread waits while another thread runs ``decode(stream, n)``, as a
    fraction of that call's time."""
    done = threading.Event()
    span = [0.0]

    def work() -> None:
        t = time.perf_counter()
        decode(stream, n)
        span[0] = time.perf_counter() - t
        done.set()

    worker = threading.Thread(target=work)
    last = time.perf_counter()
    longest = 0.0
    worker.start()
    while not done.is_set():
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
    worker.join()
    return longest / span[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--level", type=int, default=5)
    args = parser.parse_args(argv)
    gz, zl, n = sample_chunks(args.chunks, args.level)
    ratio = n * len(gz) / sum(map(len, gz))
    print(f"{len(gz)} chunks of {n} bytes, level {args.level}: compression ratio {ratio:.2f}", file=sys.stderr)
    found = candidates()
    for name, (dec_gz, dec_zl) in found.items():
        # a candidate's speed counts only once it gives the right bytes
        assert bytes(dec_gz(gz[0], n)) == bytes(dec_zl(zl[0], n)) == zlib.decompress(zl[0]), name

    # (name, format, "cpu" | "wall2") -> the best of the rounds
    best: dict[tuple[str, str, str], float] = {}
    names = list(found)
    with ThreadPoolExecutor(2) as pool:
        for r in range(args.repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                for fmt, dec, streams in (("gzip", found[name][0], gz), ("zlib", found[name][1], zl)):
                    for measure, value in (
                        ("cpu", cpu_rate(dec, streams, n)),
                        ("wall2", wall_rate(dec, streams, n, pool)),
                    ):
                        best[(name, fmt, measure)] = max(best.get((name, fmt, measure), 0.0), value)

    big = b"".join(zlib.decompress(z) for z in zl)  # one large stream, for the GIL check
    big_gz, big_zl = gzip_stream(big, args.level), zlib.compress(big, args.level)
    stall = {
        name: max(gil_stall(dec_gz, big_gz, len(big)), gil_stall(dec_zl, big_zl, len(big)))
        for name, (dec_gz, dec_zl) in found.items()
    }
    control = gil_stall(lambda d, _: d.count(b"\x01\x02\x03"), big * 8, 0)

    print("| candidate | gzip, 1 thread (MB/CPU-s) | zlib, 1 thread (MB/CPU-s) "
          "| gzip, 2 threads (MB/s) | zlib, 2 threads (MB/s) | GIL stall |")
    print("|---|---|---|---|---|---|")
    for name in names:
        cells = []
        for measure in ("cpu", "wall2"):
            for fmt in ("gzip", "zlib"):
                v = best[(name, fmt, measure)]
                cells.append(f"{v:.0f} ({v / best[(STDLIB, fmt, measure)]:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + f" | {stall[name]:.2f} |")
    print(f"| control: bytes.count (holds the GIL) | | | | | {control:.2f} |")


if __name__ == "__main__":
    main()
