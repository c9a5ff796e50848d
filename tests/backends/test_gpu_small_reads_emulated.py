"""The small-read rule of the GPU reader (``gpuzarr.config`` ``gpu_small_read_chunks``): a read of
few chunks is read by the CPU engine and copied to the device in one piece; larger reads,
``strict`` reads and reads with the rule turned off take the device path. Every result is
compared with the CPU engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr import config
from gpuzarr.backends.cuda import reader as reader_module
from gpuzarr.errors import ChunkNotFoundError, CorruptChunkError

from .cuda_matrix import open_on_gpu

if TYPE_CHECKING:
    from .emulated_gpu import EmulatedGpu

DATA = (np.arange(64 * 64, dtype="<u2") * 7 % 4099).reshape(64, 64)


@pytest.fixture
def array() -> gpuzarr.Array:
    """64 zstd chunks of 8 x 8."""
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(
        store,
        shape=DATA.shape,
        dtype="<u2",
        chunks=(8, 8),
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
    )
    a[...] = DATA
    return a


def _decoded_on_device(gpu: EmulatedGpu) -> bool:
    return "assemble_chunks" in gpu.names()


def test_a_read_of_few_chunks_is_read_on_the_cpu_and_copied_once(
    emulated_gpu: EmulatedGpu, array: gpuzarr.Array
) -> None:
    with config.set(gpu_small_read_chunks=4):
        got = open_on_gpu(array)[3:13, 5:14]  # 2 x 2 chunks
    np.testing.assert_array_equal(got, DATA[3:13, 5:14])
    assert not _decoded_on_device(emulated_gpu)
    # Read into a pinned staging block, copied once on the read's own stream (after the work
    # queued there, which may still use the caller's out); the block is back in its pool.
    assert [c for c in emulated_gpu.calls() if c[0] in ("upload", "wait_for", "copy_host_to_device")] == [
        ("copy_host_to_device", 10 * 9 * 2),
    ]
    assert emulated_gpu.staging.pool(0).nin_use == 0


def test_a_read_of_more_chunks_takes_the_device_path(emulated_gpu: EmulatedGpu, array: gpuzarr.Array) -> None:
    with config.set(gpu_small_read_chunks=4):
        got = open_on_gpu(array)[3:21, 5:14]  # 3 x 2 chunks
    np.testing.assert_array_equal(got, DATA[3:21, 5:14])
    assert _decoded_on_device(emulated_gpu)
    assert "from_host" not in emulated_gpu.names()


def test_the_default_is_twice_the_cpu_concurrency(emulated_gpu: EmulatedGpu, array: gpuzarr.Array) -> None:
    with config.set(gpu_small_read_chunks=None, concurrency=2):
        assert reader_module.small_read_chunks() == 4
        np.testing.assert_array_equal(open_on_gpu(array)[0:16, 0:16], DATA[0:16, 0:16])  # 4 chunks
        assert not _decoded_on_device(emulated_gpu)
        np.testing.assert_array_equal(open_on_gpu(array)[0:16, 0:24], DATA[0:16, 0:24])  # 6 chunks
        assert _decoded_on_device(emulated_gpu)


def _array_of(codec: dict[str, object]) -> gpuzarr.Array:
    """64 chunks of 8 x 8 compressed with ``codec``."""
    a = gpuzarr.create(
        gpuzarr.MemoryStore(),
        shape=DATA.shape,
        dtype="<u2",
        chunks=(8, 8),
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, codec],
    )
    a[...] = DATA
    return a


BLOSC = {"name": "blosc", "configuration": {"cname": "zlib", "clevel": 1, "shuffle": "shuffle", "typesize": 2}}


@pytest.mark.parametrize(
    ("codec", "rounds"),
    [
        ({"name": "gzip", "configuration": {"level": 1}}, 16),
        ({"name": "numcodecs.zlib", "configuration": {"level": 1}}, 16),
        (BLOSC, 16),
        ({"name": "blosc", "configuration": {**BLOSC["configuration"], "cname": "lz4"}}, 2),  # type: ignore[dict-item]
        ({"name": "zstd"}, 2),
    ],
)
def test_reads_that_nvcomp_would_inflate_go_to_the_cpu_up_to_sixteen_rounds(
    emulated_gpu: EmulatedGpu, codec: dict[str, object], rounds: int
) -> None:
    # nvCOMP inflates each deflate stream at about 14 MB/s (37 ms for 512 KiB on an H200), where
    # a core takes 1-2 ms: the CPU pool's 16 rounds take less than one batch on the device.
    gpu_array = open_on_gpu(_array_of(codec))
    with config.set(gpu_small_read_chunks=None, concurrency=2):
        limit = 2 * rounds  # chunks: ``concurrency`` per round
        # One box inside each of the first chunks: a read of exactly that many chunks.
        boxes = [(slice(8 * (i // 8) + 1, 8 * (i // 8) + 5), slice(8 * (i % 8), 8 * (i % 8) + 4)) for i in range(64)]
        expected = np.stack([DATA[box] for box in boxes])
        np.testing.assert_array_equal(gpu_array.read_batch(boxes[:limit]), expected[:limit])
        assert not _decoded_on_device(emulated_gpu)
        np.testing.assert_array_equal(gpu_array.read_batch(boxes[: limit + 1]), expected[: limit + 1])
        assert _decoded_on_device(emulated_gpu)


@pytest.mark.parametrize("setting", [{"gpu_small_read_chunks": 0}, {"gpu_small_read_chunks": 64, "strict": True}])
def test_off_or_strict_every_read_takes_the_device_path(
    emulated_gpu: EmulatedGpu, array: gpuzarr.Array, setting: dict[str, object]
) -> None:
    with config.set(**setting):  # type: ignore[arg-type]
        got = open_on_gpu(array)[3:5, 5:7]  # one chunk
    np.testing.assert_array_equal(got, DATA[3:5, 5:7])
    assert _decoded_on_device(emulated_gpu)


def test_a_read_of_many_bytes_takes_the_device_path(
    emulated_gpu: EmulatedGpu, array: gpuzarr.Array, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "SMALL_READ_MAX_BYTES", 8 * 8 * 2 * 3)  # three chunks' bytes
    with config.set(gpu_small_read_chunks=64):
        np.testing.assert_array_equal(open_on_gpu(array)[0:8, 0:24], DATA[0:8, 0:24])
        assert not _decoded_on_device(emulated_gpu)
        np.testing.assert_array_equal(open_on_gpu(array)[0:8, 0:32], DATA[0:8, 0:32])
        assert _decoded_on_device(emulated_gpu)


def test_a_batch_whose_result_is_large_takes_the_device_path(
    emulated_gpu: EmulatedGpu, array: gpuzarr.Array, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many crops of one chunk: one chunk's bytes, but a result of many."""
    monkeypatch.setattr(reader_module, "SMALL_READ_MAX_BYTES", 300)
    boxes = [(slice(1, 7), slice(2, 8))] * 6  # 6 x 72 bytes from one 128-byte chunk
    with config.set(gpu_small_read_chunks=64):
        np.testing.assert_array_equal(open_on_gpu(array).read_batch(boxes[:3]), np.stack([DATA[1:7, 2:8]] * 3))
        assert not _decoded_on_device(emulated_gpu)
        np.testing.assert_array_equal(open_on_gpu(array).read_batch(boxes), np.stack([DATA[1:7, 2:8]] * 6))
        assert _decoded_on_device(emulated_gpu)


def test_missing_chunks_are_filled_or_refused_alike(emulated_gpu: EmulatedGpu, array: gpuzarr.Array) -> None:
    array.store.erase("c/1/1")
    expected = DATA[6:14, 6:14].copy()
    expected[2:, 2:] = array.metadata.fill_value
    with config.set(gpu_small_read_chunks=8):
        np.testing.assert_array_equal(open_on_gpu(array)[6:14, 6:14], expected)
        strict_missing = gpuzarr.Array(
            array.store, array.path, array.metadata, device="gpu", fill_missing_data_reads=False
        )
        with pytest.raises(ChunkNotFoundError, match="c/1/1"):
            strict_missing[6:14, 6:14]
    assert not _decoded_on_device(emulated_gpu)
    assert emulated_gpu.staging.pool(0).nin_use == 0


def test_out_and_read_batch_are_filled_alike(emulated_gpu: EmulatedGpu, array: gpuzarr.Array) -> None:
    gpu_array = open_on_gpu(array)
    with config.set(gpu_small_read_chunks=8):
        out = np.zeros((10, 9), "<u2")
        assert gpu_array.read((slice(3, 13), slice(5, 14)), out=out) is out
        np.testing.assert_array_equal(out, DATA[3:13, 5:14])
        batch = gpu_array.read_batch([(slice(0, 4), slice(0, 4)), (slice(9, 13), slice(1, 5))])
    np.testing.assert_array_equal(batch, np.stack([DATA[0:4, 0:4], DATA[9:13, 1:5]]))
    assert not _decoded_on_device(emulated_gpu)


def test_a_corrupt_chunk_names_its_key(emulated_gpu: EmulatedGpu, array: gpuzarr.Array) -> None:
    array.store.set("c/1/1", b"\x28\xb5\x2f\xfd" + bytes(20))
    with config.set(gpu_small_read_chunks=8), pytest.raises(CorruptChunkError, match="c/1/1"):
        open_on_gpu(array)[8:16, 8:16]
