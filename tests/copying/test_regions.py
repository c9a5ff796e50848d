"""Regions of work: boxes of whole stored objects that tile the array once."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpuzarr
from gpuzarr.copying.regions import RegionPlan, chunks_in, object_box, stored_boxes


def _covered(plan: RegionPlan, shape: tuple[int, ...]) -> np.ndarray:  # type: ignore[type-arg]
    count = np.zeros(shape, dtype=np.int32)
    for region in plan.regions:
        count[region.selection] += 1
    return count


@pytest.mark.parametrize(
    ("shape", "chunks", "shards", "target"),
    [
        ((40, 30, 20), (8, 8, 8), (16, 16, 16), 1),  # a region per shard
        ((40, 30, 20), (8, 8, 8), (16, 16, 16), 16 * 16 * 16 * 2 * 3),  # three shards along the last axis
        ((40, 30, 20), (8, 8, 8), None, 10**9),  # everything in one region
        ((7, 9), (3, 4), None, 3 * 4 * 8 * 2),  # two chunks a region, edges cut by the array
        ((), (), None, 1),  # a 0-d array is one region
        ((0, 5), (2, 2), None, 1),  # an empty array has none
    ],
)
def test_regions_tile_the_array_with_whole_stored_objects(
    shape: tuple[int, ...], chunks: tuple[int, ...], shards: tuple[int, ...] | None, target: int
) -> None:
    a = gpuzarr.create(shape=shape, dtype="float64" if len(shape) == 2 else "uint16", chunks=chunks, shards=shards)
    plan = RegionPlan(a, target)
    assert (_covered(plan, shape) == 1).all()
    stored = shards or chunks
    objects = [c for r in plan.regions for c in r.objects()]
    grid = tuple(-(-n // s) for n, s in zip(shape, stored, strict=True))
    assert sorted(objects) == list(itertools.product(*(range(n) for n in grid)))  # each object in one region
    for region in plan.regions:
        for start, n in zip((s.start for s in region.selection), stored, strict=True):
            assert start % n == 0  # regions start on stored-object boundaries
        nbytes = region.size * a.dtype.itemsize
        assert nbytes <= max(target, np.prod(stored or ()) * a.dtype.itemsize)


def test_grouping_follows_the_last_axes_first() -> None:
    a = gpuzarr.create(shape=(40, 30, 20), dtype="uint16", chunks=(8, 8, 8), shards=(16, 16, 16))
    plan = RegionPlan(a, 16 * 16 * 16 * 2 * 2)  # two shards' worth
    assert plan.group == (1, 1, 2)
    assert plan.regions[0].selection == (slice(0, 16), slice(0, 16), slice(0, 20))


def test_touching_and_stored_boxes() -> None:
    a = gpuzarr.create(shape=(40, 30), dtype="int32", chunks=(10, 10), fill_value=0)
    a[12, 25] = 1  # chunk (1, 2)
    boxes = stored_boxes(a)
    assert boxes == [((10, 20), (20, 30))]
    plan = RegionPlan(a, 10 * 10 * 4)  # one chunk a region
    assert [r.selection for r in plan.touching(boxes)] == [(slice(10, 20), slice(20, 30))]
    # a box of another grid (a source's chunk) touches every region it overlaps
    assert len(plan.touching([((5, 15), (5, 15))])) == 4
    assert object_box(plan.dims, (3, 2)) == ((30, 40), (20, 30))
    assert chunks_in(a, (slice(0, 40), slice(5, 15))) == 8


def test_regions_read_from_smaller_chunks_cover_at_most_a_bounded_number_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A convert to larger chunks reads each region from the source's: a region of the target's
    # bytes covered millions of a sparse source's tiny chunks (its read plan held 1 GiB).
    monkeypatch.setattr("gpuzarr.copying.regions.MAX_OBJECTS_PER_REGION", 64)
    source = gpuzarr.create(shape=(10**6,), dtype="int32", chunks=(10,))
    target = gpuzarr.create(shape=(10**6,), dtype="int32", chunks=(1000,))
    alone = RegionPlan(target)
    assert alone.group == (64,)  # by the target's own objects
    plan = RegionPlan(target, read_from=source)
    assert plan.group == (1,)  # one target chunk, 100 source chunks, is the least a region holds
    assert all(region.size // 10 <= 100 for region in plan.regions[:5])
    coarse = gpuzarr.create(shape=(10**6,), dtype="int32", chunks=(10_000,))
    assert RegionPlan(target, read_from=coarse).group == alone.group  # larger source chunks: no change
    sharded = gpuzarr.create(shape=(10**6,), dtype="int32", chunks=(100,), shards=(10_000,))
    assert RegionPlan(target, read_from=sharded).group == (64 * 100 // 1000,)  # by the inner chunks read
