"""Consolidated metadata: the documents gpuzarr writes, opening a hierarchy from them, and
keeping them true through every metadata write gpuzarr makes (zarr-python interop is in
tests/integration/test_consolidated_interop.py)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GroupNotFoundError, InvalidArgumentError, MetadataError, ReadOnlyError

if TYPE_CHECKING:
    from collections.abc import Callable


def _json(store: gpuzarr.Store, key: str) -> Any:
    raw = store.get(key)
    assert raw is not None, key
    return json.loads(bytes(raw))


def _build(store: gpuzarr.Store, zarr_format: int) -> gpuzarr.Group:
    """root{a, B{}, sub{b, e{}}} with attributes and data."""
    root = gpuzarr.create_group(store, zarr_format=zarr_format, attributes={"title": "root"})
    root.create_array("a", shape=(4,), dtype="int32", chunks=(2,), attributes={"units": "m"})[...] = np.arange(4)
    root.create_group("B")
    sub = root.create_group("sub", attributes={"level": 1})
    sub.create_array("b", shape=(2, 3), dtype="float64", chunks=(2, 3), fill_value=0.5)[0, :] = 7
    sub.create_group("e")
    return root


def _tree(group: gpuzarr.Group) -> dict[str, Any]:
    """Every node below ``group`` as (kind, shape, attributes), and the group's own attributes."""
    out: dict[str, Any] = {"": dict(group.attrs)}
    for name, node in group.members(recursive=True):
        shape = node.shape if isinstance(node, gpuzarr.Array) else None
        out[name] = (type(node).__name__, shape, dict(node.attrs))
    return out


def _stored_tree(store: gpuzarr.Store) -> dict[str, Any]:
    return _tree(gpuzarr.open_group(store, mode="r", use_consolidated=False))


def _consolidated_tree(store: gpuzarr.Store) -> dict[str, Any]:
    return _tree(gpuzarr.open_consolidated(store, mode="r"))


# -- the documents ----------------------------------------------------------------------------------


def test_v3_member_in_the_group_document(store: gpuzarr.Store) -> None:
    _build(store, 3)
    sub_before = _json(store, "sub/zarr.json")
    group = gpuzarr.consolidate_metadata(store)
    doc = _json(store, "zarr.json")
    assert (doc["zarr_format"], doc["node_type"], doc["attributes"]) == (3, "group", {"title": "root"})
    member = doc["consolidated_metadata"]
    assert (member["kind"], member["must_understand"]) == ("inline", False)
    # zarr-python's order: by depth, then case-folded name; the paths are flat.
    assert list(member["metadata"]) == ["a", "B", "sub", "sub/b", "sub/e"]
    assert member["metadata"]["a"] == _json(store, "a/zarr.json")
    empty = {"kind": "inline", "must_understand": False, "metadata": {}}
    assert member["metadata"]["sub"] == {**sub_before, "consolidated_metadata": empty}
    assert _json(store, "sub/zarr.json") == sub_before  # only the consolidating group changes
    assert group.consolidated and group.zarr_format == 3 and dict(group.attrs) == {"title": "root"}


def test_v2_zmetadata_beside_the_group(store: gpuzarr.Store) -> None:
    _build(store, 2)
    gpuzarr.consolidate_metadata(store, zarr_format=2)
    doc = _json(store, ".zmetadata")
    assert doc["zarr_consolidated_format"] == 1
    metadata = doc["metadata"]
    assert list(metadata) == [
        ".zgroup", ".zattrs",
        "a/.zattrs", "a/.zarray", "B/.zattrs", "B/.zgroup", "sub/.zattrs", "sub/.zgroup",
        "sub/b/.zattrs", "sub/b/.zarray", "sub/e/.zattrs", "sub/e/.zgroup",
    ]  # fmt: skip
    assert metadata[".zattrs"] == {"title": "root"} and metadata["sub/.zattrs"] == {"level": 1}
    assert metadata["a/.zarray"] == _json(store, "a/.zarray")
    assert metadata["a/.zattrs"] == {"units": "m"}
    assert metadata["sub/.zgroup"]["zarr_format"] == 2


def test_consolidating_a_subgroup_records_only_its_descendants(store: gpuzarr.Store, zarr_format: int) -> None:
    _build(store, zarr_format)
    sub = gpuzarr.consolidate_metadata(store, path="sub")
    assert sub.path == "sub" and sub.consolidated
    assert [n for n, _ in sub.members(recursive=True)] == ["b", "e"]
    root = gpuzarr.open_group(store, mode="r")
    assert not root.consolidated
    assert root["sub"].consolidated  # a member group opens with its own consolidated metadata


def test_implicit_groups_are_left_out(store: gpuzarr.Store) -> None:
    # zarr-python skips a directory without metadata, and everything below it.
    gpuzarr.create_group(store)
    gpuzarr.create(store, path="imp/x", shape=(2,), dtype="int8")
    store.erase("imp/zarr.json")
    gpuzarr.create(store, path="y", shape=(2,), dtype="int8")
    group = gpuzarr.consolidate_metadata(store)
    assert list(_json(store, "zarr.json")["consolidated_metadata"]["metadata"]) == ["y"]
    assert list(group) == ["y"]


# -- opening ----------------------------------------------------------------------------------------


class CountingStore(gpuzarr.MemoryStore):
    """Counts every read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, key, byte_range=None):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().get(key, byte_range)

    def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().get_into(key, buffer_for, start, length)

    def list_prefix(self, prefix):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().list_prefix(prefix)


def _reads(store: CountingStore, **options: Any) -> tuple[int, int]:
    """(reads to open the root group, reads to open every node below it)."""
    store.reads = 0
    group = gpuzarr.open_group(store, mode="r+", **options)  # "r" would wrap the store, uncounted
    opening = store.reads
    for _name, node in group.members(recursive=True):
        assert isinstance(node, gpuzarr.Group) or node.shape
    return opening, store.reads - opening


def test_members_open_from_one_document(zarr_format: int) -> None:
    store = CountingStore()
    root = _build(store, zarr_format)
    for i in range(6):
        root.create_array(f"more/x{i}", shape=(3,), dtype="int16")
    gpuzarr.consolidate_metadata(store)
    opening, members = _reads(store)
    # v3: zarr.json; v2: the .zarray probe, .zgroup, .zattrs, .zmetadata (and zarr.json first).
    assert (opening, members) == ((1, 0) if zarr_format == 3 else (5, 0))
    # Without: each of the 13 nodes read (its documents once), and a listing per group.
    assert _reads(store, use_consolidated=False)[1] > 13
    root.create_array("later", shape=(1,), dtype="int8")
    assert _reads(store) == (opening, 0)


def test_array_and_group_names_come_from_the_record_without_opening_the_nodes(
    zarr_format: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = gpuzarr.MemoryStore()
    root = _build(store, zarr_format)
    root.create_array("z", shape=(2,), dtype="int8")
    gpuzarr.consolidate_metadata(store)
    plain = gpuzarr.open_group(store, mode="r", use_consolidated=False)
    expected = (list(plain.array_keys()), list(plain.group_keys()), list(plain["sub"].array_keys()))
    assert expected == (["a", "z"], ["B", "sub"], ["b"])
    group = gpuzarr.open_consolidated(store, mode="r")
    monkeypatch.setattr("gpuzarr.core.group._node", lambda *args, **kwargs: pytest.fail("a node was opened"))
    assert (list(group.array_keys()), list(group.group_keys())) == expected[:2]
    monkeypatch.undo()
    assert list(group["sub"].array_keys()) == expected[2]


def test_consolidated_metadata_is_trusted(store: gpuzarr.Store, zarr_format: int) -> None:
    # As in zarr-python: members come from the consolidated document, not from the store.
    _build(store, zarr_format)
    gpuzarr.consolidate_metadata(store)
    for key in list(store.list_prefix("sub/b/")):
        if key.rsplit("/", 1)[-1] in ("zarr.json", ".zarray", ".zattrs"):
            store.erase(key)
    other = gpuzarr.create_group(gpuzarr.MemoryStore(), zarr_format=zarr_format)
    other.create_array("hidden", shape=(1,), dtype="int8")
    for key in other.store.list_prefix("hidden/"):
        store.set(key, other.store.get(key))  # written behind gpuzarr's back
    group = gpuzarr.open_group(store, mode="r")
    assert group.consolidated
    assert "sub/b" in group and "hidden" not in group
    np.testing.assert_array_equal(group["sub/b"][0], [7, 7, 7])
    with pytest.raises(KeyError):
        group["hidden"]
    plain = gpuzarr.open_group(store, mode="r", use_consolidated=False)
    assert "sub/b" not in plain and "hidden" in plain
    # gpuzarr.open of a group uses it too, as zarr.open does.
    opened = gpuzarr.open(store, mode="r")
    assert isinstance(opened, gpuzarr.Group) and opened.consolidated


def test_use_consolidated_true_needs_consolidated_metadata(store: gpuzarr.Store, zarr_format: int) -> None:
    _build(store, zarr_format)
    key = "zarr.json" if zarr_format == 3 else ".zmetadata"
    with pytest.raises(MetadataError, match=key):
        gpuzarr.open_group(store, mode="r", use_consolidated=True)
    with pytest.raises(MetadataError, match="use_consolidated=True"):
        gpuzarr.open_consolidated(store, mode="r")
    assert not gpuzarr.open_group(store, mode="r").consolidated


def test_use_consolidated_values() -> None:
    store = gpuzarr.MemoryStore()
    gpuzarr.create_group(store)
    with pytest.raises(InvalidArgumentError, match="use_consolidated"):
        gpuzarr.open_group(store, use_consolidated=".zmetadata")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="use_consolidated must be True"):
        gpuzarr.open_consolidated(store, use_consolidated=False)


def test_consolidate_errors(tmp_path: Path) -> None:
    store = gpuzarr.LocalStore(tmp_path / "x.zarr")
    with pytest.raises(GroupNotFoundError, match="no group at '/'"):
        gpuzarr.consolidate_metadata(store)
    gpuzarr.create_group(store, zarr_format=2).create_array("arr", shape=(1,), dtype="int8")
    with pytest.raises(GroupNotFoundError, match="'arr'"):
        gpuzarr.consolidate_metadata(store, path="arr")
    with pytest.raises(GroupNotFoundError, match="Zarr v3 group"):
        gpuzarr.consolidate_metadata(store, zarr_format=3)
    with pytest.raises(MetadataError, match="zarr_format"):
        gpuzarr.consolidate_metadata(store, zarr_format=4)
    with pytest.raises(ReadOnlyError):
        gpuzarr.consolidate_metadata(gpuzarr.LocalStore(store.root, read_only=True))
    assert store.get(".zmetadata") is None


V3_BAD: list[tuple[Any, str]] = [
    ({"kind": "offset", "metadata": {}}, "consolidated_metadata.kind"),
    ({"kind": "inline", "metadata": []}, "consolidated_metadata.metadata"),
    ({"kind": "inline", "metadata": {"a": 1}}, r"metadata\['a'\]: expected an object"),
    ({"kind": "inline", "metadata": {"a": {"zarr_format": 2, "node_type": "array"}}}, r"\['a'\].zarr_format"),
    ({"kind": "inline", "metadata": {"a": {"zarr_format": 3, "node_type": "x"}}}, r"\['a'\].node_type"),
    ({"kind": "inline", "metadata": {"../a": {"zarr_format": 3, "node_type": "group"}}}, "not a node path"),
    ("yes", "consolidated_metadata: expected an object"),
]


def _group_document(member: Any) -> bytes:
    return json.dumps({"zarr_format": 3, "node_type": "group", "consolidated_metadata": member}).encode()


@pytest.mark.parametrize(("member", "match"), V3_BAD)
def test_malformed_v3_member(member: Any, match: str) -> None:
    store = gpuzarr.MemoryStore()
    store.set("zarr.json", _group_document(member))
    with pytest.raises(MetadataError, match=match) as info:
        gpuzarr.open_group(store, mode="r")
    assert "zarr.json" in str(info.value)
    assert not gpuzarr.open_group(store, mode="r", use_consolidated=False).consolidated


V2_BAD: list[tuple[Any, str]] = [
    ({"metadata": {}, "zarr_consolidated_format": 2}, "zarr_consolidated_format"),
    ({"metadata": None}, "metadata: expected an object"),
    ({"metadata": {"a/.zfoo": {}}}, r"metadata\['a/.zfoo'\]"),
    ({"metadata": {"a/.zattrs": {"x": 1}}}, "attributes of no array or group"),
    ({"metadata": {"a/.zarray": []}}, "expected an object"),
]


@pytest.mark.parametrize(("document", "match"), V2_BAD)
def test_malformed_v2_zmetadata(document: Any, match: str) -> None:
    store = gpuzarr.MemoryStore()
    gpuzarr.create_group(store, zarr_format=2)
    store.set(".zmetadata", json.dumps(document).encode())
    with pytest.raises(MetadataError, match=match) as info:
        gpuzarr.open_group(store, mode="r")
    assert ".zmetadata" in str(info.value)


def test_nested_form_of_the_v3_member_is_read() -> None:
    # zarr-python keeps children under their group in memory; a document in that form reads too.
    store = gpuzarr.MemoryStore()
    gpuzarr.create_group(store).create_group("g").create_array("x", shape=(3,), dtype="int8")
    x = _json(store, "g/x/zarr.json")
    g = _json(store, "g/zarr.json")
    nested = {**g, "consolidated_metadata": {"kind": "inline", "metadata": {"x": x}}}
    member = {"kind": "inline", "must_understand": False, "metadata": {"g": nested}}
    store.set("zarr.json", _group_document(member))
    group = gpuzarr.open_consolidated(store, mode="r")
    assert [n for n, _ in group.members(recursive=True)] == ["g", "g/x"]
    assert group["g/x"].shape == (3,)


# -- keeping it true --------------------------------------------------------------------------------


def _spec_create(group: gpuzarr.Group) -> None:
    driver = "zarr3" if group.zarr_format == 3 else "zarr2"
    kvstore = group.store.kvstore_json()
    gpuzarr.open({"driver": driver, "kvstore": kvstore, "path": "ts"}, shape=[3], dtype="int32", create=True)


CHANGES: dict[str, Callable[[gpuzarr.Group], Any]] = {
    "resize": lambda g: g["a"].resize(9),
    "shrink nested": lambda g: g["sub/b"].resize(1, 2),
    "array attrs": lambda g: g["a"].attrs.update(units="km", n=2),
    "root attrs": lambda g: g.attrs.update(title="new"),
    "subgroup attrs": lambda g: g["sub"].attrs.__setitem__("level", 2),
    "delete attr": lambda g: g["a"].attrs.__delitem__("units"),
    "new array": lambda g: g["sub"].create_array("c", shape=(2, 2), dtype="uint8"),
    "new group": lambda g: g.create_group("new", attributes={"k": 1}),
    "new nested": lambda g: g.create_array("p/q/r", shape=(5,), dtype="int64"),
    "require group": lambda g: g.require_group("sub/e/f"),
    "replace group": lambda g: g.create_array("sub", shape=(3,), dtype="int8", overwrite=True),
    "replace array": lambda g: g.create_group("a", overwrite=True),
    "api create": lambda g: gpuzarr.create(g.store, path="e/z", shape=(2,), dtype="int8", zarr_format=g.zarr_format),
    "api create_group": lambda g: gpuzarr.create_group(g.store, path="B/C", zarr_format=g.zarr_format),
    "tensorstore spec": _spec_create,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_metadata_writes_keep_it_true(tmp_path: Path, zarr_format: int, change: str) -> None:
    store = gpuzarr.LocalStore(tmp_path / "h.zarr")  # a spec needs a store TensorStore can name
    _build(store, zarr_format)
    group = gpuzarr.consolidate_metadata(store)
    CHANGES[change](group)
    truth = _stored_tree(store)
    assert _consolidated_tree(store) == truth
    assert _tree(group) == truth  # the handle's own view follows too
    # What gpuzarr keeps is what consolidating afresh writes.
    kept = _consolidated_tree(store)
    gpuzarr.consolidate_metadata(store)
    assert _consolidated_tree(store) == kept


@pytest.mark.parametrize("replace", ["group", "array", "spec"])
def test_a_node_replaced_by_one_of_the_other_format_leaves_the_consolidated_metadata(
    tmp_path: Path, zarr_format: int, replace: str
) -> None:
    # It stayed recorded, with what was below it, in the consolidated metadata of its old format:
    # consolidated opens listed its arrays and read them as the fill value.
    store = gpuzarr.LocalStore(tmp_path / "h.zarr")
    _build(store, zarr_format)
    group = gpuzarr.consolidate_metadata(store)
    other = 5 - zarr_format
    if replace == "group":
        gpuzarr.open_group(store, path="sub", mode="w", zarr_format=other)
    elif replace == "array":
        gpuzarr.create(store, path="sub", shape=(2,), dtype="int8", zarr_format=other, overwrite=True)
    else:
        driver = "zarr3" if other == 3 else "zarr2"
        spec = {"driver": driver, "kvstore": store.kvstore_json(), "path": "sub"}
        gpuzarr.open(spec, shape=[3], dtype="int32", create=True, delete_existing=True)
    kept = _consolidated_tree(store)
    assert not any(name == "sub" or name.startswith("sub/") for name in kept)
    assert _tree(group) == kept  # the handle's own view follows too
    assert kept == {k: v for k, v in _stored_tree(store).items() if not (k == "sub" or k.startswith("sub/"))}
    with pytest.raises(KeyError):
        gpuzarr.open_consolidated(store, mode="r")["sub/b"]
    zarr = pytest.importorskip("zarr")
    theirs = zarr.open_group(str(tmp_path / "h.zarr"), mode="r", use_consolidated=True)
    names = [n for n, _ in theirs.members(max_depth=None)]
    assert "sub/b" not in names and "a" in names


@pytest.mark.parametrize("how", ["require_group", "create_group", "attributes"])
def test_an_implicit_group_made_explicit_brings_its_descendants_into_the_consolidated_metadata(
    store: gpuzarr.Store, zarr_format: int, how: str
) -> None:
    # Its nodes became visible to a store listing, while the consolidated metadata recorded the
    # new group alone.
    root = gpuzarr.create_group(store, zarr_format=zarr_format)
    root.create_array("x/arr", shape=(3,), dtype="int8", fill_value=1)
    root.create_group("x/sub").create_array("deep", shape=(2,), dtype="int8")
    for key in ("x/zarr.json", "x/.zgroup", "x/.zattrs"):
        store.erase(key)
    group = gpuzarr.consolidate_metadata(store)
    assert "x/arr" not in _consolidated_tree(store)  # below an implicit group: left out
    if how == "require_group":
        group.require_group("x")
    elif how == "create_group":
        group.create_group("x")
    else:  # through the group opened from the store: the consolidated one does not list it
        implicit = gpuzarr.open_group(store, path="x", mode="r+", use_consolidated=False)
        implicit.attrs["now"] = "explicit"
        reopened = gpuzarr.open_group(store, path="x", mode="r", use_consolidated=False)
        assert dict(reopened.attrs) == {"now": "explicit"} and reopened.zarr_format == zarr_format
    truth = _stored_tree(store)
    assert {"x", "x/arr", "x/sub", "x/sub/deep"} <= set(truth)
    assert _consolidated_tree(store) == truth
    assert _tree(group) == truth


def test_changes_below_a_consolidated_subgroup_reach_every_consolidating_ancestor(
    store: gpuzarr.Store, zarr_format: int
) -> None:
    _build(store, zarr_format)
    gpuzarr.consolidate_metadata(store, path="sub")
    gpuzarr.consolidate_metadata(store)
    gpuzarr.open_group(store, path="sub", mode="r+", use_consolidated=False)["b"].resize(4, 4)
    assert gpuzarr.open_consolidated(store, mode="r")["sub/b"].shape == (4, 4)
    assert gpuzarr.open_consolidated(store, path="sub", mode="r")["b"].shape == (4, 4)


def test_group_attributes_keep_the_v3_member(store: gpuzarr.Store) -> None:
    _build(store, 3)
    gpuzarr.consolidate_metadata(store)
    gpuzarr.open_group(store, mode="r+", use_consolidated=False).attrs["title"] = "t"
    doc = _json(store, "zarr.json")
    assert doc["attributes"] == {"title": "t"}
    assert "sub/b" in doc["consolidated_metadata"]["metadata"]


def test_a_local_store_opened_inside_the_hierarchy(tmp_path: Path, zarr_format: int) -> None:
    # gpuzarr.open("h.zarr/sub/b") roots its store at the array: the groups above are still its
    # ancestors.
    path = tmp_path / "h.zarr"
    _build(gpuzarr.LocalStore(path), zarr_format)
    gpuzarr.consolidate_metadata(str(path))
    array = gpuzarr.open(str(path / "sub" / "b"), mode="r+")
    assert isinstance(array, gpuzarr.Array)
    array.resize(6, 3)
    array.attrs["where"] = "inside"
    inner = gpuzarr.open_group(str(path / "sub"), mode="r+", use_consolidated=False)
    inner.create_array("c", shape=(1,), dtype="int8")
    truth = _stored_tree(gpuzarr.LocalStore(path))
    assert _consolidated_tree(gpuzarr.LocalStore(path)) == truth
    assert truth["sub/b"] == ("Array", (6, 3), {"where": "inside"}) and "sub/c" in truth


def test_handles_on_one_store_share_what_they_see(tmp_path: Path) -> None:
    path = tmp_path / "h.zarr"
    _build(gpuzarr.LocalStore(path), 3)
    group = gpuzarr.consolidate_metadata(str(path))
    array = group["a"]
    array.resize(2)
    assert group["a"].shape == (2,)  # through the same group
    gpuzarr.open(str(path / "a"), mode="r+").resize(3)  # another handle on the same directory
    assert group["a"].shape == (3,)


def test_a_view_opened_inside_the_hierarchy_sees_writes_through_its_root(tmp_path: Path, zarr_format: int) -> None:
    """A group opened at "h.zarr/sub" (its store rooted there) and one at "h.zarr": what the
    outer one changes below "sub" reaches the inner one's view."""
    path = tmp_path / "h.zarr"
    _build(gpuzarr.LocalStore(path), zarr_format)
    gpuzarr.consolidate_metadata(str(path / "sub"))
    gpuzarr.consolidate_metadata(str(path))
    inner = gpuzarr.open_group(str(path / "sub"), mode="r")
    outer = gpuzarr.open_group(str(path), mode="r+")
    assert inner.consolidated and "b" in inner
    outer["sub/b"].resize(7, 3)
    assert inner["b"].shape == (7, 3)
    del outer["sub/b"]
    assert "b" not in inner and "b" not in list(inner)
    with pytest.raises(KeyError):
        inner["b"]


def test_replacing_the_consolidated_group_empties_its_view(store: gpuzarr.Store, zarr_format: int) -> None:
    _build(store, zarr_format)
    group = gpuzarr.consolidate_metadata(store)
    gpuzarr.create_group(store, zarr_format=zarr_format, overwrite=True)
    assert list(group) == []
    assert not gpuzarr.open_group(store, mode="r").consolidated


def test_pickled_group_keeps_its_view() -> None:
    store = gpuzarr.MemoryStore()
    _build(store, 3)
    group = pickle.loads(pickle.dumps(gpuzarr.consolidate_metadata(store)))
    assert group.consolidated
    assert [n for n, _ in group.members(recursive=True)] == ["B", "a", "sub", "sub/b", "sub/e"]
    np.testing.assert_array_equal(group["a"][...], np.arange(4))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_array_recorded_wrongly_in_consolidated_metadata_is_named_by_its_entry(
    tmp_path: Path, zarr_format: int
) -> None:
    """The bad document is the group's consolidated metadata, not the array's own (which may be
    fine): the error names the entry."""
    import json

    path = tmp_path / "g.zarr"
    g = gpuzarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    g.create_array("x", shape=(4,), dtype="i1", chunks=(2,))
    gpuzarr.consolidate_metadata(str(path))
    if zarr_format == 3:
        doc = json.loads((path / "zarr.json").read_text())
        del doc["consolidated_metadata"]["metadata"]["x"]["data_type"]
        (path / "zarr.json").write_text(json.dumps(doc))
        message = r"^zarr\.json: consolidated_metadata\.metadata\['x'\]: data_type"
    else:
        doc = json.loads((path / ".zmetadata").read_text())
        del doc["metadata"]["x/.zarray"]["dtype"]
        (path / ".zmetadata").write_text(json.dumps(doc))
        message = r"^\.zmetadata: metadata\['x/\.zarray'\]: dtype"
    with pytest.raises(MetadataError, match=message):
        gpuzarr.open_group(str(path), mode="r")["x"]
    assert gpuzarr.open_group(str(path), mode="r", use_consolidated=False)["x"].shape == (4,)


def test_a_bad_codec_in_a_consolidated_entry_is_named_by_the_entry(tmp_path: Path) -> None:
    """The codec chain is resolved after the document is parsed: its error named the array's
    own zarr.json, which is fine, instead of the group's entry that holds the bad codec."""
    path = str(tmp_path / "c.zarr")
    group = gpuzarr.open_group(path, mode="w")
    group.create_array("a", shape=(4,), dtype="f4", chunks=(2,))
    gpuzarr.consolidate_metadata(path)
    document = json.loads((tmp_path / "c.zarr" / "zarr.json").read_text())
    document["consolidated_metadata"]["metadata"]["a"]["codecs"].append({"name": "foo"})
    (tmp_path / "c.zarr" / "zarr.json").write_text(json.dumps(document))
    entry = r"^zarr\.json: consolidated_metadata\.metadata\['a'\]: codecs\[\d\]: unknown codec 'foo'"
    with pytest.raises(MetadataError, match=entry):
        gpuzarr.open_consolidated(path, mode="r")["a"]


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("zarr_format", [3, 2])
def test_nodes_created_at_once_are_all_recorded(
    tmp_path: Path, request: pytest.FixtureRequest, where: str, zarr_format: int
) -> None:
    """Threads creating arrays below one consolidated group each rewrote its metadata from what
    they had read: 3 of 16 entries were left, and the group's listing hid the others."""
    from concurrent.futures import ThreadPoolExecutor

    if where == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        url, options = f"{bucket.url}/g.zarr", bucket.storage_options()
    else:
        url, options = str(tmp_path / "g.zarr"), None
    gpuzarr.group(url, zarr_format=zarr_format, storage_options=options)
    gpuzarr.consolidate_metadata(url, storage_options=options)

    def make(i: int) -> None:
        group = gpuzarr.open_group(url, mode="a", storage_options=options)
        group.create_array(f"a{i:02d}", shape=(2,), dtype="i4")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(16)))
    names = sorted(gpuzarr.open_group(url, mode="r", storage_options=options).array_keys())
    assert names == [f"a{i:02d}" for i in range(16)]


def test_members_can_leave_child_groups_consolidated_metadata_unread(tmp_path: Path) -> None:
    """zarr-python's ``members(use_consolidated_for_children=False)`` (a TypeError here before):
    a child group's stale consolidated metadata is then not what its children are read from."""
    import zarr

    path = str(tmp_path / "g.zarr")
    gpuzarr.group(path).create_group("child").create_array("a", shape=(2,), dtype="i1")
    gpuzarr.consolidate_metadata(f"{path}/child")
    # zarr-python leaves the child's consolidated metadata as it was: stale
    zarr.open_group(f"{path}/child", mode="a", use_consolidated=False).create_array("b", shape=(2,), dtype="i1")

    def members(library: Any, **options: Any) -> list[str]:
        return sorted(p for p, _ in library.open_group(path, mode="r").members(max_depth=None, **options))

    assert members(gpuzarr) == ["child", "child/a"]  # the child's consolidated metadata
    fresh = members(gpuzarr, use_consolidated_for_children=False)
    assert fresh == ["child", "child/a", "child/b"]  # (zarr-python 3.1.6 itself raises KeyError 'b' here)


def test_consolidate_reads_children_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each child's metadata was read one after the other: on an object store 200 children at
    20 ms a request took 4 s. The document is the same, nested groups included."""
    import threading
    import time

    from gpuzarr import consolidated as consolidated_module

    store = gpuzarr.MemoryStore()
    root = gpuzarr.group(store)
    for i in range(40):
        root.create_array(f"a{i:02d}", shape=(2,), dtype="i1")
    sub = root.create_group("g")
    for i in range(3):
        sub.create_array(f"b{i}", shape=(3,), dtype="i2")
    in_flight = [0, 0]
    lock = threading.Lock()
    read_node = consolidated_module.read_node

    def slow_read(store: Any, path: str, **kwargs: Any) -> Any:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        time.sleep(0.005)
        with lock:
            in_flight[0] -= 1
        return read_node(store, path, **kwargs)

    monkeypatch.setattr(consolidated_module, "read_node", slow_read)
    monkeypatch.setattr(store, "io_concurrency", 8, raising=False)
    gpuzarr.consolidate_metadata(store)
    assert in_flight[1] > 1  # several at once
    reopened = gpuzarr.open_group(store, mode="r")
    assert sorted(name for name, _ in reopened.members(max_depth=None)) == sorted(
        [f"a{i:02d}" for i in range(40)] + ["g"] + [f"g/b{i}" for i in range(3)]
    )


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_groups_attribute_change_keeps_a_member_update_made_meanwhile(zarr_format: int) -> None:
    """A group's attributes changed in one thread while another resized a member: the
    attribute write read the consolidated document, the member's update of it landed, and
    the attribute write put the old member back (reopened, the array had its old shape and
    the rows written past it read as the fill value)."""
    import threading

    own = ".zmetadata" if zarr_format == 2 else "zarr.json"
    resized = threading.Event()

    class RacingStore(gpuzarr.MemoryStore):
        racing = False

        def set(self, key: str, value: Any) -> None:
            if self.racing and key == own:
                self.racing = False
                # Another thread resizes the member now; with the document's update held as
                # one, it waits for this write to end.
                threading.Thread(target=lambda: (member.resize((8,)), resized.set())).start()
                resized.wait(0.3)
            super().set(key, value)

    store = RacingStore()
    root = gpuzarr.create_group(store, zarr_format=zarr_format)
    root.create_array("x", shape=(4,), dtype="i4", chunks=(2,), fill_value=0)
    gpuzarr.consolidate_metadata(store)
    root = gpuzarr.open_group(store, mode="r+")
    member = gpuzarr.open_array(store, path="x", mode="r+")
    store.racing = True
    root.attrs["title"] = "t"
    assert resized.wait(5)
    reopened = gpuzarr.open_group(store, mode="r")
    assert reopened["x"].shape == (8,)
    assert dict(reopened.attrs) == {"title": "t"}


def test_a_child_erased_while_the_members_are_walked_is_left_out() -> None:
    """Another thread erased a child between the listing of the names and its look-up: the
    walk raised KeyError (a group read from the store leaves it out)."""
    store = gpuzarr.MemoryStore()
    root = gpuzarr.create_group(store)
    for name in ("a", "b", "c"):
        root.create_array(name, shape=(2,), dtype="i4")
    gpuzarr.consolidate_metadata(store)
    group = gpuzarr.open_group(store, mode="r+")
    walk = group.arrays()
    first_name, _ = next(walk)
    del group["b"]
    assert [first_name] + [name for name, _ in walk] == ["a", "c"]


def _interrupt_at_call_of(name: str) -> None:
    """Raise KeyboardInterrupt at the next call of a function named ``name`` (a function's entry
    is where CPython delivers a signal, as a Ctrl-C would land)."""
    import sys

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == name:
            sys.settrace(None)
            raise KeyboardInterrupt

    sys.settrace(tracer)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("change", ["resize", "erase"])
def test_an_interrupt_between_a_metadata_write_and_its_record_leaves_consolidated_metadata_true(
    zarr_format: int, change: str
) -> None:
    """Ctrl-C after a node's own document changed and before the consolidated metadata above
    recorded it: the group reopened the array with its old shape (or listed the erased one)
    until the node's next change."""
    import sys

    store = gpuzarr.MemoryStore()
    root = gpuzarr.create_group(store, zarr_format=zarr_format)
    root.create_array("a", shape=(4, 8), dtype="i4", chunks=(2, 8))
    gpuzarr.consolidate_metadata(store)
    group = gpuzarr.open_group(store, mode="r+")
    _interrupt_at_call_of("record_metadata_write" if change == "resize" else "record_node_erased")
    try:
        with pytest.raises(KeyboardInterrupt):
            if change == "resize":
                group["a"].resize((8, 8))
            else:
                del group["a"]
    finally:
        sys.settrace(None)
    reopened = gpuzarr.open_group(store, mode="r")
    if change == "resize":
        assert reopened["a"].shape == (8, 8)
    else:
        assert list(reopened) == []


# -- updates of a large record: parsed and encoded once, then changed entry by entry ----------


def _large_record(path: str, n: int, zarr_format: int = 3) -> gpuzarr.Group:
    """A consolidated group at ``path`` of ``n`` arrays created one by one (its zarr.json past
    INDENTED_MAX_BYTES well before the end), some with attributes JSON writes specially."""
    group = gpuzarr.open_group(path, mode="w", zarr_format=zarr_format, attributes={"title": "ünï"})
    gpuzarr.consolidate_metadata(path)
    group = gpuzarr.open_group(path, mode="r+")
    for i in range(n):
        attributes = {"i": i, "text": 'q"\\é\n'} if i % 7 == 0 else {}
        group.create_array(f"a{i}", shape=(i + 1,), dtype="int16", attributes=attributes)
        if i % 50 == 0:
            group.create_group(f"g{i}").create_array("inner", shape=(2,), dtype="u1")
    return group


def _consolidated_afresh(path: str) -> bytes:
    """The group's zarr.json as consolidating from scratch writes it."""
    from gpuzarr import consolidated

    gpuzarr.consolidate_metadata(path)
    afresh = Path(path, "zarr.json").read_bytes()
    assert len(afresh) > consolidated.INDENTED_MAX_BYTES
    return afresh


def test_a_record_updated_array_by_array_is_the_one_consolidating_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")
    _large_record(path, 260)
    written = Path(path, "zarr.json").read_bytes()
    assert written == json.dumps(json.loads(written)).encode()
    assert written == _consolidated_afresh(path)
    doc = json.loads(written)["consolidated_metadata"]["metadata"]
    assert len(doc) == 260 + 2 * 6
    assert doc["a7"]["attributes"] == {"i": 7, "text": 'q"\\é\n'} and doc["g50/inner"]["shape"] == [2]
    zarr = pytest.importorskip("zarr")
    assert len(list(zarr.open_group(path, mode="r", use_consolidated=True).array_keys())) == 260


def test_a_record_another_writer_changed_is_read_again(tmp_path: Path) -> None:
    """The record kept from the last update is used only while the stored document is the one
    written: another writer's change (here zarr-python's attributes and a node it recorded)
    is read, and kept."""
    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 200)
    with open(f"{path}/zarr.json") as f:
        doc = json.load(f)
    doc["attributes"]["by"] = "another writer"
    doc["attributes"]["nan"] = float("nan")  # as zarr-python writes it: NaN
    doc["consolidated_metadata"]["metadata"]["a3"]["attributes"] = {"changed": True}
    with open(f"{path}/zarr.json", "w") as f:
        json.dump(doc, f)
    group.create_array("after", shape=(3,), dtype="f4")
    reopened = gpuzarr.open_group(path, mode="r", use_consolidated=True)
    assert reopened.attrs["by"] == "another writer"
    assert dict(reopened["a3"].attrs) == {"changed": True}
    assert reopened["after"].shape == (3,) and "a199" in reopened
    assert np.isnan(reopened.attrs["nan"])
    group.create_array("later", shape=(1,), dtype="f4")  # from the record kept, NaN and all
    written = Path(path, "zarr.json").read_bytes()
    # What json writes of the document, byte for byte (not what consolidating afresh writes:
    # the other writer's change to a3's record is not in a3's own zarr.json).
    assert written == json.dumps(json.loads(written), allow_nan=True).encode()
    assert "later" in json.loads(written)["consolidated_metadata"]["metadata"]


def test_a_node_others_nested_too_deep_is_refused_in_a_kept_record(tmp_path: Path) -> None:
    """The nesting of a changed entry is checked where the rest of a kept record is not: a node
    another library wrote with attributes 125 deep, recorded, would nest the group's zarr.json
    deeper than readers take."""
    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 3)
    group.create_array("deep", shape=(2,), dtype="i1")  # the record is kept from here
    key = f"{path}/deep/zarr.json"
    with open(key) as f:
        doc = json.load(f)
    doc["attributes"] = {"d": "@"}
    with open(key, "w") as f:
        f.write(json.dumps(doc).replace('"@"', "[" * 125 + "]" * 125))
    with pytest.raises(MetadataError, match=r"consolidated metadata \(zarr.json\): JSON nests deeper"):
        gpuzarr.open_array(f"{path}/deep", mode="r+").resize((4,))
    recorded = json.loads(Path(path, "zarr.json").read_text())["consolidated_metadata"]["metadata"]["deep"]
    assert "d" not in recorded["attributes"]


def _sizes_through(monkeypatch: Any, name: str, *modules: Any, of_result: bool = False) -> list[int]:
    """Wrap the function ``name`` of ``modules`` (one function, bound in each) so that each call
    records a size: of its first argument (a document parsed), or ``of_result`` (one encoded)."""
    real = getattr(modules[0], name)
    sizes: list[int] = []

    def recording(*args: Any) -> Any:
        result = real(*args)
        sizes.append(len(result if of_result else args[0]))
        return result

    for module in modules:
        monkeypatch.setattr(module, name, recording)
    return sizes


def test_a_kept_record_is_neither_parsed_nor_encoded_whole_again(tmp_path: Path, monkeypatch: Any) -> None:
    """Each array created in a consolidated group parsed the group's whole zarr.json (twice:
    its parent checked too) and encoded every entry again: the record written last is kept,
    and only the new entry is encoded."""
    from gpuzarr import consolidated

    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 220)  # compact: past INDENTED_MAX_BYTES (indented, encoded whole)
    parsed = _sizes_through(monkeypatch, "parse_json_document", consolidated, gpuzarr.hierarchy)
    encoded = _sizes_through(monkeypatch, "_dumps", consolidated, of_result=True)
    for i in range(10):
        group.create_array(f"new{i}", shape=(2,), dtype="u1")
    assert not [n for n in parsed if n > consolidated.INDENTED_MAX_BYTES]
    # Each new entry and the group's own members encoded, never the whole record of 220 arrays.
    assert encoded and max(encoded) < 4096, sorted(encoded)[-3:]


@pytest.mark.parametrize("arrays", [0, 220], ids=["indented", "compact"])
def test_attributes_changed_in_memory_only_stay_out_of_the_record(tmp_path: Path, arrays: int) -> None:
    """The record kept from one update to the next holds copies: attributes an open group or
    array hands out, changed in place and never written, are not recorded by a later update."""
    path = str(tmp_path / "g.zarr")
    group = _large_record(path, arrays)
    group.create_group("sub", attributes={"d": {"k": 1}})
    group.create_array("arr", shape=(1,), dtype="u1", attributes={"lst": [1]})
    group["sub"].attrs["d"]["k"] = "changed in memory"
    group["arr"].attrs["lst"].append(2)
    group.create_array("x", shape=(1,), dtype="u1")
    group.create_array("y", shape=(1,), dtype="u1")
    recorded = json.loads(Path(path, "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    assert recorded["sub"]["attributes"] == {"d": {"k": 1}}
    assert recorded["arr"]["attributes"] == {"lst": [1]}


@pytest.mark.parametrize("root", ["{not json", "", '{"zarr_format": 7, "node_type": "group"}'])
def test_a_damaged_root_document_stops_a_node_created_below_it(tmp_path: Path, root: str) -> None:
    """Before anything is written, even where this process wrote the root last."""
    path = tmp_path / "g.zarr"
    group = _large_record(str(path), 2)
    (path / "zarr.json").write_text(root)
    with pytest.raises(MetadataError, match=r"zarr\.json"):
        group.create_array("a/child", shape=(2,), dtype="u1")
    assert not (path / "a").exists()


def test_a_kept_record_serves_arrays_created_by_path(tmp_path: Path, monkeypatch: Any) -> None:
    """``create_array(path, name=...)`` opens the path anew for each array: a LocalStore of the
    same directory finds the record kept all the same (it parsed the whole zarr.json each time)."""
    from gpuzarr import consolidated

    path = str(tmp_path / "g.zarr")
    _large_record(path, 220)
    parsed = _sizes_through(monkeypatch, "parse_json_document", consolidated, gpuzarr.hierarchy)
    for i in range(5):
        gpuzarr.create_array(path, name=f"by_path{i}", shape=(2,), dtype="u1")
    assert len([n for n in parsed if n > consolidated.INDENTED_MAX_BYTES]) <= 1  # the first, at most
    recorded = json.loads(Path(path, "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    assert all(f"by_path{i}" in recorded for i in range(5))


# -- the same for a v2 group's .zmetadata -------------------------------------------------------


def test_a_v2_record_updated_array_by_array_is_the_one_consolidating_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 120, zarr_format=2)
    group.attrs["later"] = [1, 2]  # the group's own attributes, read afresh for each update
    group.create_array("last", shape=(2,), dtype="f4")
    written = Path(path, ".zmetadata").read_bytes()
    assert written == json.dumps(json.loads(written)).encode()
    gpuzarr.consolidate_metadata(path)
    assert written == Path(path, ".zmetadata").read_bytes()
    zarr = pytest.importorskip("zarr")
    reopened = zarr.open_group(path, mode="r", use_consolidated=True)
    assert len(list(reopened.array_keys())) == 121 and reopened.attrs["later"] == [1, 2]


def test_a_kept_v2_record_is_neither_parsed_nor_encoded_whole_again(tmp_path: Path, monkeypatch: Any) -> None:
    from gpuzarr import consolidated

    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 150, zarr_format=2)
    parsed = _sizes_through(monkeypatch, "parse_v2_document", consolidated)
    encoded = _sizes_through(monkeypatch, "_dumps", consolidated, of_result=True)
    for i in range(10):
        group.create_array(f"new{i}", shape=(2,), dtype="u1")
    assert not parsed
    assert encoded and max(encoded) < 4096, sorted(encoded)[-3:]


def test_a_v2_record_another_writer_changed_is_read_again(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 60, zarr_format=2)
    document = json.loads(Path(path, ".zmetadata").read_text())
    document["metadata"]["a3/.zattrs"] = {"changed": True}
    Path(path, ".zmetadata").write_text(json.dumps(document))
    group.create_array("after", shape=(3,), dtype="f4")
    reopened = gpuzarr.open_group(path, mode="r", use_consolidated=True)
    assert dict(reopened["a3"].attrs) == {"changed": True} and reopened["after"].shape == (3,)


def test_v2_attributes_changed_in_memory_only_stay_out_of_the_record(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")
    group = _large_record(path, 3, zarr_format=2)
    group.create_array("arr", shape=(1,), dtype="u1", attributes={"lst": [1]})
    group["arr"].attrs["lst"].append(2)
    group.create_array("x", shape=(1,), dtype="u1")
    group.create_array("y", shape=(1,), dtype="u1")
    recorded = json.loads(Path(path, ".zmetadata").read_text())["metadata"]
    assert recorded["arr/.zattrs"] == {"lst": [1]}


def test_a_v2_node_others_nested_too_deep_is_refused_in_a_kept_record(tmp_path: Path) -> None:
    """Attributes 126 deep in a node's own .zattrs read; recorded, they would nest the
    .zmetadata deeper than readers take."""
    path = tmp_path / "g.zarr"
    group = _large_record(str(path), 3, zarr_format=2)
    group.create_array("deep", shape=(2,), dtype="i1")  # the record is kept from here
    (path / "deep" / ".zattrs").write_text(json.dumps({"d": "@"}).replace('"@"', "[" * 126 + "]" * 126))
    with pytest.raises(MetadataError, match=r"consolidated metadata \(\.zmetadata\): JSON nests deeper"):
        gpuzarr.open_array(str(path / "deep"), mode="r+").resize((4,))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_parent_written_over_nodes_already_there_records_them(tmp_path: Path, zarr_format: int) -> None:
    """An implicit group (nodes below it, no document of its own) made explicit as the parent of
    a new node: the nodes already below it are recorded with it, as consolidating afresh does."""
    path = tmp_path / "g.zarr"
    gpuzarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    gpuzarr.create_array(str(path / "imp" / "arr"), shape=(1,), dtype="u1", zarr_format=zarr_format)
    for name in (".zgroup", ".zattrs", "zarr.json"):  # "imp" implicit: no document of its own
        (path / "imp" / name).unlink(missing_ok=True)
    gpuzarr.consolidate_metadata(str(path))
    gpuzarr.open_group(str(path), mode="r+").create_array("imp/new", shape=(1,), dtype="u1")
    key = "zarr.json" if zarr_format == 3 else ".zmetadata"
    kept = (path / key).read_bytes()
    gpuzarr.consolidate_metadata(str(path))
    assert kept == (path / key).read_bytes()
    reopened = gpuzarr.open_group(str(path), mode="r", use_consolidated=True)
    assert sorted(reopened["imp"].array_keys()) == ["arr", "new"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_names_that_fold_alike_are_listed_as_consolidating_afresh_lists_them(tmp_path: Path, zarr_format: int) -> None:
    path = tmp_path / "g.zarr"
    gpuzarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    gpuzarr.consolidate_metadata(str(path))
    group = gpuzarr.open_group(str(path), mode="r+")
    for name in ("a", "A", "\ufb01", "fi", "b"):  # "ﬁ" folds (NFKC) to "fi"
        group.create_array(name, shape=(1,), dtype="u1")
    key = "zarr.json" if zarr_format == 3 else ".zmetadata"
    kept = (path / key).read_bytes()
    gpuzarr.consolidate_metadata(str(path))
    assert kept == (path / key).read_bytes()
