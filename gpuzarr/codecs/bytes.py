"""``bytes`` — array -> bytes, element by element in C order with a byte order.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/bytes/index.html
v3 name ``bytes`` (v2: the dtype string's byte order). Configuration::

    {"name": "bytes", "configuration": {"endian": "little"}}

``endian`` ("little" | "big") is required for types wider than one byte and may be omitted for
one-byte types.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError
from ..metadata.dtypes import ML_FLOAT_TYPES, is_variable_length
from .base import ArrayToBytesCodec, ChunkSpec, as_uint8
from .registry import register_codec

if TYPE_CHECKING:
    from ..store.base import Buffer


@register_codec
@dataclass(frozen=True)
class BytesCodec(ArrayToBytesCodec):
    name = "bytes"
    endian: str | None = "little"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BytesCodec:
        extra = set(config) - {"endian"}
        if extra:
            raise MetadataError(f"configuration: unexpected members {sorted(extra)}")
        endian = config.get("endian")
        if endian not in (None, "little", "big"):
            raise MetadataError(f"configuration.endian: expected 'little' or 'big', got {endian!r}")
        return cls(endian)

    def configuration(self) -> dict[str, Any] | None:
        return None if self.endian is None else {"endian": self.endian}

    def resolve(self, spec: ChunkSpec) -> BytesCodec:
        if is_variable_length(spec.dtype):
            raise MetadataError(
                f"bytes cannot encode the variable-length data type {spec.dtype}; use the vlen-utf8 "
                "(strings) or vlen-bytes codec"
            )
        if self.endian is None and has_byte_order(spec.dtype):
            raise MetadataError(
                f"configuration.endian: required for {spec.dtype.itemsize}-byte data types"
            )
        return self

    def stored_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The dtype of the encoded elements (native dtype with this codec's byte order).

        Types NumPy cannot byte-swap by dtype (ml_dtypes' bfloat16) keep their dtype here and
        are swapped through an unsigned view by decode/encode.
        """
        if not has_byte_order(dtype) or self.endian is None or dtype.kind == "V":
            return dtype
        return dtype.newbyteorder("<" if self.endian == "little" else ">")

    def _swaps_by_view(self, dtype: np.dtype[Any]) -> bool:
        return dtype.kind == "V" and has_byte_order(dtype) and not self.is_native

    @property
    def is_native(self) -> bool:
        return self.endian is None or self.endian == sys.byteorder

    def encoded_size(self, input_nbytes: int) -> int:
        return input_nbytes

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        raw = as_uint8(data)
        if raw.size != spec.nbytes:
            raise ValueError(f"decoded chunk has {raw.size} bytes, expected {spec.nbytes}")
        if self._swaps_by_view(spec.dtype):
            unsigned = np.dtype(f"u{spec.dtype.itemsize}")
            return raw.view(unsigned).byteswap().view(spec.dtype).reshape(spec.shape)
        return raw.view(self.stored_dtype(spec.dtype)).reshape(spec.shape)

    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> Buffer:
        if self._swaps_by_view(spec.dtype):
            unsigned = np.dtype(f"u{spec.dtype.itemsize}")
            native = np.ascontiguousarray(chunk, dtype=spec.dtype)
            return native.reshape(-1).view(unsigned).byteswap().view(np.uint8)
        stored = np.ascontiguousarray(chunk, dtype=self.stored_dtype(spec.dtype))
        return stored.reshape(-1).view(np.uint8)


def has_byte_order(dtype: np.dtype[Any]) -> bool:
    """Whether encoding ``dtype`` needs an ``endian``: multi-byte numbers, times and UTF-32
    text, not bytes, raw bytes or structured types (those carry each field's byte order in the
    dtype itself)."""
    if dtype.itemsize == 1 or dtype.fields is not None:
        return False
    return dtype.kind not in "SV" or dtype.name in ML_FLOAT_TYPES
