"""CachingStore (the store conformance suite, LRU budget, invalidation, snapshots, threads) and
the shard indexes each open array keeps across reads."""

from __future__ import annotations

import contextlib
import pickle
import random
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import InvalidArgumentError
from gpuzarr.store import MemoryStore
from gpuzarr.store.base import Buffer, ByteRange, BytesSnapshot, Snapshot, Store
from gpuzarr.store.caching import ENTRY_OVERHEAD, CachingStore

from .conformance import StoreConformance, as_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class CountingStore(MemoryStore):
    """A MemoryStore that records every read request ``(key, byte range)``, snapshots included.

    ``versioned=False`` gives it the base class's snapshots, which report no version (as a
    store that cannot tell versions apart)."""

    def __init__(self, versioned: bool = True) -> None:
        super().__init__()
        self.versioned = versioned
        self.requests: list[tuple[str, ByteRange | None]] = []
        self._requests_lock = threading.Lock()

    def record(self, key: str, byte_range: ByteRange | None) -> None:
        with self._requests_lock:
            self.requests.append((key, byte_range))

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self.record(key, byte_range)
        return super().get(key, byte_range)

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        self.record(key, ByteRange(start, length))
        return super().get_into(key, buffer_for, start, length)

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        if not self.versioned:
            with Store.snapshot(self, key) as forwarding:
                yield forwarding
            return
        yield _CountingSnapshot(self, key, self.data.get(key))

    def of(self, key: str) -> list[ByteRange | None]:
        return [r for k, r in self.requests if k == key]


class _CountingSnapshot(BytesSnapshot):
    def __init__(self, store: CountingStore, key: str, value: Buffer | None) -> None:
        super().__init__(key, value)
        self.store = store

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self.store.record(key, byte_range)
        return super().get(key, byte_range)


class TestCachingStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return CachingStore(MemoryStore(), 1 << 20)

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, CachingStore) and isinstance(store.inner, MemoryStore)
        return CachingStore(MemoryStore(store.inner.data, read_only=True), 1 << 20)


class TestCachingStoreSmallBudget(TestCachingStore):
    """The same suite with room for about two small entries: every path evicts."""

    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return CachingStore(MemoryStore(), 2 * ENTRY_OVERHEAD + 40)


VALUE = bytes(range(100))


def entry_cost(nbytes: int) -> int:
    return nbytes + ENTRY_OVERHEAD


def test_repeated_reads_are_served_from_the_cache() -> None:
    inner = CountingStore()
    inner.set("k", VALUE)
    store = CachingStore(inner, 1 << 20)
    for _ in range(3):
        assert as_bytes(store.get("k", ByteRange(10, 5))) == VALUE[10:15]
        assert as_bytes(store.get("k", ByteRange.suffix(7))) == VALUE[-7:]
    assert inner.of("k") == [ByteRange(10, 5), ByteRange.suffix(7)]
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.entries) == (4, 2, 2)
    assert stats.nbytes == entry_cost(5) + entry_cost(7)
    assert (stats.hit_bytes, stats.miss_bytes) == (24, 12)


def test_a_range_inside_a_cached_whole_value_is_served_from_it() -> None:
    inner = CountingStore()
    inner.set("k", VALUE)
    store = CachingStore(inner, 1 << 20)
    assert as_bytes(store.get("k")) == VALUE
    got = store.get_ranges("k", [ByteRange(3, 4), ByteRange.suffix(2), ByteRange(90, None)])
    assert got is not None and [as_bytes(g) for g in got] == [VALUE[3:7], VALUE[-2:], VALUE[90:]]
    assert store.exists("k")
    view, size = store.get_into("k", lambda n: bytearray(n), 20, 10) or (None, None)
    assert as_bytes(view) == VALUE[20:30] and size == len(VALUE)
    assert inner.of("k") == [None]


def test_missing_keys_are_cached_until_written() -> None:
    inner = CountingStore()
    store = CachingStore(inner, 1 << 20)
    assert store.get("c/0") is None
    assert store.get("c/0", ByteRange(0, 4)) is None
    assert not store.exists("c/0")
    assert store.get_into("c/0", lambda n: bytearray(n)) is None
    assert len(inner.of("c/0")) == 1
    store.set("c/0", b"data")
    assert as_bytes(store.get("c/0")) == b"data"


def test_least_recently_used_entries_go_first() -> None:
    inner = CountingStore()
    for key in "abcd":
        inner.set(key, key.encode() * 50)
    store = CachingStore(inner, 3 * entry_cost(50))
    for key in "abc":
        store.get(key)
    store.get("a")  # b is now the least recently used
    store.get("d")
    assert store.stats().evictions == 1
    inner.requests.clear()
    for key in "acd":
        assert as_bytes(store.get(key)) == key.encode() * 50
    assert inner.requests == []
    assert as_bytes(store.get("b")) == b"b" * 50
    assert inner.requests == [("b", None)]
    assert store.stats().nbytes <= store.max_bytes


def test_values_larger_than_the_budget_are_cached_by_range() -> None:
    inner = CountingStore()
    big = bytes(1000)
    inner.set("big", big)
    store = CachingStore(inner, 600)
    for _ in range(2):
        assert as_bytes(store.get("big")) == big  # too large: never cached
        assert as_bytes(store.get("big", ByteRange(100, 200))) == big[100:300]
    assert inner.of("big") == [None, ByteRange(100, 200), None]
    assert store.stats().entries == 1


def test_writes_through_the_store_invalidate() -> None:
    inner = CountingStore()
    store = CachingStore(inner, 1 << 20)
    store.set("a/1", b"one")
    store.set("a/2", b"two")
    store.set("b", b"bee")
    for key in ("a/1", "a/2", "b"):
        store.get(key)
        store.get(key, ByteRange(1, 1))
    store.set("a/1", b"ONE")
    assert as_bytes(store.get("a/1")) == b"ONE"
    assert as_bytes(store.get("a/1", ByteRange(1, 1))) == b"N"
    store.erase("b")
    assert store.get("b") is None and store.get("b", ByteRange(1, 1)) is None
    store.erase_prefix("a/")
    assert store.get("a/1") is None and store.get("a/2", ByteRange(1, 1)) is None
    assert store.stats().nbytes == store.stats().entries * ENTRY_OVERHEAD  # only absences left


def test_others_writes_are_seen_after_clear() -> None:
    inner = MemoryStore()
    inner.set("k", b"old")
    store = CachingStore(inner, 1 << 20)
    assert as_bytes(store.get("k")) == b"old"
    inner.set("k", b"new")  # another writer: the cache does not know
    assert as_bytes(store.get("k")) == b"old"
    store.clear()
    assert as_bytes(store.get("k")) == b"new"
    assert store.stats().hits == 0


def test_snapshots_are_served_only_bytes_of_their_version() -> None:
    inner = CountingStore()
    inner.set("shard", b"A" * 64)
    store = CachingStore(inner, 1 << 20)
    with store.snapshot("shard") as first:
        assert first.version is not None
        assert as_bytes(first.get("shard", ByteRange.suffix(8))) == b"A" * 8
    with store.snapshot("shard") as again:
        assert as_bytes(again.get("shard", ByteRange.suffix(8))) == b"A" * 8
    assert len(inner.of("shard")) == 1  # the same version: from the cache
    inner.set("shard", b"B" * 64)  # replaced behind the cache's back
    with store.snapshot("shard") as second:
        assert second.version != first.version
        got = second.get_ranges("shard", [ByteRange.suffix(8), ByteRange(0, 4)])
        assert got is not None and [as_bytes(g) for g in got] == [b"B" * 8, b"B" * 4]
    with store.snapshot("absent") as absent:
        assert absent.get("absent") is None


def test_bytes_of_an_older_version_go_once_a_newer_one_is_cached() -> None:
    # A MemoryStore's version is its value object, which an entry's tag keeps alive and the
    # budget does not count: 40 rewrites of an 8 MiB shard read through a 1 MiB cache held
    # 327 MiB. Entries of older versions are dropped when a newer version's bytes are cached.
    import gc
    import weakref

    inner = gpuzarr.MemoryStore()
    store = CachingStore(inner, 1 << 20)
    values: list[weakref.ref[Any]] = []
    for k in range(5):
        value = np.full(1 << 16, k, dtype=np.uint8)  # weakly referable, as no bytes object is
        inner.data["shard"] = value  # type: ignore[assignment]
        values.append(weakref.ref(value))
        del value
        with store.snapshot("shard") as snap:
            assert as_bytes(snap.get("shard", ByteRange.suffix(16))) == bytes([k]) * 16
    gc.collect()
    assert [v() is not None for v in values] == [False, False, False, False, True]
    assert store.stats().entries == 1


def test_a_versionless_consistent_snapshot_bypasses_the_cache() -> None:
    class Unversioned(MemoryStore):
        @contextlib.contextmanager
        def snapshot(self, key: str) -> Iterator[Snapshot]:
            # Holds one version but cannot name it.
            yield _NoVersion(key, self.data.get(key))

    class _NoVersion(BytesSnapshot):
        @property
        def version(self) -> None:
            return None

    inner = Unversioned()
    inner.set("k", b"x" * 10)
    store = CachingStore(inner, 1 << 20)
    with store.snapshot("k") as snap:
        assert isinstance(snap, _NoVersion)
    assert store.stats().entries == 0


def test_reads_under_the_lock_see_the_stored_value() -> None:
    inner = MemoryStore()
    inner.set("counter", b"1")
    store = CachingStore(inner, 1 << 20)
    assert as_bytes(store.get("counter")) == b"1"
    inner.set("counter", b"2")  # another writer
    with store.lock("counter"):
        assert as_bytes(store.get("counter")) == b"2"
        with store.snapshot("counter") as snap:
            assert as_bytes(snap.get("counter")) == b"2"
        store.set("counter", b"3")
    assert as_bytes(store.get("counter")) == b"3"


def test_concurrent_reads_give_the_right_bytes_within_budget() -> None:
    inner = MemoryStore()
    values = {f"c/{i}": np.random.default_rng(i).integers(0, 256, 3000, dtype=np.uint8).tobytes() for i in range(16)}
    for key, value in values.items():
        inner.set(key, value)
    store = CachingStore(inner, 20_000)
    errors: list[str] = []
    requests = [0]
    count_lock = threading.Lock()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        n = 0
        for _ in range(400):
            key = rng.choice(list(values))
            start, length = rng.randrange(0, 3000), rng.randrange(0, 600)
            if rng.random() < 0.2:
                got = store.get(key)
                want = values[key]
            else:
                got = store.get(key, ByteRange(start, length))
                want = values[key][start : start + length]
            n += 1
            if as_bytes(got) != want:
                errors.append(f"{key} [{start}, +{length}]")
        with count_lock:
            requests[0] += n

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = store.stats()
    assert stats.hits + stats.misses == requests[0]
    assert stats.hits > 0 and stats.evictions > 0
    assert stats.nbytes <= store.max_bytes


def test_concurrent_writes_never_leave_a_stale_entry() -> None:
    # A read that began before a write must not cache the value the write replaced.
    store = CachingStore(MemoryStore(), 1 << 20)
    store.set("k", b"0")
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            store.get("k")

    readers = [threading.Thread(target=read) for _ in range(4)]
    for thread in readers:
        thread.start()
    try:
        for i in range(1, 300):
            store.set("k", str(i).encode())
            assert as_bytes(store.get("k")) == str(i).encode()
    finally:
        stop.set()
        for thread in readers:
            thread.join()


def test_pickle_carries_the_inner_store_not_the_cache() -> None:
    store = CachingStore(MemoryStore(), 4096)
    store.set("k", b"v")
    store.get("k")
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, CachingStore) and copy.max_bytes == 4096
    assert copy.stats().entries == 0
    assert as_bytes(copy.get("k")) == b"v"


def test_capabilities_are_the_inner_stores() -> None:
    inner = MemoryStore(read_only=True)
    store = CachingStore(inner, 100)
    assert store.read_only and store.locks_across_threads and store.supports_partial_reads
    assert store.io_concurrency is None
    assert store.kvstore_json() == inner.kvstore_json()


@pytest.mark.parametrize("bad", [-1, 1.5, None, True])
def test_bad_budget_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="max_bytes"):
        CachingStore(MemoryStore(), bad)


def test_inner_must_be_a_store() -> None:
    with pytest.raises(InvalidArgumentError, match="inner"):
        CachingStore({}, 100)  # type: ignore[arg-type]


# -- the shard indexes an open array keeps ---------------------------------------------------------


def sharded(store: Store) -> tuple[gpuzarr.Array, np.ndarray[Any, Any]]:
    data = np.arange(32 * 32, dtype="<u2").reshape(32, 32)
    array = gpuzarr.create(store, shape=(32, 32), dtype="<u2", chunks=(4, 4), shards=(16, 16), device="cpu")
    array[...] = data
    return array, data


def index_reads(store: CountingStore, key: str) -> int:
    """Requests of the shard index (a suffix read: the index is at the shard's end)."""
    return sum(1 for r in store.of(key) if r is not None and r.offset < 0)


def crops_of_one_shard(n: int) -> list[tuple[slice, slice]]:
    rng = random.Random(0)
    return [
        (slice(a, a + 3), slice(b, b + 5)) for a, b in ((rng.randrange(0, 13), rng.randrange(0, 11)) for _ in range(n))
    ]


def test_an_array_reads_each_shard_index_once_across_reads() -> None:
    store = CountingStore()
    array, data = sharded(store)
    store.requests.clear()
    for sel in crops_of_one_shard(10):
        np.testing.assert_array_equal(array[sel], data[sel])
    assert index_reads(store, "c/0/0") == 1
    assert len(store.of("c/0/0")) > 1  # the inner chunks were read each time


def test_a_write_through_the_array_invalidates_its_index() -> None:
    store = CountingStore()
    array, data = sharded(store)
    store.requests.clear()
    np.testing.assert_array_equal(array[0:3, 0:3], data[0:3, 0:3])
    assert len(array.layout.shard_indexes) == 1
    array[0:4, 0:4] = 7
    data[0:4, 0:4] = 7
    assert len(array.layout.shard_indexes) == 0
    store.requests.clear()
    np.testing.assert_array_equal(array[0:3, 0:6], data[0:3, 0:6])
    assert index_reads(store, "c/0/0") == 1


def test_another_writers_shard_is_read_with_its_own_index() -> None:
    store = CountingStore()
    array, data = sharded(store)
    np.testing.assert_array_equal(array[0:2, 0:2], data[0:2, 0:2])
    other = gpuzarr.open(store, device="cpu")
    other[0:16, 0:16] = 9  # a new version of shard c/0/0, written past the first array
    data[0:16, 0:16] = 9
    np.testing.assert_array_equal(array[0:3, 0:5], data[0:3, 0:5])
    np.testing.assert_array_equal(array[...], data)


def test_indexes_of_a_store_without_versions_are_read_once_per_read() -> None:
    store = CountingStore(versioned=False)
    array, data = sharded(store)
    store.requests.clear()
    for sel in crops_of_one_shard(3):
        np.testing.assert_array_equal(array[sel], data[sel])
    assert index_reads(store, "c/0/0") == 3
    assert len(array.layout.shard_indexes) == 0
    # Through a CachingStore the index bytes are fetched once.
    cached = CachingStore(store, 1 << 20)
    array = gpuzarr.open(cached, device="cpu")
    store.requests.clear()
    for sel in crops_of_one_shard(5):
        np.testing.assert_array_equal(array[sel], data[sel])
    assert index_reads(store, "c/0/0") == 1
