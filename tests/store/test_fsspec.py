"""FsspecStore: the conformance suite over fsspec's memory and local file systems and a file
system of the user's own, fsspec URLs, and errors that name the URL and key."""

from __future__ import annotations

import contextlib
import pickle
import threading
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
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


def _asynchronous(fs: Any) -> Any:
    """``fs`` as an asynchronous file system made with ``asynchronous=True``, as zarr-python's
    FsspecStore asks for (s3fs, gcsfs and fsspec's HTTP one are such): its sync methods raise
    "Loop is not running"; its coroutines (``_cat_file`` ...) are what works."""
    wrapper = pytest.importorskip("fsspec.implementations.asyn_wrapper")
    return wrapper.AsyncFileSystemWrapper(fs, asynchronous=True)


class TestAsynchronousFileSystemStore(TestFsspecMemoryStore):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return FsspecStore(_asynchronous(fsspec.filesystem("file")), str(tmp_path / "store"))


def test_an_array_in_an_asynchronous_file_system_is_read_written_and_pickled(tmp_path: Path) -> None:
    fs = _asynchronous(fsspec.filesystem("file"))
    with pytest.raises(RuntimeError, match="Loop is not running"):
        fs.cat_file(str(tmp_path))  # what every call of the store met before
    store = FsspecStore(fs, str(tmp_path / "a.zarr"))
    data = np.arange(12 * 10, dtype="i4").reshape(12, 10)
    array = gpuzarr.create(store, shape=data.shape, dtype=data.dtype, chunks=(5, 4))
    array[...] = data
    np.testing.assert_array_equal(gpuzarr.open_array(store)[...], data)
    copy = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(gpuzarr.open_array(copy)[3:9, 2:7], data[3:9, 2:7])
    array.resize((4, 4))  # erases the chunks outside, and their folders
    assert sorted(store.list_prefix("")) == ["c/0/0", "zarr.json"]


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


CACHES = [
    "simplecache",
    "filecache",
    # fsspec's blockcache leaves the files of its cache open (its own ResourceWarning)
    pytest.param("blockcache", marks=pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")),
]


@pytest.mark.parametrize("cache", CACHES)
def test_suffix_reads_through_fsspecs_caching_file_systems(tmp_path: Path, cache: str) -> None:
    """Their local copy opens as a plain Python file, which fsspec's ``cat_file`` cannot seek
    from the end of (it asks for ``size``): the suffix is read from the file's size instead."""
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "blob").write_bytes(bytes(range(200)))
    store = FsspecStore.from_url(
        f"{cache}::file://{tmp_path}/x", storage_options={cache: {"cache_storage": str(tmp_path / "c")}}
    )
    assert store.get("blob", ByteRange.suffix(16)) == bytes(range(184, 200))
    assert store.get("blob", ByteRange.suffix(500)) == bytes(range(200))
    assert store.get_ranges("blob", [ByteRange.suffix(4), ByteRange(10, 3)]) == [bytes(range(196, 200)), b"\n\x0b\x0c"]
    assert store.get("absent", ByteRange.suffix(4)) is None


@pytest.mark.parametrize("cache", CACHES)
def test_sharded_crops_through_fsspecs_caching_file_systems(tmp_path: Path, cache: str) -> None:
    """A partial read of a sharded array reads each shard's index as a suffix, on several
    threads at once: ``filecache::`` and ``blockcache::`` keep a table of cached files that
    such calls corrupt, so the store makes its calls into them one at a time."""
    import numpy as np

    import gpuzarr

    data = np.arange(64**3, dtype=np.uint16).reshape(64, 64, 64)
    gpuzarr.create(
        str(tmp_path / "a.zarr"), shape=data.shape, dtype=data.dtype, chunks=(16, 16, 16), shards=(32, 32, 32)
    )[...] = data
    for attempt in range(3):  # the race needs a fresh cache
        array = gpuzarr.open(
            f"{cache}::file://{tmp_path}/a.zarr",
            mode="r",
            storage_options={cache: {"cache_storage": str(tmp_path / f"c{attempt}")}},
        )
        with gpuzarr.config.set(concurrency=4):
            np.testing.assert_array_equal(array[3:40, 1:50, 60:], data[3:40, 1:50, 60:])
            np.testing.assert_array_equal(array[...], data)
    assert isinstance(array.store, FsspecStore)
    assert isinstance(array.store.__dict__["_calls"], contextlib.nullcontext) == (cache == "simplecache")


def test_a_store_over_a_caching_file_system_pickles_with_a_lock_of_its_own(tmp_path: Path) -> None:
    store = FsspecStore.from_url(
        f"filecache::file://{tmp_path}/x", storage_options={"filecache": {"cache_storage": str(tmp_path / "c")}}
    )
    store.set("k", b"v")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.get("k") == b"v"
    assert copy.__dict__["_calls"] is not store.__dict__["_calls"]


@pytest.mark.parametrize("shards", [None, (64,)], ids=["chunk", "shard"])
def test_threads_writing_parts_of_one_chunk_lose_nothing(shards: tuple[int, ...] | None) -> None:
    """Each thread writes every eighth element of one chunk (or of the inner chunks of one
    shard): read-modify-writes of one key, which waited for nothing (16-56 of 64 lost)."""
    store = FsspecStore(fsspec.filesystem("memory"), f"/threads-{uuid.uuid4().hex}")
    chunks = (8,) if shards else (64,)
    array = gpuzarr.create_array(
        store, shape=(64,), chunks=chunks, shards=shards, dtype="i4", fill_value=0, device="cpu"
    )

    def write(i: int) -> None:
        for _ in range(10):
            array[i::8] = i + 1

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_array_equal(array[...], np.tile(np.arange(1, 9, dtype="i4"), 8))


class _IgnoresRange(MemoryFileSystem):  # type: ignore[misc]
    """A file system in front of a server that answers a ranged request with the whole body
    (fsspec's HTTPFileSystem hands that back as the range's bytes)."""

    protocol = "ignores-range"

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        return super().cat_file(path)

    def cat_ranges(self, paths: Any, starts: Any, ends: Any, *args: Any, **kwargs: Any) -> Any:
        return [self.cat_file(p, s, e) for p, s, e in zip(paths, starts, ends, strict=True)]


@pytest.mark.parametrize("shards", [(128, 128), None])
def test_a_ranged_read_answered_with_the_whole_value_is_refused(shards: tuple[int, int] | None) -> None:
    """A Blosc inner chunk read through such a server decoded as the shard's first inner chunk:
    another chunk's values, and no error."""
    data = np.arange(256 * 256, dtype="u2").reshape(256, 256)
    root = f"/{uuid.uuid4().hex}.zarr"
    blosc = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2}}
    source = FsspecStore(MemoryFileSystem(), root)
    gpuzarr.create(source, data=data, chunks=(32, 32), shards=shards, compressors=[blosc])
    store = FsspecStore(_IgnoresRange(), root)
    with pytest.raises(StoreError, match="asked for 4 bytes from offset 2 and got"):
        store.get("zarr.json", ByteRange(2, 4))
    if shards is not None:
        with pytest.raises(StoreError, match="the ranged read was not honoured"):
            gpuzarr.open(store, mode="r")[40:50, 40:50]
    with pytest.raises(StoreError, match="the ranged read was not honoured"):
        store.get_ranges("zarr.json", [ByteRange(0, 3), ByteRange(5, 2)])


def test_an_fsspec_mapper_and_zarr_pythons_constructor_forms(tmp_path: Path) -> None:
    """zarr-python takes ``fsspec.get_mapper(url)`` for a store and ``FsspecStore(fs,
    read_only, path)``: gpuzarr raised TypeError for the mapper, for ``path=``, and an
    AttributeError for ``FsspecStore(fs, True)``."""
    mapper = fsspec.get_mapper(str(tmp_path / "m.zarr"))
    array = gpuzarr.create_array(mapper, shape=(4,), dtype="i4", chunks=(2,))
    array[...] = [1, 2, 3, 4]
    assert isinstance(array.store, FsspecStore)
    assert gpuzarr.open_array(str(tmp_path / "m.zarr"), mode="r")[...].tolist() == [1, 2, 3, 4]
    fs = fsspec.filesystem("file")
    read_only = FsspecStore(fs, True)
    assert read_only.read_only and read_only.root == ""
    by_path = FsspecStore(fs, path=str(tmp_path / "m.zarr"), read_only=True)
    assert gpuzarr.open_array(by_path, mode="r")[...].tolist() == [1, 2, 3, 4]
    with pytest.raises(gpuzarr.errors.InvalidArgumentError, match="root or path"):
        FsspecStore(fs, "a", path="b")


def test_a_file_system_that_fails_while_it_is_made_is_a_store_error_naming_the_url() -> None:
    """ftp:// connects when fsspec makes the file system: a server that is not there raised a
    bare ConnectionRefusedError without the URL."""
    with pytest.raises(StoreError, match=r"ftp://127.0.0.1:1/x.zarr: opening the file system failed: Connection"):
        gpuzarr.open("ftp://127.0.0.1:1/x.zarr", mode="r")
    with pytest.raises(ValueError, match="Protocol not known"):  # not a store's failure: as it was
        FsspecStore.from_url("nosuchprotocol-x://a/b")
