"""What lives at a path of a store, and the rules for writing a new node there.

Reading: a v3 or v2 array or group, an implicit group, or nothing (:func:`read_node`).
Writing: :func:`write_node` is the one way a new array or group gets into a store (parents are
created, an existing node is replaced only with ``overwrite``); :data:`MODES` is the one table of
zarr-python's modes and the TensorStore open flags they mean.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, TypeVar

from .errors import ContainsNodeError, InvalidArgumentError, MetadataError, NodeNotFoundError, ReadOnlyError
from .metadata.json_util import check_attributes, document_bytes
from .metadata.v2 import ZARRAY, ZATTRS, ZGROUP, ArrayMetadataV2
from .metadata.v3 import ZARR_JSON, ArrayMetadata, parse_json_document
from .parallel import io_runner
from .store.base import get_at_most, validate_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .store.base import Buffer, Store

METADATA_KEYS = (ZARR_JSON, ZARRAY, ZGROUP)

#: what a :class:`RecentDocuments` knows of each document
Known = TypeVar("Known")


@dataclass(frozen=True)
class Mode:
    """A zarr-python ``mode`` as TensorStore's open flags.

    ``open``: an existing node is opened; ``create``: a missing node is created;
    ``delete_existing``: an existing node is replaced; ``read_only``: the store refuses writes.
    """

    open: bool
    create: bool
    delete_existing: bool
    read_only: bool = False

    def flags(self) -> dict[str, bool]:
        """The TensorStore spec members this mode means."""
        return {"open": self.open, "create": self.create, "delete_existing": self.delete_existing}


#: zarr-python's modes: "r" read only; "r+" read/write, must exist; "a" read/write, created if
#: missing; "w" create, replacing what exists; "w-" create, failing if something exists.
MODES: dict[str, Mode] = {
    "r": Mode(open=True, create=False, delete_existing=False, read_only=True),
    "r+": Mode(open=True, create=False, delete_existing=False),
    "a": Mode(open=True, create=True, delete_existing=False),
    "w": Mode(open=False, create=True, delete_existing=True),
    "w-": Mode(open=False, create=True, delete_existing=False),
}


def parse_mode(mode: str) -> Mode:
    """The :class:`Mode` named ``mode``; ValueError for an unknown name."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode: expected one of {list(MODES)}, got {mode!r}")
    return MODES[mode]


#: How many children of a group have their metadata read at once (``Group.members``,
#: ``consolidate_metadata``): as many requests in flight as the store takes, and no further than
#: a caller that stops early takes them.
CHILDREN_READ_AT_ONCE = 64


def node_prefix(path: str) -> str:
    """The key prefix of the node at ``path``: "a/b/" ("" for the root).

    A path with a '.', '..' or empty component raises InvalidKeyError naming it.
    """
    path = validate_path(path)
    return path + "/" if path else ""


@dataclass(frozen=True)
class NodeInfo:
    """A node found in a store. ``implicit`` groups have descendants but no metadata."""

    node_type: Literal["array", "group"]
    zarr_format: int
    document: dict[str, Any]
    attributes: dict[str, Any]
    implicit: bool = False


def get_document(store: Store, key: str) -> Buffer | None:
    """The metadata document at ``key`` (None: absent), at most the ``max_metadata_bytes``
    setting: a larger one is a MetadataError naming the key, raised before its bytes are read
    where the store knows their number first (local files, zip members)."""
    from . import config  # the top layer's module

    limit = int(config.get("max_metadata_bytes"))

    def refuse(n: int) -> MetadataError:
        return MetadataError(
            f"{key}: a metadata document of {n} bytes is larger than config max_metadata_bytes "
            f"({limit}); raise it with gpuzarr.config.set(max_metadata_bytes=...)"
        )

    return get_at_most(store, key, limit, refuse)


def _read_json(store: Store, key: str) -> dict[str, Any] | None:
    raw = get_document(store, key)
    return None if raw is None else parse_json_document(bytes(raw), key)


def _get_together(store: Store, keys: list[str]) -> list[Buffer | None]:
    """The documents at ``keys``: one after the other from a local store, at once from a store
    that keeps requests in flight (each one is a round trip there)."""
    if store.io_concurrency is None:
        return [get_document(store, key) for key in keys]
    return io_runner(store.io_concurrency)(lambda key: get_document(store, key), keys)


def v3_node_info(doc: dict[str, Any], where: str) -> NodeInfo:
    """The NodeInfo of a v3 node document (a zarr.json, or an entry of consolidated metadata),
    once its ``zarr_format``, ``node_type`` and ``attributes`` are checked; an error names the
    member as ``where`` followed by its name."""
    if doc.get("zarr_format") != 3:
        raise MetadataError(f"{where}zarr_format: expected 3, got {doc.get('zarr_format')!r}")
    node_type = doc.get("node_type")
    if node_type not in ("array", "group"):
        raise MetadataError(f"{where}node_type: expected 'array' or 'group', got {node_type!r}")
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict):
        raise MetadataError(f"{where}attributes: expected an object, got {attributes!r}")
    if node_type == "group":  # an array's fields are checked with the rest of its metadata
        for key in set(doc) - GROUP_FIELDS:
            value = doc[key]
            if not (isinstance(value, dict) and value.get("must_understand") is False):
                raise MetadataError(
                    f"{where}{key}: unknown metadata field (only objects with \"must_understand\": false "
                    "may be ignored)"
                )
    return NodeInfo(node_type, 3, doc, attributes)


#: The fields of a v3 group's zarr.json that gpuzarr understands (zarr-python's consolidated
#: metadata included); any other must be an object saying ``"must_understand": false``.
GROUP_FIELDS = frozenset({"zarr_format", "node_type", "attributes", "consolidated_metadata"})


def read_node(store: Store, path: str, allow_implicit: bool = True, v2_first: bool = False) -> NodeInfo | None:
    """The node at ``path`` (v3 first, then v2; v2 first with ``v2_first``), an implicit group,
    or None for nothing.

    ``v2_first`` is for callers asked for a v2 node (TensorStore's ``zarr2`` driver): an array
    migrated in place to v3 (zarr-python's ``migrate_v2_to_v3``) keeps its ``.zarray`` beside
    the new ``zarr.json``, and that driver reads the ``.zarray``, as TensorStore's does.
    """
    prefix = node_prefix(path)
    if v2_first:
        found = _read_v2_node(store, prefix)
        if found is not None:
            return found
    doc = _read_json(store, prefix + ZARR_JSON)
    if doc is not None:
        key = prefix + ZARR_JSON
        return v3_node_info(doc, f"{key}: ")
    found = None if v2_first else _read_v2_node(store, prefix)
    if found is not None:
        return found
    if allow_implicit and has_descendant_nodes(store, prefix):
        return NodeInfo("group", 3, {}, {}, implicit=True)
    return None


def _read_v2_node(store: Store, prefix: str) -> NodeInfo | None:
    """The v2 array or group whose documents lie at ``prefix``, or None where there is none."""
    # A v2 node's attributes are read with its .zarray, not after it: one round trip less.
    zarray, zattrs = _get_together(store, [prefix + ZARRAY, prefix + ZATTRS])
    for key, node_type in ((ZARRAY, "array"), (ZGROUP, "group")):
        raw = zarray if key == ZARRAY else get_document(store, prefix + key)
        if raw is None:
            continue
        doc = parse_json_document(bytes(raw), prefix + key)
        if doc.get("zarr_format") != 2:
            raise MetadataError(f"{prefix}{key}: zarr_format: expected 2, got {doc.get('zarr_format')!r}")
        attrs = {} if zattrs is None else parse_json_document(bytes(zattrs), prefix + ZATTRS)
        return NodeInfo(node_type, 2, doc, attrs or {})  # type: ignore[arg-type]
    return None


#: The most folders :func:`has_descendant_nodes` lists looking for node metadata below a path.
IMPLICIT_GROUP_FOLDERS = 1000


def has_descendant_nodes(store: Store, prefix: str) -> bool:
    """Whether node metadata exists below ``prefix`` (an implicit group), found within the
    first :data:`IMPLICIT_GROUP_FOLDERS` folders, nearest first.

    Folder by folder, stopping at the first document: a path that holds no Zarr node (a home
    directory, ``/``) is not walked whole (listing every key below ``/`` and sorting them did
    not end), and the nodes of an implicit group lie near its top.
    """
    if not store.supports_listing:  # an HTTP server: no implicit groups to find
        return False
    folders = collections.deque([prefix])
    listed = 0
    while folders and listed < IMPLICIT_GROUP_FOLDERS:
        listed += 1
        try:
            keys, children = store.list_dir(folders.popleft())
        except OSError:  # a folder this process may not list (or gone): skipped, as a walk does
            continue
        if any(k.rsplit("/", 1)[-1] in METADATA_KEYS for k in keys):
            return True
        folders.extend(children)
    return False


def require_node(store: Store, path: str) -> NodeInfo:
    """The node at ``path``; NodeNotFoundError when there is none."""
    info = read_node(store, path)
    if info is None:
        raise NodeNotFoundError(f"no Zarr array or group at {path or '/'!r} in {store!r}")
    return info


def array_metadata(info: NodeInfo, path: str, where: str | None = None) -> ArrayMetadata | ArrayMetadataV2:
    """Parse an array node's metadata, prefixing errors with the document's key (``where``:
    where else the document was found, an entry of a group's consolidated metadata)."""
    key = where or node_prefix(path) + (ZARR_JSON if info.zarr_format == 3 else ZARRAY)
    try:
        if info.zarr_format == 3:
            return ArrayMetadata.from_json(info.document)
        return ArrayMetadataV2.from_json(info.document, info.attributes)
    except MetadataError as exc:
        raise type(exc)(f"{key}: {exc}") from exc


def node_exists(store: Store, path: str) -> bool:
    """Whether metadata of an explicit node (array or group, v3 or v2) exists at ``path``."""
    prefix = node_prefix(path)
    return any(store.exists(prefix + k) for k in METADATA_KEYS)


# -- writing ----------------------------------------------------------------------------------------


def group_documents(
    attributes: Mapping[str, Any], zarr_format: int, stored: Mapping[str, Any] | None = None
) -> dict[str, bytes]:
    """The metadata documents of a group: v3 zarr.json, or v2 .zgroup and .zattrs.

    Raises MetadataError when the attributes cannot be written as JSON (``stored``: the
    attributes a document held before, whose NaN and infinite numbers are kept; see
    :func:`check_attributes`).
    """
    check_attributes(attributes, stored)
    if zarr_format == 2:
        return {ZGROUP: b'{\n  "zarr_format": 2\n}', ZATTRS: document_bytes(dict(attributes), None)}
    return {ZARR_JSON: document_bytes({"zarr_format": 3, "node_type": "group", "attributes": attributes})}


def write_documents(store: Store, path: str, documents: Mapping[str, bytes]) -> None:
    """Store a node's metadata documents (keys relative to the node)."""
    prefix = node_prefix(path)
    for key, document in documents.items():
        store.set(prefix + key, document)


class WrittenNode(NamedTuple):
    """What :func:`write_node` changed beside the node's own documents."""

    #: The formats of the node it replaced (none, 2, 3, or both for an array migrated in
    #: place): consolidated metadata of the other format must forget it
    #: (``record_metadata_write``'s ``replaced``).
    replaced: frozenset[int]
    #: The parent groups it wrote, the highest first. One that was an implicit group may hold
    #: nodes already, which consolidated metadata above it must now record
    #: (``record_metadata_write``'s ``new_parents``).
    new_parents: tuple[str, ...] = ()


def write_node(
    store: Store, path: str, documents: Mapping[str, bytes], *, overwrite: bool, zarr_format: int, parents: bool = True
) -> WrittenNode:
    """Write a new node's metadata ``documents`` at ``path``, creating missing parent groups
    (unless ``parents`` is False: a TensorStore spec creates none, as TensorStore does).

    Parameters
    ----------
    store, path
        Where the node goes.
    documents
        Its metadata documents by key relative to the node (``ArrayMetadata.documents()`` or
        :func:`group_documents`).
    overwrite
        Replace a node that exists there (its data too); without it an existing node raises
        ContainsNodeError. Either way, stale keys of an earlier node are erased.
    zarr_format
        The format of the parent groups created.

    Returns
    -------
    WrittenNode
        The formats of the node it replaced, and the parent groups it wrote.

    Raises
    ------
    ReadOnlyError, ContainsNodeError
        A read-only store; a node at ``path`` without ``overwrite``, or an array among the
        ancestors (arrays cannot contain nodes).
    """
    missing = _missing_parents(store, path)
    replaced = _prepare_new_node(store, path, overwrite)
    write_documents(store, path, documents)
    written: list[str] = []
    # Written explicitly: v2 has no implicit groups, and zarr-python warns about directories
    # without metadata. Written after the child, so a child that fails leaves nothing behind.
    for ancestor in missing if parents else ():
        # Another thread or process creating nodes below the same group may have written it
        # meanwhile: a group there is the parent wanted (six threads creating arrays in an
        # empty store raised ContainsNodeError in most trials, each after writing its array).
        info = read_node(store, ancestor, allow_implicit=False)
        if info is not None:
            if info.node_type == "array" and ancestor:
                raise ContainsNodeError(f"{ancestor!r} is an array: it cannot contain {path!r}")
            continue
        write_documents(store, ancestor, group_documents({}, zarr_format))
        written.append(ancestor)
    return WrittenNode(replaced, tuple(written))


def _missing_parents(store: Store, path: str) -> list[str]:
    """The ancestors of ``path`` that have no metadata yet, the store's root among them (as
    zarr-python writes them, so that the hierarchy opens at its root).

    An array among the ancestors below the root is an error: arrays cannot contain nodes. An
    array at the root is left alone, as zarr-python and earlier gpuzarr leave it (a store
    used for several unrelated arrays).
    """
    parts = path.split("/") if path else []
    missing = []
    for i in range(len(parts)):
        ancestor = "/".join(parts[:i])
        if _known_group(store, ancestor):
            continue
        info = read_node(store, ancestor, allow_implicit=False)
        if info is None:
            missing.append(ancestor)
        elif info.node_type == "array" and ancestor:
            raise ContainsNodeError(f"{ancestor!r} is an array: it cannot contain {path!r}")
    return missing


class RecentDocuments(Generic[Known]):
    """The metadata documents this process wrote last, a few, each with what it knows of it
    (``Known``): a later update that reads one back byte for byte uses that instead of parsing
    it again. What is known of a document follows from its bytes alone, so a match is sound
    whatever store or key it was read from; any other bytes are parsed as usual.

    A consolidated group of 1,000 arrays has an 870 KB zarr.json, which each array created in it
    parsed, checked and encoded again (twice parsed: as the new array's parent, then as the
    record to update)."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._lock = threading.Lock()
        self._held: list[tuple[bytes, Known]] = []

    def note(self, written: bytes, known: Known) -> None:
        with self._lock:
            kept = [(doc, k) for doc, k in self._held if doc != written]
            self._held = [*kept, (written, known)][-self._most :]

    def known(self, raw: bytes) -> Known | None:
        """What is known of ``raw``, if it is one of the documents written last."""
        with self._lock:
            return next((known for written, known in self._held if written == raw), None)

    def __bool__(self) -> bool:
        return bool(self._held)


#: The group documents this process wrote last (consolidated records), for the parent check of
#: a new node (:func:`_missing_parents`).
written_groups: RecentDocuments[bool] = RecentDocuments(4)


def _known_group(store: Store, path: str) -> bool:
    """Whether the node at ``path`` is a v3 group whose document this process wrote last."""
    if not written_groups:
        return False
    raw = get_document(store, node_prefix(path) + ZARR_JSON)
    return raw is not None and written_groups.known(bytes(raw)) is not None


def _prepare_new_node(store: Store, path: str, overwrite: bool) -> frozenset[int]:
    """Make way for a new node at ``path``: the formats of the node erased (see write_node)."""
    if store.read_only:
        raise ReadOnlyError(f"cannot create a node in read-only {store!r}")
    prefix = node_prefix(path)
    formats = frozenset(
        fmt for fmt, keys in ((3, (ZARR_JSON,)), (2, (ZARRAY, ZGROUP))) if any(store.exists(prefix + k) for k in keys)
    )
    if formats:
        if not overwrite:
            raise ContainsNodeError(
                f"a node already exists at {path or '/'!r} in {store!r} (pass overwrite=True)"
            )
        store.erase_prefix(prefix)
    elif overwrite:
        # Stale chunks of an earlier node (whose metadata is gone) must not leak into a new one.
        store.erase_prefix(prefix)
    return formats
