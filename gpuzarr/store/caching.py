"""A store that keeps the bytes it fetches from another store in a host LRU cache.

``CachingStore(inner, max_bytes)`` serves repeated reads of remote data (random crops of a
training set, a notebook's repeated slices) from memory. It caches what was asked for: whole
values, and byte ranges by ``(key, start, stop)`` (suffix ranges by their length), each a
separate entry, so inner chunks of a shard and shard indexes are cached without their shard. A
range inside a whole value already cached is served from it. Absent keys are cached too (a
missing chunk reads as the fill value without another request).

Budget
------
Entries cost their bytes plus :data:`ENTRY_OVERHEAD`; the least recently used go when the total
would pass ``max_bytes``. A single entry larger than ``max_bytes`` is passed through uncached:
a value too large for the budget is still cached range by range, as it is read.

Who sees what
-------------
Writes and erases through the store drop the key's entries, so this process sees its own
writes at once. A CachingStore assumes that nothing else changes the data while it is open: a
value another process (or another store object) writes may be served stale until its entries
are evicted or :meth:`CachingStore.clear` is called. Use it for data that is read, not for data
being written elsewhere meanwhile.

Snapshots stay one version. Where the inner store's snapshot reports a version
(``Snapshot.version``: a LocalStore's ``FileVersion``, a MemoryStore's value object), cached
bytes are tagged with it and served only to snapshots of the same version, so a shard's index
and its inner chunks never mix versions. Where it is consistent but reports no
version, snapshot reads bypass the cache. Where it cannot promise one version at all
(``consistent`` False) the cache adds nothing to that: such reads go through it untagged. While
this thread holds :meth:`CachingStore.lock` of a key, reads of that key bypass the cache, so a
read-modify-write reads the stored value.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from .base import BoundedBufferFor, Buffer, ByteRange, Snapshot, Store, validate_key

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator, Sequence

#: bytes each entry costs beyond its value (the entry's key and bookkeeping), so that a budget
#: also bounds the number of small and absent entries
ENTRY_OVERHEAD = 128

#: ``(key, version tag, start, stop)``: ``start`` negative for a suffix, ``stop`` None to the
#: end; ``(key, tag, 0, None)`` is the whole value (or None: the key is absent)
_EntryKey = tuple[str, Any, int, "int | None"]
_MISS = object()


@dataclass(frozen=True)
class CacheStats:
    """Counters of a :class:`CachingStore` since it was made (or :meth:`CachingStore.clear`)."""

    #: reads (each range of a ``get_ranges`` counts) served from the cache
    hits: int
    #: reads passed to the inner store
    misses: int
    #: entries dropped to stay within the budget
    evictions: int
    #: bytes held now (values plus ``ENTRY_OVERHEAD`` per entry)
    nbytes: int
    #: entries held now
    entries: int
    #: bytes served from the cache
    hit_bytes: int
    #: bytes fetched from the inner store
    miss_bytes: int


def _span(r: ByteRange | None) -> tuple[int, int | None]:
    """The ``(start, stop)`` part of an entry key for a request."""
    if r is None:
        return 0, None
    if r.offset < 0 or r.length is None:
        return r.offset, None
    return r.offset, r.offset + r.length


def _nbytes(value: Buffer | None) -> int:
    return 0 if value is None else memoryview(value).nbytes


def _as_bytes(value: Buffer) -> bytes:
    # The cache holds immutable copies: a view into another store's memory (or a caller's
    # buffer) could change, or keep a much larger value alive.
    return value if type(value) is bytes else bytes(memoryview(value).cast("B"))


class CachingStore(Store):
    """``inner`` with an LRU cache of fetched bytes within ``max_bytes`` (see the module docs).

    Parameters
    ----------
    inner
        The store read from and written to.
    max_bytes
        The cache's budget in bytes (values plus a small overhead per entry).

    Listings go to ``inner`` uncached. Capabilities (``supports_partial_reads``, the write,
    delete, listing and conditional-write flags, the lock flags, ``io_concurrency``,
    ``read_only``) are the inner store's, and conditional writes go to it uncached; :meth:`kvstore_json` is the
    inner store's (a spec reopens the data without the cache). Pickling carries the inner store
    and the budget; the copy starts with an empty cache.
    """

    def __init__(self, inner: Store, max_bytes: int) -> None:
        if not isinstance(inner, Store):
            raise InvalidArgumentError(f"CachingStore: inner must be a Store, got {type(inner).__name__}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidArgumentError(f"CachingStore: max_bytes must be an int >= 0, got {max_bytes!r}")
        super().__init__(read_only=inner.read_only)
        self.inner = inner
        self.max_bytes = max_bytes
        self.supports_partial_reads = inner.supports_partial_reads
        self.supports_writes = inner.supports_writes
        self.supports_deletes = inner.supports_deletes
        self.supports_listing = inner.supports_listing
        self.reads_sizes_first = inner.reads_sizes_first
        # Read-modify-writes through the cache stay conditional on an object store: a cached
        # value is never what a conditional write compares with (get_versioned reads inner).
        self.supports_conditional_writes = inner.supports_conditional_writes
        self.locks_across_threads = inner.locks_across_threads
        self.locks_across_processes = inner.locks_across_processes
        #: how many requests to keep in flight: the inner store's (None: no preference)
        self.io_concurrency: int | None = inner.io_concurrency
        self._lock = threading.Lock()
        self._entries: OrderedDict[_EntryKey, bytes | None] = OrderedDict()
        self._of_key: dict[str, set[_EntryKey]] = {}
        #: (key, tag) -> the value's total size, where known (what get_into reports)
        self._sizes: dict[tuple[str, Any], int] = {}
        self._nbytes_held = 0
        # Bumped by every write: a fetch that started before a write must not cache what it
        # read, which may be the value the write replaced.
        self._writes = 0
        self._held = threading.local()
        self._hits = self._misses = self._evictions = self._hit_bytes = self._miss_bytes = 0

    def __repr__(self) -> str:
        return f"CachingStore({self.inner!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        CachingStore.__init__(self, state["inner"], state["max_bytes"])

    # -- the cache -------------------------------------------------------------------------------

    def stats(self) -> CacheStats:
        """The hit, miss and eviction counts and what the cache holds now."""
        with self._lock:
            return CacheStats(
                self._hits,
                self._misses,
                self._evictions,
                self._nbytes_held,
                len(self._entries),
                self._hit_bytes,
                self._miss_bytes,
            )

    def clear(self) -> None:
        """Drop every entry and reset the counters (e.g. after others wrote the data)."""
        with self._lock:
            self._entries.clear()
            self._of_key.clear()
            self._sizes.clear()
            self._nbytes_held = 0
            self._writes += 1
            self._hits = self._misses = self._evictions = self._hit_bytes = self._miss_bytes = 0

    def _lookup(self, key: str, tag: Any, r: ByteRange | None) -> Any:
        """The cached answer to one request (bytes, or None: absent), or ``_MISS``. Holds the lock."""
        whole_key = (key, tag, 0, None)
        if whole_key in self._entries:
            self._entries.move_to_end(whole_key)
            whole = self._entries[whole_key]
            if whole is None or r is None:
                return whole
            start, stop = r.resolve(len(whole))
            return memoryview(whole)[start:stop]
        entry_key = (key, tag, *_span(r))
        if entry_key in self._entries:
            self._entries.move_to_end(entry_key)
            return self._entries[entry_key]
        return _MISS

    def _insert(self, entry_key: _EntryKey, value: Buffer | None, writes: int) -> Buffer | None:
        """Cache ``value`` (when no write came since ``writes`` and it fits); returns what to
        hand out: the cached copy, or the value itself when it was not cached. Holds the lock."""
        cost = _nbytes(value) + ENTRY_OVERHEAD
        if writes != self._writes or cost > self.max_bytes:
            return value
        stored = None if value is None else _as_bytes(value)
        old = self._entries.pop(entry_key, _MISS)
        if old is not _MISS:
            self._nbytes_held -= _nbytes(old) + ENTRY_OVERHEAD
        self._drop_other_versions(entry_key)
        self._entries[entry_key] = stored
        self._of_key.setdefault(entry_key[0], set()).add(entry_key)
        self._nbytes_held += cost
        while self._nbytes_held > self.max_bytes:
            dropped_key, dropped = self._entries.popitem(last=False)
            self._nbytes_held -= _nbytes(dropped) + ENTRY_OVERHEAD
            keys = self._of_key.get(dropped_key[0])
            if keys is not None:
                keys.discard(dropped_key)
                if not keys:
                    del self._of_key[dropped_key[0]]
                    self._forget_sizes(dropped_key[0])
            self._evictions += 1
        return stored

    def _drop_other_versions(self, entry_key: _EntryKey) -> None:
        """Drop the entries of the key of ``entry_key`` cached under another version: a newer
        snapshot saw a new one, and no later snapshot asks for the old. A version tag may hold
        its whole value (a MemoryStore's is the value object), which the budget does not count:
        kept, 40 rewrites of an 8 MiB shard read through a 1 MiB cache held 327 MiB."""
        key, tag = entry_key[0], entry_key[1]
        if tag is None:
            return
        keys = self._of_key.get(key)
        if not keys:
            return
        for other in [k for k in keys if k[1] is not None and k[1] != tag]:
            self._nbytes_held -= _nbytes(self._entries.pop(other)) + ENTRY_OVERHEAD
            keys.discard(other)

    def _forget_sizes(self, key: str) -> None:
        for size_key in [s for s in self._sizes if s[0] == key]:
            del self._sizes[size_key]

    def _invalidate(self, key: str) -> None:
        with self._lock:
            self._writes += 1
            for entry_key in self._of_key.pop(key, ()):
                self._nbytes_held -= _nbytes(self._entries.pop(entry_key)) + ENTRY_OVERHEAD
            self._forget_sizes(key)

    def _invalidate_prefix(self, prefix: str) -> None:
        with self._lock:
            keys = [k for k in self._of_key if k.startswith(prefix)]
        for key in keys:
            self._invalidate(key)
        with self._lock:
            self._writes += 1

    def _read(
        self,
        key: str,
        ranges: Sequence[ByteRange | None],
        tag: Any,
        fetch: Callable[[list[ByteRange | None]], list[Buffer] | None],
    ) -> list[Buffer] | None:
        """The answers to ``ranges`` of ``key`` (None: the key is absent), cached ones from the
        cache and the others through one call of ``fetch``."""
        found: list[Any] = []
        with self._lock:
            writes = self._writes
            for r in ranges:
                found.append(self._lookup(key, tag, r))
            hits = [f for f in found if f is not _MISS]
            self._hits += len(hits)
            self._hit_bytes += sum(_nbytes(f) for f in hits)
        if any(f is None for f in found):
            return None
        missing = [i for i, f in enumerate(found) if f is _MISS]
        if not missing:
            return found
        wanted = [ranges[i] for i in missing]
        stored = self._keep_fetched(key, tag, wanted, fetch(wanted), writes)
        if stored is None:
            return None
        for i, blob in zip(missing, stored, strict=True):
            found[i] = blob
        return found

    def _keep_fetched(
        self,
        key: str,
        tag: Any,
        ranges: list[ByteRange | None],
        fetched: list[Buffer] | None,
        writes: int,
    ) -> list[Buffer] | None:
        """Count and cache (as of ``writes``) what one fetch of ``ranges`` of ``key`` gave
        under ``tag``; what to hand out (None: the key is absent)."""
        with self._lock:
            self._misses += len(ranges)
            if fetched is None:
                self._insert((key, tag, 0, None), None, writes)
                return None
            self._miss_bytes += sum(_nbytes(b) for b in fetched)
            return [self._insert((key, tag, *_span(r)), blob, writes) for r, blob in zip(ranges, fetched, strict=True)]

    def _read_untagged(
        self,
        key: str,
        ranges: Sequence[ByteRange | None],
        fetch: Callable[[list[ByteRange | None]], list[Buffer] | None],
        tag_of: Callable[[], Any],
    ) -> tuple[list[Buffer] | None, Any]:
        """``ranges`` of ``key`` through one ``fetch`` and cached under the version the fetch
        saw (``tag_of()`` once it ran): for a snapshot of a key the cache holds nothing of,
        whose version asked for first cost a request of its own (a HEAD on an object store)."""
        with self._lock:
            writes = self._writes
        fetched = fetch(list(ranges))
        tag = tag_of()
        return self._keep_fetched(key, tag, list(ranges), fetched, writes), tag

    def _holds_a_version_of(self, key: str) -> bool:
        """Whether the cache holds bytes of some version of ``key`` (what reads of the store
        itself cache, under no version, never serve a snapshot)."""
        with self._lock:
            return any(entry[1] is not None for entry in self._of_key.get(key, ()))

    def _holds_lock_of(self, key: str) -> bool:
        held: set[str] | None = getattr(self._held, "keys", None)
        return held is not None and key in held

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        validate_key(key)
        if self._holds_lock_of(key):
            return self.inner.get(key, byte_range)
        got = self._read(key, [byte_range], None, lambda rs: self._fetch(key, rs))
        return None if got is None else got[0]

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        validate_key(key)
        if self._holds_lock_of(key):
            return self.inner.get_ranges(key, ranges)
        return self._read(key, list(ranges), None, lambda rs: self._fetch(key, rs))

    def _fetch(self, key: str, ranges: list[ByteRange | None]) -> list[Buffer] | None:
        """Several requests of ``key`` from the inner store, the ranged ones in one call (which
        a remote store serves concurrently)."""
        whole = [i for i, r in enumerate(ranges) if r is None]
        parts = [r for r in ranges if r is not None]
        out: list[Buffer | None] = [None] * len(ranges)
        if parts:
            got = self.inner.get_ranges(key, parts)
            if got is None:
                return None
            slots = [i for i, r in enumerate(ranges) if r is not None]
            for i, blob in zip(slots, got, strict=True):
                out[i] = blob
        for i in whole:
            value = self.inner.get(key)
            if value is None:
                return None
            out[i] = value
        return out

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """As :meth:`Store.get_into`; a cached answer is a view of the cache's own bytes."""
        validate_key(key)
        if self._holds_lock_of(key):
            return self.inner.get_into(key, buffer_for, start, length)
        request = ByteRange(start, length)
        span = _span(request)
        with self._lock:
            writes = self._writes
            size = self._sizes.get((key, None))
            found: Any = _MISS
            whole = (key, None, 0, None) in self._entries
            if whole:
                found = self._lookup(key, None, None)  # the whole value, or None: absent
                size = _nbytes(found)
            elif size is not None and (key, None, *span) in self._entries:
                found = self._lookup(key, None, request)
            if found is not _MISS:
                self._hits += 1
        if found is None:
            return None
        if found is not _MISS:
            assert size is not None
            view = memoryview(found).cast("B")
            if whole:  # the part asked for of the cached whole value
                begin, stop = request.resolve(size)
                view = view[begin:stop]
            with self._lock:
                self._hit_bytes += len(view)
            return view, size
        got = self.inner.get_into(key, buffer_for, start, length)
        with self._lock:
            self._misses += 1
            if got is None:
                self._insert((key, None, 0, None), None, writes)
                return None
            view, total = got
            self._miss_bytes += len(view)
            begin, stop = request.resolve(total)
            if len(view) == stop - begin and writes == self._writes:
                self._insert((key, None, *span), view, writes)
                self._sizes[(key, None)] = total
        return got

    def exists(self, key: str) -> bool:
        return self.get(key, ByteRange(0, 0)) is not None

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        """The inner store's snapshot, read through the cache where that keeps it one version
        (see the module docs)."""
        validate_key(key)
        with self.inner.snapshot(key) as inner:
            if self._holds_lock_of(key) or (inner.consistent and inner.version is None):
                yield inner
            else:
                yield _CachingSnapshot(self, inner)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return self.inner.list_dir(prefix)

    # -- writing ---------------------------------------------------------------------------------

    def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        validate_key(key)
        try:
            self.inner.set(key, value)
        finally:
            self._invalidate(key)

    def erase(self, key: str) -> None:
        self._check_writable()
        validate_key(key)
        try:
            self.inner.erase(key)
        finally:
            self._invalidate(key)

    def get_versioned(self, key: str, bound: BoundedBufferFor | None = None) -> tuple[Buffer | None, Any]:
        return self.inner.get_versioned(validate_key(key), bound)

    def set_if(self, key: str, value: Buffer, version: Any) -> bool:
        self._check_writable()
        try:
            return self.inner.set_if(validate_key(key), value, version)
        finally:
            self._invalidate(key)

    def erase_if(self, key: str, version: Any) -> bool:
        self._check_writable()
        try:
            return self.inner.erase_if(validate_key(key), version)
        finally:
            self._invalidate(key)

    def erase_prefix(self, prefix: str) -> None:
        self._check_writable()
        try:
            self.inner.erase_prefix(prefix)
        finally:
            self._invalidate_prefix(prefix)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """The inner store's lock of ``key``; while it is held, this thread reads ``key`` from
        the inner store (and its cached entries are dropped)."""
        with self.inner.lock(key):
            held: set[str] | None = getattr(self._held, "keys", None)
            if held is None:
                held = self._held.keys = set()
            first = key not in held
            held.add(key)
            self._invalidate(key)
            try:
                yield
            finally:
                if first:
                    held.discard(key)

    def kvstore_json(self) -> dict[str, Any] | str:
        return self.inner.kvstore_json()

    def close(self) -> None:
        """Drop the cache and close the inner store."""
        self.clear()
        self.inner.close()


class _CachingSnapshot(Snapshot):
    """A snapshot of the inner store read through the cache, tagged with its version."""

    def __init__(self, store: CachingStore, inner: Snapshot) -> None:
        super().__init__(inner.key)
        self.store = store
        self.inner = inner
        self.consistent = inner.consistent
        self.size = inner.size
        self.reads_sizes_first = inner.reads_sizes_first
        # The inner version, asked for at the first read (where asking costs a request, a
        # reader may assume one first: see assume_version).
        self._tag: Any = _MISS

    @property
    def version(self) -> Hashable | None:
        if self._tag is _MISS:
            self._tag = self.inner.version
        tag: Hashable | None = self._tag
        return tag

    def changed(self) -> bool:
        return self.inner.changed()

    def assume_version(self, version: Hashable) -> bool:
        """As the inner snapshot does; cached bytes of ``version`` then serve without a request."""
        if self._tag is not _MISS or not self.inner.assume_version(version):
            return False
        self._tag = version
        return True

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        self._check_key(key)
        got = self._through_cache(key, [byte_range], self._fetch)
        return None if got is None else got[0]

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        self._check_key(key)
        return self._through_cache(key, list(ranges), self._fetch)

    def _through_cache(
        self,
        key: str,
        ranges: list[ByteRange | None],
        fetch: Callable[[list[ByteRange | None]], list[Buffer] | None],
    ) -> list[Buffer] | None:
        if self._tag is _MISS and not self.inner.version_known and not self.store._holds_a_version_of(key):
            # Nothing of it cached where asking the version costs a request (a HEAD before each
            # shard's first read on an object store): no version to check it against, so none
            # is asked for first; the read fixes it.
            got, self._tag = self.store._read_untagged(key, ranges, fetch, lambda: self.inner.version)
            return got
        return self.store._read(key, ranges, self.version, fetch)

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """As the inner snapshot's: a whole value through the cache, fetched by the inner
        ``get_into`` (which may refuse it from its size before reading it: a reader's bound);
        a part straight from the inner snapshot."""
        self._check_key(key)
        if start != 0 or length is not None:
            return self.inner.get_into(key, buffer_for, start, length)

        def fetch(ranges: list[ByteRange | None]) -> list[Buffer] | None:
            got = self.inner.get_into(self.key, buffer_for)
            return None if got is None else [got[0]]

        got = self._through_cache(key, [None], fetch)
        if got is None:
            return None
        view = memoryview(got[0]).cast("B")
        return view, len(view)

    def _fetch(self, ranges: list[ByteRange | None]) -> list[Buffer] | None:
        parts = [r for r in ranges if r is not None]
        got = self.inner.get_ranges(self.key, parts) if parts else []
        if got is None:
            return None
        out: list[Buffer] = []
        it = iter(got)
        for r in ranges:
            if r is None:
                value = self.inner.get(self.key)
                if value is None:
                    return None
                out.append(value)
            else:
                out.append(next(it))
        return out


__all__ = ["ENTRY_OVERHEAD", "CacheStats", "CachingStore"]
