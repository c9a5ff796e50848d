"""``Group.tree()``, ``Group.members(max_depth=...)`` and ``Group.name``; zarr-python draws the
same trees of the same stores in tests/integration/test_interop_conveniences.py."""

from __future__ import annotations

import sys

import pytest

import gpuzarr
from gpuzarr.core.tree import render_tree
from gpuzarr.errors import InvalidArgumentError


def _hierarchy(store: gpuzarr.Store) -> gpuzarr.Group:
    root = gpuzarr.group(store)
    root.create_array("images", shape=(64, 64), dtype="uint8")
    labels = root.create_group("labels")
    labels.create_array("mask", shape=(64, 64), dtype="bool")
    labels.create_group("deep/er")
    root.create_group("zz")
    return root


def test_tree_text(store: gpuzarr.Store) -> None:
    tree = _hierarchy(store).tree()
    assert str(tree) == repr(tree) == tree.text
    assert tree.text == (
        "/\n"
        "├── images (64, 64) uint8\n"
        "├── labels\n"
        "│   ├── deep\n"
        "│   │   └── er\n"
        "│   └── mask (64, 64) bool\n"
        "└── zz\n"
    )


def test_tree_of_a_subgroup_and_levels(store: gpuzarr.Store) -> None:
    root = _hierarchy(store)
    labels = root["labels"]
    assert labels.name == "/labels" and root.name == "/"
    assert labels.tree().text == "/labels\n├── deep\n│   └── er\n└── mask (64, 64) bool\n"
    assert root.tree(level=0).text == "/\n├── images (64, 64) uint8\n├── labels\n└── zz\n"
    assert root.tree(level=1).text.count("\n") == 6  # root, 3 children, deep and mask


def test_tree_truncates_at_max_nodes(store: gpuzarr.Store) -> None:
    tree = _hierarchy(store).tree(max_nodes=2)
    assert tree.text.startswith("Truncated at max_nodes=2")
    assert tree.text.splitlines()[1:] == ["/", "├── images (64, 64) uint8", "└── labels"]


def test_tree_bold_names_only_on_a_terminal(store: gpuzarr.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _hierarchy(store)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert "\x1b[1mimages\x1b[0m (64, 64) uint8" in root.tree().text
    assert "\x1b[" not in root.tree(plain=True).text
    bundle = root.tree()._repr_mimebundle_()
    assert "<b>images</b> (64, 64) uint8" in bundle["text/html"]
    assert bundle["text/plain"] == root.tree().text


def test_html_escapes_names() -> None:
    html = render_tree("/", [("<a&b>", object())])._repr_mimebundle_()["text/html"]
    assert "&lt;a&amp;b&gt;" in html and "<a&b>" not in html


def test_members_depths(store: gpuzarr.Store) -> None:
    root = _hierarchy(store)
    assert [name for name, _ in root.members()] == ["images", "labels", "zz"]
    assert [name for name, _ in root.members(max_depth=1)] == [
        "images", "labels", "labels/deep", "labels/mask", "zz",
    ]
    everything = root.members(max_depth=None)
    assert [name for name, _ in everything] == [
        "images", "labels", "labels/deep", "labels/deep/er", "labels/mask", "zz",
    ]
    assert [n for n, _ in root.members(recursive=True)] == [n for n, _ in everything]
    kinds = {name: type(node).__name__ for name, node in everything}
    assert kinds == {
        "images": "Array", "labels": "Group", "labels/deep": "Group", "labels/deep/er": "Group",
        "labels/mask": "Array", "zz": "Group",
    }
    assert isinstance(root.members(), tuple)


@pytest.mark.parametrize("bad", [-1, 1.5, "1"])
def test_bad_depths_name_the_argument(bad: object) -> None:
    g = gpuzarr.group()
    with pytest.raises(InvalidArgumentError, match="max_depth"):
        g.members(max_depth=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="level"):
        g.tree(level=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_nodes"):
        g.tree(max_nodes=bad)  # type: ignore[arg-type]


def test_empty_group() -> None:
    assert gpuzarr.group().tree().text == "/\n"
    assert gpuzarr.group().members(max_depth=None) == ()
