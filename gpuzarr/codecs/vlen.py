"""``vlen-utf8`` and ``vlen-bytes`` — array -> bytes for variable-length strings and bytes.

Spec: zarr-python 3's serializers of the ``string`` and ``variable_length_bytes`` data types;
the format is that of numcodecs' ``VLenUTF8`` / ``VLenBytes``, which Zarr v2 object arrays list
as their first filter (``{"id": "vlen-utf8"}``). No configuration::

    {"name": "vlen-utf8", "configuration": {}}
    {"name": "vlen-bytes", "configuration": {}}

An encoded chunk is the number of elements (uint32, little endian), then for each element in C
order its length in bytes (uint32, little endian) and its bytes — UTF-8 for ``vlen-utf8``. As in
numcodecs, ``None`` elements are written as empty values. Decoding checks the element count and
that the lengths account for every byte.
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, MetadataError
from ..metadata.named_dtypes import string_dtype
from .base import ArrayToBytesCodec, ChunkSpec, as_uint8
from .registry import register_codec

if TYPE_CHECKING:
    from ..store.base import Buffer

_U32 = struct.Struct("<I")
_MAX_U32 = 2**32 - 1


@dataclass(frozen=True)
class _VLenCodec(ArrayToBytesCodec):
    #: the Zarr data type this codec serialises, for error messages
    data_type: ClassVar[str]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> _VLenCodec:
        if config:
            raise MetadataError(f"configuration: {cls.name} takes no members, got {sorted(config)}")
        return cls()

    def configuration(self) -> dict[str, Any]:
        return {}

    def resolve(self, spec: ChunkSpec) -> _VLenCodec:
        if not self._holds(spec.dtype):
            raise MetadataError(f"{self.name} encodes the {self.data_type} data type, not {spec.dtype}")
        return self

    @abstractmethod
    def _holds(self, dtype: np.dtype[Any]) -> bool:
        """Whether arrays of ``dtype`` are what this codec encodes."""

    @abstractmethod
    def _element(self, data: memoryview) -> Any:
        """The element stored as ``data``."""

    @abstractmethod
    def _encode_element(self, value: Any, index: int) -> bytes:
        """The bytes stored for element ``index`` of a chunk."""

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        expected = 1
        for n in spec.shape:
            expected *= n
        elements = [self._element(item) for item in _split(data, expected)]
        if spec.dtype.kind == "O":
            out = np.empty(expected, dtype=object)
            out[:] = elements  # element by element: a list of equal-length bytes stays 1-d
            return out.reshape(spec.shape)
        return np.array(elements, dtype=spec.dtype).reshape(spec.shape)

    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> Buffer:
        parts = [self._encode_element(v, i) for i, v in enumerate(chunk.ravel().tolist())]
        return _join(parts)


def _split(data: Buffer, expected: int) -> list[memoryview]:
    """The elements of an encoded chunk, checked against the ``expected`` count."""
    buf = as_uint8(data).data
    size = len(buf)
    if size < 4:
        raise ValueError(f"vlen chunk of {size} bytes has no 4-byte element count")
    count = _U32.unpack_from(buf)[0]
    if count != expected:
        raise ValueError(f"vlen chunk holds {count} elements, expected {expected}")
    items = []
    pos = 4
    for i in range(count):
        if pos + 4 > size:
            raise ValueError(f"vlen chunk ends in the length of element {i} (at byte {pos} of {size})")
        end = pos + 4 + _U32.unpack_from(buf, pos)[0]
        if end > size:
            raise ValueError(f"vlen chunk element {i} runs to byte {end}, past the end ({size} bytes)")
        items.append(buf[pos + 4 : end])
        pos = end
    if pos != size:
        raise ValueError(f"vlen chunk has {size - pos} bytes after its {count} elements")
    return items


def _join(parts: list[bytes]) -> bytes:
    if len(parts) > _MAX_U32:
        raise InvalidArgumentError(f"a vlen chunk holds at most {_MAX_U32} elements, got {len(parts)}")
    pieces = [_U32.pack(len(parts))]
    for part in parts:
        if len(part) > _MAX_U32:
            raise InvalidArgumentError(f"a vlen element holds at most {_MAX_U32} bytes, got {len(part)}")
        pieces.append(_U32.pack(len(part)))
        pieces.append(part)
    return b"".join(pieces)


@register_codec
@dataclass(frozen=True)
class VLenUTF8Codec(_VLenCodec):
    """``vlen-utf8``: the ``string`` data type (NumPy ``StringDType``, or objects on NumPy 1)."""

    name = "vlen-utf8"
    data_type = "string"

    def _holds(self, dtype: np.dtype[Any]) -> bool:
        return dtype == string_dtype()

    def _element(self, data: memoryview) -> str:
        return str(data, "utf-8")

    def _encode_element(self, value: Any, index: int) -> bytes:
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidArgumentError(
                    f"vlen-utf8: element {index} of the chunk is not valid text ({exc})"
                ) from exc
        if value is None:
            return b""
        raise InvalidArgumentError(f"vlen-utf8: element {index} of the chunk is {value!r}, expected a str")


@register_codec
@dataclass(frozen=True)
class VLenBytesCodec(_VLenCodec):
    """``vlen-bytes``: the ``variable_length_bytes`` data type (object arrays of ``bytes``)."""

    name = "vlen-bytes"
    data_type = "variable_length_bytes"

    def _holds(self, dtype: np.dtype[Any]) -> bool:
        return dtype.kind == "O"

    def _element(self, data: memoryview) -> bytes:
        return bytes(data)

    def _encode_element(self, value: Any, index: int) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if value is None:
            return b""
        raise InvalidArgumentError(f"vlen-bytes: element {index} of the chunk is {value!r}, expected bytes")
