"""Read-modify-writes on stores with conditional writes: retried when another writer came
first, so that writers of disjoint parts of one shard or chunk lose nothing."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cpu import write
from gpuzarr.errors import StoreError, UnsupportedOperationError
from gpuzarr.store import MemoryStore, ObjectStore

if TYPE_CHECKING:
    from gpuzarr.store.base import BoundedBufferFor, Buffer
    from tests.servers import S3Bucket

WRITERS = 8
PARTS = 4
ROUNDS = 3


class FlakyStore(MemoryStore):
    """A memory store with versioned values whose set_if loses ``fail`` times, then works."""

    supports_conditional_writes = True

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail
        self.versions: dict[str, int] = {}
        self.reads = 0
        self.puts = 0

    def set(self, key: str, value: Buffer) -> None:
        super().set(key, value)
        self.versions[key] = self.versions.get(key, 0) + 1

    def get_versioned(self, key: str, bound: BoundedBufferFor | None = None) -> tuple[Buffer | None, Any]:
        self.reads += 1
        value = self.get(key)
        if value is not None and bound is not None:
            bound.check(memoryview(value).nbytes)
        return value, None if value is None else self.versions[key]

    def set_if(self, key: str, value: Buffer, version: Any) -> bool:
        self.puts += 1
        if self.fail > 0:
            self.fail -= 1
            return False
        current = self.versions.get(key) if key in self.data else None
        if current != version:
            return False
        self.set(key, value)
        return True

    def erase_if(self, key: str, version: Any) -> bool:
        if key in self.data and self.versions[key] != version:
            return False
        self.erase(key)
        return True


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write, "RMW_BACKOFF", 0.0)


@pytest.mark.parametrize("shards", [None, (16,)])
def test_a_lost_conditional_write_is_redone(shards: tuple[int, ...] | None) -> None:
    store = FlakyStore(fail=0)
    a = gpuzarr.create(store, shape=(32,), dtype="i4", chunks=(8,), shards=shards, fill_value=0)
    a[:] = np.arange(32)
    store.fail, store.reads, store.puts = 3, 0, 0
    a[2:5] = -1  # part of one chunk (of one shard)
    assert (store.reads, store.puts) == (4, 4)
    expected = np.arange(32)
    expected[2:5] = -1
    np.testing.assert_array_equal(a[...], expected)


@pytest.mark.parametrize("shards", [None, (16,)])
def test_conflicts_on_every_attempt_raise_naming_the_key(shards: tuple[int, ...] | None) -> None:
    store = FlakyStore(fail=0)
    a = gpuzarr.create(store, shape=(32,), dtype="i4", chunks=(8,), shards=shards, fill_value=0)
    a[:] = 1
    store.fail, store.puts = write.RMW_ATTEMPTS, 0
    with pytest.raises(StoreError, match="conflicting writers") as info:
        a[9:10] = 5
    assert info.value.key == ("c/0" if shards else "c/1")
    assert store.puts == write.RMW_ATTEMPTS
    np.testing.assert_array_equal(a[...], np.ones(32))  # nothing written


def test_read_modify_writes_through_a_host_cache_stay_conditional() -> None:
    """``storage_options={"cache_bytes": ...}`` puts a CachingStore in front of the object
    store: its writes must still be conditional, and a cached value never stands in for the
    version a write compares with."""
    from gpuzarr.store import CachingStore

    inner = FlakyStore(fail=0)
    store = CachingStore(inner, 1 << 20)
    assert store.supports_conditional_writes
    a = gpuzarr.create(store, shape=(32,), dtype="i4", chunks=(8,), shards=(16,), fill_value=0)
    a[:] = np.arange(32)
    a[...]  # the shards are now in the cache
    inner.fail, inner.reads, inner.puts = 2, 0, 0
    a[2:5] = -1
    assert (inner.reads, inner.puts) == (3, 3)
    expected = np.arange(32)
    expected[2:5] = -1
    np.testing.assert_array_equal(a[...], expected)


def test_a_value_become_all_fill_is_erased_conditionally() -> None:
    store = FlakyStore(fail=0)
    a = gpuzarr.create(store, shape=(16,), dtype="i4", chunks=(8,), shards=(16,), fill_value=0)
    a[2:4] = 7
    assert "c/0" in store.data
    a[0:5] = 0
    assert "c/0" not in store.data


def test_stores_without_conditional_writes_say_so() -> None:
    store = MemoryStore()
    assert not store.supports_conditional_writes
    with pytest.raises(UnsupportedOperationError):
        store.get_versioned("k")
    with pytest.raises(UnsupportedOperationError):
        store.set_if("k", b"v", None)
    with pytest.raises(UnsupportedOperationError):
        store.erase_if("k", None)


# -- many writers on S3 (moto) ------------------------------------------------------------------


def _writers(bucket: S3Bucket, path: str, work: Any) -> None:
    """Run ``work(array, writer)`` on WRITERS threads, each with its own store and client.

    Each store has its own URL, so that the per-process lock does not serialise them: they
    race as writers in different processes or hosts would.
    """
    base = ObjectStore.from_url(f"{bucket.url}/{path}", bucket.storage_options())
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def run(writer: int) -> None:
        try:
            store = ObjectStore(base.store, url=f"{base.url}?writer={writer}")
            a = gpuzarr.open(store, mode="r+")
            start.wait()
            work(a, writer)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_writers_of_disjoint_inner_chunks_of_shared_shards_lose_nothing(s3_bucket: S3Bucket) -> None:
    # 32 inner chunks of 8, four to a shard; writer w writes inner chunks w, w + 8, w + 16, w + 24,
    # so that every shard has four writers.
    n = WRITERS * PARTS
    url = f"{s3_bucket.url}/sharded.zarr"
    gpuzarr.create(url, shape=(n * 8,), dtype="i4", chunks=(8,), shards=(32,), fill_value=0,
                   storage_options=s3_bucket.storage_options())

    def work(a: Any, writer: int) -> None:
        for r in range(ROUNDS):
            for j in range(PARTS):
                i = j * WRITERS + writer
                a[i * 8 : i * 8 + 8] = i * 10 + r + 1

    _writers(s3_bucket, "sharded.zarr", work)
    b = gpuzarr.open(url, mode="r", storage_options=s3_bucket.storage_options())
    expected = np.repeat(np.arange(n) * 10 + ROUNDS, 8)
    np.testing.assert_array_equal(b[...], expected)


def test_writers_of_disjoint_parts_of_one_chunk_lose_nothing(s3_bucket: S3Bucket) -> None:
    # PARTS chunks of WRITERS * 8; writer w writes elements 8w to 8w + 8 of every chunk.
    size = WRITERS * 8
    url = f"{s3_bucket.url}/chunks.zarr"
    gpuzarr.create(url, shape=(PARTS * size,), dtype="i4", chunks=(size,), fill_value=0,
                   storage_options=s3_bucket.storage_options())

    def work(a: Any, writer: int) -> None:
        for r in range(ROUNDS):
            for c in range(PARTS):
                start = c * size + writer * 8
                a[start : start + 8] = c * 100 + writer * 10 + r + 1

    _writers(s3_bucket, "chunks.zarr", work)
    b = gpuzarr.open(url, mode="r", storage_options=s3_bucket.storage_options())
    expected = np.array(
        [c * 100 + w * 10 + ROUNDS for c in range(PARTS) for w in range(WRITERS) for _ in range(8)]
    )
    np.testing.assert_array_equal(b[...], expected)
