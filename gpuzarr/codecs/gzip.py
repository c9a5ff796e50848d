"""``gzip`` — bytes -> bytes, RFC 1952 gzip streams.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/gzip/index.html
v3 name ``gzip`` (v2 ids ``gzip``; v2 ``zlib`` is the RFC 1950 stream). Configuration::

    {"name": "gzip", "configuration": {"level": 5}}

Uses zlib (what numcodecs' GZip wraps) directly: one call per chunk, releasing the GIL, and no
GzipFile object per chunk. Decoding accepts concatenated members, as gzip readers must.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError
from .base import BytesToBytesCodec
from .registry import register_codec

if TYPE_CHECKING:
    import numpy as np

    from ..store.base import Buffer


@register_codec
@dataclass(frozen=True)
class GzipCodec(BytesToBytesCodec):
    name = "gzip"
    level: int = 5

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GzipCodec:
        extra = set(config) - {"level"}
        if extra:
            raise MetadataError(f"configuration: unexpected members {sorted(extra)}")
        level = config.get("level", 5)
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
            raise MetadataError(f"configuration.level: expected an integer 0-9, got {level!r}")
        return cls(level)

    def configuration(self) -> dict[str, Any]:
        return {"level": self.level}

    def decode(self, data: Buffer, out: np.ndarray[Any, Any] | None = None) -> Buffer:
        d = zlib.decompressobj(wbits=31)
        result = d.decompress(data)
        # Further members (rare: concatenated gzip streams) follow the first one.
        while d.eof and d.unused_data:
            rest = d.unused_data
            d = zlib.decompressobj(wbits=31)
            result += d.decompress(rest)
        if not d.eof:
            raise ValueError("truncated gzip stream")
        return result

    def encode(self, data: Buffer) -> Buffer:
        c = zlib.compressobj(self.level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
