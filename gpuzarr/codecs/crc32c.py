"""``crc32c`` — bytes -> bytes, appends a little-endian CRC-32C of the data.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/crc32c/index.html
v3 name ``crc32c``. No configuration::

    {"name": "crc32c"}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError
from .base import BytesToBytesCodec, as_uint8
from .registry import register_codec

if TYPE_CHECKING:
    import numpy as np

    from ..store.base import Buffer


def crc32c(data: Buffer) -> int:
    import google_crc32c

    return int(google_crc32c.value(as_uint8(data)))


@register_codec
@dataclass(frozen=True)
class Crc32cCodec(BytesToBytesCodec):
    name = "crc32c"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Crc32cCodec:
        if config:
            raise MetadataError(f"configuration: crc32c takes none, got {sorted(config)}")
        return cls()

    def configuration(self) -> None:
        return None

    def encoded_size(self, input_nbytes: int) -> int:
        return input_nbytes + 4

    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        # Checking needs no allocation: the payload is a view of ``data``.
        raw = as_uint8(data)
        if raw.size < 4:
            raise ValueError(f"crc32c: {raw.size} bytes cannot hold a 4-byte checksum")
        payload = raw[:-4]
        stored = int.from_bytes(raw[-4:].tobytes(), "little")
        actual = crc32c(payload)
        if stored != actual:
            raise ValueError(f"crc32c checksum mismatch: stored {stored:#010x}, computed {actual:#010x}")
        return payload

    def encode(self, data: Buffer) -> Buffer:
        raw = as_uint8(data)
        return raw.tobytes() + crc32c(raw).to_bytes(4, "little")
