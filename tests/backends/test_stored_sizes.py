"""A stored size is untrusted bytes too: a chunk file, zip member or shard larger than its
codecs ever write is a CorruptChunkError naming the key, raised before memory is taken for it."""

from __future__ import annotations

import json
import os
import tracemalloc
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError
from gpuzarr.store.sharding import ShardTooLargeToReadWhole, get_whole_shard
from gpuzarr.store.zip import ZipStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

HUGE = 1 << 30  # a sparse file: no disk, but a read of it would take a GiB


def _document(codecs: list[dict[str, Any]], chunk_shape: list[int] | None = None) -> str:
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape or [2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs,
    })  # fmt: skip


def _peak_mib(action: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        action()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak / 2**20


def _refused(action: Callable[[], object], match: str) -> None:
    """``action`` raises CorruptChunkError matching ``match`` having taken little memory."""

    def expect() -> None:
        with pytest.raises(CorruptChunkError, match=match):
            action()

    assert _peak_mib(expect) < 16


BYTES = [{"name": "bytes"}]
ZSTD = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}]


@pytest.mark.parametrize(
    ("codecs", "message"),
    [(BYTES, r"c/0: uncompressed chunk has 1073741824 bytes, expected 2"),
     (ZSTD, r"c/0: stored chunk of 1073741824 bytes is larger than its codecs ever write \(65538\)")],
    ids=["bytes", "zstd"],
)  # fmt: skip
def test_a_chunk_file_larger_than_its_codecs_write(tmp_path: Path, codecs: list[dict[str, Any]], message: str) -> None:
    (tmp_path / "zarr.json").write_text(_document(codecs))
    a = gpuzarr.open_array(str(tmp_path), mode="r+")
    a[...] = [1, 2, 3, 4]
    os.truncate(tmp_path / "c" / "0", HUGE)
    _refused(lambda: a[...], message)
    _refused(lambda: a[0:1], message)
    _refused(lambda: a.read_batch([slice(0, 1), slice(1, 2)]), message)
    if codecs is ZSTD:  # a partial write reads the old chunk first
        _refused(lambda: a.__setitem__(0, 9), message)
    np.testing.assert_array_equal(a[2:], [3, 4])


def test_a_zip_member_larger_than_its_codecs_write_is_not_inflated(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zarr.json", _document(ZSTD))
        archive.writestr("c/0", bytes(64 << 20))  # 64 MiB of zeros, deflated to about 64 KiB
    a = gpuzarr.open_array(ZipStore(path, mode="r"), mode="r")
    _refused(lambda: a[...], r"c/0: stored chunk of 67108864 bytes is larger than its codecs ever write")
    a.store.close()


def test_a_shard_larger_than_its_codecs_write_is_read_by_ranges(tmp_path: Path, emulated_gpu: Any) -> None:
    """Bytes no index entry points at (dead space a writer left, or a forged size) make a shard
    larger than its index and inner chunks at their largest: it is never read whole (nor held),
    but its index still finds its chunks, which are read by ranges, each bounded by the index
    checks; a partial write rewrites it without the dead space. The GPU path agrees."""
    sharded = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1], "codecs": ZSTD}}]
    (tmp_path / "zarr.json").write_text(_document(sharded, chunk_shape=[4]))
    a = gpuzarr.open_array(str(tmp_path), mode="r+", device="cpu")
    a[...] = [1, 2, 3, 4]
    index = (tmp_path / "c" / "0").read_bytes()[-(4 * 16 + 4) :]  # four (offset, nbytes), crc32c
    with open(tmp_path / "c" / "0", "r+b") as f:  # a GiB of nothing between chunks and index
        f.truncate(HUGE)
        f.seek(HUGE - len(index))
        f.write(index)
    layout = a._layout.sharding_at((0,)).layout
    assert layout.max_nbytes is not None and layout.max_nbytes < 2**20
    with pytest.raises(ShardTooLargeToReadWhole):
        get_whole_shard(a.store, "c/0", layout)
    assert _peak_mib(lambda: np.testing.assert_array_equal(a[...], [1, 2, 3, 4])) < 16
    gpu = gpuzarr.open_array(str(tmp_path), mode="r", device="gpu")
    assert _peak_mib(lambda: np.testing.assert_array_equal(gpu[...], [1, 2, 3, 4])) < 16
    assert _peak_mib(lambda: a.__setitem__(slice(0, 2), [5, 6])) < 16
    np.testing.assert_array_equal(a[...], [5, 6, 3, 4])
    assert (tmp_path / "c" / "0").stat().st_size < 1024  # rewritten whole, without the dead space


@pytest.mark.parametrize("codecs", [BYTES, ZSTD], ids=["bytes", "zstd"])
@pytest.mark.parametrize("reads_files", [True, False], ids=["device-reads-files", "host-reads"])
def test_the_gpu_path_refuses_them_too(tmp_path: Path, codecs: list[dict[str, Any]], reads_files: bool,
                                       emulated_gpu: Any) -> None:  # fmt: skip
    """The device would stage a chunk file whole (kvikio) or the host would read it whole: an
    oversized one is refused before either, naming the key."""
    emulated_gpu.reads_files = reads_files
    (tmp_path / "zarr.json").write_text(_document(codecs))
    gpuzarr.open_array(str(tmp_path), mode="r+", device="cpu")[...] = [1, 2, 3, 4]
    os.truncate(tmp_path / "c" / "0", HUGE)
    a = gpuzarr.open_array(str(tmp_path), mode="r", device="gpu")
    _refused(lambda: a[...], r"c/0: (stored|uncompressed) chunk (of|has) 1073741824 bytes")


def _dead_space_in_shard(shard: bytes, index_nbytes: int, dead: int) -> bytes:
    """The same shard with ``dead`` bytes no entry points at, between its chunks and its index
    (index at the end)."""
    return shard[:-index_nbytes] + bytes(dead) + shard[-index_nbytes:]


@pytest.mark.filterwarnings("ignore:Combining a `sharding_indexed` codec")  # zarr-python's, on opening
@pytest.mark.parametrize("wrapped", [False, True], ids=["nested", "sharding+crc32c"])
def test_shards_with_dead_space_inside_other_codecs_are_read(tmp_path: Path, wrapped: bool) -> None:
    """Dead space is valid in every shard: where a shard is an inner chunk of another shard, or
    wrapped by another codec, no stored-size bound may refuse it."""
    inner_shard = {"name": "sharding_indexed", "configuration": {"chunk_shape": [1], "codecs": BYTES}}
    if wrapped:
        codecs: list[dict[str, Any]] = [inner_shard, {"name": "crc32c"}]
        chunk_shape = [2]
    else:
        codecs = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [inner_shard]}}]
        chunk_shape = [4]
    (tmp_path / "zarr.json").write_text(_document(codecs, chunk_shape=chunk_shape))
    a = gpuzarr.open_array(str(tmp_path), mode="r+", device="cpu")
    a[...] = [1, 2, 3, 4]
    # Rewrite the stored value with dead space in it, through the same codecs (zarr-python and
    # gpuzarr 700450e read such data).
    layout = a._layout
    if wrapped:
        import google_crc32c

        path = tmp_path / "c" / "0"
        stored = path.read_bytes()[:-4]  # the shard, its crc32c dropped
        index_nbytes = 2 * 16 + 4
        shard = _dead_space_in_shard(stored, index_nbytes, 1000)
        path.write_bytes(shard + google_crc32c.value(shard).to_bytes(4, "little"))
    else:
        outer = layout.sharding_at((0,))
        parts = outer.layout.split((tmp_path / "c" / "0").read_bytes(), "c/0")
        inner_layout = outer.inner.codecs[0].layout  # type: ignore[union-attr]
        parts[0] = _dead_space_in_shard(bytes(parts[0]), inner_layout.index_nbytes, 10)
        from gpuzarr.store.sharding import encode_shard

        (tmp_path / "c" / "0").write_bytes(encode_shard(parts, outer.layout))
    np.testing.assert_array_equal(gpuzarr.open_array(str(tmp_path), mode="r", device="cpu")[...], [1, 2, 3, 4])
    zarr = pytest.importorskip("zarr")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path), mode="r")[...], [1, 2, 3, 4])


def test_a_store_that_hands_out_its_own_memory_is_held_to_the_same_bound(tmp_path: Path) -> None:
    """A MemoryStore's get_into answers with its own bytes and asks for no buffer: an oversized
    chunk there is refused all the same, as from files (the readers must agree)."""
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(store, shape=(4,), chunks=(2,), dtype="i1", codecs=ZSTD)
    a[...] = [1, 2, 3, 4]
    store.set("c/0", bytes(1 << 20))
    with pytest.raises(CorruptChunkError, match=r"c/0: stored chunk of 1048576 bytes is larger than"):
        a[...]


def test_an_index_entry_past_the_largest_file_offset_is_corrupt_on_every_store(tmp_path: Path) -> None:
    """Read with the shard's size unknown (a suffix read of its index), an entry ending past
    2**63 - 1 is refused as corrupt, not handed to a store that cannot seek there."""
    from gpuzarr.store.sharding import ShardIndex

    table = np.array([[2**63 + 5, 4]], dtype=np.uint64)
    with pytest.raises(CorruptChunkError, match=r"ends past 2\*\*63 - 1"):
        ShardIndex.from_array(table, None, "c/0")
