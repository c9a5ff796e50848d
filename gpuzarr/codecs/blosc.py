"""``blosc`` — bytes -> bytes, Blosc1 frames (through numcodecs).

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/blosc/index.html
v3 name ``blosc`` (v2 id ``blosc``). Configuration::

    {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                         "typesize": 2, "blocksize": 0}}

``typesize`` may be omitted; it is resolved from the data type. The 16-byte frame header is
checked on the host before decompressing, so a truncated or forged frame becomes an error rather
than an out-of-bounds read, and its ``nbytes`` (which c-blosc allocates) and ``blocksize`` (its
per-thread scratch) are compared with the chunk's size first.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import buffers
from ..errors import MetadataError
from ..metadata.dtypes import is_variable_length
from .base import BytesToBytesCodec, ChunkSpec, as_uint8
from .bounded import check_decoded_size, compressed_size_bound
from .registry import register_codec

if TYPE_CHECKING:
    import numpy as np

    from ..store.base import Buffer

CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "zlib", "snappy")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
BLOSC_HEADER_NBYTES = 16
BLOSC_MAX_SPLITS = 16
BLOSC_MIN_BUFFERSIZE = 128
BLOSC_FLAG_SHUFFLE = 0x1
BLOSC_FLAG_MEMCPYED = 0x2
BLOSC_FLAG_BITSHUFFLE = 0x4
BLOSC_FLAG_DONT_SPLIT = 0x10
#: The frame format c-blosc 1.x writes (and numcodecs' Blosc): the only one decoded in part.
_BLOSC_PART_VERSION = 2
#: A part is decoded only where it skips at least this share of a chunk's bytes: building the
#: part's frame costs about 15 µs of Python and a copy of its compressed blocks.
_BLOSC_PART_MIN_SKIPPED = 1 / 4

_HEADER = struct.Struct("<BBBBIII")
_INT32 = struct.Struct("<i")


class BloscHeader(NamedTuple):
    version: int
    version_lz: int
    flags: int
    typesize: int
    nbytes: int
    blocksize: int
    cbytes: int

    @property
    def memcpyed(self) -> bool:
        return bool(self.flags & BLOSC_FLAG_MEMCPYED)

    @property
    def nblocks(self) -> int:
        return -(-self.nbytes // self.blocksize)

    def block_nsplits(self, block_nbytes: int) -> int:
        """How many streams a block of ``block_nbytes`` holds: c-blosc1's decoder rule, the
        flag and the computed conditions together. It never splits the leftover block; and
        numcodecs (c-blosc 1.21) reads a frame split with typesize > 16 or small blocks as one
        stream per block too and fails, so such frames are corrupt to every decoder."""
        split = (
            not self.flags & BLOSC_FLAG_DONT_SPLIT
            and block_nbytes == self.blocksize
            and self.typesize <= BLOSC_MAX_SPLITS
            and block_nbytes // self.typesize >= BLOSC_MIN_BUFFERSIZE
        )
        return self.typesize if split else 1


def parse_blosc_header(data: Buffer) -> BloscHeader:
    """Parse and sanity-check a Blosc1 frame header against the frame's length."""
    raw = as_uint8(data)
    if raw.size < BLOSC_HEADER_NBYTES:
        raise ValueError(f"blosc frame of {raw.size} bytes is shorter than its 16-byte header")
    header = BloscHeader(*_HEADER.unpack_from(raw.data))
    if header.cbytes != raw.size:
        raise ValueError(f"blosc header says {header.cbytes} compressed bytes, frame has {raw.size}")
    if header.typesize == 0 or (header.nbytes and header.blocksize == 0):
        raise ValueError(f"blosc header is invalid: {header}")
    # c-blosc never writes a block larger than the data (it shrinks the block to fit), and
    # allocates scratch of the block's size to decode: a larger one is forged.
    if header.blocksize > header.nbytes:
        raise ValueError(f"blosc header's blocksize {header.blocksize} exceeds its nbytes {header.nbytes}")
    return header


@register_codec
@dataclass(frozen=True)
class BloscCodec(BytesToBytesCodec):
    name = "blosc"
    cname: str = "lz4"
    clevel: int = 5
    shuffle: str = "noshuffle"
    typesize: int | None = None
    blocksize: int = 0
    _impl: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        from numcodecs import Blosc

        impl = Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle],
            blocksize=self.blocksize,
            typesize=self.typesize,
        )
        object.__setattr__(self, "_impl", impl)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BloscCodec:
        extra = set(config) - {"cname", "clevel", "shuffle", "typesize", "blocksize"}
        if extra:
            raise MetadataError(f"configuration: unexpected members {sorted(extra)}")
        cname = config.get("cname", "lz4")
        if not isinstance(cname, str) or cname not in CNAMES:
            raise MetadataError(f"configuration.cname: expected one of {list(CNAMES)}, got {cname!r}")
        clevel = config.get("clevel", 5)
        if isinstance(clevel, bool) or not isinstance(clevel, int) or not 0 <= clevel <= 9:
            raise MetadataError(f"configuration.clevel: expected an integer 0-9, got {clevel!r}")
        shuffle = config.get("shuffle", "noshuffle")
        if not isinstance(shuffle, str) or shuffle not in SHUFFLES:
            raise MetadataError(
                f"configuration.shuffle: expected one of {list(SHUFFLES)}, got {shuffle!r}"
            )
        typesize = config.get("typesize")
        if typesize is not None and (
            isinstance(typesize, bool) or not isinstance(typesize, int) or not 1 <= typesize <= 255
        ):
            raise MetadataError(f"configuration.typesize: expected an integer 1-255, got {typesize!r}")
        blocksize = config.get("blocksize", 0)
        if isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 0:
            raise MetadataError(f"configuration.blocksize: expected an integer >= 0, got {blocksize!r}")
        return cls(cname, clevel, shuffle, typesize, blocksize)

    def configuration(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "cname": self.cname,
            "clevel": self.clevel,
            "shuffle": self.shuffle,
            "blocksize": self.blocksize,
        }
        if self.typesize is not None:
            config["typesize"] = self.typesize
        return config

    def resolve(self, spec: ChunkSpec) -> BloscCodec:
        if self.typesize is not None:
            return self
        # After vlen-utf8/vlen-bytes the stream is plain bytes (zarr-python's typesize 1 too).
        typesize = 1 if is_variable_length(spec.dtype) else spec.dtype.itemsize
        return BloscCodec(self.cname, self.clevel, self.shuffle, typesize, self.blocksize)

    def max_encoded_size(self, input_nbytes: int) -> int:
        return compressed_size_bound(input_nbytes)

    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        return decode_blosc(self._impl, data, out, max_nbytes)

    decodes_part = True

    def decode_part(self, data: Buffer, out: np.ndarray[Any, Any], start: int, stop: int) -> bool:
        return decode_blosc_part(self._impl, data, out, start, stop)

    def encode(self, data: Buffer) -> Buffer:
        return self._impl.encode(as_uint8(data))

    def starts_own_threads_here(self) -> bool:
        return numcodecs_blosc_threads_here()


def numcodecs_blosc_threads_here() -> bool:
    """Whether numcodecs' Blosc, called from this thread, runs c-blosc's global context with
    its own threads: by numcodecs' documented rule, when ``numcodecs.blosc.use_threads`` is
    True, or None (its default) on the main thread; and only with more than one thread set.
    Elsewhere it decodes in a context of its own on the calling thread alone."""
    from numcodecs import blosc

    setting = blosc.use_threads
    if setting is None:
        setting = threading.current_thread() is threading.main_thread()
    return bool(setting) and blosc.get_nthreads() > 1


def decode_blosc(impl: Any, data: Buffer, out: np.ndarray[Any, Any] | None, max_nbytes: int | None) -> Buffer:
    """Decode a Blosc1 frame with numcodecs' ``impl`` once its header fits the bound: exactly
    ``out``'s size when given, else at most ``max_nbytes``."""
    header = parse_blosc_header(data)
    if out is not None and out.nbytes != header.nbytes:
        raise ValueError(f"blosc: header says {header.nbytes} decoded bytes, expected {out.nbytes}")
    check_decoded_size("blosc", header.nbytes, max_nbytes)
    return impl.decode(data, out)


def decode_blosc_part(impl: Any, data: Buffer, out: np.ndarray[Any, Any], start: int, stop: int) -> bool:
    """Decode only the blocks of a Blosc1 frame that hold bytes ``[start, stop)`` of the chunk,
    into ``out`` (the whole chunk's bytes) at their own offsets.

    c-blosc decodes (and un-shuffles) every block on its own, and numcodecs exposes no call
    that decodes some of them. So the blocks wanted are copied behind a header and a table of
    block starts of their own: a smaller frame that numcodecs' ``impl`` decodes straight into
    ``out`` at the first block's offset. Each block keeps its size, so c-blosc splits it into
    the same streams as in the whole frame. Every stream size of those blocks is checked
    against the frame's length before anything is copied.

    Only where it pays: at least a quarter of the chunk is skipped. False (nothing decoded)
    otherwise, and for stored (memcpyed) frames, formats other than c-blosc 1.x's, a part of
    only the leftover block, and any frame whose blocks do not fit it: the caller decodes
    everything instead, which raises what is wrong with it.
    """
    raw = as_uint8(data)
    n = int(raw.size)
    total = int(out.nbytes)
    if n < BLOSC_HEADER_NBYTES or not 0 <= start < stop <= total:
        return False
    view = raw.data.cast("B")
    header = BloscHeader(*_HEADER.unpack_from(view))
    if (
        header.version != _BLOSC_PART_VERSION
        or header.memcpyed
        or header.nbytes != total
        or header.cbytes != n
        or not 0 < header.blocksize <= total
        or header.typesize == 0
    ):
        return False
    blocksize = header.blocksize
    first, end = start // blocksize, -(-stop // blocksize)
    part_offset = first * blocksize
    part_nbytes = min(total, end * blocksize) - part_offset
    if (total - part_nbytes) < total * _BLOSC_PART_MIN_SKIPPED or part_nbytes < blocksize:
        return False
    nblocks = header.nblocks
    table_end = BLOSC_HEADER_NBYTES + 4 * nblocks
    if table_end > n:
        return False
    starts = struct.unpack_from(f"<{nblocks}i", view, BLOSC_HEADER_NBYTES)
    extents: list[tuple[int, int]] = []  # where each wanted block lies in the frame
    for b in range(first, end):
        pos = starts[b]
        if not table_end <= pos < n:
            return False
        for _ in range(header.block_nsplits(min(blocksize, total - b * blocksize))):
            if pos + 4 > n:
                return False
            (size,) = _INT32.unpack_from(view, pos)
            pos += 4 + size
            if size <= 0 or pos > n:
                return False
        extents.append((starts[b], pos))
    # The part's frame: its blocks follow its table in order.
    at = BLOSC_HEADER_NBYTES + 4 * len(extents)
    part_starts = []
    for a, b in extents:
        part_starts.append(at)
        at += b - a
    frame = buffers.growable(at, "blosc part")
    target = frame.data.cast("B")
    _HEADER.pack_into(
        target, 0, header.version, header.version_lz, header.flags, header.typesize, part_nbytes, blocksize, at
    )
    struct.pack_into(f"<{len(part_starts)}i", target, BLOSC_HEADER_NBYTES, *part_starts)
    # c-blosc writes a frame's blocks back to back, so the wanted blocks are one run of bytes,
    # copied at once by NumPy, which lets go of the GIL while it copies (a memoryview copy
    # holds it: other threads' chunks wait). A forged frame's blocks may lie apart: one copy
    # per run of adjacent blocks.
    first_block = 0
    for i in range(1, len(extents) + 1):
        if i == len(extents) or extents[i][0] != extents[i - 1][1]:
            a, b = extents[first_block][0], extents[i - 1][1]
            start_at = part_starts[first_block]
            frame[start_at : start_at + b - a] = raw[a:b]
            first_block = i
    impl.decode(frame, out[part_offset : part_offset + part_nbytes])
    return True
