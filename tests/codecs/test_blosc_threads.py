"""numcodecs' Blosc starts c-blosc's own threads on the main thread: parallel reads and writes
of Blosc chunks then decode and encode on the pool's threads, never on the main thread."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numcodecs.blosc
import numpy as np
import pytest

import gpuzarr
from gpuzarr.codecs import blosc as blosc_module
from gpuzarr.codecs.blosc import numcodecs_blosc_threads_here
from gpuzarr.codecs.pipeline import CodecPipeline

if TYPE_CHECKING:
    from collections.abc import Iterator

BLOSC = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2}},
]
ZSTD = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]


@pytest.fixture
def blosc_threads() -> Iterator[None]:
    """numcodecs' defaults with two Blosc threads and two gpuzarr workers, restored after."""
    threads, setting = numcodecs.blosc.get_nthreads(), numcodecs.blosc.use_threads
    numcodecs.blosc.set_nthreads(2)
    numcodecs.blosc.use_threads = None
    gpuzarr.config.set(concurrency=2)
    try:
        yield
    finally:
        numcodecs.blosc.set_nthreads(threads)
        numcodecs.blosc.use_threads = setting
        gpuzarr.config.set(concurrency=None)


def on_a_thread(func):  # type: ignore[no-untyped-def]
    result = []
    t = threading.Thread(target=lambda: result.append(func()))
    t.start()
    t.join()
    return result[0]


def test_numcodecs_rule(blosc_threads: None) -> None:
    assert numcodecs_blosc_threads_here()  # the main thread, use_threads None
    assert not on_a_thread(numcodecs_blosc_threads_here)
    numcodecs.blosc.use_threads = False
    assert not numcodecs_blosc_threads_here()
    numcodecs.blosc.use_threads = True
    assert on_a_thread(numcodecs_blosc_threads_here)
    numcodecs.blosc.set_nthreads(1)
    assert not numcodecs_blosc_threads_here()


def test_a_pipeline_knows_whether_a_codec_starts_threads_here(blosc_threads: None) -> None:
    blosc = gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype="uint16", codecs=BLOSC)._layout.chunk_pipeline
    assert blosc.starts_own_threads_here()
    zstd = gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype="uint16", codecs=ZSTD)._layout.chunk_pipeline
    assert isinstance(zstd, CodecPipeline)
    assert not zstd.starts_own_threads_here()


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_parallel_blosc_reads_and_writes_never_code_on_the_main_thread(
    blosc_threads: None, sharded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    coded_on: list[threading.Thread] = []
    decode, encode = blosc_module.decode_blosc, blosc_module.BloscCodec.encode

    def recording_decode(*args, **kwargs):  # type: ignore[no-untyped-def]
        coded_on.append(threading.current_thread())
        return decode(*args, **kwargs)

    def recording_encode(self, data):  # type: ignore[no-untyped-def]
        coded_on.append(threading.current_thread())
        return encode(self, data)

    monkeypatch.setattr(blosc_module, "decode_blosc", recording_decode)
    monkeypatch.setattr(blosc_module.BloscCodec, "encode", recording_encode)
    x = np.random.default_rng(1).integers(0, 2**16, (32, 32, 32), dtype=np.uint16)
    layout = {"shards": (16, 16, 16)} if sharded else {}
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=x.shape, dtype="uint16", chunks=(8, 8, 8), codecs=BLOSC, **layout)
    a[...] = x
    assert np.array_equal(a[...], x)
    assert np.array_equal(a[3:20, 5:30, 1:9], x[3:20, 5:30, 1:9])
    assert len(coded_on) >= 2 * 64
    assert threading.main_thread() not in coded_on


def test_one_blosc_chunk_is_decoded_on_the_calling_thread(blosc_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing to share out: c-blosc's threads decode its blocks in parallel instead.
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(64,), dtype="uint16", chunks=(64,), codecs=BLOSC)
    a[...] = np.arange(64, dtype=np.uint16)
    coded_on: list[threading.Thread] = []
    decode = blosc_module.decode_blosc

    def recording_decode(*args, **kwargs):  # type: ignore[no-untyped-def]
        coded_on.append(threading.current_thread())
        return decode(*args, **kwargs)

    monkeypatch.setattr(blosc_module, "decode_blosc", recording_decode)
    assert np.array_equal(a[...], np.arange(64))
    assert coded_on == [threading.main_thread()]
