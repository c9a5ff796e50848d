"""numcodecs' Blosc starts c-blosc's own threads on the main thread: where parallel reads and
writes of Blosc chunks code on the main thread beside the pool's threads, they do it with those
threads off; where the user asked for them, never on the main thread."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numcodecs.blosc
import numpy as np
import pytest

import gpuzarr
from gpuzarr.codecs import blosc as blosc_module
from gpuzarr.codecs.blosc import numcodecs_blosc_threads_off
from gpuzarr.codecs.pipeline import CodecPipeline

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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


def blosc_threads_here() -> bool:
    """Whether numcodecs' Blosc, called from this thread now, would start c-blosc's threads."""
    return bool(numcodecs.blosc._get_use_threads()) and numcodecs.blosc.get_nthreads() > 1


def test_threads_are_turned_off_on_the_main_thread_for_the_block_only(blosc_threads: None) -> None:
    assert blosc_threads_here()  # the main thread, use_threads None
    context = numcodecs_blosc_threads_off()
    assert context is not None
    with context:
        assert not blosc_threads_here()
        assert on_a_thread(lambda: numcodecs.blosc.use_threads) is False  # None and False: the same there
    assert numcodecs.blosc.use_threads is None
    assert blosc_threads_here()


def test_a_setting_made_inside_the_block_is_kept(blosc_threads: None) -> None:
    context = numcodecs_blosc_threads_off()
    assert context is not None
    with context:
        numcodecs.blosc.use_threads = True
    assert numcodecs.blosc.use_threads is True


def test_threads_the_user_asked_for_cannot_be_turned_off(blosc_threads: None) -> None:
    numcodecs.blosc.use_threads = True
    assert numcodecs_blosc_threads_off() is None
    assert on_a_thread(numcodecs_blosc_threads_off) is None
    numcodecs.blosc.set_nthreads(1)  # one thread: nothing to turn off
    assert numcodecs_blosc_threads_off() is not None


def test_off_threads_and_other_settings_leave_nothing_to_do(blosc_threads: None) -> None:
    on_a_thread(lambda: numcodecs_blosc_threads_off().__enter__())  # type: ignore[union-attr]
    assert numcodecs.blosc.use_threads is None  # a thread other than the main one: untouched
    numcodecs.blosc.use_threads = False
    context = numcodecs_blosc_threads_off()
    assert context is not None
    with context:
        pass
    assert numcodecs.blosc.use_threads is False


NUMCODECS_BLOSC = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "numcodecs.blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": 1}},
]


@pytest.mark.parametrize("codecs", [BLOSC, NUMCODECS_BLOSC], ids=["blosc", "numcodecs.blosc"])
def test_a_pipeline_turns_off_the_threads_of_its_codecs(blosc_threads: None, codecs: list[dict[str, Any]]) -> None:
    blosc = gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype="uint16", codecs=codecs).layout.chunk_pipeline
    context = blosc.beside_pool()
    assert context is not None
    with context:
        assert not blosc_threads_here()
    assert blosc_threads_here()
    zstd = gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype="uint16", codecs=ZSTD).layout.chunk_pipeline
    assert isinstance(zstd, CodecPipeline)
    assert zstd.beside_pool() is not None
    numcodecs.blosc.use_threads = True
    assert blosc.beside_pool() is None
    assert zstd.beside_pool() is not None


@pytest.mark.parametrize("asked_for_threads", [False, True], ids=["default", "threads-asked-for"])
@pytest.mark.parametrize("where", ["chunks", "shards", "local-chunks"])
def test_parallel_blosc_reads_and_writes_code_on_the_main_thread_only_without_its_threads(
    blosc_threads: None, where: str, asked_for_threads: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (thread, whether numcodecs would start c-blosc's threads there) of every chunk coded
    coded: list[tuple[threading.Thread, bool]] = []
    decompress, encode = blosc_module._decompress, blosc_module.BloscCodec.encode

    def recording_decompress(frame, out):  # type: ignore[no-untyped-def]
        coded.append((threading.current_thread(), blosc_threads_here()))
        return decompress(frame, out)

    def recording_encode(self, data):  # type: ignore[no-untyped-def]
        coded.append((threading.current_thread(), blosc_threads_here()))
        return encode(self, data)

    monkeypatch.setattr(blosc_module, "_decompress", recording_decompress)
    monkeypatch.setattr(blosc_module.BloscCodec, "encode", recording_encode)
    numcodecs.blosc.use_threads = True if asked_for_threads else None
    x = np.random.default_rng(1).integers(0, 2**16, (32, 32, 32), dtype=np.uint16)
    layout = {"shards": (16, 16, 16)} if where == "shards" else {}
    store = gpuzarr.LocalStore(tmp_path) if where == "local-chunks" else gpuzarr.MemoryStore()
    a = gpuzarr.create(store, shape=x.shape, dtype="uint16", chunks=(8, 8, 8), codecs=BLOSC, **layout)
    a[...] = x
    assert np.array_equal(a[...], x)
    # A crop of a few local chunks is fetched ahead (backends/cpu/fetch_ahead.py).
    assert np.array_equal(a[3:20, 5:30, 1:9], x[3:20, 5:30, 1:9])
    assert len(coded) >= 2 * 64
    on_main = [threads for thread, threads in coded if thread is threading.main_thread()]
    if asked_for_threads:
        if where == "local-chunks":  # a crop fetched ahead: the main thread decodes its share
            assert on_main and all(on_main)
        else:
            assert not on_main
    else:
        assert on_main and not any(on_main)
        assert numcodecs.blosc.use_threads is None


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
