"""CropLoader on device="gpu" with the emulated device (tests/backends/emulated_gpu.py): the
whole GPU host path (side-stream reads into pooled device buffers, events, hand-over, the device
chunk cache) on NumPy buffers. Output is NumPy: there is no CuPy here."""

from __future__ import annotations

import itertools
import os
import threading
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError, DeviceError, InvalidArgumentError
from gpuzarr.loader import Batch, CropLoader
from gpuzarr.loader.chunked import ChunkAssembler

from .helpers import LE, assert_batch_matches, loader_threads, make_volume, needs_torch, read_all, values

if TYPE_CHECKING:
    from pathlib import Path

    from ..backends.emulated_gpu import EmulatedGpu

CROP = (5, 6, 7)
SHAPES = [(19, 17, 16), (12, 20, 9)]


@pytest.fixture
def sources() -> list[np.ndarray[Any, Any]]:
    return [values(s, salt=10 + i) for i, s in enumerate(SHAPES)]


@pytest.fixture
def cpu_volumes(sources: list[np.ndarray[Any, Any]], tmp_path: Path) -> list[gpuzarr.Array]:
    # Written on the CPU, in local files (the kvikio route of the emulated device reads them).
    return [
        make_volume(gpuzarr.LocalStore(tmp_path / f"v{i}.zarr"), s, "v3-sharded-zstd", device="cpu")
        for i, s in enumerate(sources)
    ]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_every_batch_equals_numpy_slicing_on_the_gpu_path(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]], prefetch: int
) -> None:
    loader = CropLoader(cpu_volumes, CROP, 6, crops_per_epoch=30, device="gpu", output="numpy", prefetch=prefetch)
    assert loader.device == "cuda:0"
    assert all(a.device == "cuda:0" for a in loader.volumes.arrays[""])  # reopened on the device
    batches = 0
    for batch in loader:
        assert_batch_matches(batch, sources, CROP)
        batches += 1
    assert batches == len(loader) == 5
    # the reads ran on the emulated device: one assemble launch per batch at least
    assert emulated_gpu.names().count("assemble_chunks") >= batches


@pytest.mark.parametrize("device_cache", [0, 64 << 20])
def test_windows_planned_in_groups_of_batches_equal_numpy_slicing(
    emulated_gpu: EmulatedGpu,
    cpu_volumes: list[gpuzarr.Array],
    sources: list[np.ndarray[Any, Any]],
    monkeypatch: pytest.MonkeyPatch,
    device_cache: int,
) -> None:
    """Windows of up to 16 batches of two volumes, their pieces and box copies worked out 3
    batches at a time: each batch as NumPy slicing, over two passes (the second one from the
    device cache when there is one)."""
    from gpuzarr.loader import chunked

    monkeypatch.setattr(chunked, "PLANNED_TOGETHER", 3)
    loader = CropLoader(
        cpu_volumes, CROP, 4, crops_per_epoch=80, device="gpu", output="numpy", device_cache_bytes=device_cache
    )
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = list(loader)
        for batch in batches:
            assert_batch_matches(batch, sources, CROP)
        assert len(batches) == 20


def test_gpu_batches_equal_the_cpu_loaders_batches(emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]) -> None:
    def make(device: str) -> CropLoader:
        return CropLoader(cpu_volumes, CROP, 4, crops_per_epoch=20, seed=9, device=device, output="numpy")

    gpu, cpu = read_all(make("gpu")), read_all(make("cpu"))
    assert gpu[0] == cpu[0]
    assert all(np.array_equal(a, b) for a, b in zip(gpu[1], cpu[1]))


def test_paired_fields_and_the_grid_on_the_gpu_path(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    image = values((17, 13, 11), "<u2", salt=3)
    label = (image % 7).astype("u1")
    data = {
        "image": make_volume(gpuzarr.LocalStore(tmp_path / "i.zarr"), image, "v2-blosc-lz4", device="cpu"),
        "label": make_volume(gpuzarr.LocalStore(tmp_path / "l.zarr"), label, "v3-gzip", device="cpu"),
    }
    loader = CropLoader(data, CROP, 5, sampler="grid", shuffle=False, device="gpu", output="numpy")
    covered = np.zeros(image.shape, dtype=bool)
    for batch in loader:
        assert_batch_matches(Batch(batch.data["image"], batch.origins, batch.volume_index, 0), [image], CROP)
        assert_batch_matches(Batch(batch.data["label"], batch.origins, batch.volume_index, 0), [label], CROP)
        for origin in batch.origins:
            covered[tuple(slice(o, o + c) for o, c in zip(origin, CROP))] = True
    assert covered.all()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_kept_numpy_batches_are_never_overwritten_on_the_gpu_path(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], prefetch: int
) -> None:
    # NumPy output of a GPU loader is a host copy: its device buffer goes back to the pool at
    # once, and later batches are read into it. Every batch kept must keep what it held.
    loader = CropLoader(
        cpu_volumes, CROP, 2, crops_per_epoch=24, seed=4, device="gpu", output="numpy", prefetch=prefetch
    )
    kept = [(batch, np.array(batch.data)) for batch in loader]
    assert len(kept) == 12
    for batch, copy in kept:
        np.testing.assert_array_equal(batch.data, copy)


@pytest.mark.parametrize(("host", "device"), [(0, 64 << 20), (64 << 20, 0), (64 << 20, 64 << 20), (3000, 0), (0, 3000)])
def test_the_chunk_caches_on_the_gpu_path(
    emulated_gpu: EmulatedGpu,
    cpu_volumes: list[gpuzarr.Array],
    sources: list[np.ndarray[Any, Any]],
    host: int,
    device: int,
) -> None:
    loader = CropLoader(
        cpu_volumes, CROP, 5, crops_per_epoch=25, seed=2, device="gpu", output="numpy",
        cache_bytes=host, device_cache_bytes=device,
    )  # fmt: skip
    plain = CropLoader(cpu_volumes, CROP, 5, crops_per_epoch=25, seed=2, device="gpu", output="numpy")
    first = read_all(loader)
    assert first[0] == read_all(plain)[0]
    assert all(np.array_equal(a, b) for a, b in zip(first[1], read_all(plain)[1]))
    stats = loader.cache_stats()
    assert set(stats) == {name for name, budget in (("host", host), ("device", device)) if budget}
    for s in stats.values():
        assert s.nbytes <= s.capacity and s.misses > 0
    second = read_all(loader)
    assert second[0] == first[0] and all(np.array_equal(a, b) for a, b in zip(first[1], second[1]))
    if host > 3000 and device:
        # the whole set fits both levels: the second pass is served by the device cache alone
        assert loader.cache_stats()["host"].hits == stats["host"].hits
        assert loader.cache_stats()["device"].misses == stats["device"].misses


def test_a_host_cache_hit_fills_the_device_cache(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]]
) -> None:
    loader = CropLoader(
        cpu_volumes, CROP, 5, crops_per_epoch=10, device="gpu", output="numpy",
        cache_bytes=64 << 20, device_cache_bytes=64 << 20,
    )  # fmt: skip
    read_all(loader)
    assert loader.device_cache is not None
    loader.device_cache.clear()  # as if evicted from the device: the host level answers
    for batch in loader:
        assert_batch_matches(batch, sources, CROP)
    stats = loader.cache_stats()
    assert stats["host"].hits > 0 and stats["device"].entries == stats["host"].entries


def test_resume_on_the_gpu_path(emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]) -> None:
    def make() -> CropLoader:
        return CropLoader(cpu_volumes, CROP, 3, crops_per_epoch=18, seed=5, device="gpu", output="numpy")

    expected = read_all(make())[0]
    first = make()
    iterator = iter(first)
    next(iterator), next(iterator)
    second = make()
    second.load_state_dict(first.state_dict())
    assert read_all(second)[0] == expected[6:]


def test_a_gpu_loader_refuses_to_run_in_a_forked_child(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]
) -> None:
    loader = CropLoader(cpu_volumes, CROP, 3, crops_per_epoch=6, device="gpu", output="numpy", prefetch=0)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a process with threads
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = b"no error"
        try:
            next(iter(loader))
        except DeviceError as exc:
            code = b"ok" if "forked process" in str(exc) and "spawn" in str(exc) else str(exc).encode()
        except BaseException as exc:
            code = repr(exc).encode()
        finally:
            os.write(write, code)
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = pipe.read()
    os.waitpid(pid, 0)
    assert report == b"ok"
    # the parent goes on
    assert len(next(iter(loader))) == 3


@needs_torch
def test_a_gpu_loader_cannot_be_a_dataset_for_workers(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]
) -> None:
    loader = CropLoader(cpu_volumes, CROP, 3, device="gpu", output="numpy")
    with pytest.raises(InvalidArgumentError, match="Iterate the CropLoader itself"):
        loader.as_dataset()


def test_a_batch_from_the_device_cache_is_one_assemble_launch(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]]
) -> None:
    loader = CropLoader(
        cpu_volumes[0], CROP, 5, crops_per_epoch=25, seed=3, device="gpu", output="numpy",
        device_cache_bytes=64 << 20, prefetch=0,
    )  # fmt: skip
    read_all(loader)  # reads every chunk the crops cross into the device cache
    before = Counter(emulated_gpu.names())
    pieces_before = [pieces for name, pieces in emulated_gpu.calls() if name == "assemble_chunks"]
    loader.set_epoch(0)  # the same crops again
    batches = list(loader)
    assert len(batches) == 5
    for batch in batches:
        assert_batch_matches(batch, sources[:1], CROP)
    # Nothing decoded again, and each batch's pieces (several per crop) copied in one launch.
    assert Counter(emulated_gpu.names()) - before == Counter({"assemble_chunks": 5})
    pieces = [pieces for name, pieces in emulated_gpu.calls() if name == "assemble_chunks"]
    assert sum(pieces) - sum(pieces_before) > 5 * 5


def _decodes(gpu: EmulatedGpu) -> int:
    return sum(1 for name in gpu.names() if name == "zstd")


def test_decoding_ahead_reads_the_chunks_of_many_batches_at_once(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]]
) -> None:
    crops = [(0, (o, o % 7, o % 5)) for o in range(12)] * 2  # 24 crops, 8 batches of 3

    def chunk_shapes(origins: list[tuple[int, ...]]) -> set[tuple[int, ...]]:
        """The shapes of the chunks (8^3, cut at the volume's end) the crops at ``origins`` cross:
        one read of whole chunks each."""
        return {
            tuple(min(8, n - k * 8) for k, n in zip(coords, SHAPES[0], strict=True))
            for origin in origins
            for coords in itertools.product(*(range(o // 8, (o + c - 1) // 8 + 1) for o, c in zip(origin, CROP)))
        }

    def run(**options: Any) -> int:
        before = _decodes(emulated_gpu)
        loader = CropLoader(cpu_volumes, CROP, 3, sampler=crops, shuffle=False, device="gpu", output="numpy", **options)
        batches = list(loader)
        assert len(batches) == 8
        for batch in batches:
            assert_batch_matches(batch, sources, CROP)
        return _decodes(emulated_gpu) - before

    # Every batch's own read: one decode each; decoded ahead: one per chunk shape for all 8.
    assert run(decode_ahead_bytes=0) == 8
    assert run() == len(chunk_shapes([o for _, o in crops])) < 8
    # A budget below one batch's chunks: one batch at a time, one decode per chunk shape.
    per_batch = [len(chunk_shapes([o for _, o in crops[b : b + 3]])) for b in range(0, 24, 3)]
    assert run(decode_ahead_bytes=1) == sum(per_batch)
    assert run(prefetch=0) == 8  # only the background reader decodes ahead


def test_decoding_ahead_keeps_to_its_budget(emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]) -> None:
    loader = CropLoader(cpu_volumes[0], CROP, 3, crops_per_epoch=24, seed=1, device="gpu", output="numpy")
    assembler = ChunkAssembler(loader.volumes, CROP, loader._ordering_now(), None, None)
    batches = loader.epoch_batches()
    chunk_bytes = 8**3 * 2
    # How many chunks the first k batches cross together, k = 1, 2, ...
    union: set[tuple[int, ...]] = set()
    crossed = []
    for b in batches:
        union |= assembler.chunks_of(b, {})[("", 0)]
        crossed.append(len(union))
    assert assembler.decode_ahead(batches, 1) == 1  # always at least one batch
    for budget_chunks in sorted(set(crossed)):
        taken = assembler.decode_ahead(batches, budget_chunks * chunk_bytes)
        # as many batches as fit, up to the first that would cross more chunks than that
        assert taken == next((k for k, n in enumerate(crossed) if n > budget_chunks), len(batches))
        assert len(assembler._ahead) == crossed[taken - 1] <= budget_chunks


def test_a_corrupt_chunk_decoded_ahead_names_its_key_volume_and_crop(
    emulated_gpu: EmulatedGpu, sources: list[np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"v{i}.zarr"), s, "v3-gzip") for i, s in enumerate(sources)]
    (tmp_path / "v1.zarr" / "c" / "0" / "0" / "0").write_bytes(b"\x1f\x8b not gzip at all")
    crops = [(0, (0, 0, 0)), (0, (3, 3, 3)), (1, (2, 3, 1)), (1, (0, 0, 0))]
    loader = CropLoader(volumes, CROP, 2, sampler=crops, shuffle=False, device="gpu", output="numpy")
    batches = iter(loader)
    assert_batch_matches(next(batches), sources, CROP)  # the first batch is whole
    with pytest.raises(CorruptChunkError, match=r"c/0/0/0: .*while reading volume 1: volume 1 crop \[2:7, 3:9, 1:8\]"):
        next(batches)


def test_decode_ahead_bytes_is_checked(
    tmp_path: Path, emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]
) -> None:
    with pytest.raises(InvalidArgumentError, match="decode_ahead_bytes: decoding ahead is for GPU loaders"):
        CropLoader(cpu_volumes, CROP, 2, device="cpu", decode_ahead_bytes=1 << 20)
    CropLoader(cpu_volumes, CROP, 2, device="cpu", decode_ahead_bytes=0)
    with pytest.raises(InvalidArgumentError, match="decode_ahead_bytes"):
        CropLoader(cpu_volumes, CROP, 2, device="gpu", decode_ahead_bytes=-1)
    rectilinear = gpuzarr.create(
        gpuzarr.LocalStore(tmp_path / "r.zarr"), shape=(19, 17, 16), dtype="uint16", chunks=[[10, 9], 8, 8]
    )
    with pytest.raises(InvalidArgumentError, match=r"decode_ahead_bytes: .* rectilinear chunk grid"):
        CropLoader(rectilinear, CROP, 2, device="gpu", decode_ahead_bytes=1 << 20)
    plain = CropLoader(rectilinear, CROP, 2, crops_per_epoch=4, device="gpu", output="numpy")
    assert sum(len(b) for b in plain) == 4  # off by default there


def test_a_second_lane_decodes_the_next_window_while_batches_are_put_together(
    emulated_gpu: EmulatedGpu,
    cpu_volumes: list[gpuzarr.Array],
    sources: list[np.ndarray[Any, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``decode_ahead_lanes=2``: the same batches as one lane, each window within half the
    budget, every window after the first decoded on the second lane's thread (started before
    the batches of the window before it are put together)."""
    from gpuzarr.loader.chunked import ChunkAssembler as Assembler

    events: list[tuple[str, str, int]] = []
    decode_window, read = Assembler.decode_window, Assembler.read
    second_started = threading.Event()
    overlapped: list[bool] = []

    def logged_decode(self: Assembler, batches: Any, budget: int, lane: Any = None) -> Any:
        events.append(("decode", threading.current_thread().name, budget))
        if sum(e[0] == "decode" for e in events) == 2:
            second_started.set()
        return decode_window(self, batches, budget, lane)

    def logged_read(self: Assembler, field: str, volume: int, origins: Any, out: Any) -> None:
        events.append(("read", threading.current_thread().name, 0))
        if not overlapped:
            # The first window's first batch: with a second lane, the next window's decode has
            # started (on its thread); one lane would start it only after this window's batches.
            overlapped.append(second_started.wait(timeout=5))
        read(self, field, volume, origins, out)

    monkeypatch.setattr(Assembler, "decode_window", logged_decode)
    monkeypatch.setattr(Assembler, "read", logged_read)
    chunk_bytes = 8**3 * 2

    def run(lanes: int) -> tuple[list[Any], list[Any]]:
        loader = CropLoader(
            cpu_volumes, CROP, 3, crops_per_epoch=36, seed=5, device="gpu", output="numpy",
            decode_ahead_bytes=24 * chunk_bytes, decode_ahead_lanes=lanes,
        )  # fmt: skip
        return read_all(loader)

    second_started.set()  # one lane: nothing to wait for
    one = run(1)
    events.clear()
    overlapped.clear()
    second_started.clear()
    two = run(2)
    assert overlapped == [True]
    assert one[0] == two[0] and all(np.array_equal(a, b) for a, b in zip(one[1], two[1], strict=True))
    stacked = np.concatenate(two[1])
    for (volume, origin), crop in zip(two[0], stacked, strict=True):
        box = tuple(slice(o, o + c) for o, c in zip(origin, CROP, strict=True))
        assert np.array_equal(crop, sources[volume][box])
    decodes = [e for e in events if e[0] == "decode"]
    assert len(decodes) >= 3  # several windows
    assert {budget for _, _, budget in decodes} == {12 * chunk_bytes}  # half the budget each
    assert decodes[0][1].startswith("gpuzarr-loader") and not decodes[0][1].startswith("gpuzarr-loader-decode")
    assert all(thread.startswith("gpuzarr-loader-decode") for _, thread, _ in decodes[1:])


def test_decode_ahead_lanes_is_checked(emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]) -> None:
    for lanes in (0, 3, True, "2"):
        with pytest.raises(InvalidArgumentError, match="decode_ahead_lanes: expected 1 or 2"):
            CropLoader(cpu_volumes, CROP, 2, device="gpu", decode_ahead_lanes=lanes)
    for options in ({"device": "cpu"}, {"device": "gpu", "prefetch": 0}, {"device": "gpu", "decode_ahead_bytes": 0}):
        with pytest.raises(InvalidArgumentError, match="decode_ahead_lanes: a second lane decodes ahead"):
            CropLoader(cpu_volumes, CROP, 2, decode_ahead_lanes=2, **options)


class _Stream:
    """A stand-in CUDA stream: the emulated device takes any object for its stream."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class _Event:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def synchronize(self) -> None:
        return None


@pytest.mark.parametrize("device_cache", [0, 64 << 20])
def test_a_second_lane_decodes_on_its_own_stream_and_hands_windows_over_with_events(
    emulated_gpu: EmulatedGpu,
    cpu_volumes: list[gpuzarr.Array],
    sources: list[np.ndarray[Any, Any]],
    monkeypatch: pytest.MonkeyPatch,
    device_cache: int,
) -> None:
    """With streams (stand-ins here), the second lane reads each window on a stream of its own;
    the loader's stream waits for the event the lane recorded after a window's reads before any
    batch is put together from it, and before a lane's window is let go of, the lane's stream
    waits for an event recorded on the loader's stream (its memory goes back to the lane's
    pool). Chunks for the device cache are copied on the producer's thread, not the lane's."""
    from gpuzarr.backends.cuda import handoff
    from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice
    from gpuzarr.loader.cache import ChunkCache

    streams: list[_Stream] = []
    log: list[tuple[str, Any, Any, str]] = []
    lock = threading.Lock()

    def side_stream(reader: Any, owner: object) -> _Stream:
        streams.append(_Stream(f"stream-{len(streams)}"))
        return streams[-1]

    def note(what: str, stream: Any, event: Any = None) -> None:
        with lock:
            log.append((what, stream, event, threading.current_thread().name))

    class LoggingDevice(CpuEmulatedDevice):
        def record(self) -> Any:
            event = _Event(self.stream)
            note("record", self.stream, event)
            return event

        def wait_for(self, event: Any) -> None:
            super().wait_for(event)
            note("wait", self.stream, event)

        def decompress_batch(self, *args: Any, **kwargs: Any) -> Any:
            note("decode", self.stream)
            return super().decompress_batch(*args, **kwargs)

        def assemble_boxes(self, *args: Any, **kwargs: Any) -> Any:
            note("assemble", self.stream)
            return super().assemble_boxes(*args, **kwargs)

    puts: list[str] = []
    put, decode_window = ChunkCache.put, ChunkAssembler.decode_window

    def logged_put(self: ChunkCache, key: Any, value: Any, generation: int | None = None) -> bool:
        puts.append(threading.current_thread().name)
        note("put", None)
        return put(self, key, value, generation)

    def logged_window(self: ChunkAssembler, batches: Any, budget: int, lane: Any = None) -> Any:
        note("window", None)
        return decode_window(self, batches, budget, lane)

    monkeypatch.setattr(handoff, "side_stream", side_stream)
    monkeypatch.setattr(ChunkCache, "put", logged_put)
    monkeypatch.setattr(ChunkAssembler, "decode_window", logged_window)
    emulated_gpu.device_class = LoggingDevice
    chunk_bytes = 8**3 * 2
    loader = CropLoader(
        cpu_volumes, CROP, 3, crops_per_epoch=36, seed=5, device="gpu", output="numpy",
        decode_ahead_bytes=24 * chunk_bytes, decode_ahead_lanes=2, device_cache_bytes=device_cache,
    )  # fmt: skip
    origins, crops = read_all(loader)
    stacked = np.concatenate(crops)
    for (volume, origin), crop in zip(origins, stacked, strict=True):
        box = tuple(slice(o, o + c) for o, c in zip(origin, CROP, strict=True))
        assert np.array_equal(crop, sources[volume][box])

    side, lane = streams  # the loader's and, made once, its second lane's
    waited = _check_lane_windows(log, side, lane)
    if device_cache:
        assert puts and set(puts) == {"gpuzarr-loader"}
        _check_puts_after_waits([e for e in log if e[3] == "gpuzarr-loader"], side, lane, waited)
    else:
        assert not puts


Logged = list[tuple[str, Any, Any, str]]


def _check_lane_windows(log: Logged, side: _Stream, lane: _Stream) -> list[_Event]:
    """The stream orderings of a pass with a second lane (see the test above); the lane windows'
    events the side stream waited for."""
    lane_thread = [e for e in log if e[3].startswith("gpuzarr-loader-decode")]
    producer = [e for e in log if e[3] == "gpuzarr-loader"]
    assert {e[1] for e in lane_thread if e[0] == "decode"} == {lane}
    assert {e[1] for e in producer if e[0] in ("decode", "assemble")} == {side}  # the first window, every batch
    recorded = [e[2] for e in lane_thread if e[0] == "record"]  # the windows' events, and the reads' own
    waited = [e[2] for e in producer if e[0] == "wait" and e[1] is side and e[2].stream is lane]
    assert len(waited) >= 2  # several windows decoded on the lane
    positions = [next(i for i, r in enumerate(recorded) if r is w) for w in waited]
    assert positions == sorted(set(positions))  # events of the lane's reads, each once, in order
    for event in waited:
        # Recorded after every read of its window: no decode follows it before the next window.
        at = next(i for i, e in enumerate(lane_thread) if e[2] is event)
        rest = [e[0] for e in lane_thread[at + 1 :]]
        assert "decode" not in (rest[: rest.index("window")] if "window" in rest else rest)
        assert "decode" in [e[0] for e in lane_thread[:at]]
        # Waited for before any batch of the window is put together, and (after the first lane
        # window) right after the lane's stream was told to wait for the window before's batches.
        at = producer.index(("wait", side, event, "gpuzarr-loader"))
        after = [e[0] for e in producer[at + 1 :] if e[0] in ("assemble", "wait")]
        assert after[:1] == ["assemble"]
        if event is not waited[0]:
            record, wait = producer[at - 2], producer[at - 1]
            assert (record[0], record[1], wait[0], wait[1]) == ("record", side, "wait", lane)
            assert wait[2] is record[2]
    # The last lane window let go of at the end of the pass, the same way.
    last_wait = max(i for i, e in enumerate(producer) if e[0] == "wait" and e[1] is lane)
    assert last_wait > producer.index(("wait", side, waited[-1], "gpuzarr-loader"))
    return waited


def _check_puts_after_waits(producer: Logged, side: _Stream, lane: _Stream, waited: list[_Event]) -> None:
    """A lane window's chunks go into the device cache after the side stream waited for the
    window (the puts before the first such wait are the first window's, read on the side)."""
    first = producer.index(("wait", side, waited[0], "gpuzarr-loader"))
    for i, entry in enumerate(producer):
        if entry[0] == "put" and i > first:
            before = [e for e in producer[:i] if e[0] == "assemble" or (e[0] == "wait" and e[1] is side)]
            assert before[-1][0] == "wait" and before[-1][2].stream is lane


def test_stopping_a_pass_stops_the_second_lane(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]]
) -> None:
    loader = CropLoader(
        cpu_volumes, CROP, 2, crops_per_epoch=40, device="gpu", output="numpy",
        decode_ahead_bytes=8 * 8**3 * 2, decode_ahead_lanes=2,
    )  # fmt: skip
    for i, batch in enumerate(loader):
        assert_batch_matches(batch, sources, CROP)
        if i == 2:
            break
    loader.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gpuzarr-loader-decode") and t.is_alive()]


def test_a_gpu_loader_reads_one_batch_at_a_time(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]]
) -> None:
    with pytest.raises(InvalidArgumentError, match="concurrent_batches: a loader on cuda:0 reads one batch at a time"):
        CropLoader(cpu_volumes, CROP, 2, device="gpu", output="numpy", concurrent_batches=2)
    loader = CropLoader(cpu_volumes, CROP, 2, crops_per_epoch=8, device="gpu", output="numpy", concurrent_batches=1)
    iterator = iter(loader)
    assert_batch_matches(next(iterator), sources, CROP)
    assert len(loader_threads()) == 1  # the default too
    del iterator


def test_decoding_ahead_defaults_to_the_batch_budget_up_to_256_mib(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]
) -> None:
    # The default window was measured with the batch budget's old cap (256 MiB); a larger
    # budget (its cap is now 1 GiB) does not grow it.
    from gpuzarr.loader.crop_loader import DEFAULT_AHEAD_BYTES

    assert DEFAULT_AHEAD_BYTES == 256 << 20
    loader = CropLoader(cpu_volumes, CROP, 2, device="gpu", output="numpy")
    ordering = loader._ordering_now()
    for budget, ahead in ((1 << 30, 256 << 20), (64 << 20, 64 << 20)):
        with gpuzarr.config.set(gpu_batch_bytes=budget):
            assert loader._ahead_bytes(ordering) == ahead
    with gpuzarr.config.set(gpu_batch_bytes=1 << 30):
        explicit = CropLoader(cpu_volumes, CROP, 2, device="gpu", output="numpy", decode_ahead_bytes=512 << 20)
        assert explicit._ahead_bytes(explicit._ordering_now()) == 512 << 20
    loader.close()
    explicit.close()


def test_a_gpu_loader_let_go_takes_its_ordering_with_it(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array]
) -> None:
    """Nothing keeps a closed, dropped GPU loader's ordering alive: on a GPU its finalizer is
    what lets the side stream's nvCOMP codecs go."""
    import gc
    import weakref

    loader = CropLoader(cpu_volumes, CROP, 4, crops_per_epoch=24, device="gpu", output="numpy")
    kept = [batch for _ in range(2) for batch in loader][-1]  # the last batch stays referenced
    ordering = weakref.ref(loader._ordering)
    assert ordering() is not None
    loader.close()
    del loader
    gc.collect()
    assert ordering() is None
    assert kept.data.shape == (4, *CROP)  # and the batch handed out stays valid


def test_untrusted_payloads_are_decoded_on_the_cpu_for_a_gpu_loader(
    emulated_gpu: EmulatedGpu, cpu_volumes: list[gpuzarr.Array], sources: list[np.ndarray[Any, Any]]
) -> None:
    """``gpu_trust_payloads=False``: the loader's windows, its second lane and its device cache
    give the same crops, and no compressed chunk reaches the device's decoder."""
    with gpuzarr.config.set(gpu_trust_payloads=False):
        loader = CropLoader(
            cpu_volumes, CROP, 3, crops_per_epoch=24, seed=2, device="gpu", output="numpy",
            device_cache_bytes=1 << 20, decode_ahead_lanes=2, decode_ahead_bytes=24 * 8**3 * 2,
        )  # fmt: skip
        for batch in loader:
            assert_batch_matches(batch, sources, CROP)
    assert not [name for name in emulated_gpu.names() if name in ("zstd", "deflate", "lz4")]
    assert "assemble_chunks" in emulated_gpu.names()


def _two_filled_volumes(tmp_path: Path, device: str) -> list[gpuzarr.Array]:
    arrays = []
    for i in range(2):
        array = gpuzarr.create(str(tmp_path / f"{i}.zarr"), shape=(16, 16), dtype="i4", chunks=(8, 8), device=device)
        array[...] = 1
        arrays.append(array)
    return arrays


def _values_of(batches: Any, volume: int) -> set[int]:
    return {int(v) for b in batches for v in np.unique(np.asarray(b.data)[b.volume_index == volume])}


def test_chunks_read_ahead_of_a_volumes_first_batch_go_when_it_is_written(
    emulated_gpu: EmulatedGpu, tmp_path: Path
) -> None:
    """The first window read volume 1's chunks into the device cache before any batch of it;
    a write then became the generation its first batch saw, and every later epoch read the
    old values from the cache."""
    arrays = _two_filled_volumes(tmp_path, "gpu")
    crops = [(0, (0, 0))] * 8 + [(1, (0, 0)), (1, (8, 8))]
    loader = CropLoader(arrays, (8, 8), 2, sampler=crops, shuffle=False, device="gpu", output="numpy",
                        prefetch=1, device_cache_bytes=1 << 20)  # fmt: skip
    for _ in loader:
        break
    arrays[1][...] = 5
    for epoch in (1, 2):
        loader.set_epoch(epoch)
        assert _values_of(loader, 1) == {5}


def test_chunks_decoded_ahead_of_their_batch_go_when_the_volume_is_written(
    emulated_gpu: EmulatedGpu, tmp_path: Path
) -> None:
    """Within one pass: volume 1's later batches, not prefetched when the write came, showed
    the old values the window had read ahead."""
    arrays = _two_filled_volumes(tmp_path, "gpu")
    crops = [(0, (0, 0))] * 8 + [(1, (0, 0)), (1, (8, 8))] * 2
    loader = CropLoader(arrays, (8, 8), 2, sampler=crops, shuffle=False, device="gpu", output="numpy",
                        prefetch=1, cache_bytes=1 << 20)  # fmt: skip
    batches = iter(loader)
    next(batches)
    arrays[1][...] = 5
    later = [b for b in batches if b.index >= 4]
    assert [_values_of([b], 1) for b in later] == [{5}, {5}]


@pytest.mark.parametrize("cache", ["cache_bytes", "device_cache_bytes"])
def test_a_gpu_loader_sees_writes_through_cpu_opened_arrays(
    emulated_gpu: EmulatedGpu, tmp_path: Path, cache: str
) -> None:
    """The loader reads CPU-opened arrays through twins opened on the GPU: a write through the
    Array the user gave never moved the twin's generation, and the caches served the old data."""
    arrays = _two_filled_volumes(tmp_path, "cpu")
    loader = CropLoader(arrays, (8, 8), 4, sampler="grid", shuffle=False, device="gpu", output="numpy",
                        **{cache: 1 << 20})  # fmt: skip
    assert loader.volumes.arrays[""][0] is not arrays[0]
    assert _values_of(loader, 0) == {1}
    arrays[0][...] = 2
    assert _values_of(loader, 0) == {2}


@pytest.mark.parametrize(
    "options", [{"device_cache_bytes": 1 << 16}, {"cache_bytes": 1 << 16}, {"decode_ahead_bytes": 1 << 16}]
)
def test_eight_dimensional_crops_are_read_on_the_gpu_without_assembly(
    emulated_gpu: EmulatedGpu, tmp_path: Path, options: dict[str, int]
) -> None:
    """Crops of 8 dimensions: decoding ahead (the default) and the caches put them together with
    copies of at most 8 dimensions, the batch's among them, and the first batch raised a bare
    ValueError. Decoding ahead is off by default for them; asked for, it is refused by name."""
    shape = (3, 3, 2, 2, 2, 2, 2, 2)
    data = np.arange(np.prod(shape), dtype="i4").reshape(shape)
    array = gpuzarr.create(str(tmp_path / "v.zarr"), shape=shape, dtype="i4", chunks=(2,) * 8, device="gpu")
    array[...] = data
    crop = (2,) * 8
    loader = CropLoader(array, crop, 2, crops_per_epoch=4, device="gpu", output="numpy")
    for batch in loader:
        for origin, got in zip(batch.origins, batch.data, strict=True):
            np.testing.assert_array_equal(got, data[tuple(slice(o, o + 2) for o in origin)])
    with pytest.raises(InvalidArgumentError, match="at most 7 dimensions; these have 8"):
        CropLoader(array, crop, 2, crops_per_epoch=4, device="gpu", output="numpy", **options)


def test_types_cupy_cannot_hold_stay_on_the_cpu_or_are_refused(emulated_gpu: EmulatedGpu) -> None:
    """bfloat16 volumes: device="auto" reads them on the CPU (device="gpu" reads their bits:
    the test below); a type that no integer of its size carries is refused, named."""
    import ml_dtypes

    data = (values((12, 12, 12), salt=9).astype("float32") / 4).astype(ml_dtypes.bfloat16)
    volume = make_volume(gpuzarr.MemoryStore(), data, "v3-sharded-zstd", device="cpu")
    loader = CropLoader(volume, CROP, 3, crops_per_epoch=6, device="auto", output="numpy")
    assert loader.device == "cpu"
    for batch in loader:
        assert batch.data.dtype == data.dtype
        assert_batch_matches(batch, [data], CROP)
    times = make_volume(gpuzarr.MemoryStore(), data.astype("float32").astype("<M8[s]"), "v3-gzip", device="cpu")
    with pytest.raises(DeviceError, match=r"datetime64"):
        CropLoader(times, CROP, 3, device="gpu", output="numpy")


def test_a_cpu_opened_volume_resized_under_a_gpu_loader_is_named(emulated_gpu: EmulatedGpu) -> None:
    """The loader reads a CPU-opened array through a GPU twin, which keeps the shape it was
    made with: a resize of the user's handle went unseen, and the erased rows came as fill."""
    data = values((16, 12, 10), salt=3)
    volume = make_volume(gpuzarr.MemoryStore(), data, "v3-sharded-zstd", device="cpu")
    loader = CropLoader(volume, CROP, 2, crops_per_epoch=4, device="gpu", output="numpy")
    assert sum(len(b) for b in loader) == 4
    volume.resize((6, 12, 10))
    with pytest.raises(InvalidArgumentError, match=r"volume 0 was resized from \(16, 12, 10\) to \(6, 12, 10\)"):
        list(loader)


@pytest.mark.parametrize("output", ["numpy", pytest.param("torch", marks=needs_torch)])
@pytest.mark.parametrize("device_cache", [0, 16 << 20])
def test_bfloat16_and_float8_volumes_are_read_as_their_bits_on_the_gpu(
    emulated_gpu: EmulatedGpu, tmp_path: Path, output: str, device_cache: int
) -> None:
    """CuPy holds no ``bfloat16``: such volumes are read on the device as the int16 of their
    bits (the codecs never look at the values) and handed over as ``bfloat16`` (a tensor of it,
    or ml_dtypes' type). They were refused on a GPU. Missing chunks come as the fill value's
    bits; a paired float8 field comes as its own type."""
    import ml_dtypes

    rng = np.random.default_rng(5)
    latents = rng.standard_normal((19, 17, 16)).astype(ml_dtypes.bfloat16)
    latents[:8] = 1.5  # the fill value: those chunks are not stored
    scales = rng.standard_normal((19, 17, 16)).astype(ml_dtypes.float8_e4m3fn)
    scales[10:] = 0.5
    data = {
        "latent": make_volume(gpuzarr.LocalStore(tmp_path / "l.zarr"), latents, device="cpu", fill_value=1.5),
        "scale": make_volume(
            gpuzarr.LocalStore(tmp_path / "s.zarr"), scales, "v3-gzip", device="cpu", fill_value=0.5
        ),
    }
    assert data["scale"].nchunks_initialized < data["scale"].nchunks
    loader = CropLoader(
        data, CROP, 5, crops_per_epoch=20, device="gpu", output=output, device_cache_bytes=device_cache
    )
    assert loader.volumes.dtypes == {"latent": np.dtype("int16"), "scale": np.dtype("uint8")}
    for _ in range(2):
        for batch in loader:
            for name, source in (("latent", latents), ("scale", scales)):
                got = batch.data[name]
                if output == "torch":
                    import torch

                    assert got.dtype == getattr(torch, source.dtype.name)
                    got = got.view(torch.uint8 if source.dtype.itemsize == 1 else torch.int16).numpy()
                    got = got.view(source.dtype)
                assert got.dtype == source.dtype
                assert_batch_matches(Batch(got, batch.origins, batch.volume_index, 0), [source], CROP)
    with pytest.raises(InvalidArgumentError, match=r"output='cupy': CuPy arrays cannot hold bfloat16, float8_e4m3fn"):
        CropLoader(data, CROP, 5, device="gpu", output="cupy")
    # A codec that computes with the values cannot read bits: the message says so.
    delta = [{"name": "numcodecs.delta", "configuration": {"dtype": "bfloat16"}}, LE]
    computed = make_volume(gpuzarr.LocalStore(tmp_path / "d.zarr"), latents, "v3-gzip", device="cpu", codecs=delta)
    with pytest.raises(DeviceError, match=r"volume 0 cannot be read on cuda:0: the codec 'numcodecs.delta' computes"):
        CropLoader(computed, CROP, 5, device="gpu", output=output)
    # A type PyTorch has no tensor of: only NumPy output is offered.
    nibbles = make_volume(gpuzarr.MemoryStore(), (latents.view("int16") % 7).astype(ml_dtypes.int4), device="cpu")
    with pytest.raises(InvalidArgumentError, match=r"cannot hold int4; pass output='numpy'$"):
        CropLoader(nibbles, CROP, 5, device="gpu", output="cupy")


def test_float8_e5m2_arrays_open_on_the_cpu_as_the_other_ml_types() -> None:
    """ml_dtypes gives float8_e5m2 NumPy's float kind: it was taken for a type CuPy holds, and
    opened on the GPU with device="auto" (the other float8 types and bfloat16 opened on the CPU)."""
    import ml_dtypes

    from gpuzarr.backends.select import cupy_supports

    for name in ("float8_e5m2", "float8_e4m3fn", "bfloat16"):
        assert not cupy_supports(np.dtype(getattr(ml_dtypes, name))), name
    assert cupy_supports(np.dtype("float16"))
