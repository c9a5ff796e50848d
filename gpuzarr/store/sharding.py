"""Reading shards: the shard index and byte-range reads of the inner chunks a selection needs.

Sharding lives on the store side as a reader (not as a codec doing I/O): the engine asks for
inner chunks by their position in the shard, this module fetches the index with one byte-range
request (a suffix when the index is at the end), validates it against the shard's size, then
fetches the wanted inner chunks with coalesced range requests (or the whole shard in one request
when most of it is wanted). The bytes then go through the ordinary batched codec chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from .base import Buffer, ByteRange, Store

EMPTY = np.uint64(2**64 - 1)

#: Two wanted byte ranges closer than this are fetched as one request.
COALESCE_GAP_BYTES = 64 * 1024
#: When at least this fraction of a shard's inner chunks is wanted, read the shard whole.
WHOLE_SHARD_FRACTION = 0.5


@dataclass(frozen=True)
class ShardIndex:
    """Offsets and byte counts of every inner chunk of one shard, in C order."""

    offsets: np.ndarray[Any, np.dtype[np.uint64]]
    nbytes: np.ndarray[Any, np.dtype[np.uint64]]

    @classmethod
    def from_array(cls, table: np.ndarray[Any, Any], shard_nbytes: int, key: str) -> ShardIndex:
        """Validate a decoded ``(..., 2)`` uint64 index table against the shard size."""
        flat = np.asarray(table, dtype=np.uint64).reshape(-1, 2)
        offsets, nbytes = flat[:, 0].copy(), flat[:, 1].copy()
        empty_off, empty_len = offsets == EMPTY, nbytes == EMPTY
        if np.any(empty_off != empty_len):
            i = int(np.flatnonzero(empty_off != empty_len)[0])
            raise CorruptChunkError(key, f"shard index entry {i} is half empty")
        present = ~empty_off
        ends = offsets[present] + nbytes[present]
        # Overflow of offset + nbytes wraps around: compare against the offset too.
        bad = (ends > np.uint64(shard_nbytes)) | (ends < offsets[present])
        if np.any(bad):
            i = int(np.flatnonzero(present)[np.flatnonzero(bad)[0]])
            raise CorruptChunkError(
                key,
                f"shard index entry {i} (offset {int(offsets[i])}, nbytes {int(nbytes[i])}) "
                f"points outside the shard of {shard_nbytes} bytes",
            )
        return cls(offsets, nbytes)

    @classmethod
    def empty(cls, n: int) -> ShardIndex:
        return cls(np.full(n, EMPTY, np.uint64), np.full(n, EMPTY, np.uint64))

    def is_empty(self, i: int) -> bool:
        return bool(self.offsets[i] == EMPTY)

    @property
    def all_empty(self) -> bool:
        return bool(np.all(self.offsets == EMPTY))

    def table(self, chunks_per_shard: tuple[int, ...]) -> np.ndarray[Any, Any]:
        return np.stack([self.offsets, self.nbytes], axis=-1).reshape((*chunks_per_shard, 2))


@dataclass(frozen=True)
class ShardLayout:
    """Where a shard's index is and how to decode it (built by the sharding codec)."""

    index_nbytes: int
    index_at_end: bool
    chunks_per_shard: tuple[int, ...]
    decode_index: Callable[[Buffer, str], np.ndarray[Any, Any]]

    @property
    def n_inner(self) -> int:
        n = 1
        for c in self.chunks_per_shard:
            n *= c
        return n

    def index_from_shard(self, shard: Buffer, key: str) -> ShardIndex:
        """The index of a shard held whole in memory."""
        raw = memoryview(shard).cast("B")
        if len(raw) < self.index_nbytes:
            raise CorruptChunkError(
                key, f"shard of {len(raw)} bytes is shorter than its {self.index_nbytes}-byte index"
            )
        part = raw[len(raw) - self.index_nbytes :] if self.index_at_end else raw[: self.index_nbytes]
        return ShardIndex.from_array(self.decode_index(part, key), len(raw), key)


def read_shard_index(store: Store, key: str, layout: ShardLayout) -> ShardIndex | None:
    """Fetch and validate a shard's index with one request; None when the shard is absent."""
    if layout.index_at_end:
        request = ByteRange.suffix(layout.index_nbytes)
    else:
        request = ByteRange(0, layout.index_nbytes)
    raw = store.get(key, request)
    if raw is None:
        return None
    if len(raw) != layout.index_nbytes:
        raise CorruptChunkError(
            key, f"shard is shorter ({len(raw)} bytes) than its {layout.index_nbytes}-byte index"
        )
    table = layout.decode_index(raw, key)
    # The shard's size is unknown from a suffix read; bounds are checked when ranges are read.
    return ShardIndex.from_array(table, 2**63, key)


def read_inner_chunks(
    store: Store, key: str, index: ShardIndex, wanted: Sequence[int], layout: ShardLayout
) -> list[Buffer | None]:
    """The encoded bytes of inner chunks ``wanted`` (None where the index says empty)."""
    present = [i for i in wanted if not index.is_empty(i)]
    out: dict[int, Buffer | None] = {i: None for i in wanted}
    if not present:
        return [out[i] for i in wanted]
    if len(present) >= WHOLE_SHARD_FRACTION * layout.n_inner:
        shard = store.get(key)
        if shard is None:
            raise CorruptChunkError(key, "shard disappeared while it was being read")
        view = memoryview(shard).cast("B")
        for i in present:
            start, n = int(index.offsets[i]), int(index.nbytes[i])
            if start + n > len(view):
                raise CorruptChunkError(
                    key, f"inner chunk {i} (offset {start}, nbytes {n}) lies past the shard end "
                    f"({len(view)} bytes)"
                )
            out[i] = view[start : start + n]
        return [out[i] for i in wanted]
    spans = sorted((int(index.offsets[i]), int(index.nbytes[i]), i) for i in present)
    groups: list[list[tuple[int, int, int]]] = [[spans[0]]]
    for span in spans[1:]:
        last = groups[-1][-1]
        group_start = groups[-1][0][0]
        if span[0] - (last[0] + last[1]) <= COALESCE_GAP_BYTES and span[0] >= group_start:
            groups[-1].append(span)
        else:
            groups.append([span])
    requests = []
    for g in groups:
        start = g[0][0]
        stop = max(s + n for s, n, _ in g)
        requests.append(ByteRange(start, stop - start))
    blobs = store.get_ranges(key, requests)
    if blobs is None:
        raise CorruptChunkError(key, "shard disappeared while it was being read")
    for g, r, blob in zip(groups, requests, blobs, strict=True):
        view = memoryview(blob).cast("B")
        for start, n, i in g:
            lo = start - r.offset
            if lo + n > len(view):
                raise CorruptChunkError(
                    key, f"inner chunk {i} (offset {start}, nbytes {n}) lies past the shard end"
                )
            out[i] = view[lo : lo + n]
    return [out[i] for i in wanted]
