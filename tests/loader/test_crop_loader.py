"""CropLoader on the CPU: every batch equals NumPy slicing of its source at ``batch.origins``,
for each layout, output, prefetch and cache; determinism, rank shares, resuming, paired fields,
the grid sampler, buffer reuse, and errors that name the volume and crop."""

from __future__ import annotations

import gc
import pickle
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError, GpuZarrError, InvalidArgumentError, PassEndedError
from gpuzarr.loader import Batch, CropLoader

from .helpers import (
    LAYOUTS,
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
    from pathlib import Path

CROP = (6, 5, 7)
SHAPES = [(20, 18, 16), (13, 24, 9)]


@pytest.fixture
def sources() -> list[np.ndarray[Any, Any]]:
    return [values(s, salt=i) for i, s in enumerate(SHAPES)]


def _volumes(sources: list[np.ndarray[Any, Any]], layout: str = "v3-sharded-zstd") -> list[gpuzarr.Array]:
    return [make_volume(gpuzarr.MemoryStore(), s, layout) for s in sources]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("prefetch", [0, 2])
def test_every_batch_equals_numpy_slicing(
    sources: list[np.ndarray[Any, Any]], layout: str, output: str, prefetch: int
) -> None:
    loader = CropLoader(_volumes(sources, layout), CROP, 7, crops_per_epoch=40, output=output, prefetch=prefetch)
    batches = 0
    for batch in loader:
        assert_batch_matches(batch, sources, CROP)
        if output == "torch":
            import torch

            assert isinstance(batch.data, torch.Tensor) and batch.data.device.type == "cpu"
        else:
            assert isinstance(batch.data, np.ndarray)
        # one read per volume: the crops of a batch come grouped by volume
        assert (np.diff(batch.volume_index) >= 0).all()
        batches += 1
    assert batches == len(loader) == 6  # 40 crops: 5 of 7, then 5
    assert len(batch) == 5


def test_batches_mix_volumes_in_proportion_to_their_origins(sources: list[np.ndarray[Any, Any]]) -> None:
    loader = CropLoader(_volumes(sources), CROP, 16, crops_per_epoch=320, output="numpy", seed=3)
    volumes = np.concatenate([b.volume_index for b in loader])
    # 15*14*10 = 2100 and 8*20*3 = 480 valid origins
    assert 0.1 < (volumes == 1).mean() < 0.3


def test_paired_fields_are_cropped_at_the_same_origins() -> None:
    shape = (21, 17, 12)
    images = [values(shape, "<u2", salt=1), values((15, 17, 12), "<u2", salt=2)]
    labels = [(im % 5).astype("u1") for im in images]
    data = {
        "image": [make_volume(gpuzarr.MemoryStore(), im, "v3-gzip") for im in images],
        "label": [make_volume(gpuzarr.MemoryStore(), lb, "v2-blosc-lz4") for lb in labels],
    }
    loader = CropLoader(data, CROP, 6, crops_per_epoch=24, output="numpy")
    for batch in loader:
        assert set(batch.data) == {"image", "label"}
        assert batch.data["image"].dtype == np.uint16 and batch.data["label"].dtype == np.uint8
        assert_batch_matches(Batch(batch.data["image"], batch.origins, batch.volume_index, 0), images, CROP)
        assert_batch_matches(Batch(batch.data["label"], batch.origins, batch.volume_index, 0), labels, CROP)


def test_the_grid_sampler_covers_every_voxel(sources: list[np.ndarray[Any, Any]]) -> None:
    loader = CropLoader(_volumes(sources), CROP, 8, sampler="grid", shuffle=False, output="numpy")
    covered = [np.zeros(s.shape, dtype=bool) for s in sources]
    seen = []
    for batch in loader:
        assert_batch_matches(batch, sources, CROP)
        for v, origin in zip(batch.volume_index, batch.origins):
            covered[v][tuple(slice(o, o + c) for o, c in zip(origin, CROP))] = True
            seen.append((int(v), tuple(origin)))
    assert all(c.all() for c in covered)
    assert len(seen) == len(set(seen)) == loader.crops_per_epoch  # each tile once
    assert [v for v, _ in seen] == sorted(v for v, _ in seen)  # volume after volume


def test_the_default_epoch_has_as_many_crops_as_grid_tiles(sources: list[np.ndarray[Any, Any]]) -> None:
    grid = CropLoader(_volumes(sources), CROP, 4, sampler="grid", output="numpy")
    random = CropLoader(_volumes(sources), CROP, 4, output="numpy")
    assert random.crops_per_epoch == grid.crops_per_epoch == len(grid.epoch_crops())
    assert len(random) == -(-random.crops_per_epoch // 4)


def test_listed_crops_are_read_in_their_order(sources: list[np.ndarray[Any, Any]]) -> None:
    crops = [(1, (0, 0, 0)), (0, (14, 13, 9)), (1, (7, 19, 2))]
    loader = CropLoader(_volumes(sources), CROP, 1, sampler=crops, shuffle=False, output="numpy")
    got = list(loader)
    assert crop_list(got) == crops
    for b in got:
        assert_batch_matches(b, sources, CROP)
    # The same pairs as a NumPy array (it was compared with "random" element by element).
    listed = np.array(crops, dtype=object)
    again = CropLoader(_volumes(sources), CROP, 1, sampler=listed, shuffle=False, output="numpy")
    assert crop_list(list(again)) == crops


def test_dict_keys_naming_one_field_are_refused(sources: list[np.ndarray[Any, Any]]) -> None:
    # str() of the keys made {1: image, "1": label} one field, losing the image silently.
    volumes = _volumes(sources)
    with pytest.raises(InvalidArgumentError, match=r"^arrays: the keys 1, '1' name one field '1'$"):
        CropLoader({1: volumes, "1": volumes}, CROP, 1, crops_per_epoch=2, output="numpy")
    loader = CropLoader({0: volumes, 1: volumes}, CROP, 2, crops_per_epoch=2, output="numpy")
    assert set(next(iter(loader)).data) == {"0", "1"}  # names are strings, as before


def test_two_runs_give_identical_batches_and_epochs_differ(sources: list[np.ndarray[Any, Any]]) -> None:
    def make(seed: int = 7) -> CropLoader:
        return CropLoader(_volumes(sources), CROP, 5, crops_per_epoch=20, seed=seed, output="numpy")

    first, second = make(), make()
    crops_a, data_a = read_all(first)
    crops_b, data_b = read_all(second)
    assert crops_a == crops_b and all(np.array_equal(a, b) for a, b in zip(data_a, data_b))
    assert read_all(first)[0] == crops_a  # without set_epoch an iteration repeats the epoch
    first.set_epoch(1)
    assert read_all(first)[0] != crops_a
    assert read_all(make(seed=8))[0] != crops_a


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("sampler", ["random", "grid"])
def test_ranks_read_disjoint_shares_that_make_the_epoch(
    sources: list[np.ndarray[Any, Any]], drop_last: bool, sampler: str
) -> None:
    volumes = _volumes(sources)

    def make(rank: int, world: int) -> CropLoader:
        return CropLoader(
            volumes, CROP, 3, sampler=sampler, crops_per_epoch=29, seed=2, rank=rank, world_size=world,
            drop_last=drop_last, output="numpy",
        )  # fmt: skip

    whole = make(0, 1).epoch_crops()
    epoch = [(int(v), tuple(o)) for v, o in zip(whole.volumes, whole.origins.tolist())]
    shares = []
    for rank in range(4):
        loader = make(rank, 4)
        crops, data = read_all(loader)
        assert len(crops) == loader.rank_crop_count() - (loader.rank_crop_count() % 3 if drop_last else 0)
        assert sum(len(d) for d in data) == len(crops)
        shares.append(loader.epoch_crops())
    # DistributedSampler's split of the epoch's positions: 29 crops -> 8 each (3 padded) or 7 (1 cut)
    positions = np.arange(32 if not drop_last else 28) % 29
    for rank, share in enumerate(shares):
        expected = [epoch[p] for p in positions[rank::4]]
        assert [(int(v), tuple(o)) for v, o in zip(share.volumes, share.origins.tolist())] == expected


def test_state_dict_resumes_mid_epoch_exactly(sources: list[np.ndarray[Any, Any]]) -> None:
    volumes = _volumes(sources)

    def make() -> CropLoader:
        return CropLoader(volumes, CROP, 4, crops_per_epoch=30, seed=11, output="numpy", prefetch=3)

    reference = make()
    reference.set_epoch(2)
    expected_crops, expected_data = read_all(reference)

    first = make()
    first.set_epoch(2)
    iterator = iter(first)
    taken = [next(iterator) for _ in range(3)]
    assert crop_list(taken) == expected_crops[:12]
    state = first.state_dict()
    assert state["epoch"] == 2 and state["position"] == 3  # batches read ahead are not counted

    second = make()
    second.load_state_dict(pickle.loads(pickle.dumps(state)))
    crops, data = read_all(second)
    assert crops == expected_crops[12:]
    assert all(np.array_equal(a, b) for a, b in zip(data, expected_data[3:]))
    # the first loader goes on with the same batches
    assert crop_list(list(iterator)) == expected_crops[12:]
    # after a whole pass the state says the epoch is done: loaded, it yields nothing (it was
    # position 0, the same as an epoch not begun, and a loader resumed from it read the epoch
    # again); the loader itself repeats the epoch on its next iteration
    done = first.state_dict()
    assert done["position"] == len(first) == 8 and second.state_dict() == done
    third = make()
    third.load_state_dict(done)
    assert crop_list(list(third)) == []
    assert crop_list(list(third)) == crop_list(list(first)) == expected_crops


def test_a_new_iteration_starts_the_epoch_again_unless_a_state_was_loaded(
    sources: list[np.ndarray[Any, Any]],
) -> None:
    loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=12, seed=6, output="numpy")
    expected = crop_list(list(loader))
    for i, _ in enumerate(loader):
        if i == 2:
            break
    state = loader.state_dict()
    assert state["position"] == 3
    assert crop_list(list(loader)) == expected  # from the first batch again
    loader.load_state_dict(state)
    assert crop_list(list(loader)) == expected[6:]
    assert crop_list(list(loader)) == expected  # the loaded position is used once


def test_a_state_of_another_loader_is_refused(sources: list[np.ndarray[Any, Any]]) -> None:
    loader = CropLoader(_volumes(sources), CROP, 4, seed=1, output="numpy")
    other = CropLoader(_volumes(sources), CROP, 5, seed=2, output="numpy")
    with pytest.raises(InvalidArgumentError, match=r"batch_size: state 5, loader 4; seed: state 2, loader 1"):
        loader.load_state_dict(other.state_dict())
    with pytest.raises(InvalidArgumentError, match="not a CropLoader state_dict"):
        loader.load_state_dict({"epoch": 1})
    state = loader.state_dict()
    state["position"] = len(loader) + 1
    with pytest.raises(InvalidArgumentError, match="past the"):
        loader.load_state_dict(state)


def test_a_pickled_loader_stands_where_the_original_stands(sources: list[np.ndarray[Any, Any]], tmp_path: Path) -> None:
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"{i}.zarr"), s) for i, s in enumerate(sources)]
    loader = CropLoader(volumes, CROP, 3, crops_per_epoch=12, seed=4, output="numpy", cache_bytes=1 << 20)
    loader.set_epoch(3)
    expected = crop_list(list(loader))
    iterator = iter(loader)
    next(iterator)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy.epoch == 3 and copy.state_dict() == loader.state_dict()
    assert copy.cache_stats()["host"].entries == 0  # caches do not travel
    assert crop_list(list(copy)) == expected  # a new pass, as the original's next one
    # a loaded state travels: the copy's next pass resumes, as the original's would
    loader.load_state_dict(loader.state_dict())
    rest = list(pickle.loads(pickle.dumps(loader)))
    assert crop_list(rest) == expected[3:]
    for b in rest:
        assert_batch_matches(b, sources, CROP)


@pytest.mark.parametrize("output", OUTPUTS)
def test_a_loop_that_drops_its_batches_reuses_a_small_pool(sources: list[np.ndarray[Any, Any]], output: str) -> None:
    # One batch read at a time (test_concurrent_batches.py has the bound with more).
    loader = CropLoader(_volumes(sources), CROP, 4, crops_per_epoch=64, output=output, prefetch=2, concurrent_batches=1)
    addresses = set()
    for batch in loader:
        addresses.add(to_numpy(batch.data).__array_interface__["data"][0])
        time.sleep(0.002)  # gives the producer the chance to run ahead into other buffers
        assert_batch_matches(batch, sources, CROP)
    assert 2 <= len(addresses) <= 2 + 3  # prefetch + 3


def test_a_loop_without_prefetch_reuses_its_few_buffers_over_a_long_epoch(sources: list[np.ndarray[Any, Any]]) -> None:
    """The pool's threads held the batch's buffer a moment after its read returned (through the
    task they had run), and the loader made a new one for about one batch in twenty."""
    loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=600, output="numpy", prefetch=0)
    addresses = {batch.data.__array_interface__["data"][0] for batch in loader}
    assert len(addresses) <= 0 + 3  # prefetch + 3


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("prefetch", [0, 2])
def test_kept_batches_and_views_of_them_are_never_overwritten(
    sources: list[np.ndarray[Any, Any]], output: str, prefetch: int
) -> None:
    loader = CropLoader(_volumes(sources), CROP, 4, crops_per_epoch=48, output=output, prefetch=prefetch)
    kept = list(loader)
    for batch in kept:
        assert_batch_matches(batch, sources, CROP)
    # a view of one crop alone (NumPy collapses a view's base onto the memory's owner)
    first_crops = [(b.data[0], b.volume_index[0], b.origins[0]) for b in loader]
    for crop, volume, origin in first_crops:
        box = tuple(slice(int(o), int(o) + c) for o, c in zip(origin, CROP))
        np.testing.assert_array_equal(to_numpy(crop), sources[int(volume)][box])


def _owner(x: np.ndarray[Any, Any]) -> Any:
    while isinstance(x, np.ndarray) and x.base is not None:
        x = x.base
    return x


@pytest.mark.parametrize("reuse", [True, False])
def test_reuse_buffers_false_gives_every_batch_its_own_buffer(sources: list[np.ndarray[Any, Any]], reuse: bool) -> None:
    loader = CropLoader(_volumes(sources), CROP, 4, crops_per_epoch=48, output="numpy", prefetch=2, reuse_buffers=reuse)
    seen: list[weakref.ref[Any]] = []
    repeats = 0
    for batch in loader:
        owner = _owner(batch.data)
        repeats += any(ref() is owner for ref in seen)
        seen.append(weakref.ref(owner))
    assert (repeats > 0) == reuse


@needs_torch
@pytest.mark.parametrize("lanes", [1, 3])
def test_a_new_epoch_or_iteration_stops_the_threads_reading_ahead(
    sources: list[np.ndarray[Any, Any]], lanes: int
) -> None:
    before = len(loader_threads())
    loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=40, output="numpy", concurrent_batches=lanes)
    first = iter(loader)
    next(first)
    assert len(loader_threads()) == before + lanes
    second = iter(loader)  # replaces the first pass
    assert len(loader_threads()) == before + lanes
    with pytest.raises(PassEndedError, match=r"ended by a new pass \(iter\)"):
        next(first)
    next(second)
    loader.set_epoch(1)
    assert len(loader_threads()) == before
    third = iter(loader)
    next(third)
    threads = loader_threads()
    assert len(threads) == lanes
    del third  # dropping the iterator (a break out of a loop) stops its threads
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()


@pytest.mark.parametrize("layout", ["v3-sharded-zstd", "v2-blosc-lz4"])
def test_the_host_cache_gives_the_same_batches_and_counts_hits(
    sources: list[np.ndarray[Any, Any]], layout: str
) -> None:
    volumes = _volumes(sources, layout)
    plain = CropLoader(volumes, CROP, 5, crops_per_epoch=40, seed=1, output="numpy")
    cached = CropLoader(volumes, CROP, 5, crops_per_epoch=40, seed=1, output="numpy", cache_bytes=64 << 20)
    crops, data = read_all(plain)
    crops_cached, data_cached = read_all(cached)
    assert crops_cached == crops and all(np.array_equal(a, b) for a, b in zip(data, data_cached))
    stats = cached.cache_stats()["host"]
    chunk = LAYOUTS[layout]["chunks"]
    chunk_count = sum(int(np.prod([-(-n // c) for n, c in zip(s, chunk)])) for s in SHAPES)
    assert stats.misses == stats.entries <= chunk_count and stats.hits > 0 and stats.evictions == 0
    assert 0 < stats.nbytes <= stats.entries * int(np.prod(chunk)) * 2
    read_all(cached)  # a second pass reads nothing
    again = cached.cache_stats()["host"]
    assert again.misses == stats.misses and again.hits > stats.hits


def test_the_host_cache_keeps_to_its_budget(sources: list[np.ndarray[Any, Any]]) -> None:
    budget = 6 * 8 * 8 * 8 * 2  # six 8^3 uint16 chunks
    loader = CropLoader(_volumes(sources), CROP, 5, crops_per_epoch=40, output="numpy", cache_bytes=budget)
    for batch in loader:
        assert_batch_matches(batch, sources, CROP)
        assert loader.cache_stats()["host"].nbytes <= budget
    stats = loader.cache_stats()["host"]
    assert stats.evictions > 0 and 0 < stats.nbytes <= budget


def test_errors_name_the_volume_and_crop(sources: list[np.ndarray[Any, Any]]) -> None:
    volumes = _volumes(sources)
    with pytest.raises(InvalidArgumentError, match=r"crop_shape \(14, 5, 7\) does not fit inside volume 1 of shape"):
        CropLoader(volumes, (14, 5, 7), 2)
    other_dtype = make_volume(gpuzarr.MemoryStore(), sources[1].astype("<i4"))
    with pytest.raises(InvalidArgumentError, match="volume 1 has dtype int32, volume 0 has uint16"):
        CropLoader([volumes[0], other_dtype], CROP, 2)
    flat = make_volume(gpuzarr.MemoryStore(), sources[0][0], chunks=(8, 8), shards=None)
    with pytest.raises(InvalidArgumentError, match="volume 1 has 2 dimensions, volume 0 has 3"):
        CropLoader([volumes[0], flat], CROP, 2)
    with pytest.raises(InvalidArgumentError, match=r"'label' volume 0 has shape .* paired volume"):
        CropLoader({"image": volumes[0], "label": volumes[1]}, CROP, 2)
    with pytest.raises(InvalidArgumentError, match="same number of volumes"):
        CropLoader({"image": volumes, "label": volumes[0]}, CROP, 2)
    with pytest.raises(InvalidArgumentError, match="crop_shape: expected 3 positive"):
        CropLoader(volumes, (4, 4), 2)
    with pytest.raises(InvalidArgumentError, match="volume 1 is a ndarray"):
        CropLoader([volumes[0], sources[1]], CROP, 2)
    with pytest.raises(InvalidArgumentError, match="output='cupy' needs a GPU"):
        CropLoader(volumes, CROP, 2, output="cupy")
    with pytest.raises(InvalidArgumentError, match="device cache needs a GPU"):
        CropLoader(volumes, CROP, 2, device_cache_bytes=1 << 20)
    with pytest.raises(InvalidArgumentError, match="sampler: expected"):
        CropLoader(volumes, CROP, 2, sampler="sequential")
    with pytest.raises(InvalidArgumentError, match="rank 2 / world_size 2"):
        CropLoader(volumes, CROP, 2, rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        CropLoader(volumes, CROP, 0)
    assert issubclass(InvalidArgumentError, GpuZarrError)


def _error_of_a_pass(loader: CropLoader) -> weakref.ref[BaseException]:
    """A weak reference to the error that ends a pass over ``loader``, once dropped."""
    try:
        list(loader)
    except CorruptChunkError as exc:
        return weakref.ref(exc)
    raise AssertionError("no error")


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_failed_batch_is_let_go_of_with_its_error(
    sources: list[np.ndarray[Any, Any]], tmp_path: Path, prefetch: int
) -> None:
    """The error (and the batch buffers its traceback's frames hold) goes when the caller drops
    it, not at the next garbage collection: no reference cycle through the frames raising it."""
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"v{i}.zarr"), s, "v3-gzip") for i, s in enumerate(sources)]
    (tmp_path / "v1.zarr" / "c" / "0" / "0" / "0").write_bytes(b"\x1f\x8b not gzip at all")
    loader = CropLoader(volumes, CROP, 2, sampler=[(1, (0, 0, 0))] * 4, output="numpy", prefetch=prefetch)
    gc.collect()
    gc.disable()
    try:
        assert _error_of_a_pass(loader)() is None
    finally:
        gc.enable()


def test_a_corrupt_chunk_names_its_key_volume_and_crops(sources: list[np.ndarray[Any, Any]], tmp_path: Path) -> None:
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"v{i}.zarr"), s, "v3-gzip") for i, s in enumerate(sources)]
    (tmp_path / "v1.zarr" / "c" / "0" / "0" / "0").write_bytes(b"\x1f\x8b not gzip at all")
    crops = [(0, (0, 0, 0)), (1, (0, 0, 0)), (1, (2, 3, 1))]
    loader = CropLoader(volumes, CROP, 3, sampler=crops, shuffle=False, output="numpy")
    with pytest.raises(CorruptChunkError) as info:
        list(loader)
    message = str(info.value)
    assert info.value.key == "c/0/0/0"
    assert "volume 1" in message and "volume 1 crop [0:6, 0:5, 0:7]" in message and "[2:8, 3:8, 1:8]" in message
    # the cached path names them too
    cached = CropLoader(volumes, CROP, 3, sampler=crops, shuffle=False, output="numpy", cache_bytes=1 << 20)
    with pytest.raises(CorruptChunkError, match=r"c/0/0/0: .*while reading volume 1"):
        list(cached)


def test_a_state_of_other_listed_crops_is_refused(sources: list[np.ndarray[Any, Any]]) -> None:
    """Two lists of as many crops: the state named only the sampler's kind and count, and a
    loader resumed from the other's state read its own crops at the other's position."""
    volumes = _volumes(sources)
    first = CropLoader(volumes, CROP, 1, sampler=[(0, (0, 0, 0)), (0, (1, 1, 1))], shuffle=False, output="numpy")
    other = CropLoader(volumes, CROP, 1, sampler=[(0, (2, 2, 2)), (0, (3, 3, 3))], shuffle=False, output="numpy")
    iterator = iter(first)
    next(iterator)
    with pytest.raises(InvalidArgumentError, match=r"other crops .*crops: state"):
        other.load_state_dict(first.state_dict())
    same = CropLoader(volumes, CROP, 1, sampler=[(0, (0, 0, 0)), (0, (1, 1, 1))], shuffle=False, output="numpy")
    same.load_state_dict(first.state_dict())
    assert [b.origins.tolist() for b in same] == [[[1, 1, 1]]]


def test_set_epoch_of_the_loaded_states_epoch_keeps_the_position(sources: list[np.ndarray[Any, Any]]) -> None:
    """A training loop resumed at a checkpoint calls set_epoch for the checkpoint's epoch before
    iterating: the position was dropped, and the epoch read again from its start."""

    def make() -> CropLoader:
        return CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=20, seed=3, output="numpy")

    first = make()
    first.set_epoch(4)
    iterator = iter(first)
    taken = [next(iterator) for _ in range(3)]
    expected = crop_list(taken) + crop_list(list(iterator))
    state = first.state_dict()
    assert state["position"] == 10 and state["epoch"] == 4  # the epoch done
    resumed = make()
    resumed.load_state_dict({**state, "position": 3})
    resumed.set_epoch(4)
    assert crop_list(list(resumed)) == expected[6:]
    resumed.load_state_dict({**state, "position": 3})
    resumed.set_epoch(5)  # another epoch drops it
    assert len(list(resumed)) == 10


@pytest.mark.parametrize("loader", [None, [], "x"])
def test_a_malformed_state_is_refused(sources: list[np.ndarray[Any, Any]], loader: Any) -> None:
    crop_loader = CropLoader(_volumes(sources), CROP, 2, output="numpy")
    with pytest.raises(InvalidArgumentError, match="not a CropLoader state_dict"):
        crop_loader.load_state_dict({"version": 1, "epoch": 0, "position": 0, "loader": loader})


@pytest.mark.parametrize("crop_shape", [(5.9, 5, 7), (6, True, 7), ("6", 5, 7)])
def test_a_crop_shape_of_other_than_integers_is_refused(
    sources: list[np.ndarray[Any, Any]], crop_shape: tuple[Any, ...]
) -> None:
    """5.9 was cut to 5 without a word."""
    with pytest.raises(InvalidArgumentError, match="crop_shape: expected a tuple of integers"):
        CropLoader(_volumes(sources), crop_shape, 2, output="numpy")


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_cache_drops_a_volume_written_through_its_array(tmp_path: Path, prefetch: int) -> None:
    """The cache kept serving the chunks read before a write through the same Array (labels
    updated between epochs read as before); the other volume's chunks stay cached."""
    arrays = []
    for name in ("a", "b"):
        array = gpuzarr.create(str(tmp_path / f"{name}.zarr"), shape=(32, 32), dtype="i4", chunks=(8, 8), device="cpu")
        array[...] = 1
        arrays.append(array)
    loader = CropLoader(arrays, (8, 8), 4, sampler="grid", shuffle=False, output="numpy", cache_bytes=1 << 20,
                        prefetch=prefetch)  # fmt: skip

    def values(volume: int) -> set[int]:
        return {int(v) for b in loader for v in np.unique(b.data[b.volume_index == volume])}

    assert values(0) == {1}
    arrays[0][...] = 2
    hits_before = loader.cache_stats()["host"].hits
    assert values(0) == {2}
    assert values(1) == {1}
    assert loader.cache_stats()["host"].hits > hits_before  # volume 1 came from the cache
    arrays[0][8:16, 8:16] = 3  # a part: the whole volume's chunks go, all read again
    assert values(0) == {2, 3}


@pytest.mark.parametrize(("sampler", "crops_per_epoch"), [("random", None), ("grid", None), ("grid", 8)])
def test_an_epoch_of_more_crops_than_it_holds_is_refused_by_name(sampler: str, crops_per_epoch: int | None) -> None:
    """A volume declared 2**20 voxels a side: the default epoch, its 2**42 grid tiles, made
    NumPy ask for 32 TiB (random) or a list of every tile grow for gigabytes (grid)."""
    volume = gpuzarr.create(gpuzarr.MemoryStore(), shape=(1 << 20,) * 3, dtype="u1", chunks=(64,) * 3, device="cpu")
    with pytest.raises(InvalidArgumentError, match=r"grid tiles are more than an epoch holds"):
        CropLoader(volume, (64, 64, 64), 4, sampler=sampler, crops_per_epoch=crops_per_epoch, output="numpy")
    loader = CropLoader(volume, (64, 64, 64), 4, crops_per_epoch=8, output="numpy", prefetch=0)
    assert len(loader) == 2 and next(iter(loader)).data.shape == (4, 64, 64, 64)


def test_a_chunk_read_while_its_volume_is_written_is_not_cached_as_current() -> None:
    """One batch's thread read a chunk, a write through the same Array ended, another batch
    dropped the volume's cached chunks, and only then the first thread cached what it read:
    the old data, served by every later pass."""
    array = gpuzarr.create(gpuzarr.MemoryStore(), shape=(64, 64), dtype="i4", chunks=(16, 16), device="cpu")
    array[...] = 1
    loader = CropLoader(array, (16, 16), 2, sampler=[(0, (0, 0))] * 32, shuffle=False, output="numpy",
                        cache_bytes=1 << 20, prefetch=4, concurrent_batches=4)  # fmt: skip
    held, released = threading.Event(), threading.Event()
    taken = threading.Lock()
    read_batch = array.read_batch

    def holding_read_batch(*args: Any, **kwargs: Any) -> Any:
        out = read_batch(*args, **kwargs)
        if taken.acquire(blocking=False):  # the first read only: held before it is cached
            held.set()
            released.wait(5)
        return out

    array.read_batch = holding_read_batch  # type: ignore[method-assign]

    def write_then_release() -> None:
        held.wait(5)
        array[0:16, 0:16] = 2
        time.sleep(0.3)  # the other threads' batches see the write and drop the volume's chunks
        released.set()

    writer = threading.Thread(target=write_then_release)
    writer.start()
    list(loader)
    writer.join()
    assert held.is_set()
    assert {int(v) for b in loader for v in np.unique(b.data)} == {2}


def test_an_interrupt_inside_a_pass_threads_start_leaves_no_thread_reading(
    sources: list[np.ndarray[Any, Any]],
) -> None:
    """Ctrl-C inside ``Thread.start()`` of a pass's thread comes once the thread runs: it was
    not yet listed, so stopping the pass left it reading on beside the next pass (with worker
    processes: answering their batches, and the next pass got wrong batches or a killed worker)."""
    import sys

    loader = CropLoader(_volumes(sources), CROP, 4, crops_per_epoch=64, output="numpy", prefetch=2)
    expected = [b.data.copy() for b in loader]
    before = len(loader_threads())

    def interrupt_the_start(frame: Any, event: str, arg: Any) -> Any:
        caller = frame.f_back
        if (
            event == "call"
            and frame.f_code is threading.Event.wait.__code__
            and caller is not None
            and caller.f_code is threading.Thread.start.__code__
            and caller.f_locals["self"].name == "gpuzarr-loader"
        ):
            sys.settrace(None)
            raise KeyboardInterrupt
        return None

    sys.settrace(interrupt_the_start)
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in loader:
                pass
    finally:
        sys.settrace(None)
    assert len(loader_threads()) == before
    got = [b.data.copy() for b in loader]
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


@needs_torch
@pytest.mark.parametrize("layout", ["v3-sharded-zstd", "v2-blosc-lz4"])
def test_machine_learning_floats_come_as_tensors_of_their_type(layout: str) -> None:
    """bfloat16 and float8 volumes (TensorStore and JAX checkpoints write them) give tensors of
    those types, sharing the batch's memory: torch.from_numpy refuses ml_dtypes' arrays."""
    import ml_dtypes
    import torch

    shape = (14, 12, 11)
    image = (values(shape, "<u2", salt=5).astype("float32") / 8).astype(ml_dtypes.bfloat16)
    label = (values(shape, "<u2", salt=6) % 7).astype("float32").astype(ml_dtypes.float8_e4m3fn)
    data = {
        "image": make_volume(gpuzarr.MemoryStore(), image, layout),
        "label": make_volume(gpuzarr.MemoryStore(), label, layout),
    }
    for output in ("torch", "numpy"):
        loader = CropLoader(data, CROP, 4, crops_per_epoch=12, output=output, device="cpu")
        for batch in loader:
            got_image, got_label = batch.data["image"], batch.data["label"]
            if output == "torch":
                assert got_image.dtype == torch.bfloat16 and got_label.dtype == torch.float8_e4m3fn
                got_image, got_label = got_image.float().numpy(), got_label.float().numpy()
            else:
                assert got_image.dtype == image.dtype and got_label.dtype == label.dtype
            for got, source in ((got_image, image), (got_label, label)):
                as_f32 = Batch(got.astype("float32"), batch.origins, batch.volume_index, 0)
                assert_batch_matches(as_f32, [source.astype("float32")], CROP)


@needs_torch
def test_types_pytorch_has_no_tensor_of_are_refused_when_the_loader_is_made() -> None:
    import ml_dtypes

    shape = (10, 10, 10)
    padded = make_volume(gpuzarr.MemoryStore(), (values(shape) % 7).astype(ml_dtypes.int4), "v3-gzip")
    unsigned = make_volume(gpuzarr.MemoryStore(), values(shape), "v3-gzip")
    with pytest.raises(InvalidArgumentError, match=r"field 'mask': PyTorch has no tensor type for the data type int4"):
        CropLoader({"image": unsigned, "mask": padded}, CROP, 2, device="cpu")
    # NumPy output takes them all.
    loader = CropLoader({"image": unsigned, "mask": padded}, CROP, 2, crops_per_epoch=4, output="numpy", device="cpu")
    assert sum(len(b) for b in loader) == 4


@needs_torch
def test_dataloaders_pin_memory_pins_the_batchs_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DataLoader(pin_memory=True)`` pins what has a ``pin_memory`` method; a dataclass
    without one came back unpinned. (Pinning needs a GPU: here ``Tensor.pin_memory`` is
    recorded, and returns a copy as it would.)"""
    import torch
    from torch.utils.data._utils.pin_memory import pin_memory

    shape = (12, 12, 12)
    image, label = values(shape, salt=1), (values(shape, salt=2) % 3).astype("u1")
    data = {"image": make_volume(gpuzarr.MemoryStore(), image), "label": make_volume(gpuzarr.MemoryStore(), label)}
    pinned: list[tuple[int, ...]] = []

    def record(self: Any, *args: Any, **kwargs: Any) -> Any:
        pinned.append(tuple(self.shape))
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", record)
    for loader_data, expected in ((data, 2), (data["image"], 1)):
        batch = next(iter(CropLoader(loader_data, CROP, 3, crops_per_epoch=3, device="cpu")))
        pinned.clear()
        again = pin_memory(batch)  # what the DataLoader's pinning thread calls
        assert isinstance(again, Batch) and len(pinned) == expected
        assert again.index == batch.index and again.origins is batch.origins
        fields = again.data.values() if isinstance(again.data, dict) else [again.data]
        assert all(isinstance(f, torch.Tensor) for f in fields)
        assert_batch_matches(Batch(to_numpy(next(iter(fields))), again.origins, again.volume_index, 0), [image], CROP)
    numpy_batch = next(iter(CropLoader(data["image"], CROP, 3, crops_per_epoch=3, device="cpu", output="numpy")))
    pinned.clear()
    assert pin_memory(numpy_batch).data is numpy_batch.data and not pinned


def test_a_pass_ended_by_another_says_so_where_it_would_have_stopped_short(sources: list[np.ndarray[Any, Any]]) -> None:
    """A nested loop over one loader (or set_epoch inside a loop) ended the outer epoch after
    a few batches, silently; a pass the user closed or finished stops as before."""
    loader = CropLoader(_volumes(sources), CROP, 2, crops_per_epoch=20, output="numpy")
    seen = 0
    with pytest.raises(PassEndedError, match="ended by a new pass"):
        for _ in loader:
            seen += 1
            if seen == 2:
                next(iter(loader))  # a peek at "the first batch" inside the loop
    assert seen == 2
    state = loader.state_dict()
    ends = {"set_epoch": lambda: loader.set_epoch(3), "load_state_dict": lambda: loader.load_state_dict(state)}
    for ended_by, end in ends.items():
        running = iter(loader)
        next(running)
        end()
        with pytest.raises(PassEndedError, match=ended_by):
            next(running)
    running = iter(loader)
    next(running)
    loader.close()
    with pytest.raises(StopIteration):
        next(running)
    finished = iter(loader)
    assert sum(1 for _ in finished) == len(loader)
    next(iter(loader))  # a new pass after a finished one ends nothing
    with pytest.raises(StopIteration):
        next(finished)
    delivered = iter(loader)  # every batch handed out, the final StopIteration not yet asked
    for _ in range(len(loader)):
        next(delivered)
    loader.set_epoch(4)
    with pytest.raises(StopIteration):
        next(delivered)


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_a_volume_resized_after_the_loader_was_made_is_named(
    sources: list[np.ndarray[Any, Any]], tmp_path: Path, cache_bytes: int
) -> None:
    volumes = [make_volume(gpuzarr.LocalStore(tmp_path / f"{i}-{cache_bytes}.zarr"), s) for i, s in enumerate(sources)]
    loader = CropLoader(volumes, CROP, 4, crops_per_epoch=8, output="numpy", cache_bytes=cache_bytes)
    assert sum(len(b) for b in loader) == 8
    volumes[1].resize((6, 24, 9))  # shrunk below the crop: the error named an internal buffer
    with pytest.raises(InvalidArgumentError, match=r"volume 1 was resized from \(13, 24, 9\) to \(6, 24, 9\)"):
        list(loader)
    volumes[1].resize((30, 24, 9))  # grown: the crops would cover only the old part
    with pytest.raises(InvalidArgumentError, match="make a new CropLoader"):
        list(loader)
