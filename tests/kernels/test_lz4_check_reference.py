"""The model of kernels/lz4_check.cu against real LZ4 blocks (numcodecs' LZ4 and Blosc-lz4, both
liblz4) and against the CPU decoder: every block liblz4 writes is well formed, every truncation and
wrong size is caught, and whatever the walk accepts, liblz4 decodes to the expected size."""

from __future__ import annotations

import numpy as np
import pytest
from numcodecs import LZ4, Blosc

from gpuzarr.backends.cuda import kernel_reference as ref

RNG = np.random.default_rng(7)


def _block(data: bytes, acceleration: int = 1) -> bytes:
    """The raw LZ4 block of ``data`` (numcodecs' LZ4 prefixes the decoded size: 4 bytes)."""
    return bytes(LZ4(acceleration=acceleration).encode(data))[4:]


def _payloads() -> list[bytes]:
    ramp = np.arange(300_000, dtype="<u2").tobytes()
    noisy = (np.arange(200_000) // 7 + RNG.integers(0, 3, 200_000)).astype("<u4").tobytes()
    return [
        b"",
        b"x",
        b"abcabcabcabc",  # 12 bytes: too short for any match
        b"abcabcabcabca",  # 13 bytes: the shortest block that may hold a match
        bytes(64),
        bytes(1 << 20),  # one long match: length extension bytes of 255
        RNG.integers(0, 256, 70_000, dtype=np.uint8).tobytes(),  # incompressible: one literal run
        ramp,
        noisy,
    ]


@pytest.mark.parametrize("payload", _payloads(), ids=lambda p: f"{len(p)}B")
@pytest.mark.parametrize("acceleration", [1, 9])
def test_liblz4_blocks_are_well_formed(payload: bytes, acceleration: int) -> None:
    block = _block(payload, acceleration)
    assert ref.lz4_walk(block, len(block), len(payload)) == -1


def test_blosc_lz4_blocks_are_well_formed() -> None:
    from .blosc_frames import shuffled_blocks

    data = (np.arange(50_000) // 3 % 1000).astype("<u4")
    frame = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE, blocksize=16384).encode(data)
    parsed = shuffled_blocks(bytes(frame))
    # The decoded blocks come back through the CPU decoder; the compressed streams of the frame
    # are found from its block table (c-blosc1: int32 offsets after the 16-byte header).
    raw = bytes(frame)
    nblocks = len(parsed.blocks)
    starts = np.frombuffer(raw[16 : 16 + 4 * nblocks], dtype="<i4").tolist()
    ends = [*starts[1:], len(raw)]
    checked = 0
    for b, (start, end) in enumerate(zip(starts, ends, strict=True)):
        # A block is one stream, or one per byte of the type (c-blosc1 "splits"); each stream is
        # a 4-byte compressed size and the LZ4 block, or the bytes as they are when that size
        # equals what they decode to.
        streams, pos = [], start
        while pos < end:
            size = int.from_bytes(raw[pos : pos + 4], "little")
            streams.append(raw[pos + 4 : pos + 4 + size])
            pos += 4 + size
        assert pos == end
        decoded = parsed.blocks[b].size // len(streams)
        for stream in streams:
            if len(stream) != decoded:
                assert ref.lz4_walk(stream, len(stream), decoded) == -1
                checked += 1
    assert checked >= nblocks


def test_every_truncation_and_wrong_size_is_caught() -> None:
    payload = (np.arange(5000) // 5 % 97).astype("<u2").tobytes()
    block = _block(payload)
    for cut in range(len(block)):
        assert ref.lz4_walk(block[:cut], cut, len(payload)) >= 0, cut
    for wrong in (0, len(payload) - 1, len(payload) + 1, 2 * len(payload)):
        assert ref.lz4_walk(block, len(block), wrong) >= 0, wrong


def test_the_format_rules_by_hand() -> None:
    # Literals only: token 0x50 (5 literals, no match).
    assert ref.lz4_walk(b"\x50hello", 6, 5) == -1
    # "abcd" then a match of 4 at offset 4, then 5 literals: 13 bytes out. Well formed for 13
    # bytes... except that the match starts at byte 4 > 13 - 12: a match that late is refused.
    block = b"\x40abcd\x04\x00\x50hello"
    assert ref.lz4_walk(block, len(block), 13) == 0
    # The same sequences with 8 literals first: the match starts at byte 8 of 17 (> 17 - 12).
    block = b"\x80abcdefgh\x04\x00\x50hello"
    assert ref.lz4_walk(block, len(block), 17) == 0
    # A match at byte 12 of a 24-byte output that ends in 8 literals: allowed.
    block = b"\xc0abcdefghijkl\x04\x00\x80hellowor"
    assert ref.lz4_walk(block, len(block), 24) == -1
    # Offset 0 and an offset past the bytes written are refused at that sequence.
    assert ref.lz4_walk(b"\xc0abcdefghijkl\x00\x00\x80hellowor", 24, 24) == 0
    assert ref.lz4_walk(b"\xc0abcdefghijkl\x0d\x00\x80hellowor", 24, 24) == 0
    # A match running into the last 5 bytes is refused.
    block = b"\xc4abcdefghijkl\x04\x00\x40hell"
    assert ref.lz4_walk(block, len(block), 24) == 0
    # A literal run past the end of the block, or a length extension cut short.
    assert ref.lz4_walk(b"\x50hel", 4, 5) == 0
    assert ref.lz4_walk(b"\xf0\xff", 2, 300) == 0


def test_what_the_walk_accepts_liblz4_decodes() -> None:
    """Random corruption of real blocks: any block the walk accepts decodes with liblz4 to the
    expected size (so the device's decode of an accepted block is determined)."""
    payload = (np.arange(20_000) // 9 % 211).astype("<u2").tobytes()
    block = bytearray(_block(payload))
    accepted = refused = 0
    for _ in range(400):
        bad = bytearray(block)
        for pos in RNG.integers(0, len(bad), int(RNG.integers(1, 4))).tolist():
            bad[pos] = int(RNG.integers(0, 256))
        if ref.lz4_walk(bytes(bad), len(bad), len(payload)) == -1:
            decoded = LZ4().decode(len(payload).to_bytes(4, "little") + bytes(bad))
            assert len(decoded) == len(payload)
            accepted += 1
        else:
            refused += 1
    assert refused > 0 and accepted > 0  # byte changes inside literals stay well formed


def test_the_batch_model_gives_one_verdict_per_block() -> None:
    payload = bytes(range(256)) * 40
    good = np.frombuffer(_block(payload), dtype=np.uint8)
    blocks = [good, good[:-3], good]
    sizes = np.array([good.size, good.size - 3, good.size], dtype=np.int64)
    decoded = np.array([len(payload), len(payload), len(payload) + 1], dtype=np.int64)
    verdicts = np.zeros(3, dtype=np.int64)
    ref.lz4_check_batch(blocks, sizes, decoded, verdicts, 3)
    assert verdicts[0] == -1 and verdicts[1] >= 0 and verdicts[2] >= 0


def test_the_launch_check_refuses_what_the_kernel_cannot_take() -> None:
    from gpuzarr.backends.cuda.launch_checks import check_lz4

    lengths, decoded = check_lz4([10, 20], [10, 5], [100, 0])
    assert lengths.tolist() == [10, 5] and decoded.tolist() == [100, 0]
    with pytest.raises(ValueError, match="2 blocks and 1 decoded"):
        check_lz4([10, 20], [10, 5], [100])
    with pytest.raises(ValueError, match="block 1 has decoded size -1"):
        check_lz4([10, 20], [10, 5], [100, -1])
    with pytest.raises(ValueError, match="buffer 0 is 10 bytes long"):
        check_lz4([10], [11], [100])
