"""The CPU write engine: execute a plan against a value.

A chunk the selection covers completely is encoded from the new data alone; a partly covered
chunk is read, decoded, modified and re-encoded (read-modify-write). A chunk, or a whole shard,
that ends up entirely equal to the fill value is not stored, and is erased if it existed.

Sharded arrays are written shard by shard in three parallel phases: gather (read the old shard
when some of its inner chunks are only partly overwritten), encode (all new inner chunks of all
shards; each is built, from the value and the old chunk where it is partly overwritten, right
before it is encoded, so they are never all held decoded at once), assemble (keep untouched
inner chunks' bytes verbatim, as slices of the old shard a run of neighbours at a time
(``ShardEdit``), write the shard with a fresh index, or erase it when nothing but fill remains).

Every read-modify-write (a partly covered chunk, a shard not rewritten whole) holds the key's
:meth:`Store.lock` from the read to the write, so that writers of disjoint chunks of one shard
or chunk (threads, or processes on a local store) lose nothing. A value replaced whole takes no
lock. Shards are locked in key order, a few at a time (``LOCKED_SHARDS``), the same order in
every writer, so that two writers never wait for each other in a cycle.

A store with conditional writes (``Store.supports_conditional_writes``: object stores, whose
lock reaches only the threads of one process) makes every read-modify-write optimistic as
well: the old value is read with its version, and the new one is written only if the stored
value is still that version (``Store.set_if``, or ``Store.erase_if`` for a value that became
all fill). When another writer came first, that key's read-modify-write starts again from the
fresh value, after a short jittered backoff, at most ``RMW_ATTEMPTS`` times; then StoreError
("conflicting writers") names the key.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import CorruptChunkError, StoreError
from ...metadata.dtypes import fill_value_bytes_equal
from ...parallel import batches_by_bytes, chunks_per_task, io_workers, run_coding_tasks, run_tasks
from ...store.base import BoundedBufferFor
from ...store.held_locks import held, released_on_interrupt
from ...store.sharding import (
    ShardEdit,
    ShardTooLargeToReadWhole,
    get_bounded,
    get_whole_shard,
    read_inner_chunks,
    read_shard_index,
    stored_bound,
)
from .small_chunks import ALONE_STORED_NBYTES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ...codecs.sharding import ShardingCodec
    from ...layout import ArrayLayout
    from ...plan.selection import ChunkProjection, SelectionPlan
    from ...store.base import Buffer, Store
    from ...store.sharding import ShardLayout

    #: A shard's coordinates and the inner chunks a write touches in it (position, projection).
    _ShardItem = tuple[tuple[int, ...], list[tuple[int, ChunkProjection]]]

#: Shards read, modified and written under their locks at once (each lock holds a file
#: descriptor on a LocalStore, and a store may have far more shards than descriptors).
LOCKED_SHARDS = 16
#: Decoded bytes of the shards replaced whole that one batch of a write covers (their inner
#: chunks are encoded in parallel across the batch, then the shards written).
WRITE_BATCH_BYTES = 256 * 1024 * 1024
#: Conditional writes of one key tried before StoreError, on stores with conditional writes:
#: eight writers of one chunk (tests/backends/cpu/test_conditional_writes.py, against moto)
#: made one of them lose 16 times in a row in about one run in six; with the backoff below, 64
#: attempts wait about 15 s at most before giving up.
RMW_ATTEMPTS = 64
#: The backoff before the next attempt: uniform in [0, min(RMW_MAX_BACKOFF, RMW_BACKOFF * 2**n)).
RMW_BACKOFF = 0.005
RMW_MAX_BACKOFF = 0.25


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, min(RMW_MAX_BACKOFF, RMW_BACKOFF * 2**attempt)))


def _conflict(store: Store, key: str) -> StoreError:
    return StoreError(
        str(getattr(store, "url", repr(store))),
        key,
        f"conflicting writers: the value changed under each of {RMW_ATTEMPTS} read-modify-writes",
    )


def _read_modify_write(
    store: Store, key: str, build: Callable[[Buffer | None], Buffer | None], max_nbytes: int | None = None
) -> None:
    """Replace the value at ``key`` by ``build(old value)`` (None: erase it), with conditional
    writes retried from the fresh value where the store has them. An old value larger than
    ``max_nbytes`` (what its codecs ever write) is refused before it is read, where the store
    says its size first (local files, zip members, object stores' answers)."""
    if not store.supports_conditional_writes:
        new = build(get_bounded(store, key, max_nbytes, "stored chunk"))
        if new is None:
            store.erase(key)
        else:
            store.set(key, new)
        return
    for attempt in range(RMW_ATTEMPTS):
        old, version = store.get_versioned(key, stored_bound(key, max_nbytes, "stored chunk"))
        new = build(old)
        if new is None:
            done = old is None or store.erase_if(key, version)
        else:
            done = store.set_if(key, new, version)
        if done:
            return
        if attempt + 1 < RMW_ATTEMPTS:
            _backoff(attempt)
    raise _conflict(store, key)


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


def _left_unstored(layout: ArrayLayout, chunk: np.ndarray[Any, Any]) -> bool:
    """Whether ``chunk`` holds nothing but the fill value and so is not stored."""
    return not layout.store_data_equal_to_fill_value and fill_value_bytes_equal(chunk, layout.metadata.fill_value)


def _encode_or_none(layout: ArrayLayout, coords: tuple[int, ...], chunk: np.ndarray[Any, Any]) -> Buffer | None:
    if _left_unstored(layout, chunk):
        return None
    return layout.pipeline_at(coords).encode(chunk)


def _encode_all_or_none(
    layout: ArrayLayout, projections: list[ChunkProjection], chunks: list[np.ndarray[Any, Any]]
) -> list[Buffer | None]:
    """:func:`_encode_or_none` of each of ``chunks`` (of the chunks ``projections`` name): those
    of one pipeline together in one call where its codec can (``CodecPipeline.encode_many``)."""
    if len(chunks) == 1:
        return [_encode_or_none(layout, projections[0].chunk_coords, chunks[0])]
    kept = [k for k, chunk in enumerate(chunks) if not _left_unstored(layout, chunk)]
    pipelines = [layout.pipeline_at(projections[k].chunk_coords) for k in kept]
    encoded: Sequence[Buffer] | None = None
    if kept and all(pipeline is pipelines[0] for pipeline in pipelines):
        encoded = pipelines[0].encode_many([chunks[k] for k in kept])
    if encoded is None:
        encoded = [pipeline.encode(chunks[k]) for k, pipeline in zip(kept, pipelines, strict=True)]
    out: list[Buffer | None] = [None] * len(chunks)
    for k, data in zip(kept, encoded, strict=True):
        out[k] = data
    return out


def write_plan(layout: ArrayLayout, store: Store, plan: SelectionPlan, value: np.ndarray[Any, Any]) -> None:
    """Write ``value`` (shape ``plan.buffer_shape``) to the selection ``plan`` describes."""
    if not plan.projections:
        return
    # A Ctrl-C landing as a chunk's lock is let go of left it held while the exception lived.
    with released_on_interrupt():
        if layout.sharding is None:
            _write_chunks(layout, store, plan.projections, value)
        else:
            _write_sharded(layout, store, plan.projections, value)


def _write_chunks(
    layout: ArrayLayout, store: Store, projections: list[ChunkProjection], value: np.ndarray[Any, Any]
) -> None:
    def work(p: ChunkProjection) -> int | None:
        """Write the chunk ``p`` names: the bytes it was stored in (None: partly covered, or
        the fill value and so not stored)."""
        key = layout.key(p.chunk_coords)
        if p.is_complete:
            encoded = _encode_or_none(layout, p.chunk_coords, _new_chunk(layout, p, value, None))
            if encoded is None:
                store.erase(key)
                return None
            store.set(key, encoded)
            return memoryview(encoded).nbytes

        def build(raw: Buffer | None) -> Buffer | None:
            old = None if raw is None else layout.pipeline_at(p.chunk_coords).decode(raw, key)
            return _encode_or_none(layout, p.chunk_coords, _new_chunk(layout, p, value, old))

        # A partly covered chunk is read, modified and written back under its lock.
        with held(store, key):
            _read_modify_write(store, key, build, layout.pipeline_at(p.chunk_coords).max_stored_nbytes)
        return None

    pipeline = layout.chunk_pipeline
    beside = pipeline.beside_pool()
    if not pipeline.decodes_many or io_workers(store) is not None or beside is None or len(projections) < 2:
        run_coding_tasks(pipeline, work, projections)
        return
    # Small zstd chunks of a local or in-memory store, as reads decide: a run at a time on this
    # thread for as long as each run's chunks were stored in under ALONE_STORED_NBYTES each (or
    # none was stored); the pool writes the rest after the first run that was not. 2000^2
    # float32 into tmpfs, 2 cores: 100^2 chunks constant over tiles 54-64 ms -> 34, 50^2 chunks
    # 200-208 -> 112-113; chunks of noise go to the pool after one run (62-63 ms, 63-69).
    per_run = chunks_per_task(pipeline.spec.nbytes, len(projections))
    done = 0
    with beside:
        while done < len(projections):
            sizes = [n for n in map(work, projections[done : done + per_run]) if n is not None]
            done += per_run
            if sizes and sum(sizes) >= ALONE_STORED_NBYTES * len(sizes):
                break
    if done < len(projections):
        run_coding_tasks(pipeline, work, projections[done:])


@dataclass
class _ShardWrite:
    key: str
    codec: ShardingCodec
    #: the inner chunks it keeps and those written
    content: ShardEdit
    #: whether a shard was stored before, and its version (conditional writes only)
    existed: bool = False
    version: Any = None
    #: False when a conditional write lost to another writer
    done: bool = True
    #: the shard was replaced while its inner chunks were read by ranges: the write loses
    lost: bool = False


def _read_old_shard(store: Store, work: _ShardWrite, conditional: bool) -> None:
    """Fill ``work.content`` with the stored shard's inner chunks (with its version, for a
    ``conditional`` write): the shard read whole, or, where it is larger than its index and
    inner chunks at their largest (dead space a writer left), by its index's ranges."""
    key, shard_layout = work.key, work.codec.layout
    old_shard: Buffer | None = None
    if conditional:
        whole = BoundedBufferFor(shard_layout.max_nbytes, lambda n: ShardTooLargeToReadWhole(key, n))
        try:
            old_shard, work.version = store.get_versioned(key, whole)
        except ShardTooLargeToReadWhole:
            _gather_versioned_by_ranges(store, work, shard_layout)
            return
        work.existed = old_shard is not None
    else:
        try:
            old_shard = get_whole_shard(store, key, shard_layout)
        except ShardTooLargeToReadWhole:
            index = read_shard_index(store, key, shard_layout)
            if index is not None:
                work.content.keep_parts(read_inner_chunks(store, key, index, range(shard_layout.n_inner), shard_layout))
            return
    if old_shard is not None:
        work.content.keep_shard(old_shard, key)


def _gather_versioned_by_ranges(store: Store, work: _ShardWrite, shard_layout: ShardLayout) -> None:
    """The inner chunks of a shard too large to read whole (dead space a writer left), on a
    store with conditional writes: its index and chunks by ranges, all of one version (a
    snapshot's reads are conditional on the version its first one saw), which the write is then
    conditional on. A shard replaced meanwhile makes the write lose, to be done again from the
    fresh shard."""
    key = work.key
    with store.snapshot(key) as snapshot:
        try:
            index = read_shard_index(snapshot, key, shard_layout)
            if index is not None:
                work.content.keep_parts(
                    read_inner_chunks(snapshot, key, index, range(shard_layout.n_inner), shard_layout)
                )
        except CorruptChunkError:
            if not snapshot.changed():
                raise
            work.lost = True
            return
        work.existed = index is not None
        work.version = snapshot.version if work.existed else None


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
        rewrites_everything = all(p.is_complete for _, p in touched) and len(touched) == (
            layout.inner_chunks_in_bounds(shard)
        )
        (whole if rewrites_everything else modified).append((shard, touched))
    # Shards replaced whole are written a batch at a time: the encoded inner chunks of a batch
    # are held until its shards are assembled, so a large write holds a batch's, not all.
    chunk_nbytes = layout.chunk_pipeline.spec.nbytes
    for run in batches_by_bytes([len(touched) * chunk_nbytes for _, touched in whole], WRITE_BATCH_BYTES):
        _write_shards(layout, store, [whole[k] for k in run], value, read_old=False)
    modified.sort(key=lambda item: layout.key(item[0]))
    for start in range(0, len(modified), LOCKED_SHARDS):
        group = modified[start : start + LOCKED_SHARDS]
        with contextlib.ExitStack() as locks:
            for shard, _ in group:
                locks.enter_context(held(store, layout.key(shard)))
            _write_shards_retrying(layout, store, group, value)


def _write_shards_retrying(
    layout: ArrayLayout, store: Store, items: list[_ShardItem], value: np.ndarray[Any, Any]
) -> None:
    """Read, modify and write the shards ``items`` name; with conditional writes, the shards
    another writer changed meanwhile are done again from their fresh value."""
    for attempt in range(RMW_ATTEMPTS):
        lost = _write_shards(layout, store, items, value, read_old=True)
        if not lost:
            return
        items = [item for item in items if layout.key(item[0]) in lost]
        if attempt + 1 < RMW_ATTEMPTS:
            _backoff(attempt)
    raise _conflict(store, sorted(layout.key(shard) for shard, _ in items)[0])


def _write_shards(
    layout: ArrayLayout, store: Store, items: list[_ShardItem], value: np.ndarray[Any, Any], *, read_old: bool
) -> set[str]:
    """Write the shards ``items`` name (gather, encode, assemble); ``read_old``: some of their
    inner chunks are kept or partly overwritten, so the stored shards are read first (with
    their versions, on a store with conditional writes). Returns the keys of the shards whose
    conditional write lost to another writer (written nothing)."""
    conditional = read_old and store.supports_conditional_writes

    def gather(item: _ShardItem) -> _ShardWrite:
        shard = item[0]
        codec = layout.sharding_at(shard)
        work = _ShardWrite(layout.key(shard), codec, ShardEdit(codec.layout))
        if read_old:
            _read_old_shard(store, work, conditional)
        return work

    shard_writes = run_tasks(gather, items)
    edits = [(w, i, p) for w, (_, touched) in zip(shard_writes, items, strict=True) for i, p in touched]

    def new_chunk(edit: tuple[_ShardWrite, int, ChunkProjection]) -> np.ndarray[Any, Any]:
        # Each new inner chunk is built (a copy of the value's part, or the old chunk decoded
        # and modified) right before it is encoded, so that only the chunks being encoded are
        # held decoded, not all of them at once.
        w, i, p = edit
        old = None
        part = w.content[i]
        if not p.is_complete and part is not None:
            try:
                old = layout.pipeline_at(p.chunk_coords).decode(part, w.key)
            except CorruptChunkError as exc:
                raise CorruptChunkError(w.key, f"inner chunk {i}: {exc.reason}") from exc
        return _new_chunk(layout, p, value, old)

    def encode(run: list[tuple[_ShardWrite, int, ChunkProjection]]) -> None:
        chunks = [new_chunk(edit) for edit in run]
        encoded = _encode_all_or_none(layout, [p for _, _, p in run], chunks)
        for (w, i, _), data in zip(run, encoded, strict=True):
            w.content[i] = data

    # Small inner chunks a run a task, encoded together where the codec can (one zstd call for
    # the run, without the GIL); others a chunk a task.
    pipeline = layout.chunk_pipeline
    per_run = chunks_per_task(pipeline.spec.nbytes, len(edits)) if pipeline.decodes_many else 1
    runs = [edits[k : k + per_run] for k in range(0, len(edits), per_run)]
    alone = pipeline.alone()
    if alone is not None:  # small chunks of a fast codec: faster on this thread alone
        with alone:
            for run in runs:
                encode(run)
    else:
        run_coding_tasks(pipeline, encode, runs)

    def assemble(w: _ShardWrite) -> None:
        # The array's kept index of this shard describes the version being replaced.
        layout.shard_indexes.discard(w.key)
        if w.lost:
            w.done = False
            return
        shard = w.content.encode()
        if not conditional:
            if shard is None:
                store.erase(w.key)
            else:
                store.set(w.key, shard)
        elif shard is None:
            w.done = not w.existed or store.erase_if(w.key, w.version)
        else:
            w.done = store.set_if(w.key, shard, w.version)

    run_tasks(assemble, shard_writes)
    return {w.key for w in shard_writes if not w.done}
