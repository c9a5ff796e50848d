"""``gzip`` — bytes -> bytes, RFC 1952 gzip streams.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/gzip/index.html
v3 name ``gzip`` (v2 ids ``gzip``; v2 ``zlib`` is the RFC 1950 stream). Configuration::

    {"name": "gzip", "configuration": {"level": 5}}

Decoding inflates with ISA-L where python-isal is installed, else with the standard library's
zlib (:mod:`.inflate`): one call per chunk, releasing the GIL, and no GzipFile object per chunk.
It accepts concatenated members, as gzip readers must, and stops past the chunk's size
(:func:`~gpuzarr.codecs.bounded.inflate`): gzip declares no size that could be checked first.
Encoding deflates with zlib-ng where python-zlib-ng is installed, else with the standard
library's zlib (:mod:`.deflate`): both at zlib's levels 0-9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError
from .base import ONE_THREAD_DECODE_NBYTES, BytesToBytesCodec
from .bounded import compressed_size_bound
from .deflate import compress_gzip
from .inflate import decode_gzip
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

    def max_encoded_size(self, input_nbytes: int) -> int:
        return compressed_size_bound(input_nbytes)

    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        return decode_gzip(data, max_nbytes, out)

    def one_thread_pays(self, nbytes: int) -> bool:
        return nbytes <= ONE_THREAD_DECODE_NBYTES

    def encode(self, data: Buffer) -> Buffer:
        return compress_gzip(data, self.level)
