"""A resolved codec chain for one chunk shape: the "prepare" step of codecs/base.py.

``CodecPipeline`` validates the order of the chain (array->array*, one array->bytes,
bytes->bytes*), resolves every codec against the spec it receives, and offers

* ``decode(raw, key)`` -> a chunk array (possibly a read-only or strided view),
* ``decode_into(raw, key, out, out_selection, chunk_selection)`` which writes the selected part
  of a chunk into ``out`` with a single copy (transpose and byte order are strides and dtypes of
  a view, applied by that copy), decompressing straight into ``out`` when the whole chunk lands
  in a contiguous region of it,
* ``encode(chunk)`` -> bytes.

Every failure while decoding becomes a CorruptChunkError naming the key. Each bytes->bytes
decoder is told the most it may produce (:attr:`CodecPipeline.decoded_bounds`): the decoded
chunk size for the innermost, grown by each inner codec's worst case outwards, and the
``max_chunk_bytes`` setting where the metadata fixes no size (variable-length types, pcodec).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import buffers, config
from ..errors import CorruptChunkError, MetadataError
from .base import (
    ArrayToArrayCodec,
    ArrayToBytesCodec,
    BytesToBytesCodec,
    ChunkSpec,
    Codec,
    as_uint8,
)
from .bytes import BytesCodec
from .registry import codec_from_json

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from contextlib import AbstractContextManager

    from ..metadata.json_types import CodecJSON
    from ..store.base import Buffer, RangeReader
    from .base import BufferFor


@contextlib.contextmanager
def _all_entered(contexts: list[AbstractContextManager[object]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


def _place(
    codec: Codec,
    current: ChunkSpec,
    a2a: list[tuple[ArrayToArrayCodec, ChunkSpec]],
    a2b: tuple[ArrayToBytesCodec, ChunkSpec] | None,
    b2b: list[BytesToBytesCodec],
) -> tuple[ChunkSpec, tuple[ArrayToBytesCodec, ChunkSpec] | None]:
    """Resolve ``codec`` against ``current`` and add it to its part of the chain; the spec the
    next codec receives and the array->bytes codec so far."""
    if isinstance(codec, ArrayToArrayCodec):
        if a2b is not None:
            raise MetadataError("array->array codec after the array->bytes codec")
        resolved = codec.resolve(current)
        assert isinstance(resolved, ArrayToArrayCodec)
        a2a.append((resolved, current))
        return resolved.output_spec(current), a2b
    if isinstance(codec, ArrayToBytesCodec):
        if a2b is not None:
            raise MetadataError("a chain has exactly one array->bytes codec")
        resolved_ab = codec.resolve(current)
        assert isinstance(resolved_ab, ArrayToBytesCodec)
        return current, (resolved_ab, current)
    assert isinstance(codec, BytesToBytesCodec)
    if a2b is None:
        raise MetadataError("bytes->bytes codec before the array->bytes codec")
    if codec.resolves_stored_elements():
        resolved_bb = codec.resolve(replace(current, dtype=a2b[0].stored_dtype(current.dtype)))
    else:
        resolved_bb = codec.resolve(current)
    assert isinstance(resolved_bb, BytesToBytesCodec)
    b2b.append(resolved_bb)
    return current, a2b


@dataclass(frozen=True, eq=False)
class CodecPipeline:
    array_to_array: tuple[tuple[ArrayToArrayCodec, ChunkSpec], ...]
    array_to_bytes: tuple[ArrayToBytesCodec, ChunkSpec]
    bytes_to_bytes: tuple[BytesToBytesCodec, ...]
    spec: ChunkSpec

    @classmethod
    def from_codecs(
        cls,
        codecs: Sequence[Codec | CodecJSON | dict[str, Any]],
        spec: ChunkSpec,
        field: str = "codecs",
        fields: Sequence[str] | None = None,
    ) -> CodecPipeline:
        """The pipeline of ``codecs`` for chunks of ``spec``. Errors name a codec ``field[i]``,
        or ``fields[i]`` where given (a v2 array's ``filters[1]``, ``compressor``)."""
        a2a: list[tuple[ArrayToArrayCodec, ChunkSpec]] = []
        a2b: tuple[ArrayToBytesCodec, ChunkSpec] | None = None
        b2b: list[BytesToBytesCodec] = []
        current = spec
        for i, item in enumerate(codecs):
            where = fields[i] if fields is not None else f"{field}[{i}]"
            # Where a codec stands decides how a numcodecs filter runs (registry.codec_from_json).
            codec = item if isinstance(item, Codec) else codec_from_json(
                item, where, after_array_to_bytes=a2b is not None
            )
            try:
                current, a2b = _place(codec, current, a2a, a2b, b2b)
            except MetadataError as exc:
                raise type(exc)(f"{where} ({codec.to_json()['name']}): {exc}") from exc
        if a2b is None:
            raise MetadataError(f"{field}: the chain needs an array->bytes codec (e.g. 'bytes')")
        return cls(tuple(a2a), a2b, tuple(b2b), spec)

    # -- introspection -------------------------------------------------------------------------

    @property
    def codecs(self) -> tuple[Codec, ...]:
        return (*(c for c, _ in self.array_to_array), self.array_to_bytes[0], *self.bytes_to_bytes)

    def to_json(self) -> list[CodecJSON]:
        return [c.to_json() for c in self.codecs]

    def encoded_size(self) -> int | None:
        """The encoded size of every chunk when it is fixed (e.g. bytes + crc32c), else None."""
        size: int | None = self.spec.nbytes
        for codec in self.codecs:
            size = None if size is None else codec.encoded_size(size)
        return size

    def max_encoded_size(self) -> int | None:
        """The largest encoded chunk these codecs can write (None when it has no bound)."""
        bounds = self.decoded_bounds
        if not bounds:
            a2b, a2b_spec = self.array_to_bytes
            return a2b.max_encoded_size(a2b_spec.nbytes)
        size, _ = bounds[0]
        return None if size is None else self.bytes_to_bytes[-1].max_encoded_size(size)

    @cached_property
    def max_stored_nbytes(self) -> int | None:
        """:meth:`max_encoded_size`, kept: the most bytes a stored chunk of this chain may
        have. A stored size is untrusted too (a file, a zip member): a larger one is refused
        before any memory is taken for it. None (no bound) where a shard is in the chain, at
        any depth: bytes its index does not point at (dead space a writer left) are valid."""
        if any(codec.holds_shards for codec in self.codecs):
            return None
        return self.max_encoded_size()

    @cached_property
    def decoded_bounds(self) -> tuple[tuple[int | None, bool], ...]:
        """For each bytes->bytes codec in decoding order (outermost first): the most bytes its
        decoder may produce (None: not fixed by the metadata) and whether that is the exact size.

        The innermost decodes to what the array->bytes codec takes (exactly the chunk's bytes for
        ``bytes``); each codec outside it to at most the worst-case encoding of that (exactly,
        through fixed-size codecs such as crc32c).
        """
        a2b, a2b_spec = self.array_to_bytes
        size = a2b.max_encoded_size(a2b_spec.nbytes)
        exact = size is not None and a2b.encoded_size(a2b_spec.nbytes) == size
        bounds: list[tuple[int | None, bool]] = []
        for codec in self.bytes_to_bytes:
            bounds.append((size, exact))
            fixed = codec.encoded_size(size) if size is not None and exact else None
            size = None if size is None else codec.max_encoded_size(size)
            exact = fixed is not None and fixed == size
        return tuple(reversed(bounds))

    # The properties below are the fast-path flags: cached, so the hot loop asks them per chunk
    # for free (a frozen dataclass keeps cached_property values in its instance dict).

    @cached_property
    def bytes_codec(self) -> BytesCodec | None:
        """The ``bytes`` codec, when the chain's array->bytes codec is that one."""
        codec = self.array_to_bytes[0]
        return codec if isinstance(codec, BytesCodec) else None

    # -- decoding ------------------------------------------------------------------------------

    def _decode_bytes(self, raw: Buffer, out: np.ndarray[Any, Any] | None = None) -> Buffer:
        data = raw
        last = len(self.bytes_to_bytes) - 1
        ceiling: int = config.get("max_chunk_bytes")
        stages = zip(reversed(self.bytes_to_bytes), self.decoded_bounds, strict=True)
        for i, (codec, (bound, exact)) in enumerate(stages):
            target = out if i == last else None
            if target is None and exact and bound is not None:
                # A buffer of the exact size lets a decoder that writes into it (zstd, blosc,
                # lz4) stop there, whatever sizes the stream declares.
                target = np.empty(bound, np.uint8)
            data = codec.decode(data, target, ceiling if bound is None else bound)
        return data

    def decode(self, raw: Buffer, key: str) -> np.ndarray[Any, Any]:
        """Decode one chunk to an array of ``spec.shape`` (a view when no copy was needed)."""
        try:
            data = self._decode_bytes(raw)
            a2b, a2b_spec = self.array_to_bytes
            chunk = a2b.decode(data, a2b_spec)
            for codec, codec_spec in reversed(self.array_to_array):
                chunk = codec.decode(chunk, codec_spec)
        except CorruptChunkError as exc:
            if exc.key == key:
                raise
            raise CorruptChunkError(key, f"{exc.key}: {exc.reason}") from exc
        except Exception as exc:
            raise CorruptChunkError(key, f"cannot decode chunk: {exc}") from exc
        if chunk.shape != self.spec.shape:
            raise CorruptChunkError(key, f"decoded shape {chunk.shape}, expected {self.spec.shape}")
        return chunk

    def decode_into(
        self,
        raw: Buffer,
        key: str,
        out: np.ndarray[Any, Any],
        out_selection: tuple[Any, ...],
        chunk_selection: tuple[Any, ...],
        direct: bool = False,
    ) -> None:
        """``out[out_selection] = decode(raw)[chunk_selection]`` with one copy.

        ``direct=True`` (the caller checked that ``out[out_selection]`` is a C-contiguous view
        covering the whole chunk) lets the innermost decompressor write into ``out`` directly.
        """
        if direct and self._decodes_to_raw_bytes:
            target = out[out_selection]
            self._decode_bytes_into(raw, key, target.reshape(-1).view(np.uint8))
            return
        chunk = self.decode_scratch(raw, key)
        out[out_selection] = chunk[chunk_selection]

    def decode_scratch(self, raw: Buffer, key: str) -> np.ndarray[Any, Any]:
        """Like :meth:`decode`, but the result may live in a buffer this thread reuses: it is
        valid only until this thread's next ``decode_scratch`` (copy out of it at once)."""
        if not self._decodes_to_raw_bytes:
            return self.decode(raw, key)
        scratch = buffers.scratch(self.spec.nbytes, "decoded")
        self._decode_bytes_into(raw, key, scratch)
        return self._chunk_of(scratch)

    @cached_property
    def decodes_in_buffer(self) -> bool:
        """Whether :meth:`decode_in` takes chunks of this pipeline: the chain is ``bytes`` in
        native order, after compressors or alone, so a chunk's decoded bytes are its elements."""
        bc = self.bytes_codec
        return self._decodes_to_raw_bytes or (self.is_uncompressed and bc is not None and bc.is_native)

    def decode_in(self, raw: Buffer, key: str, buffer: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
        """Decode the chunk ``raw`` (its stored bytes, whole) into ``buffer`` (uint8 of exactly
        the chunk's bytes, which the caller may reuse chunk after chunk, viewing it once with
        :meth:`chunk_in`, or point into its output): None. Uncompressed, nothing is written:
        the chunk viewing ``raw`` itself. Only where :attr:`decodes_in_buffer`."""
        if not self.bytes_to_bytes:
            stored = np.frombuffer(raw, np.uint8)
            if stored.size != self.spec.nbytes:
                raise CorruptChunkError(key, f"uncompressed chunk has {stored.size} bytes, expected {self.spec.nbytes}")
            return self._chunk_of(stored)
        self._decode_bytes_into(raw, key, buffer)
        return None

    def chunk_in(self, buffer: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The chunk array viewing ``buffer``, which :meth:`decode_in` decodes chunks into."""
        return self._chunk_of(buffer)

    @cached_property
    def codes_on_one_thread(self) -> bool:
        """Whether chunks of this pipeline are read and written faster on one thread than spread
        over several: small chunks of fast codecs, one call each (see
        ``BytesToBytesCodec.one_thread_pays``; not those :meth:`decode_many` codes a run at a
        time)."""
        return (
            bool(self.bytes_to_bytes)
            and not self.decodes_many
            and all(codec.one_thread_pays(self.spec.nbytes) for codec in self.bytes_to_bytes)
        )

    def alone(self) -> AbstractContextManager[object] | None:
        """The context in which the calling thread codes a pass of chunks of this pipeline alone,
        where that is faster (:attr:`codes_on_one_thread`): with the codecs' own threads off
        (:meth:`beside_pool`; a chunk this small is one Blosc block, which c-blosc's threads
        cannot share out). None where the pass is spread over the pool: larger chunks, and where
        the user asked for a codec's own threads."""
        return self.beside_pool() if self.codes_on_one_thread else None

    @cached_property
    def decodes_many(self) -> bool:
        """Whether :meth:`decode_many` may decode chunks of this pipeline together."""
        return (
            self._decodes_to_raw_bytes
            and len(self.bytes_to_bytes) == 1
            and self.bytes_to_bytes[0].decodes_many(self.spec.nbytes)
        )

    def encode_many(self, chunks: Sequence[np.ndarray[Any, Any]]) -> Sequence[Buffer] | None:
        """:meth:`encode` of each of ``chunks`` (the same bytes), the chain's compressor running
        through them all in one call (see ``BytesToBytesCodec.encode_many``); None where it
        cannot (encode them one by one). Only for the chains :meth:`decode_many` takes."""
        if not self.decodes_many:
            return None
        a2b, a2b_spec = self.array_to_bytes
        return self.bytes_to_bytes[0].encode_many([a2b.encode(chunk, a2b_spec) for chunk in chunks])

    def decode_many(self, raws: Sequence[Buffer]) -> list[np.ndarray[Any, Any]] | None:
        """The chunks ``raws`` (each one chunk's stored bytes) decode to, decoded together in
        one call where the chain's compressor can (see ``BytesToBytesCodec.decode_many``):
        read-only arrays, valid as long as they are held. None where it cannot, or one of them
        fails: the caller decodes them one by one (which raises what is wrong with a bad one)."""
        if not self.decodes_many:
            return None
        decoded = self.bytes_to_bytes[0].decode_many(raws, self.spec.nbytes)
        return None if decoded is None else [self._chunk_viewing(d) for d in decoded]

    def decode_one_of_many(self, raw: Buffer) -> np.ndarray[Any, Any] | None:
        """One of the chunks :meth:`decode_many` takes, decoded on its own
        (``BytesToBytesCodec.decode_one_of_many``): a read-only array, or None where it cannot
        be (the caller decodes it the usual way, which raises what is wrong with it)."""
        if not self.decodes_many:
            return None
        decoded = self.bytes_to_bytes[0].decode_one_of_many(raw, self.spec.nbytes)
        return None if decoded is None else self._chunk_viewing(decoded)

    def _chunk_viewing(self, decoded: Buffer) -> np.ndarray[Any, Any]:
        """The (read-only) chunk array viewing ``decoded``, bytes a compressor handed back: the
        chunk's decoded bytes, ``bytes`` codec in native order (as :meth:`_chunk_of` views a
        NumPy buffer)."""
        dtype, shape = self._native_chunk_view
        return np.frombuffer(decoded, dtype).reshape(shape)

    def _chunk_of(self, decoded: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The chunk array viewing ``decoded``, the chain's decoded bytes of exactly the chunk's
        size (``bytes`` codec in native order: a view, as ``BytesCodec.decode`` makes it)."""
        dtype, shape = self._native_chunk_view
        return decoded.view(dtype).reshape(shape)

    @cached_property
    def _native_chunk_view(self) -> tuple[np.dtype[Any], tuple[int, ...]]:
        bc = self.bytes_codec
        assert bc is not None and bc.is_native  # what _decodes_to_raw_bytes requires
        return bc.stored_dtype(self.spec.dtype), self.spec.shape

    @cached_property
    def decodes_part(self) -> bool:
        """Whether :meth:`decode_scratch_part` may decode less than a whole chunk: the chain
        is ``bytes`` and one compressor that can decode part of a chunk (zstd, Blosc)."""
        return self._decodes_to_raw_bytes and len(self.bytes_to_bytes) == 1 and self.bytes_to_bytes[0].decodes_part

    def decode_scratch_part(self, raw: Buffer, key: str, start: int, stop: int) -> np.ndarray[Any, Any] | None:
        """Like :meth:`decode_scratch`, but only bytes ``[start, stop)`` of the chunk (in C
        order) are sure to be decoded: the elements outside them may be stale. None where the
        codec cannot decode that part alone (then call :meth:`decode_scratch`)."""
        if not self.decodes_part:
            return None
        scratch = buffers.scratch(self.spec.nbytes, "decoded")
        try:
            done = self.bytes_to_bytes[0].decode_part(raw, scratch, start, stop)
        except Exception as exc:  # any decoder failure means corrupt input
            raise CorruptChunkError(key, f"cannot decode chunk: {exc}") from exc
        return self._chunk_of(scratch) if done else None

    def part_may_pay(self, start: int, stop: int) -> bool:
        """Whether decoding only bytes ``[start, stop)`` of the chunk may pay (see
        ``BytesToBytesCodec.part_may_pay``): False where the whole is decoded at once."""
        return self.decodes_part and self.bytes_to_bytes[0].part_may_pay(start, stop, self.spec.nbytes)

    def parts_may_pay(self) -> bool:
        """Whether decoding some part of a chunk alone may pay: False where even the smallest
        part (its first byte) would not, and so no part would (a chunk of one zstd block, one
        Blosc block), which spares finding the part a selection needs."""
        return self.part_may_pay(0, 1)

    @cached_property
    def reads_part(self) -> bool:
        """Whether :meth:`read_part` reads less than the whole value (Blosc)."""
        return self.decodes_part and self.bytes_to_bytes[0].reads_part

    def read_part(
        self, reader: RangeReader, key: str, start: int, stop: int, buffer_for: BufferFor
    ) -> tuple[Buffer, object | None]:
        """What decoding bytes ``[start, stop)`` of the chunk (all of it: ``(0,
        spec.nbytes)``) needs, read from ``reader`` into ``buffer_for``'s memory and checked
        (see ``BytesToBytesCodec.read_part``): (the bytes, a plan for :meth:`decode_read_part`),
        or (the whole value, None) for :meth:`decode_scratch`."""
        try:
            return self.bytes_to_bytes[0].read_part(reader, self.spec.nbytes, start, stop, buffer_for)
        except OSError:
            raise
        except Exception as exc:  # a codec's failure to make sense of the bytes: corrupt input
            raise CorruptChunkError(key, f"cannot decode chunk: {exc}") from exc

    def decode_read_part(
        self, data: Buffer, plan: object, key: str, into: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """The chunk decoded from what :meth:`read_part` read and planned: in this thread's
        scratch buffer (the elements outside a part stale), or in ``into`` (uint8 of the
        chunk's size, a whole chunk's plan)."""
        target = buffers.scratch(self.spec.nbytes, "decoded") if into is None else into
        try:
            self.bytes_to_bytes[0].decode_read_part(data, plan, target)
        except Exception as exc:  # any decoder failure means corrupt input
            raise CorruptChunkError(key, f"cannot decode chunk: {exc}") from exc
        return self._chunk_of(target)

    def beside_pool(self) -> AbstractContextManager[object] | None:
        """The context in which the calling thread codes its share of a parallel pass while
        the pool's threads code other chunks: with no codec of the chain starting its library's
        own threads (see ``BytesToBytesCodec.own_threads_off``). None where a codec's cannot be
        turned off: the pass then leaves the calling thread idle."""
        contexts = []
        for codec in self.bytes_to_bytes:
            context = codec.own_threads_off()
            if context is None:
                return None
            contexts.append(context)
        # Almost every chain has one compressor: its own context, not one made around it.
        return contexts[0] if len(contexts) == 1 else _all_entered(contexts)

    @cached_property
    def is_uncompressed(self) -> bool:
        """The chain is only ``bytes``: a chunk's stored bytes are its elements, so any byte
        range of it can be read and viewed without decoding the rest."""
        return not self.array_to_array and not self.bytes_to_bytes and self.bytes_codec is not None

    @cached_property
    def _decodes_to_raw_bytes(self) -> bool:
        """The chain is ``bytes`` + compressors: decoded bytes are the chunk's elements."""
        bc = self.bytes_codec
        return not self.array_to_array and bool(self.bytes_to_bytes) and bc is not None and bc.is_native

    def _decode_bytes_into(self, raw: Buffer, key: str, target: np.ndarray[Any, Any]) -> None:
        """Run the bytes->bytes codecs so that ``target`` (uint8, chunk-sized) holds the result."""
        try:
            if len(self.bytes_to_bytes) == 1:
                # One compressor (the usual chain): straight into ``target``, which is also its
                # bound (``decoded_bounds``), without the loop over stages per chunk.
                data = self.bytes_to_bytes[0].decode(raw, target, target.size)
            else:
                data = self._decode_bytes(raw, target)
        except Exception as exc:  # any decoder failure means corrupt input
            raise CorruptChunkError(key, f"cannot decode chunk: {exc}") from exc
        if data is target:  # decoded in place (numcodecs returns ``out``)
            return
        got = as_uint8(data)
        if got.size != target.size:
            raise CorruptChunkError(key, f"decoded chunk has {got.size} bytes, expected {target.size}")
        if got.ctypes.data != target.ctypes.data:
            target[...] = got

    # -- encoding ------------------------------------------------------------------------------

    def encode(self, chunk: np.ndarray[Any, Any]) -> Buffer:
        for a2a, a2a_spec in self.array_to_array:
            chunk = a2a.encode(chunk, a2a_spec)
        a2b, a2b_spec = self.array_to_bytes
        data = a2b.encode(chunk, a2b_spec)
        for b2b in self.bytes_to_bytes:
            data = b2b.encode(data)
        if isinstance(data, np.ndarray) and data.dtype != np.uint8:
            # A v2 filter last (no compressor) hands back its typed elements; stores take bytes,
            # and a buffer of datetime64 or timedelta64 elements is none (memoryview refuses it).
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        return data

