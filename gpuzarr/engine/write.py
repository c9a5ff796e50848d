"""The CPU write engine: execute a plan against a value.

A chunk the selection covers completely is encoded from the new data alone; a partly covered
chunk is read, decoded, modified and re-encoded (read-modify-write). A chunk, or a whole shard,
that ends up entirely equal to the fill value is not stored, and is erased if it existed.

Sharded arrays are written shard by shard in three parallel phases: gather (read the old shard
when some of its inner chunks are only partly overwritten, and build the new inner chunks),
encode (all new inner chunks of all shards), assemble (keep untouched inner chunks' bytes
verbatim, write the shard with a fresh index, or erase it when nothing but fill remains).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..plan.selection import ChunkProjection, ReadPlan
from ..spec.dtypes import fill_value_bytes_equal
from ..store.base import Buffer, Store
from .layout import StorageLayout
from .parallel import run_tasks


def _covers_whole_chunk(p: ChunkProjection, chunk_shape: tuple[int, ...]) -> bool:
    if not p.is_complete:
        return False
    for s, n in zip(p.chunk_selection, chunk_shape, strict=True):
        if not isinstance(s, slice) or s.indices(n) != (0, n, 1):
            return False
    return True


def _new_chunk(
    layout: StorageLayout, p: ChunkProjection, value: np.ndarray[Any, Any], old: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """The chunk after writing ``value[p.out_selection]`` into it (``old`` = its old content)."""
    shape = layout.chunk_shape
    if _covers_whole_chunk(p, shape):
        return np.ascontiguousarray(value[p.out_selection]).reshape(shape)
    chunk = layout.fill_chunk() if old is None else np.array(old, order="C")
    chunk[p.chunk_selection] = value[p.out_selection]
    return chunk


def _encode_or_none(layout: StorageLayout, chunk: np.ndarray[Any, Any]) -> Buffer | None:
    if fill_value_bytes_equal(chunk, layout.metadata.fill_value):
        return None
    return layout.chunk_pipeline.encode(chunk)


def write_plan(layout: StorageLayout, store: Store, plan: ReadPlan, value: np.ndarray[Any, Any]) -> None:
    """Write ``value`` (shape ``plan.buffer_shape``) to the selection ``plan`` describes."""
    if not plan.projections:
        return
    if layout.sharding is None:
        _write_chunks(layout, store, plan.projections, value)
    else:
        _write_sharded(layout, store, plan.projections, value)


def _write_chunks(
    layout: StorageLayout, store: Store, projections: list[ChunkProjection], value: np.ndarray[Any, Any]
) -> None:
    def work(p: ChunkProjection) -> None:
        key = layout.key(p.chunk_coords)
        old = None
        if not p.is_complete:
            raw = store.get(key)
            old = None if raw is None else layout.chunk_pipeline.decode(raw, key)
        encoded = _encode_or_none(layout, _new_chunk(layout, p, value, old))
        if encoded is None:
            store.erase(key)
        else:
            store.set(key, encoded)

    run_tasks(work, projections, min_parallel=2)


@dataclass
class _ShardWrite:
    key: str
    parts: list[Buffer | None]
    edits: list[tuple[int, np.ndarray[Any, Any]]] = field(default_factory=list)
    existed: bool = False


def _write_sharded(
    layout: StorageLayout, store: Store, projections: list[ChunkProjection], value: np.ndarray[Any, Any]
) -> None:
    sharding = layout.sharding
    assert sharding is not None
    shard_layout = sharding.layout
    inner_grid = tuple(d.nchunks for d in layout.dimensions())
    by_shard: dict[tuple[int, ...], list[tuple[int, ChunkProjection]]] = defaultdict(list)
    for p in projections:
        shard, position = layout.shard_of(p.chunk_coords)
        by_shard[shard].append((position, p))

    def inner_positions_in_bounds(shard: tuple[int, ...]) -> int:
        """How many of the shard's inner chunks intersect the array."""
        n = 1
        for s, per, total in zip(shard, sharding.chunks_per_shard, inner_grid, strict=True):
            n *= max(0, min(per, total - s * per))
        return n

    def gather(item: tuple[tuple[int, ...], list[tuple[int, ChunkProjection]]]) -> _ShardWrite:
        shard, touched = item
        key = layout.key(shard)
        work = _ShardWrite(key, [None] * shard_layout.n_inner)
        all_complete = all(p.is_complete for _, p in touched)
        old_shard = None
        old_view = memoryview(b"")
        index = None
        if not (all_complete and len(touched) == inner_positions_in_bounds(shard)):
            old_shard = store.get(key)
        if old_shard is not None:
            work.existed = True
            index = shard_layout.index_from_shard(old_shard, key)
            old_view = memoryview(old_shard).cast("B")
            for i in range(shard_layout.n_inner):
                if not index.is_empty(i):
                    start = int(index.offsets[i])
                    work.parts[i] = old_view[start : start + int(index.nbytes[i])]
        for i, p in touched:
            old = None
            if not p.is_complete and work.parts[i] is not None:
                old = layout.chunk_pipeline.decode(work.parts[i], f"{key} (inner chunk {i})")
            work.edits.append((i, _new_chunk(layout, p, value, old)))
        return work

    shard_writes = run_tasks(gather, list(by_shard.items()))
    edits = [(w, i, chunk) for w in shard_writes for i, chunk in w.edits]

    def encode(edit: tuple[_ShardWrite, int, np.ndarray[Any, Any]]) -> None:
        w, i, chunk = edit
        w.parts[i] = _encode_or_none(layout, chunk)

    run_tasks(encode, edits)

    def assemble(w: _ShardWrite) -> None:
        if all(part is None for part in w.parts):
            store.erase(w.key)
        else:
            store.set(w.key, sharding.assemble(w.parts))

    run_tasks(assemble, shard_writes)
