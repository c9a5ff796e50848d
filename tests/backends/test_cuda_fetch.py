"""The GPU path's host fetch (gpuzarr.backends.cuda.fetch) of shards that a writer replaces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import gpuzarr
from gpuzarr.backends.cuda.fetch import fetch_batch
from gpuzarr.backends.cuda.gpu_plan import build_gpu_read_plan
from gpuzarr.backends.cuda.launches import FileSpan
from gpuzarr.plan.selection import plan_selection

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
    layout = a._layout
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
