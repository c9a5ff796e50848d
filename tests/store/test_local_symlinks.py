"""LocalStore and symbolic links: nothing is read, written, erased or listed through a link that
leaves the root, unless the store follows links; links inside the root work."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import pytest

import gpuzarr
from gpuzarr.errors import GpuZarrError, SymlinkEscapeError
from gpuzarr.store import LocalStore, make_store, no_links_open
from gpuzarr.store.base import ByteRange

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SECRET = b"outside the store"


@pytest.fixture(autouse=True, params=["openat2", "proc check only"])
def open_check(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test twice: reads opened with openat2 where the kernel has it (a link on the way
    falls back to the /proc check), and as on kernels without it (the /proc check alone)."""
    no_links_open.reset_for_tests(unavailable=request.param != "openat2")
    try:
        yield request.param
    finally:
        no_links_open.reset_for_tests(unavailable=False)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret").write_bytes(SECRET)
    return directory


@pytest.fixture
def root(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    return directory


def test_a_key_linked_out_of_the_root_is_refused_by_name(root: Path, outside: Path) -> None:
    (root / "a").mkdir()
    (root / "a" / "k").symlink_to(outside / "secret")
    store = LocalStore(root)
    calls = [
        lambda: store.get("a/k"),
        lambda: store.get("a/k", ByteRange(0, 4)),
        lambda: store.get_ranges("a/k", [ByteRange(0, 4)]),
        lambda: store.get_into("a/k", bytearray),
        lambda: store.exists("a/k"),
        lambda: store.real_path("a/k"),
    ]
    for call in calls:
        with pytest.raises(SymlinkEscapeError, match=r"^a/k: a symbolic link leads outside") as info:
            call()
        assert info.value.key == "a/k"
    assert isinstance(info.value, GpuZarrError) and isinstance(info.value, PermissionError)
    assert LocalStore(root, follow_symlinks=True).get("a/k") == SECRET


def test_a_key_below_a_directory_linked_out_is_refused(root: Path, outside: Path) -> None:
    (root / "d").symlink_to(outside)
    store = LocalStore(root)
    with pytest.raises(SymlinkEscapeError, match=r"^d/secret"):
        store.get("d/secret")
    with pytest.raises(SymlinkEscapeError, match=r"^d/new"):
        store.set("d/new", b"x")
    with pytest.raises(SymlinkEscapeError, match=r"^d/sub/new"):
        store.set("d/sub/new", b"x")
    with pytest.raises(SymlinkEscapeError, match=r"^d/secret"):
        store.erase("d/secret")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == SECRET


def test_a_directory_swapped_for_a_link_out_is_refused_on_the_next_write(root: Path, outside: Path) -> None:
    # The first writes reach c/0 by the walk (creating it), the next ones open it by its path:
    # that path then leads out, which the check of the opened directory catches.
    store = LocalStore(root)
    store.set("c/0/0", b"first")
    store.set("c/0/1", b"second")
    (root / "c" / "0").rename(root / "moved")
    (root / "c" / "0").symlink_to(outside)
    with pytest.raises(SymlinkEscapeError, match=r"^c/0/2: a symbolic link leads outside"):
        store.set("c/0/2", b"x")
    with pytest.raises(SymlinkEscapeError, match=r"^c/0/secret"):
        store.set("c/0/secret", b"x")
    with pytest.raises(SymlinkEscapeError, match=r"^c/0/secret"):
        store.erase("c/0/secret")
    with pytest.raises(SymlinkEscapeError, match=r"^c/0/3"), store.lock("c/0/3"):
        pass
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == SECRET
    assert sorted(p.name for p in (root / "moved").iterdir()) == ["0", "1"]


def test_a_write_through_a_link_out_and_back_in_lands_inside(root: Path, tmp_path: Path) -> None:
    # Like a read, a write checks where the directory it writes into really is: a path that
    # leaves the root and comes back writes inside it, and nothing outside changes.
    (root / "real").mkdir()
    hop = tmp_path / "hop"
    hop.mkdir()
    (hop / "back").symlink_to(root / "real")
    (root / "out").symlink_to(hop)
    store = LocalStore(root)
    store.set("real/k", b"v")  # the walk has checked real/
    store.set("out/back/k", b"w")
    assert (root / "real" / "k").read_bytes() == b"w"
    assert sorted(p.name for p in hop.iterdir()) == ["back"]


def test_follow_symlinks_writes_through_links(root: Path, outside: Path) -> None:
    (root / "d").symlink_to(outside)
    store = LocalStore(root, follow_symlinks=True)
    store.set("d/sub/new", b"x")
    assert (outside / "sub" / "new").read_bytes() == b"x"
    assert store.list_prefix("d/") is not None
    assert list(store.list_prefix("d/")) == ["d/secret", "d/sub/new"]


def test_writing_a_key_that_is_a_link_out_replaces_the_link(root: Path, outside: Path) -> None:
    (root / "k").symlink_to(outside / "secret")
    LocalStore(root).set("k", b"new")
    assert not (root / "k").is_symlink()
    assert (root / "k").read_bytes() == b"new"
    assert (outside / "secret").read_bytes() == SECRET


def test_a_chunk_linked_out_fails_the_read_instead_of_reading_it(root: Path, outside: Path) -> None:
    codecs = [{"name": "bytes"}]
    array = gpuzarr.create(LocalStore(root), shape=(4,), dtype="u1", chunks=(2,), fill_value=0, codecs=codecs)
    array[...] = 1
    (outside / "raw").write_bytes(bytes([9, 9]))
    os.unlink(root / "c" / "1")
    (root / "c" / "1").symlink_to(outside / "raw")
    with pytest.raises(SymlinkEscapeError, match=r"c/1"):
        gpuzarr.open(str(root), mode="r")[...]
    followed = gpuzarr.open(LocalStore(root, follow_symlinks=True), mode="r")[...]
    assert followed.tolist() == [1, 1, 9, 9]


def test_listing_does_not_walk_a_link_to_the_file_system_root(root: Path) -> None:
    store = LocalStore(root)
    group = gpuzarr.open_group(store, path="g", mode="w")
    group.create_group("a")
    (root / "g" / "everything").symlink_to("/")
    (root / "g" / "secret").symlink_to("/etc/hostname")
    assert list(store.list_prefix("")) == ["g/a/zarr.json", "g/zarr.json", "zarr.json"]  # the root group too
    assert store.list_dir("g/") == (["g/zarr.json"], ["g/a/"])
    assert list(store.list_prefix("g/everything/")) == []
    assert store.list_dir("g/everything/") == ([], [])
    assert list(gpuzarr.open_group(store, path="g", mode="r")) == ["a"]


def test_a_link_loop_inside_the_root_ends_the_walk(root: Path) -> None:
    store = LocalStore(root)
    store.set("a/k", b"1")
    (root / "a" / "loop").symlink_to(root / "a")
    (root / "self").symlink_to("self")
    # The loop is entered once at most: its target is already on the walk's path.
    assert list(store.list_prefix("")) == ["a/k"]
    assert store.get("a/loop/loop/k") == b"1"
    with pytest.raises(SymlinkEscapeError, match="loop"):
        store.get("self")


def test_links_inside_the_root_work(root: Path) -> None:
    store = LocalStore(root)
    store.set("a/k", b"value")
    (root / "b").symlink_to(root / "a")
    (root / "a" / "alias").symlink_to("k")
    assert store.get("b/k") == b"value"
    assert store.get("a/alias") == b"value"
    store.set("b/new", b"through b")
    assert (root / "a" / "new").read_bytes() == b"through b"
    assert store.real_path("b/k") == os.path.realpath(root / "a" / "k")


def test_the_root_may_be_a_link(tmp_path: Path, root: Path) -> None:
    (tmp_path / "alias").symlink_to(root)
    store = LocalStore(tmp_path / "alias")
    store.set("a/k", b"v")
    assert (root / "a" / "k").read_bytes() == b"v"
    assert store.get("a/k") == b"v"
    assert list(store.list_prefix("")) == ["a/k"]


def test_a_fifo_in_the_store_is_not_a_key_and_does_not_block(root: Path) -> None:
    os.mkfifo(root / "k")
    store = LocalStore(root)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(store.get("k")), daemon=True)
    reader.start()
    reader.join(30)
    assert got == [None]


def test_options_survive_a_read_only_reopen(root: Path) -> None:
    store = LocalStore(root, follow_symlinks=True, durable=True)
    ro, _ = make_store(store, read_only=True)
    assert isinstance(ro, LocalStore)
    assert (ro.read_only, ro.follow_symlinks, ro.durable) == (True, True, True)


def _read_values(store: LocalStore, keys: list[str]) -> list[bytes | None]:
    with store.value_reader(None, lambda key, n: ValueError(key)) as read:
        return [None if (value := read(key)) is None else bytes(value) for key in keys]


def test_a_value_reader_goes_through_links_only_inside_the_root(root: Path, outside: Path) -> None:
    # A run of chunk files opens each directory once and each file relative to it: a link on
    # the way, as a file or as a directory, is checked where it leads as any read checks it.
    (root / "a").mkdir()
    (root / "a" / "k").write_bytes(b"kept")
    (root / "a" / "inside").symlink_to(root / "a" / "k")
    (root / "a" / "out").symlink_to(outside / "secret")
    (root / "in").symlink_to(root / "a")
    (root / "out").symlink_to(outside)
    store = LocalStore(root)
    assert _read_values(store, ["a/k", "a/inside", "in/k", "in/inside", "a/missing"]) == [b"kept"] * 4 + [None]
    for key in ["a/out", "out/secret", "in/out"]:
        with pytest.raises(SymlinkEscapeError, match=f"^{key}: a symbolic link leads outside"):
            _read_values(store, ["a/k", key])
    follow = LocalStore(root, follow_symlinks=True)
    assert _read_values(follow, ["a/out", "out/secret", "a/k"]) == [SECRET, SECRET, b"kept"]
