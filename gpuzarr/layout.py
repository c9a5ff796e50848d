"""The resolved array (:class:`ArrayLayout`): the bridge from metadata to the readers and the writer.

Selections are planned over the *planning grid*, and readers decode *planning chunks* with
``pipeline_at(coords)``. For an unsharded array those are the array's chunks. For an array whose
chain is just ``[sharding_indexed]`` the planning grid is the grid of *inner* chunks, so that a
selection reads only the inner chunks it touches; ``shard_of`` maps an inner chunk to its shard
and its position in the shard. Any other chain that contains sharding is handled as whole shards
through the generic path.

Chunk grids may be regular or rectilinear: chunk (and shard) shapes can vary with position, so
codec pipelines are prepared once per distinct shape and cached.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .codecs.base import ChunkSpec
from .codecs.pipeline import CodecPipeline
from .codecs.sharding import ShardingCodec
from .errors import MetadataError
from .metadata.chain import NESTED_CHAINS
from .metadata.chunk_grid import DimensionGrid
from .metadata.named_dtypes import full
from .metadata.rectilinear import VariableDimensionGrid
from .store.shard_indexes import ShardIndexCache

if TYPE_CHECKING:
    import numpy as np

    from .metadata.v2 import ArrayMetadataV2
    from .metadata.v3 import ArrayMetadata

AnyDimension = DimensionGrid | VariableDimensionGrid


def _is_fast_sharded(pipeline: CodecPipeline) -> bool:
    a2b = pipeline.array_to_bytes[0]
    return isinstance(a2b, ShardingCodec) and not pipeline.array_to_array and not pipeline.bytes_to_bytes


@dataclass(eq=False)
class ArrayLayout:
    """The resolved array that both readers and the writer work from.

    Built once per metadata version by :meth:`from_metadata`: the metadata, the codec pipeline
    prepared for the stored chunk shape (and, on rectilinear grids, for every other shape met),
    the planning grid (inner chunks when sharded) and shard addressing.
    """

    metadata: ArrayMetadata | ArrayMetadataV2
    prefix: str
    pipeline: CodecPipeline
    sharding: ShardingCodec | None
    #: False: reading a missing chunk raises ChunkNotFoundError instead of giving the fill value.
    fill_missing_data_reads: bool = True
    #: True: chunks equal to the fill value are stored, not erased.
    store_data_equal_to_fill_value: bool = False
    _pipelines: dict[tuple[int, ...], CodecPipeline] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _dims_cache: dict[tuple[int, ...], Any] = field(default_factory=dict, repr=False)
    _planning_dims: tuple[AnyDimension, ...] | None = field(default=None, repr=False)
    _shard_indexes: ShardIndexCache | None = field(default=None, repr=False)

    @property
    def shard_indexes(self) -> ShardIndexCache:
        """The shard indexes this array has read, kept across reads.

        For sharded arrays; :mod:`gpuzarr.store.shard_indexes` says when one is used again.
        Made on first use: a listed group of unsharded arrays made one each for nothing.
        """
        cache = self._shard_indexes
        if cache is None:
            with self._lock:
                if self._shard_indexes is None:
                    self._shard_indexes = ShardIndexCache()
                cache = self._shard_indexes
        return cache

    @classmethod
    def from_metadata(
        cls,
        metadata: ArrayMetadata | ArrayMetadataV2,
        prefix: str = "",
        *,
        fill_missing_data_reads: bool = True,
        store_data_equal_to_fill_value: bool = False,
    ) -> ArrayLayout:
        """Resolve ``metadata`` of the array whose keys start with ``prefix``."""
        pipeline = CodecPipeline.from_codecs(
            metadata.codecs, cls._spec(metadata, metadata.chunk_shape), fields=_codec_fields(metadata)
        )
        sharding = pipeline.array_to_bytes[0] if _is_fast_sharded(pipeline) else None
        assert sharding is None or isinstance(sharding, ShardingCodec)
        layout = cls(
            metadata,
            prefix,
            pipeline,
            sharding,
            fill_missing_data_reads=fill_missing_data_reads,
            store_data_equal_to_fill_value=store_data_equal_to_fill_value,
        )
        layout._pipelines[metadata.chunk_shape] = pipeline
        if sharding is not None:
            layout._check_shard_extents(sharding.chunk_shape)
        return layout

    def _check_shard_extents(self, inner: tuple[int, ...]) -> None:
        grid = self.metadata.chunk_grid
        for axis, sizes in enumerate(getattr(grid, "chunk_shapes", ())):
            listed = [sizes] if isinstance(sizes, int) else sizes
            bad = [n for n in listed if n % inner[axis]]
            if bad:
                raise MetadataError(
                    f"chunk_grid.configuration.chunk_shapes[{axis}]: shard extent {bad[0]} is not a "
                    f"multiple of the inner chunk size {inner[axis]}"
                )

    def _stored_dims(self) -> tuple[AnyDimension, ...]:
        dims = self._dims_cache.get(self.metadata.shape)
        if dims is None:
            dims = self.metadata.chunk_grid.dimensions(self.metadata.shape)
            self._dims_cache = {self.metadata.shape: dims}
        return dims

    @staticmethod
    def _spec(metadata: ArrayMetadata | ArrayMetadataV2, shape: tuple[int, ...]) -> ChunkSpec:
        return ChunkSpec(shape, metadata.dtype, metadata.fill_value)

    def stored_pipeline(self, shape: tuple[int, ...]) -> CodecPipeline:
        """The full chain prepared for a stored chunk (or shard) of ``shape``."""
        pipeline = self._pipelines.get(shape)
        if pipeline is None:
            pipeline = CodecPipeline.from_codecs(
                self.metadata.codecs, self._spec(self.metadata, shape), fields=_codec_fields(self.metadata)
            )
            with self._lock:
                self._pipelines[shape] = pipeline
        return pipeline

    # -- the planning grid -----------------------------------------------------------------------

    @property
    def chunk_pipeline(self) -> CodecPipeline:
        """The pipeline of the largest planning chunk (all of them, on a regular grid)."""
        if self.sharding is not None:
            assert self.sharding.inner is not None
            return self.sharding.inner
        return self.pipeline

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self.chunk_pipeline.spec.shape

    def stored_shape_at(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the stored object (chunk, or shard when sharded) at grid ``coords``."""
        return self.metadata.chunk_grid.chunk_shape_at(coords)

    def pipeline_at(self, coords: tuple[int, ...]) -> CodecPipeline:
        """Pipeline of the planning chunk at ``coords``."""
        if self.sharding is not None:
            return self.chunk_pipeline
        return self.stored_pipeline(self.stored_shape_at(coords))

    def chunk_shape_at(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        return self.pipeline_at(coords).spec.shape

    def fill_chunk(self, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        spec = self.pipeline_at(coords).spec
        return full(spec.shape, spec.fill_value, spec.dtype)

    def dimensions(self, shape: tuple[int, ...] | None = None) -> tuple[AnyDimension, ...]:
        """The planning grid's axes for an array of ``shape`` (default: the array's, cached)."""
        if shape is None:
            if self._planning_dims is None:
                self._planning_dims = self.dimensions(self.metadata.shape)
            return self._planning_dims
        stored = self.metadata.chunk_grid.dimensions(shape)
        if self.sharding is None:
            return stored
        # Every shard extent is a multiple of the inner chunk shape (checked when the layout is
        # built), so inner chunks form a regular grid even when the shard grid is rectilinear.
        return tuple(DimensionGrid(d.size, c) for d, c in zip(stored, self.sharding.chunk_shape, strict=True))

    # -- shards ----------------------------------------------------------------------------------

    def key(self, stored_coords: tuple[int, ...]) -> str:
        """Store key of a stored object (a chunk, or a shard when sharded)."""
        return self.prefix + self.metadata.chunk_key(stored_coords)

    def sharding_at(self, shard: tuple[int, ...]) -> ShardingCodec:
        codec = self.stored_pipeline(self.stored_shape_at(shard)).array_to_bytes[0]
        assert isinstance(codec, ShardingCodec)
        return codec

    @cached_property
    def _regular_inner_per_shard(self) -> tuple[int, ...] | None:
        """Inner chunks per shard along each axis where every shard has the same shape (a
        regular grid of shards), else None."""
        if self.sharding is None or hasattr(self.metadata.chunk_grid, "chunk_shapes"):
            return None
        return self.sharding.chunks_per_shard

    def inner_chunks_in_bounds(self, shard: tuple[int, ...]) -> int:
        """How many of a shard's inner chunks intersect the array (fewer than the shard holds
        for a shard on the array's edge)."""
        codec = self.sharding_at(shard)
        n = 1
        for dim, s, inner, per in zip(
            self.metadata.chunk_grid.dimensions(self.metadata.shape),
            shard,
            codec.chunk_shape,
            codec.chunks_per_shard,
            strict=True,
        ):
            start = int(dim.chunk_start(s))
            n *= max(0, min(per, -(-(dim.size - start) // inner)))
        return n

    def shard_of(self, coords: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """(shard coordinates, C-order position in the shard) of an inner chunk."""
        assert self.sharding is not None
        per_shard = self._regular_inner_per_shard
        if per_shard is not None:
            # A regular grid: integer arithmetic (the general walk below took about 5 µs a call,
            # a tenth of reading 16,384 inner chunks of a few shards).
            shard_list = []
            position = 0
            for c, p in zip(coords, per_shard, strict=True):
                s, w = divmod(c, p)
                shard_list.append(s)
                position = position * p + w
            return tuple(shard_list), position
        inner = self.sharding.chunk_shape
        shard: list[int] = []
        within: list[int] = []
        per: list[int] = []
        for c, dim, n in zip(coords, self._stored_dims(), inner, strict=True):
            start = c * n
            s = int(dim.chunk_of(start))
            shard.append(s)
            within.append((start - int(dim.chunk_start(s))) // n)
            per.append(dim.chunk_extent(s) // n)
        # C order, in Python ints (np.ravel_multi_index costs more than the rest of this call)
        position = 0
        for w, p in zip(within, per, strict=True):
            if not 0 <= w < p:
                raise ValueError(f"inner chunk {coords} lies outside its shard {tuple(shard)}")
            position = position * p + w
        return tuple(shard), position


def _codec_fields(metadata: ArrayMetadata | ArrayMetadataV2) -> tuple[str, ...] | None:
    """Where each codec of a v2 array comes from in its .zarray, for errors (v3: ``codecs[i]``)."""
    fields: tuple[str, ...] | None = getattr(metadata, "codec_fields", None)
    return fields


def with_complete_codecs(metadata: ArrayMetadata) -> ArrayMetadata:
    """``metadata`` of a new v3 array with each codec's configuration written out whole: every
    member its codec resolved (defaults, Blosc's ``typesize``), as zarr-python and TensorStore
    write them. A chain given in part (``compressors="zstd"``, ``{"name": "blosc"}``) read as
    gpuzarr meant it everywhere: TensorStore refuses a zstd codec without its ``level`` or a
    Blosc codec without ``cname``, ``clevel`` and ``shuffle``. A codec marked
    ``must_understand`` is kept as given (its resolved form may leave one out); the others
    beside it, and in a shard's chains, are written whole all the same."""
    spec = ArrayLayout._spec(metadata, metadata.chunk_shape)
    written = CodecPipeline.from_codecs(metadata.codecs, spec, fields=_codec_fields(metadata)).to_json()
    return replace(metadata, codecs=tuple(_completed_chain(list(metadata.codecs), written)))


def _completed_chain(given: list[Any], written: list[Any]) -> list[Any]:
    """``given`` codec by codec with the configurations of ``written`` (the same chain resolved),
    where the two line up by name."""
    if [c.get("name") if isinstance(c, dict) else None for c in given] != [c.get("name") for c in written]:
        return given
    return [_completed(codec, complete) for codec, complete in zip(given, written, strict=True)]


def _completed(given: Any, complete: Any) -> Any:
    if not isinstance(given, dict) or "must_understand" in given or "configuration" not in complete:
        return given
    config = dict(complete["configuration"])
    given_config = given.get("configuration") or {}
    for key in NESTED_CHAINS:
        if isinstance(given_config.get(key), list) and isinstance(config.get(key), list):
            config[key] = _completed_chain(given_config[key], config[key])
    return {**given, "configuration": config}
