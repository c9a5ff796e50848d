"""The raw ceilings of a full read: each step alone, with no Zarr library in the way.

* ``host-read``: every chunk (or shard) file's bytes into one preallocated buffer, from a thread
  pool as wide as gpuzarr's default concurrency. No decoding: a CPU read cannot beat it.
* ``host-to-device`` (GPU): one copy of the array's decoded size from pinned host memory to the
  device, the bound for a path that decodes on the host and ships the result.
* ``nvcomp-decode`` (GPU): nvCOMP's batched decoder over every compressed stream of the array,
  already on the device, in one call. The streams are cut out of the chunks by gpuzarr's own
  splitter (``backends/cuda/streams.py``), outside the timed region, so this is exactly the
  decode work the GPU path hands nvCOMP (stored Blosc blocks, Blosc's un-shuffle and the assembly
  are not included).

Every ceiling is warmed up once and then timed ``repeats`` times. GB/s counts the bytes the step
moves (stored bytes, copied bytes, decoded bytes); ``array_gbps_median`` is the array's decoded
size over the same median time, the unit of the harness's full-read rows. CuPy and nvCOMP are
imported inside the functions, so this module imports on any machine.
"""

from __future__ import annotations

import functools
import json
import math
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .impls import _gpu_note
from .measure import summarise

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

METADATA_NAMES = {"zarr.json", ".zarray", ".zattrs", ".zgroup"}
#: gpuzarr's GPU routes whose streams nvCOMP decodes (see gpuzarr/backends/cuda/routes.py).
NVCOMP_ROUTES = {"zstd", "gzip", "numcodecs.zlib", "numcodecs.lz4", "blosc"}
#: v2 compressor ids whose v3 codec name differs (the GPU routes are keyed by v3 names)
V2_CODEC_NAMES = {"zlib": "numcodecs.zlib", "lz4": "numcodecs.lz4"}
#: stream algorithm (gpuzarr's name) -> nvCOMP's algorithm name
NVCOMP_ALGORITHMS = {"zstd": "Zstd", "deflate": "Deflate", "lz4": "LZ4"}
#: nvCOMP asks for at most 8-byte aligned inputs (gpuzarr's GPU plan uses the same).
STREAM_ALIGNMENT = 8
EMPTY_INNER_CHUNK = 2**64 - 1


class SkipCeiling(Exception):
    """This ceiling does not apply here (reported as skipped, with the message as the reason)."""


def usable_cpus() -> int:
    """The CPUs this process may use: gpuzarr's default ``concurrency`` (gpuzarr/config.py)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:
        return os.cpu_count() or 1


def chunk_files(path: Path) -> list[Path]:
    """Every stored chunk (or shard) file of the array at ``path``: all files but the metadata."""
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name not in METADATA_NAMES)


def _timed(once: Callable[[], Any], repeats: int) -> tuple[Any, list[float]]:
    """Warm up once (its result is returned, for checks), then time ``repeats`` calls."""
    first = once()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    return first, times


def _record(name: str, nbytes: int, items: int, times: list[float], array_nbytes: int) -> dict[str, Any]:
    stats = summarise(times, nbytes, items)
    return {
        "ceiling": name,
        "status": "ok",
        "note": "",
        "nbytes": nbytes,
        "items": items,
        "array_nbytes": array_nbytes,
        "times_s": times,
        **stats,
        "array_gbps_median": array_nbytes / stats["time_median_s"] / 1e9,
    }


# -- host read ----------------------------------------------------------------------------------------


def host_read(path: Path, array_nbytes: int, repeats: int, workers: int | None = None) -> dict[str, Any]:
    """Read every chunk file of ``path`` into one page-aligned buffer; ``nbytes`` = bytes read."""
    workers = workers or usable_cpus()
    files = chunk_files(path)
    sizes = [f.stat().st_size for f in files]
    page = mmap.PAGESIZE
    # Each file lands at a page boundary of one anonymous mapping (itself page-aligned), as a
    # reader that hands the buffer to the device or to O_DIRECT would lay it out.
    slots = np.cumsum([0] + [-(-n // page) * page for n in sizes])
    buffer = mmap.mmap(-1, max(int(slots[-1]), page))
    view = memoryview(buffer)

    def read_file(i: int) -> int:
        start, size = int(slots[i]), sizes[i]
        fd = os.open(files[i], os.O_RDONLY)
        try:
            done = 0
            while done < size:  # preadv fills the buffer in place (os.pread would allocate bytes)
                n = os.preadv(fd, [view[start + done : start + size]], done)
                if n == 0:
                    raise EOFError(f"{files[i]}: {size - done} of {size} bytes missing")
                done += n
            return done
        finally:
            os.close(fd)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            # The warm-up also faults the buffer's pages in, so the timed runs measure reads only.
            counted, times = _timed(lambda: sum(pool.map(read_file, range(len(files)))), repeats)
    finally:
        view.release()
        buffer.close()
    rec = _record("host-read", counted, len(files), times, array_nbytes)
    rec["workers"] = workers
    return rec


# -- host -> device copy ----------------------------------------------------------------------------


def host_to_device(array_nbytes: int, repeats: int) -> dict[str, Any]:
    """Copy ``array_nbytes`` from pinned host memory to the device, synchronised."""
    import cupy

    pinned = cupy.cuda.alloc_pinned_memory(array_nbytes)
    host = np.frombuffer(pinned, dtype=np.uint8, count=array_nbytes)
    host[:] = 1  # touch every page before timing
    device = cupy.empty(array_nbytes, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)

    def once() -> None:
        device.set(host, stream=stream)
        stream.synchronize()

    _, times = _timed(once, repeats)
    return _record("host-to-device", array_nbytes, 1, times, array_nbytes)


# -- nvCOMP batch decode ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkFormat:
    """What a stored chunk file holds, read from the array's metadata."""

    route: str  # gpuzarr's GPU route: "zstd", "gzip", "blosc", ... (a key of streams.SPLITTERS)
    chunk_nbytes: int  # decoded bytes of one (inner) chunk
    crc32c: bool = False  # a 4-byte crc32c follows each (inner) chunk's bytes
    chunks_per_shard: int = 0  # 0: not sharded
    index_nbytes: int = 0
    index_at_end: bool = True


def chunk_format(path: Path) -> ChunkFormat:
    """Parse zarr.json (v3, sharded or not) or .zarray (v2). Raises SkipCeiling when the chunks
    hold nothing nvCOMP decodes."""
    if (path / ".zarray").exists():
        meta = json.loads((path / ".zarray").read_text())
        compressor = meta.get("compressor") or {}
        compressor_id = compressor.get("id", "none")
        route = V2_CODEC_NAMES.get(compressor_id, compressor_id)
        if meta.get("filters"):
            raise SkipCeiling(f"v2 filters {[f.get('id') for f in meta['filters']]}: not a single nvCOMP stream")
        if route not in NVCOMP_ROUTES:
            raise SkipCeiling(f"v2 compressor {compressor_id!r}: no nvCOMP decoder")
        return ChunkFormat(route, math.prod(meta["chunks"]) * np.dtype(meta["dtype"]).itemsize)

    meta = json.loads((path / "zarr.json").read_text())
    codecs = meta["codecs"]
    chunk_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
    shard: dict[str, Any] = {}
    if codecs[0]["name"] == "sharding_indexed":
        conf = codecs[0]["configuration"]
        n = math.prod(s // c for s, c in zip(chunk_shape, conf["chunk_shape"]))
        # The index: (offset, nbytes) as little-endian uint64 per inner chunk, then a crc32c.
        has_crc = any(c["name"] == "crc32c" for c in conf.get("index_codecs", []))
        shard = {
            "chunks_per_shard": n,
            "index_nbytes": 16 * n + (4 if has_crc else 0),
            "index_at_end": conf.get("index_location", "end") == "end",
        }
        codecs, chunk_shape = conf["codecs"], conf["chunk_shape"]
    names = [c["name"] for c in codecs if c["name"] not in ("bytes", "transpose")]
    crc = names[-1:] == ["crc32c"]
    names = names[:-1] if crc else names
    if len(names) != 1 or names[0] not in NVCOMP_ROUTES:
        raise SkipCeiling(f"codecs {names or ['bytes']}: not one compressor that nvCOMP decodes")
    itemsize = np.dtype(meta["data_type"]).itemsize
    return ChunkFormat(names[0], math.prod(chunk_shape) * itemsize, crc, **shard)


def encoded_chunks(path: Path, fmt: ChunkFormat) -> Iterator[np.ndarray[Any, np.dtype[np.uint8]]]:
    """The encoded bytes of every stored (inner) chunk, crc32c stripped."""
    for f in chunk_files(path):
        data = np.fromfile(f, dtype=np.uint8)
        chunks = [data]
        if fmt.chunks_per_shard:
            index = data[-fmt.index_nbytes :] if fmt.index_at_end else data[: fmt.index_nbytes]
            pairs = index[: 16 * fmt.chunks_per_shard].view("<u8").reshape(-1, 2)
            chunks = [data[int(o) : int(o) + int(n)] for o, n in pairs if o != EMPTY_INNER_CHUNK]
        for chunk in chunks:
            yield chunk[:-4] if fmt.crc32c else chunk


@dataclass(frozen=True)
class DecodeInputs:
    algorithm: str  # nvCOMP's name: "Zstd", "Deflate", "LZ4"
    streams: list[np.ndarray[Any, np.dtype[np.uint8]]]  # raw bitstreams
    decoded_nbytes: int  # what they decode to, in all
    stream_decoded: list[int] = field(default_factory=list)  # what each one decodes to


def decode_inputs(path: Path) -> DecodeInputs:
    """The raw streams gpuzarr's GPU path would hand nvCOMP for a full read of ``path``."""
    from gpuzarr.backends.cuda.streams import UnsupportedStreamError, split_chunk

    fmt = chunk_format(path)
    streams, decoded, algorithms, sizes = [], 0, set(), []
    for chunk in encoded_chunks(path, fmt):
        try:
            split = split_chunk(fmt.route, chunk, fmt.chunk_nbytes)
        except UnsupportedStreamError as exc:
            raise SkipCeiling(f"{fmt.route}: {exc}") from exc
        for s in split.streams:
            if s.algorithm != "copy":  # stored (incompressible) Blosc blocks are plain copies
                algorithms.add(s.algorithm)
                streams.append(chunk[s.offset : s.offset + s.nbytes])
                decoded += s.decoded_nbytes
                sizes.append(s.decoded_nbytes)
    if not streams:
        raise SkipCeiling(f"{fmt.route}: every chunk is stored uncompressed")
    if len(algorithms) > 1:
        raise SkipCeiling(f"{fmt.route}: streams of several algorithms {sorted(algorithms)}")
    return DecodeInputs(NVCOMP_ALGORITHMS[algorithms.pop()], streams, decoded, sizes)


def nvcomp_decode(path: Path, array_nbytes: int, repeats: int) -> dict[str, Any]:
    """One ``nvcomp.Codec.decode`` over all the array's streams, already on the device, with the
    call gpuzarr makes: the batch and its outputs carved out of one buffer each
    (``nvcomp.as_arrays(buffer, offsets, sizes)``), ``decode(srcs, out=outs)`` given the
    decompression config built from the known decoded sizes
    (``cupy_device.decompression_config`` and ``decode_carved``, which the library calls)."""
    inputs = decode_inputs(path)
    try:
        from nvidia import nvcomp
    except ImportError as exc:
        raise SkipCeiling(f"nvidia-nvcomp not importable ({exc})") from exc
    import cupy

    from gpuzarr.backends.cuda.cupy_device import decode_carved, decompression_config

    sizes = [s.size for s in inputs.streams]
    offsets = np.cumsum([0] + [-(-n // STREAM_ALIGNMENT) * STREAM_ALIGNMENT for n in sizes])
    host = np.zeros(int(offsets[-1]), dtype=np.uint8)
    for s, o in zip(inputs.streams, offsets):
        host[o : o + s.size] = s
    device = cupy.asarray(host)  # uploaded once, outside the timed region
    out_sizes = inputs.stream_decoded
    out_offsets = np.cumsum([0] + [-(-n // STREAM_ALIGNMENT) * STREAM_ALIGNMENT for n in out_sizes])
    decoded = cupy.empty(max(int(out_offsets[-1]), 1), dtype=cupy.uint8)
    srcs = nvcomp.as_arrays(device, [int(o) for o in offsets[:-1]], sizes)
    outs = nvcomp.as_arrays(decoded, [int(o) for o in out_offsets[:-1]], out_sizes)
    codec = nvcomp.Codec(algorithm=inputs.algorithm, bitstream_kind=nvcomp.BitstreamKind.RAW)
    config = decompression_config(codec, inputs.algorithm, out_sizes)
    cupy.cuda.runtime.deviceSynchronize()

    def once() -> int:
        result = decode_carved(codec, inputs.algorithm, srcs, outs, config)
        # nvCOMP runs on its own stream: synchronise the device, not CuPy's current stream.
        cupy.cuda.runtime.deviceSynchronize()
        return sum(int(n) for n in result.buffer_sizes)

    got, times = _timed(once, repeats)
    if got != inputs.decoded_nbytes:
        raise RuntimeError(f"nvCOMP decoded {got} bytes, the streams hold {inputs.decoded_nbytes}")
    rec = _record("nvcomp-decode", inputs.decoded_nbytes, len(sizes), times, array_nbytes)
    rec["algorithm"] = inputs.algorithm
    return rec


# -- all of them ----------------------------------------------------------------------------------------


def _guarded(name: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one ceiling; a SkipCeiling or an error becomes a record, not an exception."""
    try:
        return measure()
    except SkipCeiling as exc:
        return {"ceiling": name, "status": "skipped", "note": str(exc)}
    except Exception as exc:
        return {"ceiling": name, "status": "error", "note": f"{type(exc).__name__}: {exc}"}


def _on_gpu(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a GPU ceiling, then give its buffers (gone with ``measure``'s frame) back to the driver,
    so that the rows measured next do not start with a CuPy pool full of them."""
    import cupy

    try:
        return measure()
    finally:
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


def measure_ceilings(path: Path, array_nbytes: int, repeats: int, gpu: bool) -> list[dict[str, Any]]:
    """The host-read ceiling of the array at ``path``; with ``gpu``, the GPU ceilings too (skipped,
    with the reason, when gpuzarr sees no usable GPU)."""
    records = [_guarded("host-read", lambda: host_read(path, array_nbytes, repeats))]
    if gpu:
        no_gpu = _gpu_note()
        gpu_ceilings: dict[str, Callable[[], dict[str, Any]]] = {
            "host-to-device": lambda: host_to_device(array_nbytes, repeats),
            "nvcomp-decode": lambda: nvcomp_decode(path, array_nbytes, repeats),
        }
        for name, measure in gpu_ceilings.items():
            if no_gpu is not None:
                records.append({"ceiling": name, "status": "skipped", "note": no_gpu})
            else:
                records.append(_guarded(name, functools.partial(_on_gpu, measure)))
    return records
