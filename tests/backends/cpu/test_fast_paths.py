"""The read engine's fast paths give the same results as the general path, and fail safely."""

from __future__ import annotations

import threading
from typing import Any

import numcodecs
import numpy as np
import pytest

import gpuzarr
from gpuzarr import buffers
from gpuzarr.backends.cpu import placement, small_chunks
from gpuzarr.backends.cpu import read as read_module
from gpuzarr.codecs import zstd as zstd_module
from gpuzarr.codecs.pipeline import CodecPipeline
from gpuzarr.errors import CorruptChunkError
from gpuzarr.parallel import each_as_completed, run_tasks

RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]
ZSTD = [*RAW, {"name": "zstd", "configuration": {"level": 1}}]


class CountingStore(gpuzarr.MemoryStore):
    """Counts reads of each key."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().get_into(key, buffer_for, start, length)


def constant_or_noise(content: str, seed: int) -> np.ndarray[Any, Any]:
    """64 chunks of (1, 32, 32) uint32 (4 KiB decoded): each constant, stored in a few bytes, or
    noise, stored in about 4 KiB."""
    if content == "constant":
        return np.repeat(np.arange(1, 65, dtype=np.uint32), 32 * 32).reshape(64, 32, 32)
    return np.random.default_rng(seed).integers(0, 2**32, (64, 32, 32), dtype=np.uint32)


def counting_pool(module: Any, into: list[int]) -> Any:
    """``module.run_coding_tasks``, appending to ``into`` how many items each call hands the pool."""
    original = module.run_coding_tasks

    def counted(pipeline, func, items, *rest, **kw):  # type: ignore[no-untyped-def]
        into.append(len(items))
        return original(pipeline, func, items, *rest, **kw)

    return counted


@pytest.mark.parametrize("codecs", [RAW, ZSTD], ids=["raw", "zstd"])
def test_image_stack_reads_straight_into_output(store, codecs, monkeypatch) -> None:
    # (1, H, W) chunks of a (N, H, W) stack land whole and contiguous in a full read. (Chunks
    # small enough to be decoded a run at a time are not: see the test after this one.)
    monkeypatch.setattr(zstd_module, "MANY_FRAMES_NBYTES", 0)
    monkeypatch.setattr(small_chunks, "SMALL_CHUNK_NBYTES", 0)  # the path of larger chunks
    x = np.random.default_rng(0).integers(0, 2**16, (6, 16, 12), dtype=np.uint16)
    a = gpuzarr.create(store, shape=x.shape, dtype="uint16", chunks=(1, 16, 12), codecs=codecs)
    a[...] = x
    taken: list[str] = []  # chunks decoded or read straight into the output
    scratch: list[str] = []
    raw_direct = read_module._read_uncompressed_direct
    decode_scratch = CodecPipeline.decode_scratch

    def spy_raw(layout, pipeline, store, key, *rest):  # type: ignore[no-untyped-def]
        taken.append(key)
        return raw_direct(layout, pipeline, store, key, *rest)

    def spy_decode_into(self, raw, key, out, out_selection, chunk_selection, direct=False):  # type: ignore[no-untyped-def]
        if direct:
            taken.append(key)
        return decode_into(self, raw, key, out, out_selection, chunk_selection, direct)

    def spy_scratch(self, raw, key):  # type: ignore[no-untyped-def]
        scratch.append(key)
        return decode_scratch(self, raw, key)

    decode_into = CodecPipeline.decode_into
    monkeypatch.setattr(read_module, "_read_uncompressed_direct", spy_raw)
    monkeypatch.setattr(CodecPipeline, "decode_into", spy_decode_into)
    monkeypatch.setattr(CodecPipeline, "decode_scratch", spy_scratch)
    np.testing.assert_array_equal(a[...], x)
    np.testing.assert_array_equal(a[2:5], x[2:5])
    out = np.full(x.shape, 7, dtype=np.uint16)
    a.read(..., out=out)
    np.testing.assert_array_equal(out, x)
    # Every chunk of all three reads went straight into the output: no scratch decode.
    assert len(taken) == 6 + 3 + 6 and not scratch


def test_small_chunks_are_decoded_a_run_at_a_time(store, monkeypatch) -> None:
    """Small zstd chunks of a local or in-memory store are read a run a task and decoded by one
    call each run (the first run of a pass, on the calling thread, one call a chunk; none
    decoded the usual way, into the output or a scratch buffer); absent chunks read as the
    fill value among them, and a corrupt one names its key."""
    # Noise, 1.5 KiB a chunk: more than ALONE_STORED_NBYTES stored, so the pool takes runs.
    x = np.random.default_rng(1).integers(0, 2**16, (300, 32, 24), dtype=np.uint16)
    a = gpuzarr.create(store, shape=x.shape, dtype="uint16", chunks=(1, 32, 24), codecs=ZSTD, fill_value=3)
    a[...] = x
    a[7] = 3  # chunk c/7/0/0 holds only the fill value: not stored
    x[7] = 3
    runs: list[int] = []
    each: list[int] = []
    alone: list[str] = []
    decode_many = CodecPipeline.decode_many
    decode_one_of_many = CodecPipeline.decode_one_of_many
    decode_into = CodecPipeline.decode_into
    decode_scratch = CodecPipeline.decode_scratch

    def spy_many(self, raws):  # type: ignore[no-untyped-def]
        runs.append(len(raws))
        return decode_many(self, raws)

    def spy_each(self, raw):  # type: ignore[no-untyped-def]
        each.append(1)
        return decode_one_of_many(self, raw)

    def spy_into(self, raw, key, *rest, **kw):  # type: ignore[no-untyped-def]
        alone.append(key)
        return decode_into(self, raw, key, *rest, **kw)

    def spy_scratch(self, raw, key):  # type: ignore[no-untyped-def]
        alone.append(key)
        return decode_scratch(self, raw, key)

    monkeypatch.setattr(CodecPipeline, "decode_many", spy_many)
    monkeypatch.setattr(CodecPipeline, "decode_one_of_many", spy_each)
    monkeypatch.setattr(CodecPipeline, "decode_into", spy_into)
    monkeypatch.setattr(CodecPipeline, "decode_scratch", spy_scratch)
    with gpuzarr.config.set(concurrency=2):
        np.testing.assert_array_equal(a[...], x)
        np.testing.assert_array_equal(a[3:250, 2:9, 5:], x[3:250, 2:9, 5:])
    # chunk 7 is not stored; runs of 64 chunks of 1.5 KiB
    assert not alone and sum(runs) + len(each) == 299 + 246 and max(runs) > 1 and 0 < len(each) <= 2 * 64
    key = "c/9/0/0"
    store.set(key, bytes(store.get(key)) + b"junk")  # more than its frame: refused, alone
    with pytest.raises(CorruptChunkError) as caught:
        a[...]
    assert caught.value.key == key and alone


@pytest.mark.parametrize(
    ("content", "alone"),
    [("constant", True), ("noise", False)],
    ids=["stored-in-a-few-bytes", "stored-in-kilobytes"],
)
def test_runs_of_chunks_stored_in_a_few_bytes_are_read_on_the_calling_thread(store, content, alone) -> None:
    """Small zstd chunks that compress to under ALONE_STORED_NBYTES each (here 16 bytes of a
    constant 4 KiB) are read run after run on the calling thread: the Python around each is
    most of its time, which two threads only hand back and forth. Chunks of noise (about 4 KiB
    stored each) go to the pool after the first run."""
    x = constant_or_noise(content, seed=2)
    a = gpuzarr.create(store, shape=x.shape, dtype="uint32", chunks=(1, 32, 32), codecs=ZSTD)
    a[...] = x
    threads: list[str] = []
    pooled: list[int] = []  # the runs each pass handed to the pool
    together: list[int] = []  # the chunks decoded a run in one call
    read_run = read_module._read_chunk_run
    decode_many = CodecPipeline.decode_many

    def spy_many(self, raws):  # type: ignore[no-untyped-def]
        together.append(len(raws))
        return decode_many(self, raws)

    def spy(*args):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return read_run(*args)

    with pytest.MonkeyPatch.context() as mp, gpuzarr.config.set(concurrency=2):
        mp.setattr(read_module, "_read_chunk_run", spy)
        mp.setattr(read_module, "run_coding_tasks", counting_pool(read_module, pooled))
        mp.setattr(CodecPipeline, "decode_many", spy_many)
        np.testing.assert_array_equal(a[...], x)
        np.testing.assert_array_equal(a[3:61, 1:], x[3:61, 1:])
    assert len(threads) > 4  # several runs a read
    here = threading.current_thread().name
    assert threads[0] == here
    if alone:  # each chunk decoded on its own, let go of before the next
        assert set(threads) == {here} and not pooled and not together
    else:  # every run but each pass's first was handed to the pool, and decoded in one call
        assert len(pooled) == 2 and sum(pooled) == len(threads) - 2 and len(together) == sum(pooled)
    # A chunk that is no lone frame of its size, in a later run: named, whichever thread read it.
    key = "c/40/0/0"
    store.set(key, bytes(store.get(key)) + b"junk")
    with pytest.raises(CorruptChunkError) as caught, gpuzarr.config.set(concurrency=2):
        a[...]
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("content", "alone"),
    [("constant", True), ("noise", False)],
    ids=["stored-in-a-few-bytes", "stored-in-kilobytes"],
)
def test_chunks_stored_in_a_few_bytes_are_written_on_the_calling_thread(store, content, alone) -> None:
    """Whole writes of small zstd chunks: the first run is written on the calling thread, and
    the rest too where its chunks were stored in under ALONE_STORED_NBYTES each; chunks of noise
    go to the pool after it. What is written reads back either way."""
    from gpuzarr.backends.cpu import write as write_module

    x = constant_or_noise(content, seed=4)
    a = gpuzarr.create(store, shape=x.shape, dtype="uint32", chunks=(1, 32, 32), codecs=ZSTD)
    threads: set[str] = set()
    pooled: list[int] = []
    set_value = type(a.store).set

    def spy_set(self, key, value):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        return set_value(self, key, value)

    with pytest.MonkeyPatch.context() as mp, gpuzarr.config.set(concurrency=2):
        mp.setattr(type(a.store), "set", spy_set)
        mp.setattr(write_module, "run_coding_tasks", counting_pool(write_module, pooled))
        a[...] = x
    np.testing.assert_array_equal(a[...], x)
    if alone:
        assert threads == {threading.current_thread().name} and not pooled
    else:  # all but the first run (at least 96 KiB of chunks) went to the pool
        assert len(pooled) == 1 and 0 < pooled[0] <= 64 - 24


def test_a_pass_on_the_calling_thread_hands_the_rest_to_the_pool_once_chunks_take_kilobytes(store) -> None:
    """Chunks constant at first and noise after (an image with a plain margin): the runs of
    constant chunks are read and written on the calling thread, and the pool takes the runs
    after the first one whose chunks take kilobytes. Runs are of 24 chunks of 4 KiB here."""
    from gpuzarr.backends.cpu import write as write_module

    x = np.random.default_rng(5).integers(0, 2**32, (64, 32, 32), dtype=np.uint32)
    x[:32] = 7  # chunks 0-31 constant: the first run, and a third of the second
    a = gpuzarr.create(store, shape=x.shape, dtype="uint32", chunks=(1, 32, 32), codecs=ZSTD)
    pooled: list[int] = []
    with pytest.MonkeyPatch.context() as mp, gpuzarr.config.set(concurrency=2):
        mp.setattr(write_module, "run_coding_tasks", counting_pool(write_module, pooled))
        mp.setattr(read_module, "run_coding_tasks", counting_pool(read_module, pooled))
        a[...] = x
        assert pooled == [64 - 48]  # the two first runs written here
        np.testing.assert_array_equal(a[...], x)
        assert pooled == [64 - 48, 1]  # the third run of 24 read by the pool


@pytest.mark.parametrize(
    ("content", "alone"),
    [("constant", True), ("noise", False)],
    ids=["stored-in-a-few-bytes", "stored-in-kilobytes"],
)
def test_inner_chunks_stored_in_a_few_bytes_are_read_on_the_calling_thread(tmp_path, content, alone) -> None:
    """Small zstd inner chunks of shards that take under ALONE_STORED_NBYTES each by their
    shard's index are read on the calling thread, each decoded on its own; those of noise go
    to the pool, a run decoded in one call. A corrupt one is named with its shard either way."""
    x = constant_or_noise(content, seed=3)
    a = gpuzarr.create(
        tmp_path / "a", shape=x.shape, dtype="uint32", chunks=(1, 32, 32), shards=(32, 32, 32), codecs=ZSTD
    )
    a[...] = x
    threads: set[str] = set()
    together: list[int] = []
    each: list[int] = []
    decode_many = CodecPipeline.decode_many
    decode_one_of_many = CodecPipeline.decode_one_of_many

    def spy_many(self, raws):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        together.append(len(raws))
        return decode_many(self, raws)

    def spy_each(self, raw):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        each.append(1)
        return decode_one_of_many(self, raw)

    with pytest.MonkeyPatch.context() as mp, gpuzarr.config.set(concurrency=2):
        mp.setattr(CodecPipeline, "decode_many", spy_many)
        mp.setattr(CodecPipeline, "decode_one_of_many", spy_each)
        np.testing.assert_array_equal(a[...], x)
        np.testing.assert_array_equal(a[3:61, 1:], x[3:61, 1:])
    if alone:
        assert threads == {threading.current_thread().name} and not together and len(each) == 64 + 58
    else:
        assert not each and sum(together) == 64 + 58
    shard = tmp_path / "a" / "c" / "1" / "0" / "0"
    stored = bytearray(shard.read_bytes())
    stored[0:4] = b"\x00\x01\x02\x03"  # the first inner chunk's magic number
    shard.write_bytes(bytes(stored))
    with pytest.raises(CorruptChunkError, match=r"^c/1/0/0: inner chunk \d+"), gpuzarr.config.set(concurrency=2):
        a[...]


@pytest.mark.parametrize("codecs", [RAW, ZSTD], ids=["raw", "zstd"])
def test_short_chunk_is_corrupt_even_on_the_direct_path(codecs) -> None:
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(store, shape=(2, 8, 8), dtype="uint16", chunks=(1, 8, 8), codecs=codecs)
    a[...] = 1
    short = np.ones((1, 8, 7), dtype=np.uint16).tobytes()
    store.data["c/1/0/0"] = short if codecs is RAW else numcodecs.Zstd(1).encode(short)
    with pytest.raises(CorruptChunkError) as info:
        a[...]
    assert info.value.key == "c/1/0/0"


def test_read_batch_reads_each_shared_chunk_once() -> None:
    store = CountingStore()
    x = np.arange(32 * 32, dtype=np.int32).reshape(32, 32)
    a = gpuzarr.create(store, shape=x.shape, dtype="int32", chunks=(16, 16), codecs=ZSTD)
    a[...] = x
    store.reads.clear()
    crops = [np.s_[0:8, 0:8], np.s_[4:12, 2:10], np.s_[8:16, 8:16], np.s_[10:18, 10:18]]
    batch = a.read_batch(crops)
    for got, sel in zip(batch, crops, strict=True):
        np.testing.assert_array_equal(got, x[sel])
    assert store.reads == {"c/0/0": 1, "c/0/1": 1, "c/1/0": 1, "c/1/1": 1}


def test_aligned_buffers_start_on_a_page() -> None:
    for shape in [(7,), (3, 5), (64, 64, 64)]:
        buf = buffers.aligned_empty(shape, np.uint16)
        assert buf.shape == shape and buf.ctypes.data % buffers.PAGE == 0 and buf.flags.c_contiguous
    assert buffers.scratch(1000, "t").ctypes.data % buffers.PAGE == 0
    assert buffers.growable(10, "t").size == 10


def test_run_tasks_keeps_order_and_raises_the_first_error() -> None:
    gpuzarr.config.set(concurrency=3)
    try:
        assert run_tasks(lambda v: v * v, list(range(100))) == [v * v for v in range(100)]

        def boom(v: int) -> int:
            if v == 57:
                raise KeyError(v)
            return v

        with pytest.raises(KeyError):
            run_tasks(boom, list(range(100)))
    finally:
        gpuzarr.config.set(concurrency=None)


def test_each_as_completed_hands_over_each_result_while_others_still_run() -> None:
    # Call 0 cannot finish before the caller has handled call 3: results are handed over as
    # they come, on the calling thread, not after the whole batch.
    handled_3 = threading.Event()
    seen: list[tuple[int, int, bool]] = []

    def call(v: int) -> int:
        if v == 0:
            assert handled_3.wait(10)
        return v * v

    def then(v: int, squared: int) -> None:
        seen.append((v, squared, threading.current_thread() is threading.main_thread()))
        if v == 3:
            handled_3.set()

    each_as_completed(call, list(range(6)), then, workers=8)
    assert sorted(seen) == [(v, v * v, True) for v in range(6)]
    # Only the order of 3 and 0 is fixed; the others may be handed over before or after 0,
    # depending on when the pool's threads get to run.
    order = [v for v, _, _ in seen]
    assert order.index(3) < order.index(0)


def test_each_as_completed_stops_at_the_first_error_and_leaves_no_call_running() -> None:
    running = threading.Semaphore(0)
    finished: list[int] = []

    def call(v: int) -> int:
        running.release()
        if v == 0:
            raise KeyError(v)
        finished.append(v)
        return v

    with pytest.raises(KeyError):
        each_as_completed(call, list(range(200)), lambda v, r: None, workers=4)
    started = 0
    while running.acquire(blocking=False):
        started += 1
    # Every call that started has finished (call 0 failed) by the time the error is raised.
    assert len(finished) == started - 1

    def bad_then(v: int, r: int) -> None:
        raise ValueError(f"handling {v}")

    with pytest.raises(ValueError, match="handling"):
        each_as_completed(lambda v: v, list(range(50)), bad_then, workers=4)


def _lands_contiguous(out: np.ndarray, out_selection: tuple[slice, ...], chunk_shape: tuple[int, ...]) -> bool:
    target = out[(*out_selection, Ellipsis)]
    return target.shape == chunk_shape and bool(target.flags.c_contiguous)


@pytest.mark.parametrize(
    ("out_shape", "chunk_shape"),
    [
        ((8, 3, 16), (1, 1, 16)),
        ((8, 3, 16), (2, 1, 16)),
        ((8, 3, 16), (1, 3, 16)),
        ((8, 3, 16), (4, 3, 16)),
        ((8, 3, 16), (1, 1, 8)),
        ((1, 6, 1, 5), (1, 2, 1, 5)),
        ((1, 6, 2, 5), (1, 2, 1, 5)),
        ((4, 4, 4), (2, 2, 2)),
        ((4, 4, 4), (1, 1, 1)),
        ((5,), (5,)),
        ((9,), (3,)),
    ],
)
def test_a_whole_chunk_goes_straight_into_the_output_exactly_where_it_lands_contiguous(
    out_shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> None:
    """``is_direct`` rules out a chunk by the output's shape before walking its selections
    (``spans_trailing_axes``): every place of the chunk in the output gives what the walk gives."""
    from gpuzarr.plan.selection import ChunkProjection

    out = np.empty(out_shape, np.uint8)
    whole = tuple(slice(0, n, 1) for n in chunk_shape)
    starts = [range(0, o - c + 1) for o, c in zip(out_shape, chunk_shape, strict=True)]
    seen = set()
    for origin in np.ndindex(*(len(r) for r in starts)):
        sel = tuple(slice(o, o + c) for o, c in zip(origin, chunk_shape, strict=True))
        p = ChunkProjection(origin, whole, sel, True)
        expected = _lands_contiguous(out, sel, chunk_shape)
        assert placement.is_direct(out, p, chunk_shape) == expected, sel
        seen.add(expected)
    assert seen  # some place was checked


def test_small_chunks_of_several_shapes_read_as_numpy(store) -> None:
    """A rectilinear grid's chunks differ in shape (and so in pipeline): a run of several
    shapes is decoded one by one, a run of one shape together."""
    x = np.arange(40 * 10, dtype="<i4").reshape(40, 10)
    a = gpuzarr.create(store, shape=x.shape, dtype="int32", chunks=[[3, 5, 2, 10, 10, 10], [4, 6]], codecs=ZSTD)
    a[...] = x
    with gpuzarr.config.set(concurrency=2):
        np.testing.assert_array_equal(a[...], x)
        np.testing.assert_array_equal(a[20:40], x[20:40])  # chunks of 10 rows only
        np.testing.assert_array_equal(a[1:33, 3:9], x[1:33, 3:9])


BLOSC_LZ4 = [*RAW, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}]
BLOSC_ZSTD = [*RAW, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "shuffle"}}]
GZIP = [*RAW, {"name": "gzip", "configuration": {"level": 5}}]


@pytest.mark.parametrize(
    ("codecs", "chunks", "alone"),
    [
        (BLOSC_LZ4, (64, 64), True),  # 8 KiB
        (BLOSC_LZ4, (128, 128), True),  # 32 KiB
        (BLOSC_LZ4, (128, 256), False),  # 64 KiB
        (BLOSC_ZSTD, (64, 64), True),
        (BLOSC_ZSTD, (128, 128), False),
        (GZIP, (64, 64), True),
        (GZIP, (128, 128), False),
        (ZSTD, (64, 64), False),  # decoded a run at a time instead
        (RAW, (64, 64), False),
        ([*RAW, {"name": "numcodecs.zlib", "configuration": {"level": 1}}], (32, 32), True),
        ([*RAW, {"name": "numcodecs.blosc", "configuration": {"cname": "lz4"}}], (32, 32), True),
        ([*RAW, {"name": "numcodecs.bz2", "configuration": {"level": 1}}], (32, 32), False),
    ],
)
def test_small_chunks_of_fast_decoders_are_read_on_the_calling_thread(
    tmp_path, codecs, chunks, alone
) -> None:  # type: ignore[no-untyped-def]
    """Chunks small enough that their decoder's Python is most of the work (one call each) read
    on the calling thread alone, unsharded and as inner chunks: threads only traded the GIL."""
    x = (np.arange(256 * 512, dtype=np.uint16).reshape(256, 512) * 7) % 1000
    arrays = [
        gpuzarr.create(tmp_path / "chunks", shape=x.shape, dtype="uint16", chunks=chunks, codecs=codecs),
        gpuzarr.create(
            tmp_path / "shards", shape=x.shape, dtype="uint16", chunks=chunks, shards=(256, 512), codecs=codecs
        ),
    ]
    decode = CodecPipeline.decode_scratch
    decode_in = CodecPipeline.decode_in
    for a in arrays:
        a[...] = x
        assert a.layout.chunk_pipeline.codes_on_one_thread == alone
        threads: set[str] = set()

        def spy(self, raw, key, threads=threads):  # type: ignore[no-untyped-def]
            threads.add(threading.current_thread().name)
            return decode(self, raw, key)

        def spy_in(self, raw, key, buffer, threads=threads):  # type: ignore[no-untyped-def]
            threads.add(threading.current_thread().name)
            return decode_in(self, raw, key, buffer)

        with pytest.MonkeyPatch.context() as mp, gpuzarr.config.set(concurrency=2):
            mp.setattr(CodecPipeline, "decode_scratch", spy)
            mp.setattr(CodecPipeline, "decode_in", spy_in)
            np.testing.assert_array_equal(a[3:250, 1:509], x[3:250, 1:509])
        if alone:
            assert threads == {threading.current_thread().name}
    # Writes of small inner chunks encode them on the calling thread alone as well.
    encoding: set[str] = set()
    encode = CodecPipeline.encode

    def spy_encode(self, chunk):  # type: ignore[no-untyped-def]
        encoding.add(threading.current_thread().name)
        return encode(self, chunk)

    with pytest.MonkeyPatch.context() as mp, gpuzarr.config.set(concurrency=2):
        mp.setattr(CodecPipeline, "encode", spy_encode)
        arrays[1][...] = x + 1
    np.testing.assert_array_equal(arrays[1][...], x + 1)
    if alone:
        assert encoding == {threading.current_thread().name}
