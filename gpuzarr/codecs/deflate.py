"""Deflating gzip (RFC 1952) and zlib (RFC 1950) streams: zlib-ng when installed, else zlib.

The v3 ``gzip`` codec, Zarr v2 ``gzip`` and ``zlib`` compressors and zarr-python's
``numcodecs.zlib`` v3 codec encode here (inflating is :mod:`.inflate`'s).

python-zlib-ng (zlib-ng, the zlib fork with SIMD match finding) deflates the benchmarks' 64³
uint16 chunks at level 5 in 6.8 ms against 19.2 ms for the standard library's zlib 1.2.13, to
the same size (3.96 MB for 12 chunks either way), and releases the GIL as zlib does. It keeps
zlib's levels 0-9 and interface, so a ``level`` asks for the same trade-off: 0 stores, 9
compresses hardest. Level 1 is the exception: zlib-ng's level 1 ("deflate_quick") writes streams
about 30 % larger than zlib's level 1 (on the benchmark's chunks: 0.834 of the data against
0.648, in 3.7 ms a chunk against 7.8), so level 1 deflates with zlib-ng's level 2, which gives
zlib's level-1 size (0.637) in less time (6.0 ms). The streams are standard and any inflater
reads them; they are not byte-for-byte what zlib writes. zlib-ng is not smaller everywhere: on a
ramp (``np.arange`` of int32) its levels 2-6 write 0.61 of the data against zlib's 0.35, and
more slowly (docs/inflate.md); :data:`use_zlib_ng` False writes zlib's streams.

python-zlib-ng is a dependency wherever it publishes wheels (Linux, macOS and Windows on
x86-64, Linux and macOS on arm64). Elsewhere, or with :data:`use_zlib_ng` set to False, the
standard library deflates, and the ``numcodecs.zlib`` and ``numcodecs.gzip`` codecs (and Zarr
v2's ``zlib``) encode with numcodecs itself: the bytes zarr-python writes.
"""

from __future__ import annotations

import functools
import zlib
from typing import TYPE_CHECKING, Literal

from .inflate import GZIP_WBITS, ZLIB_WBITS

if TYPE_CHECKING:
    from types import ModuleType

    from ..store.base import Buffer

#: Deflate with zlib-ng when python-zlib-ng is importable. False: always with the standard
#: library (its exact bytes, or to compare the two). Read on every encode.
use_zlib_ng: bool = True


@functools.cache
def _zlib_ng() -> ModuleType | None:
    """``zlib_ng.zlib_ng``, or None when python-zlib-ng is not installed (imported on first
    use, not when gpuzarr is imported)."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return None
    return zlib_ng


def library() -> Literal["zlib-ng", "zlib"]:
    """Which library deflates gzip and zlib streams now: ``"zlib-ng"`` or ``"zlib"``."""
    return "zlib-ng" if use_zlib_ng and _zlib_ng() is not None else "zlib"


#: zlib-ng's level for each level asked for, where they differ (see the module's docstring)
_ZLIB_NG_LEVELS = {1: 2}


def _deflate(data: Buffer, level: int, wbits: int) -> bytes:
    module: ModuleType = (use_zlib_ng and _zlib_ng()) or zlib
    if module is not zlib:
        level = _ZLIB_NG_LEVELS.get(level, level)
    compressor = module.compressobj(level, module.DEFLATED, wbits)
    return bytes(compressor.compress(data)) + bytes(compressor.flush())


def compress_gzip(data: Buffer, level: int) -> bytes:
    """``data`` as one gzip member (no file name, modification time 0) at ``level`` (0-9)."""
    return _deflate(data, level, GZIP_WBITS)


def compress_zlib(data: Buffer, level: int) -> bytes:
    """``data`` as one zlib stream at ``level`` (0-9; -1: the library's default)."""
    return _deflate(data, level, ZLIB_WBITS)


__all__ = ["compress_gzip", "compress_zlib", "library", "use_zlib_ng"]
