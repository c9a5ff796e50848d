"""The array-by-selection matrix of the GPU read path (and :func:`read_gpu_plan`, which runs one
plan through a given device), shared by the CPU-emulated run
(tests/backends/test_cuda_host_logic.py) and the GPU run (tests/gpu/test_gpu_read.py)."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

import gpuzarr
from gpuzarr.backends.cuda.executor import execute
from gpuzarr.backends.cuda.gpu_plan import BATCH_BYTES, build_gpu_read_plan

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.backends.cuda.device import Device
    from gpuzarr.layout import ArrayLayout
    from gpuzarr.plan.selection import SelectionPlan
    from gpuzarr.store.base import Store

LE = {"name": "bytes", "configuration": {"endian": "little"}}
BE = {"name": "bytes", "configuration": {"endian": "big"}}


def _blosc(cname: str, shuffle: str) -> dict[str, Any]:
    return {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle}}


def _values(shape: tuple[int, ...], dtype: str) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(zlib.crc32(f"{shape}{dtype}".encode()))
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "c":
        values = (np.cumsum(rng.normal(size=n)) + 1j * rng.normal(size=n)).astype(dt)
    elif dt.kind == "f":
        values = np.cumsum(rng.normal(size=n)).astype(dt)
    elif dt.kind == "b":
        values = rng.integers(0, 2, size=n).astype(dt)
    else:
        # Compressible (runs of small numbers) and never a whole chunk of the fill value.
        values = ((np.arange(n) // 7) % 50 + 1 + rng.integers(0, 3, size=n)).astype(dt)
    return values.reshape(shape)


SHAPE2 = (45, 61)
CHUNKS2 = (16, 24)

#: name -> (gpuzarr.create keyword arguments, data type, how to write: "full" or "partial")
ARRAYS: dict[str, tuple[dict[str, Any], str, str]] = {
    "v3-zstd-f4": ({"codecs": [LE, {"name": "zstd"}]}, "<f4", "full"),
    "v3-zstd-bigendian-i8": ({"codecs": [BE, {"name": "zstd", "configuration": {"level": 3}}]}, "<i8", "full"),
    "v3-zstd-bigendian-c8": ({"codecs": [BE, {"name": "zstd"}]}, "<c8", "full"),
    "v3-gzip-i2": ({"codecs": [LE, {"name": "gzip"}]}, "<i2", "full"),
    "v3-gzip-crc32c-f8": ({"codecs": [LE, {"name": "gzip"}, {"name": "crc32c"}]}, "<f8", "full"),
    "v3-raw-u1": ({"codecs": [LE]}, "|u1", "full"),
    "v3-raw-bigendian-u4-crc32c": ({"codecs": [BE, {"name": "crc32c"}]}, "<u4", "full"),
    "v3-blosc-lz4-shuffle-u2": ({"codecs": [LE, _blosc("lz4", "shuffle")]}, "<u2", "full"),
    "v3-blosc-lz4hc-noshuffle-i4": ({"codecs": [LE, _blosc("lz4hc", "noshuffle")]}, "<i4", "full"),
    "v3-blosc-zstd-bitshuffle-f8": ({"codecs": [LE, _blosc("zstd", "bitshuffle")]}, "<f8", "full"),
    "v3-blosc-zlib-shuffle-i4": ({"codecs": [LE, _blosc("zlib", "shuffle")]}, "<i4", "full"),
    "v3-blosc-lz4-bitshuffle-bigendian-f4": ({"codecs": [BE, _blosc("lz4", "bitshuffle")]}, "<f4", "full"),
    "v3-blosc-blosclz-cpu": ({"codecs": [LE, _blosc("blosclz", "shuffle")]}, "<u2", "full"),
    "v3-transpose-zstd": (
        {"codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, LE, {"name": "zstd"}]},
        "<u2",
        "full",
    ),
    "v3-missing-chunks-gzip": ({"codecs": [LE, {"name": "gzip"}], "fill_value": 7}, "<i4", "partial"),
    "v3-sharded-zstd-crc32c": (
        {
            "shards": (32, 48),
            "codecs": [LE, {"name": "zstd"}, {"name": "crc32c"}],
            "fill_value": 0,
        },
        "<u2",
        "partial",
    ),
    # uncompressed inner chunks the device reads from their shard files, side by side at once
    "v3-sharded-raw-u2": ({"shards": (32, 48), "codecs": [LE], "fill_value": 0}, "<u2", "partial"),
    "v3-sharded-blosc-transpose": (
        {
            "shards": (32, 48),
            "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, LE, _blosc("lz4", "shuffle")],
            "fill_value": 0,
        },
        "<f4",
        "partial",
    ),
    "v3-transpose-outside-sharding-cpu": (
        {
            "chunks": (32, 48),
            "codecs": [
                {"name": "transpose", "configuration": {"order": [1, 0]}},
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [24, 16],
                        "codecs": [LE, {"name": "zstd"}],
                        "index_codecs": [LE, {"name": "crc32c"}],
                    },
                },
            ],
        },
        "<i2",
        "full",
    ),
    "v2-zlib-bigendian-i4": ({"zarr_format": 2, "compressor": {"id": "zlib", "level": 5}}, ">i4", "full"),
    "v2-lz4-f8": ({"zarr_format": 2, "compressor": {"id": "lz4", "acceleration": 1}}, "<f8", "full"),
    "v2-blosc-order-F": (
        {"zarr_format": 2, "order": "F", "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1}},
        "<u4",
        "full",
    ),
    "v2-gzip-missing": (
        {"zarr_format": 2, "compressor": {"id": "gzip", "level": 1}, "fill_value": -1},
        "<i2",
        "partial",
    ),
    "v2-delta-filter-cpu": (
        {"zarr_format": 2, "filters": [{"id": "delta", "dtype": "<i4"}], "compressor": {"id": "zlib", "level": 1}},
        "<i4",
        "full",
    ),
    # zarr-python 3's numcodecs.* v3 codecs: compressors decode on the GPU, filters on the CPU.
    "v3-numcodecs-lz4-f4": ({"compressors": [{"name": "numcodecs.lz4"}]}, "<f4", "partial"),
    # zarr-python 3 writes numcodecs.zarr3.Zstd, GZip and Blosc under these names: the streams
    # of the zstd, gzip and blosc routes.
    "v3-numcodecs-zstd-f4": (
        {"compressors": [{"name": "numcodecs.zstd", "configuration": {"level": 1}}]}, "<f4", "partial"
    ),
    "v3-numcodecs-gzip-i2": (
        {"compressors": [{"name": "numcodecs.gzip", "configuration": {"level": 1}}]}, "<i2", "full"
    ),
    "v3-numcodecs-blosc-lz4-shuffle-i4": (
        {"compressors": [{"name": "numcodecs.blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": 1}}]},
        "<i4",
        "partial",
    ),
    "v3-numcodecs-blosc-blosclz-cpu": (
        {"compressors": [{"name": "numcodecs.blosc", "configuration": {"cname": "blosclz", "shuffle": 2}}]},
        "<u2",
        "full",
    ),
    "v3-numcodecs-delta-filter-cpu": (
        {
            "filters": [{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}],
            "compressors": [{"name": "numcodecs.zlib", "configuration": {"level": 1}}],
        },
        "<i4",
        "full",
    ),
}

SELECTIONS: dict[str, Any] = {
    "full": (slice(None), slice(None)),
    "crop": (slice(5, 40), slice(10, 57)),
    "strided": (slice(1, 44, 3), slice(2, 60, 5)),
    "row": (17, slice(None)),
    "column-strided": (slice(None, None, 2), 30),
    "point": (44, 60),
    "empty": (slice(10, 10), slice(None)),
}


def make_array(name: str, store: Any = None) -> gpuzarr.Array:
    """The array ``name`` of :data:`ARRAYS`, written into a memory store (or ``store``)."""
    kwargs, dtype, how = ARRAYS[name]
    kwargs = dict(kwargs)
    chunks = kwargs.pop("chunks", CHUNKS2)
    array = gpuzarr.create(
        gpuzarr.MemoryStore() if store is None else store, shape=SHAPE2, dtype=dtype, chunks=chunks, **kwargs
    )
    data = _values(SHAPE2, dtype)
    if how == "full":
        array[...] = data
    else:
        fill = array.fill_value
        # Leave whole chunks (and inner chunks, and one whole shard) unwritten or equal to the fill
        # value, so that they are missing from the store.
        region = data.copy()
        region[16:32, :] = fill
        region[:, 48:] = fill
        array[0:32, :] = region[0:32, :]
        array[32:, 0:24] = region[32:, 0:24]
    return array


def make_local_array(tmp_path: Path, name: str = "v3-zstd-f4") -> gpuzarr.Array:
    """:func:`make_array` ``name`` in a local directory store (``tmp_path / "a.zarr"``)."""
    return make_array(name, gpuzarr.LocalStore(tmp_path / "a.zarr"))


def open_on_gpu(array: gpuzarr.Array, **kwargs: Any) -> gpuzarr.Array:
    """``array`` opened again with device="gpu" (``kwargs`` to :func:`gpuzarr.open`)."""
    opened = gpuzarr.open(array.store, device="gpu", **kwargs)
    assert isinstance(opened, gpuzarr.Array)
    return opened


def cpu_result(array: gpuzarr.Array, selection: Any) -> np.ndarray[Any, Any]:
    """The CPU engine's answer, as an array (0-d for a point)."""
    cpu = gpuzarr.open(array.store, device="cpu")
    assert isinstance(cpu, gpuzarr.Array)
    return np.asarray(cpu.read(selection))


def assert_bitwise_equal(got: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(expected).tobytes()


def read_gpu_plan(
    layout: ArrayLayout,
    store: Store,
    plan: SelectionPlan,
    device: Device,
    *,
    budget: int = BATCH_BYTES,
) -> Any:
    """Read the (basic) selection ``plan`` describes into a new device array of ``plan.shape``."""
    gpu_plan = build_gpu_read_plan(layout, plan, budget)
    out = device.empty(gpu_plan.buffer_shape, gpu_plan.dtype)
    execute(layout, store, gpu_plan, device, out)
    return out
