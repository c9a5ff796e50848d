"""``gpuzarr info``: arrays and groups, as text and JSON, from local, zip and HTTP stores."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr.store import ZipStore
from tests.permissions import open_to_all, reachable_directory, without_permission

from .conftest import run_module

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.servers import HttpServer


def _fields(text: str) -> dict[str, str]:
    return {label.strip(): value.strip() for label, _, value in (line.partition(":") for line in text.splitlines())}


def test_array_info_as_text(hierarchy: Path) -> None:
    done = run_module("info", hierarchy / "raw")
    assert done.returncode == 0, done.stderr
    fields = _fields(done.stdout)
    array = gpuzarr.open_array(hierarchy / "raw", mode="r")
    assert fields["Shape"] == "(40, 30, 20)" and fields["Data type"] == "uint16"
    assert fields["Shard shape"] == "(16, 16, 16)" and fields["Chunk shape"] == "(8, 8, 8)"
    assert fields["Fill value"] == "7"
    assert fields["No. bytes stored"].startswith(f"{array.nbytes_stored()} (")
    assert fields["Storage ratio"] == f"{array.nbytes / array.nbytes_stored():.1f}"
    assert fields["Shards Initialized"] == "12 of 12"
    assert fields["Dimension names"] == "('z', 'y', 'x')"
    assert "zstd" in fields["Compressors"]


def test_array_info_as_json(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    status, out, _ = cli("info", hierarchy / "labels" / "mask", "--json")
    assert status == 0
    doc = json.loads(out)
    mask = gpuzarr.open_array(hierarchy / "labels" / "mask", mode="r")
    assert doc["node_type"] == "array" and doc["zarr_format"] == 3
    assert (doc["shape"], doc["chunk_shape"], doc["shard_shape"]) == ([30, 30], [10, 10], None)
    assert doc["fill_value"] == "NaN"  # JSON's spelling, as in zarr.json
    assert doc["compressors"] == [
        {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
        {"name": "crc32c"},
    ]
    assert doc["count_bytes"] == 3600 and doc["count_bytes_stored"] == mask.nbytes_stored()
    assert doc["storage_ratio"] == 3600 / mask.nbytes_stored()
    # rows 0..14 hold data: the chunk rows 0 and 1, three chunks each; row 2 is all fill
    assert (doc["count_chunks"], doc["count_chunks_initialized"]) == (9, 6)
    assert doc["dimension_names"] is None and doc["attributes"] == {} and doc["listed"] is True


def test_group_info_lists_its_children(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    status, out, _ = cli("info", hierarchy)
    assert status == 0
    fields = _fields(out)
    assert fields["Type"] == "Group" and fields["Name"] == "/" and fields["Attributes"] == "1"
    assert (fields["No. members"], fields["No. arrays"], fields["No. groups"]) == ("2", "1", "1")
    assert out.splitlines()[-2:] == ["  labels  group", "  raw     array (40, 30, 20) uint16"]
    assert "Shape" not in fields  # the arrays' own info only with --recursive


def test_recursive_group_info(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    status, out, _ = cli("info", hierarchy, "--recursive")
    assert status == 0
    assert "== /labels/mask" in out and "== /raw" in out
    assert out.index("== /labels/mask") < out.index("== /raw")
    status, out, _ = cli("info", hierarchy, "-r", "--json")
    doc = json.loads(out)
    assert doc["attributes"] == {"title": "cli test"}
    assert [m["name"] for m in doc["members"]] == ["labels", "raw"]
    assert sorted(doc["arrays"]) == ["/labels/mask", "/raw"]
    assert doc["arrays"]["/raw"]["dimension_names"] == ["z", "y", "x"]
    assert doc["arrays"]["/raw"]["attributes"] == {"um": 0.5}


def test_v2_array_in_a_zip_archive(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    archive = tmp_path / "data.zip"
    store = ZipStore(archive, mode="w")
    a = gpuzarr.create(store, zarr_format=2, shape=(10, 10), dtype=">i4", chunks=(5, 5), fill_value=None)
    a[...] = np.arange(100).reshape(10, 10)
    store.close()
    status, out, _ = cli("info", archive, "--json")
    assert status == 0
    doc = json.loads(out)
    assert (doc["zarr_format"], doc["data_type"], doc["fill_value"]) == (2, ">i4", None)
    assert doc["store_type"] == "ZipStore" and doc["count_chunks_initialized"] == 4


def test_a_store_that_cannot_list(
    hierarchy: Path, http_server: HttpServer, cli: Callable[..., tuple[int, str, str]]
) -> None:
    shutil.copytree(hierarchy, http_server.directory / "h.zarr")
    status, out, _ = cli("info", f"{http_server.url}/h.zarr/raw")
    assert status == 0
    fields = _fields(out)
    assert fields["Shape"] == "(40, 30, 20)" and "No. bytes stored" not in fields
    assert fields["Note"] == "the store cannot list its keys: stored bytes and chunks are unknown"


def test_a_child_that_cannot_be_read_is_listed_with_why(cli: Callable[..., tuple[int, str, str]]) -> None:
    with reachable_directory() as base:
        root = gpuzarr.open_group(base / "h.zarr", mode="w")
        root.create_group("private").create_array("x", shape=(4,), dtype="i1")
        root.create_array("public", shape=(4,), dtype="i1")
        open_to_all(base / "h.zarr")
        (base / "h.zarr" / "private").chmod(0o700)
        assert cli("info", base / "h.zarr", "--json", "--recursive")[0] == 0  # imports, as root
        assert cli("info", base / "h.zarr", "--recursive")[0] == 0
        with without_permission(base / "h.zarr" / "private"):
            status, out, _ = cli("info", base / "h.zarr", "--recursive")
            doc = json.loads(cli("info", base / "h.zarr", "--json", "--recursive")[1])
        assert status == 0
        fields = _fields(out)
        assert (fields["No. members"], fields["No. arrays"], fields["No. unreadable"]) == ("1", "1", "1")
        (line,) = [line for line in out.splitlines() if line.split()[:2] == ["private", "unreadable:"]]
        assert "Permission denied" in line
        assert "== /public" in out
        (private,) = [m for m in doc["members"] if m["name"] == "private"]
        assert private["node_type"] is None and "Permission denied" in private["unreadable"]
        assert [m["name"] for m in doc["members"]] == ["private", "public"]  # by name
        assert list(doc["arrays"]) == ["/public"]
        assert list(doc["unreadable"]) == ["/private"]  # what --recursive could not describe, said
        assert "== /private: unreadable: " in out


def test_info_json_is_strict_json_whatever_the_attributes_hold(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    """Attributes zarr-python wrote with NaN or infinite numbers print as the strings Zarr's
    metadata uses for them: ``--json`` output is strict JSON (it was a traceback)."""
    path = tmp_path / "nan.zarr"
    gpuzarr.create(str(path), shape=(3,), dtype="f4")
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"] = {"scale_factor": float("nan"), "range": [float("-inf"), float("inf")]}
    (path / "zarr.json").write_text(json.dumps(doc))
    status, out, _ = cli("info", path, "--json")
    assert status == 0
    shown = json.loads(out, parse_constant=lambda name: pytest.fail(f"not strict JSON: {name}"))
    assert shown["attributes"] == {"scale_factor": "NaN", "range": ["-Infinity", "Infinity"]}


def test_a_query_of_a_url_given_is_not_printed(
    hierarchy: Path, http_server: HttpServer, cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    """An HTTP URL's query (a signature) reaches the server with every request, never the output."""
    shutil.copytree(hierarchy, http_server.directory / "h.zarr")
    http_server.require_query("sig=SECRET")
    for args in (("info", f"{http_server.url}/h.zarr/raw?sig=SECRET"),
                 ("copy", f"{http_server.url}/h.zarr/raw?sig=SECRET", tmp_path / "c.zarr")):  # fmt: skip
        status, out, err = cli(*args)
        assert status == 0, err
        assert "SECRET" not in out + err
    assert set(http_server.queries) == {"sig=SECRET"}
