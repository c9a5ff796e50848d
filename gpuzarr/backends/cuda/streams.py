"""Encoded chunks -> raw streams that nvCOMP's batched decompressors accept.

nvCOMP decodes *raw* bitstreams (``BitstreamKind.RAW``): Zstandard frames, raw deflate (RFC 1951)
and LZ4 blocks. The containers Zarr stores around them are taken apart here, on the host, and
every size and offset is checked against the length of the encoded chunk first, so a truncated or
forged chunk becomes a ``ValueError`` naming what is wrong and never an out-of-bounds device
access:

* ``zstd`` (v3 ``zstd``, v2 ``zstd``): the frame as it is, once its header and every block
  header are walked (:func:`walk_zstd_frame`); nvCOMP documents corrupt input as undefined.
* ``gzip`` (v3 ``gzip``, v2 ``gzip``, RFC 1952): header (with the optional FEXTRA, FNAME,
  FCOMMENT and FHCRC fields) and the 8-byte trailer are stripped; CRC-32 and ISIZE are kept for
  verification.
* ``numcodecs.zlib`` (RFC 1950): the 2-byte header and the Adler-32 trailer are stripped; streams
  with a preset dictionary are rejected.
* ``numcodecs.lz4``: a 4-byte little-endian decoded size, then one LZ4 block.
* ``blosc`` (Blosc1 frames, format versions 1-4 as written by c-blosc 1.x and numcodecs): one
  stream per block, or ``typesize`` streams per block when the block is split; lz4/lz4hc streams
  are LZ4 blocks, zstd streams Zstandard frames, zlib streams zlib streams (stripped to raw
  deflate). Streams whose compressed size equals their decoded size are stored bytes. blosclz and
  snappy streams have no nvCOMP decoder (:class:`UnsupportedStreamError`).

Every function returns :class:`Stream` records whose offsets are relative to the encoded chunk
and whose ``decoded_offset`` is relative to the chunk's decoded bytes (for shuffled Blosc frames:
to the shuffled bytes, which the un-shuffle kernels turn into the chunk). Pure Python and NumPy.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from ...codecs.base import as_uint8
from ...codecs.blosc import (
    BLOSC_COMPRESSOR_FORMAT_VERSION,
    BLOSC_FLAG_BITSHUFFLE,
    BLOSC_FLAG_DELTA,
    BLOSC_FLAG_SHUFFLE,
    BLOSC_FORMAT_VERSION,
    BLOSC_HEADER_NBYTES,
    BloscHeader,
    parse_blosc_header,
)
from ...codecs.inflate import GZIP_RESERVED_FLAGS
from ...codecs.zstd import ZSTD_BLOCK_MAX as ZSTD_BLOCK_MAX  # re-exported: the limit the walk enforces
from ...codecs.zstd import ZSTD_MAGIC, walk_zstd_blocks

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...store.base import Buffer

#: nvCOMP algorithm of a stream; "copy" is stored bytes (no decompression).
Algorithm = Literal["zstd", "deflate", "lz4", "copy"]
Shuffle = Literal["none", "byte", "bit"]

#: Blosc compressor codes (bits 5-7 of the flags) -> (name, raw stream kind or None)
_BLOSC_COMPRESSORS: dict[int, tuple[str, Literal["lz4", "zstd", "zlib"] | None]] = {
    0: ("blosclz", None),
    1: ("lz4", "lz4"),
    2: ("snappy", None),
    3: ("zlib", "zlib"),
    4: ("zstd", "zstd"),
}


class UnsupportedStreamError(ValueError):
    """A well-formed stream that no nvCOMP decoder handles (the chunk is decoded on the CPU)."""


@dataclass(frozen=True)
class Checksum:
    """A checksum the container carries for the decoded bytes (gzip CRC-32, zlib Adler-32)."""

    kind: Literal["crc32", "adler32"]
    value: int


@dataclass(frozen=True)
class Stream:
    """One raw stream of an encoded chunk: ``nbytes`` at ``offset`` decode to ``decoded_nbytes``
    bytes at ``decoded_offset``; ``checksum``: what the stream's own container says of those
    bytes (the Adler-32 of a zlib stream inside a Blosc frame)."""

    algorithm: Algorithm
    offset: int
    nbytes: int
    decoded_offset: int
    decoded_nbytes: int
    checksum: Checksum | None = None


@dataclass(frozen=True)
class BloscBlock:
    """One Blosc block to un-shuffle: ``nbytes`` at ``offset`` of the decoded chunk."""

    offset: int
    nbytes: int


@dataclass(frozen=True)
class SplitChunk:
    """What one encoded chunk becomes: its streams, and how the decoded streams form the chunk."""

    streams: tuple[Stream, ...]
    decoded_nbytes: int
    #: "none": the streams decode straight into the chunk; else into a scratch buffer that the
    #: byte or bit un-shuffle kernel turns into the chunk, block by block.
    shuffle: Shuffle = "none"
    typesize: int = 1
    blocks: tuple[BloscBlock, ...] = ()
    #: bit_unshuffle's ``partial_rule`` (0: c-blosc 1.x frame format 2, the only one split; 1: later
    #: formats, which c-blosc 1.x refuses and so go to the CPU)
    partial_rule: int = 0
    checksum: Checksum | None = None


def _u8(data: Buffer) -> npt.NDArray[np.uint8]:
    return as_uint8(data)


# --- zstd ---------------------------------------------------------------------------------------

_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50  # 0x184D2A50-0x184D2A5F
_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
_ZSTD_FCS_BYTES = (0, 2, 4, 8)


@dataclass(frozen=True)
class ZstdFrame:
    """What the walk of a Zstandard frame found: its length, declared content size and blocks."""

    nbytes: int
    content_size: int | None
    checksum: bool
    nblocks: int


def walk_zstd_frame(read: Callable[[int, int], bytes | memoryview], size: int) -> ZstdFrame:
    """Walk the frame header and every block header of the Zstandard frame at the start of a
    ``size``-byte chunk, through ``read(offset, n)`` (at most ``n`` bytes; fewer past the end).

    nvCOMP's zstd decoder documents corrupt input as undefined behaviour, so this is the host's
    check of a frame's structure before it joins a batch (RFC 8878): the header's reserved bit,
    every block's type (not the reserved type 3) and size (at most 128 KiB; its content inside
    the chunk), a last block, the 4-byte checksum when the header announces one, and the
    declared content size against what the blocks can hold (raw and RLE blocks give their
    decoded size exactly, a compressed block at most 128 KiB). It reads only headers, 3 bytes a
    block, and allocates nothing from the sizes it reads. The block contents (the entropy-coded
    payload) and the XXH64 checksum's value are not verified.

    Raises ValueError for a frame that no decoder accepts, and :class:`UnsupportedStreamError`
    for chunks the CPU may accept but a batch cannot hold (skippable or several frames, a frame
    that needs a dictionary or declares no content size).
    """
    content_size, checksum, pos = _zstd_frame_header(read, size)
    pos, nblocks = _walk_zstd_blocks(read, size, pos, content_size)
    if checksum:
        if pos + 4 > size:
            raise ValueError(f"zstd: frame's 4-byte checksum runs past the end of the {size}-byte chunk")
        pos += 4
    return ZstdFrame(pos, content_size, checksum, nblocks)


def _zstd_frame_header(read: Callable[[int, int], bytes | memoryview], size: int) -> tuple[int | None, bool, int]:
    """The frame header: (declared content size, checksum flag, offset of the first block)."""
    if size < 4:
        raise ValueError(f"zstd: {size}-byte chunk cannot hold a frame")
    magic = int.from_bytes(read(0, 4), "little")
    if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE_MAGIC:
        raise UnsupportedStreamError("zstd: chunk starts with a skippable frame")
    if magic != ZSTD_MAGIC:
        raise ValueError(f"zstd: {size}-byte chunk does not start with a Zstandard frame header")
    if size < 6:
        raise ValueError(f"zstd: {size}-byte chunk is shorter than a frame header")
    descriptor = read(4, 1)[0]
    if descriptor & 0x08:
        raise ValueError(f"zstd: reserved bit of the frame header descriptor is set ({descriptor:#04x})")
    single_segment = bool(descriptor & 0x20)
    dict_bytes = _ZSTD_DICT_ID_BYTES[descriptor & 0x3]
    fcs_bytes = _ZSTD_FCS_BYTES[descriptor >> 6] or (1 if single_segment else 0)
    pos = 5 + (0 if single_segment else 1)
    header_end = pos + dict_bytes + fcs_bytes
    if header_end > size:
        raise ValueError(f"zstd: frame header of {header_end} bytes runs past the end of the {size}-byte chunk")
    fields = bytes(read(pos, dict_bytes + fcs_bytes))
    dict_id = int.from_bytes(fields[:dict_bytes], "little")
    if dict_id:
        raise UnsupportedStreamError(f"zstd: frame needs dictionary {dict_id}")
    content_size: int | None = None
    if fcs_bytes:
        content_size = int.from_bytes(fields[dict_bytes:], "little") + (256 if fcs_bytes == 2 else 0)
    return content_size, bool(descriptor & 0x04), header_end


def _walk_zstd_blocks(
    read: Callable[[int, int], bytes | memoryview], size: int, pos: int, content_size: int | None
) -> tuple[int, int]:
    """Walk the block headers from ``pos`` to the last block (``codecs.zstd.walk_zstd_blocks``)
    and check them against the declared content size: (offset after it, block count)."""
    blocks = walk_zstd_blocks(read, size, pos)
    if content_size is not None and blocks.fixed_nbytes > content_size:
        raise ValueError(f"zstd: blocks decode to more than the {content_size} bytes the frame header declares")
    if content_size is not None and blocks.max_decoded_nbytes < content_size:
        raise ValueError(
            f"zstd: {blocks.nblocks} blocks hold at most {blocks.max_decoded_nbytes} decoded bytes, "
            f"the frame header declares {content_size}"
        )
    return blocks.end, blocks.nblocks


def check_zstd_frame(read: Callable[[int, int], bytes | memoryview], size: int, decoded_nbytes: int) -> ZstdFrame:
    """:func:`walk_zstd_frame`, then what a batch needs: one frame spanning the chunk (else
    UnsupportedStreamError: the CPU decides), declaring ``decoded_nbytes`` (else ValueError)."""
    frame = walk_zstd_frame(read, size)
    if frame.nbytes != size:
        raise UnsupportedStreamError(
            f"zstd: {size - frame.nbytes} bytes follow the first frame (several or skippable frames)"
        )
    if frame.content_size is None:
        raise UnsupportedStreamError("zstd: frame header declares no content size")
    if frame.content_size != decoded_nbytes:
        raise ValueError(f"zstd: frame declares {frame.content_size} decoded bytes, expected {decoded_nbytes}")
    return frame


def memory_reader(raw: npt.NDArray[np.uint8]) -> Callable[[int, int], memoryview]:
    """``read(offset, n)`` over a host buffer, without copies."""
    view = memoryview(np.ascontiguousarray(raw).tobytes() if not raw.flags.c_contiguous else raw.data).cast("B")
    return lambda offset, n: view[offset : offset + n]


def split_zstd(data: Buffer, decoded_nbytes: int) -> SplitChunk:
    """A Zstandard frame decodes as it is, once its structure is checked (:func:`check_zstd_frame`)."""
    raw = _u8(data)
    check_zstd_frame(memory_reader(raw), int(raw.size), decoded_nbytes)
    return SplitChunk((Stream("zstd", 0, int(raw.size), 0, decoded_nbytes),), decoded_nbytes)


# --- gzip (RFC 1952) ----------------------------------------------------------------------------

_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 0x02, 0x04, 0x08, 0x10


def gzip_payload(data: Buffer) -> tuple[int, int, int, int]:
    """Parse a gzip member spanning all of ``data``: (deflate offset, deflate nbytes, CRC-32, ISIZE)."""
    raw = _u8(data)
    n = int(raw.size)
    if n < 18:
        raise ValueError(f"gzip: stream of {n} bytes is shorter than a header and trailer (18 bytes)")
    if raw[0] != 0x1F or raw[1] != 0x8B:
        raise ValueError(f"gzip: bad magic bytes {int(raw[0]):#04x} {int(raw[1]):#04x}, expected 0x1f 0x8b")
    if raw[2] != 8:
        raise ValueError(f"gzip: compression method {int(raw[2])}, expected 8 (deflate)")
    flags = int(raw[3])
    if flags & GZIP_RESERVED_FLAGS:
        raise ValueError(f"gzip: reserved flag bits set ({flags:#04x})")
    pos = 10
    limit = n - 8  # the trailer
    if flags & _FEXTRA:
        if pos + 2 > limit:
            raise ValueError("gzip: FEXTRA length runs past the end of the stream")
        xlen = int(raw[pos]) | int(raw[pos + 1]) << 8
        pos += 2 + xlen
        if pos > limit:
            raise ValueError(f"gzip: FEXTRA field of {xlen} bytes runs past the end of the stream")
    for flag, name in ((_FNAME, "FNAME"), (_FCOMMENT, "FCOMMENT")):
        if flags & flag:
            zeros = np.flatnonzero(raw[pos:limit] == 0)
            if zeros.size == 0:
                raise ValueError(f"gzip: {name} field is not zero-terminated")
            pos += int(zeros[0]) + 1
    if flags & _FHCRC:
        if pos + 2 > limit:
            raise ValueError("gzip: FHCRC field runs past the end of the stream")
        stored = int(raw[pos]) | int(raw[pos + 1]) << 8
        actual = zlib.crc32(raw[:pos].tobytes()) & 0xFFFF
        if stored != actual:
            raise ValueError(f"gzip: header CRC16 mismatch: stored {stored:#06x}, computed {actual:#06x}")
        pos += 2
    if pos >= limit:
        raise ValueError(f"gzip: no deflate data between the {pos}-byte header and the trailer")
    crc, isize = struct.unpack_from("<II", raw[limit:].tobytes())
    return pos, limit - pos, crc, isize


def split_gzip(data: Buffer, decoded_nbytes: int) -> SplitChunk:
    """A one-member gzip stream -> raw deflate, with its CRC-32 kept for verification.

    A stream whose ISIZE differs from the chunk's size is either corrupt or made of several
    members (legal, rare); raw deflate cannot express the latter, so it is left to the CPU.
    """
    offset, nbytes, crc, isize = gzip_payload(data)
    if isize != decoded_nbytes & 0xFFFFFFFF:
        raise UnsupportedStreamError(
            f"gzip: trailer ISIZE {isize} differs from the chunk size {decoded_nbytes} (several members, or corrupt)"
        )
    return SplitChunk(
        (Stream("deflate", offset, nbytes, 0, decoded_nbytes),),
        decoded_nbytes,
        checksum=Checksum("crc32", crc),
    )


# --- zlib (RFC 1950) ----------------------------------------------------------------------------


def zlib_payload(data: Buffer) -> tuple[int, int, int]:
    """Parse a zlib stream spanning all of ``data``: (deflate offset, deflate nbytes, Adler-32)."""
    raw = _u8(data)
    n = int(raw.size)
    if n < 7:
        raise ValueError(f"zlib: stream of {n} bytes is shorter than a header and trailer (7 bytes)")
    cmf, flg = int(raw[0]), int(raw[1])
    if cmf & 0x0F != 8:
        raise ValueError(f"zlib: compression method {cmf & 0x0F}, expected 8 (deflate)")
    if cmf >> 4 > 7:
        raise ValueError(f"zlib: window size field {cmf >> 4} exceeds 7")
    if (cmf << 8 | flg) % 31:
        raise ValueError(f"zlib: header check bits are wrong ({cmf:#04x} {flg:#04x})")
    if flg & 0x20:
        raise ValueError("zlib: the stream needs a preset dictionary, which Zarr chunks cannot supply")
    (adler,) = struct.unpack_from(">I", raw[n - 4 :].tobytes())
    return 2, n - 6, adler


def split_zlib(data: Buffer, decoded_nbytes: int) -> SplitChunk:
    """A zlib stream (numcodecs ``zlib``) -> raw deflate, Adler-32 kept for verification."""
    offset, nbytes, adler = zlib_payload(data)
    return SplitChunk(
        (Stream("deflate", offset, nbytes, 0, decoded_nbytes),),
        decoded_nbytes,
        checksum=Checksum("adler32", adler),
    )


# --- numcodecs lz4 ------------------------------------------------------------------------------


def split_lz4(data: Buffer, decoded_nbytes: int) -> SplitChunk:
    """numcodecs' LZ4 format: a 4-byte little-endian decoded size, then one LZ4 block."""
    raw = _u8(data)
    if raw.size < 5:
        raise ValueError(f"lz4: stream of {raw.size} bytes is shorter than its 4-byte size and a block")
    declared = int.from_bytes(raw[:4].tobytes(), "little")
    if declared != decoded_nbytes:
        raise ValueError(f"lz4: size prefix says {declared} decoded bytes, expected {decoded_nbytes}")
    return SplitChunk((Stream("lz4", 4, int(raw.size) - 4, 0, decoded_nbytes),), decoded_nbytes)


# --- Blosc1 -------------------------------------------------------------------------------------


def split_blosc(data: Buffer, decoded_nbytes: int) -> SplitChunk:
    """A Blosc1 frame -> one raw stream per (split) block, plus the blocks to un-shuffle.

    Follows c-blosc1's ``blosc_d``: the header (parsed and checked against the frame's length by
    ``codecs.blosc.parse_blosc_header``, as the CPU codec does) says whether the frame is stored
    (memcpyed), shuffled or bit-shuffled and which compressor made the streams; a table of
    ``nblocks`` int32 block starts follows the header; each block holds ``nsplits`` streams, each
    a little-endian int32 compressed size and that many bytes.
    """
    raw = _u8(data)
    n = int(raw.size)
    header = parse_blosc_header(raw)
    if header.version != BLOSC_FORMAT_VERSION:
        # c-blosc 1.x (the CPU codec's decoder, the reference) decodes format version 2 only:
        # the CPU decides, and refuses the frame.
        raise UnsupportedStreamError(f"blosc: frame format version {header.version}, not c-blosc 1.x's")
    nbytes, typesize = header.nbytes, header.typesize
    if nbytes != decoded_nbytes:
        raise ValueError(f"blosc: header says {nbytes} decoded bytes, expected {decoded_nbytes}")
    if header.flags & BLOSC_FLAG_DELTA:
        # Blosc2's delta filter: c-blosc 1.x (the CPU codec's decoder, the reference) refuses
        # such frames, stored ones too, and so must a batch.
        raise UnsupportedStreamError(f"blosc: the header asks for the delta filter (flags {header.flags:#04x})")
    if header.memcpyed:
        if n != BLOSC_HEADER_NBYTES + nbytes:
            raise ValueError(
                f"blosc: stored (memcpyed) frame has {n - BLOSC_HEADER_NBYTES} data bytes, header says {nbytes}"
            )
        stored = (Stream("copy", BLOSC_HEADER_NBYTES, nbytes, 0, nbytes),) if nbytes else ()
        return SplitChunk(stored, nbytes, typesize=typesize)
    if nbytes == 0:
        return SplitChunk((), 0, typesize=typesize)
    if header.version_lz != BLOSC_COMPRESSOR_FORMAT_VERSION:
        raise UnsupportedStreamError(
            f"blosc: compressor format version {header.version_lz}, not c-blosc 1.x's (the CPU decides)"
        )
    compcode = header.flags >> 5
    if compcode not in _BLOSC_COMPRESSORS:
        raise ValueError(f"blosc: unknown compressor code {compcode}")
    starts, table_end = _blosc_block_starts(raw, header)
    shuffle = _blosc_shuffle(header)
    streams: list[Stream] = []
    blocks: list[BloscBlock] = []
    for b, start in enumerate(starts):
        if not table_end <= start < n:
            raise ValueError(f"blosc: block {b} starts at {start}, outside the frame's data ({table_end}..{n})")
        block = BloscBlock(b * header.blocksize, min(header.blocksize, nbytes - b * header.blocksize))
        streams.extend(_blosc_block_streams(raw, header, b, start, block))
        blocks.append(block)
    return SplitChunk(
        tuple(streams),
        nbytes,
        shuffle=shuffle,
        typesize=typesize,
        blocks=tuple(blocks) if shuffle != "none" else (),
    )


def _blosc_block_starts(raw: npt.NDArray[np.uint8], header: BloscHeader) -> tuple[list[int], int]:
    """The frame's table of block starts, and the offset where the table ends."""
    nblocks = -(-header.nbytes // header.blocksize)
    table_end = BLOSC_HEADER_NBYTES + 4 * nblocks
    if table_end > raw.size:
        raise ValueError(f"blosc: table of {nblocks} block starts runs past the {raw.size}-byte frame")
    starts = np.frombuffer(raw[BLOSC_HEADER_NBYTES:table_end].tobytes(), dtype="<i4").astype(np.int64)
    return [int(s) for s in starts], table_end


def _blosc_shuffle(header: BloscHeader) -> Shuffle:
    """The un-shuffle a frame's blocks need, as c-blosc1 decides it."""
    if header.flags & BLOSC_FLAG_SHUFFLE and header.typesize > 1:
        return "byte"
    if header.flags & BLOSC_FLAG_BITSHUFFLE and header.blocksize >= header.typesize:
        return "bit"
    return "none"


def _blosc_block_streams(
    raw: npt.NDArray[np.uint8], header: BloscHeader, b: int, start: int, block: BloscBlock
) -> list[Stream]:
    """The streams of block ``b``, which starts at ``start`` of the frame."""
    n = int(raw.size)
    name, kind = _BLOSC_COMPRESSORS[header.flags >> 5]
    nsplits = header.block_nsplits(block.nbytes)
    if block.nbytes % nsplits:
        raise ValueError(f"blosc: block {b} of {block.nbytes} bytes does not split into {nsplits} streams")
    neblock = block.nbytes // nsplits
    streams: list[Stream] = []
    pos = start
    for s in range(nsplits):
        if pos + 4 > n:
            raise ValueError(f"blosc: block {b} stream {s}: size field runs past the {n}-byte frame")
        (size,) = struct.unpack_from("<i", raw[pos : pos + 4].tobytes())
        pos += 4
        if size <= 0 or pos + size > n:
            raise ValueError(
                f"blosc: block {b} stream {s}: {size} compressed bytes at offset {pos} do not fit the {n}-byte frame"
            )
        decoded_offset = block.offset + s * neblock
        if size == neblock:
            streams.append(Stream("copy", pos, size, decoded_offset, neblock))
        elif kind is None:
            raise UnsupportedStreamError(f"blosc: {name} streams have no GPU decoder")
        elif kind == "zlib":
            try:
                offset, deflate_nbytes, adler = zlib_payload(raw[pos : pos + size])
            except ValueError as exc:
                raise ValueError(f"blosc: block {b} stream {s}: {exc}") from exc
            checksum = Checksum("adler32", adler)
            streams.append(Stream("deflate", pos + offset, deflate_nbytes, decoded_offset, neblock, checksum))
        else:
            if kind == "zstd":
                try:
                    check_zstd_frame(memory_reader(raw[pos : pos + size]), size, neblock)
                except UnsupportedStreamError as exc:
                    raise UnsupportedStreamError(f"blosc: block {b} stream {s}: {exc}") from exc
                except ValueError as exc:
                    raise ValueError(f"blosc: block {b} stream {s}: {exc}") from exc
            streams.append(Stream(kind, pos, size, decoded_offset, neblock))
        pos += size
    return streams


#: Zarr codec name -> its stream splitter; the keys are the keys of ``routes.ROUTES``
SPLITTERS: dict[str, Callable[[Buffer, int], SplitChunk]] = {
    "zstd": split_zstd,
    "gzip": split_gzip,
    "numcodecs.zlib": split_zlib,
    "numcodecs.lz4": split_lz4,
    "blosc": split_blosc,
}


def split_chunk(route: str, data: Buffer, decoded_nbytes: int) -> SplitChunk:
    """Split an encoded chunk of a GPU route: "raw" (stored bytes) or a key of :data:`SPLITTERS`."""
    if route == "raw":
        n = int(_u8(data).size)
        if n != decoded_nbytes:
            raise ValueError(f"uncompressed chunk has {n} bytes, expected {decoded_nbytes}")
        return SplitChunk((Stream("copy", 0, n, 0, n),) if n else (), n)
    return SPLITTERS[route](data, decoded_nbytes)
