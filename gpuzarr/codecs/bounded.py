"""Decoding that stops at the size a chunk may have: the defence against decompression bombs.

Stored bytes are untrusted: a few megabytes of gzip or zstd can inflate to gigabytes, and size
fields in a stream (a zstd frame's content size, numcodecs' LZ4 prefix, Blosc's ``nbytes``) would
choose an allocation. Every bytes->bytes decoder is therefore given ``max_nbytes``, the most its
output may hold (see ``codecs/base.py``), and

* compares every size it reads from the stream with it before allocating
  (:func:`check_decoded_size`);
* inflates streams that declare no size (zlib, gzip, bz2, lzma) with streaming decompressors
  (the standard library's, or ISA-L's zlib-compatible one for gzip and zlib, see
  :mod:`.inflate`) and an output limit of one byte more than allowed, so that a bomb costs at
  most ``max_nbytes + 1`` bytes before it is refused (:func:`inflate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..store.base import Buffer


def compressed_size_bound(input_nbytes: int) -> int:
    """An upper bound of any known compressor's output for ``input_nbytes`` bytes of input.

    The worst cases are zlib/gzip 5 bytes per 16 KiB block plus a header, zstd 1/256 plus a block
    header, bz2 1% plus 600 bytes, lz4 1/255 plus 20, Blosc a 16-byte header and its block table:
    this bound leaves room above all of them. Legitimate data never comes near it; a bomb
    exceeds it a thousandfold.
    """
    return input_nbytes + input_nbytes // 16 + 64 * 1024


def check_decoded_size(name: str, declared: int, max_nbytes: int | None) -> None:
    """Raise ValueError when a size read from a stream (``declared``) exceeds ``max_nbytes``:
    called before anything is allocated from it."""
    if max_nbytes is not None and declared > max_nbytes:
        raise ValueError(f"{name}: stream declares {declared} decoded bytes, more than the {max_nbytes} expected")


class Decompressor(Protocol):
    """What ``zlib.decompressobj()`` (and ``isal.isal_zlib.decompressobj()``),
    ``bz2.BZ2Decompressor`` and ``lzma.LZMADecompressor`` share."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: Buffer, max_length: int = ..., /) -> bytes: ...


def inflate(
    name: str,
    start: Callable[[], Decompressor],
    data: Buffer,
    max_nbytes: int | None,
    members: bool,
    check_member: Callable[[Buffer], None] | None = None,
) -> bytes:
    """Decompress ``data`` with decompressors made by ``start``, stopping past ``max_nbytes``.

    Parameters
    ----------
    name
        The format, for messages.
    start
        Makes a fresh decompressor (one per member).
    data
        The encoded stream.
    max_nbytes
        The most bytes the output may have (None: no bound).
    members
        Whether further members may follow the first one (gzip, bz2 and xz allow concatenated
        streams); when False, bytes after the end of the stream are ignored, as ``zlib.decompress``
        ignores them.
    check_member
        Called with the bytes from the start of each member on, before it is decompressed: what
        a format requires that the decompressor does not check itself (it raises ValueError).

    Raises
    ------
    ValueError
        The output would exceed ``max_nbytes`` (found after inflating at most one byte more), or
        the stream ends before its end-of-stream marker.
    """
    parts: list[bytes] = []
    total = 0
    rest: Buffer = data
    while True:
        if check_member is not None:
            check_member(rest)
        d = start()
        # One byte more than allowed tells a bomb from a stream that fills the bound exactly.
        part = d.decompress(rest) if max_nbytes is None else d.decompress(rest, max_nbytes - total + 1)
        total += len(part)
        if max_nbytes is not None and total > max_nbytes:
            raise ValueError(f"{name}: stream decodes to more than the {max_nbytes} bytes expected")
        if not d.eof:
            if parts:  # what follows a complete member: a cut-off member, or no member at all
                raise ValueError(
                    f"{name}: the {len(memoryview(rest))} bytes after member {len(parts)} are no complete member"
                )
            raise ValueError(f"{name}: stream ends before its end-of-stream marker (truncated)")
        parts.append(part)
        rest = d.unused_data
        if not (members and rest):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)
