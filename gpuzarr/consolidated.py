"""Consolidated metadata: every node's metadata below a group, stored once at the group.

The two layouts zarr-python 3 writes (``zarr.consolidate_metadata``) and reads
(``zarr.open_consolidated``, ``use_consolidated``):

* Zarr v3: a ``consolidated_metadata`` member in the group's zarr.json,
  ``{"kind": "inline", "must_understand": false, "metadata": {path: document}}``, keys the paths
  below the group ("a", "sub", "sub/b"), sorted by depth then case-folded name; a group's
  document carries an empty ``consolidated_metadata`` of its own (its children are listed flat
  at the top).
* Zarr v2: a ``.zmetadata`` key beside ``.zgroup``,
  ``{"metadata": {".zgroup": ..., ".zattrs": ..., "a/.zattrs": ..., "a/.zarray": ...},
  "zarr_consolidated_format": 1}``.

A :class:`ConsolidatedView` is what a group opened with consolidated metadata navigates by: its
members open with no further metadata read. :func:`record_metadata_write` keeps both true after
gpuzarr writes a node's metadata (a new node, a resize, new attributes): every consolidating
ancestor's stored document, and every view opened on the same Store object, so that zarr-python
and xarray, which trust consolidated metadata, see the change.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import threading
import unicodedata
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .errors import GroupNotFoundError, InvalidKeyError, MetadataError, ReadOnlyError
from .hierarchy import (
    CHILDREN_READ_AT_ONCE,
    NodeInfo,
    RecentDocuments,
    get_document,
    node_prefix,
    read_node,
    v3_node_info,
    write_documents,
    written_groups,
)
from .metadata.json_util import MAX_JSON_DEPTH, check_depth, check_text_depth
from .metadata.v2 import ZARRAY, ZATTRS, ZGROUP
from .metadata.v3 import ZARR_JSON, parse_json_document
from .parallel import io_runner
from .store.base import validate_key
from .store.held_locks import held, released_on_interrupt
from .store.local import LocalStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    from .store.base import Store

ZMETADATA = ".zmetadata"
MEMBER = "consolidated_metadata"

__all__ = [
    "MEMBER",
    "ZMETADATA",
    "ConsolidatedView",
    "consolidate",
    "load_view",
    "record_metadata_write",
    "recorded_if_interrupted",
    "write_group_documents",
]


def _empty_member() -> dict[str, Any]:
    """What zarr-python writes for a group whose children are listed elsewhere (or that has none)."""
    return {"kind": "inline", "must_understand": False, "metadata": {}}


class ConsolidatedView:
    """The consolidated metadata of the group at ``root``: a NodeInfo per path below it.

    Shared by the group opened with it and every group opened or created through that one, and
    updated by :func:`record_metadata_write`; thread-safe.
    """

    def __init__(self, store: Store, root: str, zarr_format: int, entries: dict[str, NodeInfo]) -> None:
        self.store = store
        self.root = root.strip("/")
        self.zarr_format = zarr_format
        self._entries = entries
        self._children: dict[str, list[str]] | None = None
        self._lock = threading.Lock()
        with _live_lock:
            _live_views.add(self)

    def __getstate__(self) -> dict[str, Any]:
        # A pickled group carries its view; the copy gets a lock of its own.
        return {"store": self.store, "root": self.root, "zarr_format": self.zarr_format, "entries": self.entries()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        ConsolidatedView.__init__(self, state["store"], state["root"], state["zarr_format"], state["entries"])

    def __repr__(self) -> str:
        return f"<ConsolidatedView {self.store!r} root={self.root or '/'!r}: {len(self._entries)} nodes>"

    def relative(self, path: str) -> str | None:
        """``path`` (in the store) relative to the root: "" for the root, None when outside."""
        path = path.strip("/")
        if path == self.root:
            return ""
        if not self.root:
            return path
        return path[len(self.root) + 1 :] if path.startswith(self.root + "/") else None

    def lookup(self, path: str) -> NodeInfo | None:
        """The node at ``path`` (in the store) as recorded, or None when it is not recorded."""
        rel = self.relative(path)
        if not rel:
            return None
        with self._lock:
            return self._entries.get(rel)

    def entry_name(self, path: str) -> str:
        """Where the node at ``path`` is recorded, for messages.

        ``zarr.json: consolidated_metadata.metadata['a/b']`` of the root (v3),
        ``.zmetadata: metadata['a/b/.zarray']`` (v2).
        """
        rel = self.relative(path) or ""  # recorded nodes lie below the root
        if self.zarr_format == 3:
            return f"{node_prefix(self.root)}{ZARR_JSON}: {MEMBER}.metadata[{rel!r}]"
        return f"{node_prefix(self.root)}{ZMETADATA}: metadata[{rel + '/' + ZARRAY!r}]"

    def children(self, path: str) -> list[str]:
        """The names of the recorded children of the group at ``path`` (in the store), sorted."""
        rel = self.relative(path)
        if rel is None:
            return []
        with self._lock:
            if self._children is None:
                index: dict[str, list[str]] = {}
                for key in self._entries:
                    parent, _, name = key.rpartition("/")
                    index.setdefault(parent, []).append(name)
                self._children = {k: sorted(v) for k, v in index.items()}
            return list(self._children.get(rel, []))

    def entries(self) -> dict[str, NodeInfo]:
        """A copy of the recorded nodes, by path relative to the root."""
        with self._lock:
            return dict(self._entries)

    def _apply(self, change: _Change, root: str) -> None:
        # ``root``: this view's root in the coordinates of the change's paths.
        with self._lock:
            change.apply(self._entries, root)
            self._children = None


_live_views: weakref.WeakSet[ConsolidatedView] = weakref.WeakSet()
_live_lock = threading.Lock()


# -- reading ----------------------------------------------------------------------------------------


def _entry(info: NodeInfo) -> NodeInfo:
    """A node as consolidated metadata records it: a group's own consolidated member dropped."""
    if info.node_type == "group" and MEMBER in info.document:
        return replace(info, document={k: v for k, v in info.document.items() if k != MEMBER})
    return info


def _check_path(path: str, field: str) -> None:
    try:
        validate_key(path)
    except InvalidKeyError as exc:
        raise MetadataError(f"{field}: not a node path ({exc})") from None


def parse_v3_member(member: Any, key: str) -> dict[str, NodeInfo]:
    """The nodes of a v3 ``consolidated_metadata`` member (``key`` names its document)."""
    field = f"{key}: {MEMBER}"
    if not isinstance(member, dict):
        raise MetadataError(f"{field}: expected an object, got {type(member).__name__}")
    if member.get("kind") != "inline":
        raise MetadataError(f"{field}.kind: expected 'inline', got {member.get('kind')!r}")
    out: dict[str, NodeInfo] = {}
    _flatten_v3(member.get("metadata"), "", out, f"{field}.metadata")
    return out


def _flatten_v3(metadata: Any, prefix: str, out: dict[str, NodeInfo], field: str) -> None:
    # zarr-python writes the nodes flat; a group's own non-empty member (the nested form it
    # keeps in memory) is read too, its keys relative to that group.
    if not isinstance(metadata, dict):
        raise MetadataError(f"{field}: expected an object, got {type(metadata).__name__}")
    for name, doc in metadata.items():
        path = prefix + name
        where = f"{field}[{name!r}]"
        _check_path(path, where)
        if not isinstance(doc, dict):
            raise MetadataError(f"{where}: expected an object, got {type(doc).__name__}")
        info = v3_node_info(doc, f"{where}.")
        out[path] = _entry(info)
        nested = doc.get(MEMBER)
        if info.node_type == "group" and isinstance(nested, dict) and nested.get("metadata"):
            _flatten_v3(nested["metadata"], path + "/", out, f"{where}.{MEMBER}.metadata")


def parse_v2_document(raw: bytes, key: str) -> dict[str, NodeInfo]:
    """The nodes of a v2 ``.zmetadata`` document (``key`` is its store key)."""
    doc = parse_json_document(raw, key)
    version = doc.get("zarr_consolidated_format", 1)
    if version != 1:
        raise MetadataError(f"{key}: zarr_consolidated_format: expected 1, got {version!r}")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise MetadataError(f"{key}: metadata: expected an object, got {type(metadata).__name__}")
    parts: dict[str, dict[str, dict[str, Any]]] = {}
    for name, value in metadata.items():
        if name in (ZGROUP, ZATTRS):
            continue  # the group's own documents, read from their keys
        path, _, kind = name.rpartition("/")
        where = f"{key}: metadata[{name!r}]"
        if kind not in (ZARRAY, ZGROUP, ZATTRS) or not path:
            raise MetadataError(f"{where}: expected '<path>/.zarray', '<path>/.zgroup' or '<path>/.zattrs'")
        _check_path(path, where)
        if not isinstance(value, dict):
            raise MetadataError(f"{where}: expected an object, got {type(value).__name__}")
        parts.setdefault(path, {})[kind] = value
    out: dict[str, NodeInfo] = {}
    for path, docs in parts.items():
        attributes = docs.get(ZATTRS, {})
        if ZARRAY in docs:
            out[path] = NodeInfo("array", 2, docs[ZARRAY], attributes)
        elif ZGROUP in docs:
            out[path] = _entry(NodeInfo("group", 2, docs[ZGROUP], attributes))
        else:
            raise MetadataError(f"{key}: metadata[{path + '/' + ZATTRS!r}]: attributes of no array or group")
    return out


def _consolidated_key(path: str, zarr_format: int) -> str:
    """The key that holds the consolidated metadata of the group at ``path``."""
    return node_prefix(path) + (ZARR_JSON if zarr_format == 3 else ZMETADATA)


#: A v3 document with a consolidated member (an object): a key in quotes cannot stand inside a
#: JSON string, whose quotes are escaped.
_V3_MEMBER = re.compile(rb'"' + MEMBER.encode() + rb'"\s*:\s*\{')


def _holds_consolidated(store: Store, path: str, zarr_format: int) -> bool:
    """Whether the group at ``path`` may hold consolidated metadata of ``zarr_format``, told
    without parsing it (each write in a group of 1,000 arrays parsed its 870 KB zarr.json once
    more to learn that); :func:`_update_recorded` reads it, under the lock."""
    key = _consolidated_key(path, zarr_format)
    if zarr_format == 2:
        return store.exists(key)
    raw = get_document(store, key)
    return raw is not None and _V3_MEMBER.search(bytes(raw)) is not None


def _group_and_entries_of(
    store: Store, path: str, zarr_format: int, raw: Any
) -> tuple[NodeInfo, dict[str, NodeInfo]] | None:
    """The group at ``path`` and the nodes of its consolidated metadata of ``zarr_format``, from
    the consolidated document ``raw`` read (None: absent); a v3 group's zarr.json holds both."""
    if raw is None:
        return None
    key = _consolidated_key(path, zarr_format)
    if zarr_format == 2:
        group = read_node(store, path, allow_implicit=False)
        return None if group is None else (group, parse_v2_document(bytes(raw), key))
    found = _v3_consolidated(raw, key)
    if found is None:
        return None
    doc, member = found
    return v3_node_info(doc, f"{key}: "), parse_v3_member(member, key)


def _v3_consolidated(raw: Any, key: str) -> tuple[dict[str, Any], Any] | None:
    """A v3 zarr.json parsed, and its consolidated member; None where it is no group holding one."""
    doc = parse_json_document(bytes(raw), key)
    member = doc.get(MEMBER) if isinstance(doc, dict) else None
    if member is None or doc.get("node_type") != "group":
        return None
    return doc, member


def _entries_of(raw: Any, key: str, zarr_format: int) -> dict[str, NodeInfo] | None:
    if zarr_format == 3:
        found = _v3_consolidated(raw, key)
        return None if found is None else parse_v3_member(found[1], key)
    return parse_v2_document(bytes(raw), key)


def load_view(store: Store, path: str, info: NodeInfo, use_consolidated: bool | None) -> ConsolidatedView | None:
    """The consolidated metadata of the group ``info`` at ``path``, as zarr-python's ``use_consolidated``.

    None: used when present; True: required (MetadataError naming the key when absent); False:
    not read.
    """
    if use_consolidated is False or info.implicit:
        return None
    prefix = node_prefix(path)
    if info.zarr_format == 3:
        member = info.document.get(MEMBER)
        entries = None if member is None else parse_v3_member(member, prefix + ZARR_JSON)
        where = f"{prefix}{ZARR_JSON}: {MEMBER}"
    else:
        raw = get_document(store, prefix + ZMETADATA)
        entries = None if raw is None else parse_v2_document(bytes(raw), prefix + ZMETADATA)
        where = prefix + ZMETADATA
    if entries is None:
        if use_consolidated:
            raise MetadataError(
                f"use_consolidated=True, but the group {path or '/'!r} has no consolidated metadata ({where})"
            )
        return None
    return ConsolidatedView(store, path, info.zarr_format, entries)


# -- writing ----------------------------------------------------------------------------------------


def _order(path: str) -> tuple[int, str, str]:
    # zarr-python's order: shallow nodes first, then by case-folded name; names that fold alike
    # ("a" and "A") by the name itself, so that a record kept up to date and one consolidated
    # afresh list them alike.
    return path.count("/"), unicodedata.normalize("NFKC", path).casefold(), path


def _dumps(doc: Any, indent: int | None) -> bytes:
    # Documents other tools wrote may hold NaN (zarr-python writes it in attributes): carried
    # over as they are, as zarr-python does.
    return json.dumps(doc, indent=indent, allow_nan=True).encode()


#: A v3 zarr.json holding consolidated metadata is indented (as zarr-python writes it) up to
#: this size, and written compact above it: Python indents in its pure-Python encoder, 48 ms of
#: each write of an 870 KB document (a group of 1,000 arrays) against 5 ms compact.
INDENTED_MAX_BYTES = 64 * 1024


def _v3_document_bytes(doc: Any) -> bytes:
    """A v3 group's zarr.json with consolidated metadata, indented where it is small."""
    compact = _dumps(doc, None)
    return compact if len(compact) > INDENTED_MAX_BYTES else _dumps(doc, 2)


def _v3_member(entries: Mapping[str, NodeInfo]) -> dict[str, Any]:
    metadata = {path: _v3_entry_document(entries[path]) for path in sorted(entries, key=_order)}
    return {**_empty_member(), "metadata": metadata}


def _v3_entry_document(info: NodeInfo) -> dict[str, Any]:
    doc = dict(info.document)
    if info.node_type == "group":
        doc[MEMBER] = _empty_member()
    return doc


#: An entry's text in a compact v3 consolidated zarr.json (its path, ": ", its document), by
#: path, with the entry it was made from.
Fragments = dict[str, tuple[NodeInfo, bytes]]


def _entry_texts(
    entries: Mapping[str, NodeInfo], fragments: Fragments, text_of: Callable[[str, NodeInfo], bytes]
) -> list[bytes]:
    """Each entry's text (``text_of``) in the order a record lists them, taken from
    ``fragments`` where the entry is the one it was made from, and ``fragments`` brought up to
    date."""
    texts = []
    for path in sorted(entries, key=_order):
        info = entries[path]
        held = fragments.get(path)
        if held is None or held[0] is not info:
            held = (info, text_of(path, info))
            fragments[path] = held
        texts.append(held[1])
    for path in [path for path in fragments if path not in entries]:
        del fragments[path]
    return texts


def _v3_assembled(group_doc: Mapping[str, Any], entries: Mapping[str, NodeInfo], fragments: Fragments) -> bytes:
    """The compact v3 document :func:`_v3_document_bytes` writes above INDENTED_MAX_BYTES, byte
    for byte, put together from each entry's text: the texts of entries unchanged since the last
    update (in ``fragments``, which is brought up to date) are not encoded again. A group of
    1,000 arrays encoded its whole 870 KB document once per array created in it."""

    def text_of(path: str, info: NodeInfo) -> bytes:
        return _dumps(path, None) + b": " + _dumps(_v3_entry_document(info), None)

    texts = _entry_texts(entries, fragments, text_of)
    head = _dumps({**group_doc, MEMBER: _empty_member()}, None)
    # The member is the document's last, its ``metadata`` the member's last: ``{}}}`` ends it.
    return head[: -len(b"{}}}")] + b"{" + b", ".join(texts) + b"}}}"


def _v2_assembled(
    group_doc: Mapping[str, Any], attributes: Mapping[str, Any], entries: Mapping[str, NodeInfo], fragments: Fragments
) -> bytes:
    """:func:`_v2_document`, byte for byte, put together as :func:`_v3_assembled` is."""

    def text_of(path: str, info: NodeInfo) -> bytes:
        return b", ".join(_dumps(key, None) + b": " + _dumps(value, None) for key, value in _v2_entry_items(path, info))

    texts = _entry_texts(entries, fragments, text_of)
    head = _dumps(_v2_record({ZGROUP: dict(group_doc), ZATTRS: dict(attributes)}), None)
    # The group's own documents are the metadata's first; the format member follows it.
    tail = b'}, "zarr_consolidated_format": 1}'
    assert head.endswith(tail)
    return head[: -len(tail)] + b"".join(b", " + text for text in texts) + tail


def _v2_entry_items(path: str, info: NodeInfo) -> list[tuple[str, Any]]:
    """A node's members of a .zmetadata's ``metadata``: its .zattrs, then its .zarray or .zgroup."""
    if info.node_type == "array":
        return [(f"{path}/{ZATTRS}", info.attributes), (f"{path}/{ZARRAY}", info.document)]
    # zarr-python 3 marks v2 groups as it marks v3 ones; other readers ignore the member.
    marker = {"metadata": {}, "must_understand": False, "kind": "inline"}
    return [(f"{path}/{ZATTRS}", info.attributes), (f"{path}/{ZGROUP}", {**info.document, MEMBER: marker})]


def _v2_record(metadata: dict[str, Any]) -> dict[str, Any]:
    # zarr-python writes this document without indentation.
    return {"metadata": metadata, "zarr_consolidated_format": 1}


def _v2_document(group_doc: Mapping[str, Any], attributes: Mapping[str, Any], entries: Mapping[str, NodeInfo]) -> bytes:
    metadata: dict[str, Any] = {ZGROUP: dict(group_doc), ZATTRS: dict(attributes)}
    for path in sorted(entries, key=_order):
        metadata.update(_v2_entry_items(path, entries[path]))
    return _dumps(_v2_record(metadata), None)


def _write(store: Store, path: str, info: NodeInfo, entries: Mapping[str, NodeInfo]) -> None:
    """Store ``entries`` as the consolidated metadata of the group ``info`` at ``path``."""
    store.set(_consolidated_key(path, info.zarr_format), _encoded(info, entries))


#: How much deeper a node's document lies in a v3 consolidated zarr.json: below the group's
#: document, its ``consolidated_metadata`` and that member's ``metadata``.
_V3_ENTRY_NESTED_BY = 3
#: And a node's .zarray, .zgroup or .zattrs in a .zmetadata: below the document and its
#: ``metadata``.
_V2_ENTRY_NESTED_BY = 2


def _encoded(
    info: NodeInfo,
    entries: Mapping[str, NodeInfo],
    changed: Iterable[NodeInfo] | None = None,
    fragments: Fragments | None = None,
) -> bytes:
    """The consolidated document; MetadataError where it would nest deeper than gpuzarr (and
    zarrs) read back: a node whose attributes other writers nested deep, now nested deeper.
    ``changed``: the entries new since a document this process wrote and checked, the others
    as they were in it; their nesting alone is checked then, not the whole text again.
    ``fragments``: the entries' texts of the last update (see :func:`_v3_assembled`)."""
    if info.zarr_format == 3:
        encoded = b""
        if fragments is not None:  # the group's own member is no entry (``_entry`` drops it)
            encoded = _v3_assembled(info.document, entries, fragments)
        if len(encoded) <= INDENTED_MAX_BYTES:
            encoded = _v3_document_bytes({**info.document, MEMBER: _v3_member(entries)})
        where = f"consolidated metadata ({ZARR_JSON})"
        if changed is None:
            check_text_depth(encoded, where)
        else:
            for entry in changed:
                _check_nested(entry.document, where, _V3_ENTRY_NESTED_BY)
        return encoded
    if fragments is not None:
        encoded = _v2_assembled(info.document, info.attributes, entries, fragments)
    else:
        encoded = _v2_document(info.document, info.attributes, entries)
    where = f"consolidated metadata ({ZMETADATA})"
    if changed is None:
        check_text_depth(encoded, where)
    else:
        # The group's own attributes are read afresh for each update: checked with the entries.
        for entry in (info, *changed):
            _check_nested(entry.attributes, where, _V2_ENTRY_NESTED_BY)
            _check_nested(entry.document, where, _V2_ENTRY_NESTED_BY)
    return encoded


def _check_nested(value: Any, where: str, nested_by: int) -> None:
    """MetadataError (as the whole document's text check words it) where ``value``, nested
    ``nested_by`` levels down in the document ``where`` names, takes it past MAX_JSON_DEPTH."""
    try:
        check_depth(value, where, MAX_JSON_DEPTH - nested_by)
    except MetadataError:
        raise MetadataError(f"{where}: JSON nests deeper than {MAX_JSON_DEPTH} levels") from None


#: How many times a conditional update of consolidated metadata is tried before giving up.
RECORD_ATTEMPTS = 16


def _update_recorded(store: Store, ancestor: str, zarr_format: int, change: _Change) -> None:
    """Apply ``change`` to the consolidated metadata of the group at ``ancestor`` (see
    :func:`_rewrite`). Two nodes created at once below one group each lost the other's entry
    (3 of 16 left), and the group's own listing then hid them."""
    key = _consolidated_key(ancestor, zarr_format)

    def rewrite(raw: Any) -> bytes | None:
        return _rewritten(store, ancestor, zarr_format, key, raw, change)

    _rewrite(store, key, rewrite)


def _changed(before: Mapping[str, NodeInfo], entries: Mapping[str, NodeInfo]) -> list[NodeInfo]:
    """The entries ``entries`` holds that ``before`` did not (new, or replaced)."""
    return [info for path, info in entries.items() if before.get(path) is not info]


@dataclass(frozen=True)
class _KeptRecord:
    """A consolidated record as this process wrote it: its group, entries and each entry's
    text (:func:`_entry_texts`). Never changed: each update takes copies of its mappings."""

    group: NodeInfo
    entries: dict[str, NodeInfo]
    fragments: Fragments


#: The consolidated records (v3 zarr.json, v2 .zmetadata) this process wrote last, by format:
#: the next update of one reads it back byte for byte (nobody else wrote it since) and neither
#: parses it nor encodes its unchanged entries again. Two each: a process updates one group's
#: record at a time, and each is large.
_kept_records: dict[int, RecentDocuments[_KeptRecord]] = {2: RecentDocuments(2), 3: RecentDocuments(2)}


def _rewritten(
    store: Store, ancestor: str, zarr_format: int, key: str, raw: Any, change: _Change
) -> bytes | None:
    """The record ``raw`` of the group at ``ancestor`` with ``change`` applied (None where there
    is none), from the record kept where ``raw`` is one this process wrote last: a group of
    1,000 arrays parsed, checked and encoded its whole record once per array created in it."""
    if raw is None:
        return None
    kept = _kept_records[zarr_format].known(bytes(raw))
    fragments: Fragments = {}
    if kept is None:
        found = _group_and_entries_of(store, ancestor, zarr_format, raw)
        if found is None:
            return None
        group, entries = found
    else:
        group, entries, fragments = kept.group, dict(kept.entries), dict(kept.fragments)
        if zarr_format == 2:
            # A .zmetadata repeats the group's own .zgroup and .zattrs, changed apart from it.
            fresh = read_node(store, ancestor, allow_implicit=False)
            if fresh is None:
                return None
            group = fresh
    before = dict(entries)
    change.apply(entries, ancestor)
    group = _entry(group)
    # Entries' texts are joined where the document is written compact (v2 always, v3 past
    # INDENTED_MAX_BYTES); a smaller v3 one is encoded whole, indented.
    compact = zarr_format == 2 or len(raw) > INDENTED_MAX_BYTES
    new = _encoded(group, entries, None if kept is None else _changed(before, entries), fragments if compact else None)
    _kept_records[zarr_format].note(new, _KeptRecord(group, entries, fragments))
    if zarr_format == 3:
        written_groups.note(new, True)
    return new


def _rewrite(store: Store, key: str, rewrite: Callable[[Any], bytes | None]) -> None:
    """Store ``rewrite(document)`` (None: nothing) of the document at ``key`` (None where
    absent) as one update: read, changed and written back under the store's lock of the key, or
    conditional on the version read where the store has conditional writes (an object store,
    whose lock holds in this process only). Every update of a document that holds consolidated
    metadata goes through here, so none of them loses another's."""
    if store.supports_conditional_writes:
        for _ in range(RECORD_ATTEMPTS):
            raw, version = store.get_versioned(key)
            new = rewrite(raw)
            if new is None or store.set_if(key, new, version):
                return
        raise MetadataError(f"{key}: another writer changed it during each of {RECORD_ATTEMPTS} updates")
    with released_on_interrupt(), held(store, key):
        new = rewrite(get_document(store, key))
        if new is not None:
            store.set(key, new)


def _walk(store: Store, group: str, zarr_format: int, rel: str, out: dict[str, NodeInfo]) -> None:
    # As zarr-python: the explicit nodes of the group's format; an implicit group (no document)
    # and what lies below it are left out. The children's metadata is read
    # CHILDREN_READ_AT_ONCE at a time, as many requests in flight as the store takes (as
    # Group.members reads them): one after the other, 200 children of an object store at 20 ms
    # a request took 4 s.
    _keys, dirs = store.list_dir(node_prefix(group))
    children = [directory.rstrip("/") for directory in dirs]
    run = io_runner(store.io_concurrency)
    for start in range(0, len(children), CHILDREN_READ_AT_ONCE):
        batch = children[start : start + CHILDREN_READ_AT_ONCE]
        infos = run(lambda child: read_node(store, child, allow_implicit=False), batch)
        for child, info in zip(batch, infos, strict=True):
            if info is None or info.zarr_format != zarr_format:
                continue
            name = rel + child.rsplit("/", 1)[-1]
            out[name] = _entry(info)
            if info.node_type == "group":
                _walk(store, child, zarr_format, name + "/", out)


def consolidate(store: Store, path: str, zarr_format: int | None = None) -> tuple[NodeInfo, ConsolidatedView]:
    """Write the consolidated metadata of the group at ``path``: (the group, a view of it).

    Raises GroupNotFoundError when there is no group of ``zarr_format`` (any format when None)
    at ``path``, ReadOnlyError for a read-only store.
    """
    path = path.strip("/")
    info = read_node(store, path, allow_implicit=False)
    if info is None or info.node_type != "group" or (zarr_format is not None and info.zarr_format != zarr_format):
        kind = "group" if zarr_format is None else f"Zarr v{zarr_format} group"
        raise GroupNotFoundError(f"consolidate_metadata: no {kind} at {path or '/'!r} in {store!r}")
    if store.read_only:
        raise ReadOnlyError(f"consolidate_metadata: {store!r} is read-only")
    entries: dict[str, NodeInfo] = {}
    _walk(store, path, info.zarr_format, "", entries)
    _write(store, path, _entry(info), entries)
    return info, ConsolidatedView(store, path, info.zarr_format, entries)


def write_group_documents(store: Store, path: str, documents: Mapping[str, bytes]) -> None:
    """Store a group's new metadata ``documents`` (its attributes changed); a v3 zarr.json
    carries the stored consolidated member and any other field over (extensions that say
    ``"must_understand": false``).

    A group's attributes are rewritten with its whole zarr.json: without this, a change of
    attributes would drop the consolidated metadata of its descendants, and fields that other
    writers keep. The zarr.json is read and written back as one update (:func:`_rewrite`): a
    member resized by another thread meanwhile was dropped from the stored consolidated
    metadata, and reopened with its old shape.
    """
    rest = dict(documents)
    new = rest.pop(ZARR_JSON, None)
    if new is not None:
        key = node_prefix(path) + ZARR_JSON
        _rewrite(store, key, lambda stored: new if stored is None else _keeping_fields(stored, new, key))
    write_documents(store, path, rest)


def _keeping_fields(stored: Any, new: bytes, key: str) -> bytes:
    """The group's ``new`` zarr.json with the fields of the ``stored`` one it does not rewrite."""
    old = parse_json_document(bytes(stored), key)
    kept = {k: value for k, value in old.items() if k not in _REWRITTEN and value is not None}
    return _v3_document_bytes({**json.loads(new), **kept}) if kept else new


#: The fields of a group's zarr.json that an attributes change writes anew.
_REWRITTEN = frozenset({"zarr_format", "node_type", "attributes"})


class _Change:
    """The nodes from a root down to a written node, as they are now (paths in one store).

    ``new_node``: the node was created or replaced, so what was recorded below it is gone.
    """

    def __init__(self, path: str, nodes: dict[str, NodeInfo | None], new_node: bool) -> None:
        self.path = path
        self.nodes = nodes
        self.new_node = new_node

    def copied(self) -> _Change:
        """This change with copies of its nodes."""
        nodes = {path: None if info is None else copy.deepcopy(info) for path, info in self.nodes.items()}
        return _Change(self.path, nodes, self.new_node)

    def apply(self, entries: dict[str, NodeInfo], root: str) -> None:
        """Update ``entries``, the consolidated metadata of the group at ``root``."""
        cut = len(node_prefix(root))
        if self.new_node:  # what was recorded below goes first: ``nodes`` may hold what is there now
            below = node_prefix(self.path)[cut:]
            for key in [k for k in entries if k.startswith(below)]:
                del entries[key]
        for path, info in self.nodes.items():
            if path == root or not path.startswith(node_prefix(root)):
                continue
            if info is None:
                entries.pop(path[cut:], None)
            else:
                entries[path[cut:]] = _entry(info)


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _holds_group(directory: Path, zarr_format: int) -> bool:
    from . import config  # the top layer's module

    try:
        if zarr_format == 2:
            return (directory / ZGROUP).is_file()
        document = directory / ZARR_JSON
        if document.stat().st_size > int(config.get("max_metadata_bytes")):
            return False  # no group's zarr.json is that large: not read
        doc = json.loads(document.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("zarr_format") == 3 and doc.get("node_type") == "group"


def _outermost(store: Store, path: str, zarr_format: int) -> tuple[Store, str, str]:
    """The store holding the whole hierarchy around ``path``: (store, the node's path, lift).

    ``gpuzarr.open("data.zarr/temp")`` roots a LocalStore at an array inside a hierarchy: the
    groups above its root are the node's ancestors too, and theirs the consolidated metadata
    to keep true. Parent directories are climbed while they hold a group of the node's format
    (every node consolidated metadata records has only explicit groups above it). ``lift`` is
    the prefix that turns a path of ``store`` into a path of the returned store.
    """
    if not isinstance(store, LocalStore):
        return store, path, ""
    root = store.root
    lifted: list[str] = []
    while root.parent != root and _holds_group(root.parent, zarr_format):
        lifted.insert(0, root.name)
        root = root.parent
    if not lifted:
        return store, path, ""
    lift = "/".join(lifted)
    return LocalStore(root, follow_symlinks=store.follow_symlinks, durable=store.durable), _join(lift, path), lift


def record_metadata_write(
    store: Store,
    path: str,
    *,
    new_node: bool = False,
    replaced: frozenset[int] = frozenset(),
    new_parents: Sequence[str] = (),
) -> None:
    """Keep consolidated metadata true after the metadata of the node at ``path`` was written.

    Every group above the node (in ``store``, or above its root for a LocalStore opened inside
    a hierarchy) whose consolidated metadata of the node's format is stored gets the node's new
    metadata, and that of the groups between (created with it); a v2 group's own
    ``.zmetadata`` gets its new attributes. ``new_node``: the node was created or replaced, so
    what was recorded below it is gone. The views opened on the same store (the same object,
    or a LocalStore of the same directory) are updated alike; a view of a replaced subtree is
    emptied. ``replaced``: the formats of the node the new one replaced (``write_node``'s
    answer); the consolidated metadata of another format forgets it and what lay below it (a v2
    group replaced by a v3 one stayed recorded in its v2 parent's, and its arrays read as the
    fill value). ``new_parents``: the parent groups written with the node (``write_node``'s
    answer); one that was an implicit group holds nodes already, recorded with it as
    consolidating afresh records them.
    """
    path = path.strip("/")
    info = read_node(store, path, allow_implicit=False)
    if info is None:
        return
    for old_format in replaced - {info.zarr_format}:
        _record(store, path, old_format, None, True)
    _record(store, path, info.zarr_format, info, new_node, tuple(new_parents))


@contextlib.contextmanager
def recorded_if_interrupted(
    store: Store, path: str, *, erased: int | None = None, new_node: bool = False
) -> Iterator[None]:
    """Around a metadata write of the node at ``path`` and its :func:`record_metadata_write`
    (with ``erased``: its erasure, of that format, and :func:`record_node_erased`): where an
    interrupt (Ctrl-C) stops the block, the node is recorded as it is stored now. Between the
    write and its record, it left the consolidated metadata above stale until the node's next
    change (a resized array reopened with its old shape, an erased one still listed).

    Errors (``Exception``) are left alone: they come before the store changed, or the change
    they stopped is the caller's to report (and a node the write was refused over must not be
    recorded as new).
    """
    try:
        yield
    except Exception:
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            if erased is None:
                record_metadata_write(store, path, new_node=new_node)
            elif read_node(store, path, allow_implicit=False) is None:
                record_node_erased(store, path, erased)
        raise


def record_node_erased(store: Store, path: str, zarr_format: int) -> None:
    """Keep consolidated metadata true after the node at ``path`` (of ``zarr_format``) was
    erased with everything below it: the groups above and the open views that record it
    forget it and its descendants, and a view of the erased subtree is emptied."""
    _record(store, path.strip("/"), zarr_format, None, True)


def _record(
    store: Store, path: str, zarr_format: int, info: NodeInfo | None, new_node: bool, new_parents: tuple[str, ...] = ()
) -> None:
    """:func:`record_metadata_write` (``info``: the node's new metadata) and
    :func:`record_node_erased` (``info`` None)."""
    outer, path, lift = _outermost(store, path, zarr_format)
    parts = path.split("/") if path else []
    ancestors = ["/".join(parts[:i]) for i in range(len(parts))]
    stored = [a for a in ancestors if _holds_consolidated(outer, a, zarr_format)]
    with _live_lock:
        views = list(_live_views)
    # Each view with its root as a path of ``outer``; views of other stores are left alone.
    placed = [(v, r) for v in views if (r := _placed_root(v, outer, store, lift)) is not None]
    if new_node:
        for view, root in placed:
            if root == path or root.startswith(node_prefix(path)):
                view._apply(_Clear(), root)
    elif info is not None and info.zarr_format == 2 and info.node_type == "group":
        # A v2 group's .zmetadata repeats its own .zattrs: written again with those stored now.
        _update_recorded(outer, path, 2, _Change(path, {}, False))
    # The views that record the node: it lies strictly below their root, in their format.
    covering = [(v, r) for v, r in placed if r in ancestors and v.zarr_format == zarr_format]
    roots = [*stored, *(r for _, r in covering)]
    if not roots:
        return
    nodes: dict[str, NodeInfo | None] = {}
    if info is not None:
        # The groups between the topmost root and the node may be new (created as its parents).
        top = min(ancestors.index(r) for r in roots)
        nodes = {a: read_node(outer, a, allow_implicit=False) for a in ancestors[top + 1 :]}
        for parent in (_join(lift, p) for p in new_parents):
            written = nodes.get(parent)
            if written is not None and written.node_type == "group":
                # Written with the node over nodes already there (an implicit group made
                # explicit): they are its descendants now, as consolidating afresh records them.
                below: dict[str, NodeInfo] = {}
                _walk(outer, parent, zarr_format, "", below)
                nodes.update({_join(parent, name): node for name, node in below.items()})
    nodes[path] = info
    if new_node and info is not None and info.node_type == "group":
        # A new group over nodes already there (an implicit group made explicit): they are its
        # descendants now, recorded as consolidating afresh records them.
        descendants: dict[str, NodeInfo] = {}
        _walk(outer, path, zarr_format, "", descendants)
        nodes.update({_join(path, name): node for name, node in descendants.items()})
    change = _Change(path, nodes, new_node)
    # A record is kept from one update to the next (_kept_records): it takes copies of the
    # nodes, whose documents the open views hand out to arrays and groups, whose attributes a
    # caller may change in place without writing them.
    recorded = change.copied() if stored else change
    for ancestor in stored:
        _update_recorded(outer, ancestor, zarr_format, recorded)
    for view, root in covering:
        view._apply(change, root)


def _placed_root(view: ConsolidatedView, outer: Store, store: Store, lift: str) -> str | None:
    """The root of ``view`` as a path of ``outer`` (the store holding the whole hierarchy that
    ``store``, lifted by ``lift``, writes in), or None where the view is of another store.

    A view opened through a LocalStore of a directory inside the hierarchy
    (``gpuzarr.open("data.zarr/sub")``) is placed by where its root lies below ``outer``'s.
    """
    if view.store == outer:
        return view.root
    if view.store == store:
        return _join(lift, view.root)
    if isinstance(view.store, LocalStore) and isinstance(outer, LocalStore):
        below = view.store._real_root.removeprefix(outer._inside_prefix)
        if view.store._real_root == outer._real_root:
            return view.root
        if below != view.store._real_root:  # inside outer's root
            return _join(below, view.root)
    return None


class _Clear(_Change):
    """Forget every recorded node: the view's group was replaced."""

    def __init__(self) -> None:
        super().__init__("", {}, False)

    def apply(self, entries: dict[str, NodeInfo], root: str) -> None:
        entries.clear()


