"""Decompression bombs and forged size fields, built cheaply from repeated pieces.

Used by the bomb tests (``tests/codecs/test_bombs.py``, ``tests/backends/test_gpu_bombs_emulated.py``)
and by the fuzz harness (:mod:`benchmarks.fuzz`). Each builder returns a stream that decodes to
(or declares) far more than the chunk it replaces, while building it costs a few compressions
of a small piece: the pieces repeat byte for byte.
"""

from __future__ import annotations

import struct
import zlib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

ZSTD_MAGIC = 0xFD2FB528
#: the bytes of zeros that one repeated piece of a zlib or member bomb holds
PIECE = 16 << 20


def zstd_rle_frame(total: int, declared: int | None = None) -> bytes:
    """A Zstandard frame of RLE blocks decoding to ``total`` zero bytes, 4 bytes per 128 KiB;
    its header declares ``declared`` (or no size: then a 128 KiB window descriptor)."""
    if declared is None:
        header = struct.pack("<IBB", ZSTD_MAGIC, 0x00, 7 << 3)  # no size; window 2**(10+7)
    else:
        header = struct.pack("<IBQ", ZSTD_MAGIC, 0xE0, declared)  # single segment, 8-byte size
    block = 128 * 1024
    n = max(-(-total // block), 1)
    middle = ((1 << 1) | (block << 3)).to_bytes(3, "little") + b"\0"
    last_size = total - (n - 1) * block
    last = (1 | (1 << 1) | (last_size << 3)).to_bytes(3, "little") + b"\0"
    return header + middle * (n - 1) + last


@cache
def zlib_stream(total: int) -> bytes:
    """One zlib (RFC 1950) stream of ``total`` zeros (a multiple of :data:`PIECE`): full-flushed
    pieces repeat byte for byte, and the Adler-32 of zeros is computed, not summed."""
    c = zlib.compressobj(6)
    zeros = bytes(PIECE)
    first = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush()
    adler = (total % 65521) << 16 | 1  # Adler-32 of zeros: a stays 1, b adds 1 per byte
    return first + again * (total // PIECE - 1) + tail[:-4] + adler.to_bytes(4, "big")


@cache
def members(compress: Callable[[bytes], bytes], total: int, piece: int = PIECE) -> bytes:
    """Concatenated members (gzip, bz2 and xz readers accept them), each ``piece`` zeros,
    ``total`` bytes in all."""
    return compress(bytes(piece)) * (total // piece)


def gzip_compress(data: bytes) -> bytes:
    """One gzip member of ``data``."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def gzip_members(total: int) -> bytes:
    """gzip members of zeros, ``total`` bytes decoded in all."""
    return members(gzip_compress, total)


def forge_u32(frame: bytes, offset: int, value: int) -> bytes:
    """``frame`` with the little-endian 32-bit field at ``offset`` set to ``value`` (a Blosc
    header's nbytes at 4 or blocksize at 8, numcodecs LZ4's size prefix at 0)."""
    forged = bytearray(frame)
    struct.pack_into("<I", forged, offset, value)
    return bytes(forged)
