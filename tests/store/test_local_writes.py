"""LocalStore writes: short temporary names, leftovers of killed writers (removed by the next
write of the key or by remove_partial_writes, never under a live writer), durable mode, and
the conformance suite with the link and durability options."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr.store import LocalStore
from gpuzarr.store.local import TEMP_MARKER, _create_temp

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
    store = LocalStore(tmp_path)
    store.set("c/0", b"old")
    _kill_a_writer(tmp_path, "c/0")
    assert len(_names(tmp_path / "c")) == 2  # the key and the leftover
    assert list(store.list_prefix("")) == ["c/0"]
    assert store.get("c/0") == b"old"
    store.set("c/0", b"new")
    assert _names(tmp_path / "c") == ["0"]
    assert store.get("c/0") == b"new"


def test_a_live_writers_temporary_file_is_left_alone(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
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


def test_durable_writes_fsync_the_file_and_the_new_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    LocalStore(tmp_path / "plain").set("a/k", b"v")
    assert synced == []
    LocalStore(tmp_path / "root", durable=True).set("a/b/k", b"v")
    root = os.path.realpath(tmp_path / "root")
    temp = next(s for s in synced if TEMP_MARKER in s)
    assert os.path.dirname(temp) == f"{root}/a/b"
    # the root's parent, the root (holding the new a), a (holding the new b), then b after the rename
    assert [s for s in synced if s != temp] == [os.path.dirname(root), root, f"{root}/a", f"{root}/a/b"]
