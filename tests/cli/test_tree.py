"""``gpuzarr tree``: the hierarchy drawn as ``Group.tree()`` draws it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import gpuzarr
from tests.permissions import without_permission

from .conftest import run_module

if TYPE_CHECKING:
    from collections.abc import Callable

DRAWN = """\
/
├── labels
│   └── mask (30, 30) float32
└── raw (40, 30, 20) uint16
"""


def test_tree_of_a_group(hierarchy: Path) -> None:
    done = run_module("tree", hierarchy)
    assert done.returncode == 0, done.stderr
    assert done.stdout == DRAWN  # not a terminal: no bold


def test_tree_levels_and_truncation(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    assert cli("tree", hierarchy, "--level", "0", "--plain")[1] == "/\n├── labels\n└── raw (40, 30, 20) uint16\n"
    status, out, _ = cli("tree", hierarchy, "--max-nodes", "1")
    assert status == 0
    assert out.splitlines()[0] == "Truncated at max_nodes=1, some nodes may be missing"
    assert out.splitlines()[1:] == ["/", "└── labels"]


def test_tree_of_an_array(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    assert cli("tree", hierarchy / "labels" / "mask") == (0, "/ (30, 30) float32\n", "")


def test_a_negative_level_is_a_usage_error(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("tree", hierarchy, "--level", "-1")
    assert exit_info.value.code == 2


def test_a_child_that_cannot_be_read_is_drawn_with_why_and_the_rest_after_it(
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    # Group.tree() raises at such a child, as zarr-python does; the command shows the rest.
    base = Path(tempfile.mkdtemp())  # reachable by every user, unlike pytest's directories
    try:
        base.chmod(0o777)
        root = gpuzarr.open_group(base / "h.zarr", mode="w")
        root.create_group("broken")
        root.create_group("private").create_array("x", shape=(4,), dtype="i1")
        root.create_array("public", shape=(4,), dtype="i1")
        (base / "h.zarr" / "broken" / "zarr.json").write_text("{not json")
        for path in [base / "h.zarr", *(base / "h.zarr").rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
        (base / "h.zarr" / "private").chmod(0o700)
        assert cli("tree", base / "h.zarr", "--plain")[0] == 0  # imports what it needs, as root
        with without_permission(base / "h.zarr" / "private"):
            status, out, _ = cli("tree", base / "h.zarr", "--plain")
        lines = out.splitlines()
        assert status == 0 and lines[0] == "/"
        assert lines[1].startswith("├── broken (unreadable: ")
        assert lines[2].startswith("├── private (unreadable: ") and "Permission denied" in lines[2]
        assert lines[3] == "└── public (4,) int8"
    finally:
        shutil.rmtree(base)
