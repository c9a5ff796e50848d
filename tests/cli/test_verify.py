"""``gpuzarr verify``: every corrupt key listed (truncated, flipped under crc32c, garbage, bad
shard indexes, unreadable metadata), missing chunks counted, and the exit status."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr.store.sharding import ShardIndex

from .conftest import run_module

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.servers import HttpServer

    Cli = Callable[..., tuple[int, str, str]]

VALUES = np.arange(1, 1601, dtype=np.int32).reshape(40, 40)  # no element equals the fill value


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A hierarchy with one of every kind of damage (see EXPECTED)."""
    root = tmp_path / "damaged.zarr"
    g = gpuzarr.open_group(root, mode="w")
    for name, options in (
        ("plain", {"compressors": [{"name": "zstd", "configuration": {"level": 1}}]}),
        ("checked", {"compressors": [{"name": "crc32c"}]}),
        ("sharded", {"shards": (20, 20), "compressors": [{"name": "crc32c"}]}),
    ):
        g.create_array(name, shape=(40, 40), dtype="int32", chunks=(10, 10), **options)[...] = VALUES
    good = g.create_group("more").create_array("fine", shape=(5,), dtype="uint8", chunks=(2,))
    good[...] = 1
    g.create_group("broken")
    # plain: a truncated zstd frame, and garbage
    chunk = root / "plain" / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-7])
    (root / "plain" / "c" / "0" / "1").write_bytes(b"\x00garbage, not a zstd frame" * 3)
    # checked: a flipped byte under crc32c, and a missing chunk (fine: it reads as the fill value)
    _flip(root / "checked" / "c" / "1" / "1", 17)
    (root / "checked" / "c" / "2" / "2").unlink()
    # sharded: inner chunk 1 flipped (inner chunks are 404 bytes, in C order, index at the end)
    _flip(root / "sharded" / "c" / "0" / "0", 404 + 9)
    # sharded: a flipped index byte (the index has its own crc32c)
    _flip(root / "sharded" / "c" / "1" / "1", -3)
    # sharded: a well-formed index whose entry 2 points past the end of the shard
    shard = root / "sharded" / "c" / "0" / "1"
    layout = gpuzarr.open_array(root / "sharded").layout.sharding_at((0, 1)).layout
    data = shard.read_bytes()
    index = layout.index_from_shard(data, "k")
    index.offsets[2] = len(data) + 100
    table = ShardIndex(index.offsets, index.nbytes).table(layout.chunks_per_shard)
    shard.write_bytes(data[: -layout.index_nbytes] + layout.encode_index(table))
    # broken: its metadata document is not JSON
    (root / "broken" / "zarr.json").write_bytes(b"{not json")
    return root


EXPECTED = [
    ("checked/c/1/1", "crc32c checksum mismatch"),
    ("plain/c/0/0", "cannot decode chunk"),
    ("plain/c/0/1", "cannot decode chunk"),
    ("sharded/c/0/0", "inner chunk 1: cannot decode chunk: crc32c checksum mismatch"),
    ("sharded/c/0/1", "inner chunk 2 (offset"),
    ("sharded/c/1/1", "shard index: cannot decode chunk: crc32c checksum mismatch"),
]


def test_a_sound_hierarchy_verifies(hierarchy: Path) -> None:
    done = run_module("verify", hierarchy)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "/labels/mask: 9 chunks, 6 stored, 3 missing (read as the fill value), 0 corrupt" in lines
    assert "/raw: 60 chunks, 60 stored, 0 missing (read as the fill value), 0 corrupt" in lines
    assert lines[-1].startswith("verify: OK; 2 array(s), 66 chunk(s) checked on cpu")


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_every_corrupt_key_is_listed(damaged: Path, cli: Cli, jobs: str) -> None:
    status, out, _ = cli("verify", damaged, "--jobs", jobs)
    assert status == 1
    corrupt = [line for line in out.splitlines() if line.startswith("CORRUPT")]
    assert corrupt[0].startswith("CORRUPT metadata of /broken: broken/zarr.json: ")
    listed = corrupt[1:]
    assert len(listed) == len(EXPECTED)
    for line, (key, reason) in zip(listed, EXPECTED, strict=True):
        assert line.startswith(f"CORRUPT {key}: ") and reason in line, line
    assert "/checked: 16 chunks, 15 stored, 1 missing (read as the fill value), 1 corrupt" in out
    assert "/more/fine: 3 chunks, 3 stored, 0 missing (read as the fill value), 0 corrupt" in out
    assert out.splitlines()[-1].startswith("verify: 7 corrupt key(s) or document(s); 4 array(s), 50 chunk(s) checked")


def test_json_report(damaged: Path, cli: Cli) -> None:
    status, out, _ = cli("verify", damaged, "--json")
    assert status == 1
    doc = json.loads(out)
    assert doc["ok"] is False and doc["device"] == "cpu"
    by_name = {a["name"]: a for a in doc["arrays"]}
    assert sorted(by_name) == ["/checked", "/more/fine", "/plain", "/sharded"]
    assert [c["key"] for c in by_name["/sharded"]["corrupt"]] == ["sharded/c/0/0", "sharded/c/0/1", "sharded/c/1/1"]
    assert (by_name["/checked"]["missing"], by_name["/checked"]["stored"]) == (1, 15)
    assert [m["node"] for m in doc["unreadable_metadata"]] == ["/broken"]


def test_one_array(damaged: Path, cli: Cli) -> None:
    status, out, _ = cli("verify", damaged / "more" / "fine")
    assert status == 0 and "verify: OK; 1 array(s), 3 chunk(s) checked" in out
    status, out, _ = cli("verify", damaged / "checked")
    # Keys are the store's: the array is the store's root here.
    assert status == 1 and out.startswith("CORRUPT c/1/1: cannot decode chunk: crc32c checksum mismatch")


def test_a_store_that_cannot_list(damaged: Path, http_server: HttpServer, cli: Cli) -> None:
    # No listing: every chunk's key is asked for; the missing one is still told apart.
    shutil.copytree(damaged / "checked", http_server.directory / "checked")
    status, out, _ = cli("verify", f"{http_server.url}/checked")
    assert status == 1
    assert "/: 16 chunks, 15 stored, 1 missing (read as the fill value), 1 corrupt" in out


def test_gpu_without_a_gpu_is_one_line(hierarchy: Path, cli: Cli) -> None:
    from gpuzarr.backends.select import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is None:
        pytest.skip("this machine has a usable GPU (tests/gpu/test_cli_gpu.py verifies on it)")
    status, out, err = cli("verify", hierarchy, "--device", "gpu")
    assert (status, out) == (1, "")
    assert err == f"gpuzarr verify: error: device='gpu': the GPU read path cannot run here: {reason}\n"
