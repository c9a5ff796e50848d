"""``gpuzarr tree``: the hierarchy drawn as ``Group.tree()`` draws it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .conftest import run_module

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

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
