"""The behaviour every store must have: subclass :class:`StoreConformance` and give ``make_store``.

A store class passes when ``class TestMyStore(StoreConformance)`` with a ``make_store`` fixture
(returning an empty, writable store) passes. Read-only behaviour is checked through
``make_read_only``, which reopens the same data refusing writes.

A store that cannot do something by its nature declares it with its capability flags
(``supports_deletes``, ``supports_listing``; :class:`gpuzarr.store.base.Store`): the tests of
that operation are skipped with the reason, and the test that the store refuses it with
UnsupportedOperationError runs instead. The suite writes its own data, so a store that cannot
be written (``supports_writes`` False) is tested against data its own tests put there.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from gpuzarr.errors import InvalidArgumentError, InvalidKeyError, ReadOnlyError, UnsupportedOperationError
from gpuzarr.store.base import ByteRange, Store

INVALID_KEYS = ["..", "a/../b", "../a", "a/..", "./a", "a/./b", "/a", "a\\b", "a//b", "", "a/", "a\0b"]

VALUE = bytes(range(16))


def as_bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(memoryview(value).cast("B"))


def count_under_lock(store: Store, key: str, threads: int, times: int, pause: float = 0.0) -> bytes | None:
    """Increment a counter stored at ``key`` (from 0) ``times`` times in each of ``threads``
    threads, each increment a read-modify-write under ``store.lock(key)``, sleeping ``pause``
    seconds between the read and the write; the value stored at the end."""
    store.set(key, b"0")

    def add() -> None:
        for _ in range(times):
            with store.lock(key):
                value = int(bytes(store.get(key)))
                if pause:
                    time.sleep(pause)  # another thread's turn, if it may take it
                store.set(key, str(value + 1).encode())

    started = [threading.Thread(target=add) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return as_bytes(store.get(key))


def require(store: Store, capability: str) -> None:
    """Skip the calling test when ``store`` declares that it lacks ``capability``."""
    if not getattr(store, capability):
        pytest.skip(f"{type(store).__name__} declares {capability} = False")


def listed(store: Store, prefix: str = "") -> list[str] | None:
    """``store``'s keys under ``prefix``, sorted; None (nothing to compare) for a store that
    cannot list."""
    return sorted(store.list_prefix(prefix)) if store.supports_listing else None


class StoreConformance:
    """Tests shared by every store. Subclasses define the ``store`` fixture via ``make_store``."""

    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:  # pragma: no cover - subclasses override
        raise NotImplementedError

    def make_read_only(self, store: Store) -> Store:
        """The same data as ``store``, refusing writes."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, make_store: Store) -> Store:
        require(make_store, "supports_writes")
        return make_store

    # -- get -------------------------------------------------------------------------------------

    def test_get_missing_is_none(self, store: Store) -> None:
        assert store.get("missing") is None
        assert store.get("a/b/missing") is None
        assert store.get("missing", ByteRange(0, 4)) is None
        assert store.get("missing", ByteRange.suffix(4)) is None
        assert store.get_ranges("missing", [ByteRange(0, 1)]) is None
        assert not store.exists("missing")

    def test_set_get(self, store: Store) -> None:
        store.set("k", VALUE)
        assert as_bytes(store.get("k")) == VALUE
        assert store.exists("k")

    @pytest.mark.parametrize(
        ("offset", "length", "expected"),
        [
            (0, 4, VALUE[0:4]),
            (3, 5, VALUE[3:8]),
            (0, 0, b""),
            (15, 1, VALUE[15:]),
            (4, None, VALUE[4:]),  # to the end
            (0, None, VALUE),
            (12, 100, VALUE[12:]),  # past the end clamps
            (16, 4, b""),
            (100, 4, b""),
            (100, None, b""),
        ],
    )
    def test_byte_range(self, store: Store, offset: int, length: int | None, expected: bytes) -> None:
        store.set("k", VALUE)
        assert as_bytes(store.get("k", ByteRange(offset, length))) == expected

    @pytest.mark.parametrize(
        ("n", "expected"), [(1, VALUE[-1:]), (5, VALUE[-5:]), (16, VALUE), (0, b""), (99, VALUE)]
    )
    def test_suffix_range(self, store: Store, n: int, expected: bytes) -> None:
        store.set("k", VALUE)
        assert as_bytes(store.get("k", ByteRange.suffix(n))) == expected

    def test_invalid_byte_ranges_are_refused(self) -> None:
        # InvalidArgumentErrors, so ValueErrors too
        with pytest.raises(InvalidArgumentError, match="byte range"):
            ByteRange(0, -1)
        with pytest.raises(InvalidArgumentError, match="byte range"):
            ByteRange(-4, 2)
        with pytest.raises(InvalidArgumentError, match="byte range"):
            ByteRange.suffix(-1)

    def test_get_ranges(self, store: Store) -> None:
        store.set("k", VALUE)
        ranges = [
            ByteRange(0, 2),
            ByteRange.suffix(3),
            ByteRange(5, None),
            ByteRange(14, 10),
            ByteRange(2, 0),
        ]
        got = store.get_ranges("k", ranges)
        assert got is not None
        assert [as_bytes(g) for g in got] == [VALUE[:2], VALUE[-3:], VALUE[5:], VALUE[14:], b""]
        assert store.get_ranges("k", []) == []

    def test_open_reader_reads_ranges_into_the_callers_buffers(self, store: Store) -> None:
        assert store.open_reader("missing") is None
        store.set("k", VALUE)
        reader = store.open_reader("k")
        assert reader is not None
        with reader:
            assert reader.size == len(VALUE)
            target = bytearray(4)
            assert reader.read_into(3, memoryview(target)) == 4
            assert bytes(target) == VALUE[3:7]
            tail = np.zeros(10, np.uint8)  # past the end: what there is
            assert reader.read_into(len(VALUE) - 3, tail) == 3
            assert tail[:3].tobytes() == VALUE[-3:]
            assert reader.read_into(len(VALUE) + 5, bytearray(2)) == 0

    def test_value_reader_reads_whole_values_one_after_another(self, store: Store) -> None:
        values = {"k": VALUE, "a/b/c": VALUE[::-1] * 3, "a/b/d": b"", "a/e": VALUE[:5]}
        for key, value in values.items():
            store.set(key, value)
        store.set("a/big", bytes(100))
        refused: list[tuple[str, int]] = []

        def refuse(key: str, n: int) -> Exception:
            refused.append((key, n))
            return ValueError(f"{key}: {n} bytes")

        with store.value_reader(64, refuse) as read:
            # Each value is taken before the next read (it may live in a reused buffer).
            for key in ["a/b/c", "missing", "a/b/d", "k", "a/b/missing", "a", "a/e", "a/b/c"]:
                assert as_bytes(read(key)) == values.get(key), key
            with pytest.raises(ValueError, match="a/big: 100 bytes"):
                read("a/big")
            assert refused == [("a/big", 100)]
            for key in INVALID_KEYS:
                with pytest.raises(InvalidKeyError):
                    read(key)
        with store.value_reader(None, refuse) as read:
            assert as_bytes(read("a/big")) == bytes(100)

    def test_get_of_a_prefix_is_none(self, store: Store) -> None:
        store.set("dir/k", VALUE)
        assert store.get("dir") is None
        assert store.get("dir", ByteRange(0, 4)) is None
        assert store.get_ranges("dir", [ByteRange(0, 4)]) is None
        assert not store.exists("dir")

    # -- set -------------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "value",
        [
            VALUE,
            bytearray(VALUE),
            memoryview(VALUE),
            memoryview(VALUE)[2:10],
            np.frombuffer(VALUE, dtype=np.uint8),
            np.frombuffer(VALUE, dtype="<u4").reshape(2, 2),
            np.frombuffer(VALUE, dtype=">f8"),
            b"",
        ],
        ids=["bytes", "bytearray", "memoryview", "memoryview-slice", "u1", "u4-2d", "f8-big", "empty"],
    )
    def test_set_value_types(self, store: Store, value: Any) -> None:
        expected = bytes(memoryview(value).cast("B"))
        store.set("k", value)
        assert as_bytes(store.get("k")) == expected
        assert store.exists("k")

    def test_set_copies_mutable_values(self, store: Store) -> None:
        value = bytearray(VALUE)
        store.set("k", value)
        value[0] = 255
        assert as_bytes(store.get("k")) == VALUE

    def test_overwrite(self, store: Store) -> None:
        store.set("k", b"first value")
        store.set("k", b"2nd")
        assert as_bytes(store.get("k")) == b"2nd"
        assert listed(store) in (["k"], None)

    def test_nested_keys(self, store: Store) -> None:
        store.set("a/b/c/d", b"deep")
        assert as_bytes(store.get("a/b/c/d")) == b"deep"
        assert store.exists("a/b/c/d")

    # -- erase -----------------------------------------------------------------------------------

    def test_erase(self, store: Store) -> None:
        require(store, "supports_deletes")
        store.set("k", VALUE)
        store.set("k2", VALUE)
        store.erase("k")
        assert store.get("k") is None
        assert not store.exists("k")
        assert as_bytes(store.get("k2")) == VALUE

    def test_erase_absent_is_fine(self, store: Store) -> None:
        store.erase("never/was")
        store.erase("never")

    def test_erase_prefix(self, store: Store) -> None:
        require(store, "supports_deletes")
        require(store, "supports_listing")
        for key in ["a/1", "a/2", "a/b/3", "ab", "b/1"]:
            store.set(key, b"x")
        store.erase_prefix("a/")
        assert list(store.list_prefix("")) == ["ab", "b/1"]
        store.erase_prefix("nothing/")
        assert list(store.list_prefix("")) == ["ab", "b/1"]
        store.erase_prefix("")
        assert list(store.list_prefix("")) == []

    def test_erase_unsupported(self, store: Store) -> None:
        if store.supports_deletes:
            pytest.skip(f"{type(store).__name__} supports deletes")
        store.set("k", VALUE)
        with pytest.raises(UnsupportedOperationError, match="'k'"):
            store.erase("k")
        store.erase("absent")  # nothing to erase is not an error
        assert as_bytes(store.get("k")) == VALUE

    # -- listing ---------------------------------------------------------------------------------

    def test_list_unsupported(self, store: Store) -> None:
        if store.supports_listing:
            pytest.skip(f"{type(store).__name__} supports listing")
        with pytest.raises(UnsupportedOperationError):
            list(store.list_prefix(""))
        with pytest.raises(UnsupportedOperationError):
            store.list_dir("")

    def test_list_prefix(self, store: Store) -> None:
        require(store, "supports_listing")
        keys = ["zarr.json", "a/zarr.json", "a/c/0/0", "a/c/0/1", "ab/zarr.json", "b"]
        for key in keys:
            store.set(key, b"x")
        assert sorted(store.list_prefix("")) == sorted(keys)
        assert sorted(store.list_prefix("a/")) == ["a/c/0/0", "a/c/0/1", "a/zarr.json"]
        assert sorted(store.list_prefix("a")) == ["a/c/0/0", "a/c/0/1", "a/zarr.json", "ab/zarr.json"]
        assert sorted(store.list_prefix("a/c/0/")) == ["a/c/0/0", "a/c/0/1"]
        assert list(store.list_prefix("missing/")) == []

    def test_list_dir(self, store: Store) -> None:
        require(store, "supports_listing")
        for key in ["zarr.json", "a/zarr.json", "a/c/0/0", "a/c/1/0", "b/x/y", "c"]:
            store.set(key, b"x")
        assert store.list_dir("") == (["c", "zarr.json"], ["a/", "b/"])
        assert store.list_dir("a/") == (["a/zarr.json"], ["a/c/"])
        assert store.list_dir("a") == (["a/zarr.json"], ["a/c/"])
        assert store.list_dir("a/c/") == ([], ["a/c/0/", "a/c/1/"])
        assert store.list_dir("missing/") == ([], [])

    def test_list_dir_forgets_erased_children(self, store: Store) -> None:
        require(store, "supports_deletes")
        require(store, "supports_listing")
        store.set("a/b/c", b"x")
        store.set("k", b"x")
        store.erase("a/b/c")
        assert store.list_dir("") == (["k"], [])
        store.set("d/e", b"x")
        store.erase_prefix("d/")
        assert store.list_dir("") == (["k"], [])

    # -- read-only -------------------------------------------------------------------------------

    def test_read_only_refuses_writes(self, store: Store) -> None:
        store.set("k", VALUE)
        ro = self.make_read_only(store)
        assert ro.read_only
        with pytest.raises(ReadOnlyError):
            ro.set("k", b"new")
        with pytest.raises(ReadOnlyError):
            ro.set("other", b"new")
        with pytest.raises(ReadOnlyError):
            ro.erase("k")
        with pytest.raises(ReadOnlyError):
            ro.erase("absent")
        with pytest.raises(ReadOnlyError):
            ro.erase_prefix("")
        with pytest.raises(ReadOnlyError):
            ro.erase_prefix("absent/")
        # Still readable, and nothing changed.
        assert as_bytes(ro.get("k")) == VALUE
        if ro.supports_listing:
            assert list(ro.list_prefix("")) == ["k"]
            assert ro.list_dir("") == (["k"], [])

    def test_read_only_error_is_a_permission_error(self, store: Store) -> None:
        ro = self.make_read_only(store)
        with pytest.raises(PermissionError):
            ro.set("k", b"new")

    # -- snapshots and locks -----------------------------------------------------------------------

    def test_snapshot_reads_one_version(self, store: Store) -> None:
        store.set("k", VALUE)
        with store.snapshot("k") as value:
            assert as_bytes(value.get("k", ByteRange.suffix(4))) == VALUE[-4:]
            store.set("k", b"another version")
            if value.consistent:
                assert as_bytes(value.get("k")) == VALUE
                got = value.get_ranges("k", [ByteRange(0, 2), ByteRange(14, 2)])
                assert got is not None and [as_bytes(b) for b in got] == [VALUE[:2], VALUE[14:]]
            assert not value.changed()
            with pytest.raises(InvalidArgumentError):
                value.get("other")
            with pytest.raises(ReadOnlyError):
                value.set("k", b"x")
        with store.snapshot("absent") as value:
            assert value.get("absent") is None and value.version is None
            assert list(value.list_prefix("")) == []

    def test_snapshot_versions_differ(self, store: Store) -> None:
        store.set("k", VALUE)
        with store.snapshot("k") as first:
            store.set("k", b"another version")
            with store.snapshot("k") as second:
                if first.consistent and first.version is not None:
                    assert first.version != second.version

    def test_lock_serialises_threads(self, store: Store) -> None:
        # Increments of one stored counter from many threads, each a read-modify-write.
        if not store.locks_across_threads:
            pytest.skip(f"{type(store).__name__} makes no promise")
        assert count_under_lock(store, "counter", threads=8, times=20) == b"160"
        assert listed(store) in (["counter"], None)

    def test_lock_of_a_read_only_store(self, store: Store) -> None:
        with pytest.raises(ReadOnlyError), self.make_read_only(store).lock("k"):
            pass

    # -- keys ------------------------------------------------------------------------------------

    @pytest.mark.parametrize("key", INVALID_KEYS)
    def test_invalid_keys(self, store: Store, key: str) -> None:
        with pytest.raises(InvalidKeyError):
            store.set(key, b"x")
        with pytest.raises(InvalidKeyError):
            store.get(key)
        with pytest.raises(InvalidKeyError):
            store.get(key, ByteRange(0, 1))
        with pytest.raises(InvalidKeyError):
            store.erase(key)
        with pytest.raises(InvalidKeyError):
            store.exists(key)
        assert listed(store) in ([], None)

    @pytest.mark.parametrize("prefix", ["..", "../", "/", "/a/", "a//", "a/../", "a\\b/"])
    def test_invalid_prefixes(self, store: Store, prefix: str) -> None:
        require(store, "supports_listing")
        with pytest.raises(InvalidKeyError):
            list(store.list_prefix(prefix))
        with pytest.raises(InvalidKeyError):
            store.list_dir(prefix)

    def test_non_string_key(self, store: Store) -> None:
        with pytest.raises(InvalidKeyError):
            store.get(b"k")  # type: ignore[arg-type]

    @pytest.mark.parametrize("key", ["a.b", "c/0.0", ".zarray", "a/.zattrs", "x..y", "ü/ñ", "a b/c"])
    def test_unusual_but_valid_keys(self, store: Store, key: str) -> None:
        store.set(key, b"v")
        assert as_bytes(store.get(key)) == b"v"
        assert listed(store) in ([key], None)
