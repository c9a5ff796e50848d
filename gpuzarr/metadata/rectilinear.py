"""Rectilinear chunk grids (ZEP 3, published as the zarr-extensions ``rectilinear`` grid).

``{"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [...]}}`` where each
axis is an integer (a regular chunk size), or a list whose entries are chunk sizes or
``[size, count]`` run-length pairs::

    "chunk_shapes": [[5, 5, 5, 15, 15, 20, 35], 10]      # axis 0: 7 chunks, axis 1: regular 10
    "chunk_shapes": [[[10, 4], 3], [[2, 50]]]            # axis 0: 10,10,10,10,3; axis 1: 2 x 50

The sizes along an axis must add up to at least the array's extent on that axis. Each chunk is
stored with exactly its listed extent (unlike a regular grid, no padding past the array edge
except in a final chunk that reaches past it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError
from .chunk_grid import DimensionGrid
from .json_util import expect_dict, split_name_configuration

if TYPE_CHECKING:
    from .json_types import NamedConfigJSON


@dataclass(frozen=True, eq=False)
class VariableDimensionGrid:
    """One axis cut into chunks of listed sizes: same interface as DimensionGrid."""

    size: int
    boundaries: np.ndarray[Any, np.dtype[np.int64]]  # chunk starts, plus the end of the last chunk

    @property
    def nchunks(self) -> int:
        return int(np.searchsorted(self.boundaries, self.size, side="left")) if self.size else 0

    def chunk_of(self, index: Any) -> Any:
        found = np.searchsorted(self.boundaries, index, side="right") - 1
        return int(found) if np.ndim(found) == 0 else found

    def chunk_start(self, chunk: Any) -> Any:
        if np.ndim(chunk) == 0:
            return int(self.boundaries[int(chunk)])
        return self.boundaries[np.asarray(chunk)]

    def chunk_extent(self, chunk: int) -> int:
        return int(self.boundaries[chunk + 1] - self.boundaries[chunk])

    def chunk_valid(self, chunk: int) -> int:
        return int(min(self.boundaries[chunk + 1], self.size) - self.boundaries[chunk])

    def valid_extents(self) -> tuple[int, ...]:
        # The listed sizes may reach past the extent (after a shrinking resize): the chunks
        # that start past it hold nothing, and the last one is cut at the edge.
        inside = np.minimum(self.boundaries[: self.nchunks + 1], self.size)
        return tuple(int(n) for n in np.diff(inside))


AxisChunks = int | tuple[int, ...]

#: The largest extent an axis's chunk sizes may add up to: grid positions are int64.
MAX_LISTED_EXTENT = 2**63 - 1


def _expand_axis(value: Any, field: str, extent: int, budget: int) -> AxisChunks:
    """One axis of ``chunk_shapes``: a regular size, or every chunk's size with the
    ``[size, count]`` runs expanded, at most ``budget`` of them (what is left of the
    ``max_rectilinear_chunks`` setting, checked before a run is expanded: a run of a few bytes
    of JSON may ask for terabytes of sizes). Chunks past the array's extent are allowed ("Overflowing
    L by multiple chunks is permitted"; a shrinking resize leaves the sizes of those it cut
    off listed, and they come back when the array grows again); an empty list suits an axis
    of extent 0 only."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise MetadataError(f"{field}: chunk size must be positive, got {value}")
        return value
    if not isinstance(value, list):
        raise MetadataError(f"{field}: expected an integer or a list of sizes, got {value!r}")
    sizes: list[int] = []

    def refuse_over_budget(where: str, n: int) -> None:
        if n > budget:
            raise MetadataError(
                f"{where}: lists {n} chunks or more, past config max_rectilinear_chunks "
                f"({budget} left of it for this axis); raise it with "
                "gpuzarr.config.set(max_rectilinear_chunks=...)"
            )

    for i, entry in enumerate(value):
        if isinstance(entry, int) and not isinstance(entry, bool):
            if entry <= 0:
                raise MetadataError(f"{field}[{i}]: chunk size must be positive, got {entry}")
            sizes.append(entry)
        elif (
            isinstance(entry, list)
            and len(entry) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
        ):
            size, count = entry
            if size <= 0 or count < 0:
                raise MetadataError(f"{field}[{i}]: [size, count] needs size > 0 and count >= 0, got {entry}")
            refuse_over_budget(f"{field}[{i}]", len(sizes) + count)
            sizes.extend([size] * count)
        else:
            raise MetadataError(f"{field}[{i}]: expected a size or a [size, count] pair, got {entry!r}")
        refuse_over_budget(field, len(sizes))
    if not sizes and extent > 0:
        raise MetadataError(f"{field}: needs at least one chunk size")
    if sum(sizes) > MAX_LISTED_EXTENT:
        # The grid's chunk boundaries (int64) would wrap around and name chunks that do not exist.
        raise MetadataError(f"{field}: chunk sizes add up to {sum(sizes)}, more than {MAX_LISTED_EXTENT}")
    return tuple(sizes)


def _compress_axis(sizes: AxisChunks) -> Any:
    """Sizes -> the JSON form, with runs of equal sizes written as [size, count]."""
    if isinstance(sizes, int):
        return sizes
    out: list[Any] = []
    i = 0
    while i < len(sizes):
        j = i
        while j < len(sizes) and sizes[j] == sizes[i]:
            j += 1
        out.append([sizes[i], j - i] if j - i > 1 else sizes[i])
        i = j
    return out


@dataclass(frozen=True)
class RectilinearChunkGrid:
    chunk_shapes: tuple[AxisChunks, ...]

    @classmethod
    def from_json(cls, value: Any, shape: tuple[int, ...]) -> RectilinearChunkGrid:
        """The grid of an array of ``shape``'s ``chunk_grid`` object."""
        ndim = len(shape)
        name, config = split_name_configuration(value, "chunk_grid")
        if name != "rectilinear":
            raise MetadataError(f"chunk_grid.name: expected 'rectilinear', got {name!r}")
        config = expect_dict(config, "chunk_grid.configuration")
        extra = set(config) - {"kind", "chunk_shapes"}
        if extra:
            raise MetadataError(f"chunk_grid.configuration: unexpected members {sorted(extra)}")
        kind = config.get("kind", "inline")
        if kind != "inline":
            raise MetadataError(f"chunk_grid.configuration.kind: only 'inline' is supported, got {kind!r}")
        shapes = config.get("chunk_shapes")
        field = "chunk_grid.configuration.chunk_shapes"
        if not isinstance(shapes, list):
            raise MetadataError(f"{field}: expected a list, got {shapes!r}")
        if len(shapes) != ndim:
            raise MetadataError(f"{field}: must have {ndim} entries, got {len(shapes)}")
        from .. import config as settings  # imported late: config is the top layer's module

        budget: int = settings.get("max_rectilinear_chunks")
        axes: list[AxisChunks] = []
        for i, s in enumerate(shapes):
            axis = _expand_axis(s, f"{field}[{i}]", shape[i], budget)
            budget -= 0 if isinstance(axis, int) else len(axis)
            axes.append(axis)
        return cls(tuple(axes))

    def to_json(self) -> NamedConfigJSON:
        return {
            "name": "rectilinear",
            "configuration": {"kind": "inline", "chunk_shapes": [_compress_axis(s) for s in self.chunk_shapes]},
        }

    def validate_shape(self, shape: tuple[int, ...]) -> None:
        for axis, (n, sizes) in enumerate(zip(shape, self.chunk_shapes, strict=True)):
            if not isinstance(sizes, int) and sum(sizes) < n:
                raise MetadataError(
                    f"chunk_grid.configuration.chunk_shapes[{axis}]: chunk sizes add up to "
                    f"{sum(sizes)}, less than the array's extent {n}"
                )

    def dimensions(self, shape: tuple[int, ...]) -> tuple[DimensionGrid | VariableDimensionGrid, ...]:
        self.validate_shape(shape)
        dims: list[DimensionGrid | VariableDimensionGrid] = []
        for n, sizes in zip(shape, self.chunk_shapes, strict=True):
            if isinstance(sizes, int):
                dims.append(DimensionGrid(n, sizes))
            else:
                dims.append(VariableDimensionGrid(n, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)))
        return tuple(dims)

    def grown_to(self, shape: tuple[int, ...], multiples: tuple[int, ...] | None = None) -> RectilinearChunkGrid:
        """This grid for an array grown to ``shape``: an axis whose listed sizes add up to less
        gets one more chunk, of the growth (rounded up to ``multiples``, a sharded grid's inner
        chunk, which every shard holds a whole number of): an append adds a chunk, as the data
        of a series arrives. Chunks a shrink left listed past the edge are used first."""
        axes: list[AxisChunks] = []
        for axis, (n, sizes) in enumerate(zip(shape, self.chunk_shapes, strict=True)):
            listed = 0 if isinstance(sizes, int) else sum(sizes)
            if isinstance(sizes, int) or listed >= n:
                axes.append(sizes)
                continue
            step = multiples[axis] if multiples is not None else 1
            axes.append((*sizes, -(-(n - listed) // step) * step))
        return RectilinearChunkGrid(tuple(axes))

    def grid_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(d.nchunks for d in self.dimensions(shape))

    def chunk_shape_at(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(
            s if isinstance(s, int) else s[c] for s, c in zip(self.chunk_shapes, coords, strict=True)
        )

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """The largest chunk along each axis (the shape buffers are sized for)."""
        # An axis of extent 0 may list no chunk: nothing is ever read there.
        return tuple(s if isinstance(s, int) else max(s, default=1) for s in self.chunk_shapes)

    @property
    def is_regular(self) -> bool:
        return all(isinstance(s, int) for s in self.chunk_shapes)
