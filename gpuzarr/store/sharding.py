"""The shard format (``sharding_indexed``) and its I/O: index, split, encode, fetch.

Sharding lives on the store side as a reader (not as a codec doing I/O), as TensorStore's
``zarr3_sharding_indexed`` kvstore does. This module owns the format:

* :class:`ShardIndex` (offsets and byte counts, validated against the shard size, overflow
  included) and :class:`ShardLayout` (where the index is and the callbacks that decode and encode
  it through the index codec chain, built by ``codecs.sharding.ShardingCodec.layout``);
* :meth:`ShardLayout.split` (a whole shard in memory -> its inner chunks' bytes),
  :func:`encode_shard` (inner chunks' bytes -> a shard) and :class:`ShardEdit` (a stored shard
  with some inner chunks replaced -> the new shard, the others copied as runs of the old one);

and the one fetch routine both readers use, :func:`fetch_inner_chunks`: per shard, the index
with one byte-range request (a suffix when it is at the end; cached per read when the caller
passes a cache), then the wanted inner chunks with coalesced range requests, or the whole shard
in one request when most of it is wanted. The bytes then go through the ordinary codec chain.

A writer may replace a shard between the read of its index and the reads of its inner chunks.
Both go through one :meth:`Store.snapshot` of the shard, so they see one version of it; a shard
rewritten in place meanwhile (``Snapshot.changed``) is read again, a bounded number of times.
``ArrayLayout.shard_of`` maps an array's inner chunk to its shard (addressing), and the CPU
writer (``backends/cpu/write.py``) assembles shards with :class:`ShardEdit`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from ..errors import CorruptChunkError
from .base import BoundedBufferFor, Buffer, ByteRange, Snapshot, Store, get_at_most, sizes_first

EMPTY = np.uint64(2**64 - 1)
_EMPTY_INT = int(EMPTY)

#: Two wanted byte ranges closer than this are fetched as one request.
COALESCE_GAP_BYTES = 64 * 1024
#: When at least this fraction of a shard's inner chunks is wanted, read the shard whole.
WHOLE_SHARD_FRACTION = 0.5
#: Reads of a shard that a writer rewrites in place while it is read, before giving up.
SHARD_READ_ATTEMPTS = 4


#: The largest byte offset of a file (``off_t``): no shard's index entry ends past it.
_LARGEST_OFFSET = 2**63 - 1


@dataclass(frozen=True)
class ShardIndex:
    """Offsets and byte counts of every inner chunk of one shard, in C order."""

    offsets: np.ndarray[Any, np.dtype[np.uint64]]
    nbytes: np.ndarray[Any, np.dtype[np.uint64]]
    #: the version of the shard it was read from (``Snapshot.version``; None: unknown)
    version: Hashable | None = field(default=None, compare=False)

    @classmethod
    def from_array(
        cls, table: np.ndarray[Any, Any], shard_nbytes: int | None, key: str, max_inner_nbytes: int | None = None
    ) -> ShardIndex:
        """Validate a decoded ``(..., 2)`` uint64 index table against the shard size (None:
        not known yet, from a read of the index alone; ranges are checked when they are read)
        and against the largest encoding of an inner chunk (``max_inner_nbytes``, None: no
        bound), so that no entry can ask for more memory than a chunk's codecs ever write."""
        flat = np.asarray(table, dtype=np.uint64).reshape(-1, 2)
        offsets, nbytes = flat[:, 0].copy(), flat[:, 1].copy()
        empty_off, empty_len = offsets == EMPTY, nbytes == EMPTY
        if np.any(empty_off != empty_len):
            i = int(np.flatnonzero(empty_off != empty_len)[0])
            raise CorruptChunkError(key, f"shard index entry {i} is half empty")
        present = ~empty_off
        ends = offsets[present] + nbytes[present]
        # Overflow of offset + nbytes wraps around: compare against the offset too. With the
        # shard's size not known yet, no entry may end past the largest offset a file has.
        wraps = ends < offsets[present]
        limit = _LARGEST_OFFSET if shard_nbytes is None else shard_nbytes
        outside = wraps | (ends > np.uint64(limit))
        if np.any(outside):
            first = np.flatnonzero(outside)[0]
            i = int(np.flatnonzero(present)[first])
            if wraps[first]:
                where = "ends past 2**64"
            elif shard_nbytes is None:
                where = "ends past 2**63 - 1, the largest offset a file has"
            else:
                where = f"points outside the shard of {shard_nbytes} bytes"
            raise CorruptChunkError(
                key, f"shard index entry {i} (offset {int(offsets[i])}, nbytes {int(nbytes[i])}) {where}"
            )
        if max_inner_nbytes is not None:
            large = nbytes[present] > np.uint64(max_inner_nbytes)
            if np.any(large):
                i = int(np.flatnonzero(present)[np.flatnonzero(large)[0]])
                raise CorruptChunkError(
                    key,
                    f"shard index entry {i} claims {int(nbytes[i])} bytes, more than an inner chunk's "
                    f"codecs ever write ({max_inner_nbytes})",
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
    #: ``(encoded index, shard key) -> (*chunks_per_shard, 2)`` uint64 table
    decode_index: Callable[[Buffer, str], np.ndarray[Any, Any]]
    #: ``(*chunks_per_shard, 2)`` uint64 table -> encoded index of ``index_nbytes`` bytes
    encode_index: Callable[[np.ndarray[Any, Any]], bytes]
    #: the largest encoding of an inner chunk (None: its codecs have no bound): no index entry
    #: may claim more, and no shard more than its index and every inner chunk at that size
    max_inner_nbytes: int | None = None

    @property
    def max_nbytes(self) -> int | None:
        """The largest shard its codecs write (None: no bound)."""
        return None if self.max_inner_nbytes is None else self.index_nbytes + self.n_inner * self.max_inner_nbytes

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
        return ShardIndex.from_array(self.decode_index(part, key), len(raw), key, self.max_inner_nbytes)

    def split(self, shard: Buffer, key: str) -> list[memoryview | None]:
        """The encoded bytes of every inner chunk of a shard held whole in memory (C order;
        None where the index says empty)."""
        view = memoryview(shard).cast("B")
        return inner_views(view, self.index_from_shard(view, key), range(self.n_inner))


def inner_views(shard: memoryview, index: ShardIndex, positions: Sequence[int]) -> list[memoryview | None]:
    """Views of the inner chunks at ``positions`` of a shard held whole (None where the index
    says empty); the index must have been checked against this shard's size."""
    # Python ints, taken out of the index once: NumPy scalar indexing of each entry cost a
    # shard of 10^5 inner chunks about 0.18 s a read-modify-write.
    offsets = index.offsets.tolist()
    nbytes = index.nbytes.tolist()
    return [None if offsets[i] == _EMPTY_INT else shard[offsets[i] : offsets[i] + nbytes[i]] for i in positions]


def encode_shard(parts: Sequence[Buffer | None], layout: ShardLayout) -> bytes:
    """A shard from the encoded bytes of its inner chunks (C order; None = empty), with its
    index placed where ``layout`` says."""
    # The index is filled in NumPy from the parts' sizes (an item assignment per inner chunk
    # cost a shard of 10^5 inner chunks about 0.2 s a write).
    blobs = [memoryview(part).cast("B") for part in parts if part is not None]
    stored = np.fromiter((part is not None for part in parts), dtype=bool, count=len(parts))
    sizes = np.fromiter((blob.nbytes for blob in blobs), dtype=np.uint64, count=len(blobs))
    first = 0 if layout.index_at_end else layout.index_nbytes
    index = ShardIndex.empty(layout.n_inner)
    index.nbytes[: len(parts)][stored] = sizes
    index.offsets[: len(parts)][stored] = np.uint64(first) + np.cumsum(sizes) - sizes
    return _joined(index, blobs, layout)


def _joined(index: ShardIndex, body: Sequence[memoryview], layout: ShardLayout) -> bytes:
    """A shard of ``body`` (its inner chunks' bytes in order, in pieces) and ``index`` encoded
    where ``layout`` places it."""
    encoded_index = layout.encode_index(index.table(layout.chunks_per_shard))
    if layout.index_at_end:
        return b"".join([*body, encoded_index])
    return b"".join([encoded_index, *body])


class ShardEdit:
    """A shard as a write rebuilds it: the inner chunks it keeps from the stored shard and the
    ones the write replaces (by C-order position).

    The stored shard is held whole with its checked index, and the new shard copies what it
    keeps a run at a time: neighbours that lie one after the other in the old shard are one
    slice of it. A write of a few inner chunks of a shard of 10^5 costs in proportion to the
    inner chunks it replaces and the runs between them, not a Python object per inner chunk
    (a view and a join each: about 0.15 s a one-element write). Where the stored shard was read
    by ranges instead (larger than its codecs write), its inner chunks are given as a list.
    """

    def __init__(self, layout: ShardLayout) -> None:
        self.layout = layout
        self._old: memoryview | None = None
        self._old_index: ShardIndex | None = None
        self._parts: dict[int, Buffer | None] = {}

    def keep_shard(self, shard: Buffer, key: str) -> None:
        """Keep the inner chunks of ``shard``, the stored shard at ``key`` read whole (its index
        is checked against its size here: CorruptChunkError names ``key``)."""
        view = memoryview(shard).cast("B")
        self._old_index = self.layout.index_from_shard(view, key)
        self._old = view

    def keep_parts(self, parts: Sequence[Buffer | None]) -> None:
        """Keep ``parts``, the stored shard's inner chunks in C order (None: empty)."""
        self._parts = {i: part for i, part in enumerate(parts) if part is not None}

    def __getitem__(self, position: int) -> Buffer | None:
        if position in self._parts or self._old is None or self._old_index is None:
            return self._parts.get(position)
        offset = int(self._old_index.offsets[position])
        if offset == _EMPTY_INT:
            return None
        return self._old[offset : offset + int(self._old_index.nbytes[position])]

    def __setitem__(self, position: int, part: Buffer | None) -> None:
        self._parts[position] = part

    def encode(self) -> bytes | None:
        """The new shard, with a fresh index where its layout places it; None when every inner
        chunk is empty (the shard is then erased, not written)."""
        rebuilt = self.rebuild()
        if rebuilt is None:
            return None
        index, pieces = rebuilt
        return _joined(index, pieces, self.layout)

    def rebuild(self) -> tuple[ShardIndex, list[memoryview]] | None:
        """The new shard's index and its inner chunks' bytes in order, as pieces to join: a
        run of kept neighbours is one piece, a new inner chunk another. None when every inner
        chunk is empty."""
        layout = self.layout
        old = self._old if self._old is not None else memoryview(b"")
        old_index = self._old_index if self._old_index is not None else ShardIndex.empty(layout.n_inner)
        new = {i: memoryview(part).cast("B") for i, part in self._parts.items() if part is not None}
        new_at = np.fromiter(new, dtype=np.intp, count=len(new))
        # What each position of the new shard holds: its old bytes (an offset into the old
        # shard), a new part, or nothing.
        source = old_index.offsets.copy()
        sizes = old_index.nbytes.copy()
        source[np.fromiter(self._parts, dtype=np.intp, count=len(self._parts))] = EMPTY
        is_new = np.zeros(layout.n_inner, dtype=bool)
        is_new[new_at] = True
        source[new_at] = 0
        sizes[new_at] = np.fromiter((part.nbytes for part in new.values()), dtype=np.uint64, count=len(new))
        stored = np.flatnonzero(is_new | (source != EMPTY))
        if not len(stored):
            return None
        sizes, source, is_new = sizes[stored], source[stored], is_new[stored]
        first = 0 if layout.index_at_end else layout.index_nbytes
        offsets = np.uint64(first) + np.cumsum(sizes, dtype=np.uint64) - sizes
        # A run ends at a new part, and where the next kept chunk does not follow in the old shard.
        starts = np.ones(len(stored), dtype=bool)
        starts[1:] = is_new[1:] | is_new[:-1] | (source[1:] != source[:-1] + sizes[:-1])
        run_starts = np.flatnonzero(starts)
        run_lasts = np.append(run_starts[1:], len(stored)) - 1
        run_nbytes = (offsets[run_lasts] + sizes[run_lasts] - offsets[run_starts]).tolist()
        runs = zip(stored[run_starts].tolist(), is_new[run_starts].tolist(), source[run_starts].tolist(), run_nbytes)
        pieces = [new[position] if from_new else old[at : at + n] for position, from_new, at, n in runs]
        index = ShardIndex.empty(layout.n_inner)
        index.offsets[stored] = offsets
        index.nbytes[stored] = sizes
        return index, pieces


class ShardTooLargeToReadWhole(Exception):
    """Raised by :func:`get_whole_shard` where the shard is larger than its index and every inner
    chunk at their largest (dead space a writer left, or a forged size): not an error, since its
    index still finds its chunks, but a read sized by the shard's size is not made. The caller
    reads the index and the inner chunks' ranges instead, each bounded by the index checks."""


def get_whole_shard(store: Store, key: str, layout: ShardLayout) -> Buffer | None:
    """The shard at ``key`` whole (None when absent). Where the store knows its size before
    reading it (local files and snapshots of them) and it is larger than its index and inner
    chunks at their largest, it is not read: ShardTooLargeToReadWhole is raised before any
    memory is taken for it. A store that learns the size only by reading the shard reads it, and
    the shard is used as it came (reading it again by ranges would only cost more)."""
    if not sizes_first(store):
        return store.get(key)
    return get_at_most(store, key, layout.max_nbytes, lambda n: ShardTooLargeToReadWhole(key, n))


def get_bounded(store: Store, key: str, limit: int | None, what: str) -> Buffer | None:
    """``store.get(key)`` (:func:`~gpuzarr.store.base.get_at_most`), a value larger than
    ``limit`` a CorruptChunkError naming ``what`` ("shard", "stored chunk") and the key."""
    return get_at_most(store, key, limit, lambda n: _larger_than_written(key, what, n, limit or 0))


def stored_bound(key: str, limit: int | None, what: str) -> BoundedBufferFor:
    """:func:`get_bounded`'s bound as a ``buffer_for`` (:meth:`Store.get_versioned`'s)."""
    return BoundedBufferFor(limit, lambda n: _larger_than_written(key, what, n, limit or 0))


def _larger_than_written(key: str, what: str, size: int, limit: int) -> CorruptChunkError:
    return CorruptChunkError(key, f"{what} of {size} bytes is larger than its codecs ever write ({limit})")


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
    index = ShardIndex.from_array(table, None, key, layout.max_inner_nbytes)
    return replace(index, version=store.version) if isinstance(store, Snapshot) else index


def read_inner_chunks(
    store: Store, key: str, index: ShardIndex, wanted: Sequence[int], layout: ShardLayout
) -> list[Buffer | None]:
    """The encoded bytes of inner chunks ``wanted`` (None where the index says empty): from the
    whole shard where most of it is wanted, else (or where it is too large to read whole) as
    coalesced ranges."""
    present = [i for i in wanted if not index.is_empty(i)]
    out: dict[int, Buffer | None] = {i: None for i in wanted}
    if not present:
        return [out[i] for i in wanted]
    if len(present) >= WHOLE_SHARD_FRACTION * layout.n_inner:
        try:
            shard = get_whole_shard(store, key, layout)
        except ShardTooLargeToReadWhole:
            shard = None
        else:
            if shard is None:
                raise CorruptChunkError(key, "shard disappeared while it was being read")
        if shard is not None:
            view = memoryview(shard).cast("B")
            for i in present:
                start, n = int(index.offsets[i]), int(index.nbytes[i])
                if start + n > len(view):
                    raise past_shard_end(key, i, start, n, len(view))
                out[i] = view[start : start + n]
            return [out[i] for i in wanted]
    _read_ranges(store, key, index, present, out, local=store.cheap_ranged_reads)
    return [out[i] for i in wanted]


def _read_ranges(
    store: Store,
    key: str,
    index: ShardIndex,
    present: list[int],
    out: dict[int, Buffer | None],
    *,
    local: bool = False,
) -> None:
    """Read inner chunks ``present`` (none empty, at least one) into ``out`` as coalesced ranges.

    Ranges at most :data:`COALESCE_GAP_BYTES` apart are read as one request. From ``local``
    storage (where a request costs a system call, not a round trip) the gaps read so may add up
    to no more than the wanted bytes plus one such gap: an index can spread tiny inner chunks
    a gap apart, and a run of 16,384 of them 64 KB apart read 1 GB for 16 KB."""
    # Read in ranges, an entry of 0 bytes past the end would return nothing: checked first.
    _refuse_entries_past_the_end(store, key, index, present)
    spans = sorted((int(index.offsets[i]), int(index.nbytes[i]), i) for i in present)
    gap_budget = sum(n for _, n, _ in spans) + COALESCE_GAP_BYTES if local else None
    groups: list[list[tuple[int, int, int]]] = [[spans[0]]]
    for span in spans[1:]:
        last = groups[-1][-1]
        group_start = groups[-1][0][0]
        gap = span[0] - (last[0] + last[1])
        if gap <= COALESCE_GAP_BYTES and span[0] >= group_start and (gap_budget is None or gap <= gap_budget):
            groups[-1].append(span)
            if gap_budget is not None:
                gap_budget -= max(gap, 0)
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
                raise past_shard_end(key, i, start, n, None)
            out[i] = view[lo : lo + n]


T = TypeVar("T")
R = TypeVar("R")
#: Reads the wanted inner chunks of one shard from its index: ``read_inner_chunks``'s arguments.
InnerReader = Callable[[Store, str, ShardIndex, Sequence[int], ShardLayout], Sequence[T | None]]


def _serial(func: Callable[[T], R], items: Sequence[T]) -> list[R]:
    return [func(x) for x in items]


def fetch_shard(
    store: Store,
    key: str,
    wanted: Sequence[int],
    layout: ShardLayout,
    *,
    index_cache: MutableMapping[str, ShardIndex | None] | None = None,
    read_chunks: InnerReader[Any] = read_inner_chunks,
    whole: bool | None = None,
) -> list[Any]:
    """The encoded bytes of inner chunks ``wanted`` of the shard at ``key`` (None: empty, or the
    whole shard is missing).

    The index and the inner chunks are read through one :meth:`Store.snapshot` of the shard,
    so that a writer replacing the shard in between cannot pair one version's index with
    another's bytes; a shard rewritten in place while it was read is read again (at most
    ``SHARD_READ_ATTEMPTS`` times, then CorruptChunkError).

    ``index_cache`` keeps indexes read before, used again only for the same version of the
    shard (``ShardIndex.version``, or assumed by the snapshot: :meth:`Snapshot.assume_version`;
    an entry is dropped when the shard proves rewritten; where a store cannot tell versions
    apart, do not keep it across reads that a writer may interleave with). ``read_chunks`` replaces the byte-range
    reads, e.g. to hand out file spans that a device reads itself; it gets the same arguments
    as :func:`read_inner_chunks` (the store being the snapshot) and returns one entry per
    wanted chunk.

    ``whole``: read the whole shard in one request, index included, when its index is not
    known already (True: the caller wants most of what the shard holds, e.g. every inner chunk
    of an edge shard that lies in the array). None: when at least ``WHOLE_SHARD_FRACTION`` of
    the shard's inner chunks are wanted. Only with the default ``read_chunks``.
    """
    if whole is None:
        whole = len(set(wanted)) >= WHOLE_SHARD_FRACTION * layout.n_inner
    whole = whole and read_chunks is read_inner_chunks
    for _ in range(SHARD_READ_ATTEMPTS):
        with store.snapshot(key) as shard:
            try:
                got = _fetch_from(shard, key, wanted, layout, index_cache, read_chunks, whole)
            except CorruptChunkError:
                if not shard.changed():
                    raise
            else:
                if not shard.changed():
                    return got
        # Rewritten: an index kept from before belongs to another version (and one assumed
        # would fail again), so the next attempt reads the index anew.
        if index_cache is not None:
            index_cache.pop(key, None)
    raise CorruptChunkError(
        key, f"the shard was rewritten in place during each of {SHARD_READ_ATTEMPTS} reads of it"
    )


def _fetch_from(
    shard: Snapshot,
    key: str,
    wanted: Sequence[int],
    layout: ShardLayout,
    index_cache: MutableMapping[str, ShardIndex | None] | None,
    read_chunks: InnerReader[Any],
    whole: bool,
) -> list[Any]:
    """:func:`fetch_shard` on one snapshot of the shard."""
    index = _kept_index(shard, key, index_cache)
    if isinstance(index, _Unknown):
        if whole:
            # Most of the shard is wanted and its index is not known: one request for the whole
            # shard, index included, instead of one for the index and one for the chunks (a
            # round trip saved per shard on a remote store, a read on a local one).
            return _whole_shard(shard, key, wanted, layout, index_cache)
        index = _read_and_keep_index(shard, key, layout, index_cache)
    if index is None:
        return [None] * len(wanted)
    return list(read_chunks(shard, key, index, wanted, layout))


def shard_index(
    shard: Snapshot, key: str, layout: ShardLayout, index_cache: MutableMapping[str, ShardIndex | None] | None
) -> ShardIndex | None:
    """The index of the version of the shard at ``key`` that ``shard`` reads (None: the shard is
    absent): the one ``index_cache`` keeps for that version, else read with one request (and
    kept there)."""
    index = _kept_index(shard, key, index_cache)
    return _read_and_keep_index(shard, key, layout, index_cache) if isinstance(index, _Unknown) else index


def _read_and_keep_index(
    shard: Snapshot, key: str, layout: ShardLayout, index_cache: MutableMapping[str, ShardIndex | None] | None
) -> ShardIndex | None:
    index = read_shard_index(shard, key, layout)
    if index_cache is not None:
        index_cache[key] = index
    return index


def read_inner_chunk(shard: Snapshot, key: str, index: ShardIndex, i: int) -> Buffer | None:
    """The encoded bytes of inner chunk ``i`` of the shard at ``key`` that ``shard`` reads, with
    one request (None where the index says it is empty)."""
    if index.is_empty(i):
        return None
    start, n = int(index.offsets[i]), int(index.nbytes[i])
    if shard.size is not None and start + n > shard.size:  # 0 bytes there would read as nothing
        raise past_shard_end(key, i, start, n, shard.size)
    raw = shard.get(key, ByteRange(start, n))
    if raw is None:
        raise CorruptChunkError(key, "shard disappeared while it was being read")
    if len(raw) != n:
        raise past_shard_end(key, i, start, n, None)
    return raw


def read_inner_chunk_run(shard: Snapshot, key: str, index: ShardIndex, positions: Sequence[int]) -> list[Buffer | None]:
    """The encoded bytes of inner chunks ``positions`` of the shard at ``key`` that ``shard``
    reads from a local file (None where the index says empty): one request for each stretch of
    them lying close together (see ``_read_ranges``), rather than one per inner chunk."""
    if len(positions) == 1:
        return [read_inner_chunk(shard, key, index, positions[0])]
    got: dict[int, Buffer | None] = dict.fromkeys(positions)
    present = [i for i in positions if not index.is_empty(i)]
    if present:
        _read_ranges(shard, key, index, present, got, local=True)
    return [got[i] for i in positions]


def _refuse_entries_past_the_end(store: Store, key: str, index: ShardIndex, positions: Sequence[int]) -> None:
    """Raise for the first inner chunk of ``positions`` whose index entry reaches past the end
    of the shard, where ``store`` is a snapshot that knows the shard's size (an open file, a
    value in memory)."""
    size = store.size if isinstance(store, Snapshot) else None
    if size is None or not positions:
        return
    at = np.asarray(positions, dtype=np.intp)
    bad = np.flatnonzero(index.offsets[at] + index.nbytes[at] > np.uint64(size))
    if bad.size:
        i = int(at[bad[0]])
        raise past_shard_end(key, i, int(index.offsets[i]), int(index.nbytes[i]), size)


def past_shard_end(key: str, i: int, start: int, n: int, size: int | None) -> CorruptChunkError:
    """The error for inner chunk ``i`` of the shard at ``key`` whose index entry (``start``,
    ``n`` bytes) reaches past the shard's end (``size``, where known)."""
    end = "the shard end" if size is None else f"the shard end ({size} bytes)"
    return CorruptChunkError(key, f"inner chunk {i} (offset {start}, nbytes {n}) lies past {end}")


class _Unknown:
    """No index kept for this version of a shard: read it."""


_UNKNOWN = _Unknown()


def _kept_index(
    shard: Snapshot, key: str, index_cache: MutableMapping[str, ShardIndex | None] | None
) -> ShardIndex | _Unknown | None:
    """The index ``index_cache`` keeps for the version of the shard that ``shard`` reads (None:
    the shard is known to be absent), or _UNKNOWN."""
    if index_cache is None or key not in index_cache:
        return _UNKNOWN
    index = index_cache[key]
    if index is not None and index.version is not None and shard.assume_version(index.version):
        # The reads check the version themselves (an object store's If-Match): no request
        # asks for it first, and a shard replaced since fails them and is read again.
        return index
    # An absent shard has no version: a cached None holds while the shard is still absent.
    if (index and index.version) == shard.version:
        return index
    return _UNKNOWN


def _whole_shard(
    shard: Snapshot,
    key: str,
    wanted: Sequence[int],
    layout: ShardLayout,
    index_cache: MutableMapping[str, ShardIndex | None] | None,
) -> list[Buffer | None]:
    """The wanted inner chunks of a shard fetched whole (its index read from those bytes, and
    kept in ``index_cache`` with the snapshot's version); by ranges where it is too large."""
    try:
        whole = get_whole_shard(shard, key, layout)
    except ShardTooLargeToReadWhole:  # read_inner_chunks reads it by ranges
        index = _read_and_keep_index(shard, key, layout, index_cache)
        return [None] * len(wanted) if index is None else read_inner_chunks(shard, key, index, wanted, layout)
    if whole is None:
        if index_cache is not None:
            index_cache[key] = None
        return [None] * len(wanted)
    view = memoryview(whole).cast("B")
    index = replace(layout.index_from_shard(view, key), version=shard.version)
    if index_cache is not None:
        index_cache[key] = index
    return list(inner_views(view, index, wanted))


def fetch_inner_chunks(
    store: Store,
    wanted: Mapping[str, Sequence[int]],
    layout_of: Callable[[str], ShardLayout],
    *,
    index_cache: MutableMapping[str, ShardIndex | None] | None = None,
    read_chunks: InnerReader[Any] = read_inner_chunks,
    map_shards: Callable[[Callable[[str], list[Any]], Sequence[str]], list[list[Any]]] = _serial,
    whole: Callable[[str], bool] | None = None,
) -> dict[tuple[str, int], Any]:
    """The encoded bytes of many shards' inner chunks: ``{(shard key, position): bytes or None}``.

    ``wanted`` maps each shard key to the positions wanted in it, ``layout_of`` gives a shard
    key's :class:`ShardLayout` (shards of a rectilinear grid differ), and ``map_shards`` runs the
    per-shard fetches (e.g. on a thread pool; in order by default). See :func:`fetch_shard` for
    ``index_cache``, ``read_chunks`` and ``whole`` (here a function of the shard key).
    """
    keys = list(wanted)

    def one(key: str) -> list[Any]:
        return fetch_shard(
            store,
            key,
            wanted[key],
            layout_of(key),
            index_cache=index_cache,
            read_chunks=read_chunks,
            whole=None if whole is None else whole(key),
        )

    fetched = map_shards(one, keys)
    return {
        (key, position): blob
        for key, blobs in zip(keys, fetched, strict=True)
        for position, blob in zip(wanted[key], blobs, strict=True)
    }
