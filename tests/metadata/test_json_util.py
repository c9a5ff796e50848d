"""Metadata documents nested without bound are refused with a MetadataError naming the key,
never a RecursionError from json or from a walker of the document (json_util.MAX_JSON_DEPTH)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata import json_util
from gpuzarr.metadata.json_util import MAX_JSON_DEPTH, check_depth, loads_document


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 100_000])
def test_deep_document_is_a_metadata_error_naming_the_key(depth: int) -> None:
    with pytest.raises(MetadataError, match=f"a/zarr.json: JSON nests deeper than {MAX_JSON_DEPTH} levels"):
        loads_document(nested(depth).encode(), "a/zarr.json")


def test_depth_at_the_limit_is_read() -> None:
    assert loads_document(nested(MAX_JSON_DEPTH).encode(), "k") is not None
    check_depth({"a": json.loads(nested(MAX_JSON_DEPTH - 1))}, "k")


def deep_value(depth: int) -> list[object]:
    """``depth`` nested lists, built without recursion."""
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("key", ["zarr.json", ".zattrs", ".zarray"])
def test_deep_documents_in_a_store(key: str) -> None:
    fmt = 3 if key == "zarr.json" else 2
    store = gpuzarr.MemoryStore()
    gpuzarr.create(store=store, shape=(4,), chunks=(2,), dtype="u1", zarr_format=fmt)[:] = np.arange(4)
    store.set(key, f'{{"zarr_format": {fmt}, "x": {nested(100_000)}}}'.encode())
    with pytest.raises(MetadataError, match=f"{key}: JSON nests deeper"):
        gpuzarr.open_array(store, mode="r")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_deep_consolidated_metadata(zarr_format: int) -> None:
    store = gpuzarr.MemoryStore()
    gpuzarr.group(store=store, zarr_format=zarr_format).create_array("a", shape=(2,), dtype="u1")
    gpuzarr.consolidate_metadata(store)
    key = ".zmetadata" if zarr_format == 2 else "zarr.json"
    doc = json.loads(bytes(store.get(key)))  # type: ignore[arg-type]
    if zarr_format == 2:
        doc["metadata"]["a/.zattrs"] = {"x": "@"}
    else:
        doc["consolidated_metadata"]["metadata"]["a"]["attributes"] = {"x": "@"}
    store.set(key, json.dumps(doc).replace('"@"', nested(50_000)).encode())
    with pytest.raises(MetadataError, match=f"{key}: JSON nests deeper"):
        gpuzarr.open_consolidated(store)


def test_deep_attributes_are_refused_when_written(zarr_format: int) -> None:
    with pytest.raises(MetadataError, match="attributes: JSON nests deeper"):
        attributes = {"x": deep_value(MAX_JSON_DEPTH)}
        gpuzarr.group(store=gpuzarr.MemoryStore(), zarr_format=zarr_format, attributes=attributes)
    a = gpuzarr.create(store=gpuzarr.MemoryStore(), shape=(1,), dtype="u1", zarr_format=zarr_format)
    with pytest.raises(MetadataError, match="attributes: JSON nests deeper"):
        a.attrs["x"] = deep_value(5000)


def test_an_integer_python_will_not_convert_is_a_metadata_error_naming_the_key() -> None:
    # Python refuses to convert a decimal integer of more than 4300 digits (ValueError from
    # json.loads, not a JSONDecodeError).
    raw = b'{"zarr_format": 3, "node_type": "array", "shape": [' + b"9" * 5000 + b"]}"
    with pytest.raises(MetadataError, match=r"^zarr\.json: not valid JSON \(Exceeds the limit"):
        loads_document(raw, "zarr.json")
    store = gpuzarr.MemoryStore()
    store.set("a/zarr.json", raw)
    with pytest.raises(MetadataError, match=r"^a/zarr\.json: not valid JSON"):
        gpuzarr.open(store, path="a", mode="r")


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_attributes_at_their_limit_are_read_back_consolidated(tmp_path: object, zarr_format: int) -> None:
    """Attributes were held to 128 levels on their own: their zarr.json then nested 129 deep,
    and a consolidated group 131, which gpuzarr (and zarrs) refused to read: a hierarchy gpuzarr
    had written could no longer be opened. They are held to what every document holding them
    can carry."""
    from gpuzarr.metadata.json_util import ATTRIBUTES_NESTED_BY

    limit = MAX_JSON_DEPTH - ATTRIBUTES_NESTED_BY
    path = f"{tmp_path}/g.zarr"
    group = gpuzarr.group(path, zarr_format=zarr_format)
    gpuzarr.consolidate_metadata(path)
    with pytest.raises(MetadataError, match=f"attributes: JSON nests deeper than {limit} levels"):
        group.create_array("deep", shape=(2,), dtype="i1", attributes={"d": deep_value(limit)})
    group.create_array("a", shape=(2,), dtype="i1", attributes={"d": deep_value(limit - 1)})
    gpuzarr.consolidate_metadata(path)
    for consolidated in (True, False):
        reopened = gpuzarr.open_group(path, mode="r", use_consolidated=consolidated)
        assert reopened["a"].attrs["d"] == deep_value(limit - 1)


def test_consolidating_attributes_others_nested_too_deep_is_refused(tmp_path: object) -> None:
    """A node another library wrote with attributes 126 deep reads; consolidated, its document
    would be too deep to read back: refused, naming the consolidated metadata."""
    path = f"{tmp_path}/g.zarr"
    gpuzarr.group(path).create_array("a", shape=(2,), dtype="i1")
    key = f"{path}/a/zarr.json"
    with open(key) as f:
        doc = json.loads(f.read())
    doc["attributes"] = {"d": "@"}
    with open(key, "w") as f:
        f.write(json.dumps(doc).replace('"@"', nested(125)))
    assert gpuzarr.open_array(f"{path}/a", mode="r").attrs["d"]
    with pytest.raises(MetadataError, match=r"consolidated metadata \(zarr.json\): JSON nests deeper"):
        gpuzarr.consolidate_metadata(path)
    assert gpuzarr.open_group(path, mode="r")["a"].shape == (2,)


def test_the_depth_check_takes_no_memory_per_number() -> None:
    """It pushed a (value, depth) pair per element: a 30 MB zarr.json of one long list of
    numbers took 1.3 GB to open (parsing it, 190 MB)."""
    import tracemalloc

    value = {"x": [0] * 1_000_000}
    tracemalloc.start()
    try:
        check_depth(value, "k")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def _walked_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_walked_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_walked_depth(v) for v in value), default=0)
    return 0


_LEAVES = st.one_of(st.integers(), st.none(), st.text(alphabet='[]{}"\\ab', max_size=6))
_DOCUMENTS = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4), inner, max_size=3),
    max_leaves=20,
)


@given(doc=_DOCUMENTS, block=st.sampled_from([1, 2, 5, 1 << 23]))
@settings(max_examples=300, deadline=None)
def test_the_depth_counted_on_the_text_is_the_documents(doc: Any, block: int) -> None:
    """Brackets inside strings (escaped quotes and backslashes among them) are no nesting, and
    the count carries over the blocks the text is counted in."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_util, "_DEPTH_BLOCK", block)
        assert json_util.text_depth(json.dumps(doc)) == _walked_depth(doc)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-32-be"])
def test_a_deep_document_in_utf16_or_utf32_is_refused(encoding: str) -> None:
    """json.loads reads them; counted as UTF-8 bytes, a character holding a quote's byte
    (U+2200) hid the nesting, and the attributes' depth later raised RecursionError."""
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {"k": "\u2200", "deep": [[[]]]}}
    text = json.dumps(doc, ensure_ascii=False)
    deep = text.replace("[[[]]]", "[" * 300 + "]" * 300)
    with pytest.raises(MetadataError, match="nests deeper than 128"):
        loads_document(deep.encode(encoding), "zarr.json")
    assert json_util.text_depth(text.encode(encoding)) == 5
