"""The CPU read engine: execute a ReadPlan into an output buffer.

Unsharded: one store read and one decode per chunk, spread over the thread pool; each chunk is
decoded straight into the output (see CodecPipeline.decode_into). Sharded: per batch of shards,
fetch every shard's index and the wanted inner chunks (coalesced ranges) in parallel, then decode
all fetched inner chunks of the batch in parallel. Missing chunks and empty inner chunks are
written as the fill value.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from ..errors import ChunkNotFoundError, CorruptChunkError
from ..plan.selection import ChunkProjection, ReadPlan
from ..store.base import Buffer, Store
from ..store.sharding import read_inner_chunks, read_shard_index
from .layout import StorageLayout
from .parallel import batches_by_bytes, run_tasks

#: Upper bound of (estimated) bytes of inner chunks fetched before they are decoded.
SHARD_BATCH_BYTES = 256 * 1024 * 1024


def _is_direct(out: np.ndarray[Any, Any], p: ChunkProjection, chunk_shape: tuple[int, ...]) -> bool:
    """Whether the whole chunk maps onto a C-contiguous region of ``out``."""
    if not p.is_complete or not all(isinstance(s, slice) for s in p.out_selection):
        return False
    # The chunk must be taken whole and in order (a complete selection may still reverse it).
    if not all(
        isinstance(s, slice) and s.indices(n) == (0, n, 1)
        for s, n in zip(p.chunk_selection, chunk_shape, strict=True)
    ):
        return False
    target = out[p.out_selection]
    return target.shape == chunk_shape and target.flags.c_contiguous


def _store_chunk_into(
    layout: StorageLayout, raw: Buffer | None, key: str, out: np.ndarray[Any, Any], p: ChunkProjection
) -> None:
    if raw is None:
        if not layout.fill_missing_data_reads:
            raise ChunkNotFoundError(key)
        out[p.out_selection] = layout.metadata.fill_value
        return
    pipeline = layout.pipeline_at(p.chunk_coords)
    direct = _is_direct(out, p, pipeline.spec.shape)
    # A trailing Ellipsis makes ``out[selection]`` a view even for a 0-d ``out`` (where ``out[()]``
    # is a scalar copy, and decoding into it would be lost).
    out_selection = (*p.out_selection, Ellipsis) if direct else p.out_selection
    pipeline.decode_into(raw, key, out, out_selection, p.chunk_selection, direct)


def read_plan(layout: StorageLayout, store: Store, plan: ReadPlan, out: np.ndarray[Any, Any]) -> None:
    """Fill ``out`` (shape ``plan.buffer_shape``) with the selection ``plan`` describes."""
    if not plan.projections:
        return
    if layout.sharding is None:
        _read_chunks(layout, store, plan.projections, out)
    else:
        _read_sharded(layout, store, plan.projections, out)


def _read_chunks(
    layout: StorageLayout, store: Store, projections: list[ChunkProjection], out: np.ndarray[Any, Any]
) -> None:
    def work(p: ChunkProjection) -> None:
        key = layout.key(p.chunk_coords)
        _store_chunk_into(layout, store.get(key), key, out, p)

    run_tasks(work, projections)


def _read_sharded(
    layout: StorageLayout, store: Store, projections: list[ChunkProjection], out: np.ndarray[Any, Any]
) -> None:
    assert layout.sharding is not None
    by_shard: dict[tuple[int, ...], list[tuple[int, ChunkProjection]]] = defaultdict(list)
    for p in projections:
        shard, position = layout.shard_of(p.chunk_coords)
        by_shard[shard].append((position, p))
    shards = list(by_shard.items())
    chunk_nbytes = layout.chunk_pipeline.spec.nbytes

    def fetch(item: tuple[tuple[int, ...], list[tuple[int, ChunkProjection]]]) -> list[Any]:
        shard, wanted = item
        key = layout.key(shard)
        shard_layout = layout.sharding_at(shard).layout
        index = read_shard_index(store, key, shard_layout)
        if index is None:
            return [(None, key, i, p) for i, p in wanted]
        blobs = read_inner_chunks(store, key, index, [i for i, _ in wanted], shard_layout)
        return [(blob, key, i, p) for (i, p), blob in zip(wanted, blobs, strict=True)]

    def decode(task: tuple[Buffer | None, str, int, ChunkProjection]) -> None:
        raw, key, i, p = task
        try:
            _store_chunk_into(layout, raw, key, out, p)
        except CorruptChunkError as exc:
            # The error names the shard's store key; the reason says which inner chunk.
            raise CorruptChunkError(key, f"inner chunk {i}: {exc.reason}") from exc

    sizes = [len(w) * chunk_nbytes for _, w in shards]
    for run in batches_by_bytes(sizes, SHARD_BATCH_BYTES):
        fetched = run_tasks(fetch, [shards[i] for i in run])
        run_tasks(decode, [task for tasks in fetched for task in tasks])
