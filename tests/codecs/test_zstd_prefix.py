"""Decoding only the top of a zstd chunk (gpuzarr.codecs.zstd.decode_zstd_prefix): what a crop
of a chunk's first rows reads equals NumPy, the prefix is used only where it saves a block and
the frame allows it, and everything else falls back to the full, checked decode."""

from __future__ import annotations

import threading
from typing import Any

import numcodecs
import numpy as np
import pytest

import gpuzarr
from gpuzarr.codecs import zstd as zstd_module
from gpuzarr.codecs.zstd import ZSTD_BLOCK_MAX, decode_zstd_prefix
from gpuzarr.errors import CorruptChunkError

zstandard = pytest.importorskip("zstandard")

SHAPE = (64, 64, 64)  # one 512 KiB uint16 chunk: four 128 KiB blocks
TOTAL = 64 * 64 * 64 * 2
DATA = np.random.default_rng(5).integers(0, 1000, SHAPE, dtype=np.uint16)


def frame(checksum: bool = False) -> bytes:
    return bytes(numcodecs.Zstd(level=1, checksum=checksum).encode(DATA.tobytes()))


@pytest.mark.parametrize("nbytes", [1, 4096, TOTAL // 4, TOTAL // 2 + 17, TOTAL * 5 // 8])
def test_a_prefix_equals_the_start_of_the_full_decode(nbytes: int) -> None:
    out = np.full(nbytes, 0xAB, np.uint8)
    assert decode_zstd_prefix(frame(), out, TOTAL)
    assert out.tobytes() == DATA.tobytes()[:nbytes]


@pytest.mark.parametrize("nbytes", [TOTAL * 5 // 8 + 1, TOTAL - ZSTD_BLOCK_MAX, TOTAL])
def test_no_prefix_where_streaming_would_cost_as_much_as_decoding_all(nbytes: int) -> None:
    assert not decode_zstd_prefix(frame(), np.empty(nbytes, np.uint8), TOTAL)


def test_no_prefix_where_not_even_a_block_is_skipped() -> None:
    small = numcodecs.Zstd(level=1).encode(DATA[:16].tobytes())  # 128 KiB: one block
    assert not decode_zstd_prefix(small, np.empty(1024, np.uint8), 16 * 64 * 64 * 2)


def test_no_prefix_of_a_frame_with_a_content_checksum() -> None:
    # Only a full decode verifies the checksum.
    assert not decode_zstd_prefix(frame(checksum=True), np.empty(4096, np.uint8), TOTAL)


@pytest.mark.parametrize("total", [TOTAL - 2, TOTAL * 2])
def test_no_prefix_of_a_frame_declaring_another_size(total: int) -> None:
    assert not decode_zstd_prefix(frame(), np.empty(4096, np.uint8), total)


@pytest.mark.parametrize("keep", [0, 5, 100, 2000])
def test_a_truncated_or_zeroed_frame_is_left_to_the_full_decode(keep: int) -> None:
    raw = frame()
    assert not decode_zstd_prefix(raw[:keep], np.empty(4096, np.uint8), TOTAL)
    zeroed = raw[:keep] + bytes(len(raw) - keep)
    assert not decode_zstd_prefix(zeroed, np.empty(TOTAL // 2, np.uint8), TOTAL)


def test_without_zstandard_nothing_is_decoded_partly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zstd_module, "_stream_decompressor", lambda: None)
    assert not decode_zstd_prefix(frame(), np.empty(4096, np.uint8), TOTAL)


def test_each_thread_has_its_own_decompressor() -> None:
    mine = zstd_module._stream_decompressor()
    theirs: list[object] = []
    t = threading.Thread(target=lambda: theirs.append(zstd_module._stream_decompressor()))
    t.start()
    t.join()
    assert mine is zstd_module._stream_decompressor()
    assert theirs[0] is not mine


# -- through the read engine -------------------------------------------------------------------------


def zstd_array(checksum: bool = False, shards: tuple[int, ...] | None = None) -> gpuzarr.Array:
    x = np.concatenate([DATA, DATA[::-1]])  # two chunks along the first axis
    codecs = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1, "checksum": checksum}},
    ]
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=x.shape, dtype="uint16", chunks=SHAPE, shards=shards, codecs=codecs)
    a[...] = x
    return a


@pytest.fixture
def prefixes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """(prefix size, decoded partly) of each prefix asked for."""
    seen: list[tuple[int, bool]] = []
    decode = zstd_module.decode_zstd_prefix

    def recording(data, out, total):  # type: ignore[no-untyped-def]
        done = decode(data, out, total)
        seen.append((out.nbytes, done))
        return done

    monkeypatch.setattr(zstd_module, "decode_zstd_prefix", recording)
    return seen


@pytest.mark.parametrize("shards", [None, (128, 64, 64)], ids=["chunks", "shards"])
def test_a_crop_of_a_chunks_top_rows_decodes_only_them(
    prefixes: list[tuple[int, bool]], shards: tuple[int, ...] | None
) -> None:
    a = zstd_array(shards=shards)
    x = np.concatenate([DATA, DATA[::-1]])
    crop = (slice(40, 80), slice(3, 50), slice(10, 64))  # rows 40-63 of chunk 0, rows 0-15 of chunk 1
    np.testing.assert_array_equal(a[crop], x[crop])
    # chunk 1 is needed up to the last element of its row 15: (15 * 64 + 49) * 64 + 63; chunk 0
    # to its last rows, too close to its end for a prefix to save a block: never asked for
    assert prefixes == [(((15 * 64 + 49) * 64 + 64) * 2, True)]


#: a 320 KiB chunk: under 8/3 of a block, so the rule that a whole block must be skipped, not the
#: 5/8 limit, decides between 192 KiB and 200 KiB
SMALL_TOTAL = 320 * 1024


@pytest.mark.parametrize(
    ("stop", "total", "pays"),
    [
        (TOTAL // 4, TOTAL, True),
        (TOTAL * 5 // 8, TOTAL, True),
        (TOTAL * 5 // 8 + 1, TOTAL, False),
        (SMALL_TOTAL - ZSTD_BLOCK_MAX, SMALL_TOTAL, True),
        (SMALL_TOTAL - ZSTD_BLOCK_MAX + 1, SMALL_TOTAL, False),
        (SMALL_TOTAL * 5 // 8, SMALL_TOTAL, False),
    ],
)
def test_the_codec_says_before_decoding_where_a_prefix_may_pay(stop: int, total: int, pays: bool) -> None:
    codec = zstd_module.ZstdCodec(level=1)
    assert codec.part_may_pay(0, stop, total) is pays
    # the decoder agrees: where the codec says no, it decodes nothing partly
    data = DATA.tobytes()[:total]
    encoded = bytes(numcodecs.Zstd(level=1).encode(data))
    out = np.empty(stop, np.uint8)
    assert decode_zstd_prefix(encoded, out, total) is pays
    if pays:
        assert out.tobytes() == data[:stop]


def test_the_codec_with_checksums_never_asks_for_a_prefix() -> None:
    # Its frames carry a checksum of their content, which only a full decode checks.
    assert not zstd_module.ZstdCodec(level=1, checksum=True).part_may_pay(0, TOTAL // 4, TOTAL)
    assert zstd_module.ZstdCodec(level=1).part_may_pay(0, TOTAL // 4, TOTAL)


def test_a_batch_decodes_what_all_its_crops_need(prefixes: list[tuple[int, bool]]) -> None:
    a = zstd_array()
    x = np.concatenate([DATA, DATA[::-1]])
    crops = [(slice(60, 70), slice(0, 8), slice(0, 8)), (slice(62, 72), slice(56, 64), slice(56, 64))]
    np.testing.assert_array_equal(a.read_batch(crops), np.stack([x[c] for c in crops]))
    # chunk 1 is shared: decoded once, up to the last element either crop needs (row 7, 63, 63)
    assert [p for p in prefixes if p[1]] == [((8 * 64 * 64) * 2, True)]


def test_a_frame_with_a_checksum_is_decoded_whole_and_checked(prefixes: list[tuple[int, bool]]) -> None:
    a = zstd_array(checksum=True)
    x = np.concatenate([DATA, DATA[::-1]])
    np.testing.assert_array_equal(a[60:70, :8, :8], x[60:70, :8, :8])
    assert not any(done for _, done in prefixes)  # the codec does not even ask for one
    raw = bytearray(bytes(a.store.get("c/1/0/0")))
    raw[-1] ^= 0xFF  # the checksum
    a.store.set("c/1/0/0", bytes(raw))
    with pytest.raises(CorruptChunkError, match="c/1/0/0"):
        a[60:70, :8, :8]


def test_damage_after_the_prefix_is_not_seen_by_a_crop_above_it() -> None:
    # What reliability.md says: the rows a crop reads are decoded and correct; a read that
    # decodes the damaged part raises.
    a = zstd_array()
    x = np.concatenate([DATA, DATA[::-1]])
    raw = bytes(a.store.get("c/1/0/0"))
    a.store.set("c/1/0/0", raw[: len(raw) * 3 // 5])  # the last blocks are gone
    np.testing.assert_array_equal(a[64:66], x[64:66])
    with pytest.raises(CorruptChunkError, match="c/1/0/0"):
        a[64:128]


@pytest.mark.parametrize(
    ("codec", "shape", "blocksize"),
    [
        ({"name": "zstd"}, (64, 64, 16), None),  # 128 KiB: no prefix skips a whole block
        ({"name": "zstd"}, (64, 64, 17), None),
        ({"name": "zstd"}, (64, 64, 64), None),
        ({"name": "zstd", "configuration": {"checksum": True}}, (64, 64, 64), None),
        ({"name": "blosc", "configuration": {"cname": "lz4", "blocksize": 8192}}, (64, 64), None),
        ({"name": "blosc", "configuration": {"cname": "lz4"}}, (64, 64), 8192),
        ({"name": "blosc", "configuration": {"cname": "lz4"}}, (64, 64), 6144),
        ({"name": "blosc", "configuration": {"cname": "lz4"}}, (64, 64), 16384),
    ],
)
def test_where_no_part_may_pay_the_pipeline_says_so_at_once(
    codec: dict[str, Any], shape: tuple[int, ...], blocksize: int | None
) -> None:
    """``parts_may_pay`` (asked before finding the part a selection needs) is False only where
    ``part_may_pay`` is False for every part; a Blosc frame's block size, once seen, counts."""
    from gpuzarr.codecs.base import ChunkSpec
    from gpuzarr.codecs.pipeline import CodecPipeline

    spec = ChunkSpec(shape=shape, dtype=np.dtype("<u2"), fill_value=0)
    pipeline = CodecPipeline.from_codecs([{"name": "bytes", "configuration": {"endian": "little"}}, codec], spec)
    if blocksize is not None:
        pipeline.bytes_to_bytes[0]._seen_blocksize[0] = blocksize  # type: ignore[attr-defined]
    total = spec.nbytes
    step = max(total // 64, 1)
    spans = [(start, stop) for start in range(0, total, step) for stop in range(start + step, total + 1, step)]
    any_pays = any(pipeline.part_may_pay(start, stop) for start, stop in spans)
    assert pipeline.parts_may_pay() == any_pays
