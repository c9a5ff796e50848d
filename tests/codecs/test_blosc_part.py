"""Decoding only the Blosc blocks a selection needs (gpuzarr.codecs.blosc.decode_blosc_part, and
read_blosc_part reading only those blocks from a store): what it decodes equals the whole
frame's decode over the part asked for, for every compressor, shuffle, type size and block
layout numcodecs writes; it decodes a part only where a quarter of the chunk is skipped; a
damaged frame is left to the full decode (never a crash, never wrong data); and crops of Blosc
arrays, chunked, sharded and v2, in memory and in files, equal NumPy while decoding less."""

from __future__ import annotations

import itertools
import struct
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuzarr
from gpuzarr.codecs import blosc as blosc_module
from gpuzarr.codecs.blosc import BLOSC_HEADER_NBYTES, decode_blosc_part, decode_read_blosc, read_blosc_part
from gpuzarr.errors import CorruptChunkError
from gpuzarr.store import RangeReader

if TYPE_CHECKING:
    from pathlib import Path

RNG = np.random.default_rng(7)
# A smooth walk compresses like image data; the odd length leaves a short last block.
WALK = (np.cumsum(RNG.integers(-3, 4, size=64 * 64 * 63 + 5)) % 4096).astype("<u2")


def encoded(
    cname: str = "lz4", shuffle: int = 1, blocksize: int = 8192, dtype: str = "<u2"
) -> tuple[Any, bytes, np.ndarray[Any, Any]]:
    impl = numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize)
    data = WALK.astype(dtype)
    # On one thread: c-blosc's threads (numcodecs' default on the main thread, until something
    # imports zarr) lay blocks out in the order they finish, which parts decline to decode.
    threads = numcodecs.blosc.use_threads
    numcodecs.blosc.use_threads = False
    try:
        frame = bytes(impl.encode(data))
    finally:
        numcodecs.blosc.use_threads = threads
    return impl, frame, data.view(np.uint8).reshape(-1)


def blocksize_of(frame: bytes) -> int:
    """The block size c-blosc chose (it may differ from the one asked for)."""
    return int(struct.unpack_from("<I", frame, 8)[0])


def part(impl: Any, frame: bytes, total: int, start: int, stop: int) -> tuple[bool, np.ndarray[Any, Any]]:
    """decode_blosc_part of the frame in memory, and read_blosc_part of it from a reader then
    decode_read_blosc: both decode the same part or none (a frame read whole is then returned
    whole)."""
    out = np.full(total, 0xA5, np.uint8)
    done = decode_blosc_part(frame, out, start, stop)
    data, plan = read_blosc_part(RecordingReader(frame), total, start, stop, buffer_for(len(frame)))
    assert isinstance(plan, blosc_module._Part) == done
    if done:
        read_out = np.full(total, 0xA5, np.uint8)
        decode_read_blosc(data, plan, read_out)
        np.testing.assert_array_equal(read_out, out)
    else:
        assert bytes(data) == frame
    return done, out


def buffer_for(most: int) -> Any:
    """A read's ``buffer_for``: one buffer, whose memory every call gives again."""
    memory = np.empty(most + 8192, np.uint8)
    return lambda n: memory[:n]


class RecordingReader(RangeReader):
    """A frame in memory read as a store's ranges, recording (start, length) of each read."""

    def __init__(self, frame: bytes) -> None:
        super().__init__(len(frame))
        self.frame = frame
        self.reads: list[tuple[int, int]] = []

    def read_into(self, start: int, target: Any) -> int:
        view = memoryview(target).cast("B")
        got = self.frame[start : start + len(view)]
        view[: len(got)] = got
        self.reads.append((start, len(view)))
        return len(got)


@pytest.mark.parametrize(
    ("cname", "shuffle", "dtype", "blocksize"),
    [
        *itertools.product(["lz4", "lz4hc", "zstd", "zlib", "blosclz"], [0, 1, 2], ["<u2"], [8192]),
        *itertools.product(["lz4"], [1, 2], ["u1", "<f4", "<f8", "<c16"], [8192, 100_000]),
        ("lz4", 1, "<u2", 0),  # c-blosc's own block size
    ],
)
def test_a_part_equals_the_whole_frames_decode_there(cname: str, shuffle: int, dtype: str, blocksize: int) -> None:
    impl, frame, expected = encoded(cname, shuffle, blocksize, dtype)
    total = expected.size
    blocksize_used = blocksize_of(frame)
    decoded_parts = 0
    for start, stop in [
        (0, total // 3),
        (total // 2, total),
        (total // 3, total // 3 + 7),
        (total - 5, total),  # the leftover block (and its full neighbour)
        (blocksize_used - 1, blocksize_used + 1),  # two blocks, across their boundary
    ]:
        done, out = part(impl, frame, total, start, stop)
        decoded_parts += done
        if done:
            np.testing.assert_array_equal(out[start:stop], expected[start:stop])
    if total // blocksize_used >= 4:
        assert decoded_parts >= 3


def test_blocks_outside_the_part_are_not_decoded() -> None:
    impl, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    assert total // bs >= 6
    done, out = part(impl, frame, total, 3 * bs + 10, 5 * bs - 10)
    assert done
    np.testing.assert_array_equal(out[3 * bs : 5 * bs], expected[3 * bs : 5 * bs])
    assert (out[: 3 * bs] == 0xA5).all() and (out[5 * bs :] == 0xA5).all()


@pytest.mark.parametrize(
    ("start", "stop"),
    [(0, 0), (10, 5), (0, 64 * 64 * 63 * 2 + 10 + 1)],  # empty, reversed, past the end
    ids=["empty", "reversed", "past-the-end"],
)
def test_no_part_for_a_range_that_is_not_one(start: int, stop: int) -> None:
    impl, frame, expected = encoded()
    assert not part(impl, frame, expected.size, start, stop)[0]


def reversed_blocks(frame: bytes) -> bytes:
    """``frame`` with its blocks stored last to first (the table of block starts rewritten):
    still a valid frame, which c-blosc decodes through the table, but no two neighbouring
    blocks lie next to each other any more."""
    nbytes, blocksize = struct.unpack_from("<II", frame, 4)
    nblocks = -(-nbytes // blocksize)
    table_end = BLOSC_HEADER_NBYTES + 4 * nblocks
    starts = list(struct.unpack_from(f"<{nblocks}i", frame, BLOSC_HEADER_NBYTES))
    blocks = [frame[a:b] for a, b in zip(starts, [*starts[1:], len(frame)], strict=True)]
    new_starts, body, at = [0] * nblocks, b"", table_end
    for b in reversed(range(nblocks)):
        new_starts[b] = at
        body += blocks[b]
        at += len(blocks[b])
    return frame[:BLOSC_HEADER_NBYTES] + struct.pack(f"<{nblocks}i", *new_starts) + body


def test_blocks_stored_apart_are_decoded_whole() -> None:
    """c-blosc writes blocks in order, one after the other, and a part is planned by that (a
    block ends where the next starts): a frame laid out otherwise is left to the full decode,
    which finds its blocks through the table."""
    impl, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    shuffled = reversed_blocks(frame)
    np.testing.assert_array_equal(np.frombuffer(impl.decode(shuffled), np.uint8), expected)
    for start, stop in [(bs + 3, 4 * bs - 3), (0, 3 * bs), (total - 3 * bs, total)]:
        assert part(impl, frame, total, start, stop)[0]
        assert not part(impl, shuffled, total, start, stop)[0]


def test_a_part_read_from_a_reader_reads_the_header_then_only_its_blocks() -> None:
    _, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    reader = RecordingReader(frame)
    data, plan = read_blosc_part(reader, total, 3 * bs + 10, 5 * bs - 10, buffer_for(len(frame)))
    out = np.full(total, 0xA5, np.uint8)
    decode_read_blosc(data, plan, out)
    np.testing.assert_array_equal(out[3 * bs : 5 * bs], expected[3 * bs : 5 * bs])
    assert (out[: 3 * bs] == 0xA5).all() and (out[5 * bs :] == 0xA5).all()
    nblocks = -(-total // bs)
    starts = struct.unpack_from(f"<{nblocks}i", frame, BLOSC_HEADER_NBYTES)
    assert reader.reads == [(0, 4096), (starts[3], starts[5] - starts[3])]


def test_a_frame_whose_part_does_not_pay_is_read_once_more_after_its_header() -> None:
    _, frame, expected = encoded(blocksize=8192)
    total = expected.size
    reader = RecordingReader(frame)
    whole, plan = read_blosc_part(reader, total, 0, total - 10, buffer_for(len(frame)))
    assert bytes(whole) == frame and plan is not None
    assert reader.reads == [(0, 4096), (4096, len(frame) - 4096)]  # the header's bytes kept
    out = np.empty(total, np.uint8)
    decode_read_blosc(whole, plan, out)
    np.testing.assert_array_equal(out, expected)


def test_a_whole_frame_is_read_at_once_and_its_header_checked() -> None:
    _, frame, expected = encoded(blocksize=8192)
    total = expected.size
    reader = RecordingReader(frame)
    whole, plan = read_blosc_part(reader, total, 0, total, buffer_for(len(frame)))
    assert bytes(whole) == frame and plan is not None
    assert reader.reads == [(0, len(frame))]
    # A header that does not fit the chunk: no plan, left to the codec's full decode to report.
    for damaged in (frame[:-1], frame[:8] + struct.pack("<I", 10**9) + frame[12:]):
        assert read_blosc_part(RecordingReader(damaged), total, 0, total, buffer_for(len(frame)))[1] is None
    assert read_blosc_part(RecordingReader(frame), total + 2, 0, total + 2, buffer_for(len(frame)))[1] is None


def test_a_frame_shorter_than_its_header_read_is_returned_as_read() -> None:
    impl = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1)
    small = bytes(impl.encode(np.arange(100, dtype="<u2")))
    assert len(small) < 4096
    reader = RecordingReader(small)
    whole, plan = read_blosc_part(reader, 200, 0, 10, buffer_for(len(small)))
    assert bytes(whole) == small and plan is not None  # one block: read whole
    assert reader.reads == [(0, len(small))]


def test_a_table_of_more_blocks_than_the_first_read_holds_is_read_whole_then_the_blocks() -> None:
    # c-blosc keeps a block size as small as this for zstd (its LZ4 blocks stay at 64 KiB)
    impl = numcodecs.Blosc(cname="zstd", clevel=1, shuffle=1, blocksize=2048)
    data = (np.arange(4 * 2**20) % 251).astype("u1")
    frame = bytes(impl.encode(data))
    bs = blocksize_of(frame)
    nblocks = -(-data.size // bs)
    assert 16 + 4 * nblocks > 4096  # more than 1,020 blocks
    reader = RecordingReader(frame)
    got, plan = read_blosc_part(reader, data.size, 100 * bs, 102 * bs, buffer_for(len(frame)))
    assert isinstance(plan, blosc_module._Part)
    out = np.zeros(data.size, np.uint8)
    decode_read_blosc(got, plan, out)
    np.testing.assert_array_equal(out[100 * bs : 102 * bs], data[100 * bs : 102 * bs])
    starts = struct.unpack_from(f"<{nblocks}i", frame, BLOSC_HEADER_NBYTES)
    assert reader.reads == [(0, 4096), (0, 16 + 4 * nblocks), (starts[100], starts[102] - starts[100])]


def test_a_table_entry_outside_the_frame_gives_no_part_anywhere() -> None:
    """A whole decode refuses the frame; a crop of blocks whose own entries are right must not
    read it as good either."""
    _, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    forged = bytearray(frame)
    nblocks = -(-total // bs)
    struct.pack_into("<i", forged, BLOSC_HEADER_NBYTES + 4 * (nblocks - 1), len(frame) + 100)
    assert part(numcodecs.Blosc(), bytes(forged), total, 0, bs)[0] is False


def test_a_read_part_is_decoded_only_from_the_frame_planned() -> None:
    _, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    data, plan = read_blosc_part(RecordingReader(frame), total, bs, 3 * bs, buffer_for(len(frame)))
    with pytest.raises(ValueError, match="not the frame"):
        decode_read_blosc(data[:-1], plan, np.empty(total, np.uint8))
    whole, whole_plan = read_blosc_part(RecordingReader(frame), total, 0, total, buffer_for(len(frame)))
    with pytest.raises(ValueError, match="blosc"):
        decode_read_blosc(whole[:-10], whole_plan, np.empty(total, np.uint8))  # cut short: refused, no crash


def test_the_codec_learns_the_block_size_and_reads_whole_where_a_part_would_not_pay() -> None:
    _, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    codec = blosc_module.BloscCodec("lz4", 5, "shuffle", 2, 8192)
    assert codec.part_may_pay(0, total - 10, total)  # nothing seen yet
    out = np.empty(total, np.uint8)
    assert codec.decode_part(frame, out, 0, 2 * bs)
    assert not codec.part_may_pay(0, total - 10, total)  # by the block size seen
    assert codec.part_may_pay(0, 2 * bs, total)
    # A frame of one block (another writer's) turns parts off; the next frame of small blocks
    # decoded whole turns them on again.
    one_block = bytes(numcodecs.Blosc(cname="lz4", blocksize=total * 2).encode(WALK))
    assert codec.decode(one_block, np.empty(total, np.uint8)) is not None
    assert not codec.part_may_pay(0, 2 * bs, total)
    codec.decode(frame, np.empty(total, np.uint8))
    assert codec.part_may_pay(0, 2 * bs, total)


def test_no_part_where_less_than_a_quarter_is_skipped() -> None:
    impl, frame, expected = encoded(blocksize=8192)
    total = expected.size
    assert total // blocksize_of(frame) >= 6
    assert not part(impl, frame, total, 0, total - total // 5)[0]
    assert part(impl, frame, total, 0, total // 2)[0]


def test_no_part_of_a_frame_with_one_block_or_only_its_leftover_block() -> None:
    impl, frame, expected = encoded(blocksize=8192)
    total, bs = expected.size, blocksize_of(frame)
    assert total % bs  # a short leftover block at the end
    assert not part(impl, frame, total, total - 5, total)[0]
    one_block = numcodecs.Blosc(cname="lz4", blocksize=total * 2).encode(WALK)
    assert blocksize_of(bytes(one_block)) == total  # the block shrank to the data
    assert not part(impl, bytes(one_block), total, 0, 10)[0]


def test_no_part_of_a_stored_frame() -> None:
    stored = bytes(numcodecs.Blosc(cname="lz4", clevel=0, blocksize=8192).encode(WALK))
    assert struct.unpack_from("<B", stored, 2)[0] & 0x2  # memcpyed
    assert not part(numcodecs.Blosc(), stored, WALK.nbytes, 0, 100)[0]


def test_no_part_of_a_frame_declaring_another_size() -> None:
    impl, frame, expected = encoded()
    assert not part(impl, frame, expected.size - 2, 0, 100)[0]
    assert not part(impl, frame[:-1], expected.size, 0, 100)[0]  # cbytes no longer the length


@settings(max_examples=300, deadline=None)
@given(
    where=st.integers(min_value=0, max_value=BLOSC_HEADER_NBYTES + 4 * 64 + 64),
    value=st.integers(min_value=0, max_value=255),
    start=st.integers(min_value=0, max_value=WALK.nbytes - 1),
    length=st.integers(min_value=1, max_value=WALK.nbytes // 2),
)
def test_damage_to_the_header_table_or_stream_sizes_never_gives_wrong_bytes(
    where: int, value: int, start: int, length: int
) -> None:
    """A damaged header, table of block starts or stream size: no part (the full decode then
    reports the frame), an error, or a part whose bytes are still right (damage to bytes that
    the part does not use)."""
    impl, frame, expected = encoded(blocksize=8192)
    damaged = bytearray(frame)
    damaged[where] = value
    stop = min(start + length, expected.size)
    try:
        done, out = part(impl, bytes(damaged), expected.size, start, stop)
    except Exception:  # what c-blosc raises for a frame it refuses; the pipeline names the key
        return
    if done and damaged != frame:
        # The part's bytes come from blocks whose size fields and starts were checked; a
        # changed byte inside compressed data can only change what those blocks decode to,
        # which c-blosc's LZ4 decoder either refuses or decodes. Compare with the full decode
        # of the same damaged frame, which is what any reader would return.
        try:
            whole = np.frombuffer(impl.decode(bytes(damaged)), np.uint8)
        except Exception:
            return
        np.testing.assert_array_equal(out[start:stop], whole[start:stop])


# -- through arrays ------------------------------------------------------------------------------

SHAPE = (64, 64, 64)
DATA = (np.cumsum(RNG.integers(-3, 4, size=128 * 64 * 64)) % 4096).astype("<u2").reshape(128, 64, 64)


def blosc_array(
    zarr_format: int = 3, shards: tuple[int, ...] | None = None, where: Path | None = None
) -> gpuzarr.Array:
    """A Blosc array in memory, or in files below ``where`` (whose chunks are read in part)."""
    store = gpuzarr.MemoryStore() if where is None else gpuzarr.LocalStore(where)
    if zarr_format == 2:
        compressor = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 65536}
        a = gpuzarr.create(store, shape=DATA.shape, dtype="<u2", chunks=SHAPE, zarr_format=2, compressor=compressor)
    else:
        codecs = [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 65536}},
        ]
        a = gpuzarr.create(store, shape=DATA.shape, dtype="<u2", chunks=SHAPE, shards=shards, codecs=codecs)
    a[...] = DATA
    return a


class Parts(list[tuple[int, int, bool]]):
    """(start, stop, decoded partly) of each part asked for; ``read_from_store`` counts those
    asked of read_blosc_part (read in part from a store)."""

    read_from_store = 0


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch) -> Parts:
    seen = Parts()
    decode, read = blosc_module.decode_blosc_part, blosc_module.read_blosc_part

    def recording_decode(data, out, start, stop, seen_blocksize=None):  # type: ignore[no-untyped-def]
        done = decode(data, out, start, stop, seen_blocksize)
        seen.append((start, stop, done))
        return done

    def recording_read(reader, total, start, stop, buffer_for, seen_blocksize=None):  # type: ignore[no-untyped-def]
        data, plan = read(reader, total, start, stop, buffer_for, seen_blocksize)
        if (start, stop) != (0, total):
            seen.append((start, stop, isinstance(plan, blosc_module._Part)))
            seen.read_from_store += 1
        return data, plan

    monkeypatch.setattr(blosc_module, "decode_blosc_part", recording_decode)
    monkeypatch.setattr(blosc_module, "read_blosc_part", recording_read)
    return seen


@pytest.mark.parametrize("in_files", [False, True], ids=["memory", "files"])
@pytest.mark.parametrize(
    ("zarr_format", "shards"), [(3, None), (3, (128, 64, 64)), (2, None)], ids=["v3", "sharded", "v2"]
)
def test_a_crop_decodes_only_the_blocks_it_needs(
    parts: Parts,
    zarr_format: int,
    shards: tuple[int, ...] | None,
    in_files: bool,
    tmp_path: Path,
) -> None:
    a = blosc_array(zarr_format, shards, tmp_path / "a" if in_files else None)
    crop = (slice(40, 80), slice(3, 50), slice(10, 64))  # rows 40-63 of chunk 0, rows 0-15 of chunk 1
    np.testing.assert_array_equal(a[crop], DATA[crop])
    # chunk 0 from row 40 to its end, chunk 1 from its start to row 15: both parts skip blocks
    assert sorted(parts) == sorted(
        [
            (((40 * 64 + 3) * 64 + 10) * 2, ((63 * 64 + 49) * 64 + 64) * 2, True),
            ((3 * 64 + 10) * 2, ((15 * 64 + 49) * 64 + 64) * 2, True),
        ]
    )
    # Files of chunks are read in part; a shard's inner chunks come in its coalesced ranges.
    assert parts.read_from_store == (2 if in_files and shards is None else 0)


def test_a_batch_decodes_what_all_its_crops_need(parts: Parts) -> None:
    a = blosc_array()
    crops = [(slice(60, 70), slice(0, 8), slice(0, 8)), (slice(62, 72), slice(56, 64), slice(56, 64))]
    np.testing.assert_array_equal(a.read_batch(crops), np.stack([DATA[c] for c in crops]))
    row = 64 * 64 * 2
    assert (0, 7 * row + 64 * 64 * 2, True) in parts  # chunk 1 once, to the last element either crop needs


def test_damage_outside_the_part_is_not_seen_by_a_crop_and_is_by_a_read_of_it() -> None:
    a = blosc_array()
    frame = bytearray(bytes(a.store.get("c/1/0/0")))
    nblocks = 64 * 64 * 64 * 2 // blocksize_of(bytes(frame))
    assert nblocks >= 4
    starts = struct.unpack_from(f"<{nblocks}i", frame, BLOSC_HEADER_NBYTES)
    last = starts[-1]
    frame[last : last + 4] = struct.pack("<i", 10**8)  # the last block's first stream size
    a.store.set("c/1/0/0", bytes(frame))
    np.testing.assert_array_equal(a[64:66], DATA[64:66])
    with pytest.raises(CorruptChunkError, match="c/1/0/0"):
        a[64:128]
