"""Hierarchies: v3 explicit groups, v2 groups (.zgroup/.zattrs), implicit groups, node detection,
group navigation and creation, node-name rules, and zarr-python interop in both directions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import (
    ArrayNotFoundError,
    ContainsNodeError,
    GroupNotFoundError,
    InvalidArgumentError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
)

if TYPE_CHECKING:
    from pathlib import Path


def _json(store: gpuzarr.Store, key: str) -> Any:
    raw = store.get(key)
    assert raw is not None, key
    return json.loads(bytes(raw))


def _build(store: gpuzarr.Store, zarr_format: int) -> gpuzarr.Group:
    """root{a: array, sub{b: array, deeper{}}}"""
    root = gpuzarr.create_group(store, zarr_format=zarr_format, attributes={"title": "root"})
    root.create_array("a", shape=(4,), dtype="int32", chunks=(2,), fill_value=0)[...] = np.arange(4)
    sub = root.create_group("sub", attributes={"level": 1})
    sub.create_array("b", shape=(3, 3), dtype="float32", chunks=(2, 2), fill_value=0.5)
    sub.create_group("deeper")
    return root


# -- creation and stored documents ----------------------------------------------------------------


def test_v3_group_documents(store: gpuzarr.Store) -> None:
    _build(store, 3)
    assert _json(store, "zarr.json") == {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"title": "root"},
    }
    assert _json(store, "sub/zarr.json")["attributes"] == {"level": 1}
    assert _json(store, "sub/deeper/zarr.json")["node_type"] == "group"
    assert _json(store, "sub/b/zarr.json")["node_type"] == "array"
    assert not any(k.endswith((".zgroup", ".zarray", ".zattrs")) for k in store.list_prefix(""))


def test_v2_group_documents(store: gpuzarr.Store) -> None:
    _build(store, 2)
    assert _json(store, ".zgroup") == {"zarr_format": 2}
    assert _json(store, ".zattrs") == {"title": "root"}
    assert _json(store, "sub/.zgroup") == {"zarr_format": 2}
    assert _json(store, "sub/.zattrs") == {"level": 1}
    assert _json(store, "sub/b/.zarray")["zarr_format"] == 2
    assert _json(store, "sub/deeper/.zgroup") == {"zarr_format": 2}
    assert not any(k.endswith("zarr.json") for k in store.list_prefix(""))


def test_navigation(store: gpuzarr.Store, zarr_format: int) -> None:
    _build(store, zarr_format)
    g = gpuzarr.open_group(store, mode="r")
    assert g.zarr_format == zarr_format
    assert list(g) == ["a", "sub"]
    assert g.keys() == ["a", "sub"]
    assert len(g) == 2
    assert len(g["sub"]) == 2
    assert list(g["sub"]) == ["b", "deeper"]
    assert "a" in g and "sub" in g and "sub/b" in g and "sub/deeper" in g
    assert "b" not in g and "sub/nope" not in g and "a/x" not in g and 3 not in g and "" not in g
    a = g["a"]
    assert isinstance(a, gpuzarr.Array) and a.zarr_format == zarr_format
    np.testing.assert_array_equal(a[...], np.arange(4))
    b = g["sub/b"]
    assert isinstance(b, gpuzarr.Array)
    np.testing.assert_array_equal(b[...], np.full((3, 3), 0.5, dtype="float32"))
    assert isinstance(g["sub"]["deeper"], gpuzarr.Group)
    assert g["/sub/deeper/"].path == "sub/deeper"
    with pytest.raises(KeyError):
        g["missing"]
    with pytest.raises(KeyError):
        g["sub/b/c"]


def test_members(store: gpuzarr.Store, zarr_format: int) -> None:
    g = _build(store, zarr_format)
    assert [name for name, _ in g.members()] == ["a", "sub"]
    members = dict(g.members(recursive=True))
    assert sorted(members) == ["a", "sub", "sub/b", "sub/deeper"]
    assert isinstance(members["sub/b"], gpuzarr.Array)
    assert isinstance(members["sub/deeper"], gpuzarr.Group)
    assert members["sub/b"].shape == (3, 3)
    assert g["sub"].members(recursive=True)[0][0] == "b"


def test_open_detects_node_type_and_format(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "h.zarr"
    _build(gpuzarr.LocalStore(path), zarr_format)
    for target, kind in [("", gpuzarr.Group), ("a", gpuzarr.Array), ("sub", gpuzarr.Group),
                         ("sub/b", gpuzarr.Array), ("sub/deeper", gpuzarr.Group)]:  # fmt: skip
        by_url = gpuzarr.open(str(path / target) if target else str(path), mode="r")
        by_path = gpuzarr.open(str(path), path=target, mode="r")
        for node in (by_url, by_path):
            assert isinstance(node, kind), target
            assert node.zarr_format == zarr_format
    with pytest.raises(NodeNotFoundError):
        gpuzarr.open(str(path / "nothing"), mode="r")
    with pytest.raises(ArrayNotFoundError):
        gpuzarr.open_array(str(path), path="sub", mode="r")
    with pytest.raises(GroupNotFoundError):
        gpuzarr.open_group(str(path), path="a", mode="r")
    with pytest.raises(GroupNotFoundError):
        gpuzarr.open_group(str(path), path="nothing", mode="r")


def test_attrs_persist(store: gpuzarr.Store, zarr_format: int) -> None:
    g = _build(store, zarr_format)
    g.attrs["added"] = [1, 2, {"x": None}]
    g["sub"].attrs.update({"level": 2, "name": "s"})
    del g.attrs["title"]
    reopened = gpuzarr.open_group(store, mode="r")
    assert dict(reopened.attrs) == {"added": [1, 2, {"x": None}]}
    assert dict(reopened["sub"].attrs) == {"level": 2, "name": "s"}
    # Writing attributes leaves the members alone.
    assert list(reopened) == ["a", "sub"]
    with pytest.raises(MetadataError, match="attributes"):
        g.attrs["bad"] = float("nan")
    with pytest.raises(ReadOnlyError):
        reopened.attrs["x"] = 1
    assert dict(gpuzarr.open_group(store, mode="r").attrs) == {"added": [1, 2, {"x": None}]}


def test_create_existing_and_overwrite(store: gpuzarr.Store, zarr_format: int) -> None:
    g = _build(store, zarr_format)
    with pytest.raises(ContainsNodeError):
        g.create_group("sub")
    with pytest.raises(ContainsNodeError):
        g.create_array("a", shape=(1,), dtype="int8")
    with pytest.raises(ContainsNodeError):
        gpuzarr.create_group(store, zarr_format=zarr_format)
    fresh = g.create_group("sub", overwrite=True, attributes={"new": True})
    assert list(fresh) == []
    assert "sub/b" not in g
    assert dict(g["sub"].attrs) == {"new": True}
    replaced = g.create_array("a", shape=(2,), dtype="int8", fill_value=3, overwrite=True)
    np.testing.assert_array_equal(replaced[...], [3, 3])


def test_nested_names_create_explicit_parents(store: gpuzarr.Store, zarr_format: int) -> None:
    g = gpuzarr.create_group(store, zarr_format=zarr_format)
    g.create_array("x/y/arr", shape=(2,), dtype="int16", chunks=(2,))
    g.create_group("p/q")
    group_doc = "zarr.json" if zarr_format == 3 else ".zgroup"
    for parent in ("x", "x/y", "p"):
        assert store.exists(f"{parent}/{group_doc}"), parent
        assert isinstance(g[parent], gpuzarr.Group)
        assert g[parent].zarr_format == zarr_format
    assert [n for n, _ in g.members(recursive=True)] == ["p", "p/q", "x", "x/y", "x/y/arr"]


def test_no_nodes_inside_arrays(store: gpuzarr.Store, zarr_format: int) -> None:
    g = _build(store, zarr_format)
    with pytest.raises(ContainsNodeError, match="'a'"):
        g.create_group("a/inner")
    with pytest.raises(ContainsNodeError, match="'sub/b'"):
        g["sub"].create_array("b/inner", shape=(1,), dtype="int8")
    assert not any(k.startswith(("a/inner", "sub/b/inner")) for k in store.list_prefix(""))


def test_require_group(store: gpuzarr.Store, zarr_format: int) -> None:
    g = _build(store, zarr_format)
    sub = g.require_group("sub")
    assert isinstance(sub, gpuzarr.Group) and dict(sub.attrs) == {"level": 1}
    assert list(sub) == ["b", "deeper"]
    made = g.require_group("made")
    assert made.zarr_format == zarr_format
    assert "made" in g
    assert g.require_group("made").path == "made"
    with pytest.raises(ContainsNodeError):
        g.require_group("a")


def test_open_group_modes(tmp_path: Path) -> None:
    path = str(tmp_path / "modes.zarr")
    with pytest.raises(GroupNotFoundError):
        gpuzarr.open_group(path, mode="r")
    g = gpuzarr.open_group(path, mode="a")
    g.create_group("kept")
    assert list(gpuzarr.open_group(path, mode="a")) == ["kept"]
    assert list(gpuzarr.open_group(path, mode="r+")) == ["kept"]
    with pytest.raises(ContainsNodeError):
        gpuzarr.open_group(path, mode="w-")
    assert list(gpuzarr.open_group(path, mode="w")) == []
    v2 = gpuzarr.open_group(path, path="two", mode="w", zarr_format=2)
    assert v2.zarr_format == 2
    assert gpuzarr.open_group(path, path="two", mode="r").zarr_format == 2
    assert isinstance(gpuzarr.open(path, path="new", mode="w"), gpuzarr.Group)


# -- implicit groups ------------------------------------------------------------------------------


def test_implicit_groups(store: gpuzarr.Store) -> None:
    root = gpuzarr.create_group(store)
    gpuzarr.create(store, path="imp/deep/arr", shape=(3,), dtype="uint8", chunks=(2,), fill_value=1)
    gpuzarr.create_group(store, path="imp/other")
    # create() writes missing parent groups (as zarr-python does); remove them to get implicit ones.
    store.erase("imp/zarr.json")
    store.erase("imp/deep/zarr.json")
    assert not store.exists("imp/zarr.json") and not store.exists("imp/deep/zarr.json")
    assert list(root) == ["imp"]
    assert "imp" in root and "imp/deep" in root and "imp/deep/arr" in root
    imp = root["imp"]
    assert isinstance(imp, gpuzarr.Group)
    assert dict(imp.attrs) == {}
    assert list(imp) == ["deep", "other"]
    assert sorted(n for n, _ in root.members(recursive=True)) == [
        "imp", "imp/deep", "imp/deep/arr", "imp/other",
    ]  # fmt: skip
    np.testing.assert_array_equal(root["imp/deep/arr"][...], [1, 1, 1])
    opened = gpuzarr.open(store, path="imp/deep", mode="r")
    assert isinstance(opened, gpuzarr.Group) and opened.zarr_format == 3
    # Attributes on an implicit group make it explicit.
    imp.attrs["now"] = "explicit"
    assert _json(store, "imp/zarr.json") == {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"now": "explicit"},
    }
    assert list(root["imp"]) == ["deep", "other"]


def test_prefix_with_only_chunks_is_not_a_group(store: gpuzarr.Store) -> None:
    root = gpuzarr.create_group(store)
    store.set("stray/c/0", b"\x00")
    store.set("stray/notes.txt", b"hello")
    assert list(root) == []
    assert "stray" not in root
    with pytest.raises(NodeNotFoundError):
        gpuzarr.open(store, path="stray", mode="r")
    # An array's chunk directories are not groups either.
    a = root.create_array("arr", shape=(4, 4), dtype="int8", chunks=(2, 2), fill_value=0)
    a[...] = 1
    assert list(root) == ["arr"]
    assert "arr/c" not in root
    # Names no child can have are not in it (an InvalidKeyError from the store before), as in
    # zarr-python's Mapping.
    for name in ("a\\b", "x\x00y", ".."):
        assert name not in root
        assert root.get(name, "none") == "none"
    # Damaged metadata is raised by get(), not taken for an absent child.
    root.create_group("damaged")
    store.set("damaged/zarr.json", b'{"zarr_format": 3, "node_type"')
    with pytest.raises(MetadataError, match=r"damaged/zarr\.json"):
        root.get("damaged")
    with pytest.raises(NodeNotFoundError):
        gpuzarr.open(store, path="arr/c", mode="r")


def test_empty_store_is_not_a_group(store: gpuzarr.Store) -> None:
    with pytest.raises(NodeNotFoundError):
        gpuzarr.open(store, mode="r")


# -- node names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [(".", "periods"), ("..", "periods"), ("...", "periods"), ("__reserved", "reserved"),
     ("__", "reserved"), ("", "non-empty"), ("ok/..", "periods"), ("ok/__x", "reserved")],
)  # fmt: skip
def test_invalid_node_names(store: gpuzarr.Store, zarr_format: int, name: str, reason: str) -> None:
    g = gpuzarr.create_group(store, zarr_format=zarr_format)
    with pytest.raises(MetadataError, match=reason):
        g.create_group(name)
    with pytest.raises(MetadataError, match=reason):
        g.create_array(name, shape=(1,), dtype="int8")
    with pytest.raises(MetadataError, match=reason):
        g.require_group(name) if name else g.create_group(name)
    assert [k for k in store.list_prefix("") if k not in ("zarr.json", ".zgroup", ".zattrs")] == []


def test_slash_in_a_single_name_is_rejected() -> None:
    from gpuzarr.core.group import validate_node_name

    with pytest.raises(MetadataError, match="'/'"):
        validate_node_name("a/b")
    for ok in ("a", "a.b", ".a", "_a", "a__", "ünïcode", "1", "a-b c"):
        assert validate_node_name(ok) == ok


def test_a_node_with_a_reserved_name_written_elsewhere_opens_through_its_group(tmp_path: Path) -> None:
    """The spec reserves '__' names for new nodes; zarr-python writes such nodes anyway, and a
    group that lists one must open it (but never creates one)."""
    zarr = pytest.importorskip("zarr")
    z = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    z.create_array("__x", shape=(2,), dtype="i2", fill_value=3)
    g = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="a")
    assert list(g) == ["__x"] and "__x" in g
    np.testing.assert_array_equal(g["__x"][...], [3, 3])
    assert [name for name, _ in g.members()] == ["__x"]
    with pytest.raises(MetadataError, match="reserved"):
        g.create_group("__y")
    del g["__x"]
    assert list(g) == []


@pytest.mark.parametrize("name", [".hidden", "a.b", "_x", "x__y", "über"])
def test_valid_unusual_names(store: gpuzarr.Store, name: str) -> None:
    g = gpuzarr.create_group(store)
    g.create_group(name)
    assert list(g) == [name]
    assert name in g


# -- zarr-python interop --------------------------------------------------------------------------


def test_gpuzarr_reads_zarr_python_hierarchy(tmp_path: Path, zarr_format: int) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "zp.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=zarr_format, attributes={"root": True})
    x = root.create_array("x", shape=(5, 4), chunks=(2, 3), dtype="int16", fill_value=0)
    x[...] = np.arange(20).reshape(5, 4)
    x.attrs["units"] = "m"
    s = root.create_group("s")
    s.attrs["lvl"] = 1
    y = s.create_group("t").create_array("y", shape=(3,), chunks=(2,), dtype="float64", fill_value=1.5)
    y[:1] = 9
    g = gpuzarr.open(str(path), mode="r", device="cpu")
    assert isinstance(g, gpuzarr.Group)
    assert g.zarr_format == zarr_format
    assert dict(g.attrs) == {"root": True}
    assert list(g) == ["s", "x"]
    assert [n for n, _ in g.members(recursive=True)] == ["s", "s/t", "s/t/y", "x"]
    np.testing.assert_array_equal(g["x"][...], np.arange(20).reshape(5, 4))
    assert dict(g["x"].attrs) == {"units": "m"}
    assert dict(g["s"].attrs) == {"lvl": 1}
    np.testing.assert_array_equal(g["s/t/y"][...], [9.0, 1.5, 1.5])
    assert g["s/t/y"].zarr_format == zarr_format


def test_zarr_python_reads_gpuzarr_hierarchy(tmp_path: Path, zarr_format: int) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "gz.zarr"
    g = _build(gpuzarr.LocalStore(path), zarr_format)
    g["sub/b"][0:2, 1:3] = np.array([[1, 2], [3, 4]], dtype="float32")
    g.create_array("nested/deep/c", shape=(2, 2), dtype="uint8", chunks=(1, 2), fill_value=0)[...] = 7
    g["sub"].attrs["extra"] = "yes"
    zg = zarr.open_group(str(path), mode="r")
    assert zg.metadata.zarr_format == zarr_format
    assert dict(zg.attrs) == {"title": "root"}
    members = dict(zg.members(max_depth=None))
    assert sorted(members) == ["a", "nested", "nested/deep", "nested/deep/c", "sub", "sub/b", "sub/deeper"]
    assert isinstance(members["sub"], zarr.Group) and isinstance(members["sub/b"], zarr.Array)
    assert dict(members["sub"].attrs) == {"level": 1, "extra": "yes"}
    np.testing.assert_array_equal(zg["a"][...], np.arange(4))
    expected = np.full((3, 3), 0.5, dtype="float32")
    expected[0:2, 1:3] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(zg["sub/b"][...], expected)
    np.testing.assert_array_equal(zg["nested/deep/c"][...], np.full((2, 2), 7))
    assert sorted(zg.group_keys()) == ["nested", "sub"]


def test_gpuzarr_extends_zarr_python_hierarchy(tmp_path: Path, zarr_format: int) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "mixed.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=zarr_format).create_group("s")
    g = gpuzarr.open_group(str(path), mode="r+")
    assert g.zarr_format == zarr_format
    g["s"].create_array("arr", shape=(3,), dtype="int32", chunks=(2,), fill_value=0)[...] = [1, 2, 3]
    g.attrs["by"] = "gpuzarr"
    zg = zarr.open_group(str(path), mode="r")
    assert dict(zg.attrs) == {"by": "gpuzarr"}
    assert sorted(n for n, _ in zg.members(max_depth=None)) == ["s", "s/arr"]
    np.testing.assert_array_equal(zg["s/arr"][...], [1, 2, 3])


def test_failed_nested_create_leaves_no_parents(store: gpuzarr.Store, zarr_format: int) -> None:
    g = gpuzarr.create_group(store, zarr_format=zarr_format)
    with pytest.raises(MetadataError):
        g.create_array("p/q/arr", shape=(2,), dtype="not a type", chunks=(2,))
    assert list(g) == []
    assert [k for k in store.list_prefix("") if k not in ("zarr.json", ".zgroup", ".zattrs")] == []


# -- document sizes --------------------------------------------------------------------------------


def test_a_metadata_document_larger_than_max_metadata_bytes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    import os
    import tracemalloc

    a = gpuzarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), chunks=(2,), dtype="i1")
    os.truncate(tmp_path / "a.zarr" / "zarr.json", 1 << 30)  # sparse: a GiB nobody should read
    tracemalloc.start()
    try:
        with pytest.raises(MetadataError, match=r"zarr.json: a metadata document of 1073741824 bytes is larger"):
            gpuzarr.open_array(str(tmp_path / "a.zarr"), mode="r")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    del a


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_max_metadata_bytes_bounds_every_document(tmp_path: Path, zarr_format: int) -> None:
    g = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=zarr_format)
    g.create_array("x", shape=(4,), chunks=(2,), dtype="i1")
    gpuzarr.consolidate_metadata(str(tmp_path / "g.zarr"))
    refused = r"(zarr.json|\.zgroup|\.zmetadata|\.zarray): a metadata document"
    with gpuzarr.config.set(max_metadata_bytes=40), pytest.raises(MetadataError, match=refused):
        gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="r")["x"]
    assert gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="r")["x"].shape == (4,)
    with pytest.raises(InvalidArgumentError, match="max_metadata_bytes"):
        gpuzarr.config.set(max_metadata_bytes=0)


def test_an_oversized_zgroup_is_refused_before_it_is_read(tmp_path: Path) -> None:
    import os

    gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=2)
    os.truncate(tmp_path / "g.zarr" / ".zgroup", 1 << 30)
    with pytest.raises(MetadataError, match=r"\.zgroup: a metadata document of 1073741824 bytes"):
        gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="r")


def test_an_implicit_group_in_a_v2_hierarchy_is_a_v2_group(tmp_path: Path) -> None:
    # TensorStore's zarr2 driver writes no parent groups. Such a group opened through its parent
    # was a v3 group, and nodes created through it v3 nodes, which zarr-python never lists.
    root = gpuzarr.open_group(tmp_path / "h.zarr", mode="w", zarr_format=2)
    root.create_array("x/arr", shape=(2,), dtype="i1", fill_value=0)
    (tmp_path / "h.zarr" / "x" / ".zgroup").unlink()
    (tmp_path / "h.zarr" / "x" / ".zattrs").unlink()
    root = gpuzarr.open_group(tmp_path / "h.zarr", mode="r+")
    x = root["x"]
    assert isinstance(x, gpuzarr.Group) and x.zarr_format == 2
    assert dict(root.members())["x"].zarr_format == 2
    x.create_array("through_x", shape=(3,), dtype="i1", fill_value=0)
    assert (tmp_path / "h.zarr" / "x" / "through_x" / ".zarray").exists()
    assert not (tmp_path / "h.zarr" / "x" / "through_x" / "zarr.json").exists()
    zarr = pytest.importorskip("zarr")
    listed = zarr.open_group(str(tmp_path / "h.zarr"), mode="r", use_consolidated=False).members(max_depth=None)
    assert "x/through_x" in [name for name, _ in listed]


def test_an_implicit_group_is_looked_for_folder_by_folder_and_not_forever(tmp_path: Path) -> None:
    """A path without metadata is an implicit group where node metadata lies below it, found
    nearest first; a tree of more folders than IMPLICIT_GROUP_FOLDERS without any is given up
    on (``gpuzarr info /`` listed and sorted every file below ``/``, and did not end)."""
    from gpuzarr.hierarchy import IMPLICIT_GROUP_FOLDERS, read_node
    from gpuzarr.store import LocalStore

    gpuzarr.create(str(tmp_path / "near" / "a" / "b"), shape=(2,), dtype="i1")
    for parent in ("near/a/zarr.json", "near/zarr.json"):  # create() writes parent groups
        (tmp_path / parent).unlink(missing_ok=True)
    near = read_node(LocalStore(str(tmp_path)), "near")
    assert near is not None and near.implicit
    deep = tmp_path / "deep"
    for i in range(IMPLICIT_GROUP_FOLDERS + 10):  # folders of files that are no Zarr nodes
        (deep / f"d{i:04d}").mkdir(parents=True)
        (deep / f"d{i:04d}" / "notes.txt").write_text("not Zarr")
    nested = deep / "d0000" / "x" / "y" / "z"  # a group beyond the first thousand folders
    nested.mkdir(parents=True)
    (nested / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    assert read_node(LocalStore(str(tmp_path)), "deep") is None


def test_a_group_refuses_fields_it_must_understand_and_keeps_those_it_may_ignore(tmp_path: Path) -> None:
    """As for arrays: an unknown field of a group's zarr.json is refused unless it is an object
    saying ``"must_understand": false``, and such fields survive an attributes change (they
    were accepted, and dropped at the next write)."""
    path = tmp_path / "g"
    path.mkdir()
    document = {"zarr_format": 3, "node_type": "group", "attributes": {}, "opt": {"must_understand": False, "k": 1}}
    (path / "zarr.json").write_text(json.dumps(document))
    group = gpuzarr.open_group(str(path), mode="r+")
    group.attrs["x"] = 1
    assert json.loads((path / "zarr.json").read_text()) == {**document, "attributes": {"x": 1}}
    for value in ({"must_understand": True}, {"k": 1}, 5):
        (path / "zarr.json").write_text(json.dumps({**document, "req": value}))
        with pytest.raises(MetadataError, match=r"zarr\.json: req: unknown metadata field"):
            gpuzarr.open_group(str(path), mode="r")


def test_members_read_each_child_once_and_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each child's metadata was read twice, one child after the other: on an object store 200
    children at 20 ms a request took 10 s; ``tree(max_nodes=...)`` still stops reading early."""
    import threading
    import time

    from gpuzarr.core import group as group_module

    store = gpuzarr.MemoryStore()
    root = gpuzarr.group(store)
    for i in range(40):
        root.create_array(f"a{i:02d}", shape=(2,), dtype="i1")
    reads: list[str] = []
    in_flight = [0, 0]
    lock = threading.Lock()
    read_node = group_module.read_node

    def slow_read(store: Any, path: str) -> Any:
        with lock:
            reads.append(path)
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        time.sleep(0.005)
        with lock:
            in_flight[0] -= 1
        return read_node(store, path)

    monkeypatch.setattr(group_module, "read_node", slow_read)
    monkeypatch.setattr(store, "io_concurrency", 8, raising=False)
    names = [name for name, _ in root.members()]
    assert names == [f"a{i:02d}" for i in range(40)]
    assert sorted(reads) == sorted(f"a{i:02d}" for i in range(40))  # once each
    assert in_flight[1] > 1  # several at once
    reads.clear()
    monkeypatch.setattr(group_module, "CHILDREN_READ_AT_ONCE", 8)
    root.tree(max_nodes=3)
    assert len(reads) <= 8  # one batch of children, not the 40


def test_members_and_tree_of_a_hierarchy_deeper_than_the_recursion_limit() -> None:
    """``members(max_depth=None)`` and ``tree()`` recursed once per level: 1,100 nested groups
    raised RecursionError (zarr-python's tree draws them)."""
    import sys

    store = gpuzarr.MemoryStore()
    depth = sys.getrecursionlimit() + 100
    gpuzarr.group(store).create_group("/".join(["g"] * depth))
    members = gpuzarr.open_group(store, mode="r").members(max_depth=None)
    assert [path for path, _ in members][:3] == ["g", "g/g", "g/g/g"]
    assert len(members) == depth
    assert gpuzarr.open_group(store, mode="r").tree(max_nodes=depth).text.count("g") >= depth


def test_a_parent_made_meanwhile_by_another_writer_is_taken(
    store: gpuzarr.Store, zarr_format: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads creating nodes below one missing group: each found it missing, one wrote it,
    and the others raised ContainsNodeError after writing their own node. Here the other
    writer's group (with attributes of its own) lands while the child is written."""
    from gpuzarr import hierarchy

    write_documents = hierarchy.write_documents

    def racing_write(store_: gpuzarr.Store, path: str, documents: Any) -> None:
        if path == "sub/a":
            gpuzarr.open_group(store, zarr_format=zarr_format).create_group("sub", attributes={"by": "other"})
        write_documents(store_, path, documents)

    root = gpuzarr.create_group(store, zarr_format=zarr_format)
    monkeypatch.setattr(hierarchy, "write_documents", racing_write)
    root.create_array("sub/a", shape=(4,), dtype="i4", chunks=(2,))
    monkeypatch.undo()
    sub = gpuzarr.open_group(store, path="sub", mode="r")
    assert dict(sub.attrs) == {"by": "other"} and list(sub) == ["a"]


@pytest.mark.parametrize("kind", ["group", "array"])
def test_require_takes_the_node_another_writer_made_meanwhile(
    store: gpuzarr.Store, zarr_format: int, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads requiring one name: both found it missing, and the second one's create
    raised ContainsNodeError."""
    root = gpuzarr.create_group(store, zarr_format=zarr_format)
    other = gpuzarr.open_group(store, mode="r+")
    contains = type(root).__contains__
    made: list[bool] = []

    def racing_contains(self: gpuzarr.Group, name: object) -> bool:
        found = contains(self, name)
        if not made:  # the first look finds nothing; the other writer creates it then
            made.append(True)
            if kind == "group":
                other.create_group("same", attributes={"by": "other"})
            else:
                other.create_array("same", shape=(4,), dtype="i4", chunks=(2,))
        return found

    monkeypatch.setattr(type(root), "__contains__", racing_contains)
    if kind == "group":
        node: Any = root.require_group("same")
        assert dict(node.attrs) == {"by": "other"}
    else:
        node = root.require_array("same", shape=(4,), dtype="i4")
        assert node.shape == (4,)


@pytest.mark.parametrize("most", [1, 2, 4])
def test_recent_documents_keep_the_last_few_by_their_bytes(most: int) -> None:
    from gpuzarr.hierarchy import RecentDocuments

    recent: RecentDocuments[int] = RecentDocuments(most)
    assert not recent and recent.known(b"x") is None
    for i in range(6):
        recent.note(b"doc%d" % i, i)
    recent.note(b"doc5", 50)  # the same document again: what is known of it now, once
    kept = [i for i in range(6) if recent.known(b"doc%d" % i) is not None]
    assert kept == list(range(6))[-most:]
    assert recent.known(b"doc5") == 50


@pytest.mark.parametrize("name", [Ellipsis, 0, b"x", None])
def test_a_member_name_that_is_no_string_is_a_metadata_error(name: Any) -> None:
    """``group[...]`` (meant for an array) raised a bare AttributeError from deep inside."""
    group = gpuzarr.open_group(gpuzarr.MemoryStore(), mode="w")
    for call in (
        lambda: group[name],
        lambda: group.create_array(name, shape=(2,), dtype="i1"),
        lambda: group.create_group(name),
        lambda: group.__delitem__(name),
    ):
        with pytest.raises(gpuzarr.errors.MetadataError, match="expected a string"):
            call()


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("name", ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"])
def test_a_new_member_may_not_take_a_metadata_documents_name(zarr_format: int, name: str) -> None:
    group = gpuzarr.open_group(gpuzarr.MemoryStore(), mode="w", zarr_format=zarr_format)
    with pytest.raises(gpuzarr.errors.MetadataError, match="metadata document"):
        group.create_array(name, shape=(2,), dtype="i1")
    with pytest.raises(gpuzarr.errors.MetadataError, match="metadata document"):
        group.create_group(name)
    assert list(group) == []


def test_require_on_a_consolidated_handle_takes_what_another_process_made(tmp_path: Path) -> None:
    """The handle's record did not have the node another process made since, so require_group
    and require_array raised ContainsNodeError instead of returning it."""
    import subprocess
    import sys

    path = str(tmp_path / "g.zarr")
    gpuzarr.open_group(path, mode="w")
    gpuzarr.consolidate_metadata(path)
    handle = gpuzarr.open_group(path, mode="a")
    assert handle.consolidated is not None
    code = (
        "import gpuzarr\n"
        f"g = gpuzarr.open_group({path!r}, mode='a')\n"
        "g.require_group('x')\n"
        "g.require_array('y', shape=(3,), dtype='i2')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert isinstance(handle.require_group("x"), gpuzarr.Group)
    made = handle.require_array("y", shape=(3,), dtype="i2")
    assert made.shape == (3,) and made.dtype == np.dtype("i2")
