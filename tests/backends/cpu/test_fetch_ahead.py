"""Reads of a few local chunks fetched on the calling thread and decoded on the workers
(gpuzarr.backends.cpu.fetch_ahead): crops equal NumPy for every codec and chunk layout, parts
and whole chunks, missing chunks and edge chunks; only such reads go this way; an error of a
fetch or of a decode is raised naming the key, stops the read and leaves no worker behind; and
reads made inside the pool's own workers finish."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr import buffers, config
from gpuzarr.backends.cpu import fetch_ahead
from gpuzarr.errors import ChunkNotFoundError, CorruptChunkError
from gpuzarr.store import LocalStore

if TYPE_CHECKING:
    from pathlib import Path

RNG = np.random.default_rng(11)
DATA = (np.cumsum(RNG.integers(-3, 4, size=100 * 70 * 60)) % 4096).astype("<u2").reshape(100, 70, 60)
CHUNKS = (32, 32, 32)
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 8192}}
CODECS: dict[str, list[dict[str, Any]]] = {
    "blosc": [{"name": "bytes", "configuration": {"endian": "little"}}, BLOSC],
    "zstd": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}],
    "gzip": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}],
    "big-endian blosc": [{"name": "bytes", "configuration": {"endian": "big"}}, BLOSC],
    "transposed zstd": [
        {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1}},
    ],
}
CROPS = [
    (slice(5, 60), slice(3, 50), slice(10, 58)),  # 2 x 2 x 2 chunks, parts of each
    (slice(0, 64), slice(0, 32), slice(0, 32)),  # two whole chunks, each decoded in place
    (slice(90, 100), slice(60, 70), slice(0, 60)),  # edge chunks
    (slice(0, 100), slice(31, 33), slice(29, 31)),  # a column through 4 x 2 x 1 chunks
    (slice(17, 18), slice(5, 6), slice(7, 8)),  # one element: one chunk, read inline
]


@pytest.fixture
def fetched_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of chunks of each read that went through ``read_fetching_ahead``."""
    seen: list[int] = []
    original = fetch_ahead.read_fetching_ahead

    def recording(layout: Any, groups: list[Any], **kwargs: Any) -> None:
        seen.append(len(groups))
        original(layout, groups, **kwargs)

    monkeypatch.setattr("gpuzarr.backends.cpu.read.read_fetching_ahead", recording)
    return seen


def local_array(tmp_path: Path, codecs: list[dict[str, Any]], **kwargs: Any) -> gpuzarr.Array:
    a = gpuzarr.create(
        LocalStore(tmp_path / "a"), shape=DATA.shape, dtype="<u2", chunks=CHUNKS, codecs=codecs, **kwargs
    )
    a[...] = DATA
    return gpuzarr.open(str(tmp_path / "a"), device="cpu")


@pytest.mark.parametrize("codecs", list(CODECS), ids=list(CODECS))
def test_crops_equal_numpy(tmp_path: Path, codecs: str, fetched_reads: list[int]) -> None:
    a = local_array(tmp_path, CODECS[codecs])
    with config.set(concurrency=2):
        for crop in CROPS:
            np.testing.assert_array_equal(a[crop], DATA[crop])
    # Every crop of several chunks of a codec that reads in part (Blosc); the others are read
    # the usual way.
    assert fetched_reads == ([8, 2, 8, 8] if codecs == "blosc" else [])


def test_a_v2_array_and_missing_chunks_read_as_the_fill_value(tmp_path: Path, fetched_reads: list[int]) -> None:
    compressor = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 8192}
    a = gpuzarr.create(
        LocalStore(tmp_path / "v2"),
        shape=DATA.shape,
        dtype="<u2",
        chunks=CHUNKS,
        zarr_format=2,
        compressor=compressor,
        fill_value=7,
    )
    expected = np.full(DATA.shape, 7, "<u2")
    a[:32] = DATA[:32]  # chunks below row 32 are never written
    expected[:32] = DATA[:32]
    with config.set(concurrency=2):
        for crop in CROPS:
            np.testing.assert_array_equal(a[crop], expected[crop])
    assert fetched_reads


def test_only_reads_of_a_few_chunks_with_workers_to_decode_them(
    tmp_path: Path, fetched_reads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    with config.set(concurrency=1):
        np.testing.assert_array_equal(a[CROPS[0]], DATA[CROPS[0]])
    assert fetched_reads == []
    monkeypatch.setattr(fetch_ahead, "MAX_CHUNKS", 7)
    with config.set(concurrency=2):
        np.testing.assert_array_equal(a[CROPS[0]], DATA[CROPS[0]])  # 8 chunks
        np.testing.assert_array_equal(a[CROPS[1]], DATA[CROPS[1]])  # 2 chunks
    assert fetched_reads == [2]
    in_memory = gpuzarr.create(
        gpuzarr.MemoryStore(), shape=DATA.shape, dtype="<u2", chunks=CHUNKS, codecs=CODECS["blosc"]
    )
    in_memory[...] = DATA
    with config.set(concurrency=2):
        np.testing.assert_array_equal(in_memory[CROPS[1]], DATA[CROPS[1]])
    assert fetched_reads == [2]  # memory stores read the usual way


def test_two_fetch_buffers_serve_many_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    monkeypatch.setattr(fetch_ahead, "FETCH_BUFFER_BUDGET", 1)
    with config.set(concurrency=4):
        for crop in CROPS:
            np.testing.assert_array_equal(a[crop], DATA[crop])


def test_buffers_grown_by_earlier_reads_are_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    with config.set(concurrency=4):
        np.testing.assert_array_equal(a[CROPS[0]], DATA[CROPS[0]])  # 8 chunks: 8 fetch buffers
    names = [f"fetch {slot}" for slot in range(8)]
    held = buffers.growable_nbytes(names)
    assert held >= 8 * 64 * 1024
    # A budget the 8 buffers exceed: the next read, which uses 2 of them, lets go of all 8.
    monkeypatch.setattr(fetch_ahead, "FETCH_BUFFER_BUDGET", 0)
    monkeypatch.setattr(fetch_ahead, "MAX_CHUNK_NBYTES", held // 2)
    with config.set(concurrency=2):
        np.testing.assert_array_equal(a[CROPS[1]], DATA[CROPS[1]])  # 2 chunks
    assert buffers.growable_nbytes(names[2:]) == 0
    assert buffers.growable_nbytes(names[:2]) > 0  # made again for this read


def _corrupt(tmp_path: Path, key: str) -> None:
    path = tmp_path / "a" / key
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
    raw[:16] = bytes(16)
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("key", ["c/0/0/0", "c/1/1/1"], ids=["first fetched", "last fetched"])
def test_a_corrupt_chunk_is_named_and_stops_the_read(tmp_path: Path, key: str) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    _corrupt(tmp_path, key)
    before = threading.active_count()
    with config.set(concurrency=2), pytest.raises(CorruptChunkError, match=key):
        a[CROPS[0]]
    with config.set(concurrency=2):  # the pool's workers are free for the next read
        np.testing.assert_array_equal(a[CROPS[2]], DATA[CROPS[2]])
    assert threading.active_count() <= before + 2  # at most the pool's own threads, started once


def test_a_missing_chunk_of_a_strict_read_is_named(tmp_path: Path) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    (tmp_path / "a" / "c" / "0" / "1" / "1").unlink()
    strict = gpuzarr.Array(a.store, a.path, a.metadata, device="cpu", fill_missing_data_reads=False)
    with config.set(concurrency=2), pytest.raises(ChunkNotFoundError, match="c/0/1/1"):
        strict[CROPS[0]]


def test_an_error_while_fetching_stops_the_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    opened: list[str] = []
    open_reader = LocalStore.open_reader

    def failing(self: LocalStore, key: str) -> Any:
        opened.append(key)
        if len(opened) == 3:
            raise OSError(5, "input/output error", key)
        return open_reader(self, key)

    monkeypatch.setattr(LocalStore, "open_reader", failing)
    with config.set(concurrency=2), pytest.raises(OSError, match="input/output error"):
        a[CROPS[0]]
    assert len(opened) == 3  # nothing fetched after the failure
    monkeypatch.setattr(LocalStore, "open_reader", open_reader)
    with config.set(concurrency=2):
        np.testing.assert_array_equal(a[CROPS[0]], DATA[CROPS[0]])


def test_reads_inside_the_pools_own_workers_finish(tmp_path: Path, fetched_reads: list[int]) -> None:
    a = local_array(tmp_path, CODECS["blosc"])
    with config.set(concurrency=2):
        pool = config.thread_pool()
        # Every worker of the pool runs a read, whose own decoding workers cannot start.
        futures = [pool.submit(lambda crop=crop: a[crop]) for crop in CROPS[:4] * 2]
        _, not_done = wait(futures, timeout=60)
        assert not not_done
        for future, crop in zip(futures, CROPS[:4] * 2, strict=True):
            np.testing.assert_array_equal(future.result(), DATA[crop])
    assert len(fetched_reads) == 8


def test_a_worker_that_cannot_be_started_stops_the_read_and_leaves_none_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit fails where another thread replaced or shut down the pool meanwhile: the read
    raises, and the workers it did start are stopped (none left waiting for chunks)."""
    a = local_array(tmp_path, CODECS["blosc"])

    class Failing(ThreadPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            if len(started) == 1:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = super().submit(*args, **kwargs)
            started.append(future)
            return future

    started: list[Any] = []
    pool = Failing(3)
    monkeypatch.setattr(config, "thread_pool", lambda: pool)
    try:
        with config.set(concurrency=3), pytest.raises(RuntimeError, match="after shutdown"):
            a[CROPS[0]]
        assert len(started) == 1
        started[0].result(timeout=10)  # the worker started has stopped
    finally:
        pool.shutdown(wait=True)
