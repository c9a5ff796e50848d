"""The GPU path's host fetch (gpuzarr.backends.cuda.fetch): shards that a writer replaces, files
it may not look at."""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cuda.fetch import fetch_batch, file_version
from gpuzarr.backends.cuda.gpu_plan import build_gpu_read_plan
from gpuzarr.backends.cuda.launches import FileSpan
from gpuzarr.backends.cuda.routes import DecodeRoute
from gpuzarr.errors import StorePermissionError
from gpuzarr.plan.selection import plan_selection
from tests.permissions import without_permission

if TYPE_CHECKING:
    from gpuzarr.store.sharding import ShardIndex

ZSTD = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]


def test_direct_spans_of_a_replaced_shard_follow_its_new_index(tmp_path: Any) -> None:
    # A read keeps shard indexes across its batches. When the shard file is replaced between
    # two batches, the spans the device reads must come from the new file's index, not from
    # the cached index of the old file (which points at other bytes).
    store = gpuzarr.LocalStore(tmp_path / "data.zarr")
    a = gpuzarr.create(store, shape=(8, 8), chunks=(2, 2), shards=(8, 8), dtype="int32", codecs=ZSTD)
    a[...] = np.zeros((8, 8), "int32")
    layout = a.layout
    plan = build_gpu_read_plan(layout, plan_selection(Ellipsis, layout.dimensions()))
    indexes: dict[str, ShardIndex | None] = {}
    fetch_batch(layout, store, plan, 0, indexes, direct=True)
    assert list(indexes) == ["c/0/0"]
    a[...] = np.arange(64, dtype="int32").reshape(8, 8) * 1000  # other sizes, another index
    got = fetch_batch(layout, store, plan, 0, indexes, direct=True)
    shard = store.get("c/0/0")
    parts = layout.sharding_at((0, 0)).layout.split(shard, "c/0/0")
    tasks = [plan.tasks[t] for t in plan.batches[0]]
    assert len(got) == len(tasks)
    for task, span in zip(tasks, got, strict=True):
        assert isinstance(span, FileSpan) and task.inner is not None
        with open(span.path, "rb") as f:
            f.seek(span.offset)
            assert f.read(span.nbytes) == bytes(parts[task.inner])  # type: ignore[arg-type]


def test_a_file_the_host_may_not_look_at_is_an_error_naming_the_key(tmp_path: Any) -> None:
    """Finding a file the device will read (``LocalStore.locate``: its real path, size and
    version from one open): a missing file is None (read as missing, as the host path reads
    it); a refused one raises the store's error, never None."""
    store = gpuzarr.LocalStore(tmp_path / "data.zarr")
    store.set("c/0/0", b"chunk")
    assert store.locate("c/0/absent") is None
    assert file_version(str(tmp_path / "data.zarr" / "c" / "absent")) is None
    with without_permission(tmp_path / "data.zarr" / "c" / "0"), pytest.raises(StorePermissionError) as caught:
        store.locate("c/0/0")
    assert (caught.value.key, caught.value.errno) == ("c/0/0", errno.EACCES)
    located = store.locate("c/0/0")
    assert located is not None
    path, size, version = located
    assert path == store.real_path("c/0/0") == os.path.realpath(tmp_path / "data.zarr" / "c" / "0" / "0")
    assert (size, version) == file_version(path) and size == len(b"chunk")


def test_a_batch_mixing_direct_and_host_chunks_keeps_the_task_order(tmp_path: Any) -> None:
    # Files the device reads itself are found on the calling thread, the others read on the I/O
    # threads: each result must still land in its task's place, missing chunks as None.
    store = gpuzarr.LocalStore(tmp_path / "data.zarr")
    a = gpuzarr.create(store, shape=(8, 8), chunks=(2, 2), dtype="int32", codecs=ZSTD)
    a[...] = np.arange(64, dtype="int32").reshape(8, 8)
    store.erase("c/1/1")
    layout = a.layout
    plan = build_gpu_read_plan(layout, plan_selection(Ellipsis, layout.dimensions()))
    on_host = DecodeRoute("cpu", reason="read on the host for this test")
    tasks = tuple(replace(t, route=on_host) if i % 3 == 0 else t for i, t in enumerate(plan.tasks))
    mixed = replace(plan, tasks=tasks)
    fetched = fetch_batch(layout, store, mixed, 0, direct=True)
    assert len(fetched) == len(mixed.batches[0]) == 16
    for i, got in zip(mixed.batches[0], fetched, strict=True):
        task = mixed.tasks[i]
        if task.key == "c/1/1":
            assert got is None
        elif i % 3 == 0:
            assert not isinstance(got, FileSpan) and bytes(got) == store.get(task.key)  # type: ignore[arg-type]
        else:
            assert isinstance(got, FileSpan) and got.path == store.real_path(task.key)
            assert (got.offset, got.nbytes) == (0, len(store.get(task.key)))  # type: ignore[arg-type]
