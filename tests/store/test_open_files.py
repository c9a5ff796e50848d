"""LocalStore reads keep their files open (gpuzarr.store.open_files): a kept descriptor serves a
read only while the key's path still names its file, and is closed, never under a read, when
its entry goes."""

from __future__ import annotations

import multiprocessing
import os
import threading
from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import SymlinkEscapeError
from gpuzarr.store import LocalStore
from gpuzarr.store.base import ByteRange
from gpuzarr.store.open_files import MAX_IDLE_SECONDS, OPEN_FILES, OpenFile, OpenFiles, default_open_files

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    OPEN_FILES.clear()
    yield
    OPEN_FILES.clear()


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def kept(store: LocalStore, key: str) -> OpenFile:
    """The entry kept for ``key`` (borrowed and given back at once)."""
    hit = OPEN_FILES.borrow(store._inside_prefix + key, store.follow_symlinks)
    assert hit is not None, f"{key} is not kept"
    OPEN_FILES.give_back(hit[0])
    return hit[0]


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    return opened


def test_a_file_read_again_is_opened_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    store.set("a/k", b"0123456789")
    opened = count_opens(monkeypatch)
    assert bytes(store.get_into("a/k", bytearray)[0]) == b"0123456789"  # type: ignore[index]
    assert [bytes(b) for b in store.get_ranges("a/k", [ByteRange(2, 2), ByteRange(8, 2)])] == [b"23", b"89"]  # type: ignore[union-attr]
    with store.snapshot("a/k") as snapshot:
        assert snapshot.get("a/k") == b"0123456789"
    assert len(opened) == 1
    assert is_open(kept(store, "a/k").fd)


def test_a_replaced_file_is_read_anew_and_the_old_one_closed(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"old")
    assert store.get_into("k", bytearray)[1] == 3  # type: ignore[index]
    old = kept(store, "k")
    # Another writer renames a new file over the key (as zarr-python and TensorStore do).
    (tmp_path / "new").write_bytes(b"new value")
    os.replace(tmp_path / "new", tmp_path / "k")
    assert bytes(store.get_into("k", bytearray)[0]) == b"new value"  # type: ignore[index]
    assert old.closed and kept(store, "k") is not old
    # This process's writes retire the entry at once: no descriptor holds the replaced file.
    entry = kept(store, "k")
    store.set("k", b"third")
    assert len(OPEN_FILES) == 0 and entry.closed
    assert bytes(store.get_into("k", bytearray)[0]) == b"third"  # type: ignore[index]


def test_a_file_changed_in_place_reads_its_new_bytes(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"aaaa")
    store.get_into("k", bytearray)
    with open(tmp_path / "k", "r+b") as f:  # same inode, new bytes and size
        f.write(b"bbbbbb")
    assert bytes(store.get_into("k", bytearray)[0]) == b"bbbbbb"  # type: ignore[index]


def test_an_erased_file_is_missing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"v")
    store.get_into("k", bytearray)
    entry = kept(store, "k")
    os.unlink(tmp_path / "k")  # by another process: found at the next read
    assert store.get_into("k", bytearray) is None
    assert store.get_ranges("k", [ByteRange(0, 1)]) is None
    assert entry.closed and len(OPEN_FILES) == 0
    store.set("k", b"v")
    store.get_into("k", bytearray)
    entry = kept(store, "k")
    store.erase("k")
    assert entry.closed and store.get_into("k", bytearray) is None


def test_a_file_replaced_by_a_directory_is_not_a_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"v")
    store.get_into("k", bytearray)
    os.unlink(tmp_path / "k")
    os.mkdir(tmp_path / "k")
    assert store.get_into("k", bytearray) is None


def test_a_directory_swapped_for_a_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    store = LocalStore(root)
    store.set("d/k", b"inside")
    assert bytes(store.get_into("d/k", bytearray)[0]) == b"inside"  # type: ignore[index]
    outside.mkdir()
    (outside / "k").write_bytes(b"outside the store")
    os.rename(root / "d", tmp_path / "moved")
    (root / "d").symlink_to(outside)
    with pytest.raises(SymlinkEscapeError):
        store.get_into("d/k", bytearray)
    with pytest.raises(SymlinkEscapeError):
        store.get_ranges("d/k", [ByteRange(0, 2)])
    # A store that follows links keeps its own entries: the refusing one never reads them.
    assert LocalStore(root, follow_symlinks=True).get_into("d/k", bytearray)[1] == 17  # type: ignore[index]
    with pytest.raises(SymlinkEscapeError):
        store.get_into("d/k", bytearray)


def test_a_key_that_became_a_link_is_checked_again(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    store = LocalStore(root)
    store.set("k", b"inside")
    store.get_into("k", bytearray)
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    os.unlink(root / "k")
    (root / "k").symlink_to(outside / "secret")
    with pytest.raises(SymlinkEscapeError):
        store.get_into("k", bytearray)


def test_at_most_open_files_are_kept(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for i in range(5):
        store.set(f"k{i}", bytes([i]) * 10)
    with gpuzarr.config.set(open_files=2):
        for i in range(5):
            store.get_into(f"k{i}", bytearray)
        assert len(OPEN_FILES) == 2
        entries = [kept(store, "k3"), kept(store, "k4")]
    with gpuzarr.config.set(open_files=0):  # none kept from the next read on
        assert bytes(store.get_into("k0", bytearray)[0]) == b"\0" * 10  # type: ignore[index]
        assert len(OPEN_FILES) == 0 and all(entry.closed for entry in entries)


def test_an_entry_in_use_is_closed_only_when_given_back(tmp_path: Path) -> None:
    path = os.fspath(tmp_path / "f")
    with open(path, "wb") as f:
        f.write(b"x")
    cache = OpenFiles(lambda: 1)
    fd = os.open(path, os.O_RDONLY)
    entry = cache.keep(path, False, fd, os.fstat(fd))  # borrowed by its opener
    assert entry is not None
    other = os.fspath(tmp_path / "g")
    with open(other, "wb") as f:
        f.write(b"y")
    fd2 = os.open(other, os.O_RDONLY)
    cache.keep(other, False, fd2, os.fstat(fd2))  # evicts the first, still in use
    assert is_open(fd) and os.pread(fd, 1, 0) == b"x"
    cache.give_back(entry)
    assert entry.closed and not is_open(fd)
    cache.clear()


def test_idle_entries_are_closed(tmp_path: Path) -> None:
    now = [0.0]
    cache = OpenFiles(lambda: 8, clock=lambda: now[0])
    fds = []
    for name in ("a", "b"):
        path = os.fspath(tmp_path / name)
        with open(path, "wb") as f:
            f.write(b"x")
        fd = os.open(path, os.O_RDONLY)
        entry = cache.keep(path, False, fd, os.fstat(fd))
        assert entry is not None
        cache.give_back(entry)
        fds.append(fd)
    now[0] = MAX_IDLE_SECONDS + 1
    path = os.fspath(tmp_path / "c")
    with open(path, "wb") as f:
        f.write(b"x")
    fd = os.open(path, os.O_RDONLY)
    cache.give_back(cache.keep(path, False, fd, os.fstat(fd)))  # type: ignore[arg-type]
    assert len(cache) == 1 and not any(is_open(fd) for fd in fds)
    cache.clear()
    assert not is_open(fd)
    # A read that finds its file kept closes the idle ones too.
    entries = []
    for name in ("a", "b"):
        fd = os.open(os.fspath(tmp_path / name), os.O_RDONLY)
        entry = cache.keep(os.fspath(tmp_path / name), False, fd, os.fstat(fd))
        assert entry is not None
        cache.give_back(entry)
        entries.append(entry)
    now[0] += MAX_IDLE_SECONDS + 1
    hit = cache.borrow(os.fspath(tmp_path / "b"), False)
    assert hit is not None and hit[0] is entries[1]
    assert entries[0].closed and not entries[1].closed and len(cache) == 1
    cache.give_back(hit[0])
    cache.clear()
    assert entries[1].closed


def test_the_default_follows_the_open_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    for soft, expected in ((1024, 128), (64, 16), (20000, 256), (resource.RLIM_INFINITY, 256)):
        monkeypatch.setattr(resource, "getrlimit", lambda _, soft=soft: (soft, soft))
        assert default_open_files() == expected
    with pytest.raises(ValueError, match="open_files"):
        gpuzarr.config.set(open_files=-1)


def test_reads_and_writes_from_many_threads(tmp_path: Path) -> None:
    # Writers replace the keys while readers read them through kept descriptors: every read is
    # one whole version, and no descriptor is closed under a read.
    store = LocalStore(tmp_path)
    keys = [f"k{i}" for i in range(6)]
    for key in keys:
        store.set(key, bytes(64))
    errors: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        for n in range(1, 150):
            for key in keys:
                store.set(key, bytes([n % 256]) * 64)
        stop.set()

    def read() -> None:
        try:
            while not stop.is_set():
                for key in keys:
                    got = store.get_into(key, bytearray)
                    assert got is not None
                    data = bytes(got[0])
                    assert len(data) == 64 and len(set(data)) == 1
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    with gpuzarr.config.set(open_files=3):
        threads = [threading.Thread(target=read) for _ in range(4)] + [threading.Thread(target=write)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


def _read_in_child(path: str, queue: multiprocessing.Queue[object]) -> None:
    from gpuzarr.store.open_files import OPEN_FILES as child_cache

    kept = len(child_cache)
    queue.put((kept, gpuzarr.open(path, mode="r")[...].tolist()))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_a_forked_child_starts_with_none_kept(tmp_path: Path) -> None:
    a = gpuzarr.create(tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="int32")
    a[...] = np.arange(8)
    assert a[...].tolist() == list(range(8)) and len(OPEN_FILES) >= 2
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_read_in_child, args=(os.fspath(tmp_path / "a.zarr"), queue))
    child.start()
    kept, values = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert kept == 0 and values == list(range(8))
