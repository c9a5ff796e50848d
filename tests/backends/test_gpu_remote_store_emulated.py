"""GPU reads (emulated device, see emulated_gpu.py) from a store that is not a LocalStore, as a
remote store is: requests run on the prefetch thread with the store's I/O concurrency, inner
chunks of a shard come as ranges (never the whole shard for a few chunks), and each batch
crosses to the device in one upload of its pinned staging buffer; a CachingStore in front
serves a repeated read without a request."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import gpuzarr
from gpuzarr import config
from gpuzarr.store.base import Buffer, ByteRange, Store, validate_key, validate_prefix
from gpuzarr.store.caching import CachingStore

from .cuda_matrix import assert_bitwise_equal, cpu_result, make_array

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from .emulated_gpu import EmulatedGpu


class RequestStore(Store):
    """Keys in a dict, read as a remote store's client would: each request gives new bytes.

    Records ``(method, key, ranges, bytes returned, thread name)`` for every read."""

    io_concurrency = 4
    #: seconds each request of a chunk waits, as a network round trip does (0: none)
    latency = 0.0

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, bytes] = {}
        self.reads: list[tuple[str, str, list[ByteRange | None], int, str]] = []
        self._lock = threading.Lock()

    def _record(self, method: str, key: str, ranges: list[ByteRange | None], parts: Sequence[Buffer]) -> None:
        with self._lock:
            nbytes = sum(len(p) for p in parts)
            self.reads.append((method, key, ranges, nbytes, threading.current_thread().name))

    def _part(self, value: bytes, byte_range: ByteRange | None) -> bytes:
        if byte_range is None:
            return bytes(value)
        start, stop = byte_range.resolve(len(value))
        return value[start:stop]

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        if self.latency and not key.endswith("zarr.json"):
            time.sleep(self.latency)
        value = self.data.get(validate_key(key))
        if value is None:
            self._record("get", key, [byte_range], [])
            return None
        part = self._part(value, byte_range)
        self._record("get", key, [byte_range], [part])
        return part

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        value = self.data.get(validate_key(key))
        parts = [] if value is None else [self._part(value, r) for r in ranges]
        self._record("get_ranges", key, list(ranges), parts)
        return None if value is None else list(parts)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        return iter(sorted(k for k in list(self.data) if k.startswith(prefix)))

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        self.data[validate_key(key)] = bytes(memoryview(value).cast("B"))

    def erase(self, key: str) -> None:
        self._check_writable()
        self.data.pop(validate_key(key), None)

    def chunk_reads(self) -> list[tuple[str, str, list[ByteRange | None], int, str]]:
        return [r for r in self.reads if not r[1].endswith(("zarr.json", ".zarray", ".zattrs", ".zgroup"))]


def on_gpu(store: Store) -> gpuzarr.Array:
    array = gpuzarr.open(store, device="gpu")
    assert isinstance(array, gpuzarr.Array)
    return array


def device_calls(gpu: EmulatedGpu) -> list[str]:
    return [name for name, _ in gpu.devices[-1].calls]


def test_inner_chunks_come_as_ranges_and_one_upload_per_batch(emulated_gpu: EmulatedGpu) -> None:
    store = RequestStore()
    array = make_array("v3-sharded-zstd-crc32c", store)
    crop = (slice(2, 12), slice(3, 20))  # one inner chunk of four of shard c/0/0
    expected = cpu_result(array, crop)
    store.reads.clear()
    assert_bitwise_equal(on_gpu(store)[crop], expected)
    reads = store.chunk_reads()
    assert {key for _, key, _, _, _ in reads} == {"c/0/0"}
    assert all(r is not None for _, _, ranges, _, _ in reads for r in ranges)  # never the whole shard
    # The index (a suffix), then the one inner chunk's range: fewer bytes than the shard.
    assert [(method, len(ranges)) for method, _, ranges, _, _ in reads] == [("get", 1), ("get_ranges", 1)]
    assert reads[0][2][0].offset < 0  # type: ignore[union-attr]
    assert sum(nbytes for *_, nbytes, _ in reads) < len(store.data["c/0/0"])
    assert device_calls(emulated_gpu).count("upload") == 1


def test_batches_are_read_on_io_threads_and_uploaded_once_each(emulated_gpu: EmulatedGpu) -> None:
    for name in ("v3-sharded-zstd-crc32c", "v3-zstd-f4", "v3-blosc-lz4-shuffle-u2"):
        store = RequestStore()
        array = make_array(name, store)
        expected = cpu_result(array, Ellipsis)
        store.reads.clear()
        with config.set(gpu_batch_bytes=3000):  # several batches: each prepared ahead
            assert_bitwise_equal(on_gpu(store)[...], expected)
        threads = {thread for *_, thread in store.chunk_reads()}
        # Every request ran while a helper thread prepared its batch, none on the caller's.
        assert threads and all(t.startswith(("gpuzarr-prefetch", "gpuzarr-io")) for t in threads), (name, threads)
        names = device_calls(emulated_gpu)
        # At most one upload per batch (none for a batch of missing chunks only).
        assert 2 <= names.count("upload") <= names.count("assemble_chunks"), name
        if name != "v3-sharded-zstd-crc32c":  # arrays without missing chunks: exactly one
            assert names.count("upload") == names.count("assemble_chunks"), name
        if name == "v3-zstd-f4":  # whole chunks: one request each, nothing read twice
            keys = [key for _, key, _, _, _ in store.chunk_reads()]
            assert len(keys) == len(set(keys)) == len(store.data) - 1  # every chunk key but zarr.json


def test_requests_run_on_the_stores_io_threads(emulated_gpu: EmulatedGpu) -> None:
    store = RequestStore()
    array = make_array("v3-zstd-f4", store)
    expected = cpu_result(array, Ellipsis)
    store.reads.clear()
    store.latency = 0.02  # requests that wait, so that the I/O threads take their share
    assert_bitwise_equal(on_gpu(store)[...], expected)  # one batch, prepared by the caller
    threads = {thread for *_, thread in store.chunk_reads()}
    # The caller works too (run_tasks); the others are I/O threads, more than the CPU pool has.
    io_threads = {t for t in threads if t.startswith("gpuzarr-io")}
    assert len(io_threads) >= 2 and threads <= io_threads | {threading.current_thread().name}, threads
    # A store that names no concurrency is read on the CPU pool, as before.
    RequestStore.io_concurrency = None  # type: ignore[assignment]
    try:
        store.reads.clear()
        assert_bitwise_equal(on_gpu(store)[...], expected)
        assert not any(t.startswith("gpuzarr-io") for *_, t in store.chunk_reads())
    finally:
        RequestStore.io_concurrency = 4


def test_a_caching_store_serves_a_repeated_gpu_read(emulated_gpu: EmulatedGpu) -> None:
    remote = RequestStore()
    make_array("v3-sharded-zstd-crc32c", remote)
    store = CachingStore(remote, 1 << 20)
    array = on_gpu(store)
    crops = [(slice(2, 12), slice(3, 20)), (slice(30, 45), slice(40, 61)), (slice(0, 45), slice(10, 30))]
    expected = [cpu_result(array, crop) for crop in crops]
    for crop, want in zip(crops, expected, strict=True):
        assert_bitwise_equal(array[crop], want)
    remote.reads.clear()
    for crop, want in zip(crops, expected, strict=True):
        assert_bitwise_equal(array[crop], want)
    assert remote.chunk_reads() == []
    assert store.stats().hits > 0


def test_writes_between_gpu_reads_are_seen(emulated_gpu: EmulatedGpu) -> None:
    store = CachingStore(RequestStore(), 1 << 20)
    array = make_array("v3-sharded-zstd-crc32c", store)
    gpu = on_gpu(store)
    crop = (slice(0, 20), slice(0, 30))
    assert_bitwise_equal(gpu[crop], cpu_result(array, crop))
    array[0:16, 0:24] = np.uint16(4321)
    got: Any = gpu[crop]
    assert_bitwise_equal(got, cpu_result(array, crop))
    assert np.all(np.asarray(got)[0:16, 0:24] == 4321)
