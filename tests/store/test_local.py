"""LocalStore: the conformance suite plus atomic writes, directories and file:// URLs."""

from __future__ import annotations

import errno
import fcntl
import os
import pickle
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GpuZarrError, StoreError, StorePermissionError
from gpuzarr.store import LocalStore, make_store
from gpuzarr.store.base import ByteRange
from gpuzarr.store.local import TEMP_MARKER
from gpuzarr.store.locks import LOCK_MARKER, lock_path
from tests.file_times import wait_for_a_new_change_time
from tests.permissions import reachable_directory, without_permission

from .conformance import StoreConformance

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.store.base import Store


class TestLocalStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return LocalStore(tmp_path / "store")

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, LocalStore)
        return LocalStore(store.root, read_only=True)


def test_keys_are_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("a/b/c", b"xyz")
    assert (tmp_path / "a" / "b" / "c").read_bytes() == b"xyz"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "e").write_bytes(b"made outside")
    assert store.get("d/e") == b"made outside"
    assert store.list_dir("") == ([], ["a/", "d/"])


def test_root_need_not_exist(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "not" / "yet")
    assert store.get("k") is None
    assert list(store.list_prefix("")) == []
    assert store.list_dir("") == ([], [])
    store.set("k", b"v")
    assert store.get("k") == b"v"


def test_temp_files_are_not_listed(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("a/k", b"v")
    # A write in progress (or one a killed process left behind).
    (tmp_path / "a" / f"k{TEMP_MARKER}0123").write_bytes(b"partial")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / f"x{TEMP_MARKER}0123").write_bytes(b"partial")
    assert list(store.list_prefix("")) == ["a/k"]
    assert store.list_dir("a/") == (["a/k"], [])
    assert store.list_dir("") == ([], ["a/"])


def test_write_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for i in range(3):
        store.set("a/k", np.full(100, i, np.uint8))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["k"]


def test_lock_files_are_never_listed_and_are_removed(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("a/k", b"v")
    with store.lock("a/k"):
        assert (tmp_path / "a" / f"{LOCK_MARKER}k").exists()
        assert list(store.list_prefix("")) == ["a/k"]
        assert store.list_dir("a/") == (["a/k"], [])
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["k"]
    # A lock file left by a writer killed while holding it: taken over, then removed.
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / f"{LOCK_MARKER}x").write_bytes(b"")
    assert store.list_dir("") == ([], ["a/"])
    with store.lock("b/x"):
        store.set("b/x", b"y")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["x"]


def test_lock_file_of_a_long_name_fits_the_name_limit(tmp_path: Path) -> None:
    name = "k" * 250
    assert len(os.path.basename(lock_path(str(tmp_path / name)))) <= 255
    store = LocalStore(tmp_path)
    with store.lock(name):
        assert (tmp_path / os.path.basename(lock_path(str(tmp_path / name)))).exists()
    assert list(tmp_path.iterdir()) == []


def test_snapshot_keeps_a_replaced_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"old")
    with store.snapshot("k") as value:
        store.set("k", b"new and longer")
        assert value.get("k") == b"old" and not value.changed()
    with store.snapshot("k") as value:
        with open(tmp_path / "k", "ab") as f:  # a writer that appends in place
            f.write(b"!")
        assert value.changed()


def test_snapshot_sees_an_in_place_rewrite_that_hides_itself(tmp_path: Path) -> None:
    """Same size and the old modification time put back: the change time, which no call sets
    back, still tells the versions apart."""
    store = LocalStore(tmp_path)
    store.set("k", b"old")
    wait_for_a_new_change_time(tmp_path / "k")
    before = os.stat(tmp_path / "k")
    with store.snapshot("k") as value:
        version = value.version
        with open(tmp_path / "k", "r+b") as f:
            f.write(b"new")
        os.utime(tmp_path / "k", ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(tmp_path / "k")
        assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
        assert value.changed()
    with store.snapshot("k") as again:
        assert again.version != version
        assert again.size == 3


@pytest.mark.parametrize("how", ["chmod", "hard link", "replaced, link count kept", "renamed"])
def test_snapshot_unchanged_by_what_leaves_the_bytes_alone(tmp_path: Path, how: str) -> None:
    """What moves the change time but not the bytes of the open file: a chmod, a second link,
    a writer replacing the key while the file keeps its link count (as an NFS client keeps a
    replaced open file under a hidden name; here a second link stands in for that name)."""
    store = LocalStore(tmp_path)
    store.set("k", b"old")
    wait_for_a_new_change_time(tmp_path / "k")
    with store.snapshot("k") as value:
        if how == "chmod":
            os.chmod(tmp_path / "k", 0o600)
        elif how == "hard link":
            os.link(tmp_path / "k", tmp_path / "other")
        elif how == "renamed":
            os.rename(tmp_path / "k", tmp_path / "moved")
        else:
            os.link(tmp_path / "k", tmp_path / "hidden")
            store.set("k", b"new")  # drops the old file's first link: one is left
        opened = os.fstat(value._fd)  # type: ignore[attr-defined]
        assert opened.st_ctime_ns != value.version.changed_ns  # type: ignore[union-attr]
        assert not value.changed()
        assert value.get("k") == b"old"


def test_snapshot_of_an_absent_key_has_no_size_or_version(tmp_path: Path) -> None:
    with LocalStore(tmp_path).snapshot("k") as value:
        assert value.size is None and value.version is None and not value.changed()


class _Exploding:
    """A buffer whose export fails half-way through a write."""

    def __buffer__(self, flags: int) -> memoryview:
        raise RuntimeError("disk on fire")


def test_failing_write_keeps_old_value(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"old")
    with pytest.raises((RuntimeError, TypeError)):
        store.set("k", _Exploding())
    assert store.get("k") == b"old"
    assert sorted(os.listdir(tmp_path)) == ["k"]


def test_failing_write_mid_file_keeps_old_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    store.set("k", b"old")

    def broken_replace(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="rename failed"):
        store.set("k", b"new value")
    monkeypatch.undo()
    assert store.get("k") == b"old"
    assert sorted(os.listdir(tmp_path)) == ["k"]


def test_read_only_does_not_create_root(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "absent", read_only=True)
    assert store.get("k") is None
    assert not (tmp_path / "absent").exists()


def test_file_url(tmp_path: Path) -> None:
    (tmp_path / "my data").mkdir()
    store, path = make_store("file://" + str(tmp_path / "my%20data"))
    assert isinstance(store, LocalStore)
    assert path == ""
    assert store.root == tmp_path / "my data"
    store.set("zarr.json", b"{}")
    assert (tmp_path / "my data" / "zarr.json").read_bytes() == b"{}"


def test_plain_paths_and_kvstore_dicts(tmp_path: Path) -> None:
    for arg in (str(tmp_path), tmp_path, {"driver": "file", "path": str(tmp_path)}):
        store, path = make_store(arg)
        assert isinstance(store, LocalStore)
        assert store.root == tmp_path
        assert path == ""


def test_make_store_read_only(tmp_path: Path) -> None:
    store, _ = make_store(str(tmp_path), read_only=True)
    assert store.read_only
    writable = LocalStore(tmp_path)
    ro, _ = make_store(writable, read_only=True)
    assert ro.read_only and not writable.read_only


def test_equality_by_root(tmp_path: Path) -> None:
    assert LocalStore(tmp_path) == LocalStore(str(tmp_path))
    assert hash(LocalStore(tmp_path)) == hash(LocalStore(str(tmp_path)))
    assert LocalStore(tmp_path) != LocalStore(tmp_path / "x")


def test_ranges_read_into_reused_buffers_stay_intact_while_held(tmp_path: Path) -> None:
    """Byte ranges come in buffers of the host output pool (gpuzarr.output_pool): one that is
    still held is never read into again, however many reads of similar lengths follow."""
    from gpuzarr.store.base import ByteRange

    store = LocalStore(tmp_path / "store")
    rng = np.random.default_rng(3)
    value = rng.integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()
    store.set("shard", value)
    spans = [(int(o), int(n)) for o, n in zip(rng.integers(0, 3 << 20, 40), rng.integers(200_000, 900_000, 40))]
    held = []
    for offset, n in spans:
        for snapshot_read in (False, True):
            if snapshot_read:
                with store.snapshot("shard") as snap:
                    got = snap.get_ranges("shard", [ByteRange(offset, n)])
            else:
                got = store.get_ranges("shard", [ByteRange(offset, n)])
            assert got is not None
            held.append((offset, n, got[0]))
        del got
    for offset, n, blob in held:
        assert bytes(memoryview(blob).cast("B")) == value[offset : offset + n]
    tail = store.get_ranges("shard", [ByteRange(len(value) - 3, 10)])  # past the end: what is there
    assert tail is not None and bytes(memoryview(tail[0]).cast("B")) == value[-3:]


def test_a_subclass_that_reads_its_own_way_is_not_read_round_it(tmp_path: Path) -> None:
    """Readers of parts of chunks (Blosc blocks) use open_reader where ranged reads are cheap;
    a subclass that overrides get or get_into (to count or transform what is read) is read
    through those instead, unless it gives open_reader too or says so."""

    class Counting(LocalStore):
        def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
            return super().get_into(key, buffer_for, start, length)

    class CountingWithReader(Counting):
        def open_reader(self, key):  # type: ignore[no-untyped-def]
            return super().open_reader(key)

    class Declared(Counting):
        cheap_ranged_reads = True

    class Plain(LocalStore):
        pass

    assert LocalStore(tmp_path).cheap_ranged_reads
    assert Plain(tmp_path).cheap_ranged_reads
    assert not Counting(tmp_path).cheap_ranged_reads
    assert CountingWithReader(tmp_path).cheap_ranged_reads
    assert Declared(tmp_path).cheap_ranged_reads


# -- what the file system refuses: the store's errors, naming the key -------------------------------


def _denied(caught: pytest.ExceptionInfo[StorePermissionError], store: LocalStore, key: str) -> None:
    error = caught.value
    assert isinstance(error, PermissionError) and isinstance(error, GpuZarrError)
    assert error.key == key and error.url == str(store.root)
    assert error.errno == errno.EACCES
    assert str(error).startswith(f"{store.root}: {key}: ")  # not OSError's "[Errno 13] ..."


def test_reads_the_file_system_refuses_raise_a_permission_error_naming_the_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    store.set("c/0/0", b"chunk")
    reads = {
        "get": lambda: store.get("c/0/0"),
        "get_into": lambda: store.get_into("c/0/0", bytearray),
        "get_ranges": lambda: store.get_ranges("c/0/0", [ByteRange(0, 2)]),
        "open_reader": lambda: store.open_reader("c/0/0"),
        "exists": lambda: store.exists("c/0/0"),
        "snapshot": lambda: store.snapshot("c/0/0").__enter__(),
    }
    for name, read in reads.items():
        with without_permission(tmp_path / "store" / "c" / "0" / "0"), pytest.raises(StorePermissionError) as caught:
            read()
        _denied(caught, store, "c/0/0")
        assert "open: " in str(caught.value), name
    assert store.get("c/0/0") == b"chunk"  # and once allowed again, read as before


def test_writes_the_file_system_refuses_raise_a_permission_error_naming_the_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    store.set("c/0/0", b"chunk")
    directory = tmp_path / "store" / "c" / "0"
    for write in (lambda: store.set("c/0/1", b"new"), lambda: store.erase("c/0/0")):
        with without_permission(directory), pytest.raises(StorePermissionError) as caught:
            write()
        assert caught.value.key in ("c/0/1", "c/0/0")
        assert caught.value.errno == errno.EACCES
    with without_permission(directory), pytest.raises(StorePermissionError) as caught, store.lock("c/0/0"):
        pass
    _denied(caught, store, "c/0/0")
    with without_permission(directory), pytest.raises(StorePermissionError) as caught:
        store.list_dir("c/0")
    assert caught.value.key == "c/0/"
    assert sorted(os.listdir(directory)) == ["0"]  # nothing written, nothing erased


def test_what_fails_inside_a_lock_is_raised_as_it_is(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    failure = OSError(errno.EIO, "the caller's own")
    with pytest.raises(OSError) as caught, store.lock("k"):
        raise failure
    assert caught.value is failure


def test_other_failures_raise_a_store_error_with_their_errno(tmp_path: Path) -> None:
    """A name longer than the file system allows is not a missing key (zarr-python raises too)."""
    store = LocalStore(tmp_path)
    key = "x" * 300
    for call in (lambda: store.get(key), lambda: store.set(key, b"v")):
        with pytest.raises(StoreError) as caught:
            call()
        assert caught.value.key == key
        assert caught.value.errno == errno.ENAMETOOLONG
        assert not isinstance(caught.value, PermissionError)


def test_a_store_error_keeps_its_errno_through_pickling(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as caught:
        LocalStore(tmp_path).get("x" * 300)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is StoreError
    assert (copy.errno, copy.strerror, copy.key, str(copy)) == (
        errno.ENAMETOOLONG, caught.value.strerror, caught.value.key, str(caught.value),
    )  # fmt: skip


def test_an_array_read_the_file_system_refuses_is_an_error_not_the_fill_value(tmp_path: Path) -> None:
    array = gpuzarr.create(tmp_path / "a.zarr", shape=(8, 8), dtype="int32", chunks=(4, 4), fill_value=7)
    array[...] = np.arange(64, dtype="int32").reshape(8, 8)
    reader = gpuzarr.open(tmp_path / "a.zarr", mode="r")
    assert (reader[...] == array[...]).all()  # everything a read needs is imported
    with without_permission(tmp_path / "a.zarr" / "c" / "1" / "0"), pytest.raises(StorePermissionError) as caught:
        reader[4:, :4]
    assert caught.value.key == "c/1/0"


# -- erasing a subtree --------------------------------------------------------------------------------


def test_erase_prefix_of_a_directory_removes_the_directories_it_empties(tmp_path: Path) -> None:
    """As zarr-python's delete_dir: other tools list an empty directory as a node they cannot read."""
    store = LocalStore(tmp_path)
    for key in ("g/a/zarr.json", "g/a/c/0/0", "g/a/c/1/0", "g/b/zarr.json", "g/zarr.json"):
        store.set(key, b"x")
    store.erase_prefix("g/a/")
    assert not (tmp_path / "g" / "a").exists()
    assert sorted(store.list_prefix("")) == ["g/b/zarr.json", "g/zarr.json"]
    store.erase_prefix("g/b/zarr")  # not a directory: only keys go
    assert (tmp_path / "g" / "b").is_dir()
    store.erase_prefix("")  # the whole store: every directory but the root
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


def test_a_node_replaced_by_one_of_fewer_dimensions_writes_its_chunks(tmp_path: Path) -> None:
    """A chunk "c/0" of the new array where the old one's "c/0/0" left the directory "c/0"."""
    gpuzarr.create(tmp_path / "a.zarr", shape=(4, 4), chunks=(2, 2), dtype="i1")[...] = 1
    replaced = gpuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i1", overwrite=True)
    replaced[...] = 2
    assert (gpuzarr.open(tmp_path / "a.zarr", mode="r")[...] == 2).all()


def test_erase_prefix_leaves_what_is_not_its_to_remove(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    store.set("g/a/k", b"x")
    store.set("g/b/k", b"x")
    writing = os.open(tmp_path / "store" / "g" / "b" / f".k{TEMP_MARKER}1", os.O_RDWR | os.O_CREAT)
    fcntl.flock(writing, fcntl.LOCK_EX)  # a live writer's partial write, not a key
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "empty").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "store" / "g" / "link")
    store.erase_prefix("g/")
    assert (tmp_path / "outside" / "empty").is_dir()  # a link out of the root is not followed
    assert (tmp_path / "store" / "g" / "b").is_dir()  # the live partial write keeps it
    os.close(writing)
    assert not (tmp_path / "store" / "g" / "a").exists()
    assert list(store.list_prefix("")) == []


def test_erase_prefix_removes_links_not_what_they_point_to(tmp_path: Path) -> None:
    """A link inside a node to another node's directory goes with the node; the other stays."""
    group = gpuzarr.group(tmp_path / "g.zarr")
    group.create_group("a")
    keep = group.create_array("keep", shape=(4,), chunks=(2,), dtype="i4")
    keep[...] = np.arange(4)
    os.symlink(tmp_path / "g.zarr" / "keep", tmp_path / "g.zarr" / "a" / "alias")
    del group["a"]
    assert not (tmp_path / "g.zarr" / "a").exists()
    assert (gpuzarr.open_array(tmp_path / "g.zarr", path="keep", mode="r")[...] == np.arange(4)).all()


def test_a_node_folder_that_is_a_link_inside_the_store_is_a_name_for_another(tmp_path: Path) -> None:
    """"a" -> "a_v1" in the store: erasing "a" removes the name; "a_v1" keeps its data."""
    group = gpuzarr.group(tmp_path / "g.zarr")
    group.create_array("a_v1", shape=(4,), chunks=(2,), dtype="i4")[...] = 1
    os.symlink(tmp_path / "g.zarr" / "a_v1", tmp_path / "g.zarr" / "a")
    group.create_array("a", shape=(6,), chunks=(3,), dtype="i4", overwrite=True)[...] = 2
    assert not (tmp_path / "g.zarr" / "a").is_symlink()
    assert list(gpuzarr.open_array(tmp_path / "g.zarr", path="a_v1", mode="r")[...]) == [1, 1, 1, 1]
    assert list(gpuzarr.open_array(tmp_path / "g.zarr", path="a", mode="r")[...]) == [2] * 6


def test_a_node_folder_on_another_disk_is_emptied_where_it_lies(tmp_path: Path) -> None:
    """With follow_symlinks, "a" -> /disk/a holds the node's data: replacing or deleting the
    node empties that folder and keeps the link, so the new node lands there too."""
    store = LocalStore(tmp_path / "g.zarr", follow_symlinks=True)
    group = gpuzarr.open_group(store, mode="w")
    elsewhere = tmp_path / "disk" / "a"
    elsewhere.mkdir(parents=True)
    os.symlink(elsewhere, tmp_path / "g.zarr" / "a")
    group.create_array("a", shape=(4,), chunks=(2,), dtype="i4")[...] = 1
    group.create_array("a", shape=(6,), chunks=(3,), dtype="i4", overwrite=True)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["zarr.json"]  # the old chunks are gone
    del group["a"]
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "g.zarr" / "a").is_symlink()


@pytest.mark.parametrize("follow_symlinks", [False, True])
@pytest.mark.parametrize("points_to", [".", "..", "../.."])
def test_a_node_folder_linked_to_its_own_ancestor_never_erases_the_ancestor(
    tmp_path: Path, follow_symlinks: bool, points_to: str
) -> None:
    (tmp_path / "beside").write_bytes(b"not the store's")
    store = LocalStore(tmp_path / "g.zarr", follow_symlinks=follow_symlinks)
    group = gpuzarr.open_group(store, mode="w")
    group.create_group("a").create_array("keep", shape=(2,), dtype="i1")[...] = 3
    os.symlink(points_to, tmp_path / "g.zarr" / "a" / "alias")
    if follow_symlinks and points_to == "../..":  # out of the root, to the folder holding the store
        with pytest.raises(StoreError, match="holds the store"):
            store.erase_prefix("a/alias/")
    else:  # a folder inside the store is another node's: the link alone goes
        store.erase_prefix("a/alias/")
        assert not (tmp_path / "g.zarr" / "a" / "alias").is_symlink()
    assert list(gpuzarr.open_array(tmp_path / "g.zarr", path="a/keep", mode="r")[...]) == [3, 3]
    assert (tmp_path / "beside").read_bytes() == b"not the store's"


@pytest.mark.parametrize("target", ["nowhere", "file", "loop"])
def test_a_node_folder_that_is_a_link_to_no_folder_goes(tmp_path: Path, target: str) -> None:
    store = LocalStore(tmp_path / "g.zarr", follow_symlinks=True)
    store.set("f", b"x")
    link = tmp_path / "g.zarr" / "n"
    os.symlink({"nowhere": "missing", "file": "f", "loop": "n"}[target], link)
    store.erase_prefix("n/")
    assert not link.is_symlink() and store.get("f") == b"x"


def test_a_lock_file_a_killed_writer_left_goes_with_the_node(tmp_path: Path) -> None:
    gpuzarr.create(tmp_path / "a.zarr", shape=(4, 4), chunks=(2, 2), dtype="i1")[...] = 1
    (tmp_path / "a.zarr" / "c" / "0" / f"{LOCK_MARKER}0").write_bytes(b"")  # nobody holds it
    replaced = gpuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i1", overwrite=True)
    replaced[...] = 2
    assert (gpuzarr.open(tmp_path / "a.zarr", mode="r")[...] == 2).all()


def test_a_lock_held_in_the_node_stays_and_is_released(tmp_path: Path) -> None:
    """A thread holding a key's lock inside the node keeps its lock file (on NFS, flock of
    this process's own would not show it held), and lets go of it as usual."""
    store = LocalStore(tmp_path)
    store.set("a/c/0", b"x")
    with store.lock("a/c/0"):
        store.erase_prefix("a/")
        assert [p.name for p in (tmp_path / "a" / "c").iterdir()] == [f"{LOCK_MARKER}0"]
        assert store.get("a/c/0") is None
    assert list((tmp_path / "a" / "c").iterdir()) == []  # released as usual
    store.set("a/c/0", b"y")
    assert store.get("a/c/0") == b"y"


def test_a_locker_whose_directory_an_erase_removed_makes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase of the node between a locker making the lock's directory and creating its
    lock file there: the locker makes the directory again and takes the lock."""
    store = LocalStore(tmp_path)
    store.set("a/c/0", b"x")
    original = os.open
    erased: list[bool] = []

    def open_after_an_erase(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if isinstance(path, str) and LOCK_MARKER in path and not erased:
            erased.append(True)
            LocalStore(tmp_path).erase_prefix("a/")
        return original(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_after_an_erase)
    with store.lock("a/c/1"):
        store.set("a/c/1", b"y")
    monkeypatch.undo()
    assert erased and store.get("a/c/1") == b"y" and store.get("a/c/0") is None


def test_erase_prefix_of_a_directory_leaves_a_file_of_that_name(tmp_path: Path) -> None:
    """"0/" names what lies below "0": a chunk file "0" of a 1-d array at the root is not."""
    array = gpuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i4", zarr_format=2, fill_value=0)
    array[...] = [1, 2, 3, 4]
    LocalStore(tmp_path / "a.zarr").erase_prefix("0/")
    assert list(gpuzarr.open_array(tmp_path / "a.zarr", mode="r")[...]) == [1, 2, 3, 4]


def test_erase_prefix_removes_partial_writes_no_writer_holds(tmp_path: Path) -> None:
    """A killed writer's leftover in the old node's directory "c/0" must not keep it there,
    where the new node's chunk "c/0" goes."""
    gpuzarr.create(tmp_path / "a.zarr", shape=(4, 4), chunks=(2, 2), dtype="i1")[...] = 1
    (tmp_path / "a.zarr" / "c" / "0" / f".0123456789abcdef{TEMP_MARKER}").write_bytes(b"torn")
    replaced = gpuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i1", overwrite=True)
    replaced[...] = 2
    assert (gpuzarr.open(tmp_path / "a.zarr", mode="r")[...] == 2).all()


def test_an_erase_the_file_system_refuses_raises(tmp_path: Path) -> None:
    group = gpuzarr.group(tmp_path / "g.zarr")
    group.create_array("x", shape=(8,), chunks=(4,), dtype="i4", fill_value=0)[...] = np.arange(1, 9)
    store = LocalStore(tmp_path / "g.zarr")
    chunks = tmp_path / "g.zarr" / "x" / "c"
    with without_permission(chunks), pytest.raises(StorePermissionError):
        del group["x"]
    with without_permission(chunks), pytest.raises(StorePermissionError):
        store.list_dir("x/c/")  # the directory asked for
    # Refused, not reported done: the chunks it could not reach are still there.
    assert sorted(k for k in store.list_prefix("x/c/")) == ["x/c/0", "x/c/1"]


def test_a_directory_no_one_may_list_does_not_break_listings(tmp_path: Path) -> None:
    """A ``lost+found`` in a volume's root: listings skip it, as os.walk and zarr-python do."""
    with reachable_directory(0o755) as base:
        gpuzarr.group(base / "g.zarr").create_array("x", shape=(2,), dtype="i1")
        private = base / "g.zarr" / "lost+found"
        private.mkdir(mode=0o700)
        with without_permission(private):
            assert [name for name, _ in gpuzarr.open_group(base / "g.zarr", mode="r").members()] == ["x"]
            assert LocalStore(base / "g.zarr").unlisted_folders("") == []  # lost+found: not the store's


def test_a_node_no_one_may_read_is_an_error_not_left_out_as_in_zarr_python(tmp_path: Path) -> None:
    """A subgroup the file system will not list: a group's listing, and the consolidated
    metadata written from it, raise rather than leave it out (which readers of the consolidated
    metadata, who may read it, would then never see). zarr-python 3.1.6 raises PermissionError
    there too (not run here: as another user, its lazy imports of root's files fail)."""
    with reachable_directory() as base:
        root = gpuzarr.group(base / "g.zarr")
        root.create_group("a").create_array("x", shape=(2,), dtype="i1")
        root.create_array("b", shape=(2,), dtype="i1")
        for path in [base / "g.zarr", *(base / "g.zarr").rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
        private = base / "g.zarr" / "a"
        private.chmod(0o700)
        store = LocalStore(base / "g.zarr")
        # What runs as another user must be imported first: Python's own files are root's.
        gpuzarr.consolidate_metadata(gpuzarr.group(base / "warm.zarr").store)
        with without_permission(private):
            assert store.list_dir("")[1] == ["a/", "b/"]  # it may hold nodes: listed
            assert store.unlisted_folders("") == ["a/"] and store.unlisted_folders("b/") == []
            with pytest.raises(StorePermissionError) as caught:
                list(gpuzarr.open_group(base / "g.zarr", mode="r"))
            assert caught.value.key == "a/zarr.json"
            with pytest.raises(StorePermissionError):
                gpuzarr.consolidate_metadata(base / "g.zarr")
            assert sorted(k for k in store.list_prefix("")) == ["b/zarr.json", "zarr.json"]  # keys: as before
        assert "consolidated_metadata" not in (base / "g.zarr" / "zarr.json").read_text()
        assert [name for name, _ in gpuzarr.open_group(base / "g.zarr", mode="r").members()] == ["a", "b"]


@pytest.mark.parametrize("planted", ["dangling", "to a file"])
def test_a_link_planted_at_a_lock_files_name_is_refused_not_followed(tmp_path: Path, planted: str) -> None:
    store = LocalStore(tmp_path / "s")
    store.set("a/c/0", b"x")
    target = tmp_path / ("nowhere/x" if planted == "dangling" else "victim")
    if planted == "to a file":
        target.write_bytes(b"mine")
    os.symlink(target, tmp_path / "s" / "a" / "c" / f"{LOCK_MARKER}0")
    outcome: list[BaseException | None] = []

    def lock() -> None:
        try:
            with store.lock("a/c/0"):
                pass
            outcome.append(None)
        except BaseException as exc:  # reported below
            outcome.append(exc)

    worker = threading.Thread(target=lock, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the lock spun on the planted link"
    assert isinstance(outcome[0], StoreError)
    if planted == "to a file":
        assert target.read_bytes() == b"mine"


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_value_reader_skips_what_is_no_file_and_closes_what_it_opened(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("c/0/0", b"v00")
    store.set("c/1/0", b"v10")
    (tmp_path / "c" / "0" / "dir").mkdir()
    os.mkfifo(tmp_path / "c" / "0" / "fifo")  # opened without waiting for a writer
    before = _open_descriptors()
    with store.value_reader(3, lambda key, n: ValueError(f"{key}: {n}")) as read:
        assert bytes(read("c/0/0")) == b"v00"
        assert read("c/0/dir") is None
        assert read("c/0/fifo") is None
        assert read("c/2/0") is None  # its directory is missing: every key of it is absent
        store.set("c/2/0", b"new")  # the directory made meanwhile: read by its path
        assert bytes(read("c/2/0")) == b"new"
        assert bytes(read("c/1/0")) == b"v10"
        store.set("c/1/1", b"long")
        with pytest.raises(ValueError, match="c/1/1: 4"):
            read("c/1/1")
        assert len(_open_descriptors() - before) >= 2  # the directories c/0 and c/1, held
    assert _open_descriptors() == before
    with pytest.raises(ValueError), store.value_reader(3, lambda key, n: ValueError(key)) as read:
        read("c/0/0")
        read("c/1/1")
    assert _open_descriptors() == before


def test_a_subclass_reading_through_its_own_get_into_sees_every_chunk_read(tmp_path: Path) -> None:
    # Runs of small chunks read files their own way (LocalStore.value_reader), except where a
    # subclass reads in a get_into of its own: it is then asked for every chunk.
    class Counting(LocalStore):
        def __init__(self, root: Path) -> None:
            super().__init__(root)
            self.keys: list[str] = []

        def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
            self.keys.append(key)
            return super().get_into(key, buffer_for, start, length)

    x = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    gzip = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}]
    a = gpuzarr.create(tmp_path, shape=x.shape, dtype="uint16", chunks=(8, 8), codecs=gzip)
    a[...] = x
    store = Counting(tmp_path)
    b = gpuzarr.open_array(store, mode="r")
    np.testing.assert_array_equal(b[...], x)
    chunks = sorted(f"c/{i}/{j}" for i in range(8) for j in range(8))
    assert sorted(k for k in store.keys if k.startswith("c/")) == chunks


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_value_reader_holds_a_few_directories_open_however_many_it_reads(tmp_path: Path) -> None:
    # A whole read of small chunks is one run on the calling thread, and v3's keys put each
    # row of chunks in a directory of its own: one descriptor held a row ran out of them.
    import resource

    store = LocalStore(tmp_path)
    keys = [f"c/{i}/0" for i in range(300)]
    for key in keys:
        store.set(key, key.encode())
    before = len(_open_descriptors())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (before + 100, hard))
    try:
        with store.value_reader(None, lambda key, n: ValueError(key)) as read:
            for key in keys:
                assert bytes(read(key)) == key.encode()
                assert len(_open_descriptors()) - before <= 8
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_value_reader_called_after_its_block_reads_by_path(tmp_path: Path) -> None:
    # The directories it held are closed: their descriptor numbers may name other directories
    # by then (here one outside the root holding a file of the same name).
    store = LocalStore(tmp_path / "store")
    store.set("c/0/0", b"inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0").write_bytes(b"outside")
    with store.value_reader(None, lambda key, n: ValueError(key)) as read:
        assert bytes(read("c/0/0")) == b"inside"
    other = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert bytes(read("c/0/0")) == b"inside"
    finally:
        os.close(other)


def test_a_store_whose_get_into_reads_another_array_reads_right(tmp_path: Path) -> None:
    # Its values are read into memory of their own: the inner read's chunks go through the
    # thread's buffers, which a value sharing one would be overwritten in.
    blosc = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "lz4"}},
    ]
    source = np.arange(160, dtype="<i4") * 3 + 1
    src = gpuzarr.create(tmp_path / "src", shape=(160,), dtype="<i4", chunks=(2,), codecs=blosc)
    src[...] = source

    class Cut(gpuzarr.MemoryStore):
        """Chunk c/i: elements [8i, 8i + 8) of ``src``, read into the caller's buffer."""

        def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
            if not key.startswith("c/"):
                return super().get_into(key, buffer_for, start, length)
            i = int(key.split("/")[1])
            target = buffer_for(32)
            src.read(slice(8 * i, 8 * i + 8), out=np.asarray(target).view("<i4"))
            return memoryview(target).cast("B"), 32

    raw = [{"name": "bytes", "configuration": {"endian": "little"}}]
    cut = gpuzarr.create(Cut(), shape=(160,), dtype="<i4", chunks=(8,), codecs=raw)
    np.testing.assert_array_equal(cut[...], source)


def test_listing_deep_directories_does_not_resolve_each_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no link lies on the way, a listing's directory is checked with one openat2, not
    ``realpath`` (a component at a time: 92,000 lstat calls for a hierarchy 300 deep)."""
    from gpuzarr.store import local, no_links_open

    if no_links_open.open_without_links(str(tmp_path), os.O_RDONLY | os.O_DIRECTORY) is None:
        pytest.skip("no openat2 here: the listing resolves each path")
    store = LocalStore(tmp_path / "deep")
    path = ""
    for i in range(40):
        path = f"{path}d{i}/"
        store.set(path + "k", b"x")
    resolved: list[str] = []
    real_realpath = os.path.realpath
    monkeypatch.setattr(local.os.path, "realpath", lambda p, *a, **k: resolved.append(p) or real_realpath(p, *a, **k))
    prefix = ""
    for i in range(40):
        prefix = f"{prefix}d{i}/"
        keys, dirs = store.list_dir(prefix)
        assert keys == [prefix + "k"] and dirs == ([f"{prefix}d{i + 1}/"] if i < 39 else [])
    assert sorted(store.list_prefix("d0/d1/")) == sorted(f"d0/d1/{p}k" for p in _chain(2, 40))
    assert not resolved


def _chain(start: int, stop: int) -> list[str]:
    """The prefixes ``""``, ``"d{start}/"``, ``"d{start}/d{start+1}/"``, ... below ``d{start-1}``."""
    out, prefix = [""], ""
    for i in range(start, stop):
        prefix = f"{prefix}d{i}/"
        out.append(prefix)
    return out
