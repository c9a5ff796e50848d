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
from tests.permissions import open_to_all, reachable_directory, without_permission

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


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_consolidated_metadata_without_the_nodes_own_documents(tmp_path: Path, cli: Cli, zarr_format: int) -> None:
    # Navigated through consolidated metadata, the arrays open and decode although their own
    # documents are gone or differ: tools that do not read it would see another hierarchy.
    root = tmp_path / "c.zarr"
    g = gpuzarr.open_group(root, mode="w", zarr_format=zarr_format)
    for name in ("a", "b", "c"):
        g.create_array(name, shape=(4,), dtype="int8", chunks=(2,), attributes={"n": name})[...] = 1
    gpuzarr.consolidate_metadata(root)
    assert cli("verify", root)[0] == 0
    if zarr_format == 3:
        (root / "a" / "zarr.json").unlink()
        doc = json.loads((root / "b" / "zarr.json").read_text())
        doc["attributes"]["n"] = "changed"
        (root / "b" / "zarr.json").write_text(json.dumps(doc))
    else:
        (root / "a" / ".zarray").unlink()
        (root / "b" / ".zattrs").write_text(json.dumps({"n": "changed"}))
    status, out, _ = cli("verify", root)
    assert status == 1
    assert f"CORRUPT metadata of /a: the consolidated metadata records a Zarr v{zarr_format} array, but its own " \
        "metadata document is missing" in out.splitlines()
    assert "CORRUPT metadata of /b: its metadata document and the consolidated metadata differ in attributes" in out
    assert "/c:" in out and "/c: " not in [line for line in out.splitlines() if line.startswith("CORRUPT")]
    assert out.splitlines()[-1].startswith("verify: 2 corrupt key(s) or document(s); 3 array(s)")
    doc = json.loads(cli("verify", root, "--json")[1])
    assert [m["node"] for m in doc["unreadable_metadata"]] == ["/a", "/b"] and doc["ok"] is False


def test_list_missing(tmp_path: Path, damaged: Path, cli: Cli) -> None:
    sharded = gpuzarr.create(tmp_path / "s.zarr", shape=(8, 8), dtype="uint8", chunks=(2, 2), shards=(4, 4))
    sharded[0:2, 0:4] = 1  # shard (0, 0) holds inner chunks 0 and 1 only; the other shards are absent
    status, out, _ = cli("verify", tmp_path / "s.zarr", "--list-missing")
    assert status == 0
    missing = [line.removeprefix("MISSING ") for line in out.splitlines() if line.startswith("MISSING")]
    assert missing == ["c/0/0: inner chunk 2", "c/0/0: inner chunk 3", "c/0/1", "c/1/0", "c/1/1"]
    assert "/: 16 chunks, 2 stored, 14 missing (read as the fill value), 0 corrupt" in out
    assert "MISSING" not in cli("verify", tmp_path / "s.zarr")[1]  # only when asked
    doc = json.loads(cli("verify", damaged, "--json", "--list-missing")[1])
    by_name = {a["name"]: a for a in doc["arrays"]}
    assert by_name["/checked"]["missing_keys"] == ["checked/c/2/2"] and by_name["/checked"]["missing"] == 1
    assert "missing_keys" not in json.loads(cli("verify", damaged, "--json")[1])["arrays"][0]


class FlakyStore(gpuzarr.MemoryStore):
    """Returns damaged bytes for ``key`` the first time it is read, then the stored ones (a
    storage system that served a bad read once)."""

    def __init__(self, data: dict[str, bytes], key: str) -> None:
        super().__init__(data, read_only=True)  # read only, so that mode="r" keeps this store
        self.flaky_key = key
        self.served = False

    def get(self, key, byte_range=None):  # type: ignore[no-untyped-def]
        value = super().get(key, byte_range)
        if key == self.flaky_key and value is not None and not self.served:
            self.served = True
            return b"\x00" + bytes(value)[1:]
        return value

    def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
        return gpuzarr.Store.get_into(self, key, buffer_for, start, length)  # through get


def test_a_region_failure_no_object_repeats_is_reported(tmp_path: Path) -> None:
    from gpuzarr.cli.verify import verify_array
    from gpuzarr.copying.progress import Progress

    data: dict[str, bytes] = {}
    written = gpuzarr.create(gpuzarr.MemoryStore(data), shape=(8,), dtype="int32", chunks=(2,),
                             compressors=[{"name": "crc32c"}])
    written[...] = np.arange(8, dtype="int32")
    array = gpuzarr.open_array(FlakyStore(data, "c/2"), mode="r", device="cpu")
    with Progress(array.nbytes, "verify", False) as progress:
        report = verify_array("/", array, 1, progress)
    assert len(report.corrupt) == 1
    key, reason = report.corrupt[0]
    assert key == "c/2" and "crc32c checksum mismatch" in reason
    assert reason.endswith("(reading a region failed; reading its objects again one by one did not)")


#: what this process is refused, as (the path below the hierarchy, its mode), and what verify
#: reports: (the node whose metadata is unreadable, or None; the unreadable key of /private/x)
REFUSALS = {
    "a subgroup's folder": (("private", 0o700), ("/private", None)),
    "a subgroup's folder, searchable, not listable": (("private", 0o711), ("/private", None)),
    "an array's folder of chunks": (("private/x/c", 0o700), (None, "private/x/c/")),
    "an array's folder, searchable, not listable": (("private/x", 0o711), (None, "private/x/")),
    "a chunk": (("private/x/c/1", 0o600), (None, "private/x/c/1")),
}


@pytest.mark.parametrize("refused", list(REFUSALS))
def test_what_this_process_may_not_read_is_reported_and_the_rest_verified(cli: Cli, refused: str) -> None:
    (where, mode), (node, key) = REFUSALS[refused]
    with reachable_directory() as base:
        root = gpuzarr.open_group(base / "h.zarr", mode="w")
        root.create_group("private").create_array("x", shape=(4,), dtype="i1", chunks=(2,))[...] = 1
        root.create_array("public", shape=(4,), dtype="i1", chunks=(2,))[...] = 3
        open_to_all(base / "h.zarr")
        assert cli("verify", base / "h.zarr", "--json")[0] == 0  # imports what it needs, as root
        (base / "h.zarr" / where).chmod(mode)
        with without_permission(base / "h.zarr" / where):
            status, out, _ = cli("verify", base / "h.zarr", "--json")
            text = cli("verify", base / "h.zarr")[1]
        doc = json.loads(out)
        assert status == 1 and doc["ok"] is False  # never "OK" for what it could not see
        arrays = {a["name"]: a for a in doc["arrays"]}
        assert arrays["/public"]["unreadable"] == [] and arrays["/public"]["stored"] == 2  # verified all the same
        if node is not None:
            (unreadable,) = doc["unreadable_metadata"]
            assert unreadable["node"] == node and "Permission denied" in unreadable["reason"]
            assert f"UNREADABLE metadata of {node}:" in text
        else:
            assert [u["key"] for u in arrays["/private/x"]["unreadable"]] == [key]
            assert f"UNREADABLE {key}:" in text
        assert "unreadable key(s) or document(s)" in text.splitlines()[-1]


def test_verify_and_convert_of_an_array_declaring_a_trillion_chunks_end(tmp_path: Path, cli: Cli) -> None:
    """Metadata declaring shape [10**12] in chunks of 1 with a few stored: verify counted the
    missing ones object by object, and convert looped over every chunk to find the largest;
    neither ended."""
    path = tmp_path / "huge.zarr"
    array = gpuzarr.create(str(path), shape=(10**12,), dtype="u1", chunks=(1,), fill_value=0)
    array[[5, 10**12 - 1]] = 7
    status, out, _ = cli("verify", path)
    assert status == 0 and "1000000000000 chunks, 2 stored, 999999999998 missing" in out
    status, out, _ = cli("convert", path, tmp_path / "copy.zarr", "--compressor", "zstd:1")
    assert status == 0, out
    copy = gpuzarr.open(str(tmp_path / "copy.zarr"), mode="r")
    assert copy[[5, 10**12 - 1]].tolist() == [7, 7]
    assert copy.nchunks_initialized == 2


def test_a_consolidated_groups_unreadable_node_is_reported_and_the_rest_verified(cli: Cli) -> None:
    """A consolidated group stopped at the first node whose own metadata the store refused."""
    with reachable_directory() as base:
        root = gpuzarr.open_group(base / "h.zarr", mode="w")
        root.create_group("labels").create_array("x", shape=(4,), dtype="i1", chunks=(2,))[...] = 1
        root.create_array("raw", shape=(4,), dtype="i1", chunks=(2,))[...] = 3
        gpuzarr.consolidate_metadata(base / "h.zarr")
        open_to_all(base / "h.zarr")
        assert cli("verify", base / "h.zarr", "--json")[0] == 0  # imports what it needs, as root
        (base / "h.zarr" / "labels").chmod(0o700)
        with without_permission(base / "h.zarr" / "labels"):
            status, out, err = cli("verify", base / "h.zarr", "--json")
        assert status == 1, err
        doc = json.loads(out)
        assert doc["ok"] is False
        assert any(u["node"] == "/labels" for u in doc["unreadable_metadata"])
        assert {a["name"]: a for a in doc["arrays"]}["/raw"]["stored"] == 2  # verified all the same
