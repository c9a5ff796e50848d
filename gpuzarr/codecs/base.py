"""Codec base classes.

Lifecycle of a codec — spec, resolve, prepare, run:

1. **spec**: ``{"name": ..., "configuration": {...}}`` from zarr.json, possibly partial (a
   ``bytes`` codec without ``endian`` for a 1-byte type, ``blosc`` without ``typesize``).
   ``Codec.from_config`` validates it and builds an immutable codec object.
2. **resolve**: ``codec.resolve(chunk_spec)`` fills what depends on the data type and chunk shape
   (blosc's typesize, checks that a transpose order has the right rank) and returns the final
   codec; ``codec.output_spec(chunk_spec)`` says what the next codec in the chain receives.
3. **prepare**: :class:`~gpuzarr.codecs.pipeline.CodecPipeline` is built once per chunk shape
   and precomputes what the hot loop needs (every stage's ChunkSpec, the fast-path flags, the
   inverse transpose).
4. **run**: ``decode`` / ``encode`` on one chunk. A bytes->bytes ``decode`` is given the most
   bytes it may produce (``max_nbytes``, computed once by the pipeline from the decoded chunk
   size and each inner codec's :meth:`Codec.max_encoded_size`): stored bytes are untrusted, so a
   decoder stops there, and never allocates from a size the data declares before comparing it
   with that bound. The CPU reader calls them from a thread pool
   (the numcodecs compressors release the GIL). The GPU reader does not call codec objects: its
   route table (``backends/cuda``), keyed by the codec's Zarr ``name``, says how each codec
   decodes on the device, so this package knows nothing of devices.

Three kinds, in the order they appear in a chain: array->array (transpose, numcodecs filters),
exactly one array->bytes (bytes, sharding_indexed, numcodecs.pcodec), then bytes->bytes (gzip,
zstd, blosc, crc32c, numcodecs compressors and checksums).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractContextManager

    from ..metadata.json_types import CodecJSON
    from ..store.base import Buffer, RangeReader

    #: Memory of ``n`` bytes to read into (``read_part``): uint8, contiguous.
    BufferFor = Callable[[int], np.ndarray[Any, np.dtype[np.uint8]]]

CodecKind = Literal["array_to_array", "array_to_bytes", "bytes_to_bytes"]


@dataclass(frozen=True)
class ChunkSpec:
    """What a codec stage sees: the (decoded) chunk shape, native dtype and fill value."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill_value: Any

    @property
    def nbytes(self) -> int:
        """The size of a decoded chunk of this spec in bytes."""
        n = self.dtype.itemsize
        for s in self.shape:
            n *= s
        return n


class Codec(ABC):
    """One codec of a chain: immutable, built from its JSON configuration."""

    name: ClassVar[str]
    kind: ClassVar[CodecKind]
    #: whether its encoding is a shard, whose bytes its index does not point at are valid (dead
    #: space a writer left): no bound on its stored size holds (``CodecPipeline.max_stored_nbytes``)
    holds_shards: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def from_config(cls, config: dict[str, Any]) -> Codec:
        """Validate a JSON ``configuration`` object and build the codec."""

    @abstractmethod
    def configuration(self) -> dict[str, Any] | None:
        """The JSON configuration (None when the codec has none)."""

    def to_json(self) -> CodecJSON:
        """The codec as Zarr v3 JSON: ``{"name": ..., "configuration": {...}}``."""
        config = self.configuration()
        if config is None:
            return {"name": self.name}
        return {"name": self.name, "configuration": config}

    def resolve(self, spec: ChunkSpec) -> Codec:
        """Return this codec with the defaults that depend on ``spec`` filled in, after validation."""
        return self

    def output_spec(self, spec: ChunkSpec) -> ChunkSpec:
        """The spec the next codec receives (array->array codecs change it)."""
        return spec

    def encoded_size(self, input_nbytes: int) -> int | None:
        """Size of the encoding of ``input_nbytes`` bytes, when it is fixed (else None)."""
        return None

    def max_encoded_size(self, input_nbytes: int) -> int | None:
        """The largest encoding of ``input_nbytes`` bytes (None when it has no bound).

        It is what the decoder of the codec outside this one may produce.
        """
        return self.encoded_size(input_nbytes)


class ArrayToArrayCodec(Codec):
    """A codec that maps a chunk array to another array (``transpose``, numcodecs filters)."""

    kind: ClassVar[CodecKind] = "array_to_array"

    @abstractmethod
    def decode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        """``spec`` is this codec's *input* spec (the decoded side)."""

    @abstractmethod
    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        """The inverse of :meth:`decode`."""

    def encoded_size(self, input_nbytes: int) -> int | None:
        """Array->array codecs keep the number of bytes."""
        return input_nbytes


class ArrayToBytesCodec(Codec):
    """The one codec of a chain that turns a chunk array into bytes (``bytes``, ``sharding_indexed``)."""

    kind: ClassVar[CodecKind] = "array_to_bytes"

    @abstractmethod
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        """Bytes -> an array of ``spec.shape`` (read-only views are allowed)."""

    @abstractmethod
    def encode(self, chunk: np.ndarray[Any, Any], spec: ChunkSpec) -> Buffer:
        """An array of ``spec.shape`` -> bytes."""

    def stored_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The data type of the elements in the bytes this codec writes for ``dtype``.

        ``bytes``: with its byte order; ``dtype`` where the bytes are no array of elements.
        """
        return dtype


#: Chunks decoding to at most this many bytes, one decode call each, read faster on one thread
#: than on two where the decoder runs at gigabytes a second (LZ4 and BloscLZ within Blosc, LZ4):
#: the Python around each call, under the GIL, is most of the work, and the threads only hand the
#: GIL back and forth. Measured on 2 cores, 2048^2 uint16 in v2 Blosc-LZ4 chunks of 2, 8, 32 and
#: 128 KiB: 96 against 172, 27 against 48, 8.2 against 12.2, 4.0 against 4.3 ms.
ONE_THREAD_FAST_DECODE_NBYTES = 32 * 1024
#: The same for slower decoders (inflate; zstd and zlib within Blosc): v2 gzip chunks of 2, 8 and
#: 32 KiB, 124 against 183, 44 against 50, 20 against 13 ms.
ONE_THREAD_DECODE_NBYTES = 8 * 1024


class BytesToBytesCodec(Codec):
    """A codec that maps bytes to bytes: compressors and checksums."""

    kind: ClassVar[CodecKind] = "bytes_to_bytes"

    def resolves_stored_elements(self) -> bool:
        """Whether :meth:`resolve` gets the spec of the bytes' elements as stored.

        That is the array->bytes codec's :meth:`ArrayToBytesCodec.stored_dtype` (big-endian
        where ``bytes`` writes so) instead of the array's: for a codec that reads the bytes as
        elements.
        """
        return False

    @abstractmethod
    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        """Decode ``data``, straight into ``out`` when given and the codec can.

        Parameters
        ----------
        data
            The encoded bytes (untrusted).
        out
            A contiguous uint8 buffer of exactly the decoded size, when the caller knows that
            size; when it is used, it is returned. Callers check the size of what is returned.
        max_nbytes
            The most bytes the decoded data may have (None: no bound). A stream that would
            decode to more raises ValueError before that much is allocated or inflated.
        """

    @abstractmethod
    def encode(self, data: Buffer) -> Buffer:
        """The inverse of :meth:`decode`."""

    def one_thread_pays(self, nbytes: int) -> bool:
        """Whether chunks of ``nbytes`` decoded bytes, one call each, read faster on one thread.

        Than spread over several: see :data:`ONE_THREAD_FAST_DECODE_NBYTES`.
        """
        return False

    def encode_many(self, datas: Sequence[Buffer]) -> Sequence[Buffer] | None:
        """:meth:`encode` of each of ``datas`` (the same bytes) in one call.

        Where the codec's library has a call that runs through them all without the GIL; None
        where it has none.
        """
        return None

    def decodes_many(self, nbytes: int) -> bool:
        """Whether :meth:`decode_many` may decode frames of ``nbytes`` decoded bytes together."""
        return False

    def decode_many(self, frames: Sequence[Buffer], nbytes: int) -> Sequence[Buffer] | None:
        """Decode ``frames``, each of exactly ``nbytes`` decoded bytes, in one call.

        Where the codec's library has a call that runs through them all without the GIL. None
        where it has none, may not take these frames as they are, or one of them fails: the
        caller decodes them one by one, which raises what is wrong with a bad one.
        """
        return None

    def decode_one_of_many(self, frame: Buffer, nbytes: int) -> Buffer | None:
        """Decode one of the frames :meth:`decode_many` takes, on its own.

        Into memory of its own: for a thread that reads such frames alone, where one call for
        several would only take more memory at once. None where the codec cannot, or the
        frame fails: the caller decodes it the usual way, which raises what is wrong with it.
        """
        return None

    #: whether :meth:`decode_part` may decode less than everything
    decodes_part: ClassVar[bool] = False

    def decode_part(self, data: Buffer, out: np.ndarray[Any, Any], start: int, stop: int) -> bool:
        """Decode at least bytes ``[start, stop)`` of the ``out.nbytes`` bytes ``data`` decodes to.

        Into ``out`` (contiguous uint8, the whole decoded size) at the same offsets, where the
        codec can decode that part alone and it saves work; other bytes of ``out`` are left
        stale. Returns False, having written nothing that matters, where it cannot (the caller
        then decodes everything). The bytes outside the part are never decoded, so damage
        there goes unnoticed; a codec whose data carries a checksum of the whole (which only a
        full decode can verify) returns False.
        """
        return False

    def part_may_pay(self, start: int, stop: int, total: int) -> bool:
        """Whether :meth:`decode_part` (and :meth:`read_part`) may pay for a part of a chunk.

        For bytes ``[start, stop)`` of a ``total``-byte chunk: False where the codec knows it
        would not (Blosc blocks that hold most of the chunk, a zstd prefix that skips no whole
        block), so the caller decodes the whole at once.
        """
        return self.decodes_part

    #: whether :meth:`read_part` reads less than the whole value
    reads_part: ClassVar[bool] = False

    def read_part(
        self, reader: RangeReader, total: int, start: int, stop: int, buffer_for: BufferFor
    ) -> tuple[Buffer, object | None]:
        """Read from ``reader`` what decoding bytes ``[start, stop)`` of the chunk needs.

        The chunk decodes to ``total`` bytes; ``(0, total)`` asks for all of it. What is read
        goes into memory that ``buffer_for(n)`` gives (n bytes; a second call may give the same
        memory again). Returns (the bytes read, a plan for :meth:`decode_read_part`), the
        checks a decode needs already made, so that another thread only decodes; or (the whole
        value, None) for :meth:`decode`. Only codecs with :attr:`reads_part` are asked.
        """
        raise NotImplementedError(f"{type(self).__name__} reads no parts")

    def decode_read_part(self, data: Buffer, plan: object, out: np.ndarray[Any, Any]) -> None:
        """Decode what :meth:`read_part` read and planned (``data``, ``plan``) into ``out``.

        ``out`` is contiguous uint8 of the whole decoded size; a part goes to its own offsets
        in it, the other bytes left stale.
        """
        raise NotImplementedError(f"{type(self).__name__} plans no reads in part")

    def own_threads_off(self) -> AbstractContextManager[object] | None:
        """A context in which coding a chunk on this thread starts none of the library's threads.

        For a parallel pass whose pool threads code other chunks meanwhile: two sets of threads
        would fight over the cores. None where they cannot be turned off there.
        A no-op for most codecs. numcodecs' Blosc starts c-blosc's threads on the main thread
        unless told not to (see ``blosc.numcodecs_blosc_threads_off``).
        """
        return contextlib.nullcontext()


def as_uint8(data: Buffer) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A flat uint8 view of any contiguous buffer (no copy)."""
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)
