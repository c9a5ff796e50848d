"""A least-recently-used cache of decoded chunks, bounded by a byte budget.

One class serves both levels of the loader: the host cache holds NumPy chunks, the device cache
CuPy chunks; only ``nbytes`` of the values is looked at. A chunk larger than the whole budget is
never kept (it would evict everything for one entry), and the budget is never exceeded, not even
for a moment: the entries to evict go before the new one is counted in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError

#: a cache key: (field, volume index, chunk coordinates)
ChunkKey = tuple[str, int, tuple[int, ...]]


@dataclass(frozen=True)
class CacheStats:
    """What a cache did so far.

    Attributes
    ----------
    hits, misses
        Look-ups that found their chunk, and those that did not.
    evictions
        Chunks dropped to make room.
    entries, nbytes, capacity
        Chunks held now, their bytes, and the byte budget.
    """

    hits: int
    misses: int
    evictions: int
    entries: int
    nbytes: int
    capacity: int


def note_generation_in(generations: dict[tuple[str, int], int], volume: tuple[str, int], generation: int) -> int:
    """Note ``generation`` (an ``Array.data_generation``) of ``volume`` in ``generations``: 1
    where it is later than the one noted before (now noted: what was kept of the volume is
    older), 0 where it is that one, -1 where it is earlier. An earlier one comes from a thread
    that looked before a write another thread has seen end (generations only grow), and what
    it read may be the old data. The first one noted is the volume's first seen, whether a batch
    or a chunk read ahead of any batch brought it."""
    seen = generations.setdefault(volume, generation)
    if generation == seen:
        return 0
    if generation < seen:
        return -1
    generations[volume] = generation
    return 1


class ChunkCache:
    """Decoded chunks by key, the least recently used dropped first once ``capacity`` bytes are
    held. Safe to use from several threads."""

    def __init__(self, capacity: int, name: str = "cache") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise InvalidArgumentError(f"{name}: expected a byte budget >= 0, got {capacity!r}")
        self.capacity = capacity
        self._entries: OrderedDict[ChunkKey, Any] = OrderedDict()
        self._nbytes = 0
        self._hits = self._misses = self._evictions = 0
        self._lock = threading.Lock()
        #: each volume's ``Array.data_generation`` when it was last looked at (see note_generation)
        self._generations: dict[tuple[str, int], int] = {}

    def get(self, key: ChunkKey) -> Any:
        """The chunk stored under ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return value

    def get_many(self, keys: list[ChunkKey]) -> list[Any]:
        """:meth:`get` of each of ``keys`` under one hold of the lock (a batch looks up a hundred
        chunks or so): the chunks found (now the most recently used, in ``keys``' order) and
        None where there is none."""
        entries = self._entries
        with self._lock:
            found = [entries.get(key) for key in keys]
            hits = 0
            for key, value in zip(keys, found, strict=True):
                if value is not None:
                    entries.move_to_end(key)
                    hits += 1
            self._hits += hits
            self._misses += len(keys) - hits
        return found

    def count_misses(self, count: int) -> None:
        """Count ``count`` look-ups that found nothing made elsewhere (chunks a loader read
        ahead of their batch after finding them in no cache)."""
        with self._lock:
            self._misses += count

    def put(self, key: ChunkKey, value: Any, generation: int | None = None) -> bool:
        """Keep ``value`` under ``key``, evicting the least recently used chunks to make room;
        False when it is larger than the whole budget (then nothing is evicted).

        ``generation``: the volume's ``Array.data_generation`` when ``value`` was read, noted as
        :meth:`note_generation` notes it. Where this cache has noted a later one (a write
        through the Array ended, and a batch on another thread dropped the volume's chunks),
        the value may be the old data and is not kept (False): kept, it would pass for current
        from then on.
        """
        size = int(value.nbytes)
        with self._lock:
            if generation is not None and not self._noted(key[0], key[1], generation):
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= int(old.nbytes)
            if size > self.capacity:
                return False
            while self._nbytes + size > self.capacity:
                _, evicted = self._entries.popitem(last=False)
                self._nbytes -= int(evicted.nbytes)
                self._evictions += 1
            self._entries[key] = value
            self._nbytes += size
            return True

    def note_generation(self, field: str, volume: int, generation: int) -> None:
        """Drop the chunks of a volume whose Array's ``data_generation`` moved since this cache
        last saw it (written since they were read); not counted as evictions."""
        with self._lock:
            self._noted(field, volume, generation)

    def _noted(self, field: str, volume: int, generation: int) -> bool:
        """:func:`note_generation_in` this cache's generations (under the lock); a later one
        drops the volume's chunks."""
        moved = note_generation_in(self._generations, (field, volume), generation)
        if moved > 0:
            for key in [k for k in self._entries if k[0] == field and k[1] == volume]:
                self._nbytes -= int(self._entries.pop(key).nbytes)
        return moved >= 0

    def clear(self) -> None:
        """Drop every chunk (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    def stats(self) -> CacheStats:
        """The counters and the current size."""
        with self._lock:
            return CacheStats(
                self._hits, self._misses, self._evictions, len(self._entries), self._nbytes, self.capacity
            )

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
