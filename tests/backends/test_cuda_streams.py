"""The nvCOMP stream splitters of gpuzarr.backends.cuda.streams against frames made by numcodecs.

Each frame is split, every stream is decoded with a CPU decoder of its raw format (as nvCOMP
would decode it), the Blosc blocks are un-shuffled with the kernel models, and the result must be
the original bytes. Malformed frames must raise ValueError naming what is wrong.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from numcodecs import LZ4, Blosc, GZip, Zlib, Zstd

from gpuzarr.backends.cuda import kernel_reference as ref
from gpuzarr.backends.cuda.numpy_device import _decode_stream_on_cpu
from gpuzarr.backends.cuda.streams import (
    SplitChunk,
    UnsupportedStreamError,
    split_blosc,
    split_chunk,
    split_gzip,
    split_lz4,
    split_zlib,
    split_zstd,
)
from gpuzarr.codecs.blosc import BLOSC_FLAG_DELTA


def _data(typesize: int, nbytes: int = 50_000) -> bytes:
    rng = np.random.default_rng(typesize)
    # Smooth values compress (so streams are not stored) but not to nothing.
    n = nbytes // typesize
    values = np.cumsum(rng.integers(-3, 4, size=n)).astype(f"<u{typesize}" if typesize <= 8 else "<u8")
    raw = values.tobytes()
    return (raw * (-(-nbytes // max(len(raw), 1)) + 1))[: nbytes - 3]  # a length no typesize divides evenly


def _rebuild(split: SplitChunk, frame: bytes) -> bytes:
    """Decode every stream on the CPU and un-shuffle: what the GPU path computes."""
    scratch = np.full(split.decoded_nbytes, 0xAB, np.uint8)
    for s in split.streams:
        part = frame[s.offset : s.offset + s.nbytes]
        decoded = part if s.algorithm == "copy" else _decode_stream_on_cpu(s.algorithm, part, s.decoded_nbytes)
        assert len(decoded) == s.decoded_nbytes
        scratch[s.decoded_offset : s.decoded_offset + s.decoded_nbytes] = np.frombuffer(decoded, np.uint8)
    if split.shuffle == "none":
        return scratch.tobytes()
    out = np.full_like(scratch, 0xCD)
    src = [scratch[b.offset :] for b in split.blocks]
    dst = [out[b.offset :] for b in split.blocks]
    sizes = np.array([b.nbytes for b in split.blocks], np.int64)
    types = np.full(len(split.blocks), split.typesize, np.int32)
    if split.shuffle == "byte":
        ref.byte_unshuffle(src, dst, sizes, types, len(sizes))
    else:
        ref.bit_unshuffle(src, dst, sizes, types, len(sizes), split.partial_rule)
    return out.tobytes()


@pytest.mark.parametrize("cname", ["lz4", "lz4hc", "zstd", "zlib", "blosclz"])
@pytest.mark.parametrize("shuffle", [Blosc.NOSHUFFLE, Blosc.SHUFFLE, Blosc.BITSHUFFLE])
@pytest.mark.parametrize("typesize", [1, 2, 4, 8, 16])
def test_blosc_frames(cname: str, shuffle: int, typesize: int) -> None:
    data = _data(typesize)
    codec = Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=4096, typesize=typesize)
    frame = bytes(codec.encode(np.frombuffer(data, np.uint8)))
    if cname == "blosclz":
        # Either a stream is really blosclz-compressed (no GPU decoder) or every one is stored.
        try:
            split = split_blosc(frame, len(data))
        except UnsupportedStreamError as exc:
            assert "blosclz" in str(exc)
            return
        assert {s.algorithm for s in split.streams} <= {"copy"}
        assert _rebuild(split, frame) == data
        return
    split = split_blosc(frame, len(data))
    assert split.decoded_nbytes == len(data)
    kinds = {s.algorithm for s in split.streams}
    assert kinds <= {"copy", {"lz4": "lz4", "lz4hc": "lz4", "zstd": "zstd", "zlib": "deflate"}[cname]}
    assert _rebuild(split, frame) == data


def test_blosc_split_blocks_give_typesize_streams() -> None:
    data = _data(4, 64 * 1024)
    frame = bytes(Blosc(cname="lz4", shuffle=Blosc.SHUFFLE, blocksize=8192, typesize=4).encode(data))
    split = split_blosc(frame, len(data))
    flags, typesize, nbytes, blocksize = struct.unpack_from("<BBII", frame, 2)
    assert typesize == 4 and not flags & 0x10  # c-blosc splits lz4 blocks of shuffled data
    full_blocks = nbytes // blocksize
    assert full_blocks >= 1
    assert len(split.streams) == 4 * full_blocks + (1 if nbytes % blocksize else 0)
    assert _rebuild(split, frame) == data


def test_blosc_memcpyed_frame() -> None:
    data = _data(2, 1000)
    frame = bytes(Blosc(cname="lz4", clevel=0, shuffle=Blosc.SHUFFLE, typesize=2).encode(data))
    split = split_blosc(frame, len(data))
    assert [s.algorithm for s in split.streams] == ["copy"] and split.shuffle == "none"
    assert _rebuild(split, frame) == data


@pytest.mark.parametrize("clevel", [0, 5], ids=["stored", "compressed"])
def test_blosc_frames_asking_for_the_delta_filter_go_to_the_cpu(clevel: int) -> None:
    """Flag 0x08 is Blosc2's delta filter: c-blosc 1.x, the CPU codec's decoder, refuses such
    frames (stored ones too), so a batch must not decode them as if the flag were not there."""
    data = _data(4)
    frame = bytearray(Blosc(cname="lz4", clevel=clevel, shuffle=Blosc.SHUFFLE, typesize=4).encode(data))
    frame[2] |= BLOSC_FLAG_DELTA
    with pytest.raises(UnsupportedStreamError, match="delta filter"):
        split_blosc(bytes(frame), len(data))
    with pytest.raises(RuntimeError, match="error during blosc decompression"):
        Blosc().decode(bytes(frame))


@pytest.mark.parametrize("version", [1, 3, 4])
def test_blosc_frames_of_other_format_versions_go_to_the_cpu(version: int) -> None:
    """c-blosc 1.x decodes format version 2 only (numcodecs refuses the others, stored frames
    too): a batch leaves the frame to the CPU, which refuses it, rather than read it alone."""
    data = _data(4)
    for clevel in (0, 5):
        frame = bytearray(Blosc(cname="lz4", clevel=clevel, shuffle=Blosc.SHUFFLE, typesize=4).encode(data))
        frame[0] = version
        with pytest.raises(UnsupportedStreamError, match=f"format version {version}"):
            split_blosc(bytes(frame), len(data))
        with pytest.raises(RuntimeError, match="error during blosc decompression"):
            Blosc().decode(bytes(frame))


def test_blosc_frames_of_another_compressor_format_version_go_to_the_cpu() -> None:
    """c-blosc 1.x decodes a compressed frame only where its second byte (the compressor's format
    version) is 1, and copies a stored frame whatever that byte says."""
    data = _data(4)
    frame = bytearray(Blosc(cname="zstd", clevel=5, shuffle=Blosc.BITSHUFFLE, typesize=4).encode(data))
    frame[1] = 0x41
    with pytest.raises(UnsupportedStreamError, match="compressor format version 65"):
        split_blosc(bytes(frame), len(data))
    with pytest.raises(RuntimeError, match="error during blosc decompression"):
        Blosc().decode(bytes(frame))
    stored = bytearray(Blosc(cname="lz4", clevel=0, typesize=4).encode(data))
    stored[1] = 0x41
    assert _rebuild(split_blosc(bytes(stored), len(data)), bytes(stored)) == data == Blosc().decode(bytes(stored))


def test_blosc_malformed() -> None:
    data = _data(4)
    frame = bytes(Blosc(cname="zstd", shuffle=Blosc.SHUFFLE, blocksize=4096, typesize=4).encode(data))
    with pytest.raises(ValueError, match="shorter than its 16-byte header"):
        split_blosc(frame[:10], len(data))
    with pytest.raises(ValueError, match="compressed bytes, frame has"):
        split_blosc(frame[:-5], len(data))
    with pytest.raises(ValueError, match="decoded bytes, expected"):
        split_blosc(frame, len(data) + 1)
    # A block start pointing past the frame (header cbytes kept consistent).
    forged = bytearray(frame)
    struct.pack_into("<i", forged, 16, len(frame) + 100)
    with pytest.raises(ValueError, match="block 0 starts at"):
        split_blosc(bytes(forged), len(data))
    # A stream size running past the frame.
    forged = bytearray(frame)
    (start,) = struct.unpack_from("<i", frame, 16)
    struct.pack_into("<i", forged, start, 1 << 30)
    with pytest.raises(ValueError, match="block 0 stream 0"):
        split_blosc(bytes(forged), len(data))
    # A block table larger than the frame.
    forged = bytearray(frame)
    struct.pack_into("<I", forged, 8, 1)  # blocksize 1 -> ~50k blocks
    with pytest.raises(ValueError, match="block starts runs past"):
        split_blosc(bytes(forged), len(data))


def test_zstd_frames() -> None:
    data = _data(4)
    frame = bytes(Zstd(level=3).encode(data))
    split = split_zstd(frame, len(data))
    assert _rebuild(split, frame) == data
    with pytest.raises(ValueError, match="declares"):
        split_zstd(frame, len(data) + 1)
    with pytest.raises(ValueError, match="Zstandard frame header"):
        split_zstd(b"\x00" * 10, 10)


def _gzip_with_fields(data: bytes, flags: int) -> bytes:
    header = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + b"\x00\x00\x00\x00\x00\xff")
    if flags & 0x04:
        header += struct.pack("<H", 5) + b"extra"
    if flags & 0x08:
        header += b"name.bin\x00"
    if flags & 0x10:
        header += b"a comment\x00"
    if flags & 0x02:
        header += struct.pack("<H", zlib.crc32(bytes(header)) & 0xFFFF)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    return bytes(header) + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


@pytest.mark.parametrize("flags", [0x00, 0x02, 0x04, 0x08, 0x10, 0x1E])
def test_gzip_optional_header_fields(flags: int) -> None:
    data = _data(2)
    stream = _gzip_with_fields(data, flags)
    assert zlib.decompress(stream, 31) == data  # the test frame itself is valid gzip
    split = split_gzip(stream, len(data))
    assert split.checksum is not None and split.checksum.value == zlib.crc32(data)
    assert _rebuild(split, stream) == data


def test_gzip_numcodecs_and_malformed() -> None:
    data = _data(8)
    stream = bytes(GZip(level=5).encode(data))
    assert _rebuild(split_gzip(stream, len(data)), stream) == data
    with pytest.raises(ValueError, match="magic"):
        split_gzip(b"\x00" + stream[1:], len(data))
    with pytest.raises(ValueError, match="shorter than a header"):
        split_gzip(stream[:12], len(data))
    with pytest.raises(ValueError, match="reserved flag"):
        split_gzip(stream[:3] + b"\x80" + stream[4:], len(data))
    with pytest.raises(ValueError, match="CRC16"):
        bad = bytearray(_gzip_with_fields(data, 0x02))
        bad[10] ^= 0xFF
        split_gzip(bytes(bad), len(data))
    with pytest.raises(ValueError, match="FNAME"):
        split_gzip(stream[:3] + b"\x08" + stream[4:10] + b"x" * 20, len(data))
    with pytest.raises(UnsupportedStreamError, match="ISIZE"):
        split_gzip(stream + stream, 2 * len(data))  # two members


def test_zlib_streams() -> None:
    data = _data(4)
    stream = bytes(Zlib(level=5).encode(data))
    split = split_zlib(stream, len(data))
    assert split.checksum is not None and split.checksum.value == zlib.adler32(data)
    assert _rebuild(split, stream) == data
    with pytest.raises(ValueError, match="preset dictionary"):
        cmf = 0x78
        flg = 0x20
        flg += 31 - ((cmf << 8) | flg) % 31
        split_zlib(bytes([cmf, flg]) + stream[2:], len(data))
    with pytest.raises(ValueError, match="header check"):
        split_zlib(bytes([0x78, 0x00]) + stream[2:], len(data))
    with pytest.raises(ValueError, match="compression method"):
        split_zlib(bytes([0x77]) + stream[1:], len(data))


def test_lz4_streams() -> None:
    data = _data(2)
    stream = bytes(LZ4().encode(data))
    assert _rebuild(split_lz4(stream, len(data)), stream) == data
    with pytest.raises(ValueError, match="size prefix"):
        split_lz4(stream, len(data) - 1)
    with pytest.raises(ValueError, match="shorter"):
        split_lz4(stream[:3], len(data))


def test_raw_route_checks_size() -> None:
    assert split_chunk("raw", b"abcd", 4).streams[0].nbytes == 4
    with pytest.raises(ValueError, match="uncompressed chunk has 3 bytes"):
        split_chunk("raw", b"abc", 4)


def _stored_split_frame(flags: int, typesize: int, nbytes: int, blocksize: int, nsplits: int) -> tuple[bytes, bytes]:
    """A hand-made Blosc1 frame (format version 2, lz4) whose full blocks are cut into
    ``nsplits`` streams, each stored (``cbytes == neblock``), whatever the header's split flag
    says; the leftover block is one stream. Returns (frame, the bytes it holds)."""
    data = (np.arange(nbytes) % 251).astype(np.uint8).tobytes()
    nblocks = -(-nbytes // blocksize)
    table_end = 16 + 4 * nblocks
    body, starts = b"", []
    for b in range(nblocks):
        block = data[b * blocksize : (b + 1) * blocksize]
        splits = nsplits if len(block) == blocksize else 1
        part = len(block) // splits
        starts.append(table_end + len(body))
        for s in range(splits):
            body += struct.pack("<i", part) + block[s * part : (s + 1) * part]
    header = struct.pack("<BBBBIII", 2, 1, 0x20 | flags, typesize, nbytes, blocksize, table_end + len(body))
    return header + struct.pack(f"<{nblocks}i", *starts) + body, data


@pytest.mark.parametrize(
    ("flags", "typesize", "blocksize", "nsplits"),
    [
        (0x00, 4, 4096, 4),  # split by the rule and the flag
        (0x10, 4, 4096, 1),  # dont_split set: one stream even where the rule would split
        (0x00, 4, 256, 1),  # 64 items a block: too few to split, flag clear
        (0x00, 32, 4096, 1),  # 32-byte items: too wide to split, flag clear
        (0x00, 32, 4096, 32),  # ALWAYS_SPLIT-style: split although typesize > 16
        (0x00, 4, 256, 4),  # ALWAYS_SPLIT-style: split although blocks are small
    ],
)
def test_blosc_split_rule_follows_numcodecs(flags: int, typesize: int, blocksize: int, nsplits: int) -> None:
    """The split rule is c-blosc1's decoder rule (numcodecs is the reference): split when the
    dont_split flag is clear, the block is not the leftover one, typesize <= 16 and a block
    holds at least 128 items. c-blosc 1.21 writes BLOSC_ALWAYS_SPLIT frames that break that rule
    (split with typesize > 16) yet cannot read them back; gpuzarr rejects them too."""
    frame, data = _stored_split_frame(flags, typesize, 8192 + 100, blocksize, nsplits)
    try:
        expected: bytes | None = bytes(Blosc().decode(frame))
    except RuntimeError:
        expected = None
    by_rule = typesize if not flags & 0x10 and typesize <= 16 and blocksize // typesize >= 128 else 1
    assert (expected is not None) == (nsplits == by_rule)
    if expected is None:
        with pytest.raises((ValueError, AssertionError, RuntimeError)):
            _rebuild(split_blosc(frame, len(data)), frame)
    else:
        assert expected == data
        assert _rebuild(split_blosc(frame, len(data)), frame) == data
