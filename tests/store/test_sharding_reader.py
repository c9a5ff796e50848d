"""The shard reader (gpuzarr.store.sharding): index validation, index reads, coalesced reads."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from gpuzarr.codecs.base import ChunkSpec
from gpuzarr.codecs.registry import codec_from_json
from gpuzarr.codecs.sharding import ShardingCodec
from gpuzarr.errors import CorruptChunkError
from gpuzarr.store import LocalStore, MemoryStore
from gpuzarr.store.base import Buffer, ByteRange, Store
from gpuzarr.store.sharding import (
    COALESCE_GAP_BYTES,
    EMPTY,
    WHOLE_SHARD_FRACTION,
    ShardIndex,
    ShardLayout,
    encode_shard,
    fetch_inner_chunks,
    fetch_shard,
    read_inner_chunks,
    read_shard_index,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

KEY = "c/0/0"
INNER_NBYTES = 40_000  # below COALESCE_GAP_BYTES: one skipped chunk still merges
N_INNER = 16


class CountingStore(Store):
    """Wraps a store and records every read request."""

    def __init__(self, inner: Store) -> None:
        super().__init__(read_only=True)
        self.inner = inner
        self.gets: list[ByteRange | None] = []
        self.range_calls: list[list[ByteRange]] = []

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self.gets.append(byte_range)
        return self.inner.get(key, byte_range)

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        self.range_calls.append(list(ranges))
        return self.inner.get_ranges(key, ranges)

    @property
    def n_requests(self) -> int:
        return len(self.gets) + len(self.range_calls)

    def reset(self) -> None:
        self.gets.clear()
        self.range_calls.clear()

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def set(self, key: str, value: Buffer) -> None:
        raise AssertionError("the reader must not write")

    def erase(self, key: str) -> None:
        raise AssertionError("the reader must not write")


def sharding_codec(
    location: str = "end", index_codecs: list[Any] | None = None, shard_shape: tuple[int, int] = (4, 4)
) -> ShardingCodec:
    config: dict[str, Any] = {
        "chunk_shape": [1, 1],
        # A compressor, so that the inner parts these tests store (INNER_NBYTES each) are within
        # what the inner codecs may write for a chunk (an index entry claiming more is refused).
        "codecs": [{"name": "bytes"}, {"name": "zstd"}],
        "index_location": location,
    }
    if index_codecs is not None:
        config["index_codecs"] = index_codecs
    codec = codec_from_json({"name": "sharding_indexed", "configuration": config})
    resolved = codec.resolve(ChunkSpec(shard_shape, np.dtype(np.uint8), 0))
    assert isinstance(resolved, ShardingCodec)
    return resolved


def part(i: int) -> bytes:
    return bytes([i]) * INNER_NBYTES


def make_shard(
    codec: ShardingCodec, present: Sequence[int] = range(N_INNER)
) -> tuple[CountingStore, ShardLayout, ShardIndex]:
    parts: list[Buffer | None] = [part(i) if i in present else None for i in range(N_INNER)]
    memory = MemoryStore()
    memory.set(KEY, encode_shard(parts, codec.layout))
    store = CountingStore(memory)
    layout = codec.layout
    index = read_shard_index(store, KEY, layout)
    assert index is not None
    store.reset()
    return store, layout, index


# -- ShardIndex validation ---------------------------------------------------------------------


def table(*entries: tuple[int, int]) -> np.ndarray[Any, Any]:
    return np.array(entries, dtype=np.uint64)


def test_index_from_array() -> None:
    index = ShardIndex.from_array(table((0, 10), (10, 5), (int(EMPTY), int(EMPTY))), 15, KEY)
    assert not index.is_empty(0) and not index.is_empty(1) and index.is_empty(2)
    assert not index.all_empty
    assert ShardIndex.empty(3).all_empty
    assert index.table((3,)).shape == (3, 2)


@pytest.mark.parametrize("entry", [(int(EMPTY), 4), (0, int(EMPTY))])
def test_half_empty_entry(entry: tuple[int, int]) -> None:
    with pytest.raises(CorruptChunkError, match="entry 1 is half empty") as info:
        ShardIndex.from_array(table((0, 4), entry), 100, KEY)
    assert info.value.key == KEY


@pytest.mark.parametrize("entry", [(90, 11), (100, 1), (2**40, 1), (0, 101)])
def test_entry_past_the_shard(entry: tuple[int, int]) -> None:
    with pytest.raises(CorruptChunkError, match=r"entry 1 .*outside the shard of 100 bytes") as info:
        ShardIndex.from_array(table((0, 4), entry), 100, KEY)
    assert info.value.key == KEY


def test_entry_exactly_at_the_end_is_fine() -> None:
    ShardIndex.from_array(table((0, 4), (90, 10), (100, 0)), 100, KEY)


@pytest.mark.parametrize("entry", [(2**64 - 2, 10), (2**63, 2**63), (10, 2**64 - 5)])
def test_entry_overflowing_uint64(entry: tuple[int, int]) -> None:
    for shard_nbytes in (2**63, None):  # the shard's size known, or not yet (a suffix read)
        with pytest.raises(CorruptChunkError, match=r"ends past 2\*\*64"):
            ShardIndex.from_array(table(entry), shard_nbytes, KEY)


def test_an_entry_larger_than_an_inner_chunk_is_ever_written_is_refused() -> None:
    """An index entry is untrusted bytes: one claiming more than an inner chunk's codecs
    write would size a read (and its memory) by itself."""
    ShardIndex.from_array(table((0, 100)), None, KEY, max_inner_nbytes=100)
    with pytest.raises(CorruptChunkError, match=r"entry 1 claims 2000000000 bytes, more than an inner chunk's"):
        ShardIndex.from_array(table((0, 100), (100, 2 * 10**9)), None, KEY, max_inner_nbytes=100)


# -- read_shard_index --------------------------------------------------------------------------


def test_index_at_end_is_one_suffix_request() -> None:
    codec = sharding_codec("end")
    store, layout, _ = make_shard(codec, present=[0, 3])
    index = read_shard_index(store, KEY, layout)
    assert index is not None
    assert store.gets == [ByteRange.suffix(layout.index_nbytes)]
    assert store.range_calls == []
    assert [i for i in range(N_INNER) if not index.is_empty(i)] == [0, 3]
    assert layout.index_nbytes == 16 * N_INNER + 4


def test_index_at_start_is_one_prefix_request() -> None:
    codec = sharding_codec("start")
    store, layout, _ = make_shard(codec, present=[1])
    index = read_shard_index(store, KEY, layout)
    assert index is not None
    assert store.gets == [ByteRange(0, layout.index_nbytes)]
    assert int(index.offsets[1]) == layout.index_nbytes


def test_absent_shard_is_none() -> None:
    store = CountingStore(MemoryStore())
    assert read_shard_index(store, KEY, sharding_codec().layout) is None


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("keep", [0, 1, 100])
def test_shard_shorter_than_its_index(location: str, keep: int) -> None:
    codec = sharding_codec(location)
    memory = MemoryStore()
    memory.set(KEY, encode_shard([part(0)] + [None] * (N_INNER - 1), codec.layout)[:keep])
    with pytest.raises(CorruptChunkError, match="shorter") as info:
        read_shard_index(memory, KEY, codec.layout)
    assert info.value.key == KEY


def test_truncated_shard_fails_index_checksum() -> None:
    codec = sharding_codec("end")
    memory = MemoryStore()
    memory.set(KEY, encode_shard([part(i) for i in range(N_INNER)], codec.layout)[:-7])
    with pytest.raises(CorruptChunkError, match="shard index") as info:
        read_shard_index(memory, KEY, codec.layout)
    assert info.value.key == KEY


def test_index_without_checksum_still_bounds_checked() -> None:
    codec = sharding_codec("end", index_codecs=[{"name": "bytes", "configuration": {"endian": "little"}}])
    assert codec.layout.index_nbytes == 16 * N_INNER
    bad = ShardIndex.empty(N_INNER)
    bad.offsets[2], bad.nbytes[2] = 2**64 - 10, 20  # wraps around
    memory = MemoryStore()
    memory.set(KEY, codec.layout.encode_index(bad.table(codec.chunks_per_shard)))
    with pytest.raises(CorruptChunkError, match="entry 2") as info:
        read_shard_index(memory, KEY, codec.layout)
    assert info.value.key == KEY


def test_index_from_whole_shard() -> None:
    codec = sharding_codec("end")
    shard = encode_shard([part(i) if i % 2 else None for i in range(N_INNER)], codec.layout)
    index = codec.layout.index_from_shard(shard, KEY)
    assert [i for i in range(N_INNER) if not index.is_empty(i)] == list(range(1, N_INNER, 2))
    # An entry pointing past the end of a shard held whole is caught by the index check.
    bad = ShardIndex.empty(N_INNER)
    bad.offsets[0], bad.nbytes[0] = 0, 1000
    with pytest.raises(CorruptChunkError, match="outside the shard") as info:
        codec.layout.index_from_shard(b"12345" + codec.layout.encode_index(bad.table(codec.chunks_per_shard)), KEY)
    assert info.value.key == KEY


# -- read_inner_chunks -------------------------------------------------------------------------


def as_bytes(blob: Buffer | None) -> bytes | None:
    return None if blob is None else bytes(blob)


@pytest.mark.parametrize("location", ["start", "end"])
def test_one_inner_chunk_is_one_range(location: str) -> None:
    store, layout, index = make_shard(sharding_codec(location))
    blobs = read_inner_chunks(store, KEY, index, [5], layout)
    assert [as_bytes(b) for b in blobs] == [part(5)]
    assert store.gets == []
    assert store.range_calls == [[ByteRange(int(index.offsets[5]), INNER_NBYTES)]]


def test_adjacent_chunks_are_merged() -> None:
    store, layout, index = make_shard(sharding_codec())
    blobs = read_inner_chunks(store, KEY, index, [3, 1, 2], layout)
    assert [as_bytes(b) for b in blobs] == [part(3), part(1), part(2)]
    assert store.n_requests == 1
    assert store.range_calls == [[ByteRange(int(index.offsets[1]), 3 * INNER_NBYTES)]]


def test_small_gaps_are_merged_large_gaps_split() -> None:
    assert INNER_NBYTES <= COALESCE_GAP_BYTES < 2 * INNER_NBYTES
    store, layout, index = make_shard(sharding_codec())
    # 0 and 2: one chunk between them (merged); 2 and 5: two chunks between them (split).
    blobs = read_inner_chunks(store, KEY, index, [0, 2, 5], layout)
    assert [as_bytes(b) for b in blobs] == [part(0), part(2), part(5)]
    assert store.n_requests == 1
    assert store.range_calls == [[ByteRange(0, 3 * INNER_NBYTES), ByteRange(5 * INNER_NBYTES, INNER_NBYTES)]]


def test_empty_inner_chunks_need_no_request() -> None:
    store, layout, index = make_shard(sharding_codec(), present=[0, 1])
    blobs = read_inner_chunks(store, KEY, index, [7, 9], layout)
    assert blobs == [None, None]
    assert store.n_requests == 0
    blobs = read_inner_chunks(store, KEY, index, [7, 1, 9], layout)
    assert [as_bytes(b) for b in blobs] == [None, part(1), None]
    assert store.n_requests == 1


def test_most_of_the_shard_is_one_whole_read() -> None:
    store, layout, index = make_shard(sharding_codec())
    wanted = [*range(0, N_INNER, 2), 15]  # 9 of 16, gaps too wide to merge all
    blobs = read_inner_chunks(store, KEY, index, wanted, layout)
    assert [as_bytes(b) for b in blobs] == [part(i) for i in wanted]
    assert store.gets == [None]
    assert store.range_calls == []


def test_wanted_order_and_duplicates_are_kept() -> None:
    store, layout, index = make_shard(sharding_codec())
    blobs = read_inner_chunks(store, KEY, index, [9, 4, 9], layout)
    assert [as_bytes(b) for b in blobs] == [part(9), part(4), part(9)]


@pytest.mark.parametrize("wanted", [[N_INNER - 1], list(range(N_INNER))])
def test_shard_shrunk_after_its_index_was_read(wanted: list[int]) -> None:
    store, layout, index = make_shard(sharding_codec())
    memory = store.inner
    value = memory.get(KEY)
    assert value is not None
    memory.set(KEY, bytes(value)[: 3 * INNER_NBYTES])
    with pytest.raises(CorruptChunkError, match="past the shard end") as info:
        read_inner_chunks(store, KEY, index, wanted, layout)
    assert info.value.key == KEY


@pytest.mark.parametrize("where", ["file", "memory"])
@pytest.mark.parametrize("wanted", [[13], [2, 13], list(range(20))])
def test_an_empty_entry_past_an_open_shards_end(tmp_path: Path, wanted: list[int], where: str) -> None:
    """An entry of 0 bytes at an offset past the end of a shard file would read as nothing
    where the wanted chunks are read in ranges (fewer than half of the shard's); a snapshot of
    the open file (or of the value in memory) knows the size, and the entry is refused before
    any read, the first bad one named (one entry, a few, or many at once)."""
    inner = [{"name": "bytes"}, {"name": "zstd"}]  # room for the parts stored (INNER_NBYTES)
    codec = codec_from_json(
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 1], "codecs": inner}}
    ).resolve(ChunkSpec((8, 8), np.dtype(np.uint8), 0))
    assert isinstance(codec, ShardingCodec)
    layout = codec.layout
    assert len(wanted) < WHOLE_SHARD_FRACTION * layout.n_inner  # read in ranges, not whole
    value = encode_shard([part(i % 256) for i in range(layout.n_inner)], layout)
    store: Store = LocalStore(tmp_path) if where == "file" else MemoryStore()
    store.set(KEY, value)
    with store.snapshot(KEY) as shard:
        index = read_shard_index(shard, KEY, layout)
        assert index is not None and shard.size == len(value)
        offsets, nbytes = index.offsets.copy(), index.nbytes.copy()
        offsets[13], nbytes[13] = len(value) + 100, 0
        refused = rf"inner chunk 13 .*nbytes 0\) lies past the shard end \({len(value)} bytes\)"
        with pytest.raises(CorruptChunkError, match=refused) as info:
            read_inner_chunks(shard, KEY, ShardIndex(offsets, nbytes), wanted, layout)
        assert info.value.key == KEY
        good = read_inner_chunks(shard, KEY, index, wanted, layout)
        assert [as_bytes(b) for b in good] == [part(i) for i in wanted]


@pytest.mark.parametrize("wanted", [[3], list(range(N_INNER))])
def test_shard_vanished_after_its_index_was_read(wanted: list[int]) -> None:
    store, layout, index = make_shard(sharding_codec())
    store.inner.erase(KEY)
    with pytest.raises(CorruptChunkError, match="disappeared") as info:
        read_inner_chunks(store, KEY, index, wanted, layout)
    assert info.value.key == KEY


# -- the shard format: split and encode ---------------------------------------------------------


@pytest.mark.parametrize("location", ["start", "end"])
def test_split_inverts_encode_shard(location: str) -> None:
    codec = sharding_codec(location)
    parts: list[Buffer | None] = [part(i) if i % 3 else None for i in range(N_INNER)]
    shard = encode_shard(parts, codec.layout)
    split = codec.layout.split(shard, KEY)
    assert [None if p is None else bytes(p) for p in split] == parts


# -- fetch_shard / fetch_inner_chunks: the one fetch routine of both readers ---------------------


def test_fetch_inner_chunks_of_several_shards() -> None:
    codec = sharding_codec()
    memory = MemoryStore()
    memory.set("c/0/0", encode_shard([part(i) for i in range(N_INNER)], codec.layout))
    memory.set("c/0/1", encode_shard([None] * (N_INNER - 1) + [part(9)], codec.layout))
    store = CountingStore(memory)
    got = fetch_inner_chunks(store, {"c/0/0": [3, 1], "c/0/1": [0, 15], "c/1/0": [2]}, lambda key: codec.layout)
    assert {k: None if v is None else bytes(v) for k, v in got.items()} == {
        ("c/0/0", 3): part(3),
        ("c/0/0", 1): part(1),
        ("c/0/1", 0): None,  # empty in the index
        ("c/0/1", 15): part(9),
        ("c/1/0", 2): None,  # the shard is missing
    }


def test_fetch_shard_reads_each_index_once_with_a_cache() -> None:
    store, layout, _ = make_shard(sharding_codec())
    cache: dict[str, ShardIndex | None] = {}
    first = fetch_shard(store, KEY, [0], layout, index_cache=cache)
    index_reads = len(store.gets)
    second = fetch_shard(store, KEY, [5], layout, index_cache=cache)
    assert bytes(first[0]) == part(0) and bytes(second[0]) == part(5)
    assert KEY in cache and len(store.gets) == index_reads  # the second fetch read no index
    store.reset()
    fetch_shard(store, KEY, [5], layout)
    assert len(store.gets) == 1  # without a cache, the index is read again


def test_fetch_shard_hands_the_index_to_a_custom_reader() -> None:
    store, layout, _ = make_shard(sharding_codec(), present=[0, 2])
    seen: list[tuple[str, list[int]]] = []

    def spans(store: Store, key: str, index: ShardIndex, wanted: Sequence[int], layout: ShardLayout) -> list[Any]:
        seen.append((key, list(wanted)))
        return [None if index.is_empty(i) else (int(index.offsets[i]), int(index.nbytes[i])) for i in wanted]

    got = fetch_inner_chunks(store, {KEY: [2, 1]}, lambda key: layout, read_chunks=spans)
    assert seen == [(KEY, [2, 1])]
    assert got[KEY, 1] is None and got[KEY, 2] == (INNER_NBYTES, INNER_NBYTES)
    assert not store.range_calls  # the custom reader replaced the byte-range reads


# -- one version per shard read ------------------------------------------------------------------


@pytest.mark.parametrize("location", ["end", "start"])
def test_a_shard_replaced_between_index_and_chunks_is_read_as_one_version(
    store: Store, location: str
) -> None:
    # The writer replaces the shard right after its index was read, with a version whose inner
    # chunks have other sizes: the index and the bytes must still come from one version.
    codec = sharding_codec(location)
    old: list[Buffer | None] = [bytes([1]) * 10 for _ in range(N_INNER)]
    new: list[Buffer | None] = [bytes([2]) * (10 + i) for i in range(N_INNER)]
    store.set(KEY, encode_shard(old, codec.layout))
    replaced = []

    def decode_then_replace(raw: Buffer, key: str) -> np.ndarray[Any, Any]:
        table = codec.layout.decode_index(raw, key)
        if not replaced:
            store.set(KEY, encode_shard(new, codec.layout))
            replaced.append(True)
        return table

    layout = replace(codec.layout, decode_index=decode_then_replace)
    for wanted in ([3, 5], list(range(N_INNER))):  # coalesced ranges, then the whole shard
        replaced.clear()
        store.set(KEY, encode_shard(old, codec.layout))
        got = fetch_shard(store, KEY, wanted, layout)
        assert replaced and [bytes(b) for b in got] == [old[i] for i in wanted]
