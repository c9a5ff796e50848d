"""ShardEdit (gpuzarr.store.sharding): a shard rebuilt from the stored one and the inner chunks a
write replaces, whatever order and gaps the stored shard has."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuzarr.errors import CorruptChunkError
from gpuzarr.store.sharding import ShardEdit, ShardIndex, encode_shard

from .test_sharding_reader import KEY, N_INNER, sharding_codec

if TYPE_CHECKING:
    from gpuzarr.store.base import Buffer
    from gpuzarr.store.sharding import ShardLayout

Parts = list["bytes | None"]


def scattered_shard(parts: Parts, layout: ShardLayout, order: list[int], gap: int) -> bytes:
    """A shard holding ``parts`` as another writer may have left it: its inner chunks in
    ``order`` (not C order), ``gap`` bytes of dead space before each, equal parts stored once
    and pointed at by every entry that holds them."""
    body = bytearray()
    first = 0 if layout.index_at_end else layout.index_nbytes
    at: dict[bytes, int] = {}
    index = ShardIndex.empty(layout.n_inner)
    for i in order:
        data = parts[i]
        if data is None:
            continue
        if data not in at:
            body += b"\xee" * gap
            at[data] = first + len(body)
            body += data
        index.offsets[i], index.nbytes[i] = at[data], len(data)
    encoded_index = layout.encode_index(index.table(layout.chunks_per_shard))
    return bytes(body) + encoded_index if layout.index_at_end else encoded_index + bytes(body)


def as_parts(shard: bytes, layout: ShardLayout) -> Parts:
    return [None if p is None else bytes(p) for p in layout.split(shard, KEY)]


part_bytes = st.one_of(st.none(), st.binary(min_size=0, max_size=12))


@settings(max_examples=300, deadline=None)
@given(
    old=st.lists(part_bytes, min_size=N_INNER, max_size=N_INNER),
    edits=st.dictionaries(st.integers(0, N_INNER - 1), part_bytes, max_size=N_INNER),
    order=st.permutations(range(N_INNER)),
    gap=st.integers(0, 3),
    location=st.sampled_from(["start", "end"]),
)
def test_the_rebuilt_shard_is_the_old_one_with_the_edits(
    old: Parts, edits: dict[int, bytes | None], order: list[int], gap: int, location: str
) -> None:
    layout = sharding_codec(location).layout
    edit = ShardEdit(layout)
    edit.keep_shard(scattered_shard(old, layout, order, gap), KEY)
    assert [None if edit[i] is None else bytes(edit[i]) for i in range(N_INNER)] == old  # type: ignore[arg-type]
    for i, data in edits.items():
        edit[i] = data
    expected = [edits.get(i, data) if i in edits else data for i, data in enumerate(old)]
    shard = edit.encode()
    if all(data is None for data in expected):
        assert shard is None
        return
    assert shard is not None
    # Packed in C order, whatever the old shard's order and gaps: what encode_shard writes.
    assert shard == encode_shard(expected, layout)
    assert as_parts(shard, layout) == expected


@pytest.mark.parametrize("location", ["start", "end"])
def test_kept_parts_read_by_ranges(location: str) -> None:
    layout = sharding_codec(location).layout
    edit = ShardEdit(layout)
    old: list[Buffer | None] = [bytes([i]) * 3 if i % 2 else None for i in range(N_INNER)]
    edit.keep_parts(old)
    edit[1], edit[2] = None, b"new"
    expected = [None, None, b"new", *old[3:]]
    shard = edit.encode()
    assert shard == encode_shard(expected, layout)


def test_a_shard_left_empty_is_none() -> None:
    layout = sharding_codec().layout
    edit = ShardEdit(layout)
    assert edit.encode() is None
    edit.keep_shard(encode_shard([b"a" if i == 5 else None for i in range(N_INNER)], layout), KEY)
    edit[5] = None
    assert edit.encode() is None


@pytest.mark.parametrize("location", ["start", "end"])
def test_an_edit_copies_the_kept_neighbours_as_one_slice_each(location: str) -> None:
    """A shard of 10^5 inner chunks with one replaced: the kept ones before and after it are
    one slice each of the old shard, not a piece per inner chunk."""
    layout = sharding_codec(location, shard_shape=(1000, 100)).layout
    old_parts = [bytes([i % 251]) * (1 + i % 3) for i in range(layout.n_inner)]
    old = encode_shard(old_parts, layout)
    edit = ShardEdit(layout)
    edit.keep_shard(old, KEY)
    edit[54_321] = b"new"
    rebuilt = edit.rebuild()
    assert rebuilt is not None
    _, pieces = rebuilt
    assert [bytes(p) for p in pieces][1] == b"new"
    assert len(pieces) == 3
    expected = [b"new" if i == 54_321 else data for i, data in enumerate(old_parts)]
    assert edit.encode() == encode_shard(expected, layout)


def test_a_corrupt_stored_shard_names_its_key() -> None:
    layout = sharding_codec().layout
    shard = bytearray(encode_shard([b"abc"] * N_INNER, layout))
    table = np.frombuffer(bytes(shard[-layout.index_nbytes :][:-4]), dtype=np.uint64).copy()
    table[0] = 10**9  # an offset past the shard
    shard[-layout.index_nbytes :] = layout.encode_index(table.reshape((*layout.chunks_per_shard, 2)))
    with pytest.raises(CorruptChunkError, match=KEY):
        ShardEdit(layout).keep_shard(bytes(shard), KEY)
