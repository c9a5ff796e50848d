"""``numcodecs.<id>`` — bytes -> bytes through a numcodecs codec.

Spec: zarr-python 3's ``numcodecs.*`` v3 codecs (:mod:`gpuzarr.metadata.numcodecs_v3` lists
them and their kinds). Configuration: the numcodecs codec's ``get_config()`` without ``"id"``::

    {"name": "numcodecs.zlib", "configuration": {"level": 5}}
    {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}

Two placements use this class:

* **v3 compressors and checksums** (``typed=False``): the codec receives the serialized chunk as
  bytes, as zarr-python hands it over; a ``shuffle`` without ``elementsize`` shuffles elements of
  the received data type's size, as zarr-python fills it in.
* **Zarr v2 filters and compressors** (``typed=True``), which :mod:`gpuzarr.metadata.v2` places
  after ``bytes``, and a v3 chain with a numcodecs filter after its array->bytes codec: the chunk's
  bytes are handed over as elements of the array's data type, as zarr-python's v2 codec hands
  over the chunk array, because filters such as ``bitround`` check the type of what they get
  (filters with a configured ``dtype`` view the bytes with it themselves); the output of an
  earlier filter is passed on with its own type.

Decoding is bounded (:mod:`.bounded`): the compressors whose streams can inflate without limit
or declare the size numcodecs allocates (``zlib``, ``gzip``, ``bz2``, ``lzma``, ``lz4``, ``zstd``,
``blosc``) are decoded here with that bound checked first (``zlib`` and ``gzip`` by
:mod:`.inflate`, with ISA-L where it is installed); any other codec's output is checked
after numcodecs (filters and checksums do not grow data more than their data types allow).

Array -> array filters and array -> bytes serializers of v3 chains are in :mod:`.numcodecs_filters`.
"""

from __future__ import annotations

import bz2
import contextlib
import lzma
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError, UnknownCodecError
from ..metadata.limits import check_encoded_bytes
from ..metadata.numcodecs_v3 import ARRAY_TO_BYTES_IDS, PREFIX, with_dtype_defaults
from . import deflate
from .base import ONE_THREAD_DECODE_NBYTES, ONE_THREAD_FAST_DECODE_NBYTES, BytesToBytesCodec, ChunkSpec, as_uint8
from .blosc import blosc_one_thread_pays, decode_blosc, numcodecs_blosc_threads_off
from .bounded import check_decoded_size, compressed_size_bound, inflate
from .inflate import decode_gzip, decode_zlib
from .zstd import decode_zstd

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..metadata.json_types import CodecJSON
    from ..store.base import Buffer


def numcodecs_impl(codec_id: str, config: dict[str, Any]) -> Any:
    """The numcodecs codec object for ``codec_id`` and a configuration without ``"id"``."""
    if codec_id in UNSAFE_IDS:
        # Unpickling runs whatever code the chunk's bytes name; numcodecs refuses to decode
        # them from 0.15.2, 0.16.6 and 0.17.1 on, and older releases do it silently.
        raise MetadataError(
            f"numcodecs codec {codec_id!r}: refused, since decoding its chunks (unpickling) can run any "
            "code their bytes name"
        )
    import numcodecs

    try:
        return numcodecs.get_codec({"id": codec_id, **config})
    except (ValueError, KeyError) as exc:
        if "not available" in str(exc) or isinstance(exc, KeyError):
            if codec_id in ARRAY_TO_BYTES_IDS:
                # numcodecs registers these only when their own package imports.
                raise UnknownCodecError(
                    f"numcodecs codec {codec_id!r} is not available (is the {codec_id!r} package installed?)"
                ) from exc
            raise UnknownCodecError(f"unknown numcodecs codec id {codec_id!r}") from exc
        raise MetadataError(f"numcodecs codec {codec_id!r}: invalid configuration ({exc})") from exc
    except Exception as exc:  # whatever a codec's constructor raises on a forged configuration
        # (TypeError for a wrong member, SyntaxError from NumPy's parser of a dtype like '(,)<u2')
        raise MetadataError(f"numcodecs codec {codec_id!r}: invalid configuration ({exc})") from exc


#: numcodecs codecs gpuzarr never decodes nor encodes, whatever the array's data type
UNSAFE_IDS = frozenset({"pickle"})
#: codecs whose encoding is compressed: at most :func:`compressed_size_bound` of their input
COMPRESSOR_IDS = frozenset({"zlib", "gzip", "bz2", "lzma", "lz4", "zstd", "blosc"})
#: checksums, which add at most 8 bytes (``fletcher32``: 4 after the data, the others 4 before)
CHECKSUM_IDS = frozenset({"crc32", "crc32c", "adler32", "fletcher32", "jenkins_lookup3"})
#: filters that keep the element count; their size changes only with a configured data type
ELEMENTWISE_IDS = frozenset({"shuffle", "bitround", "delta", "quantize", "fixedscaleoffset", "astype"})
#: what liblzma may allocate beyond the output: the dictionary a stream's header names (64 MiB
#: for preset 9, whatever the data's size), capped rather than taken from the header
LZMA_MEMLIMIT_ROOM = 256 << 20


def _decode_lzma(impl: Any, data: Buffer, max_nbytes: int | None) -> bytes:
    memlimit = None if max_nbytes is None else max_nbytes + LZMA_MEMLIMIT_ROOM
    if impl.format == lzma.FORMAT_RAW:
        memlimit = None  # liblzma accepts a memory limit for headed formats only

    def start() -> lzma.LZMADecompressor:
        return lzma.LZMADecompressor(format=impl.format, memlimit=memlimit, filters=impl.filters)

    return inflate("lzma", start, data, max_nbytes, members=True)


def _decode_lz4(impl: Any, data: Buffer, out: np.ndarray[Any, Any] | None, max_nbytes: int | None) -> Buffer:
    raw = as_uint8(data)
    if raw.size < 4:
        raise ValueError(f"lz4: stream of {raw.size} bytes has no 4-byte size prefix")
    declared = int.from_bytes(raw[:4].tobytes(), "little")
    if out is not None and declared != out.nbytes:
        raise ValueError(f"lz4: size prefix says {declared} decoded bytes, expected {out.nbytes}")
    check_decoded_size("lz4", declared, max_nbytes)
    return impl.decode(raw, out)


def decode_bounded(
    codec_id: str, impl: Any, data: Buffer, out: np.ndarray[Any, Any] | None, max_nbytes: int | None
) -> Buffer | None:
    """Decode with numcodecs' ``impl`` of a compressor, its sizes checked against the bound
    first (None when ``codec_id`` is not one of :data:`COMPRESSOR_IDS`)."""
    if codec_id == "zlib":
        return decode_zlib(data, max_nbytes, out)
    if codec_id == "gzip":
        return decode_gzip(data, max_nbytes, out)
    if codec_id == "bz2":
        return inflate("bz2", bz2.BZ2Decompressor, data, max_nbytes, members=True)
    if codec_id == "lzma":
        return _decode_lzma(impl, data, max_nbytes)
    if codec_id == "lz4":
        return _decode_lz4(impl, data, out, max_nbytes)
    if codec_id == "zstd":
        return decode_zstd(impl, data, out, max_nbytes)
    if codec_id == "blosc":
        return decode_blosc(impl, data, out, max_nbytes)
    return None


def check_codec_id(codec_id: str) -> None:
    """Raise UnknownCodecError unless numcodecs has a codec ``codec_id``."""
    from numcodecs.registry import codec_registry

    if codec_id not in codec_registry:
        numcodecs_impl(codec_id, {})  # raises the error that names the id


#: The compressors whose streams :mod:`.deflate` writes, by numcodecs id.
_DEFLATED = {"zlib": deflate.compress_zlib, "gzip": deflate.compress_gzip}


@dataclass(frozen=True, eq=False)
class NumcodecsCodec(BytesToBytesCodec):
    name = "numcodecs"
    codec_id: str
    config: dict[str, Any]
    _impl: Any = field(default=None, repr=False)
    #: Hand the bytes over as elements of the array's data type (v2 placement, see above).
    typed: bool = False
    #: The data type the codec receives (set by ``resolve``): how typed bytes are viewed.
    _dtype: np.dtype[Any] | None = field(default=None, repr=False)

    @classmethod
    def from_id(cls, codec_id: str, config: dict[str, Any], *, typed: bool = False) -> NumcodecsCodec:
        return cls(codec_id, dict(config), numcodecs_impl(codec_id, config), typed)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NumcodecsCodec:  # pragma: no cover - via from_id
        raise MetadataError("numcodecs codecs are named 'numcodecs.<id>'")

    def resolves_stored_elements(self) -> bool:
        # A v2 filter gets the chunk's elements as stored, as numcodecs' own users hand them
        # over (``bitround`` reads its float type from them, and refuses a big-endian one).
        return self.typed

    def resolve(self, spec: ChunkSpec) -> NumcodecsCodec:
        if self.typed:
            # v2 codecs keep numcodecs' own defaults: zarr-python's v2 codec builds them as given.
            widened = self.max_encoded_size(spec.nbytes)
            if widened is not None and widened > spec.nbytes and self.codec_id in ELEMENTWISE_IDS:
                # A filter's configured encoded type is the metadata's word: held to
                # max_chunk_bytes like the chunk (|S1500000000 let an 8-byte array inflate 6 GB).
                check_encoded_bytes(widened, f"filter {self.codec_id!r}: its encoded chunk")
            return replace(self, _dtype=spec.dtype)
        config = with_dtype_defaults(self.codec_id, self.config, spec.dtype)
        if config == self.config:
            return self
        return replace(self, config=config, _impl=numcodecs_impl(self.codec_id, config))

    def to_json(self) -> CodecJSON:
        return {"name": PREFIX + self.codec_id, "configuration": dict(self.config)}

    def configuration(self) -> dict[str, Any]:
        return dict(self.config)

    def one_thread_pays(self, nbytes: int) -> bool:
        if self.codec_id == "blosc":
            return blosc_one_thread_pays(str(self.config.get("cname", "lz4")), nbytes)
        if self.codec_id == "lz4":
            return nbytes <= ONE_THREAD_FAST_DECODE_NBYTES
        return self.codec_id in _DEFLATED and nbytes <= ONE_THREAD_DECODE_NBYTES

    def own_threads_off(self) -> AbstractContextManager[object] | None:
        # numcodecs' Blosc, named numcodecs.blosc: the same rule as the blosc codec's.
        return numcodecs_blosc_threads_off() if self.codec_id == "blosc" else contextlib.nullcontext()

    def encoded_size(self, input_nbytes: int) -> int | None:
        # A checksum adds its 4 bytes, at the start or the end: a shard index may end in one
        # (zarr-python writes numcodecs.crc32 there), its size known before it is read.
        return input_nbytes + 4 if self.codec_id in CHECKSUM_IDS else None

    def max_encoded_size(self, input_nbytes: int) -> int | None:
        if self.codec_id in COMPRESSOR_IDS:
            return compressed_size_bound(input_nbytes)
        if self.codec_id in CHECKSUM_IDS:
            return input_nbytes + 8
        if self.codec_id in ELEMENTWISE_IDS:
            # A configured encoded type may be wider than the received one: elements of at
            # least one byte, each encoded in at most the configured type's size.
            encoded = self.config.get("astype", self.config.get("encode_dtype"))
            try:
                width = np.dtype(encoded).itemsize if encoded is not None else 1
            except Exception:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
                return None
            return input_nbytes * max(width, 1)
        return None

    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        result = decode_bounded(self.codec_id, self._impl, data, out, max_nbytes)
        if result is None:
            result = self._impl.decode(as_uint8(data))
        # Bytes (what zlib, bz2 and lzma give) viewed, not copied: np.asarray made them a 0-d
        # array of one |S item, a copy of the whole chunk.
        arr = np.frombuffer(result, np.uint8) if isinstance(result, (bytes, bytearray)) else np.asarray(result)
        if arr.dtype == object:
            raise ValueError(f"numcodecs.{self.codec_id} decoded to objects, which gpuzarr does not support")
        if max_nbytes is not None and arr.nbytes > max_nbytes:
            raise ValueError(
                f"numcodecs.{self.codec_id} decoded {arr.nbytes} bytes, more than the {max_nbytes} expected"
            )
        return np.ascontiguousarray(arr)

    def encode(self, data: Buffer) -> Buffer:
        try:
            return self._encode(data)
        except Exception as exc:
            # numcodecs builds a codec from any configuration and checks it only when coding
            # (a zlib level of 10**30: OverflowError; a bz2 level of 99: ValueError). Reads of
            # such an array decode without those settings, so it is refused here, at the write.
            raise MetadataError(
                f"numcodecs.{self.codec_id}: cannot encode with the configuration {self.config} ({exc})"
            ) from exc

    def _encode(self, data: Buffer) -> Buffer:
        if self.codec_id in _DEFLATED and deflate.library() == "zlib-ng":
            # numcodecs' Zlib and GZip deflate at their level with the standard library;
            # zlib-ng deflates at the same levels, faster (see :mod:`.deflate`).
            return _DEFLATED[self.codec_id](as_uint8(data), int(self._impl.level))
        if not self.typed:
            return self._impl.encode(as_uint8(data))
        if isinstance(data, np.ndarray) and data.dtype != np.uint8:
            return self._impl.encode(data.reshape(-1))
        raw = as_uint8(data)
        dt = self._dtype
        if dt is not None and dt.fields is None and dt.kind in "biufc" and raw.size % dt.itemsize == 0:
            elements = raw.view(dt)
            if self.codec_id == "bitround" and not dt.isnative:
                # numcodecs' BitRound knows native floats only (a KeyError for '>f8'); rounding
                # is the same whatever the byte order, so it rounds them in native order.
                native = dt.newbyteorder("=")
                rounded = np.asarray(self._impl.encode(elements.astype(native))).reshape(-1).view(native)
                return rounded.astype(dt).view(np.uint8)
            return self._impl.encode(elements)
        return self._impl.encode(raw)
