"""Crop sequences: which crops an epoch holds, which of them one rank (and one worker) reads, and
how they are cut into batches.

Everything here is pure NumPy and a function of its arguments only: the crops of an epoch depend
on ``(seed, epoch)`` and the sampler, a rank's share on ``(rank, world_size)`` as well, so two
runs, or a loader rebuilt from a ``state_dict``, see the same batches.

* ``"random"``: origins drawn uniformly from every valid origin of every volume (a volume is
  chosen in proportion to its number of valid origins), with replacement.
* ``"grid"``: tiles of the crop shape at multiples of it on every axis, then the edge tiles (a
  tile flush with the end of an axis whose length is not a multiple of the crop), so that the
  tiles cover every voxel; volume after volume. ``shuffle`` permutes them per epoch.
* an iterable of ``(volume_index, origin)``: those crops, checked once; ``shuffle`` permutes them.

A rank's share is taken as ``torch.utils.data.DistributedSampler`` takes it: the epoch's crops
are padded by repeating its first crops (or, with ``drop_last``, cut) to a multiple of
``world_size``, and rank r takes crops r, r + world_size, ...
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Iterable

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Crops:
    """A sequence of crops: ``volumes[i]`` is the volume of crop i, ``origins[i]`` its origin."""

    volumes: Int64Array
    origins: Int64Array

    def __len__(self) -> int:
        return int(self.volumes.shape[0])

    def take(self, index: npt.NDArray[np.intp] | slice) -> Crops:
        return Crops(self.volumes[index], self.origins[index])


def crop_name(volume: int, origin: Sequence[int], crop_shape: Sequence[int]) -> str:
    """How errors name a crop: its volume and its box."""
    box = ", ".join(f"{int(o)}:{int(o) + int(c)}" for o, c in zip(origin, crop_shape, strict=True))
    return f"volume {volume} crop [{box}]"


def axis_tiles(length: int, crop: int) -> tuple[list[int], int | None]:
    """The tile starts along one axis: those at multiples of ``crop``, and the edge start
    ``length - crop`` when the last regular tile leaves voxels uncovered (else None)."""
    regular = list(range(0, length - crop + 1, crop))
    edge = length - crop
    return regular, (edge if regular[-1] != edge else None)


def grid_origins(shape: Sequence[int], crop_shape: Sequence[int]) -> Int64Array:
    """The grid tiles of one volume: every tile at multiples of the crop shape (C order), then
    every tile with at least one edge-aligned start (C order), so together they cover it."""
    per_axis = [axis_tiles(n, c) for n, c in zip(shape, crop_shape, strict=True)]
    regular = list(itertools.product(*(starts for starts, _ in per_axis)))
    every = itertools.product(*(starts + ([edge] if edge is not None else []) for starts, edge in per_axis))
    on_grid = set(regular)
    edges = [origin for origin in every if origin not in on_grid]
    # The count given, not -1: a 0-d volume's one origin is () (NumPy cannot work out -1 of 0).
    return np.array(regular + edges, dtype=np.int64).reshape(len(regular) + len(edges), len(shape))


def grid_tile_count(shapes: Sequence[Sequence[int]], crop_shape: Sequence[int]) -> int:
    """The number of grid tiles across all volumes (the default crops per epoch)."""
    total = 0
    for shape in shapes:
        # Counted, not listed: a volume may declare 2**62 elements along an axis.
        total += math.prod(
            (n - c) // c + 1 + ((n - c) % c != 0) for n, c in zip(shape, crop_shape, strict=True)
        )
    return total


class Sampler:
    """The crops of one epoch, before they are shared out among ranks.

    ``shapes`` are the volumes' shapes; every crop of ``crop_shape`` fits inside each (checked
    by the loader before a sampler is made).
    """

    kind = "sampler"

    def __init__(self, shapes: Sequence[tuple[int, ...]], crop_shape: tuple[int, ...], count: int) -> None:
        self.shapes = list(shapes)
        self.crop_shape = crop_shape
        #: crops per epoch
        self.count = count

    def epoch(self, rng: np.random.Generator, shuffle: bool) -> Crops:
        raise NotImplementedError

    def digest(self) -> str | None:
        """What tells this sampler's crops apart from another's of the same kind, count and
        shapes (None: those say it all)."""
        return None


class RandomSampler(Sampler):
    """Origins uniform over all valid origins of all volumes, drawn with replacement."""

    kind = "random"

    def epoch(self, rng: np.random.Generator, shuffle: bool) -> Crops:
        highs = np.array([[n - c + 1 for n, c in zip(s, self.crop_shape)] for s in self.shapes], dtype=np.int64)
        # Float weights are exact enough: they only choose among volumes.
        weights = np.prod(highs.astype(np.float64), axis=1)
        volumes = rng.choice(len(self.shapes), size=self.count, p=weights / weights.sum()).astype(np.int64)
        origins = rng.integers(0, highs[volumes], dtype=np.int64) if self.count else highs[:0]
        return Crops(volumes, origins.reshape(self.count, len(self.crop_shape)))


class FixedSampler(Sampler):
    """A fixed list of crops (the grid tiles, or crops the user gave), repeated until ``count``;
    ``shuffle`` draws a new permutation for every pass over the list."""

    def __init__(self, crops: Crops, count: int | None, kind: str) -> None:
        self.crops = crops
        self.kind = kind
        self.count = len(crops) if count is None else count

    def digest(self) -> str | None:
        if self.kind != "list":  # the grid's tiles follow from the shapes
            return None
        hashed = hashlib.sha256(np.ascontiguousarray(self.crops.volumes).tobytes())
        hashed.update(np.ascontiguousarray(self.crops.origins).tobytes())
        return hashed.hexdigest()[:16]

    def epoch(self, rng: np.random.Generator, shuffle: bool) -> Crops:
        n = len(self.crops)
        if n == 0 or self.count == 0:
            return self.crops.take(slice(0, 0))
        passes = -(-self.count // n)
        order = [rng.permutation(n) if shuffle else np.arange(n) for _ in range(passes)]
        return self.crops.take(np.concatenate(order)[: self.count])


def grid_sampler(shapes: Sequence[tuple[int, ...]], crop_shape: tuple[int, ...], count: int | None) -> FixedSampler:
    """The grid tiles of every volume, volume after volume."""
    per_volume = [grid_origins(s, crop_shape) for s in shapes]
    volumes = np.concatenate([np.full(len(o), v, dtype=np.int64) for v, o in enumerate(per_volume)])
    return FixedSampler(Crops(volumes, np.concatenate(per_volume)), count, "grid")


def listed_sampler(
    crops: Iterable[Any], shapes: Sequence[tuple[int, ...]], crop_shape: tuple[int, ...], count: int | None
) -> FixedSampler:
    """The user's ``(volume_index, origin)`` pairs, each checked against its volume."""
    volumes: list[int] = []
    origins: list[tuple[int, ...]] = []
    for i, item in enumerate(crops):
        try:
            volume, origin = item
            volume = _index(volume)
            origin = tuple(_index(o) for o in origin)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"sampler: crop {i} must be a (volume_index, origin) pair of integers, got {item!r}"
            ) from exc
        if not 0 <= volume < len(shapes):
            raise InvalidArgumentError(f"sampler: crop {i} names volume {volume}; there are {len(shapes)} volume(s)")
        check_fits(volume, origin, shapes[volume], crop_shape, f"sampler: crop {i} ")
        volumes.append(volume)
        origins.append(origin)
    if not volumes:
        raise InvalidArgumentError("sampler: the iterable of (volume_index, origin) pairs is empty")
    listed = Crops(np.array(volumes, dtype=np.int64), np.array(origins, dtype=np.int64).reshape(len(volumes), -1))
    return FixedSampler(listed, count, "list")


def _index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"expected an integer, got {value!r}")
    return int(value)


def check_fits(
    volume: int, origin: Sequence[int], shape: Sequence[int], crop_shape: Sequence[int], prefix: str = ""
) -> None:
    """Raise InvalidArgumentError, naming the volume and crop, unless the crop lies inside."""
    if len(origin) != len(shape):
        raise InvalidArgumentError(
            f"{prefix}volume {volume}: origin {tuple(origin)} has {len(origin)} axes, the volume has {len(shape)}"
        )
    if any(o < 0 or o + c > n for o, c, n in zip(origin, crop_shape, shape, strict=True)):
        raise InvalidArgumentError(
            f"{prefix}{crop_name(volume, origin, crop_shape)} does not fit inside the volume of shape {tuple(shape)}"
        )


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of one epoch: a function of ``(seed, epoch)`` only."""
    return np.random.default_rng(np.random.SeedSequence([seed, epoch]))


def rank_share(crops: Crops, rank: int, world_size: int, drop_last: bool) -> Crops:
    """Rank ``rank``'s crops, as DistributedSampler shares an epoch: padded with the epoch's
    first crops (or, with ``drop_last``, cut) to a multiple of ``world_size``, then every
    ``world_size``-th crop from ``rank``. The shares are disjoint and together make the epoch."""
    n = len(crops)
    if world_size == 1:
        return crops
    if drop_last:
        total = (n // world_size) * world_size
        index = np.arange(total)
    else:
        total = -(-n // world_size) * world_size
        index = np.arange(total) % max(n, 1)
    return crops.take(index[rank:total:world_size])


class EpochBatches(Sequence[Crops]):
    """The batches of a rank's crops, each made (grouped by volume) when it is asked for.

    An epoch of a million batches is then its crops' two arrays (8 bytes a number), where a
    list of the batches took about 470 bytes and 5 µs a batch before the first was read, on
    every pass and in every worker.
    """

    def __init__(self, crops: Crops, batch_size: int, drop_last: bool) -> None:
        self._crops = crops
        self._batch_size = batch_size
        n = len(crops)
        self._count = n // batch_size if drop_last else -(-n // batch_size)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Crops: ...

    @overload
    def __getitem__(self, index: slice) -> list[Crops]: ...

    def __getitem__(self, index: int | slice) -> Crops | list[Crops]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        i = operator.index(index)
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"batch {index} of an epoch of {self._count}")
        start = i * self._batch_size
        return group_by_volume(self._crops.take(slice(start, start + self._batch_size)))


def group_by_volume(crops: Crops) -> Crops:
    """The crops of one batch reordered so that each volume's crops are adjacent (a stable sort
    by volume), so one read per volume lands in one contiguous part of the batch."""
    return crops.take(np.argsort(crops.volumes, kind="stable"))


def volume_runs(volumes: Int64Array) -> list[tuple[int, int, int]]:
    """``(volume, start, stop)`` of each run of equal volumes in a grouped batch."""
    if volumes.size == 0:
        return []
    first = int(volumes[0])
    if first == int(volumes[-1]) and (volumes == first).all():  # one volume: most batches
        return [(first, 0, int(volumes.size))]
    cuts = np.flatnonzero(np.diff(volumes)) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [volumes.size]])
    return [(int(volumes[a]), int(a), int(b)) for a, b in zip(starts, stops)]
