"""CropLoader worker processes (CPU): their batches are the threaded loader's batches, equal to
NumPy slicing, in order, across epochs, resumed and cached; a worker's error names the chunk,
volume and crops; a killed worker is an error, not a hang; shared buffers go when their batches
do; GPU loaders and DataLoader workers start none."""

from __future__ import annotations

import gc
import os
import signal
import sys
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError, GpuZarrError, InvalidArgumentError, WorkerProcessError
from gpuzarr.loader import CropLoader
from gpuzarr.loader.workers import _portable

from .helpers import assert_batch_matches, make_volume, to_numpy, values

if TYPE_CHECKING:
    from ..backends.emulated_gpu import EmulatedGpu

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shared memory")

CROP = (6, 5, 7)
SHAPES = [(20, 18, 16), (13, 24, 9)]
BATCH = 4
CROPS = 36  # nine batches: more than a pool of prefetch + 3 + 2 per worker holds


@pytest.fixture(scope="module")
def fields(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[np.ndarray[Any, Any]]]:
    images = [values(s, salt=i) for i, s in enumerate(SHAPES)]
    return {"image": images, "label": [(v % 7).astype(np.uint8) for v in images]}


@pytest.fixture(scope="module")
def arrays(
    fields: dict[str, list[np.ndarray[Any, Any]]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[gpuzarr.Array]]:
    root = tmp_path_factory.mktemp("workers")
    layouts = {"image": "v3-sharded-zstd", "label": "v2-blosc-lz4"}
    return {
        name: [make_volume(gpuzarr.LocalStore(root / f"{name}{i}.zarr"), v, layouts[name]) for i, v in enumerate(data)]
        for name, data in fields.items()
    }


def _loader(arrays: Any, **options: Any) -> CropLoader:
    options = {"crops_per_epoch": CROPS, "seed": 3, "output": "numpy", **options}
    return CropLoader(arrays, CROP, BATCH, **options)


def _assert_fields_match(batch: Any, fields: dict[str, list[np.ndarray[Any, Any]]]) -> None:
    for name, sources in fields.items():
        single = type(batch)(batch.data[name], batch.origins, batch.volume_index, batch.index)
        assert_batch_matches(single, sources, CROP)


def _same_batches(ours: list[Any], reference: list[Any]) -> None:
    assert [b.index for b in ours] == [b.index for b in reference]
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(a.origins, b.origins)
        np.testing.assert_array_equal(a.volume_index, b.volume_index)
        for name in b.data:
            np.testing.assert_array_equal(to_numpy(a.data[name]), to_numpy(b.data[name]))


@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_workers_read_the_threaded_loaders_batches_in_order(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]], output: str
) -> None:
    if output == "torch":
        pytest.importorskip("torch")
    loader = _loader(arrays, workers=2, output=output)
    reference = _loader(arrays, workers=0, output=output)
    try:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            reference.set_epoch(epoch)
            kept = list(loader)  # kept: more batches than the pool holds, none overwritten
            assert len(kept) == len(loader) == CROPS // BATCH
            for batch in kept:
                _assert_fields_match(batch, fields)
            _same_batches(kept, list(reference))
    finally:
        loader.close()


def test_a_loop_that_drops_its_batches_reuses_the_shared_buffers(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]]
) -> None:
    loader = _loader(arrays, workers=2, prefetch=1)
    try:
        names = set()
        for batch in loader:
            _assert_fields_match(batch, fields)
            assert loader._segments is not None
            names.update(loader._segments.name_of(batch.data[field]) for field in fields)
        # prefetch + 3 + two per worker sets at most, of nine batches, a segment per field each
        assert len(names) <= (1 + 3 + 2 * 2) * len(fields)
        del batch
        gc.collect()
        segments = loader._segments
        assert segments is not None and segments.held() == 0 and segments.idle() == len(names)
        again = set()
        for batch in loader:  # the next pass takes the same segments again
            again.update(segments.name_of(batch.data[field]) for field in fields)
        assert again <= names
    finally:
        loader.close()
    del batch
    gc.collect()
    if Path("/dev/shm").is_dir():
        assert not [n for n in names if (Path("/dev/shm") / n.lstrip("/")).exists()]


def test_a_resumed_loader_with_workers_continues_exactly(arrays: dict[str, list[gpuzarr.Array]]) -> None:
    reference = list(_loader(arrays))
    first = _loader(arrays, workers=2)
    second = _loader(arrays, workers=2)
    try:
        taken = []
        for batch in first:
            taken.append(batch)
            if len(taken) == 3:
                break
        second.load_state_dict(first.state_dict())
        _same_batches(taken + list(second), reference)
        # a pass stopped early leaves no answer behind: the next epoch is the reference's
        first.set_epoch(1)
        _same_batches(list(first), _epoch(arrays, 1))
    finally:
        first.close()
        second.close()


def _epoch(arrays: Any, epoch: int) -> list[Any]:
    loader = _loader(arrays)
    loader.set_epoch(epoch)
    return list(loader)


def test_the_workers_host_caches_give_the_same_batches_and_count_hits(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]]
) -> None:
    loader = _loader(arrays, workers=2, cache_bytes=1 << 22)
    try:
        assert loader.cache_stats()["host"].capacity == 1 << 22
        first, again = list(loader), list(loader)
        for batch in again:
            _assert_fields_match(batch, fields)
        _same_batches(again, first)
        stats = loader.cache_stats()["host"]
        assert stats.hits > 0 and stats.misses > 0 and 0 < stats.nbytes <= stats.capacity
    finally:
        loader.close()


@pytest.mark.parametrize("where", ["local, host cache", "in memory, no cache"])
def test_a_write_through_the_loaders_array_reaches_the_workers(tmp_path: Path, where: str) -> None:
    # The workers' caches (one per worker) and their copies of an in-memory store live from
    # pass to pass: a write in the loader's process must not leave them serving the old data.
    sources = [values(s, salt=i) for i, s in enumerate(SHAPES)]
    in_memory = where.startswith("in memory")
    stores = [gpuzarr.MemoryStore() if in_memory else gpuzarr.LocalStore(tmp_path / f"v{i}.zarr") for i in range(2)]
    volumes = [make_volume(store, v, "v3-sharded-zstd") for store, v in zip(stores, sources, strict=True)]
    options: dict[str, Any] = {"workers": 2, "cache_bytes": 0 if in_memory else 1 << 22}
    loader = _loader(volumes, **options)
    reference = _loader(volumes, workers=0)
    try:
        for batch in loader:
            assert_batch_matches(batch, sources, CROP)
        for volume, source in zip(volumes, sources, strict=True):
            source[...] = source[::-1]  # new values everywhere, of the same dtype
            volume[...] = source
        loader.set_epoch(1)
        reference.set_epoch(1)
        got, want = list(loader), list(reference)
        for batch in got:
            assert_batch_matches(batch, sources, CROP)
        assert [b.origins.tolist() for b in got] == [b.origins.tolist() for b in want]
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(to_numpy(a.data), to_numpy(b.data))
    finally:
        loader.close()


def test_a_corrupt_chunk_read_by_a_worker_names_its_key_volume_and_crops(tmp_path: Path) -> None:
    sources = [values(s, salt=i) for i, s in enumerate(SHAPES)]
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"v{i}.zarr"), s, "v3-gzip") for i, s in enumerate(sources)]
    (tmp_path / "v1.zarr" / "c" / "0" / "0" / "0").write_bytes(b"\x1f\x8b not gzip at all")
    crops = [(0, (0, 0, 0)), (1, (0, 0, 0)), (1, (2, 3, 1))]
    loader = CropLoader(volumes, CROP, 3, sampler=crops, shuffle=False, output="numpy", workers=1)
    try:
        with pytest.raises(CorruptChunkError) as info:
            list(loader)
        message = str(info.value)
        assert info.value.key == "c/0/0/0"
        assert "volume 1 crop [0:6, 0:5, 0:7]" in message and "[2:8, 3:8, 1:8]" in message
        assert any("raised in loader worker process 0" in note for note in info.value.__notes__)
        # the error was the batch's, not the worker's: it lives on, and reads the next pass
        assert loader._processes is not None and loader._processes._processes[0].is_alive()
        pid = loader._processes.pids[0]
        loader.load_state_dict({**loader.state_dict(), "position": 0})
        with pytest.raises(CorruptChunkError):
            list(loader)
        assert loader._processes.pids == [pid]
    finally:
        loader.close()


def test_a_batch_failed_in_a_worker_is_let_go_of_with_its_error(tmp_path: Path) -> None:
    """No reference cycle keeps the error, and with it the batch's shared buffers, alive."""
    volume = make_volume(gpuzarr.LocalStore(tmp_path / "v.zarr"), values(SHAPES[0]), "v3-gzip")
    (tmp_path / "v.zarr" / "c" / "0" / "0" / "0").write_bytes(b"\x1f\x8b not gzip at all")
    loader = CropLoader([volume], CROP, 2, sampler=[(0, (0, 0, 0))] * 4, output="numpy", workers=1)
    gc.collect()
    gc.disable()
    try:
        try:
            list(loader)
        except CorruptChunkError as exc:
            error = weakref.ref(exc)
        assert error() is None
    finally:
        gc.enable()
        loader.close()


def test_a_killed_worker_is_an_error_naming_it_and_a_new_iteration_starts_afresh(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]]
) -> None:
    loader = _loader(arrays, workers=2, prefetch=1)
    try:
        iterator = iter(loader)
        next(iterator)
        assert loader._processes is not None
        os.kill(loader._processes.pids[1], signal.SIGKILL)
        with pytest.raises(WorkerProcessError, match=r"loader worker process 1 \(pid \d+\) exited with code -9"):
            for _ in iterator:
                pass
        loader.close()
        for batch in loader:  # new workers
            _assert_fields_match(batch, fields)
    finally:
        loader.close()


def test_a_pass_broken_off_again_and_again_never_mixes_up_the_next_passes_batches(
    arrays: dict[str, list[gpuzarr.Array]],
) -> None:
    loader = _loader(arrays, workers=2)
    reference = list(_loader(arrays))
    try:
        for taken in (1, 2, 0, 3):
            for i, _ in enumerate(loader):  # the iterator dropped with batches still out
                if i + 1 >= taken:
                    break
            loader.load_state_dict({**loader.state_dict(), "position": 4})
            _same_batches(list(loader), reference[4:])
    finally:
        loader.close()


def test_a_dead_worker_is_replaced_by_the_next_iteration_without_close(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]]
) -> None:
    loader = _loader(arrays, workers=2)
    try:
        list(loader)
        assert loader._processes is not None
        os.kill(loader._processes.pids[0], signal.SIGKILL)
        loader._processes._processes[0].join(5)
        for batch in loader:
            _assert_fields_match(batch, fields)
    finally:
        loader.close()


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="SIGSTOP")
def test_a_worker_that_stops_answering_is_given_up_on_when_the_pass_stops(
    arrays: dict[str, list[gpuzarr.Array]],
    fields: dict[str, list[np.ndarray[Any, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuzarr.loader import workers

    monkeypatch.setattr(workers, "DRAIN_S", 0.5)
    loader = _loader(arrays, workers=2, prefetch=1)
    try:
        processes, _ = loader._worker_processes()
        stuck = processes._processes[1]
        os.kill(stuck.pid, signal.SIGSTOP)  # as a read hung on a store would: batch 1 never comes
        iterator = iter(loader)
        next(iterator)  # batch 0, from worker 0
        iterator.close()  # returns: the stuck worker is killed, not waited for
        stuck.join(5)
        assert not stuck.is_alive()
        for batch in loader:  # a new set of workers
            _assert_fields_match(batch, fields)
    finally:
        loader.close()


def test_closing_stops_the_workers(arrays: dict[str, list[gpuzarr.Array]]) -> None:
    loader = _loader(arrays, workers=2)
    list(loader)
    assert loader._processes is not None
    processes = list(loader._processes._processes)
    loader.close()
    assert all(not p.is_alive() for p in processes)
    assert loader._processes is None


def test_a_dropped_loader_stops_its_workers_without_a_garbage_collection(
    arrays: dict[str, list[gpuzarr.Array]],
) -> None:
    """The buffer pool's maker held the loader, which held the pool's producer: after a
    ``break`` and ``del loader`` the worker processes and shared memory stayed until the next
    cyclic garbage collection."""
    gc.disable()
    try:
        loader = _loader(arrays, workers=2)
        for _batch in loader:
            break
        assert loader._processes is not None
        processes = list(loader._processes._processes)
        alive = weakref.ref(loader)
        del loader, _batch
        assert alive() is None  # freed by its references alone
        for process in processes:
            process.join(timeout=30)
        assert all(not p.is_alive() for p in processes)
    finally:
        gc.enable()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_fork_leaves_the_parents_workers_and_buffers_alone(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]]
) -> None:
    loader = _loader(arrays, workers=2)
    iterator = iter(loader)
    kept = next(iterator)
    iterator.close()  # its thread joined: the batches still out are drained, their buffers idle
    del iterator
    gc.collect()
    assert loader._processes is not None and loader._segments is not None and loader._segments.idle() > 0
    pids = loader._processes.pids
    child = os.fork()
    if child == 0:  # the fork drops its copies of everything, and closes its copy of the loader
        code = 0
        try:
            del kept
            loader.close()
            gc.collect()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    try:
        assert loader._processes.pids == pids and all(p.is_alive() for p in loader._processes._processes)
        _assert_fields_match(kept, fields)  # its segment was not unlinked from under it
        for batch in loader:  # the same workers, the same segments
            _assert_fields_match(batch, fields)
        assert loader._processes.pids == pids
    finally:
        loader.close()


def test_a_dataset_of_a_loader_with_workers_reads_in_its_own_process(
    arrays: dict[str, list[gpuzarr.Array]], fields: dict[str, list[np.ndarray[Any, Any]]]
) -> None:
    pytest.importorskip("torch")
    loader = _loader(arrays, workers=2)
    batches = list(iter(loader.as_dataset()))
    assert loader._processes is None  # DataLoader workers are the processes there
    _same_batches(batches, list(_loader(arrays)))


def test_workers_are_for_cpu_loaders(arrays: dict[str, list[gpuzarr.Array]], emulated_gpu: EmulatedGpu) -> None:
    with pytest.raises(InvalidArgumentError, match="workers"):
        _loader(arrays, workers=-1)
    with pytest.raises(InvalidArgumentError, match="worker processes are for CPU loaders"):
        _loader(arrays, workers=2, device="gpu", output="cupy")


class _PrivateStore(gpuzarr.MemoryStore):
    """A store that will not leave its process."""

    def __reduce__(self) -> Any:
        raise TypeError("this store stays in its process")


def test_arrays_that_cannot_reach_a_worker_are_refused_by_name(fields: dict[str, list[np.ndarray[Any, Any]]]) -> None:
    volume = make_volume(_PrivateStore(), fields["image"][0], "v3-gzip")
    loader = _loader(volume, workers=2)
    with pytest.raises(InvalidArgumentError, match=r"cannot be sent to a worker process .*this store stays"):
        next(iter(loader))
    assert loader._processes is None
    loader.close()


class _Unpicklable(Exception):
    def __reduce__(self) -> Any:
        raise TypeError("no")


def _raise_unpicklable() -> None:
    raise _Unpicklable("odd")


def test_a_segments_finalizer_inside_its_own_locked_section_does_not_deadlock() -> None:
    from gpuzarr.loader.shared import SharedSegments

    segments = SharedSegments(1, keep=1)
    array = segments.empty((4, 4), np.dtype(np.uint16))

    def collect_inside() -> None:
        nonlocal array
        with segments._idle.lock, segments._lock:  # as a collection during _take_idle would
            del array
            gc.collect()

    import threading

    thread = threading.Thread(target=collect_inside, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and segments.held() == 0 and segments.idle() == 1
    segments.close()


def test_a_worker_map_outlived_by_a_view_is_let_go_of_quietly() -> None:
    from gpuzarr.loader.shared import SegmentMaps, SharedSegments

    segments = SharedSegments(1, keep=0)
    array = segments.empty((8,), np.dtype(np.uint8))
    maps = SegmentMaps()
    view = maps.array(segments.name_of(array), (8,), np.dtype(np.uint8))
    maps.unmap([segments.name_of(array)])  # the view still holds the mapping: no error
    view[:] = 3
    np.testing.assert_array_equal(array, 3)


def test_a_workers_error_crosses_as_itself_or_as_a_description() -> None:
    builtin = _portable(FileNotFoundError(2, "gone", "c/0"), 0)
    assert type(builtin) is FileNotFoundError and builtin.__notes__[-1].startswith("raised in loader worker")
    error = CorruptChunkError("c/1", "bad")
    error.add_note("while reading volume 2")
    crossed = _portable(error, 3)
    assert crossed is error and crossed.__notes__[-1].startswith("raised in loader worker process 3")
    try:
        _raise_unpicklable()
    except _Unpicklable as exc:
        described = _portable(exc, 1)
    assert isinstance(described, WorkerProcessError) and isinstance(described, GpuZarrError)
    text = str(described)
    assert text.startswith("_Unpicklable: odd (raised in loader worker process 1") and "Traceback" in text
    assert "test_a_workers_error_crosses_as_itself_or_as_a_description" in text


def test_an_interrupt_while_a_worker_starts_leaves_no_worker_running(
    arrays: dict[str, list[gpuzarr.Array]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the second worker started: only errors (``Exception``) stopped the workers
    started so far, which were left running with their pipes open."""
    import multiprocessing

    process_class = type(multiprocessing.get_context("spawn").Process())
    start = process_class.start
    started: list[Any] = []

    def start_then_interrupt(self: Any) -> None:
        start(self)
        started.append(self)
        if len(started) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(process_class, "start", start_then_interrupt)
    loader = CropLoader(arrays["image"], (4, 4, 4), 2, crops_per_epoch=8, output="numpy", workers=3)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        next(iter(loader))
    # While the interrupt is held (its traceback holds the half-made set's pipe ends, as a
    # notebook holds the last error), no worker waits on them.
    assert interrupted.value is not None and len(started) == 2
    for process in started:
        process.join(10)
        assert not process.is_alive()


def test_worker_processes_refuse_fields_of_python_objects() -> None:
    """Variable-length strings cannot cross shared memory: refused when the loader is made,
    naming the field; the threads read them (it failed at the first batch in NumPy)."""
    words = np.array([[f"w{i}{j}" for j in range(6)] for i in range(8)], dtype=object)
    text = gpuzarr.create(gpuzarr.MemoryStore(), shape=words.shape, dtype=str, chunks=(4, 3))
    text[...] = words
    numbers = gpuzarr.create(gpuzarr.MemoryStore(), shape=words.shape, dtype="u1", chunks=(4, 3))
    with pytest.raises(InvalidArgumentError, match=r"workers: field 'text': .* Python objects"):
        CropLoader({"n": numbers, "text": text}, (2, 2), 2, output="numpy", workers=1)
    batch = next(iter(CropLoader({"n": numbers, "text": text}, (2, 2), 2, output="numpy", seed=1)))
    origin = batch.origins[0]
    assert batch.data["text"][0].tolist() == words[origin[0] : origin[0] + 2, origin[1] : origin[1] + 2].tolist()
