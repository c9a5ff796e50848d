"""ZipStore: the conformance suite, archives other tools read, and hostile archives."""

from __future__ import annotations

import errno
import threading
import zipfile
import zlib
from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr.errors import (
    CorruptChunkError,
    InvalidKeyError,
    NodeNotFoundError,
    ReadOnlyError,
    StoreError,
    StorePermissionError,
)
from gpuzarr.store.base import ByteRange
from gpuzarr.store.zip import ZipStore
from tests.permissions import without_permission

from .conformance import VALUE, StoreConformance, as_bytes

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.store.base import Store


class TestZipStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return ZipStore(tmp_path / "store.zip", mode="w")

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, ZipStore)
        store.close()
        return ZipStore(store.path, mode="r")


class TestDeflatedZipStore(TestZipStore):
    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        return ZipStore(tmp_path / "store.zip", mode="w", compression=zipfile.ZIP_DEFLATED)


class TestAppendedZipStore(TestZipStore):
    """Mode "a" over an archive that zipfile wrote: reads it, and writes only when asked."""

    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Store:
        with zipfile.ZipFile(tmp_path / "store.zip", "w"):
            pass
        return ZipStore(tmp_path / "store.zip", mode="a")


def _names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def test_overwrite_and_erase_leave_each_key_once(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with ZipStore(path, mode="w") as store:
        store.set("zarr.json", b"first")
        store.set("c/0", b"chunk")
        store.set("zarr.json", b"second")
        store.set("gone", b"x")
        store.erase("gone")
        assert store.get("zarr.json") == b"second"
    # The archive on disk is rewritten without the superseded and erased members.
    assert sorted(_names(path)) == ["c/0", "zarr.json"]
    with zipfile.ZipFile(path) as zf:
        assert zf.read("zarr.json") == b"second" and zf.testzip() is None


def test_an_archive_with_duplicate_names_reads_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "dup.zip"
    with zipfile.ZipFile(path, "w") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("k", b"old")
        zf.writestr("k", b"new")
    store = ZipStore(path)
    assert store.get("k") == b"new"
    assert list(store.list_prefix("")) == ["k"]


def test_mode_a_writes_nothing_until_asked(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    store = ZipStore(path, mode="a")
    assert store.get("k") is None and list(store.list_prefix("")) == []
    store.close()
    assert not path.exists()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("k", b"v")
    before = path.read_bytes()
    with ZipStore(path, mode="a") as store:
        assert store.get("k") == b"v"
    assert path.read_bytes() == before
    with ZipStore(path, mode="a") as store:
        store.set("k2", b"v2")
    assert sorted(_names(path)) == ["k", "k2"]


def test_mode_a_refuses_a_file_that_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "data.zip"
    path.write_bytes(b"not a zip archive at all")
    for mode in ("a", "r"):
        with pytest.raises(StoreError, match="not a zip archive"):
            ZipStore(path, mode=mode)  # type: ignore[arg-type]
    assert path.read_bytes() == b"not a zip archive at all"


def test_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(NodeNotFoundError, match="no zip archive"):
        ZipStore(tmp_path / "missing.zip")


def test_closed_store_raises(tmp_path: Path) -> None:
    store = ZipStore(tmp_path / "a.zip", mode="w")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("k")
    with pytest.raises(StoreError, match="closed"):
        store.set("k", b"v")


def test_read_only_refuses_writes(tmp_path: Path) -> None:
    with ZipStore(tmp_path / "a.zip", mode="w") as store:
        store.set("k", b"v")
    store = ZipStore(tmp_path / "a.zip")
    with pytest.raises(ReadOnlyError):
        store.set("k", b"v")


def test_an_unclosed_writer_still_writes_the_central_directory(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    store = ZipStore(path, mode="w")
    store.set("k", b"v")
    del store  # garbage collected: the finalizer closes the archive
    assert _names(path) == ["k"]


def test_stored_ranges_read_only_the_range(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    value = bytes(range(256)) * 4096
    with ZipStore(path, mode="w") as store:
        store.set("big", value)
    store = ZipStore(path)
    assert store.get("big", ByteRange(1000, 10)) == value[1000:1010]
    got = store.get_into("big", bytearray, 5000, 100)
    assert got is not None and bytes(got[0]) == value[5000:5100] and got[1] == len(value)


def test_threads_read_while_one_writes(tmp_path: Path) -> None:
    store = ZipStore(tmp_path / "a.zip", mode="w", compression=zipfile.ZIP_DEFLATED)
    for i in range(20):
        store.set(f"k{i}", bytes([i]) * 10_000)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(50):
                for i in range(20):
                    assert store.get(f"k{i}", ByteRange(100, 10)) == bytes([i]) * 10
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for i in range(20, 60):
        store.set(f"k{i}", b"w" * 1000)
    for thread in threads:
        thread.join()
    assert errors == []
    store.close()
    assert len(_names(tmp_path / "a.zip")) == 60


# -- hostile archives -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "a\\b", "a//b"])
def test_member_names_that_escape_are_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("zarr.json", b"{}")
        zf.writestr(zipfile.ZipInfo(name), b"x")
    with pytest.raises(InvalidKeyError, match="not a valid key"):
        ZipStore(path)


def test_directory_entries_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "dirs.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("a/"), b"")
        zf.writestr("a/zarr.json", b"{}")
    assert list(ZipStore(path).list_prefix("")) == ["a/zarr.json"]


def _patch_sizes(path: Path, name: bytes, compress_size: int | None, file_size: int) -> None:
    """Rewrite the central directory entry of member ``name`` with other sizes."""
    data = bytearray(path.read_bytes())
    at = data.index(b"PK\x01\x02")
    while data[at + 46 : at + 46 + len(name)] != name:
        at = data.index(b"PK\x01\x02", at + 1)
    if compress_size is not None:
        data[at + 20 : at + 24] = compress_size.to_bytes(4, "little")
    data[at + 24 : at + 28] = file_size.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def test_a_huge_declared_size_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "huge.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("c/0", b"\0" * 1000)
    _patch_sizes(path, b"c/0", None, 0xFFFF0000)
    with pytest.raises(CorruptChunkError, match=r"c/0.*largest ratio"):
        ZipStore(path).get("c/0")


def test_a_stored_member_past_the_archive_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "past.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("c/0", b"x" * 100)
    _patch_sizes(path, b"c/0", 0x7FFF0000, 0x7FFF0000)
    with pytest.raises(CorruptChunkError, match=r"c/0.*past the archive's end"):
        ZipStore(path).get("c/0", ByteRange(0, 10))


def test_a_zip_bomb_stops_at_the_declared_size(tmp_path: Path) -> None:
    # 64 MiB of zeros in one deflated member that declares 1 MiB.
    path = tmp_path / "bomb.zip"
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    stream = b"".join(compressor.compress(b"\0" * (1 << 20)) for _ in range(64)) + compressor.flush()
    info = zipfile.ZipInfo("c/0")
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(info, b"\0" * 1000)
    data = bytearray(path.read_bytes())
    # Replace the member's data by the bomb, fixing the offsets of the central directory.
    local_end = 30 + len(b"c/0")
    old_size = int.from_bytes(data[18:22], "little")
    data[local_end : local_end + old_size] = stream
    data[18:22] = len(stream).to_bytes(4, "little")
    delta = len(stream) - old_size
    central = data.index(b"PK\x01\x02", local_end + len(stream))
    data[central + 20 : central + 24] = len(stream).to_bytes(4, "little")
    data[central + 24 : central + 28] = (1 << 20).to_bytes(4, "little")
    end = data.index(b"PK\x05\x06", central)
    offset = int.from_bytes(data[end + 16 : end + 20], "little") + delta
    data[end + 16 : end + 20] = offset.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    store = ZipStore(path)
    with pytest.raises(CorruptChunkError, match=r"c/0.*more than its declared 1048576 bytes"):
        store.get("c/0")
    # A range below the declared size reads without inflating the rest.
    assert as_bytes(store.get("c/0", ByteRange(0, 16))) == b"\0" * 16


def test_a_corrupt_member_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "crc.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("c/0", VALUE)
    data = bytearray(path.read_bytes())
    at = data.index(VALUE)
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptChunkError, match=r"c/0.*CRC"):
        ZipStore(path).get("c/0")


@pytest.mark.parametrize("mode", ["r", "a", "w"])
def test_an_archive_the_file_system_refuses_raises_a_permission_error_naming_it(tmp_path: Path, mode: Any) -> None:
    """Not "no zip archive there" or "not a zip archive" (``zipfile.is_zipfile`` says False of
    a file it cannot open): the file system's refusal, as the store's error."""
    path = tmp_path / "store.zip"
    with ZipStore(path, mode="w") as store:
        store.set("zarr.json", b"{}")
    with without_permission(path), pytest.raises(StorePermissionError) as caught:
        ZipStore(path, mode=mode).set("k", b"v")
    assert caught.value.url == str(path) and caught.value.errno == errno.EACCES
    assert ZipStore(path, mode="r").get("zarr.json") == b"{}"


def test_zarr_pythons_keywords(tmp_path: Path) -> None:
    """zarr-python's ``ZipStore(path, read_only=True)`` (its quick start), ``mode="x"`` and
    ``allowZip64`` raised TypeError or InvalidArgumentError."""
    import gpuzarr
    from gpuzarr.errors import ContainsNodeError, InvalidArgumentError

    path = tmp_path / "a.zip"
    with ZipStore(path, mode="x") as store:
        gpuzarr.create_array(store, shape=(3,), dtype="i4")[...] = [1, 2, 3]
    with pytest.raises(ContainsNodeError, match="mode 'x' makes a new archive"):
        ZipStore(path, mode="x")
    with ZipStore(path, read_only=True) as store:
        assert store.read_only and gpuzarr.open_array(store, mode="r")[...].tolist() == [1, 2, 3]
    with ZipStore(path, read_only=False, allowZip64=True) as store:  # mode "r" and writable: appends
        assert not store.read_only and store.mode == "a"
    with pytest.raises(InvalidArgumentError, match="allowZip64=False"):
        ZipStore(path, allowZip64=False)
    with pytest.raises(InvalidArgumentError, match="read_only=True opens with mode 'r'"):
        ZipStore(path, mode="a", read_only=True)
