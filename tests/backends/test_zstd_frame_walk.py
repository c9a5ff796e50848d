"""The host's walk of Zstandard frames (``streams.walk_zstd_frame`` / ``check_zstd_frame``)
before a frame joins a batch: every valid frame the CPU path decodes passes or goes to the CPU,
and malformed frames (truncated, zeroed, reserved block type, oversized block, ...) are
rejected with what is wrong, for chunks in memory and for chunks read from files."""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING

import numpy as np
import pytest
from numcodecs import Blosc, Zstd

from gpuzarr.backends.cuda import streams
from gpuzarr.backends.cuda.bind import _FileWindow
from gpuzarr.backends.cuda.launches import FileSpan
from gpuzarr.backends.cuda.streams import (
    UnsupportedStreamError,
    check_zstd_frame,
    memory_reader,
    split_chunk,
    walk_zstd_frame,
)

if TYPE_CHECKING:
    from pathlib import Path

RNG = np.random.default_rng(7)
SMOOTH = np.cumsum(RNG.normal(size=100_000)).astype("<f8").tobytes()  # compressed blocks
NOISE = RNG.integers(0, 256, 300_000, dtype=np.uint8).tobytes()  # raw blocks
ZEROS = bytes(1 << 20)  # RLE blocks
SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"abcd"


def _walk(frame: bytes) -> streams.ZstdFrame:
    return walk_zstd_frame(memory_reader(np.frombuffer(frame, np.uint8)), len(frame))


def _check(frame: bytes, decoded: int) -> streams.ZstdFrame:
    return check_zstd_frame(memory_reader(np.frombuffer(frame, np.uint8)), len(frame), decoded)


def _block_kinds(frame: bytes) -> set[int]:
    """The block types of a single frame, read independently of the code under test."""
    descriptor = frame[4]
    single = bool(descriptor & 0x20)
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3] + ((0, 2, 4, 8)[descriptor >> 6] or int(single))
    kinds = set()
    while True:
        header = int.from_bytes(frame[pos : pos + 3], "little")
        kinds.add((header >> 1) & 3)
        pos += 3 + (1 if (header >> 1) & 3 == 1 else header >> 3)
        if header & 1:
            return kinds


@pytest.mark.parametrize("checksum", [False, True], ids=["plain", "checksum"])
@pytest.mark.parametrize("level", [1, 3, 19])
@pytest.mark.parametrize(("name", "data", "kind"), [("compressed", SMOOTH, 2), ("raw", NOISE, 0), ("rle", ZEROS, 1)])
def test_valid_frames_pass(name: str, data: bytes, kind: int, level: int, checksum: bool) -> None:
    frame = bytes(Zstd(level=level, checksum=checksum).encode(data))
    assert kind in _block_kinds(frame), name
    walked = _check(frame, len(data))
    assert (walked.nbytes, walked.content_size, walked.checksum) == (len(frame), len(data), checksum)
    assert split_chunk("zstd", frame, len(data)).streams[0].nbytes == len(frame)


@pytest.mark.parametrize("checksum", [False, True])
def test_empty_frames_pass(checksum: bool) -> None:
    frame = bytes(Zstd(checksum=checksum).encode(b""))
    assert _check(frame, 0).nbytes == len(frame)


def test_chunks_the_cpu_accepts_but_a_batch_cannot_hold_go_to_the_cpu() -> None:
    """Several frames and skippable frames decode on the CPU path: never rejected, sent to it."""
    frame = bytes(Zstd().encode(SMOOTH))
    codec = Zstd()
    for chunk, decoded in [
        (frame + frame, 2 * len(SMOOTH)),
        (SKIPPABLE + frame, len(SMOOTH)),
        (frame + SKIPPABLE, len(SMOOTH)),
    ]:
        assert len(bytes(codec.decode(chunk))) == decoded  # the CPU path accepts it
        with pytest.raises(UnsupportedStreamError):
            split_chunk("zstd", chunk, decoded)


def test_frames_without_content_size_go_to_the_cpu() -> None:
    frame = bytearray(Zstd().encode(b"x" * 1000))
    # Rebuild the header without its content size: descriptor 0 -> no single segment, no FCS.
    descriptor = frame[4]
    assert descriptor & 0x20 and descriptor >> 6 == 1  # single segment, 2-byte FCS
    blocks = frame[4 + 1 + 2 :]
    no_size = bytes(frame[:4]) + bytes([0x00, 0x50]) + bytes(blocks)  # window descriptor: 1 MiB
    assert bytes(Zstd().decode(no_size)) == b"x" * 1000  # the CPU path accepts it
    assert _walk(no_size).content_size is None
    with pytest.raises(UnsupportedStreamError, match="no content size"):
        split_chunk("zstd", no_size, 1000)


def test_dictionary_frames_go_to_the_cpu() -> None:
    frame = bytes(Zstd().encode(b"y" * 500))
    descriptor = frame[4] | 0x01  # a 1-byte dictionary id follows the descriptor
    with_dict = frame[:4] + bytes([descriptor, 7]) + frame[5:]
    with pytest.raises(UnsupportedStreamError, match="dictionary 7"):
        split_chunk("zstd", with_dict, 500)


def _first_block(frame: bytes) -> int:
    descriptor = frame[4]
    single = bool(descriptor & 0x20)
    return 5 + (0 if single else 1) + ((0, 2, 4, 8)[descriptor >> 6] or int(single))


def _malformed() -> dict[str, tuple[bytes, int, str]]:
    frame = bytes(Zstd().encode(SMOOTH))
    n = len(SMOOTH)
    first = _first_block(frame)
    zeroed = frame[: len(frame) // 2] + bytes(len(frame) - len(frame) // 2)
    reserved = bytearray(frame)
    reserved[first] |= 0x06  # block type 3
    oversized = bytearray(frame)  # a compressed block of 128 KiB + 1 byte
    oversized[first : first + 3] = (((ZSTD_MAX + 1) << 3) | 2 << 1).to_bytes(3, "little")
    reserved_bit = bytearray(frame)
    reserved_bit[4] |= 0x08
    raw_block = bytes(Zstd().encode(NOISE[:1000]))  # a raw block of 1000 bytes, declared 900
    shrunk = bytearray(raw_block)
    shrunk[_first_block(raw_block) - 2 : _first_block(raw_block)] = (900 - 256).to_bytes(2, "little")
    few_blocks = bytes(Zstd().encode(ZEROS))
    return {
        "truncated": (frame[: len(frame) - 100], n, "past the end"),
        "truncated-header": (frame[:5], n, "shorter than a frame header"),
        "zeroed": (zeroed, n, "without a last block"),
        "zeroed-header": (bytes(len(frame)), n, "does not start with a Zstandard frame"),
        "reserved-block-type": (bytes(reserved), n, "reserved block type"),
        "oversized-block": (bytes(oversized), n, "more than the 131072"),
        "reserved-descriptor-bit": (bytes(reserved_bit), n, "reserved bit"),
        "raw-blocks-exceed-content-size": (bytes(shrunk), 900, "more than the 900 bytes"),
        "content-size-beyond-blocks": (few_blocks[:-3] + bytes([1, 0, 0]), len(ZEROS), "at most"),
        "missing-checksum": (bytes(Zstd(checksum=True).encode(SMOOTH))[:-2], n, "checksum runs past"),
        "wrong-content-size": (frame, n + 8, f"declares {n} decoded bytes, expected {n + 8}"),
    }


ZSTD_MAX = streams.ZSTD_BLOCK_MAX
MALFORMED = _malformed()


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frames_are_rejected(case: str) -> None:
    frame, decoded, what = MALFORMED[case]
    with pytest.raises(ValueError, match=what) as info:
        split_chunk("zstd", frame, decoded)
    assert not isinstance(info.value, UnsupportedStreamError)


def test_the_walk_reads_only_headers() -> None:
    """A few reads of at most 14 bytes per block: no read, and so no allocation, sized by the data."""
    frame = bytes(Zstd().encode(SMOOTH))
    reads: list[int] = []
    reader = memory_reader(np.frombuffer(frame, np.uint8))

    def read(offset: int, n: int) -> memoryview:
        reads.append(n)
        return reader(offset, n)

    walked = walk_zstd_frame(read, len(frame))
    assert max(reads) <= 14 and len(reads) == walked.nblocks + 3


def test_blosc_zstd_streams_are_walked() -> None:
    data = np.frombuffer(SMOOTH, "<f8")
    frame = bytearray(Blosc(cname="zstd", shuffle=Blosc.SHUFFLE).encode(data))
    assert {s.algorithm for s in streams.split_blosc(bytes(frame), data.nbytes).streams} == {"zstd"}
    first = streams.split_blosc(bytes(frame), data.nbytes).streams[0]
    frame[first.offset + 4] |= 0x08
    with pytest.raises(ValueError, match="block 0 stream 0: zstd: reserved bit"):
        streams.split_blosc(bytes(frame), data.nbytes)


def test_file_walk_matches_memory_walk(tmp_path: Path) -> None:
    frame = bytes(Zstd().encode(SMOOTH))
    path = tmp_path / "f"
    path.write_bytes(b"pad" + frame + b"tail")
    fd = os.open(path, os.O_RDONLY)
    try:
        span = FileSpan(str(path), 3, len(frame))
        assert walk_zstd_frame(_FileWindow(fd, span), len(frame)) == _walk(frame)
    finally:
        os.close(fd)
    path.write_bytes(b"pad" + frame[: len(frame) // 2])  # the file ends inside the span
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="file ended"):
            check_zstd_frame(_FileWindow(fd, span), span.nbytes, len(SMOOTH))
    finally:
        os.close(fd)
