"""``vlen-utf8`` and ``vlen-bytes`` — array -> bytes for variable-length strings and bytes.

Spec: zarr-python 3's serializers of the ``string`` and ``variable_length_bytes`` data types;
the format is that of numcodecs' ``VLenUTF8`` / ``VLenBytes``, which Zarr v2 object arrays list
as their first filter (``{"id": "vlen-utf8"}``). No configuration::

    {"name": "vlen-utf8", "configuration": {}}
    {"name": "vlen-bytes", "configuration": {}}

An encoded chunk is the number of elements (uint32, little endian), then for each element in C
order its length in bytes (uint32, little endian) and its bytes — UTF-8 for ``vlen-utf8``. As in
numcodecs, ``None`` elements are written as empty values.

numcodecs' compiled codecs walk the elements (a loop in Python costs several times more per
element). Around them this module checks what they do not: the element count against the
chunk's shape before anything is allocated, and that the elements account for every byte; and
it names the element a write cannot encode.
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, MetadataError
from ..metadata.named_dtypes import string_dtype
from .base import ArrayToBytesCodec, ChunkSpec, as_uint8
from .registry import register_codec

if TYPE_CHECKING:
    from ..store.base import Buffer

_U32 = struct.Struct("<I")
#: the element count, then a length per element
_HEADER = 4
_LENGTH = 4


@dataclass(frozen=True)
class _VLenCodec(ArrayToBytesCodec):
    #: the Zarr data type this codec serialises, for error messages
    data_type: ClassVar[str]
    _impl: Any = field(default=None, compare=False, repr=False)

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
        return type(self)(self._numcodecs())

    def _codec(self) -> Any:
        return self._numcodecs() if self._impl is None else self._impl

    @abstractmethod
    def _holds(self, dtype: np.dtype[Any]) -> bool:
        """Whether arrays of ``dtype`` are what this codec encodes."""

    @abstractmethod
    def _numcodecs(self) -> Any:
        """The numcodecs codec of this format."""

    @abstractmethod
    def _payload_matches(self, elements: np.ndarray[Any, Any], out: np.ndarray[Any, Any], size: int) -> bool:
        """Whether the decoded elements (as numcodecs gave them, and as returned) were stored in
        exactly ``size`` bytes."""

    @abstractmethod
    def _check_element(self, value: Any, index: int) -> None:
        """Raise InvalidArgumentError, naming ``index``, when ``value`` cannot be encoded."""

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        raw = as_uint8(data)
        expected = 1
        for n in spec.shape:
            expected *= n
        if raw.size < _HEADER:
            raise ValueError(f"vlen chunk of {raw.size} bytes has no 4-byte element count")
        count = _U32.unpack_from(raw.data)[0]
        if count != expected:
            raise ValueError(f"vlen chunk holds {count} elements, expected {expected}")
        try:
            elements = self._codec().decode(raw)
        except UnicodeDecodeError as exc:  # a UnicodeDecodeError is a ValueError too: first
            raise ValueError(f"vlen-utf8 chunk holds text that is not UTF-8 ({exc})") from exc
        except ValueError as exc:  # numcodecs: "corrupt buffer, data seem truncated"
            raise ValueError(f"vlen chunk of {raw.size} bytes is truncated ({exc})") from exc
        out: np.ndarray[Any, Any] = elements if spec.dtype.kind == "O" else elements.astype(spec.dtype)
        if not self._payload_matches(elements, out, raw.size - _HEADER - _LENGTH * count):
            raise ValueError(f"vlen chunk has bytes after its {count} elements")
        return out.reshape(spec.shape)

    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> Buffer:
        flat = chunk.ravel()
        if not flat.flags.writeable:
            flat = flat.copy()  # numcodecs' compiled loop takes writable buffers only
        try:
            encoded: Buffer = self._codec().encode(flat)
        except (TypeError, ValueError) as exc:
            # Find the element numcodecs refused, to name it.
            for i, value in enumerate(flat.tolist()):
                self._check_element(value, i)
            raise InvalidArgumentError(f"{self.name}: cannot encode the chunk ({exc})") from exc
        return encoded


@register_codec
@dataclass(frozen=True)
class VLenUTF8Codec(_VLenCodec):
    """``vlen-utf8``: the ``string`` data type (NumPy ``StringDType``, or objects on NumPy 1)."""

    name = "vlen-utf8"
    data_type = "string"

    def _holds(self, dtype: np.dtype[Any]) -> bool:
        return dtype == string_dtype()

    def _numcodecs(self) -> Any:
        from numcodecs import VLenUTF8

        return VLenUTF8()

    def _payload_matches(self, elements: np.ndarray[Any, Any], out: np.ndarray[Any, Any], size: int) -> bool:
        # UTF-8 takes at least a byte per character, so as many characters as bytes means ASCII
        # text and nothing after it (counted in C on StringDType); anything else is counted
        # exactly.
        strings = getattr(np, "strings", None)
        if out.dtype.kind == "T" and strings is not None:
            chars = int(strings.str_len(out).sum())
        else:
            chars = sum(map(len, elements.tolist()))
        return chars == size or sum(len(t.encode("utf-8")) for t in elements.tolist()) == size

    def _check_element(self, value: Any, index: int) -> None:
        if value is None:
            return
        if not isinstance(value, str):
            raise InvalidArgumentError(f"vlen-utf8: element {index} of the chunk is {value!r}, expected a str")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"vlen-utf8: element {index} of the chunk is not valid text ({exc})") from exc


@register_codec
@dataclass(frozen=True)
class VLenBytesCodec(_VLenCodec):
    """``vlen-bytes``: the ``variable_length_bytes`` data type (object arrays of ``bytes``)."""

    name = "vlen-bytes"
    data_type = "variable_length_bytes"

    def _holds(self, dtype: np.dtype[Any]) -> bool:
        return dtype.kind == "O"

    def _numcodecs(self) -> Any:
        from numcodecs import VLenBytes

        return VLenBytes()

    def _payload_matches(self, elements: np.ndarray[Any, Any], out: np.ndarray[Any, Any], size: int) -> bool:
        return sum(map(len, elements.tolist())) == size

    def _check_element(self, value: Any, index: int) -> None:
        if value is not None and not isinstance(value, bytes):
            raise InvalidArgumentError(f"vlen-bytes: element {index} of the chunk is {value!r}, expected bytes")
