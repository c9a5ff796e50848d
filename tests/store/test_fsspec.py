"""FsspecStore: the conformance suite over fsspec's memory and local file systems and a file
system of the user's own, fsspec URLs, and errors that name the URL and key."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr.errors import StoreError, StorePermissionError
from gpuzarr.store.base import ByteRange
from gpuzarr.store.fsspec import FsspecStore

from .conformance import VALUE, StoreConformance

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.store.base import Store

fsspec = pytest.importorskip("fsspec")
from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402


class TestFsspecMemoryStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        # fsspec's memory file system is one per process: a root of its own for each test.
        return FsspecStore(fsspec.filesystem("memory"), f"/gpuzarr-test-{uuid.uuid4().hex}")

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, FsspecStore)
        return FsspecStore(store.fs, store.root, read_only=True)


class TestFsspecLocalStore(TestFsspecMemoryStore):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return FsspecStore(fsspec.filesystem("file"), str(tmp_path / "store"))


class CountingFileSystem(MemoryFileSystem):  # type: ignore[misc]
    """A file system of the user's own: fsspec's memory one, counting what it is asked."""

    protocol = "counting"
    root_marker = "/"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.store = {}
        self.pseudo_dirs = [""]

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        self.calls.append("cat_file")
        return super().cat_file(path, start=start, end=end, **kwargs)  # type: ignore[no-any-return]


class TestUserFileSystemStore(TestFsspecMemoryStore):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return FsspecStore(CountingFileSystem(skip_instance_cache=True), "/root")


def test_ranged_reads_go_to_the_file_system() -> None:
    fs = CountingFileSystem(skip_instance_cache=True)
    store = FsspecStore(fs, "/data")
    store.set("c/0", VALUE)
    assert store.get("c/0", ByteRange(2, 3)) == VALUE[2:5]
    assert fs.calls == ["cat_file"]
    assert fs.cat_file("/data/c/0") == VALUE  # the key's file, below the root


def test_from_url_and_chained_urls(tmp_path: Path) -> None:
    store = FsspecStore.from_url(f"file://{tmp_path}/x")
    store.set("zarr.json", b"{}")
    assert (tmp_path / "x" / "zarr.json").read_bytes() == b"{}"
    cached = FsspecStore.from_url(
        f"simplecache::file://{tmp_path}/x", storage_options={"simplecache": {"cache_storage": str(tmp_path / "c")}}
    )
    assert cached.get("zarr.json") == b"{}"
    assert cached.get("missing") is None


class FailingFileSystem(MemoryFileSystem):  # type: ignore[misc]
    protocol = "failing"

    def __init__(self, error: Exception) -> None:
        super().__init__(skip_instance_cache=True)
        self.error = error

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        raise self.error

    def isfile(self, path: str) -> bool:
        return True

    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        raise self.error


def test_errors_name_the_url_and_key_and_are_never_a_missing_key() -> None:
    store = FsspecStore(FailingFileSystem(ConnectionResetError("reset by peer")), "/bucket/x.zarr")
    with pytest.raises(StoreError, match=r"failing://bucket/x\.zarr: c/0: reading failed: ConnectionResetError"):
        store.get("c/0")
    with pytest.raises(StoreError, match="c/0"):
        store.get_ranges("c/0", [ByteRange(0, 4)])
    with pytest.raises(StoreError, match=r"c/0: writing"):
        store.set("c/0", b"x")
    denied = FsspecStore(FailingFileSystem(PermissionError("403 Forbidden")), "/bucket/x.zarr")
    with pytest.raises(StorePermissionError, match=r"failing://bucket/x\.zarr: c/0: reading: permission denied"):
        denied.get("c/0")
    with pytest.raises(PermissionError):
        denied.get("c/0")


def test_missing_fsspec_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(ImportError, match=r"gpuzarr\[fsspec\]"):
        FsspecStore.from_url("memory://x")
