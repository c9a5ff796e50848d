"""The decoded shard indexes of one open array, kept across reads.

Reading a few inner chunks of a shard costs two requests: the index, then the chunks. Random
crops of a sharded array come back to the same shards again and again, so each open array
(``ArrayLayout.shard_indexes``) keeps the indexes it has read, least recently used first out,
within :data:`SHARD_INDEX_CACHE_BYTES`.

An index is kept only with the version of the shard it was read from (``ShardIndex.version``,
from the store's :meth:`~gpuzarr.store.base.Store.snapshot`), and ``store.sharding`` uses it
again only for a snapshot of the same version: a shard replaced since, by this array or by
another writer, has a new version and its index is read again, so an index never meets the
bytes of another version. Where asking for the version costs a request (an object store's
HEAD), the snapshot assumes the kept version instead (:meth:`Snapshot.assume_version`): the
inner chunks' requests carry it (``If-Match``), and a shard replaced since fails them and is
read again from a fresh index, so a kept index saves a request per shard and read.

Stores whose snapshots report no version (and absent shards) get no entries here; their indexes
are still read once per read (a per-read layer, :meth:`for_read`), and a
:class:`~gpuzarr.store.caching.CachingStore` keeps their index bytes. Writes through the array
drop the shards they write (``backends/cpu/write.py``); a versioned entry would be refused
anyway, this keeps the memory for live ones.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sharding import ShardIndex

#: the budget of one array's cache: 16 MiB holds the indexes of 2048 shards of 512 inner chunks
SHARD_INDEX_CACHE_BYTES = 16 * 2**20


def _cost(index: ShardIndex) -> int:
    return int(index.offsets.nbytes + index.nbytes.nbytes)


class ShardIndexCache:
    """Versioned shard indexes by shard key, LRU within ``max_bytes`` (thread-safe)."""

    def __init__(self, max_bytes: int = SHARD_INDEX_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._indexes: OrderedDict[str, ShardIndex] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._indexes)

    def get(self, key: str) -> ShardIndex | None:
        """The index kept for ``key`` (the caller compares its version), or None."""
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
            return index

    def put(self, key: str, index: ShardIndex | None) -> None:
        """Keep ``index`` of the shard at ``key``; ignored without a version (see module docs)."""
        if index is None or index.version is None or _cost(index) > self.max_bytes:
            return
        with self._lock:
            old = self._indexes.pop(key, None)
            if old is not None:
                self._nbytes -= _cost(old)
            self._indexes[key] = index
            self._nbytes += _cost(index)
            while self._nbytes > self.max_bytes:
                _, dropped = self._indexes.popitem(last=False)
                self._nbytes -= _cost(dropped)

    def discard(self, key: str) -> None:
        """Forget the index of the shard at ``key`` (it is being rewritten)."""
        with self._lock:
            old = self._indexes.pop(key, None)
            if old is not None:
                self._nbytes -= _cost(old)

    def clear(self) -> None:
        """Forget every index."""
        with self._lock:
            self._indexes.clear()
            self._nbytes = 0

    def for_read(self) -> MutableMapping[str, ShardIndex | None]:
        """The ``index_cache`` of one read for ``store.sharding.fetch_inner_chunks``: this
        cache under a layer of the indexes the read itself met (versioned or not)."""
        return _ReadIndexes(self)


class _ReadIndexes(MutableMapping[str, "ShardIndex | None"]):
    """One read's indexes over the array's: reads look here first, then in the array's cache;
    writes go to both (the array's keeps only versioned ones)."""

    def __init__(self, shared: ShardIndexCache) -> None:
        self.shared = shared
        self.local: dict[str, ShardIndex | None] = {}

    def __getitem__(self, key: str) -> ShardIndex | None:
        if key in self.local:
            return self.local[key]
        index = self.shared.get(key)
        if index is None:
            raise KeyError(key)
        return index

    def __setitem__(self, key: str, index: ShardIndex | None) -> None:
        self.local[key] = index
        self.shared.put(key, index)

    def __delitem__(self, key: str) -> None:
        self.local.pop(key, None)
        self.shared.discard(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.local)

    def __len__(self) -> int:
        return len(self.local)


__all__ = ["SHARD_INDEX_CACHE_BYTES", "ShardIndexCache"]
