"""Reading the encoded bytes of one batch of a GpuReadPlan on the host.

Per batch, on the executor's helper thread: whole chunks through the store, or, for zstd and
uncompressed chunks in local files, the file spans the device reads itself (kvikio). Sharded
arrays go through one function, :func:`_fetch_sharded`: shard indexes first, then coalesced
inner-chunk ranges through ``store.sharding`` (or the inner chunks' spans in the shard file).
"""

from __future__ import annotations

import os
import stat

from ...errors import CorruptChunkError
from ...layout import ArrayLayout
from ...parallel import run_tasks
from ...store.base import Buffer, Store
from ...store.local import LocalStore
from ...store.sharding import ShardIndex, read_inner_chunks, read_shard_index
from .gpu_plan import ChunkTask, GpuReadPlan
from .launches import FileSpan
from .routes import reads_directly


def _stat(path: str) -> tuple[int, tuple[int, int]] | None:
    """(size, version) of a regular file, None when there is none."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_size, (info.st_ino, info.st_mtime_ns)


def fetch_batch(
    layout: ArrayLayout,
    store: Store,
    plan: GpuReadPlan,
    batch: int,
    indexes: dict[str, ShardIndex | None] | None = None,
    *,
    direct: bool = False,
) -> list[Buffer | FileSpan | None]:
    """The encoded bytes of every task of a batch (None: missing), read on the host.

    With ``direct`` (a LocalStore and a device that reads files), tasks whose route lets the
    device read their bytes as they are (:func:`reads_directly`) get a :class:`FileSpan`
    instead; shard indexes are still read on the host.
    """
    tasks = [plan.tasks[t] for t in plan.batches[batch]]
    local = store if direct and isinstance(store, LocalStore) else None
    if plan.sharded:
        return _fetch_sharded(layout, store, tasks, {} if indexes is None else indexes, local)

    def whole(task: ChunkTask) -> Buffer | FileSpan | None:
        if local is not None and reads_directly(task.route):
            path = local.path_of(task.key)
            found = _stat(path)
            return None if found is None else FileSpan(path, 0, found[0], found[1])
        return store.get(task.key)

    return run_tasks(whole, tasks)


def _fetch_sharded(
    layout: ArrayLayout,
    store: Store,
    tasks: list[ChunkTask],
    indexes: dict[str, ShardIndex | None],
    local: LocalStore | None,
) -> list[Buffer | FileSpan | None]:
    """The inner chunks of a sharded batch: per shard (in parallel), its index (read once per
    read and kept in ``indexes``), then its inner chunks as coalesced ranges
    (``store.sharding.read_inner_chunks``), or, with ``local`` given and every member of the
    shard readable by the device, as :class:`FileSpan` records of the shard file."""
    by_shard: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_shard.setdefault(task.key, []).append(i)

    def fetch(item: tuple[str, list[int]]) -> list[tuple[int, Buffer | FileSpan | None]]:
        key, members = item
        shard = layout.shard_of(tasks[members[0]].coords)[0]
        shard_layout = layout.sharding_at(shard).layout
        if key not in indexes:
            indexes[key] = read_shard_index(store, key, shard_layout)
        index = indexes[key]
        if index is None:
            return [(i, None) for i in members]
        if local is not None and all(reads_directly(tasks[i].route) for i in members):
            path = local.path_of(key)
            found = _stat(path)
            if found is None:
                raise CorruptChunkError(key, "shard disappeared while it was being read")
            return [(i, _inner_span(key, path, found, index, tasks[i])) for i in members]
        wanted = [tasks[i].inner for i in members]
        blobs = read_inner_chunks(store, key, index, [w for w in wanted if w is not None], shard_layout)
        return list(zip(members, blobs, strict=True))

    result: list[Buffer | FileSpan | None] = [None] * len(tasks)
    for part in run_tasks(fetch, list(by_shard.items())):
        for i, blob in part:
            result[i] = blob
    return result


def _inner_span(
    key: str, path: str, found: tuple[int, tuple[int, int]], index: ShardIndex, task: ChunkTask
) -> FileSpan | None:
    """Where inner chunk ``task.inner`` lies in the shard file (None: empty in the index)."""
    assert task.inner is not None  # a task of a sharded plan
    if index.is_empty(task.inner):
        return None
    size, version = found
    start, n = int(index.offsets[task.inner]), int(index.nbytes[task.inner])
    if start + n > size:
        raise CorruptChunkError(
            key, f"inner chunk {task.inner} (offset {start}, nbytes {n}) lies past the shard end ({size} bytes)"
        )
    return FileSpan(path, start, n, version)


__all__ = ["fetch_batch"]
