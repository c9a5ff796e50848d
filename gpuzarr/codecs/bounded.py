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

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

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


class PiecewiseDecompressor(Decompressor, Protocol):
    """A decompressor that stops at ``max_length`` and keeps the input it did not take
    (``zlib`` and ``isal_zlib`` decompress objects)."""

    @property
    def unconsumed_tail(self) -> bytes: ...


#: The most bytes :func:`inflate_into` decodes before it copies them into the output, and the
#: most encoded bytes it hands the decompressor at once (what it did not take comes back as a
#: copy, ``unconsumed_tail``: the whole rest of a 109 MiB stream, again for each piece, took more
#: memory than it saved, and time).
INFLATE_PIECE_NBYTES = 4 << 20
INFLATE_INPUT_NBYTES = 1 << 20


def inflate_into(
    name: str,
    start: Callable[[], PiecewiseDecompressor],
    data: Buffer,
    out: np.ndarray[Any, np.dtype[np.uint8]],
    members: bool,
    check_member: Callable[[Buffer], None] | None = None,
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """:func:`inflate` into ``out`` (its size the bound), a piece of at most
    :data:`INFLATE_PIECE_NBYTES` at a time: the first ``n`` bytes of ``out`` that the stream
    decodes to. A whole chunk decoded to ``bytes`` and then copied took twice its size (a 128 MiB
    chunk read in part: 366 MiB against TensorStore's 238).

    Raises ValueError as :func:`inflate` does.
    """
    size = int(out.size)
    pos = 0
    view = memoryview(data).cast("B")
    begin = 0  # where the current member starts in ``view``
    member = 0
    while True:
        if check_member is not None:
            check_member(view[begin:])
        d = start()
        offset = begin  # the encoded bytes handed to the decompressor end here
        tail: Buffer = b""
        piece = b""
        while not d.eof:
            if not tail:
                if offset >= len(view) and not piece:
                    break  # the input is used up (and drained) before the end-of-stream marker
                # Past the input's end, an empty call: a decompressor may hold output (or the
                # stream's trailer) it had no room for (ISA-L's does).
                tail = view[offset : offset + INFLATE_INPUT_NBYTES]
                offset += len(tail)
            # One byte more than the room left tells a bomb from a stream that fills it exactly.
            piece = d.decompress(tail, min(INFLATE_PIECE_NBYTES, size - pos + 1))
            if pos + len(piece) > size:
                raise ValueError(f"{name}: stream decodes to more than the {size} bytes expected")
            out[pos : pos + len(piece)] = np.frombuffer(piece, np.uint8)
            pos += len(piece)
            tail = d.unconsumed_tail
        if not d.eof:
            if member:
                raise ValueError(
                    f"{name}: the {len(view) - begin} bytes after member {member} are no complete member"
                )
            raise ValueError(f"{name}: stream ends before its end-of-stream marker (truncated)")
        member += 1
        begin = offset - len(d.unused_data)
        if not (members and begin < len(view)):
            break
    return out[:pos]


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
