"""Chunk grids: how an array's index space is cut into chunks.

``RegularChunkGrid`` is the v3 core grid. Planning never looks at the grid object itself but at
one :class:`DimensionGrid` per axis, which answers "which chunk holds index i, where does chunk c
start, how long is it", so regular and (later) rectilinear grids plan the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError
from .json_util import expect_dict, expect_int_list, split_name_configuration

if TYPE_CHECKING:
    from .json_types import NamedConfigJSON


@dataclass(frozen=True)
class DimensionGrid:
    """The chunking of one axis of length ``size`` into chunks of ``chunk_size`` elements.

    Every chunk has the stored extent ``chunk_size``; the last one may reach past ``size``.
    """

    size: int
    chunk_size: int

    @property
    def nchunks(self) -> int:
        if self.size == 0:
            return 0
        return -(-self.size // self.chunk_size)

    def chunk_of(self, index: Any) -> Any:
        """Chunk number holding each index (scalar or array)."""
        return index // self.chunk_size

    def chunk_start(self, chunk: Any) -> Any:
        return chunk * self.chunk_size

    def chunk_extent(self, chunk: int) -> int:
        """Stored extent of a chunk (what the codec chain encodes)."""
        return self.chunk_size

    def chunk_valid(self, chunk: int) -> int:
        """How many elements of the chunk lie inside the array."""
        return min(self.chunk_size, self.size - chunk * self.chunk_size)

    def valid_extents(self) -> tuple[int, ...]:
        """How many elements of each chunk lie inside the array, chunk by chunk (they add up
        to ``size``): the block sizes of one axis in Dask's terms."""
        n = self.nchunks
        if n == 0:
            return ()
        return (self.chunk_size,) * (n - 1) + (self.size - (n - 1) * self.chunk_size,)


@dataclass(frozen=True)
class RegularChunkGrid:
    """``{"name": "regular", "configuration": {"chunk_shape": [...]}}``."""

    chunk_shape: tuple[int, ...]

    @classmethod
    def from_json(cls, value: Any, ndim: int) -> RegularChunkGrid:
        name, config = split_name_configuration(value, "chunk_grid")
        if name != "regular":
            raise MetadataError(f"chunk_grid.name: unsupported chunk grid {name!r} (expected 'regular')")
        config = expect_dict(config, "chunk_grid.configuration")
        extra = set(config) - {"chunk_shape"}
        if extra:
            raise MetadataError(f"chunk_grid.configuration: unexpected members {sorted(extra)}")
        shape = expect_int_list(config.get("chunk_shape"), "chunk_grid.configuration.chunk_shape")
        if len(shape) != ndim:
            raise MetadataError(
                f"chunk_grid.configuration.chunk_shape: must have {ndim} entries, got {len(shape)}"
            )
        if any(c <= 0 for c in shape):
            raise MetadataError(
                f"chunk_grid.configuration.chunk_shape: entries must be positive, got {shape}"
            )
        return cls(tuple(shape))

    def to_json(self) -> NamedConfigJSON:
        return {"name": "regular", "configuration": {"chunk_shape": list(self.chunk_shape)}}

    def dimensions(self, shape: tuple[int, ...]) -> tuple[DimensionGrid, ...]:
        return tuple(DimensionGrid(s, c) for s, c in zip(shape, self.chunk_shape, strict=True))

    def grid_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(d.nchunks for d in self.dimensions(shape))

    def chunk_shape_at(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        return self.chunk_shape


