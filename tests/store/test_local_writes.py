"""LocalStore writes: unnamed temporary files (nothing left by a killed writer, no torn key, a
reader never sees part of a value), the named temporary files used where the file system has no
unnamed ones (short names, leftovers removed by the next write of the key or by
remove_partial_writes, never under a live writer), durable mode, and the conformance suite with
the link, durability and named-temporary-file options."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr.errors import InvalidKeyError
from gpuzarr.store import LocalStore
from gpuzarr.store.local import TEMP_MARKER, _create_temp
from gpuzarr.store.locks import LOCK_MARKER

from .conformance import StoreConformance

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.store.base import Store


class TestLocalStoreFollowingLinks(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return LocalStore(tmp_path / "store", follow_symlinks=True)

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, LocalStore)
        return store.with_options(read_only=True)


class TestLocalStoreDurable(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return LocalStore(tmp_path / "store", durable=True)

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, LocalStore)
        return store.with_options(read_only=True)


def _named_temp_files(store: LocalStore) -> LocalStore:
    """``store`` writing through named temporary files, as on a file system without unnamed
    ones."""
    store._unnamed_temp_files = False
    return store


class TestLocalStoreNamedTempFiles(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return _named_temp_files(LocalStore(tmp_path / "store"))

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, LocalStore)
        return store.with_options(read_only=True)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("length", [230, 250, 255])
def test_a_key_whose_name_fits_the_file_system_can_be_written(tmp_path: Path, length: int) -> None:
    store = LocalStore(tmp_path)
    key = "a/" + "k" * length
    store.set(key, b"v")
    assert store.get(key) == b"v"
    assert list(store.list_prefix("a/")) == [key]


def test_temporary_names_are_hidden_and_of_fixed_length(tmp_path: Path) -> None:
    directory = os.open(tmp_path, os.O_RDONLY)
    fd_short, short = _create_temp(directory, "k")
    fd_long, long = _create_temp(directory, "k" * 250)
    for fd in (fd_short, fd_long, directory):
        os.close(fd)
    assert short.startswith(".") and long.startswith(".")
    assert TEMP_MARKER in short and len(short) == len(long) < 40


@pytest.mark.parametrize("key", [f"a{TEMP_MARKER}x/zarr.json", f"g/{LOCK_MARKER}n/c/0", f"g/b{TEMP_MARKER}"])
def test_keys_named_like_partial_writes_or_locks_are_refused(tmp_path: Path, key: str) -> None:
    # Listings skip such names: a node written under one was written, then never found again
    # (consolidate_metadata left it out).
    store = LocalStore(tmp_path)
    with pytest.raises(InvalidKeyError, match=r"is named like this store's partial writes and lock files"):
        store.set(key, b"x")
    assert not store.exists(key)
    import gpuzarr

    group = gpuzarr.create_group(store)
    with pytest.raises(InvalidKeyError):
        group.create_group(f"data{TEMP_MARKER}v1")
    assert list(group) == []


def _kill_a_writer(root: Path, key: str) -> None:
    """A process that starts writing ``key``, then is killed (SIGKILL) before the rename."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from gpuzarr.store.local import _create_temp
        directory = os.path.join({str(root)!r}, os.path.dirname({key!r}))
        os.makedirs(directory, exist_ok=True)
        fd, temp = _create_temp(os.open(directory, os.O_RDONLY), os.path.basename({key!r}))
        os.write(fd, b"half a chunk")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False)
    assert done.returncode == -9


def test_the_next_write_of_a_key_removes_a_killed_writers_leftover(tmp_path: Path) -> None:
    store = _named_temp_files(LocalStore(tmp_path))
    store.set("c/0", b"old")
    _kill_a_writer(tmp_path, "c/0")
    assert len(_names(tmp_path / "c")) == 2  # the key and the leftover
    assert list(store.list_prefix("")) == ["c/0"]
    assert store.get("c/0") == b"old"
    store.set("c/0", b"new")
    assert _names(tmp_path / "c") == ["0"]
    assert store.get("c/0") == b"new"


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed", "named"])
def test_a_live_writers_temporary_file_is_left_alone(tmp_path: Path, unnamed: bool) -> None:
    store = LocalStore(tmp_path)
    store._unnamed_temp_files &= unnamed
    directory = os.open(tmp_path, os.O_RDONLY)
    live_fd, live = _create_temp(directory, "k")  # a writer still writing "k"
    try:
        store.set("k", b"mine")
        assert (tmp_path / live).exists()
        assert store.get("k") == b"mine"
        assert store.remove_partial_writes(older_than=0) == []
        assert (tmp_path / live).exists()
        os.write(live_fd, b"theirs")
        os.replace(live, "k", src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.close(live_fd)
        os.close(directory)
    assert store.get("k") == b"theirs"
    assert _names(tmp_path) == ["k"]


def test_remove_partial_writes_walks_the_store(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("a/b/k", b"v")
    _kill_a_writer(tmp_path, "a/b/k")
    _kill_a_writer(tmp_path, "never/written")
    (tmp_path / "a" / f"old{TEMP_MARKER}1_ab").write_bytes(b"from an older version")
    os.utime(tmp_path / "a" / f"old{TEMP_MARKER}1_ab", (0, 0))
    assert store.remove_partial_writes(older_than=3600) == [f"a/old{TEMP_MARKER}1_ab"]
    removed = store.remove_partial_writes(older_than=0)
    assert len(removed) == 2
    assert all(TEMP_MARKER in r for r in removed)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == ["a/b/k"]
    assert store.get("a/b/k") == b"v"


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed", "named"])
def test_durable_writes_fsync_the_file_and_the_new_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    LocalStore(tmp_path / "plain").set("a/k", b"v")
    assert synced == []
    store = LocalStore(tmp_path / "root", durable=True)
    store._unnamed_temp_files &= unnamed
    store.set("a/b/k", b"v")
    root = os.path.realpath(tmp_path / "root")
    # the root's parent, the root (holding the new a), a (holding the new b), the file before
    # it is linked or renamed in, then b after that
    assert synced[:3] == [os.path.dirname(root), root, f"{root}/a"]
    assert synced[4:] == [f"{root}/a/b"]
    written = synced[3]
    assert os.path.dirname(written) == f"{root}/a/b"
    # an unnamed file shows as "#<inode> (deleted)" until it is linked in
    assert (written.endswith(" (deleted)") and TEMP_MARKER not in written) if unnamed else TEMP_MARKER in written
    synced.clear()
    store.set("a/b/k", b"again")  # the existing key is replaced: the file, then b
    assert len(synced) == 2 and os.path.dirname(synced[0]) == synced[1] == f"{root}/a/b"


# -- unnamed temporary files --------------------------------------------------------------------


def _leftovers(root: Path) -> list[str]:
    """Every file below ``root`` that is not a key."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name.startswith("."))


def test_a_write_leaves_no_temporary_name(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    if not store._unnamed_temp_files:
        pytest.skip("no unnamed temporary files (O_TMPFILE, /proc) here")
    store.set("c/0/0", b"first")
    store.set("c/0/0", b"second")  # replaces: linked under a temporary name, renamed over
    store.set("c/0/1", b"third")
    assert store._unnamed_temp_files  # the file system took them
    assert _names(tmp_path / "c" / "0") == ["0", "1"]
    assert (store.get("c/0/0"), store.get("c/0/1")) == (b"second", b"third")


def test_a_file_system_without_unnamed_files_falls_back_to_named_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuzarr.store.local as local

    # A kernel without O_TMPFILE reads its bits as O_DIRECTORY, and refuses to open a
    # directory for writing: EISDIR, as asked here.
    monkeypatch.setattr(local, "_UNNAMED_FILE_FLAGS", os.O_DIRECTORY | os.O_WRONLY | os.O_CLOEXEC)
    store = LocalStore(tmp_path)
    store._unnamed_temp_files = True
    store.set("a/k", b"v")
    assert store._unnamed_temp_files is False  # remembered: the next writes go straight there
    store.set("a/k", b"w")
    assert store.get("a/k") == b"w"
    assert _names(tmp_path / "a") == ["k"]


def _write_until_killed(root: Path, *, unnamed: bool, overwrite: bool) -> list[str]:
    """A child process writes 4 MiB values (each one byte repeated) until it is killed with
    SIGKILL, almost surely in the middle of a write; returns the keys it reported complete."""
    script = textwrap.dedent(
        f"""
        import sys
        from gpuzarr.store import LocalStore
        store = LocalStore({str(root)!r})
        store._unnamed_temp_files &= {unnamed!r}
        values = [bytes([j]) * (4 << 20) for j in range(1, 4)]  # made first: the loop only writes
        for i in range(10_000):
            key = "c/0" if {overwrite!r} else f"c/{{i}}"
            store.set(key, values[i % 3])
            print(key, flush=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        done = [child.stdout.readline().strip() for _ in range(5)]  # five writes made, more under way
        child.kill()
    assert child.returncode == -9
    return done


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed", "named"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["new-keys", "one-key"])
def test_a_writer_killed_mid_write_leaves_no_torn_key(tmp_path: Path, unnamed: bool, overwrite: bool) -> None:
    done = _write_until_killed(tmp_path, unnamed=unnamed, overwrite=overwrite)
    store = LocalStore(tmp_path)
    keys = list(store.list_prefix(""))
    assert set(done) <= set(keys)
    for key in keys:
        value = store.get(key)
        assert value is not None and len(value) == 4 << 20, key
        assert value == value[:1] * len(value), f"{key} is torn"
    if unnamed and store._unnamed_temp_files and not overwrite:
        # new keys are linked in whole: a killed writer leaves no file at all
        assert _leftovers(tmp_path) == []
    store.remove_partial_writes(older_than=0)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed", "named"])
def test_a_reader_never_sees_part_of_a_value(tmp_path: Path, unnamed: bool) -> None:
    store = LocalStore(tmp_path)
    store._unnamed_temp_files &= unnamed
    size = 2 << 20
    store.set("c/0", b"a" * size)
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            store.set("c/0", (b"b" if i % 2 else b"a") * size)
            i += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        seen = set()
        for _ in range(60):
            value = store.get("c/0")
            assert value is not None and len(value) == size
            assert value.count(value[:1]) == size, "a reader saw a mixed or partial value"
            seen.add(value[:1])
    finally:
        stop.set()
        writer.join()
    assert seen <= {b"a", b"b"}
    assert _leftovers(tmp_path) == []


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_an_interrupt_just_after_the_link_leaves_no_hidden_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unnamed file is linked under a hidden name, then renamed over the key: a Ctrl-C
    landing just after the link (before the block that removes it on failure) left the hidden
    name, a whole copy of the value, behind."""
    store = LocalStore(tmp_path)
    if not store._unnamed_temp_files:
        pytest.skip("no unnamed temporary files (O_TMPFILE, /proc) here")
    store.set("c/0", b"old")
    link = os.link

    def link_then_interrupt(*args: Any, **kwargs: Any) -> None:
        link(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "link", link_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        store.set("c/0", b"new")
    monkeypatch.undo()
    assert _leftovers(tmp_path) == []
    assert store.get("c/0") == b"old"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
@pytest.mark.parametrize("step", ["_lock", "_names_same_file"])
def test_an_interrupt_while_a_named_temporary_file_is_taken_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Where there are no unnamed files: a Ctrl-C between the temporary file's open and its
    lock (or the check that its name is its own) kept the descriptor open."""
    import gpuzarr.store.local as local

    directory = os.open(tmp_path, os.O_RDONLY)
    try:
        before = _open_descriptors()
        real = getattr(local, step)

        def interrupted(*args: Any) -> Any:
            real(*args)
            raise KeyboardInterrupt

        monkeypatch.setattr(local, step, interrupted)
        with pytest.raises(KeyboardInterrupt):
            _create_temp(directory, "k")
        monkeypatch.undo()
        assert _open_descriptors() == before
    finally:
        os.close(directory)


def test_a_reader_whose_construction_was_cut_short_closes_quietly() -> None:
    """An interrupt inside the reader's construction, before it held its descriptor: its
    finaliser printed "Exception ignored ... no attribute '_fd'"."""
    from gpuzarr.store.local import _FileReader

    _FileReader.__new__(_FileReader).close()


@pytest.mark.parametrize("cleanup", ["removed", "locked"])
def test_a_writers_own_temporary_file_taken_by_a_cleanup_before_its_lock_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cleanup: str
) -> None:
    """Where the shared temporary name is a live writer's, a second writer makes a file of its
    own name and then locks it. In between, remove_partial_writes(older_than=0) may find it
    unlocked: lock it to remove it, or have removed it. The write failed at its rename ("No such
    file or directory"); the writer now makes another."""
    import gpuzarr.store.local as local

    directory = os.open(tmp_path, os.O_RDONLY)
    live_fd, _ = _create_temp(directory, "k")  # a writer holding the shared name
    real_open = os.open
    taken: list[int] = []

    def open_and_lose_the_first(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        shared = local._temp_name("k")
        if isinstance(path, str) and path.startswith(shared) and path != shared and not taken:
            if cleanup == "removed":
                os.unlink(path, dir_fd=kwargs.get("dir_fd"))
                taken.append(-1)
            else:  # a cleanup that holds its lock, about to remove it
                held = real_open(path, os.O_RDONLY, dir_fd=kwargs.get("dir_fd"))
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken.append(held)
        return fd

    monkeypatch.setattr(local.os, "open", open_and_lose_the_first)
    try:
        fd, own = _create_temp(directory, "k")
        monkeypatch.undo()
        assert taken and own != local._temp_name("k")
        assert _names_same_file_of(directory, own, fd)  # its name is its own
        for held in taken:  # the cleanup lets go: the writer holds the lock of the file it keeps
            if held >= 0:
                os.close(held)
        taken.clear()
        with pytest.raises(BlockingIOError):
            fcntl.flock(os.open(own, os.O_RDONLY, dir_fd=directory), fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        monkeypatch.undo()
        for held in taken:
            if held >= 0:
                os.close(held)
        os.close(live_fd)
        os.close(directory)


def _names_same_file_of(directory: int, name: str, fd: int) -> bool:
    named, opened = os.stat(name, dir_fd=directory), os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
