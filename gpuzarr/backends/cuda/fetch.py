"""Reading the encoded bytes of one batch of a GpuReadPlan on the host.

Per batch, on the executor's helper thread: whole chunks through the store, or, for zstd and
uncompressed chunks in local files, the file spans the device reads itself (kvikio). Sharded
arrays go through ``store.sharding.fetch_inner_chunks``, the CPU reader's routine too: shard
indexes first, then coalesced inner-chunk ranges (or the inner chunks' spans in the shard file),
both from one snapshot of the shard. Spans the device reads itself carry the version of the file
whose index was read; a file replaced before that is read on the host from the snapshot, one
replaced after it is caught when the device has read it (``executor._check_files_unchanged``).

Every other store (memory, zip, object stores, HTTP, fsspec, a CachingStore) goes through the
host path: whole chunks with ``get``, inner chunks of shards with coalesced ``get_ranges``,
never the whole shard for a few of its chunks. The requests run on the I/O threads the store
asks for (``io_concurrency``; the CPU pool when it names none), still on the helper thread's
time, so they overlap the previous batch's device work. The bytes they return (a view of the
store's memory, or the buffer a remote store's client filled) are copied once, into the
batch's pinned staging buffer (``bind``), which crosses to the device in one upload.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

from ...errors import CorruptChunkError
from ...parallel import io_runner
from ...store.local import FileVersion, LocalStore, same_bytes, stat_version
from ...store.sharding import (
    ShardIndex,
    ShardLayout,
    fetch_inner_chunks,
    get_bounded,
    past_shard_end,
    read_inner_chunks,
)
from .launches import FileSpan
from .routes import reads_directly

if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping, Sequence

    from ...layout import ArrayLayout
    from ...store.base import Buffer, Store
    from .gpu_plan import ChunkTask, GpuReadPlan


def file_version(path: str) -> tuple[int, FileVersion] | None:
    """(size, version) of a regular file, None when there is none; any other failure of the
    ``stat`` (permission denied, an I/O error) is raised as the OSError it is."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_size, stat_version(info)


def fetch_batch(
    layout: ArrayLayout,
    store: Store,
    plan: GpuReadPlan,
    batch: int,
    indexes: MutableMapping[str, ShardIndex | None] | None = None,
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
    # A remote store names how many requests it keeps in flight (its ``io_concurrency``).
    run = io_runner(store.io_concurrency)
    if plan.sharded:
        return _fetch_sharded(layout, store, tasks, {} if indexes is None else indexes, local, run)

    def get(task: ChunkTask) -> Buffer | None:
        # A stored size is untrusted: no larger value than the codecs write is read (or held).
        return get_bounded(store, task.key, layout.pipeline_at(task.coords).max_stored_nbytes, "stored chunk")

    if local is None:
        return run(get, tasks)
    store_url = str(local.root)  # what a span's errors name

    def span(task: ChunkTask) -> FileSpan | None:
        # The store's real path: a link leaving the store raises, as on the host path.
        located = local.locate(task.key)
        if located is None:
            return None
        limit = layout.pipeline_at(task.coords).max_stored_nbytes
        if limit is not None and located[1] > limit:  # the device would stage the whole file
            raise CorruptChunkError(
                task.key, f"stored chunk of {located[1]} bytes is larger than its codecs ever write ({limit})"
            )
        return FileSpan(located[0], 0, located[1], located[2], store_url)

    # Finding a file the device reads itself is an open, an fstat and a readlink: a few
    # microseconds of system calls between Python that holds the interpreter lock. On the I/O
    # threads, they wait for each other: 343 chunk files took 22 ms on 16 threads of an H200
    # host, and 6.2 ms on one thread against 8.8 on 16 of a 2-core VM. So they run here, one
    # after another; the chunks read on the host (real reads, which let go of the lock) still
    # run on the I/O threads.
    fetched: list[Buffer | FileSpan | None] = [None] * len(tasks)
    on_host = []
    for i, task in enumerate(tasks):
        if reads_directly(task.route):
            fetched[i] = span(task)
        else:
            on_host.append(i)
    if on_host:
        for i, data in zip(on_host, run(lambda i: get(tasks[i]), on_host), strict=True):
            fetched[i] = data
    return fetched


def _fetch_sharded(
    layout: ArrayLayout,
    store: Store,
    tasks: list[ChunkTask],
    indexes: MutableMapping[str, ShardIndex | None],
    local: LocalStore | None,
    run: Callable[[Callable[[str], list[Any]], Sequence[str]], list[list[Any]]],
) -> list[Buffer | FileSpan | None]:
    """The inner chunks of a sharded batch through ``store.sharding.fetch_inner_chunks``, the
    routine the CPU reader uses: per shard (in parallel), its index (read once per read and kept
    in ``indexes``, over the array's kept indexes), then its inner chunks as coalesced ranges,
    or, with ``local`` given and every wanted chunk of the shard readable by the device, as
    :class:`FileSpan` records of the shard file."""
    wanted: dict[str, list[int]] = {}
    shard_of_key: dict[str, tuple[int, ...]] = {}
    direct_keys: set[str] = set()
    for task in tasks:
        assert task.inner is not None  # a task of a sharded plan
        if task.key not in wanted:
            wanted[task.key] = []
            shard_of_key[task.key] = layout.shard_of(task.coords)[0]
            direct_keys.add(task.key)
        wanted[task.key].append(task.inner)
        if local is None or not reads_directly(task.route):
            direct_keys.discard(task.key)
    store_url = None if local is None else str(local.root)  # what a span's errors name

    def read_chunks(
        store: Store, key: str, index: ShardIndex, positions: Sequence[int], shard_layout: ShardLayout
    ) -> Sequence[Buffer | FileSpan | None]:
        if local is None or key not in direct_keys:
            return read_inner_chunks(store, key, index, positions, shard_layout)
        located = local.locate(key)
        known = index.version
        if located is None or not (isinstance(known, FileVersion) and same_bytes(known, located[2])):
            # The file at the path is no longer the version whose index was read (``store`` is
            # the snapshot that read it): its inner chunks come from the snapshot, on the host.
            return read_inner_chunks(store, key, index, positions, shard_layout)
        return [_inner_span(key, located, index, i, store_url) for i in positions]

    fetched = fetch_inner_chunks(
        store,
        wanted,
        lambda key: layout.sharding_at(shard_of_key[key]).layout,
        index_cache=indexes,
        read_chunks=read_chunks,
        map_shards=run,
    )
    return [fetched[task.key, task.inner] for task in tasks if task.inner is not None]


def _inner_span(
    key: str, located: tuple[str, int, FileVersion], index: ShardIndex, inner: int, store_url: str | None
) -> FileSpan | None:
    """Where inner chunk ``inner`` lies in the shard file ``located`` (its real path, size and
    version; None: empty in the index)."""
    if index.is_empty(inner):
        return None
    path, size, version = located
    start, n = int(index.offsets[inner]), int(index.nbytes[inner])
    if start + n > size:
        raise past_shard_end(key, inner, start, n, size)
    return FileSpan(path, start, n, version, store_url)


__all__ = ["fetch_batch", "file_version"]
