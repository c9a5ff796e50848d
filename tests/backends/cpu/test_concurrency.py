"""Concurrent writers and readers of one array: threads and processes writing disjoint chunks of
shared shards and chunks (nothing lost), readers of shards being rewritten (each shard read sees
one version), and writers killed mid-write (no torn chunk, no visible partial write).

Iteration counts are fixed, not durations; the processes are started with ``spawn`` (a forked
child of a process with a thread pool may inherit held locks).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GpuZarrError

ZSTD = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]

# -- writers of disjoint chunks ------------------------------------------------------------------

#: 16 rows of 64: inner chunks of one row by 8 columns (128 of them), shards of 4 rows (32 inner
#: chunks each), so that every shard is shared by many writers.
SHAPE = (16, 64)
INNER = (1, 8)
SHARD = (4, 64)
NCHUNKS = (SHAPE[0] // INNER[0]) * (SHAPE[1] // INNER[1])


def _chunk_region(c: int) -> tuple[slice, slice]:
    row, col = divmod(c, SHAPE[1] // INNER[1])
    return slice(row, row + 1), slice(col * INNER[1], (col + 1) * INNER[1])


def _create(store: Any, sharded: bool) -> gpuzarr.Array:
    if sharded:
        return gpuzarr.create(store, shape=SHAPE, chunks=INNER, shards=SHARD, dtype="int32", codecs=ZSTD)
    # Chunks of 4 x 64: writers of one 1 x 8 region each read, modify and write a shared chunk.
    return gpuzarr.create(store, shape=SHAPE, chunks=(4, 64), dtype="int32", codecs=ZSTD)


def _write_chunks(path: str, chunks: list[int]) -> None:
    a = gpuzarr.open_array(path, mode="r+")
    for c in chunks:
        a[_chunk_region(c)] = c + 1


def _check_every_chunk(a: gpuzarr.Array) -> None:
    got = a[...]
    lost = [c for c in range(NCHUNKS) if not np.all(got[_chunk_region(c)] == c + 1)]
    assert not lost, f"{len(lost)} of {NCHUNKS} writes lost: regions {lost[:10]}"


def _run_threads(target: Any, args: Any) -> None:
    """Run ``target(arg)`` for each of ``args`` in its own thread, all at once; wait for all."""
    threads = [threading.Thread(target=target, args=(arg,)) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.parametrize("sharded", [True, False], ids=["shards", "partial-chunks"])
def test_threads_writing_disjoint_chunks_lose_nothing(store: gpuzarr.Store, sharded: bool) -> None:
    a = _create(store, sharded)
    nthreads = 16
    start = threading.Barrier(nthreads)
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        start.wait()
        try:
            for c in range(t, NCHUNKS, nthreads):  # neighbours in every shard belong to others
                a[_chunk_region(c)] = c + 1
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    _run_threads(writer, range(nthreads))
    assert not errors
    _check_every_chunk(a)


@pytest.mark.parametrize("sharded", [True, False], ids=["shards", "partial-chunks"])
def test_processes_writing_disjoint_chunks_lose_nothing(tmp_path: Any, sharded: bool) -> None:
    path = str(tmp_path / "data.zarr")
    _create(path, sharded)
    nprocs = 4
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_write_chunks, args=(path, list(range(p, NCHUNKS, nprocs)))) for p in range(nprocs)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [proc.exitcode for proc in procs] == [0] * nprocs
    _check_every_chunk(gpuzarr.open_array(path, mode="r"))
    assert not [name for _, _, names in os.walk(path) for name in names if name.startswith(".__gpuzarr")]


# -- readers during shard rewrites ----------------------------------------------------------------

#: 2 x 2 shards (few, so that readers often meet the writer) of 4 x 4 inner chunks of 4 x 4 elements.
R_SHAPE = (32, 32)
R_INNER = (4, 4)
R_SHARD = (16, 16)


def _version(k: int) -> np.ndarray[Any, Any]:
    """The whole array at version ``k``: ``1000 k`` plus a pattern whose period depends on ``k``,
    so that the inner chunks' compressed sizes, and the shards' indexes, differ between
    versions. An element's version is its value // 1000."""
    flat = np.arange(R_SHAPE[0] * R_SHAPE[1], dtype=np.int64) % (1 + (k % 5) * 97)
    return (1000 * k + flat).astype("int32").reshape(R_SHAPE)


def _rewrite_shards(store: Any, stop: Any, rounds: int = 10_000) -> None:
    """Rewrite every shard whole, version after version, until ``stop`` is set."""
    a = gpuzarr.open_array(store, mode="r+")
    for k in range(1, rounds):
        if stop.is_set():
            return
        data = _version(k)
        for i in range(0, R_SHAPE[0], R_SHARD[0]):
            for j in range(0, R_SHAPE[1], R_SHARD[1]):
                region = (slice(i, i + R_SHARD[0]), slice(j, j + R_SHARD[1]))
                a[region] = data[region]


def _read_and_check(a: gpuzarr.Array, rng: random.Random) -> str | None:
    """Read a random region of one shard; what is wrong with it, or None."""
    si, sj = rng.randrange(0, R_SHAPE[0], R_SHARD[0]), rng.randrange(0, R_SHAPE[1], R_SHARD[1])
    i0, j0 = si + rng.randrange(R_SHARD[0]), sj + rng.randrange(R_SHARD[1])
    i1, j1 = rng.randint(i0 + 1, si + R_SHARD[0]), rng.randint(j0 + 1, sj + R_SHARD[1])
    if rng.random() < 0.3:  # whole shards take the reader's whole-shard path
        i0, j0, i1, j1 = si, sj, si + R_SHARD[0], sj + R_SHARD[1]
    try:
        got = a[i0:i1, j0:j1]
    except GpuZarrError as exc:
        return f"{type(exc).__name__}: {exc}"
    versions = np.unique(got // 1000)
    if len(versions) != 1:
        return f"one shard read saw versions {versions.tolist()}"
    expected = _version(int(versions[0]))[i0:i1, j0:j1]
    return None if np.array_equal(got, expected) else f"wrong data in version {int(versions[0])}"


def _readers(a: gpuzarr.Array, nthreads: int, nreads: int) -> list[str]:
    problems: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(nreads):
            try:
                problem = _read_and_check(a, rng)
            except BaseException as exc:  # reported by the test, in its own thread
                problem = f"{type(exc).__name__}: {exc}"
            if problem is not None:
                problems.append(problem)

    _run_threads(reader, range(nthreads))
    return problems


def _create_versioned(store: Any) -> gpuzarr.Array:
    a = gpuzarr.create(store, shape=R_SHAPE, chunks=R_INNER, shards=R_SHARD, dtype="int32", codecs=ZSTD)
    a[...] = _version(0)
    return a


def test_reads_during_shard_rewrites_by_a_thread_see_one_version(store: gpuzarr.Store) -> None:
    a = _create_versioned(store)
    stop = threading.Event()
    writer = threading.Thread(target=_rewrite_shards, args=(store, stop))
    writer.start()
    try:
        problems = _readers(a, nthreads=4, nreads=150)
    finally:
        stop.set()
        writer.join()
    assert not problems, f"{len(problems)} of 600 reads went wrong, e.g. {problems[:3]}"


def test_reads_during_shard_rewrites_by_a_process_see_one_version(tmp_path: Any) -> None:
    path = str(tmp_path / "data.zarr")
    a = _create_versioned(path)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    writer = context.Process(target=_rewrite_shards, args=(path, stop))
    writer.start()
    try:
        problems = _readers(a, nthreads=4, nreads=150)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert writer.exitcode == 0
    assert not problems, f"{len(problems)} of 600 reads went wrong, e.g. {problems[:3]}"


# -- writers killed mid-write -----------------------------------------------------------------------

K_SHAPE = (8, 262_144)  # 8 chunks of 1 MiB (float32) each


def _write_forever(path: str, sharded: bool, seed: int, writing: Any) -> None:
    """Write large chunks (whole and partial) in a loop, until killed; ``writing`` is set once
    the first write is done."""
    a = gpuzarr.open_array(path, mode="r+")
    rng = np.random.default_rng(seed)
    k = seed * 1_000_000
    while True:
        if k % 1_000_000 == 1:
            writing.set()
        k += 1
        row = int(rng.integers(K_SHAPE[0]))
        if sharded and rng.random() < 0.5:
            a[row, : K_SHAPE[1] // 2] = k  # half of a chunk: read-modify-write under a lock
        else:
            a[row, :] = k


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_writers_killed_mid_write_leave_whole_chunks_and_no_visible_partial_writes(
    tmp_path: Any, sharded: bool
) -> None:
    root = tmp_path / "data.zarr"
    group = gpuzarr.open_group(str(root), mode="w")
    kwargs: dict[str, Any] = {"shards": (2, K_SHAPE[1])} if sharded else {}
    a = group.create_array("a", shape=K_SHAPE, chunks=(1, K_SHAPE[1]), dtype="float32", codecs=ZSTD, **kwargs)
    a[...] = 0
    context = multiprocessing.get_context("spawn")
    rng = random.Random(12)
    writing = [context.Event() for _ in range(4)]
    writers = [
        context.Process(target=_write_forever, args=(str(root / "a"), sharded, w + 1, writing[w])) for w in range(4)
    ]
    for proc in writers:
        proc.start()
    for proc, started in zip(writers, writing, strict=True):
        # Killed at a random moment once it has written a chunk, most likely mid-write.
        assert started.wait(timeout=60)
        threading.Event().wait(rng.random() * 0.3)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
    for proc in writers:
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
    store = gpuzarr.LocalStore(root)
    keys = list(store.list_prefix(""))
    assert all(".__gpuzarr" not in key for key in keys)
    assert [name for name, _ in group.members()] == ["a"]
    b = gpuzarr.open_array(str(root / "a"), mode="r+")
    got = b[...]  # every chunk decodes
    for row in got:
        # A whole-row write and a half-row write: at most two values per row, each a writer's.
        assert len(np.unique(row[: K_SHAPE[1] // 2])) == 1 and len(np.unique(row[K_SHAPE[1] // 2 :])) == 1
    assert int(got.max()) > 0  # the writers did write
    # A writer killed holding a shard's lock does not block the next one.
    b[0, :10] = -1
    assert b[0, 0] == -1
