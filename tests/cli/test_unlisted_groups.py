"""A group on a store that cannot list its keys (HTTP) and has no consolidated metadata: its
members are unknown, and every command says so instead of showing, checking or copying an empty
group. With consolidated metadata the same group is shown, checked and copied whole."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr.copying.nodes import children, walk
from gpuzarr.errors import UnsupportedOperationError

from .conftest import raw_data

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.servers.http import HttpServer

    Cli = Callable[..., tuple[int, str, str]]

UNKNOWN = "cannot list its keys and the group has no consolidated metadata, so its members are unknown"


@pytest.fixture
def served(hierarchy: Path, http_server: HttpServer) -> str:
    """The URL of the test hierarchy served over HTTP, without consolidated metadata."""
    shutil.copytree(hierarchy, http_server.directory / "h.zarr")
    return f"{http_server.url}/h.zarr"


def test_info_says_the_members_are_unknown(served: str, cli: Cli) -> None:
    status, out, _ = cli("info", served)
    assert status == 0
    assert "No. members        : unknown" in out
    assert UNKNOWN in out
    assert "No. arrays" not in out

    status, out, _ = cli("info", served, "--json")
    assert status == 0
    doc = json.loads(out)
    assert doc["members"] is None and UNKNOWN in doc["members_unknown"]


def test_tree_and_verify_refuse_instead_of_showing_an_empty_group(served: str, cli: Cli) -> None:
    status, out, err = cli("tree", served)
    assert (status, out) == (1, "")
    assert UNKNOWN in err

    status, out, _ = cli("verify", served)
    assert status == 1
    assert "UNREADABLE metadata of /: " in out and UNKNOWN in out
    assert "1 unreadable key(s) or document(s); 0 array(s)" in out


def test_copy_refuses_instead_of_copying_the_group_alone(served: str, tmp_path: Path, cli: Cli) -> None:
    status, _, err = cli("copy", served, tmp_path / "copy.zarr")
    assert status == 1
    assert UNKNOWN in err


def test_the_walkers_raise_or_report_the_unknown_members(served: str) -> None:
    group = gpuzarr.open_group(served, mode="r")
    with pytest.raises(UnsupportedOperationError, match="members are unknown"):
        children(group)
    reported: list[str] = []
    assert [path for path, _ in walk(group, on_error=lambda path, exc: reported.append(path))] == [""]
    assert reported == [""]


def test_consolidated_metadata_names_the_members(
    hierarchy: Path, http_server: HttpServer, tmp_path: Path, cli: Cli
) -> None:
    gpuzarr.consolidate_metadata(str(hierarchy))
    shutil.copytree(hierarchy, http_server.directory / "h.zarr")
    url = f"{http_server.url}/h.zarr"
    status, out, _ = cli("info", url)
    assert status == 0 and "No. members        : 2" in out
    assert cli("tree", url)[1] == "/\n├── labels\n│   └── mask (30, 30) float32\n└── raw (40, 30, 20) uint16\n"
    status, out, _ = cli("verify", url)
    assert status == 0, out
    assert cli("copy", url, tmp_path / "copy.zarr")[0] == 0
    np.testing.assert_array_equal(gpuzarr.open_array(str(tmp_path / "copy.zarr" / "raw"))[...], raw_data())
