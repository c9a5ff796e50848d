"""Small chunks read in runs (gpuzarr.backends.cpu.small_chunks): every chain and selection
that goes this way reads as NumPy, from local and in-memory stores, with missing chunks as the
fill value; a corrupt or oversized chunk raises CorruptChunkError naming its key; chains and
layouts that cannot go this way still read."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cpu import small_chunks
from gpuzarr.errors import ChunkNotFoundError, CorruptChunkError

if TYPE_CHECKING:
    from pathlib import Path

RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]
BLOSC_LZ4 = [*RAW, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}]
GZIP = [*RAW, {"name": "gzip", "configuration": {"level": 5}}]
CHAINS: dict[str, list[dict[str, Any]]] = {
    "blosc-lz4": BLOSC_LZ4,  # decoded on the calling thread alone
    "gzip": GZIP,
    "uncompressed": RAW,
    "blosc-crc32c": [*BLOSC_LZ4, {"name": "crc32c"}],  # two bytes-to-bytes codecs
    "blosc-zstd": [*RAW, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle"}}],
}
DATA = (np.arange(70 * 90, dtype=np.int32).reshape(70, 90) * 7919) % 100_003
SELECTIONS: list[Any] = [
    (slice(None), slice(None)),
    (slice(3, 61), slice(5, 77)),  # parts of the edge chunks
    (slice(None, None, 3), slice(88, 1, -2)),  # steps, reversed
    (17, slice(None)),  # a row: each chunk's part lands in a 1-d output
    (slice(None), 41),
    (slice(8, 16), slice(None)),  # whole rows of chunks
    ([2, 40, 40, 69], slice(10, 30)),
]


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The chunks of each run ``read_run`` read."""
    seen: list[int] = []
    original = small_chunks.read_run

    def recording(layout: Any, store: Any, run: Any, *args: Any) -> None:
        seen.append(len(run))
        original(layout, store, run, *args)

    monkeypatch.setattr("gpuzarr.backends.cpu.read.read_run", recording)
    return seen


def _store(kind: str, tmp_path: Path) -> Any:
    return gpuzarr.LocalStore(tmp_path / "a") if kind == "local" else gpuzarr.MemoryStore()


@pytest.mark.parametrize("kind", ["local", "memory"])
@pytest.mark.parametrize("chain", list(CHAINS))
def test_small_chunks_read_in_runs_as_numpy(tmp_path: Path, kind: str, chain: str, runs: list[int]) -> None:
    a = gpuzarr.create(_store(kind, tmp_path), shape=DATA.shape, dtype="int32", chunks=(8, 10), codecs=CHAINS[chain])
    a[...] = DATA
    for selection in SELECTIONS:
        np.testing.assert_array_equal(a[selection], DATA[selection], err_msg=str(selection))
    assert sum(runs) >= 9 * 9  # at least the whole read went this way
    # A batch of crops, and a read into a caller's buffer of another layout.
    crops = [(slice(k, k + 20), slice(k, k + 30)) for k in range(0, 50, 7)]
    for crop, got in zip(crops, a.read_batch(crops), strict=True):
        np.testing.assert_array_equal(got, DATA[crop])
    out = np.asfortranarray(np.zeros(DATA.shape, np.int32))
    a.read(..., out=out)
    np.testing.assert_array_equal(out, DATA)


@pytest.mark.parametrize("kind", ["local", "memory"])
@pytest.mark.parametrize("chain", ["blosc-lz4", "gzip", "uncompressed"])
def test_chunks_that_land_whole_in_the_output_are_decoded_there(
    tmp_path: Path, kind: str, chain: str, runs: list[int]
) -> None:
    x = np.arange(1000, dtype="<u2") * 3
    a = gpuzarr.create(_store(kind, tmp_path), shape=x.shape, dtype="uint16", chunks=(30,), codecs=CHAINS[chain])
    a[...] = x
    np.testing.assert_array_equal(a[...], x)
    np.testing.assert_array_equal(a[30:990], x[30:990])
    np.testing.assert_array_equal(a[29:31], x[29:31])
    stack = gpuzarr.create(
        _store(kind, tmp_path / "s"), shape=(40, 6, 5), dtype="uint16", chunks=(1, 6, 5), codecs=CHAINS[chain]
    )
    y = np.arange(40 * 30, dtype=np.uint16).reshape(40, 6, 5)
    stack[...] = y
    np.testing.assert_array_equal(stack[...], y)
    np.testing.assert_array_equal(stack[7], y[7])
    assert runs


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_missing_chunks_are_the_fill_value_or_refused(tmp_path: Path, kind: str, runs: list[int]) -> None:
    a = gpuzarr.create(
        _store(kind, tmp_path), shape=DATA.shape, dtype="int32", chunks=(8, 10), codecs=BLOSC_LZ4, fill_value=-5
    )
    a[20:50, 30:60] = DATA[20:50, 30:60]
    expected = np.full(DATA.shape, -5, np.int32)
    expected[20:50, 30:60] = DATA[20:50, 30:60]
    np.testing.assert_array_equal(a[...], expected)
    np.testing.assert_array_equal(a[10:60, 25:80], expected[10:60, 25:80])
    strict = gpuzarr.Array(a.store, a.path, a.metadata, fill_missing_data_reads=False)
    np.testing.assert_array_equal(strict[16:56, 30:60], expected[16:56, 30:60])
    with pytest.raises(ChunkNotFoundError, match="c/0/0"):
        strict[...]
    assert runs


def test_a_corrupt_or_oversized_chunk_is_refused_by_name(tmp_path: Path, runs: list[int]) -> None:
    a = gpuzarr.create(tmp_path / "a", shape=DATA.shape, dtype="int32", chunks=(8, 10), codecs=BLOSC_LZ4)
    a[...] = DATA
    chunk = tmp_path / "a" / "c" / "3" / "4"
    stored = chunk.read_bytes()
    chunk.write_bytes(stored[:16] + bytes(len(stored) - 16))  # its blocks zeroed
    with pytest.raises(CorruptChunkError, match=r"^c/3/4: cannot decode chunk"):
        a[...]
    limit = a.layout.chunk_pipeline.max_stored_nbytes
    assert limit is not None
    chunk.write_bytes(stored)
    os.truncate(chunk, 1 << 30)  # sparse: refused by its size, before it is read
    oversized = rf"^c/3/4: stored chunk of {1 << 30} bytes is larger than its codecs ever write \({limit}\)"
    with pytest.raises(CorruptChunkError, match=oversized):
        a[...]
    os.truncate(chunk, 0)
    with pytest.raises(CorruptChunkError, match=r"^c/3/4"):
        a[...]
    os.remove(chunk)
    np.testing.assert_array_equal(a[24:32, 40:50], np.zeros((8, 10), np.int32))
    uncompressed = gpuzarr.create(tmp_path / "u", shape=DATA.shape, dtype="int32", chunks=(8, 10), codecs=RAW)
    uncompressed[...] = DATA
    with open(tmp_path / "u" / "c" / "1" / "1", "ab") as f:
        f.write(b"x")
    longer = r"^c/1/1: stored chunk of 321 bytes is larger than its codecs ever write \(320\)"
    with pytest.raises(CorruptChunkError, match=longer):
        uncompressed[...]
    os.truncate(tmp_path / "u" / "c" / "1" / "1", 319)
    with pytest.raises(CorruptChunkError, match=r"^c/1/1: uncompressed chunk has 319 bytes, expected 320"):
        uncompressed[...]
    assert runs


def test_v2_arrays_read_in_runs(tmp_path: Path, runs: list[int]) -> None:
    compressors = [("blosc", numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE)), ("zlib", numcodecs.Zlib(1))]
    for name, compressor in compressors:
        a = gpuzarr.create(
            tmp_path / name, shape=DATA.shape, dtype="<i4", chunks=(8, 10), zarr_format=2, compressor=compressor
        )
        a[...] = DATA
        np.testing.assert_array_equal(a[...], DATA)
        np.testing.assert_array_equal(a[5:66, 1:89], DATA[5:66, 1:89])
    assert sum(runs) >= 2 * 9 * 9


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("chunks too large", {"chunks": (70, 90)}),  # 25 KiB of int32: read in runs; 64 KiB not
        ("big-endian bytes", {"codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, GZIP[1]]}),
        ("transposed", {"codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, *GZIP]}),
        ("rectilinear grid", {"chunks": [[8, 8, 124], [10, 170]]}),
        ("sharded", {"shards": (16, 30)}),
    ],
)
def test_what_does_not_go_in_runs_still_reads(
    tmp_path: Path, why: str, kwargs: dict[str, Any], runs: list[int]
) -> None:
    x = np.tile(DATA, (2, 2))[:140, :180]
    options: dict[str, Any] = {"chunks": (8, 10), "codecs": GZIP, **kwargs}
    if why == "chunks too large":
        options["chunks"] = (128, 128)
    a = gpuzarr.create(tmp_path / "a", shape=x.shape, dtype="int32", **options)
    a[...] = x
    np.testing.assert_array_equal(a[...], x)
    np.testing.assert_array_equal(a[3:131, 7:171:3], x[3:131, 7:171:3])
    assert not runs, why


@pytest.fixture
def placed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of the chunks and inner chunks ``ChunkPlacer.place`` decoded."""
    seen: list[str] = []
    original = small_chunks.ChunkPlacer.place

    def recording(self: Any, raw: Any, key: str, targets: Any) -> None:
        seen.append(key)
        original(self, raw, key, targets)

    monkeypatch.setattr(small_chunks.ChunkPlacer, "place", recording)
    return seen


@pytest.mark.parametrize("kind", ["local", "memory"])
@pytest.mark.parametrize("chain", ["blosc-lz4", "gzip", "uncompressed", "blosc-crc32c"])
def test_small_inner_chunks_of_shards_read_as_numpy(tmp_path: Path, kind: str, chain: str, placed: list[str]) -> None:
    a = gpuzarr.create(
        _store(kind, tmp_path), shape=DATA.shape, dtype="int32", chunks=(8, 10), shards=(16, 30), codecs=CHAINS[chain],
        fill_value=-1,
    )
    a[...] = DATA
    a[32:48, 30:60] = -1  # two shards of nothing but the fill value: not stored
    expected = DATA.copy()
    expected[32:48, 30:60] = -1
    for selection in SELECTIONS:
        np.testing.assert_array_equal(a[selection], expected[selection], err_msg=str(selection))
    crops = [(slice(k, k + 20), slice(k, k + 30)) for k in range(0, 50, 7)]
    for crop, got in zip(crops, a.read_batch(crops), strict=True):
        np.testing.assert_array_equal(got, expected[crop])
    if chain != "uncompressed":  # uncompressed inner chunks are read straight into the output
        assert placed


def test_a_corrupt_small_inner_chunk_is_named_with_its_shard(tmp_path: Path, placed: list[str]) -> None:
    a = gpuzarr.create(tmp_path / "a", shape=DATA.shape, dtype="int32", chunks=(8, 10), shards=(16, 30), codecs=GZIP)
    a[...] = DATA
    shard = tmp_path / "a" / "c" / "1" / "1"
    stored = bytearray(shard.read_bytes())
    stored[40:48] = bytes(8)  # inside the first inner chunk's deflate stream
    shard.write_bytes(bytes(stored))
    with pytest.raises(CorruptChunkError, match=r"^c/1/1: inner chunk \d+: cannot decode chunk"):
        a[...]
    np.testing.assert_array_equal(a[:16, :30], DATA[:16, :30])
    assert placed


def test_small_uncompressed_chunks_are_read_on_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from gpuzarr.codecs.pipeline import CodecPipeline

    threads: set[str] = set()
    decode_in = CodecPipeline.decode_in

    def spy(self: Any, raw: Any, key: str, buffer: Any) -> Any:
        threads.add(threading.current_thread().name)
        return decode_in(self, raw, key, buffer)

    monkeypatch.setattr(CodecPipeline, "decode_in", spy)
    x = np.arange(512 * 500, dtype=np.int32).reshape(512, 500)  # 3,200 chunks: a dozen runs
    a = gpuzarr.create(tmp_path / "a", shape=x.shape, dtype="int32", chunks=(8, 10), codecs=RAW)
    a[...] = x
    with gpuzarr.config.set(concurrency=2):
        np.testing.assert_array_equal(a[...], x)
    assert threads == {threading.current_thread().name}
