"""The LRU chunk cache: bounded by its byte budget at every moment, least recently used out
first, counters that match what happened."""

from __future__ import annotations

import numpy as np
import pytest

from gpuzarr.errors import InvalidArgumentError
from gpuzarr.loader import ChunkCache


def _chunk(nbytes: int, value: int = 0) -> np.ndarray:
    return np.full(nbytes, value, dtype=np.uint8)


def test_least_recently_used_goes_first_and_the_budget_holds() -> None:
    cache = ChunkCache(300)
    for i in range(3):
        assert cache.put(("", 0, (i,)), _chunk(100, i))
    assert cache.get(("", 0, (0,))) is not None  # (0,) is now the most recently used
    assert cache.put(("", 0, (3,)), _chunk(100, 3))
    assert ("", 0, (1,)) not in cache and ("", 0, (0,)) in cache
    assert cache.get(("", 0, (1,))) is None
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.entries, stats.nbytes) == (1, 1, 1, 3, 300)
    assert cache.put(("", 0, (4,)), _chunk(250))  # makes room by evicting the three oldest
    assert cache.stats().nbytes == 250 and len(cache) == 1 and cache.stats().evictions == 4


def test_a_chunk_larger_than_the_budget_is_not_kept_and_evicts_nothing() -> None:
    cache = ChunkCache(100)
    assert cache.put(("a", 0, (0,)), _chunk(60))
    assert not cache.put(("a", 0, (1,)), _chunk(101))
    assert ("a", 0, (0,)) in cache and cache.stats().evictions == 0


def test_replacing_a_key_counts_its_bytes_once() -> None:
    cache = ChunkCache(100)
    cache.put(("a", 0, (0,)), _chunk(60))
    cache.put(("a", 0, (0,)), _chunk(70, 1))
    assert cache.stats().nbytes == 70
    got = cache.get(("a", 0, (0,)))
    assert got is not None and got[0] == 1
    cache.clear()
    assert cache.stats().nbytes == 0 and len(cache) == 0


@pytest.mark.parametrize("budget", [-1, 1.5, True])
def test_a_bad_budget_is_an_argument_error(budget: object) -> None:
    with pytest.raises(InvalidArgumentError, match="byte budget"):
        ChunkCache(budget)  # type: ignore[arg-type]


def test_get_many_looks_up_in_order_counts_and_refreshes_like_get() -> None:
    cache = ChunkCache(3 * 8)
    for i in range(3):
        cache.put(("f", 0, (i,)), np.full(1, i, dtype=np.int64))
    found = cache.get_many([("f", 0, (2,)), ("f", 0, (5,)), ("f", 0, (0,))])
    assert [None if v is None else int(v[0]) for v in found] == [2, None, 0]
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (2, 1)
    # (1,) is now the least recently used: the next chunk evicts it, not (0,) or (2,).
    cache.put(("f", 0, (3,)), np.full(1, 3, dtype=np.int64))
    assert cache.get_many([("f", 0, (1,))]) == [None]
    assert ("f", 0, (0,)) in cache and ("f", 0, (2,)) in cache
    assert cache.get_many([]) == []


def test_a_chunk_read_before_a_noted_write_is_not_kept() -> None:
    """A chunk read at one generation of its volume and put after the cache noted a later one
    may hold the old data: kept, it passed for current from then on."""
    cache = ChunkCache(1 << 20)
    cache.note_generation("data", 0, 1)
    assert cache.put(("data", 0, (0,)), np.zeros(4), generation=1)
    cache.note_generation("data", 0, 2)  # a write ended; the volume's chunks went
    assert not cache.put(("data", 0, (1,)), np.zeros(4), generation=1)
    assert ("data", 0, (1,)) not in cache
    assert cache.put(("data", 1, (1,)), np.zeros(4), generation=1)  # another volume: unaffected
    assert cache.put(("data", 0, (1,)), np.zeros(4), generation=2)
    assert len(cache) == 2


def test_generations_only_grow() -> None:
    """A note from a thread that looked before a write another thread has seen end must not
    take the volume back to its old generation (dropping the new chunks, keeping old ones)."""
    cache = ChunkCache(1 << 20)
    assert cache.put(("data", 0, (0,)), np.zeros(4), generation=2)  # the first seen: noted
    cache.note_generation("data", 0, 1)  # late: nothing happens
    assert ("data", 0, (0,)) in cache
    assert not cache.put(("data", 0, (1,)), np.zeros(4), generation=1)
    assert cache.put(("data", 0, (2,)), np.zeros(4), generation=3)  # later: the older chunks go
    assert ("data", 0, (0,)) not in cache and ("data", 0, (2,)) in cache
