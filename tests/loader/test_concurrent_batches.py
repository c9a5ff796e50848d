"""CropLoader(concurrent_batches=N) on the CPU: several batches read at once on background
threads, each on its share of the CPU workers, handed over in order; the same batches as one at
a time, resumable, an error handed over in its turn, the pool bounded, and the setting refused
where batches are not read on this process's threads."""

from __future__ import annotations

import threading
import time
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError, InvalidArgumentError
from gpuzarr.loader import CropLoader, prefetch
from gpuzarr.loader.prefetch import lane_shares
from gpuzarr.loader.reading import BatchReader
from gpuzarr.parallel import cpu_workers

from .helpers import (
    OUTPUTS,
    assert_batch_matches,
    crop_list,
    loader_threads,
    make_volume,
    needs_torch,
    read_all,
    to_numpy,
    values,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from gpuzarr.loader.sampling import Crops

CROP = (6, 5, 7)
SHAPES = [(20, 18, 16), (13, 24, 9)]


@pytest.fixture
def sources() -> list[np.ndarray[Any, Any]]:
    return [values(s, salt=20 + i) for i, s in enumerate(SHAPES)]


@pytest.fixture
def four_workers() -> Iterator[None]:
    with gpuzarr.config.set(concurrency=4):  # the setting before, back on exit
        yield


def _volumes(sources: list[np.ndarray[Any, Any]], layout: str = "v3-sharded-zstd") -> list[gpuzarr.Array]:
    return [make_volume(gpuzarr.MemoryStore(), s, layout) for s in sources]



class _UnevenReads:
    """Wraps ``BatchReader.read``: each batch waits 0-15 ms (by its crops) before it is read, so
    that batches read at once finish out of order; records each read's thread and CPU workers."""

    def __init__(self) -> None:
        self.read = BatchReader.read
        self.threads: set[int] = set()
        self.workers: set[int] = set()
        self.lock = threading.Lock()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def uneven_read(reader: BatchReader, crops: Crops, out: dict[str, Any]) -> None:
            with self.lock:
                self.threads.add(threading.get_ident())
                self.workers.add(cpu_workers())
            time.sleep((zlib.crc32(crops.origins.tobytes()) % 16) / 1000)
            self.read(reader, crops, out)

        monkeypatch.setattr(BatchReader, "read", uneven_read)


@pytest.mark.parametrize("layout", ["v3-sharded-zstd", "v2-blosc-lz4"])
@pytest.mark.parametrize("output", OUTPUTS)
def test_batches_read_at_once_are_handed_over_in_order(
    sources: list[np.ndarray[Any, Any]], layout: str, output: str, four_workers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    volumes = _volumes(sources, layout)

    def make(lanes: int) -> CropLoader:
        return CropLoader(volumes, CROP, 3, crops_per_epoch=40, seed=5, output=output, concurrent_batches=lanes)

    expected_crops, expected_data = read_all(make(1))
    uneven = _UnevenReads()
    uneven.install(monkeypatch)
    loader = make(3)
    batches = list(loader)
    assert crop_list(batches) == expected_crops
    for batch, data in zip(batches, expected_data, strict=True):
        assert_batch_matches(batch, sources, CROP)
        np.testing.assert_array_equal(to_numpy(batch.data), data)
    assert [b.index for b in batches] == list(range(len(loader)))
    assert len(uneven.threads) > 1  # the batches were read on several threads
    assert uneven.workers == set(lane_shares(4, 3))  # each on its share of the CPU workers: 2, 1, 1


@needs_torch
def test_the_default_reads_up_to_four_batches_at_once_on_their_share_of_the_workers(
    sources: list[np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    uneven = _UnevenReads()
    uneven.install(monkeypatch)
    volumes = _volumes(sources)
    for concurrency, lanes in [(1, 1), (2, 2), (3, 3), (7, 4), (16, 4)]:
        with gpuzarr.config.set(concurrency=concurrency):
            uneven.workers.clear()
            loader = CropLoader(volumes, CROP, 2, crops_per_epoch=40, output="numpy")
            iterator = iter(loader)
            next(iterator)
            running = loader_threads()
            assert len(running) == lanes
            del iterator
            for thread in running:
                thread.join(timeout=30)
            # one lane reads with every worker (run_tasks' default), several with their share
            assert uneven.workers == set(lane_shares(concurrency, lanes))
    # With a host cache, batches read at once would each read the chunks all of them miss.
    with gpuzarr.config.set(concurrency=4):
        cached = CropLoader(volumes, CROP, 2, crops_per_epoch=40, output="numpy", cache_bytes=1 << 20)
        iterator = iter(cached)
        next(iterator)
        assert len(loader_threads()) == 1
        del iterator


def test_a_state_taken_mid_epoch_resumes_exactly_with_batches_read_at_once(
    sources: list[np.ndarray[Any, Any]], four_workers: None
) -> None:
    volumes = _volumes(sources)

    def make(lanes: int) -> CropLoader:
        return CropLoader(volumes, CROP, 4, crops_per_epoch=30, seed=11, output="numpy", concurrent_batches=lanes)

    reference = make(1)
    expected_crops, expected_data = read_all(reference)
    first = make(4)
    iterator = iter(first)
    taken = [next(iterator) for _ in range(3)]
    assert crop_list(taken) == expected_crops[:12]
    state = first.state_dict()
    assert state["position"] == 3  # batches read ahead, at once or not, are not counted
    second = make(3)
    second.load_state_dict(state)
    crops, data = read_all(second)
    assert crops == expected_crops[12:]
    assert all(np.array_equal(a, b) for a, b in zip(data, expected_data[3:], strict=True))
    assert crop_list(list(iterator)) == expected_crops[12:]


@needs_torch
def test_a_failed_batch_is_handed_over_in_its_turn_and_nothing_after_it(
    sources: list[np.ndarray[Any, Any]], tmp_path: Path, four_workers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"v{i}.zarr"), s, "v3-gzip") for i, s in enumerate(sources)]
    (tmp_path / "v1.zarr" / "c" / "0" / "0" / "0").write_bytes(b"\x1f\x8b not gzip at all")
    # Batches of one crop: the third fails; the batches before it are slow to read, so that the
    # lanes reading the batches after it finish first.
    crops = [(0, (0, 0, 0)), (0, (1, 1, 1)), (1, (0, 0, 0)), (0, (2, 2, 2)), (0, (3, 3, 3)), (0, (4, 4, 4))]
    read = BatchReader.read

    def slow_before_the_failure(reader: BatchReader, batch: Crops, out: dict[str, Any]) -> None:
        if int(batch.origins[0][0]) < 2 and int(batch.volumes[0]) == 0:
            time.sleep(0.05)
        read(reader, batch, out)

    monkeypatch.setattr(BatchReader, "read", slow_before_the_failure)
    loader = CropLoader(volumes, CROP, 1, sampler=crops, shuffle=False, output="numpy", concurrent_batches=3)
    iterator = iter(loader)
    handed = [next(iterator), next(iterator)]
    assert crop_list(handed) == crops[:2]
    for batch in handed:
        assert_batch_matches(batch, sources, CROP)
    with pytest.raises(CorruptChunkError, match=r"c/0/0/0: .*while reading volume 1"):
        next(iterator)
    with pytest.raises(StopIteration):  # nothing after the failed batch
        next(iterator)
    deadline = time.monotonic() + 30
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not loader_threads()


def test_a_loop_that_drops_its_batches_reuses_one_more_buffer_per_batch_read_at_once(
    sources: list[np.ndarray[Any, Any]], four_workers: None
) -> None:
    volumes = _volumes(sources)
    loader = CropLoader(volumes, CROP, 2, crops_per_epoch=80, output="numpy", prefetch=1, concurrent_batches=3)
    addresses = set()
    for batch in loader:
        addresses.add(batch.data.__array_interface__["data"][0])
        time.sleep(0.002)  # gives the lanes the chance to run ahead into other buffers
        assert_batch_matches(batch, sources, CROP)
    assert 2 <= len(addresses) <= 1 + 3 + 2  # prefetch + 3, and 2 more for the other lanes


def test_concurrent_batches_is_refused_where_batches_are_not_read_on_threads(
    sources: list[np.ndarray[Any, Any]],
) -> None:
    volumes = _volumes(sources)
    with pytest.raises(InvalidArgumentError, match=r"concurrent_batches: .*prefetch=0"):
        CropLoader(volumes, CROP, 2, output="numpy", prefetch=0, concurrent_batches=2)
    with pytest.raises(InvalidArgumentError, match="concurrent_batches: with workers"):
        CropLoader(volumes, CROP, 2, output="numpy", workers=2, concurrent_batches=2)
    with pytest.raises(InvalidArgumentError, match="concurrent_batches"):
        CropLoader(volumes, CROP, 2, output="numpy", concurrent_batches=0)
    # One at a time is what those loaders do anyway.
    CropLoader(volumes, CROP, 2, output="numpy", prefetch=0, concurrent_batches=1)


def test_the_workers_are_split_between_lanes_as_evenly_as_whole_workers_go() -> None:
    assert lane_shares(7, 4) == [2, 2, 2, 1]  # 7 // 4 each would leave three idle
    assert lane_shares(16, 4) == [4, 4, 4, 4]
    assert lane_shares(2, 2) == [1, 1]
    assert lane_shares(2, 3) == [1, 1, 1]  # at least one each



def test_lanes_started_before_one_that_cannot_start_are_stopped(
    sources: list[np.ndarray[Any, Any]], four_workers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=40, output="numpy", concurrent_batches=4)
    started: list[threading.Thread] = []

    class ThirdLaneFails(threading.Thread):
        def start(self) -> None:
            if self.name == "gpuzarr-loader":
                started.append(self)
                if len(started) == 3:
                    raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(prefetch.threading, "Thread", ThirdLaneFails)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        iter(loader)
    for thread in started[:2]:
        thread.join(timeout=30)
        assert not thread.is_alive()
    monkeypatch.undo()
    assert len(read_all(loader)[0]) == 40  # the next pass starts its lanes


@needs_torch
def test_close_from_another_thread_while_batches_flow_ends_the_iteration(
    sources: list[np.ndarray[Any, Any]], four_workers: None
) -> None:
    """The consumer read the pass's loader again after the producer stopped, and found None
    where close() had cleared it meanwhile (AttributeError, 3 of 3 runs with fast reads)."""
    for attempt in range(12):
        loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=400, output="numpy", prefetch=1)
        iterator = iter(loader)
        next(iterator)
        closer = threading.Timer(0.002 * (attempt % 4), loader.close)
        closer.start()
        count = sum(1 for _ in iterator)  # ends, whatever batch it was on: no error
        closer.join()
        assert count < 200
        assert not loader_threads()


def test_close_from_another_thread_ends_a_consumer_waiting_for_a_batch(
    sources: list[np.ndarray[Any, Any]], four_workers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = BatchReader.read

    def slow(reader: BatchReader, crops: Crops, out: dict[str, Any]) -> None:
        time.sleep(0.3)
        read(reader, crops, out)

    monkeypatch.setattr(BatchReader, "read", slow)
    for lanes in (1, 3):
        loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=40, output="numpy", concurrent_batches=lanes)
        iterator = iter(loader)
        got: list[Any] = []
        consumer = threading.Thread(target=lambda it=iterator, out=got: out.append(next(it, "end")), daemon=True)
        consumer.start()
        time.sleep(0.05)  # the consumer waits for the first batch
        loader.close()
        consumer.join(timeout=10)
        assert not consumer.is_alive() and got == ["end"]
        assert not loader_threads()
