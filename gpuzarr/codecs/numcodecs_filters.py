"""``numcodecs.<id>`` filters (array -> array) and serializers (array -> bytes) of v3 chains.

Spec: zarr-python 3's ``numcodecs.*`` codecs (:mod:`gpuzarr.metadata.numcodecs_v3`)::

    {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}
    {"name": "numcodecs.fixedscaleoffset",
     "configuration": {"offset": 1000, "scale": 10, "dtype": "float64", "astype": "<i2"}}
    {"name": "numcodecs.pcodec", "configuration": {"level": 8}}

Filters (``astype``, ``bitround``, ``delta``, ``fixedscaleoffset``, ``packbits``, ``quantize``)
come before the array -> bytes codec and may change the chunk's data type (``astype``, a filter's
``astype`` member) or shape (``packbits``); the next codec receives that type and shape.
``pcodec`` and ``zfpy`` replace ``bytes``. Members zarr-python derives from the data type
(``fixedscaleoffset``'s and ``quantize``'s ``dtype``, ``astype``'s ``decode_dtype``) are filled
in by ``resolve``.

numcodecs works on native, C-ordered arrays: a chunk decoded by a big-endian ``bytes`` codec or
transposed is made so before it is handed over, and a decoded chunk is cast to the data type the
codec's input spec names, as zarr-python's assignment into the output casts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError
from ..metadata.limits import check_chunk_bytes
from ..metadata.numcodecs_v3 import PREFIX, encoded_dtype, encoded_shape, with_dtype_defaults
from .base import ArrayToArrayCodec, ArrayToBytesCodec, ChunkSpec, as_uint8
from .numcodecs_codec import check_codec_id, numcodecs_impl

if TYPE_CHECKING:
    from ..metadata.json_types import CodecJSON
    from ..store.base import Buffer

#: Filters whose configured ``dtype`` numcodecs views the received elements as: its size must
#: be the received type's size, or the chunk's element count changes.
_VIEWED_AS_DTYPE = ("delta", "fixedscaleoffset", "quantize")


def _native(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype


def _cast_fill(value: Any, dtype: np.dtype[Any]) -> Any:
    # The fill value travels with the spec (a sharding codec after a filter fills missing inner
    # chunks with it); cast by value, as zarr-python keeps it.
    with np.errstate(invalid="ignore", over="ignore"):
        try:
            return np.asarray(value).astype(dtype)[()]
        except (TypeError, ValueError):
            return np.zeros((), dtype)[()]


def _check_received(codec_id: str, config: dict[str, Any], dtype: np.dtype[Any], where: str) -> None:
    if codec_id in _VIEWED_AS_DTYPE and config.get("dtype") is not None:
        try:
            configured = np.dtype(config["dtype"])
        except Exception as exc:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
            raise MetadataError(f"{where}.dtype: {config['dtype']!r} is not a data type") from exc
        if configured.itemsize != dtype.itemsize:
            raise MetadataError(
                f"{where}.dtype: {config['dtype']!r} ({configured.itemsize}-byte elements) does not "
                f"match the {dtype} elements the codec receives"
            )
    if codec_id == "bitround" and (dtype.kind != "f" or dtype.itemsize > 8):
        raise MetadataError(f"{where}: bitround rounds float16/32/64 elements, not {dtype}")
    if codec_id == "packbits" and dtype != np.dtype(bool):
        raise MetadataError(f"{where}: packbits packs bool elements, not {dtype}")


@dataclass(frozen=True, eq=False)
class NumcodecsFilter(ArrayToArrayCodec):
    """A numcodecs filter in a v3 chain (zarr-python's ``_NumcodecsArrayArrayCodec``)."""

    name = "numcodecs"
    codec_id: str
    config: dict[str, Any]
    #: Set by ``resolve``: numcodecs needs the members zarr-python fills from the data type.
    _impl: Any = field(default=None, repr=False)
    #: The data type of the encoded array as numcodecs gives and takes it (set by ``resolve``).
    _encoded: np.dtype[Any] | None = field(default=None, repr=False)

    @classmethod
    def from_id(cls, codec_id: str, config: dict[str, Any]) -> NumcodecsFilter:
        check_codec_id(codec_id)
        return cls(codec_id, dict(config))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NumcodecsFilter:  # pragma: no cover - via from_id
        raise MetadataError("numcodecs codecs are named 'numcodecs.<id>'")

    def to_json(self) -> CodecJSON:
        return {"name": PREFIX + self.codec_id, "configuration": dict(self.config)}

    def configuration(self) -> dict[str, Any]:
        return dict(self.config)

    def resolve(self, spec: ChunkSpec) -> NumcodecsFilter:
        config = with_dtype_defaults(self.codec_id, self.config, spec.dtype)
        where = f"{PREFIX}{self.codec_id} configuration"
        _check_received(self.codec_id, config, spec.dtype, where)
        encoded = encoded_dtype(self.codec_id, config, spec.dtype, where)
        if encoded is not None:
            # The type a filter encodes to is the metadata's word too: held to max_chunk_bytes
            # like the chunk itself (astype to |S4096 made each chunk ask 4 GiB to decode into).
            check_chunk_bytes(encoded_shape(self.codec_id, spec.shape), encoded, f"{where}: its encoded chunk")
        return replace(self, config=config, _impl=numcodecs_impl(self.codec_id, config), _encoded=encoded)

    def output_spec(self, spec: ChunkSpec) -> ChunkSpec:
        encoded = _native(self._encoded if self._encoded is not None else spec.dtype)
        if encoded == spec.dtype and self.codec_id != "packbits":
            return spec
        return ChunkSpec(encoded_shape(self.codec_id, spec.shape), encoded, _cast_fill(spec.fill_value, encoded))

    def encoded_size(self, input_nbytes: int) -> int | None:
        return None  # the encoded type or shape may differ

    def decode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        # In the machine's order, as zarr-python hands numcodecs the stored elements it reads (a
        # configured encoded type of the other order, astype's encode_dtype=">i4", read as
        # other values than zarr-python's before): numcodecs views them as its configured type.
        encoded = np.ascontiguousarray(chunk, dtype=_native(self._encoded if self._encoded is not None else spec.dtype))
        decoded = np.asarray(self._impl.decode(encoded))
        if decoded.size != math.prod(spec.shape):
            raise ValueError(
                f"numcodecs.{self.codec_id} decoded {decoded.size} elements, expected {math.prod(spec.shape)}"
            )
        decoded = decoded.reshape(spec.shape)
        return decoded if decoded.dtype == spec.dtype else decoded.astype(spec.dtype)

    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        shape = encoded_shape(self.codec_id, spec.shape)
        dtype = _native(self._encoded if self._encoded is not None else spec.dtype)
        encoded = np.asarray(self._impl.encode(np.ascontiguousarray(chunk, dtype=spec.dtype)))
        if encoded.size != math.prod(shape) or encoded.dtype.itemsize != dtype.itemsize:
            raise ValueError(
                f"numcodecs.{self.codec_id} encoded {encoded.size} {encoded.dtype} elements, "
                f"expected {math.prod(shape)} {dtype}"
            )
        # A configured byte order is converted by value, as zarr-python's bytes codec does; an
        # encoding in another type of the same size is a view of the bytes to store (bitround
        # hands back its floats' bits as integers).
        return np.ascontiguousarray(encoded, dtype=_native(encoded.dtype)).view(dtype).reshape(shape)


@dataclass(frozen=True, eq=False)
class NumcodecsSerializer(ArrayToBytesCodec):
    """A numcodecs codec as a v3 chain's array -> bytes codec (``pcodec``, ``zfpy``)."""

    name = "numcodecs"
    codec_id: str
    config: dict[str, Any]
    _impl: Any = field(default=None, repr=False)

    @classmethod
    def from_id(cls, codec_id: str, config: dict[str, Any]) -> NumcodecsSerializer:
        return cls(codec_id, dict(config), numcodecs_impl(codec_id, config))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NumcodecsSerializer:  # pragma: no cover - via from_id
        raise MetadataError("numcodecs codecs are named 'numcodecs.<id>'")

    def to_json(self) -> CodecJSON:
        return {"name": PREFIX + self.codec_id, "configuration": dict(self.config)}

    def configuration(self) -> dict[str, Any]:
        return dict(self.config)

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        decoded = np.asarray(self._impl.decode(as_uint8(data).tobytes()))
        if decoded.size != math.prod(spec.shape):
            raise ValueError(
                f"numcodecs.{self.codec_id} decoded {decoded.size} elements, expected {math.prod(spec.shape)}"
            )
        decoded = decoded.reshape(spec.shape)
        return decoded if decoded.dtype == spec.dtype else decoded.astype(spec.dtype)

    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> Buffer:
        return as_uint8(self._impl.encode(np.ascontiguousarray(chunk, dtype=spec.dtype)))
