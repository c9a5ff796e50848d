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

import contextlib
import functools
import itertools
import struct
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import buffers
from ..errors import MetadataError
from ..metadata.chain import iter_codecs
from ..metadata.dtypes import is_variable_length
from .base import ONE_THREAD_DECODE_NBYTES, ONE_THREAD_FAST_DECODE_NBYTES, BytesToBytesCodec, ChunkSpec, as_uint8
from .bounded import check_decoded_size, compressed_size_bound
from .registry import register_codec

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from contextlib import AbstractContextManager

    import numpy as np

    from ..store.base import Buffer, RangeReader
    from .base import BufferFor

CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "zlib", "snappy")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
BLOSC_HEADER_NBYTES = 16
#: the largest block size c-blosc's compressor takes (a C int)
BLOSC_MAX_BLOCKSIZE = 2**31 - 1
BLOSC_MAX_SPLITS = 16
BLOSC_MIN_BUFFERSIZE = 128
BLOSC_FLAG_SHUFFLE = 0x1
BLOSC_FLAG_MEMCPYED = 0x2
BLOSC_FLAG_BITSHUFFLE = 0x4
#: Blosc2's delta filter, which c-blosc 1.x does not decode (it refuses frames that ask for it)
BLOSC_FLAG_DELTA = 0x8
BLOSC_FLAG_DONT_SPLIT = 0x10
#: The frame format c-blosc 1.x writes, and the only one it (numcodecs' Blosc) decodes: frames of
#: other format versions are refused, stored ones too.
BLOSC_FORMAT_VERSION = 2
#: The compressor format version (the header's second byte) of every compressor c-blosc 1.x
#: decodes; it refuses compressed frames with another (stored ones it copies whatever it says)
BLOSC_COMPRESSOR_FORMAT_VERSION = 1
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
        """How many streams a block of ``block_nbytes`` holds (see :func:`_block_nsplits`)."""
        return _block_nsplits(self.flags, self.typesize, self.blocksize, block_nbytes)


def _block_nsplits(flags: int, typesize: int, blocksize: int, block_nbytes: int) -> int:
    """How many streams a block of ``block_nbytes`` holds: c-blosc1's decoder rule, the flag
    and the computed conditions together. It never splits the leftover block; and numcodecs
    (c-blosc 1.21) reads a frame split with typesize > 16 or small blocks as one stream per
    block too and fails, so such frames are corrupt to every decoder."""
    split = (
        not flags & BLOSC_FLAG_DONT_SPLIT
        and block_nbytes == blocksize
        and typesize <= BLOSC_MAX_SPLITS
        and block_nbytes // typesize >= BLOSC_MIN_BUFFERSIZE
    )
    return typesize if split else 1


def parse_blosc_header(data: Buffer) -> BloscHeader:
    """Parse and sanity-check a Blosc1 frame header against the frame's length."""
    size = memoryview(data).nbytes  # a buffer's bytes, whatever its item type (as_uint8's size)
    if size < BLOSC_HEADER_NBYTES:
        raise ValueError(f"blosc frame of {size} bytes is shorter than its 16-byte header")
    header = BloscHeader._make(_HEADER.unpack_from(data))
    if header.cbytes != size:
        raise ValueError(f"blosc header says {header.cbytes} compressed bytes, frame has {size}")
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
    #: None: not given, chosen by the element size when resolved (zarr-python's and
    #: TensorStore's default: bit-shuffle for 1-byte elements, byte-shuffle otherwise)
    shuffle: str | None = None
    typesize: int | None = None
    blocksize: int = 0
    _impl: Any = field(default=None, compare=False, repr=False)
    _seen_blocksize: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    def __post_init__(self) -> None:
        from numcodecs import Blosc

        impl = Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle or "noshuffle"],
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
        shuffle = config.get("shuffle")  # left out: chosen by the element size (``resolve``)
        if "shuffle" in config and (not isinstance(shuffle, str) or shuffle not in SHUFFLES):
            raise MetadataError(
                f"configuration.shuffle: expected one of {list(SHUFFLES)}, got {shuffle!r}"
            )
        typesize = config.get("typesize")
        if typesize is not None and (
            isinstance(typesize, bool) or not isinstance(typesize, int) or not 1 <= typesize <= 255
        ):
            raise MetadataError(f"configuration.typesize: expected an integer 1-255, got {typesize!r}")
        blocksize = config.get("blocksize", 0)
        # c-blosc takes the block size as a C int (numcodecs' compress fails on larger ones).
        if isinstance(blocksize, bool) or not isinstance(blocksize, int) or not 0 <= blocksize <= BLOSC_MAX_BLOCKSIZE:
            raise MetadataError(
                f"configuration.blocksize: expected an integer 0-{BLOSC_MAX_BLOCKSIZE}, got {blocksize!r}"
            )
        return cls(cname, clevel, shuffle, typesize, blocksize)

    def configuration(self) -> dict[str, Any]:
        config: dict[str, Any] = {"cname": self.cname, "clevel": self.clevel}
        if self.shuffle is not None:
            config["shuffle"] = self.shuffle
        config["blocksize"] = self.blocksize
        if self.typesize is not None:
            config["typesize"] = self.typesize
        return config

    def resolve(self, spec: ChunkSpec) -> BloscCodec:
        if self.typesize is not None and self.shuffle is not None:
            return self
        # After vlen-utf8/vlen-bytes the stream is plain bytes (zarr-python's typesize 1 too).
        element = 1 if is_variable_length(spec.dtype) else spec.dtype.itemsize
        typesize = element if self.typesize is None else self.typesize
        shuffle = self.shuffle
        if shuffle is None:  # by the element's size, as zarr-python chooses it, whatever typesize says
            shuffle = "bitshuffle" if element == 1 else "shuffle"
        return BloscCodec(self.cname, self.clevel, shuffle, typesize, self.blocksize)

    def max_encoded_size(self, input_nbytes: int) -> int:
        return compressed_size_bound(input_nbytes)

    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        return decode_blosc(self._impl, data, out, max_nbytes, self._seen_blocksize)

    def one_thread_pays(self, nbytes: int) -> bool:
        return blosc_one_thread_pays(self.cname, nbytes)

    decodes_part = True

    def decode_part(self, data: Buffer, out: np.ndarray[Any, Any], start: int, stop: int) -> bool:
        return decode_blosc_part(data, out, start, stop, self._seen_blocksize)

    def part_may_pay(self, start: int, stop: int, total: int) -> bool:
        # By the block size of the last frame planned in part (chunks of one array share it):
        # where a part of blocks that size would not pay, the frame is read and decoded whole
        # at once. Unknown (0) at first; threads may race to set it, any of them is right.
        blocksize = self._seen_blocksize[0]
        return blocksize == 0 or _part_extent(blocksize, total, start, stop) is not None

    reads_part = True

    def read_part(
        self, reader: RangeReader, total: int, start: int, stop: int, buffer_for: BufferFor
    ) -> tuple[Buffer, object | None]:
        return read_blosc_part(reader, total, start, stop, buffer_for, self._seen_blocksize)

    def decode_read_part(self, data: Buffer, plan: object, out: np.ndarray[Any, Any]) -> None:
        decode_read_blosc(data, plan, out)

    def encode(self, data: Buffer) -> Buffer:
        check_cname_builtin(self.cname, "blosc cname")  # v3 configuration.cname, v2 compressor.cname
        return self._impl.encode(as_uint8(data))

    def own_threads_off(self) -> AbstractContextManager[object] | None:
        return numcodecs_blosc_threads_off()


@functools.cache
def builtin_cnames() -> frozenset[str]:
    """The compressors numcodecs' c-blosc was built with (snappy is optional, and left out of
    numcodecs' wheels)."""
    from numcodecs import blosc

    return frozenset(blosc.list_compressors())


def refuse_unbuilt_blosc(codecs: Sequence[Any], field_name: str) -> None:
    """Refuse, before a new array's metadata is written, a Blosc compressor (v3 ``blosc`` or
    ``numcodecs.blosc``, a v2 ``blosc`` compressor, or one inside a sharding codec's chains)
    that numcodecs' c-blosc lacks here: every chunk write would fail."""
    for codec in iter_codecs(codecs):
        config = codec.get("configuration") if "name" in codec else codec  # v3, or v2's numcodecs JSON
        is_blosc = codec.get("name") in ("blosc", "numcodecs.blosc") or codec.get("id") == "blosc"
        if is_blosc and isinstance(config, dict) and isinstance(config.get("cname"), str):
            check_cname_builtin(config["cname"], f"{field_name}: blosc cname")


def check_cname_builtin(cname: str, field_name: str) -> None:
    """Refuse to write with a Blosc compressor this c-blosc lacks: numcodecs raises a bare
    ValueError for each chunk, after the array's metadata was written."""
    if cname not in builtin_cnames():
        raise MetadataError(
            f"{field_name}: {cname!r} is not built into numcodecs' c-blosc here "
            f"(it has {sorted(builtin_cnames())}), so no chunk can be written with it"
        )


#: Blosc's compressors that decode at gigabytes a second (``one_thread_pays``)
FAST_CNAMES = frozenset({"lz4", "lz4hc", "blosclz", "snappy"})


def blosc_one_thread_pays(cname: str, nbytes: int) -> bool:
    """Whether Blosc chunks of ``cname`` that decode to ``nbytes`` bytes read faster on one
    thread (see ``ONE_THREAD_FAST_DECODE_NBYTES``); a frame's own compressor may differ from the
    configuration's, which only shifts where that pays."""
    return nbytes <= (ONE_THREAD_FAST_DECODE_NBYTES if cname in FAST_CNAMES else ONE_THREAD_DECODE_NBYTES)


def numcodecs_blosc_threads_off() -> AbstractContextManager[object] | None:
    """A context in which numcodecs' Blosc codes on the calling thread alone; None where the
    user asked for c-blosc's own threads (``numcodecs.blosc.use_threads = True``).

    numcodecs' rule: with ``use_threads`` None (its default) it runs c-blosc's global context,
    whose threads are as many as ``blosc.get_nthreads()``, on the main thread, and a context of
    the calling thread's own elsewhere. On the main thread with the default, the setting is
    False while the block runs, and None again after it, unless it was set to True meanwhile (a
    False another thread sets while the block runs cannot be told from this one's, and goes
    too). That changes nothing any other thread's decodes do: on every other thread None and
    False mean the same, and the main thread is the one running the block. Beside the pool's
    threads, a chunk the main thread decoded with c-blosc's 2 threads took 600 µs, against
    353 µs alone (2 cores).
    """
    from numcodecs import blosc

    if blosc.use_threads is None and threading.current_thread() is threading.main_thread():
        return _numcodecs_blosc_alone()
    if blosc.use_threads and blosc.get_nthreads() > 1:
        return None
    return contextlib.nullcontext()


@contextlib.contextmanager
def _numcodecs_blosc_alone() -> Iterator[None]:
    from numcodecs import blosc

    blosc.use_threads = False
    try:
        yield
    finally:
        if blosc.use_threads is False:
            blosc.use_threads = None


def decode_blosc(
    impl: Any,
    data: Buffer,
    out: np.ndarray[Any, Any] | None,
    max_nbytes: int | None,
    seen_blocksize: list[int] | None = None,
) -> Buffer:
    """Decode a Blosc1 frame with numcodecs' ``impl`` once its header fits the bound: exactly
    ``out``'s size when given, else at most ``max_nbytes``. Its block size goes to
    ``seen_blocksize[0]`` (see ``BloscCodec.part_may_pay``): parts may pay again after a chunk
    of large blocks turned them off."""
    header = parse_blosc_header(data)
    if seen_blocksize is not None and not header.memcpyed:
        seen_blocksize[0] = header.blocksize
    if out is not None and out.nbytes != header.nbytes:
        raise ValueError(f"blosc: header says {header.nbytes} decoded bytes, expected {out.nbytes}")
    check_decoded_size("blosc", header.nbytes, max_nbytes)
    if out is None:
        return impl.decode(data)
    _decompress(data, out)
    return out


class _Part(NamedTuple):
    """The blocks of a frame that hold part of its chunk, and the frame of their own they are
    decoded from: its header and block table, then the blocks at ``blocks_at``.

    Planned per chunk a crop needs only part of, on every reader thread at once: kept to
    plain tuples and locals, since Python time here is held under the GIL while the other
    threads wait for it (a planner of NamedTuple properties made crops read one by one on 2
    cores 15 % slower than this)."""

    header: tuple[int, int, int, int, int, int, int]  # as _HEADER unpacks it
    first: int  # the first block
    bounds: tuple[int, ...]  # where each block starts in the whole frame, and the last one ends
    offset: int  # where the part starts in the chunk
    nbytes: int  # and its size
    blocks_at: int  # where the blocks start in the part's frame
    frame_nbytes: int  # the part's frame's size


def _part_extent(blocksize: int, total: int, start: int, stop: int) -> tuple[int, int, int, int] | None:
    """(first block, block after the last, offset, size) of the blocks of ``blocksize`` that hold
    bytes ``[start, stop)`` of a ``total``-byte chunk; None where decoding them alone would not
    skip a quarter of the chunk."""
    first, end = start // blocksize, -(-stop // blocksize)
    offset = first * blocksize
    nbytes = min(total, end * blocksize) - offset
    if (total - nbytes) < total * _BLOSC_PART_MIN_SKIPPED or nbytes < blocksize:
        return None
    return first, end, offset, nbytes


def _plan_part(
    head: Buffer, n: int, total: int, start: int, stop: int, seen_blocksize: list[int] | None
) -> _Part | None:
    """The blocks that hold bytes ``[start, stop)`` of the ``total``-byte chunk, from the
    header and block table at the start (``head``) of an ``n``-byte frame; None where they are
    not worth decoding alone or cannot be. The frame's block size goes to
    ``seen_blocksize[0]`` (see ``BloscCodec.part_may_pay``).

    Not for stored (memcpyed) frames, formats other than c-blosc 1.x's, a part of only the
    leftover block, a table that ``head`` does not hold, or blocks that do not lie in order
    one after the other as c-blosc writes them: the caller decodes everything instead, which
    raises what is wrong with the frame.
    """
    if len(head) < BLOSC_HEADER_NBYTES or not 0 <= start < stop <= total:
        return None
    header = _HEADER.unpack_from(head)
    version, _, flags, typesize, nbytes, blocksize, cbytes = header
    if (
        version != BLOSC_FORMAT_VERSION
        or flags & BLOSC_FLAG_MEMCPYED
        or nbytes != total
        or cbytes != n
        or not 0 < blocksize <= total
        or typesize == 0
    ):
        return None
    if seen_blocksize is not None:
        seen_blocksize[0] = blocksize
    extent = _part_extent(blocksize, total, start, stop)
    if extent is None:
        return None
    first, end, offset, part_nbytes = extent
    nblocks = -(-total // blocksize)
    table_end = BLOSC_HEADER_NBYTES + 4 * nblocks
    if table_end > min(len(head), n):
        return None
    starts = struct.unpack_from(f"<{nblocks}i", head, BLOSC_HEADER_NBYTES)
    # Every entry of the table within the frame (as a whole decode would find), not only the
    # part's: a forged table reads as corrupt whatever a crop needs.
    if min(starts) < table_end or max(starts) >= n:
        return None
    bounds = (*starts[first:end], starts[end] if end < nblocks else n)
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        return None
    # The part's blocks go at the same offset within a page as in the whole frame: copies
    # between addresses a few bytes apart modulo 4 KiB run several times slower on some x86
    # CPUs (the kernel's from the page cache too), and c-blosc finds blocks by the table.
    part_table_end = BLOSC_HEADER_NBYTES + 4 * (end - first)
    blocks_at = part_table_end + (bounds[0] - part_table_end) % buffers.PAGE
    return _Part(header, first, bounds, offset, part_nbytes, blocks_at, blocks_at + bounds[-1] - bounds[0])


def _write_part_header(frame: np.ndarray[Any, np.dtype[np.uint8]], part: _Part) -> None:
    """Write the header and block table of the part's own frame into ``frame`` (of
    ``part.frame_nbytes``), whose blocks (``frame[part.blocks_at:]``) the caller fills."""
    version, version_lz, flags, typesize, _, blocksize, _ = part.header
    blocks_at, bounds, frame_nbytes = part.blocks_at, part.bounds, part.frame_nbytes
    target = frame.data
    _HEADER.pack_into(target, 0, version, version_lz, flags, typesize, part.nbytes, blocksize, frame_nbytes)
    shift = blocks_at - bounds[0]
    struct.pack_into(f"<{len(bounds) - 1}i", target, BLOSC_HEADER_NBYTES, *[at + shift for at in bounds[:-1]])


def _streams_fit(frame: np.ndarray[Any, np.dtype[np.uint8]], part: _Part) -> bool:
    """Whether every stream of every block of the part's filled-in ``frame`` ends within its
    block: what c-blosc reads them by, and does not check itself. Each block keeps its size,
    so c-blosc splits it into the same streams as in the whole frame."""
    _, _, flags, typesize, total, blocksize, _ = part.header
    bounds, first, view = part.bounds, part.first, frame.data
    shift = part.blocks_at - bounds[0]
    for i in range(len(bounds) - 1):
        pos, block_end = bounds[i] + shift, bounds[i + 1] + shift
        for _ in range(_block_nsplits(flags, typesize, blocksize, min(blocksize, total - (first + i) * blocksize))):
            if pos + 4 > block_end:
                return False
            (size,) = _INT32.unpack_from(view, pos)
            pos += 4 + size
            if size <= 0 or pos > block_end:
                return False
    return True


_numcodecs_decompress: Any = None


def _decompress(frame: Buffer, out: np.ndarray[Any, Any]) -> None:
    """numcodecs' decompress straight (its Blosc.decode first wraps both buffers again): on
    threads other than the main one in a context of their own, by numcodecs' rule."""
    global _numcodecs_decompress
    if _numcodecs_decompress is None:
        from numcodecs.blosc import decompress

        _numcodecs_decompress = decompress
    _numcodecs_decompress(frame, out)


def decode_blosc_part(
    data: Buffer, out: np.ndarray[Any, Any], start: int, stop: int, seen_blocksize: list[int] | None = None
) -> bool:
    """Decode only the blocks of a Blosc1 frame that hold bytes ``[start, stop)`` of the chunk,
    into ``out`` (the whole chunk's bytes) at their own offsets.

    c-blosc decodes (and un-shuffles) every block on its own, and numcodecs exposes no call
    that decodes some of them. So the blocks wanted are copied behind a header and a table of
    block starts of their own: a smaller frame that numcodecs decodes straight into ``out`` at
    the first block's offset. Every stream size of those blocks is checked against its block
    before decoding.

    Only where it pays: at least a quarter of the chunk is skipped. False (nothing decoded)
    otherwise, and wherever :func:`_plan_part` cannot plan a part: the caller decodes
    everything instead.
    """
    raw = as_uint8(data)
    part = _plan_part(raw, int(raw.size), int(out.nbytes), start, stop, seen_blocksize)
    if part is None:
        return False
    frame = buffers.growable(part.frame_nbytes, "blosc part")
    _write_part_header(frame, part)
    # NumPy copies without the GIL (a memoryview copy holds it: other threads' chunks wait).
    frame[part.blocks_at :] = raw[part.bounds[0] : part.bounds[-1]]
    if not _streams_fit(frame, part):
        return False
    _decompress(frame, out[part.offset : part.offset + part.nbytes])
    return True


#: The bytes read first from a frame read in part: its header and a table of up to 1,020 blocks.
_PART_HEAD_NBYTES = 4096


def read_blosc_part(
    reader: RangeReader,
    total: int,
    start: int,
    stop: int,
    buffer_for: BufferFor,
    seen_blocksize: list[int] | None = None,
) -> tuple[Buffer, object | None]:
    """Read from ``reader`` what decoding bytes ``[start, stop)`` of a Blosc1 frame's
    ``total``-byte chunk needs, and check it, so that :func:`decode_read_blosc` only decodes
    (a thread apart from the reading one, with no Python of its own to hold the GIL for).

    Where part of the chunk is asked for and a part pays: its header and block table first
    (into a buffer of this thread's), then only the blocks that hold the part, straight into
    a frame of the part's own in ``buffer_for``'s memory; (that frame, its plan) once every
    stream size of those blocks is found to fit. Otherwise the whole frame, into
    ``buffer_for``'s memory (a header read first is copied, not read again): (it, the plan
    of a whole frame) where its header fits the chunk, (it, None) for the codec's full decode,
    which says what is wrong, where not.
    """
    size = reader.size
    got = 0
    if (start, stop) != (0, total):
        head = buffers.growable(_PART_HEAD_NBYTES, "blosc head")[: min(size, _PART_HEAD_NBYTES)]
        got = reader.read_into(0, head)
        table_nbytes = _table_nbytes(head[:got], total, size)
        if table_nbytes > got == head.size:
            # More than 1,020 blocks: their table, read whole (its size follows from the
            # chunk's, which the header must declare, and the frame's).
            head = buffers.growable(table_nbytes, "blosc head")[:table_nbytes]
            got = reader.read_into(0, head)
        if got == head.size:
            part = _plan_part(head, size, total, start, stop, seen_blocksize)
            if part is not None:
                frame = buffer_for(part.frame_nbytes)
                _write_part_header(frame, part)
                blocks = frame[part.blocks_at :]
                if reader.read_into(part.bounds[0], blocks) == len(blocks) and _streams_fit(frame, part):
                    return frame, part
        whole = buffer_for(size)
        whole[:got] = head[:got]
        if got < head.size:  # the file ended early: what there is, for the full decode to judge
            return whole[:got], None
    else:
        whole = buffer_for(size)
    if got < size:
        got += reader.read_into(got, whole[got:size])
    whole = whole[:got]
    try:
        header = parse_blosc_header(whole)
    except ValueError:
        return whole, None
    if seen_blocksize is not None and not header.memcpyed:
        seen_blocksize[0] = header.blocksize  # a part may pay again where blocks shrank
    return whole, (_WHOLE_FRAME if header.nbytes == total else None)


def _table_nbytes(head: np.ndarray[Any, np.dtype[np.uint8]], total: int, size: int) -> int:
    """The bytes of a frame's header and block table, by its header (``head``: its first
    bytes), where it declares the chunk's ``total`` bytes in blocks and the table fits the
    frame's ``size``; 0 otherwise (nothing to plan by)."""
    if head.size < BLOSC_HEADER_NBYTES:
        return 0
    _, _, flags, _, nbytes, blocksize, _ = _HEADER.unpack_from(head.data)
    if flags & BLOSC_FLAG_MEMCPYED or nbytes != total or blocksize == 0:
        return 0
    nbytes_of_table = BLOSC_HEADER_NBYTES + 4 * -(-nbytes // blocksize)
    return nbytes_of_table if nbytes_of_table <= size else 0


#: The plan of a whole frame read by :func:`read_blosc_part`, its header checked.
_WHOLE_FRAME = "whole frame"


def decode_read_blosc(frame: Buffer, plan: object, out: np.ndarray[Any, Any]) -> None:
    """Decode what :func:`read_blosc_part` read and checked into ``out`` (the whole chunk's
    bytes): a whole frame, or a part's frame at the part's offset."""
    # c-blosc reads as far as a frame's header says: the frame must be the one planned.
    if plan is _WHOLE_FRAME:
        header = parse_blosc_header(frame)
        if header.nbytes != out.nbytes:
            raise ValueError(f"blosc: header says {header.nbytes} decoded bytes, expected {out.nbytes}")
        _decompress(frame, out)
        return
    if not isinstance(plan, _Part) or len(frame) != plan.frame_nbytes:
        raise ValueError("blosc: not the frame read_blosc_part planned")
    _decompress(frame, out[plan.offset : plan.offset + plan.nbytes])
