"""``gpuzarr tree``: the hierarchy drawn as ``Group.tree()`` draws it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import gpuzarr
from tests.permissions import open_to_all, reachable_directory, without_permission

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
    with reachable_directory() as base:
        root = gpuzarr.open_group(base / "h.zarr", mode="w")
        root.create_group("broken")
        root.create_group("private").create_array("x", shape=(4,), dtype="i1")
        root.create_array("public", shape=(4,), dtype="i1")
        (base / "h.zarr" / "broken" / "zarr.json").write_text("{not json")
        open_to_all(base / "h.zarr")
        (base / "h.zarr" / "private").chmod(0o700)
        assert cli("tree", base / "h.zarr", "--plain")[0] == 0  # imports what it needs, as root
        with without_permission(base / "h.zarr" / "private"):
            status, out, _ = cli("tree", base / "h.zarr", "--plain")
        lines = out.splitlines()
        assert status == 0 and lines[0] == "/"
        assert lines[1].startswith("├── broken (unreadable: ")
        assert lines[2].startswith("├── private (unreadable: ") and "Permission denied" in lines[2]
        assert lines[3] == "└── public (4,) int8"


def _searchable_hierarchy(base: Path) -> Path:
    """/a/x/y, /b, /m (a group), /zz: every file readable and every folder listable by anyone."""
    base.chmod(0o777)
    root = gpuzarr.open_group(base / "h.zarr", mode="w")
    root.create_group("a").create_group("x").create_array("y", shape=(2,), dtype="i1")
    root.create_array("b", shape=(2,), dtype="i1")
    root.create_group("m").create_array("inner", shape=(2,), dtype="i1")
    root.create_array("zz", shape=(2,), dtype="i1")
    open_to_all(base / "h.zarr")
    return base / "h.zarr"


@pytest.mark.parametrize(("max_nodes", "expected"), [("2", ["a", "x"]), ("4", ["a", "x", "y", "b"]), ("9", None)])
def test_a_group_whose_folder_will_not_list_is_one_entry_in_its_place(
    cli: Callable[..., tuple[int, str, str]], max_nodes: str, expected: list[str] | None
) -> None:
    base = Path(tempfile.mkdtemp())
    try:
        hierarchy = _searchable_hierarchy(base)
        assert cli("tree", hierarchy, "--plain")[0] == 0  # imports what it needs, as root
        (hierarchy / "m").chmod(0o711)  # its zarr.json reads; the folder does not list
        with without_permission(hierarchy / "m"):
            status, out, _ = cli("tree", hierarchy, "--plain", "--max-nodes", max_nodes)
        assert status == 0
        drawn = [line for line in out.splitlines() if not line.startswith(("Truncated", "/"))]
        names = [line.lstrip("│├└─ ").split()[0] for line in drawn]
        if expected is not None:
            assert names == expected  # the order Group.tree() draws, notes in their place
        else:
            assert names == ["a", "x", "y", "b", "m", "zz"]
            (m,) = [line for line in drawn if line.lstrip("│├└─ ").startswith("m ")]
            assert "(unreadable: list: Permission denied)" in m
    finally:
        shutil.rmtree(base)


def test_a_group_whose_own_folder_will_not_list_is_an_error(cli: Callable[..., tuple[int, str, str]]) -> None:
    base = Path(tempfile.mkdtemp())
    try:
        hierarchy = _searchable_hierarchy(base)
        assert cli("tree", hierarchy, "--plain")[0] == 0
        hierarchy.chmod(0o711)
        with without_permission(hierarchy):
            status, _, err = cli("tree", hierarchy, "--plain")
        assert status == 1 and "Permission denied" in err
    finally:
        shutil.rmtree(base)


def test_children_are_listed_by_name_as_group_tree_draws_them(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    root = gpuzarr.open_group(tmp_path / "h.zarr", mode="w")
    for name in ("a.c", "a", "a-b", "A"):
        root.create_group(name)
    assert list(root) == ["A", "a", "a-b", "a.c"]  # by name: the listing sorts "a/" after "a-b/"
    for limit in ("1", "2", "3", "9"):
        assert cli("tree", tmp_path / "h.zarr", "--plain", "--max-nodes", limit)[1] == root.tree(
            max_nodes=int(limit), plain=True
        ).text
