"""Reads of a few shards in local files, inner chunk by inner chunk
(``read._read_shards_chunkwise``): crops equal NumPy for every layout (parts, whole inner chunks,
empty inner chunks, absent shards, edge shards); which reads go this way; a shard rewritten in
place while it is read is read again and the read sees one version; a corrupt shard raises
``CorruptChunkError`` naming its key and inner chunk; and the shards are closed afterwards."""

from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING, Any

import google_crc32c
import numpy as np
import pytest
import zstandard

import gpuzarr
from gpuzarr import parallel as parallel_module
from gpuzarr.backends.cpu import read as read_module
from gpuzarr.errors import CorruptChunkError
from gpuzarr.store import CachingStore, LocalStore
from gpuzarr.store import sharding as sharding_module
from tests.file_times import wait_for_a_new_change_time

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

SHAPE, SHARDS, CHUNKS = (40, 48, 36), (16, 16, 16), (8, 8, 8)
ZSTD = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]
CROPS = [
    (slice(3, 29), slice(5, 40), slice(1, 30)),  # parts of inner chunks of 2 x 3 x 2 shards
    (slice(0, 16), slice(16, 32), slice(0, 16)),  # one whole shard
    (slice(8, 16), slice(8, 16), slice(8, 16)),  # one inner chunk, whole
    (slice(33, 40), slice(40, 48), slice(30, 36)),  # edge shards, partly outside the array
    (slice(0, 40), slice(0, 48), slice(0, 36)),  # everything
    (slice(2, 3), slice(17, 18), slice(35, 36)),  # one element
]


def version(v: int) -> np.ndarray[Any, np.dtype[np.int32]]:
    return (np.arange(np.prod(SHAPE), dtype=np.int32).reshape(SHAPE) % 997) + 1000 * v


@pytest.fixture
def chunkwise(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of shards of each read that went through ``_read_shards_chunkwise``."""
    seen: list[int] = []
    original = read_module._read_shards_chunkwise

    def recording(layout: Any, store: Any, by_shard: dict[str, Any], *args: Any) -> list[str]:
        seen.append(len(by_shard))
        return original(layout, store, by_shard, *args)

    monkeypatch.setattr(read_module, "_read_shards_chunkwise", recording)
    return seen


def make(
    path: Path, data: np.ndarray[Any, Any], fill: int = 0, codecs: list[dict[str, Any]] = ZSTD
) -> gpuzarr.Array:
    a = gpuzarr.create(
        LocalStore(path), shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="int32", codecs=codecs, fill_value=fill
    )
    a[...] = data
    return a


@pytest.mark.parametrize("crop", CROPS, ids=[f"crop{i}" for i in range(len(CROPS))])
def test_crops_equal_numpy(tmp_path: Path, chunkwise: list[int], crop: tuple[slice, ...]) -> None:
    data = version(1)
    data[16:32, 0:16, 16:32] = 7  # one shard of nothing but the fill value: not stored
    data[0:8, 0:8, 0:8] = 7  # an inner chunk of the fill value: empty in its shard's index
    a = make(tmp_path, data, fill=7)
    assert not (tmp_path / "c" / "1" / "0" / "1").exists()
    assert np.array_equal(a[crop], data[crop])
    shards = np.prod([len(range(s.start // 16, (s.stop - 1) // 16 + 1)) for s in crop])
    assert chunkwise == ([] if shards > read_module.CHUNKWISE_SHARDS else [shards])
    again = gpuzarr.open_array(str(tmp_path), mode="r")  # indexes read anew, not kept
    assert np.array_equal(again[crop], data[crop])


def test_many_shards_are_read_a_shard_per_task(
    tmp_path: Path, chunkwise: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_module, "CHUNKWISE_SHARDS", 4)
    a = make(tmp_path, version(1))
    assert np.array_equal(a[...], version(1))  # 3 x 3 x 3 shards
    assert chunkwise == []
    assert np.array_equal(a[0:20, 0:10, 0:10], version(1)[0:20, 0:10, 0:10])  # 2 shards
    assert chunkwise == [2]


def test_other_stores_fetch_shards_first(chunkwise: list[int]) -> None:
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="int32", codecs=ZSTD)
    a[...] = version(1)
    assert np.array_equal(a[3:29, 5:40, 1:30], version(1)[3:29, 5:40, 1:30])
    assert chunkwise == []


def shard_bytes(tmp_path: Path, data: np.ndarray[Any, Any], codecs: list[dict[str, Any]]) -> dict[str, bytes]:
    """Every shard file of an array of ``data`` with this test's layout, by relative path."""
    make(tmp_path, data, codecs=codecs)
    return {
        str(path.relative_to(tmp_path)): path.read_bytes() for path in (tmp_path / "c").rglob("*") if path.is_file()
    }


def rewrite_in_place(path: Path, content: bytes, *, keep_mtime: bool = False) -> None:
    """Overwrite the file's bytes without replacing the file (as a writer that does not rename
    does), with a modification time of its own, or (``keep_mtime``) the old one put back."""
    stat = os.stat(path)
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(content)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + (0 if keep_mtime else 1_000_000_000)))


def rewrite_on_second_read(
    monkeypatch: pytest.MonkeyPatch, key: str, rewrite: Callable[[], None], chunks_per_run: int = 1
) -> list[list[int]]:
    """Call ``rewrite`` when the chunkwise read of the shard ``key`` reads its second run of
    inner chunks (``chunks_per_run`` each): one run was read from the old version, and the
    index is the old one's. The runs of ``key`` read (their positions), as they are read."""
    monkeypatch.setattr(parallel_module, "RUN_MAX_BYTES", chunks_per_run * int(np.prod(CHUNKS)) * 4)
    monkeypatch.setattr(parallel_module, "RUN_TASKS_PER_WORKER", 1)
    original = read_module.read_inner_chunk_run
    reads_of_key: list[list[int]] = []

    def rewriting(shard: Any, shard_key: str, index: Any, positions: list[int]) -> Any:
        if shard_key == key:
            reads_of_key.append(list(positions))
            if len(reads_of_key) == 2:
                rewrite()
        return original(shard, shard_key, index, positions)

    monkeypatch.setattr(read_module, "read_inner_chunk_run", rewriting)
    return reads_of_key


def test_a_shard_rewritten_in_place_that_puts_its_modification_time_back_is_read_again(
    tmp_path: Path, chunkwise: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same size, same modification time: only the change time tells the versions apart."""
    new = shard_bytes(tmp_path / "new", version(2), RAW)
    a = make(tmp_path / "old", version(1), codecs=RAW)
    key = "c/0/1/0"
    path = tmp_path / "old" / key
    assert len(new[key]) == path.stat().st_size
    wait_for_a_new_change_time(path)

    def rewrite() -> None:
        before = path.stat()
        rewrite_in_place(path, new[key], keep_mtime=True)
        after = path.stat()
        assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)

    reads_of_key = rewrite_on_second_read(monkeypatch, key, rewrite)
    crop = (slice(3, 29), slice(5, 40), slice(1, 30))
    got = a[crop]
    assert len(reads_of_key) >= 2 and chunkwise
    expected = version(1)[crop]
    expected[0:13, 11:27, 0:15] = version(2)[crop][0:13, 11:27, 0:15]
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("route", ["chunkwise", "fetched", "through a CachingStore"])
def test_an_empty_inner_chunk_entry_past_the_shard_end_is_refused(
    tmp_path: Path, chunkwise: list[int], monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """An entry of 0 bytes at an offset past the file's end reads as nothing: the bounds check
    against the open file's size still names it, inner chunk by inner chunk, fetched with the
    shard's other wanted chunks, or through a cache (whose snapshot passes the size on)."""
    if route == "fetched":
        monkeypatch.setattr(read_module, "CHUNKWISE_SHARDS", 0)
    a = make(tmp_path, version(1))
    if route == "through a CachingStore":
        opened = gpuzarr.open(CachingStore(LocalStore(tmp_path), 1 << 20))
        assert isinstance(opened, gpuzarr.Array)
        a = opened
    key = "c/0/0/0"
    path = tmp_path / key
    content = bytearray(path.read_bytes())
    entry = len(content) - (8 * 16 + 4)  # the first of the index's 16-byte entries
    content[entry : entry + 16] = (len(content) + 4096).to_bytes(8, "little") + (0).to_bytes(8, "little")
    crc = google_crc32c.value(bytes(content[entry:-4]))
    content[-4:] = crc.to_bytes(4, "little")
    path.write_bytes(bytes(content))
    with pytest.raises(CorruptChunkError, match=r"inner chunk 0 .*nbytes 0\) lies past the shard end") as caught:
        a[0:8, 0:8, 0:8]
    assert caught.value.key == key
    if route != "through a CachingStore":
        assert bool(chunkwise) == (route == "chunkwise")


@pytest.mark.parametrize("chunks_per_run", [1, 4], ids=["inner chunks one by one", "in runs"])
@pytest.mark.parametrize("codecs", [ZSTD, RAW], ids=["zstd", "uncompressed"])
@pytest.mark.parametrize("how", ["new version", "cut short"])
def test_a_shard_rewritten_in_place_while_read_is_read_again(
    tmp_path: Path,
    chunkwise: list[int],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    codecs: list[dict[str, Any]],
    chunks_per_run: int,
) -> None:
    new = shard_bytes(tmp_path / "new", version(2), codecs)
    a = make(tmp_path / "old", version(1), codecs=codecs)
    key = "c/0/1/0"
    content = new[key] if how == "new version" else new[key][: len(new[key]) // 3] + new[key][-(16 * 8 + 4) :]
    # The bytes read from the second run on are the new version's. Uncompressed, they decode
    # without an error, into a mix of both versions.
    rewrite = lambda: rewrite_in_place(tmp_path / "old" / key, content)  # noqa: E731
    reads_of_key = rewrite_on_second_read(monkeypatch, key, rewrite, chunks_per_run)
    crop = (slice(3, 29), slice(5, 40), slice(1, 30))
    if how == "new version":
        got = a[crop]
        assert len(reads_of_key) >= 2 and chunkwise
        assert max(len(run) for run in reads_of_key) == chunks_per_run
        # That shard's region is the new version, read again; the others the old one.
        expected = version(1)[crop]
        expected[0:13, 11:27, 0:15] = version(2)[crop][0:13, 11:27, 0:15]
        assert np.array_equal(got, expected)
    else:
        # The new version lost its inner chunks: read again, it is corrupt, and says so.
        with pytest.raises(CorruptChunkError, match=r"outside the shard|past the shard end") as caught:
            a[crop]
        assert caught.value.key == key


def test_a_corrupt_shard_names_its_key_and_inner_chunk(tmp_path: Path, chunkwise: list[int]) -> None:
    a = make(tmp_path, version(1))
    key = "c/1/1/1"
    path = tmp_path / key
    content = path.read_bytes()
    index = content[-(8 * 16 + 4) :]
    path.write_bytes(content[: len(content) // 2] + index)  # every inner chunk past the middle is gone
    with pytest.raises(CorruptChunkError) as caught:
        a[16:32, 16:32, 16:32]
    assert caught.value.key == key
    assert "inner chunk" in str(caught.value)
    assert chunkwise


def test_a_corrupt_inner_chunk_names_its_key_and_position(tmp_path: Path, chunkwise: list[int]) -> None:
    a = make(tmp_path, version(1))
    key = "c/0/0/0"
    path = tmp_path / key
    content = bytearray(path.read_bytes())
    content[0:4] = b"\0\0\0\0"  # the first inner chunk's zstd magic number
    path.write_bytes(bytes(content))
    with pytest.raises(CorruptChunkError) as caught:
        a[0:8, 0:8, 0:8]
    assert caught.value.key == key and "inner chunk 0" in str(caught.value)


def test_the_shards_are_closed_after_each_read(tmp_path: Path, chunkwise: list[int]) -> None:
    a = make(tmp_path, version(1))
    before = len(os.listdir("/proc/self/fd"))
    for crop in CROPS:
        a[crop]
    assert len(os.listdir("/proc/self/fd")) <= before
    assert chunkwise


def test_a_read_inner_chunk_past_the_end_is_corrupt(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.set("shard", b"0123456789")
    index = sharding_module.ShardIndex(np.array([4, 8], dtype=np.uint64), np.array([4, 4], dtype=np.uint64))
    with store.snapshot("shard") as shard:
        assert bytes(sharding_module.read_inner_chunk(shard, "shard", index, 0)) == b"4567"  # type: ignore[arg-type]
        with pytest.raises(CorruptChunkError, match=r"inner chunk 1 .* past the shard end"):
            sharding_module.read_inner_chunk(shard, "shard", index, 1)


def test_too_few_file_descriptors_for_every_shard_reads_a_shard_at_a_time(
    tmp_path: Path, chunkwise: list[int]
) -> None:
    a = make(tmp_path, version(1))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    crop = CROPS[0]  # 2 x 3 x 2 shards, more than the 8 descriptors left
    with gpuzarr.config.set(concurrency=2):
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 8, hard))
        try:
            got = a[crop]
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert chunkwise == [12]
    assert np.array_equal(got, version(1)[crop])
    assert len(os.listdir("/proc/self/fd")) <= in_use


def rebuilt_shard(content: bytes, change: Callable[[int, bytes], bytes]) -> bytes:
    """The shard ``content`` (inner chunks then an index with its crc32c) with every stored inner
    chunk ``i`` replaced by ``change(i, its bytes)``, and an index of the new places."""
    n = int(np.prod(SHARDS)) // int(np.prod(CHUNKS))
    table = np.frombuffer(content[-(16 * n + 4) : -4], dtype="<u8").reshape(n, 2)
    parts, entries, at = [], [], 0
    for i, (offset, nbytes) in enumerate(table.tolist()):
        if offset == 2**64 - 1:
            entries.append((offset, nbytes))
            continue
        part = change(i, content[offset : offset + nbytes])
        parts.append(part)
        entries.append((at, len(part)))
        at += len(part)
    index = np.array(entries, dtype="<u8").tobytes()
    return b"".join(parts) + index + google_crc32c.value(index).to_bytes(4, "little")


@pytest.mark.parametrize("damage", ["bytes after its frame", "a second frame"])
def test_an_inner_chunk_with_more_than_its_frame_is_corrupt_in_a_run(
    tmp_path: Path, chunkwise: list[int], monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """Small inner chunks are decoded a run at a time, in one call that stops at the end of each
    chunk's first frame: a chunk holding more, which a decode of it alone refuses, is refused
    there too (it read as its first frame)."""
    monkeypatch.setattr(parallel_module, "RUN_TASKS_PER_WORKER", 1)  # runs of 4 of the 8
    a = make(tmp_path, version(1))
    key = "c/0/0/0"
    path = tmp_path / key
    extra = b"\x00\x01\x02" if damage == "bytes after its frame" else zstandard.ZstdCompressor().compress(b"more")
    path.write_bytes(rebuilt_shard(path.read_bytes(), lambda i, part: part + extra if i == 3 else part))
    with pytest.raises(CorruptChunkError, match="inner chunk 3") as caught:
        a[0:16, 0:16, 0:16]
    assert caught.value.key == key and chunkwise
    assert np.array_equal(a[0:8, 0:8, 0:8], version(1)[0:8, 0:8, 0:8])  # its neighbours read


def test_small_inner_chunks_are_written_a_run_at_a_time_into_the_same_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small inner chunks are encoded a run a task, in one zstd call a run: the shards hold the
    bytes that encoding them one by one writes, inner chunks of nothing but the fill value
    stay unstored, and partial writes keep the rest of their inner chunks."""
    from gpuzarr.codecs import zstd as zstd_module
    from gpuzarr.codecs.pipeline import CodecPipeline

    data = version(1)
    data[0:8, 0:8, 0:8] = 7  # an inner chunk of the fill value
    calls: list[int] = []
    encode_many = CodecPipeline.encode_many

    def counting(self: CodecPipeline, chunks: Any) -> Any:
        calls.append(len(chunks))
        return encode_many(self, chunks)

    monkeypatch.setattr(CodecPipeline, "encode_many", counting)
    with gpuzarr.config.set(concurrency=2):
        together = make(tmp_path / "together", data, fill=7)
        together[3:29, 5:40, 1:30] = data[3:29, 5:40, 1:30] + 1
    assert calls and max(calls) > 1
    monkeypatch.setattr(zstd_module, "MANY_FRAMES_NBYTES", 0)  # one by one
    alone = make(tmp_path / "alone", data, fill=7)
    alone[3:29, 5:40, 1:30] = data[3:29, 5:40, 1:30] + 1
    expected = data.copy()
    expected[3:29, 5:40, 1:30] += 1
    np.testing.assert_array_equal(together[...], expected)
    files = sorted(p.relative_to(tmp_path / "alone") for p in (tmp_path / "alone").rglob("c/*/*/*"))
    assert files == sorted(p.relative_to(tmp_path / "together") for p in (tmp_path / "together").rglob("c/*/*/*"))
    for f in files:
        assert (tmp_path / "together" / f).read_bytes() == (tmp_path / "alone" / f).read_bytes(), f


@pytest.mark.parametrize("spacing", [1, 1000, 60_000], ids=["adjacent", "close", "a gap apart"])
def test_a_run_of_inner_chunks_reads_gaps_no_larger_than_what_it_wants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spacing: int
) -> None:
    """Inner chunks of a local shard read together coalesce the gaps between them only while
    the gaps read add up to no more than the wanted bytes and one gap: an index spreading tiny
    inner chunks a gap apart read 1 GB for 16 KB. Adjacent ones are still read as one range."""
    n = 64
    content = bytearray(n * spacing)
    offsets = [k * spacing for k in range(n)]
    for k, at in enumerate(offsets):
        content[at] = k
    store = LocalStore(tmp_path)
    store.set("shard", bytes(content))
    index = sharding_module.ShardIndex(np.array(offsets, dtype=np.uint64), np.ones(n, dtype=np.uint64))
    requested: list[int] = []
    with store.snapshot("shard") as shard:
        get_ranges = shard.get_ranges

        def recording(key: str, ranges: Any) -> Any:
            requested.extend(r.length for r in ranges)
            return get_ranges(key, ranges)

        monkeypatch.setattr(shard, "get_ranges", recording)
        got = sharding_module.read_inner_chunk_run(shard, "shard", index, list(range(n)))  # type: ignore[arg-type]
    assert [bytes(g) for g in got] == [bytes([k]) for k in range(n)]  # type: ignore[arg-type]
    assert sum(requested) <= 2 * n + sharding_module.COALESCE_GAP_BYTES
    if spacing == 1:
        assert len(requested) == 1
