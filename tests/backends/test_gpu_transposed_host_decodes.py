"""Chunks of transposed layouts (a ``transpose`` codec, v2 ``order="F"``) that the GPU path
decodes on the host after all: legal streams nvCOMP does not batch (a zstd frame that declares
no content size, a gzip of two members) and streams the device failed on. The assemble launch
reads every chunk of a batch with its route's (transposed) strides, and the host handed it the
chunk already transposed back: the GPU read returned it transposed a second time."""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zstandard

import gpuzarr
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice

if TYPE_CHECKING:
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu

TRANSPOSE_ZSTD = [
    {"name": "transpose", "configuration": {"order": [1, 0]}},
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": 1}},
]


class _FailsFirstStream(CpuEmulatedDevice):
    """A device whose batched decode reports the first stream of each batch failed."""

    def decompress_batch(self, algorithm: str, *args: Any) -> Any:
        pending = super().decompress_batch(algorithm, *args)

        def sizes() -> Any:
            got = list(pending())
            got[0] = -1
            return got

        return sizes


def _both(path: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    cpu = np.asarray(gpuzarr.open(str(path), device="cpu")[...])
    gpu = np.asarray(gpuzarr.open(str(path), device="gpu")[...])
    return cpu, gpu


def _no_content_size(chunk: Path) -> None:
    """The chunk's zstd frame written again without its content size (legal; nvCOMP wants it)."""
    stored = zstandard.ZstdDecompressor().decompress(chunk.read_bytes())
    chunk.write_bytes(zstandard.ZstdCompressor(write_content_size=False).compress(stored))


@pytest.mark.parametrize("shards", [None, (8, 12)], ids=["chunks", "sharded"])
def test_a_transposed_zstd_chunk_without_a_content_size(emulated_gpu: EmulatedGpu, tmp_path: Path, shards: Any) -> None:
    data = np.arange(8 * 12, dtype="<u2").reshape(8, 12)
    path = tmp_path / "a.zarr"
    if shards is None:
        gpuzarr.create(str(path), data=data, chunks=(4, 6), codecs=TRANSPOSE_ZSTD, device="cpu")
        _no_content_size(path / "c" / "1" / "0")
    else:  # the transpose inside the shards: inner chunks' frames rewritten in the shard file
        inner = {"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 6], "codecs": TRANSPOSE_ZSTD}}
        gpuzarr.create(str(path), shape=data.shape, dtype=data.dtype, chunks=(8, 12), codecs=[inner], device="cpu")
        array = gpuzarr.open(str(path), mode="r+", device="cpu")
        array[...] = data
        _rewrite_shard_without_content_sizes(path / "c" / "0" / "0", n=4)
    cpu, gpu = _both(path)
    np.testing.assert_array_equal(cpu, data)
    np.testing.assert_array_equal(gpu, data)


def _rewrite_shard_without_content_sizes(shard: Path, n: int) -> None:
    """A shard (index at the end, bytes + crc32c) of ``n`` zstd inner chunks, each frame written
    again without its content size and the index made anew."""
    import struct

    from gpuzarr.codecs.crc32c import crc32c

    raw = shard.read_bytes()
    index = raw[-(16 * n + 4) : -4]
    frames = []
    for k in range(n):
        offset, nbytes = struct.unpack_from("<QQ", index, 16 * k)
        stored = zstandard.ZstdDecompressor().decompress(raw[offset : offset + nbytes])
        frames.append(zstandard.ZstdCompressor(write_content_size=False).compress(stored))
    body = b"".join(frames)
    entries, at = b"", 0
    for frame in frames:
        entries += struct.pack("<QQ", at, len(frame))
        at += len(frame)
    shard.write_bytes(body + entries + struct.pack("<I", crc32c(entries)))


def test_a_v2_order_f_chunk_in_two_gzip_members(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    path = tmp_path / "f.zarr"
    data = np.arange(24, dtype="<i4").reshape(4, 6)
    gpuzarr.create(str(path), data=data, chunks=(4, 6), order="F", zarr_format=2,
                   compressor={"id": "gzip", "level": 1}, device="cpu")  # fmt: skip
    stored = gzip.decompress((path / "0.0").read_bytes())
    (path / "0.0").write_bytes(gzip.compress(stored[:40]) + gzip.compress(stored[40:]))
    cpu, gpu = _both(path)
    np.testing.assert_array_equal(cpu, data)
    np.testing.assert_array_equal(gpu, data)


def test_a_v2_order_f_chunk_the_device_failed_on(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    emulated_gpu.device_class = _FailsFirstStream
    path = tmp_path / "f.zarr"
    data = np.arange(8 * 6, dtype="<i4").reshape(8, 6)
    gpuzarr.create(str(path), data=data, chunks=(4, 6), order="F", zarr_format=2,
                   compressor={"id": "zlib", "level": 1}, device="cpu")  # fmt: skip
    cpu, gpu = _both(path)
    np.testing.assert_array_equal(cpu, data)
    np.testing.assert_array_equal(gpu, data)
