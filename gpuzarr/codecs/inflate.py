"""Inflating gzip (RFC 1952) and zlib (RFC 1950) streams: ISA-L when installed, else zlib.

The v3 ``gzip`` codec, numcodecs' ``gzip`` and ``zlib`` compressors (Zarr v2 and
``numcodecs.*`` v3 codecs) and the inner chunks of shards that use them all decode here.

python-isal's ``isal_zlib`` (Intel ISA-L) inflates the benchmarks' chunks about 2-3x faster than
the standard library's zlib (benchmarks/results/2026-11-24-gzip-inflate-cpu.md, and
``python -m benchmarks.inflate_candidates`` to measure again). It is chosen over libdeflate
(``deflate``), which is as fast, because its decompressor has zlib's streaming interface: a
``max_length`` that bounds the output (:func:`~gpuzarr.codecs.bounded.inflate`), and
``unused_data``, which tells where a gzip member ends, so concatenated members decode in full and
bytes after a zlib stream are ignored, exactly as with zlib. libdeflate's Python binding reports
neither and decodes only a gzip stream's first member. ISA-L releases the GIL while it inflates,
checks the gzip CRC-32 and size and the zlib Adler-32 trailers, and reads every gzip header field.

python-isal is a dependency wherever it publishes wheels (Linux, macOS and Windows on x86-64,
Linux and macOS on arm64). Elsewhere, or with :data:`use_isal` set to False, the standard
library inflates: same results, same bounds, same errors, only slower. Encoding is
:mod:`.deflate`'s, with zlib-ng rather than ISA-L: ISA-L's levels (0-3) are not zlib's 0-9.
"""

from __future__ import annotations

import functools
import zlib
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .bounded import inflate, inflate_into

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from ..store.base import Buffer

#: Inflate with ISA-L when python-isal is importable. False: always with the standard library
#: (to compare the two, or to sidestep a problem in one). Read on every decode.
use_isal: bool = True

#: window bits that make ``decompressobj`` expect (and ``compressobj`` write) a gzip header and
#: trailer, or a zlib one
GZIP_WBITS = 16 + zlib.MAX_WBITS
ZLIB_WBITS = zlib.MAX_WBITS


@functools.cache
def _isal_zlib() -> ModuleType | None:
    """``isal.isal_zlib``, or None when python-isal is not installed (imported on first use,
    not when gpuzarr is imported)."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


def library() -> Literal["isal", "zlib"]:
    """Which library inflates gzip and zlib streams now: ``"isal"`` or ``"zlib"``."""
    return "isal" if use_isal and _isal_zlib() is not None else "zlib"


def _module() -> Any:
    isal_zlib = _isal_zlib() if use_isal else None
    return zlib if isal_zlib is None else isal_zlib


#: the FLG bits of a gzip member header that RFC 1952 reserves: a decompressor "must give an
#: error indication if any reserved bit is non-zero"
GZIP_RESERVED_FLAGS = 0xE0


def check_gzip_flags(member: Buffer) -> None:
    """Refuse a gzip member (the bytes from its start on) whose header sets a reserved FLG bit.

    zlib refuses such a member; ISA-L inflates it. Checked here so that a chunk reads the same
    (as corrupt) whichever library inflates it, and the same as on the GPU path, which parses
    the header itself."""
    view = memoryview(member).cast("B")
    # Not a gzip member at all (another magic number): the inflater says so.
    if len(view) > 3 and view[0] == 0x1F and view[1] == 0x8B and view[3] & GZIP_RESERVED_FLAGS:
        raise ValueError(f"gzip: reserved flag bits set ({view[3]:#04x})")


#: Outputs from this size on are inflated a piece at a time into the chunk's buffer
#: (``bounded.inflate_into``), not into bytes copied there after: the copy doubled the memory a
#: large chunk takes. Smaller ones keep the one call.
INTO_MIN_NBYTES = 16 << 20


def _decode(
    name: str,
    wbits: int,
    data: Buffer,
    max_nbytes: int | None,
    members: bool,
    check_member: Callable[[Buffer], None] | None = None,
    out: np.ndarray[Any, Any] | None = None,
) -> Buffer:
    module = _module()
    try:
        if out is not None and out.nbytes >= INTO_MIN_NBYTES and out.flags.c_contiguous:
            target = out.reshape(-1).view(np.uint8)
            return inflate_into(name, lambda: module.decompressobj(wbits), data, target, members, check_member)
        return inflate(name, lambda: module.decompressobj(wbits), data, max_nbytes, members, check_member)
    except module.error as exc:
        # zlib.error and isal_zlib.error are no ValueError: give decoders' callers one kind.
        raise ValueError(f"{name}: corrupt stream ({exc})") from exc


def decode_gzip(data: Buffer, max_nbytes: int | None, out: np.ndarray[Any, Any] | None = None) -> Buffer:
    """Decode a gzip stream of one or more members (RFC 1952), at most ``max_nbytes`` bytes
    (into ``out``, whose size is then the bound, where it is large: see ``INTO_MIN_NBYTES``).

    Raises ValueError when a member is corrupt (a CRC-32 or size trailer included), truncated
    or followed by bytes that are no member, or when the output would exceed ``max_nbytes``.
    """
    return _decode("gzip", GZIP_WBITS, data, max_nbytes, members=True, check_member=check_gzip_flags, out=out)


def decode_zlib(data: Buffer, max_nbytes: int | None, out: np.ndarray[Any, Any] | None = None) -> Buffer:
    """Decode a zlib stream (RFC 1950), at most ``max_nbytes`` bytes (into a large ``out``, as
    :func:`decode_gzip`); bytes after its end are ignored, as ``zlib.decompress`` (numcodecs'
    Zlib) ignores them.

    Raises ValueError when the stream is corrupt (its Adler-32 trailer included) or truncated, or
    when the output would exceed ``max_nbytes``.
    """
    return _decode("zlib", ZLIB_WBITS, data, max_nbytes, members=False, out=out)
