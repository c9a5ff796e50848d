"""The CPU write engine: execute a plan against a value.

A chunk the selection covers completely is encoded from the new data alone; a partly covered
chunk is read, decoded, modified and re-encoded (read-modify-write). A chunk, or a whole shard,
that ends up entirely equal to the fill value is not stored, and is erased if it existed.

Sharded arrays are written shard by shard in three parallel phases: gather (read the old shard
when some of its inner chunks are only partly overwritten, and build the new inner chunks),
encode (all new inner chunks of all shards), assemble (keep untouched inner chunks' bytes
verbatim, write the shard with a fresh index, or erase it when nothing but fill remains).

Every read-modify-write (a partly covered chunk, a shard not rewritten whole) holds the key's
:meth:`Store.lock` from the read to the write, so that writers of disjoint chunks of one shard
or chunk (threads, or processes on a local store) lose nothing. A value replaced whole takes no
lock. Shards are locked in key order, a few at a time (``LOCKED_SHARDS``), the same order in
every writer, so that two writers never wait for each other in a cycle.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import CorruptChunkError
from ...metadata.dtypes import fill_value_bytes_equal
from ...parallel import run_tasks
from ...store.sharding import encode_shard

if TYPE_CHECKING:
    from ...codecs.sharding import ShardingCodec
    from ...layout import ArrayLayout
    from ...plan.selection import ChunkProjection, SelectionPlan
    from ...store.base import Buffer, Store

    #: A shard's coordinates and the inner chunks a write touches in it (position, projection).
    _ShardItem = tuple[tuple[int, ...], list[tuple[int, ChunkProjection]]]

#: Shards read, modified and written under their locks at once (each lock holds a file
#: descriptor on a LocalStore, and a store may have far more shards than descriptors).
LOCKED_SHARDS = 16


def _covers_whole_chunk(p: ChunkProjection, chunk_shape: tuple[int, ...]) -> bool:
    if not p.is_complete:
        return False
    for s, n in zip(p.chunk_selection, chunk_shape, strict=True):
        if not isinstance(s, slice) or s.indices(n) != (0, n, 1):
            return False
    return True


def _new_chunk(
    layout: ArrayLayout, p: ChunkProjection, value: np.ndarray[Any, Any], old: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """The chunk after writing ``value[p.out_selection]`` into it (``old`` = its old content)."""
    shape = layout.chunk_shape_at(p.chunk_coords)
    if _covers_whole_chunk(p, shape):
        return np.ascontiguousarray(value[p.out_selection]).reshape(shape)
    chunk = layout.fill_chunk(p.chunk_coords) if old is None else np.array(old, order="C")
    chunk[p.chunk_selection] = value[p.out_selection]
    return chunk


def _encode_or_none(layout: ArrayLayout, coords: tuple[int, ...], chunk: np.ndarray[Any, Any]) -> Buffer | None:
    if not layout.store_data_equal_to_fill_value and fill_value_bytes_equal(chunk, layout.metadata.fill_value):
        return None
    return layout.pipeline_at(coords).encode(chunk)


def write_plan(layout: ArrayLayout, store: Store, plan: SelectionPlan, value: np.ndarray[Any, Any]) -> None:
    """Write ``value`` (shape ``plan.buffer_shape``) to the selection ``plan`` describes."""
    if not plan.projections:
        return
    if layout.sharding is None:
        _write_chunks(layout, store, plan.projections, value)
    else:
        _write_sharded(layout, store, plan.projections, value)


def _write_chunks(
    layout: ArrayLayout, store: Store, projections: list[ChunkProjection], value: np.ndarray[Any, Any]
) -> None:
    def work(p: ChunkProjection) -> None:
        key = layout.key(p.chunk_coords)
        # A partly covered chunk is read, modified and written back under its lock.
        with store.lock(key) if not p.is_complete else contextlib.nullcontext():
            old = None
            if not p.is_complete:
                raw = store.get(key)
                old = None if raw is None else layout.pipeline_at(p.chunk_coords).decode(raw, key)
            encoded = _encode_or_none(layout, p.chunk_coords, _new_chunk(layout, p, value, old))
            if encoded is None:
                store.erase(key)
            else:
                store.set(key, encoded)

    run_tasks(work, projections, min_parallel=2)


@dataclass
class _ShardWrite:
    key: str
    codec: ShardingCodec
    parts: list[Buffer | None]
    edits: list[tuple[int, ChunkProjection, np.ndarray[Any, Any]]] = field(default_factory=list)


def _inner_chunks_in_bounds(layout: ArrayLayout, shard: tuple[int, ...], codec: ShardingCodec) -> int:
    """How many of a shard's inner chunks intersect the array."""
    n = 1
    for dim, s, inner, per in zip(
        layout.metadata.chunk_grid.dimensions(layout.metadata.shape),
        shard,
        codec.chunk_shape,
        codec.chunks_per_shard,
        strict=True,
    ):
        start = int(dim.chunk_start(s))
        n *= max(0, min(per, -(-(dim.size - start) // inner)))
    return n


def _write_sharded(
    layout: ArrayLayout, store: Store, projections: list[ChunkProjection], value: np.ndarray[Any, Any]
) -> None:
    by_shard: dict[tuple[int, ...], list[tuple[int, ChunkProjection]]] = defaultdict(list)
    for p in projections:
        shard, position = layout.shard_of(p.chunk_coords)
        by_shard[shard].append((position, p))
    whole: list[_ShardItem] = []
    modified: list[_ShardItem] = []
    for shard, touched in by_shard.items():
        rewrites_everything = all(p.is_complete for _, p in touched) and len(touched) == _inner_chunks_in_bounds(
            layout, shard, layout.sharding_at(shard)
        )
        (whole if rewrites_everything else modified).append((shard, touched))
    if whole:
        _write_shards(layout, store, whole, value, read_old=False)
    modified.sort(key=lambda item: layout.key(item[0]))
    for start in range(0, len(modified), LOCKED_SHARDS):
        group = modified[start : start + LOCKED_SHARDS]
        with contextlib.ExitStack() as held:
            for shard, _ in group:
                held.enter_context(store.lock(layout.key(shard)))
            _write_shards(layout, store, group, value, read_old=True)


def _write_shards(
    layout: ArrayLayout, store: Store, items: list[_ShardItem], value: np.ndarray[Any, Any], *, read_old: bool
) -> None:
    """Write the shards ``items`` name (gather, encode, assemble); ``read_old``: some of their
    inner chunks are kept or partly overwritten, so the stored shards are read first."""

    def gather(item: _ShardItem) -> _ShardWrite:
        shard, touched = item
        key = layout.key(shard)
        codec = layout.sharding_at(shard)
        shard_layout = codec.layout
        work = _ShardWrite(key, codec, [None] * shard_layout.n_inner)
        old_shard = store.get(key) if read_old else None
        if old_shard is not None:
            work.parts[:] = shard_layout.split(old_shard, key)
        for i, p in touched:
            old = None
            part = work.parts[i]
            if not p.is_complete and part is not None:
                try:
                    old = layout.pipeline_at(p.chunk_coords).decode(part, key)
                except CorruptChunkError as exc:
                    raise CorruptChunkError(key, f"inner chunk {i}: {exc.reason}") from exc
            work.edits.append((i, p, _new_chunk(layout, p, value, old)))
        return work

    shard_writes = run_tasks(gather, items)
    edits = [(w, i, p, chunk) for w in shard_writes for i, p, chunk in w.edits]

    def encode(edit: tuple[_ShardWrite, int, ChunkProjection, np.ndarray[Any, Any]]) -> None:
        w, i, p, chunk = edit
        w.parts[i] = _encode_or_none(layout, p.chunk_coords, chunk)

    run_tasks(encode, edits)

    def assemble(w: _ShardWrite) -> None:
        # The array's kept index of this shard describes the version being replaced.
        layout.shard_indexes.discard(w.key)
        if all(part is None for part in w.parts):
            store.erase(w.key)
        else:
            store.set(w.key, encode_shard(w.parts, w.codec.layout))

    run_tasks(assemble, shard_writes)
