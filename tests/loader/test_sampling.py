"""Crop sequences: grid tiles cover every voxel, random origins stay inside, rank shares are
disjoint and make the epoch (padded or cut as DistributedSampler does), listed crops are checked."""

from __future__ import annotations

import numpy as np
import pytest

from gpuzarr.errors import InvalidArgumentError
from gpuzarr.loader.sampling import (
    Crops,
    EpochBatches,
    RandomSampler,
    axis_tiles,
    epoch_rng,
    grid_origins,
    grid_sampler,
    grid_tile_count,
    group_by_volume,
    listed_sampler,
    rank_share,
    volume_runs,
)


def test_axis_tiles_add_an_edge_tile_only_when_needed() -> None:
    assert axis_tiles(64, 16) == ([0, 16, 32, 48], None)
    assert axis_tiles(70, 16) == ([0, 16, 32, 48], 54)
    assert axis_tiles(16, 16) == ([0], None)


@pytest.mark.parametrize(("shape", "crop"), [((20, 17, 9), (8, 5, 9)), ((16, 16), (4, 4)), ((5,), (3,))])
def test_grid_tiles_cover_every_voxel_regular_tiles_first(shape: tuple[int, ...], crop: tuple[int, ...]) -> None:
    origins = grid_origins(shape, crop)
    covered = np.zeros(shape, dtype=np.int64)
    for origin in origins:
        covered[tuple(slice(o, o + c) for o, c in zip(origin, crop))] += 1
    assert covered.min() >= 1
    assert len({tuple(o) for o in origins}) == len(origins) == grid_tile_count([shape], crop)
    on_grid = [all(o % c == 0 for o, c in zip(origin, crop)) for origin in origins]
    # the regular tiles come first, then those that touch a far edge
    assert on_grid == sorted(on_grid, reverse=True)
    assert ((origins >= 0) & (origins + np.array(crop) <= np.array(shape))).all()


def test_grid_sampler_goes_volume_after_volume_and_repeats_to_the_count() -> None:
    sampler = grid_sampler([(8, 8), (12, 8)], (4, 4), None)
    assert sampler.count == 4 + 6
    crops = sampler.epoch(epoch_rng(0, 0), shuffle=False)
    assert crops.volumes.tolist() == [0] * 4 + [1] * 6
    longer = grid_sampler([(8, 8)], (4, 4), 10).epoch(epoch_rng(0, 0), shuffle=True)
    assert len(longer) == 10
    # each pass over the tiles is a permutation of them
    assert sorted(map(tuple, longer.origins[:4].tolist())) == sorted(map(tuple, grid_origins((8, 8), (4, 4)).tolist()))


def test_random_origins_are_inside_and_reach_both_ends() -> None:
    shapes = [(10, 6), (3, 40)]
    sampler = RandomSampler(shapes, (3, 4), 4000)
    crops = sampler.epoch(epoch_rng(5, 1), shuffle=True)
    assert len(crops) == 4000
    for v, shape in enumerate(shapes):
        mine = crops.origins[crops.volumes == v]
        highs = np.array(shape) - np.array([3, 4])
        assert (mine >= 0).all() and (mine <= highs).all()
        assert (mine.min(axis=0) == 0).all() and (mine.max(axis=0) == highs).all()
    # volumes are drawn in proportion to their valid origins: 8*3 = 24 and 1*37 = 37
    share = (crops.volumes == 1).mean()
    assert 0.5 < share < 0.72


def test_the_epoch_is_a_function_of_seed_and_epoch() -> None:
    sampler = RandomSampler([(30, 30)], (4, 4), 50)
    a = sampler.epoch(epoch_rng(1, 2), True)
    b = sampler.epoch(epoch_rng(1, 2), True)
    c = sampler.epoch(epoch_rng(1, 3), True)
    d = sampler.epoch(epoch_rng(2, 2), True)
    assert np.array_equal(a.origins, b.origins)
    assert not np.array_equal(a.origins, c.origins) and not np.array_equal(a.origins, d.origins)


def _crops(n: int) -> Crops:
    return Crops(np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64).reshape(n, 1))


@pytest.mark.parametrize("n", [0, 1, 9, 10, 11, 12])
@pytest.mark.parametrize("world", [1, 3, 4])
def test_rank_shares_are_disjoint_and_make_the_epoch(n: int, world: int) -> None:
    crops = _crops(n)
    padded = [rank_share(crops, r, world, drop_last=False).origins[:, 0].tolist() for r in range(world)]
    cut = [rank_share(crops, r, world, drop_last=True).origins[:, 0].tolist() for r in range(world)]
    # as DistributedSampler: equal shares, padded with the first crops or cut to a multiple
    assert len({len(s) for s in padded}) == 1 and len({len(s) for s in cut}) == 1
    assert sorted(x for share in cut for x in share) == list(range((n // world) * world))
    everything = [x for share in padded for x in share]
    assert set(everything) == set(range(n))
    assert len(everything) == (-(-n // world) * world if n else 0)
    if world == 1:
        assert padded == [list(range(n))]


def test_rank_share_interleaves_like_distributed_sampler() -> None:
    assert rank_share(_crops(10), 1, 4, drop_last=False).origins[:, 0].tolist() == [1, 5, 9]
    assert rank_share(_crops(10), 3, 4, drop_last=False).origins[:, 0].tolist() == [3, 7, 1]
    assert rank_share(_crops(10), 3, 4, drop_last=True).origins[:, 0].tolist() == [3, 7]


def _bounds(batches: EpochBatches) -> list[tuple[int, int]]:
    """Each batch's crops as (first, last + 1), by their origins (_crops numbers them)."""
    return [(int(b.origins[:, 0].min()), int(b.origins[:, 0].max()) + 1) for b in batches]


def test_epoch_batches_and_volume_runs() -> None:
    assert _bounds(EpochBatches(_crops(10), 4, drop_last=False)) == [(0, 4), (4, 8), (8, 10)]
    assert _bounds(EpochBatches(_crops(10), 4, drop_last=True)) == [(0, 4), (4, 8)]
    assert _bounds(EpochBatches(_crops(8), 4, drop_last=False)) == [(0, 4), (4, 8)]
    batches = EpochBatches(_crops(10), 4, drop_last=False)
    assert len(batches) == 3 and _bounds(batches[1:]) == [(4, 8), (8, 10)] and _bounds([batches[-1]]) == [(8, 10)]
    for outside in (3, -4):
        with pytest.raises(IndexError):
            batches[outside]
    assert len(EpochBatches(_crops(0), 4, drop_last=False)) == 0
    grouped = group_by_volume(Crops(np.array([2, 0, 2, 1, 0]), np.arange(5).reshape(5, 1)))
    assert grouped.volumes.tolist() == [0, 0, 1, 2, 2]
    assert grouped.origins[:, 0].tolist() == [1, 4, 3, 0, 2]  # stable within a volume
    assert volume_runs(grouped.volumes) == [(0, 0, 2), (1, 2, 3), (2, 3, 5)]
    assert volume_runs(np.full(32, 3)) == [(3, 0, 32)]  # one volume: one run
    assert volume_runs(np.array([1, 0, 1])) == [(1, 0, 1), (0, 1, 2), (1, 2, 3)]  # same ends, not one run
    assert volume_runs(np.array([], dtype=np.int64)) == []


def test_listed_crops_are_checked_naming_the_crop() -> None:
    shapes = [(10, 10), (20, 5)]
    sampler = listed_sampler([(0, (0, 0)), (1, np.array([16, 1]))], shapes, (4, 4), None)
    assert sampler.count == 2 and sampler.crops.origins.tolist() == [[0, 0], [16, 1]]
    with pytest.raises(InvalidArgumentError, match=r"crop 1 volume 1 crop \[17:21, 0:4\] does not fit.*\(20, 5\)"):
        listed_sampler([(0, (0, 0)), (1, (17, 0))], shapes, (4, 4), None)
    with pytest.raises(InvalidArgumentError, match="crop 0 names volume 2"):
        listed_sampler([(2, (0, 0))], shapes, (4, 4), None)
    with pytest.raises(InvalidArgumentError, match="crop 0 must be a"):
        listed_sampler([(0, (0.5, 0))], shapes, (4, 4), None)
    with pytest.raises(InvalidArgumentError, match=r"volume 0: origin \(0, 0, 0\) has 3 axes, the volume has 2"):
        listed_sampler([(0, (0, 0, 0))], shapes, (4, 4), None)
    with pytest.raises(InvalidArgumentError, match="empty"):
        listed_sampler([], shapes, (4, 4), None)


def test_the_grid_of_a_0_d_volume_is_its_one_origin() -> None:
    """NumPy cannot work out ``reshape(-1, 0)`` of no elements: a 0-d volume's grid raised."""
    from gpuzarr.loader.sampling import grid_origins

    origins = grid_origins((), ())
    assert origins.shape == (1, 0) and origins.dtype == np.int64
