"""How an array's chunks are stored: the bridge from metadata to the read/write engines.

The engines plan selections over the *planning grid* and decode *planning chunks* with
``chunk_pipeline``. For an unsharded array those are the array's chunks. For an array whose
chain is ``[sharding_indexed]`` (optionally preceded by nothing and followed by nothing) the
planning grid is the grid of *inner* chunks, so that a selection reads only the inner chunks it
touches; ``shard_of`` maps an inner chunk to its shard key and its position in the shard. Any
other chain that contains sharding is handled as whole shards through the generic path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codecs.base import ChunkSpec
from ..codecs.pipeline import CodecPipeline
from ..codecs.sharding import ShardingCodec
from ..spec.chunk_grid import DimensionGrid, RegularChunkGrid
from ..spec.v2 import ArrayMetadataV2
from ..spec.v3 import ArrayMetadata


@dataclass(frozen=True, eq=False)
class StorageLayout:
    metadata: ArrayMetadata | ArrayMetadataV2
    prefix: str
    pipeline: CodecPipeline
    chunk_pipeline: CodecPipeline
    sharding: ShardingCodec | None

    @classmethod
    def from_metadata(cls, metadata: ArrayMetadata | ArrayMetadataV2, prefix: str = "") -> StorageLayout:
        spec = ChunkSpec(metadata.chunk_shape, metadata.dtype, metadata.fill_value)
        pipeline = CodecPipeline.from_codecs(metadata.codecs, spec)
        a2b = pipeline.array_to_bytes[0]
        if isinstance(a2b, ShardingCodec) and not pipeline.array_to_array and not pipeline.bytes_to_bytes:
            assert a2b.inner is not None
            return cls(metadata, prefix, pipeline, a2b.inner, a2b)
        return cls(metadata, prefix, pipeline, pipeline, None)

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """Shape of a planning chunk (the inner chunk when sharded)."""
        return self.chunk_pipeline.spec.shape

    @property
    def grid(self) -> RegularChunkGrid:
        return RegularChunkGrid(self.chunk_shape)

    def dimensions(self, shape: tuple[int, ...] | None = None) -> tuple[DimensionGrid, ...]:
        return self.grid.dimensions(self.metadata.shape if shape is None else shape)

    def key(self, stored_coords: tuple[int, ...]) -> str:
        """Store key of a stored object (a chunk, or a shard when sharded)."""
        return self.prefix + self.metadata.chunk_key(stored_coords)

    def shard_of(self, coords: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """(shard coordinates, C-order position in the shard) of an inner chunk."""
        assert self.sharding is not None
        per = self.sharding.chunks_per_shard
        shard = tuple(c // p for c, p in zip(coords, per, strict=True))
        within = tuple(c % p for c, p in zip(coords, per, strict=True))
        return shard, int(np.ravel_multi_index(within, per)) if per else 0

    def fill_chunk(self) -> np.ndarray[Any, Any]:
        spec = self.chunk_pipeline.spec
        return np.full(spec.shape, spec.fill_value, dtype=spec.dtype)
