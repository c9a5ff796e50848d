"""``sharding_indexed`` — array -> bytes, many inner chunks in one stored object plus an index.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/sharding-indexed/index.html
v3 name ``sharding_indexed``. Configuration::

    {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [64, 64, 64],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 3}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "crc32c"}],
        "index_location": "end"}}

This class holds the configuration, resolves it (inner and index pipelines) and describes the
shard format as a :class:`~gpuzarr.store.sharding.ShardLayout`; the format itself (index, split,
encode) and the fetch of inner chunks live in ``store.sharding``. ``decode``/``encode`` handle
*whole* shards (when the chain has codecs around sharding that prevent partial reads, and for
nested sharding); reads of parts go through ``store.sharding`` and the readers decode the inner
chunks with :attr:`ShardingCodec.inner`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CorruptChunkError, MetadataError
from ..metadata.chain import DEFAULT_INDEX_CODECS
from ..metadata.dtypes import fill_value_bytes_equal
from ..metadata.limits import check_chunk_bytes, check_shard_index_bytes
from ..metadata.named_dtypes import full
from ..metadata.v3 import normalize_codec_json
from ..store.sharding import EMPTY, ShardLayout, encode_shard
from .base import ArrayToBytesCodec, ChunkSpec
from .pipeline import CodecPipeline
from .registry import register_codec

if TYPE_CHECKING:
    from ..metadata.json_types import CodecJSON
    from ..store.base import Buffer


@register_codec
@dataclass(frozen=True, eq=False)
class ShardingCodec(ArrayToBytesCodec):
    name = "sharding_indexed"
    holds_shards = True
    chunk_shape: tuple[int, ...]
    codecs: tuple[CodecJSON, ...] = ({"name": "bytes", "configuration": {"endian": "little"}},)
    index_codecs: tuple[CodecJSON, ...] = DEFAULT_INDEX_CODECS
    index_location: str = "end"
    # Filled by resolve():
    shard_shape: tuple[int, ...] | None = field(default=None, compare=False)
    inner: CodecPipeline | None = field(default=None, compare=False, repr=False)
    index: CodecPipeline | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ShardingCodec:
        extra = set(config) - {"chunk_shape", "codecs", "index_codecs", "index_location"}
        if extra:
            raise MetadataError(f"configuration: unexpected members {sorted(extra)}")
        shape = config.get("chunk_shape")
        if not isinstance(shape, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in shape
        ):
            raise MetadataError(
                f"configuration.chunk_shape: expected a list of positive integers, got {shape!r}"
            )
        location = config.get("index_location", "end")
        if location not in ("start", "end"):
            raise MetadataError(
                f"configuration.index_location: expected 'start' or 'end', got {location!r}"
            )
        if "codecs" not in config:
            raise MetadataError("configuration.codecs: required (the inner chunks' codecs), but missing")
        codecs = config["codecs"]
        index_codecs = config.get("index_codecs", list(DEFAULT_INDEX_CODECS))
        for name, value in (("codecs", codecs), ("index_codecs", index_codecs)):
            if not isinstance(value, list) or not value:
                raise MetadataError(f"configuration.{name}: expected a non-empty list, got {value!r}")
        return cls(
            tuple(shape),
            tuple(normalize_codec_json(c, f"configuration.codecs[{i}]") for i, c in enumerate(codecs)),
            tuple(
                normalize_codec_json(c, f"configuration.index_codecs[{i}]")
                for i, c in enumerate(index_codecs)
            ),
            location,
        )

    def configuration(self) -> dict[str, Any]:
        inner = self.inner.to_json() if self.inner is not None else [dict(c) for c in self.codecs]
        index = (
            self.index.to_json() if self.index is not None else [dict(c) for c in self.index_codecs]
        )
        return {
            "chunk_shape": list(self.chunk_shape),
            "codecs": inner,
            "index_codecs": index,
            "index_location": self.index_location,
        }

    def resolve(self, spec: ChunkSpec) -> ShardingCodec:
        if len(self.chunk_shape) != len(spec.shape):
            raise MetadataError(
                f"configuration.chunk_shape: must have {len(spec.shape)} entries, "
                f"got {len(self.chunk_shape)}"
            )
        if any(s % c for s, c in zip(spec.shape, self.chunk_shape, strict=True)):
            raise MetadataError(
                f"configuration.chunk_shape: {list(self.chunk_shape)} must divide the shard "
                f"shape {list(spec.shape)}"
            )
        check_chunk_bytes(self.chunk_shape, spec.dtype, "configuration.chunk_shape")
        per_shard = tuple(s // c for s, c in zip(spec.shape, self.chunk_shape, strict=True))
        check_shard_index_bytes(per_shard, "configuration.chunk_shape")
        inner = CodecPipeline.from_codecs(
            self.codecs,
            ChunkSpec(self.chunk_shape, spec.dtype, spec.fill_value),
            "configuration.codecs",
        )
        index = CodecPipeline.from_codecs(
            self.index_codecs,
            ChunkSpec((*per_shard, 2), np.dtype(np.uint64), EMPTY),
            "configuration.index_codecs",
        )
        if index.encoded_size() is None:
            raise MetadataError(
                "configuration.index_codecs: the index must have a fixed encoded size "
                "(use bytes, then crc32c or a numcodecs checksum, only)"
            )
        return ShardingCodec(
            self.chunk_shape, self.codecs, self.index_codecs, self.index_location,
            tuple(spec.shape), inner, index,
        )

    # -- layout --------------------------------------------------------------------------------

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        assert self.shard_shape is not None, "resolve() first"
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape, strict=True))

    @property
    def layout(self) -> ShardLayout:
        assert self.index is not None, "resolve() first"
        nbytes = self.index.encoded_size()
        assert nbytes is not None
        assert self.inner is not None, "resolve() first"
        return ShardLayout(
            nbytes,
            self.index_location == "end",
            self.chunks_per_shard,
            self._decode_index,
            self._encode_index,
            self.inner.max_stored_nbytes,  # None where the inner chunks are shards themselves
        )

    def _decode_index(self, raw: Buffer, key: str) -> np.ndarray[Any, Any]:
        assert self.index is not None
        try:
            return self.index.decode(raw, key)
        except CorruptChunkError as exc:
            raise CorruptChunkError(key, f"shard index: {exc.reason}") from exc

    def _encode_index(self, table: np.ndarray[Any, Any]) -> bytes:
        assert self.index is not None
        return bytes(memoryview(self.index.encode(table)).cast("B"))

    def max_encoded_size(self, input_nbytes: int) -> int | None:
        """A shard holds its index and at most every inner chunk's largest encoding."""
        assert self.inner is not None and self.index is not None, "resolve() first"
        inner, index = self.inner.max_encoded_size(), self.index.encoded_size()
        if inner is None or index is None:
            return None
        return index + self.layout.n_inner * inner

    def inner_slices(self, i: int) -> tuple[slice, ...]:
        """The region of the shard covered by inner chunk ``i`` (C order)."""
        coords = np.unravel_index(i, self.chunks_per_shard)
        return tuple(
            slice(int(c) * n, (int(c) + 1) * n) for c, n in zip(coords, self.chunk_shape, strict=True)
        )

    # -- whole-shard codec ---------------------------------------------------------------------

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        assert self.inner is not None
        key = "inner shard"
        out = full(spec.shape, spec.fill_value, spec.dtype)
        for i, part in enumerate(self.layout.split(data, key)):
            if part is not None:
                out[self.inner_slices(i)] = self.inner.decode(part, key)
        return out

    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> Buffer:
        assert self.inner is not None
        parts = [
            None
            if fill_value_bytes_equal(chunk[self.inner_slices(i)], spec.fill_value)
            else self.inner.encode(chunk[self.inner_slices(i)])
            for i in range(self.layout.n_inner)
        ]
        return encode_shard(parts, self.layout)
