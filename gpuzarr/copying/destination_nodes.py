"""The nodes of a copy's destination: created, or checked when a copy resumes into them.

Every array's new metadata (:mod:`.destination`) is worked out before anything is written;
then groups and arrays are created (``--overwrite``: replacing the Zarr node at DST, never
other data) or, where DST has them already, checked to have the metadata the copy would write.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.array import Array
from ..core.group import Group, create_array_node, create_group_node, open_node
from ..errors import ContainsNodeError, MetadataError
from ..hierarchy import node_prefix, read_node
from ..metadata.json_util import check_attributes, keeping_attributes
from .destination import target_metadata
from .nodes import node_name, walk

if TYPE_CHECKING:
    from ..hierarchy import NodeInfo
    from ..metadata.v2 import ArrayMetadataV2
    from ..metadata.v3 import ArrayMetadata
    from ..store.base import Store
    from .destination import FormatOptions


@dataclass
class Tally:
    """What a copy did: nodes copied, and chunks (inner chunks when sharded) written and skipped."""

    arrays: int = 0
    groups: int = 0
    written: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class ArrayCopy:
    """One array to copy: its source, its (new or resumed) destination, and how."""

    name: str
    source: Array
    destination: Array
    #: the encoding is unchanged: copy stored objects byte for byte
    raw: bool



def _join(base: str, relative: str) -> str:
    return "/".join(p for p in (base, relative) if p)


def prepare_nodes(
    source: Array | Group, store: Store, base: str, options: FormatOptions, *, overwrite: bool, tally: Tally
) -> list[ArrayCopy]:
    """Create (or check, when resuming) every node of the copy at ``base`` of ``store``; the
    arrays whose data is still to copy.

    Every array's new metadata is worked out before anything is written, so that an option
    that does not suit one array (chunks that do not divide its shards) leaves DST untouched.
    """
    nodes = [
        (relative, node, None if isinstance(node, Group) else target_metadata(node, options, node_name(relative)))
        for relative, node in walk(source)
    ]
    for relative, node, _ in nodes:
        _check_attributes_of(node, node_name(relative))
    # Only a Zarr node, or nothing, at DST: a copy made into a directory of other files gave it a
    # zarr.json, and a later --overwrite erased those files with the copy.
    _refuse_other_data(store, base, overwrite=overwrite)
    if not overwrite:
        # Every node DST has that the copy could not take, refused before any is written (a
        # refused copy had replaced DST's root attributes and made nodes before it).
        for relative, node, metadata in nodes:
            path, name = _join(base, relative), node_name(relative)
            if isinstance(node, Group):
                _refuse_other_group(read_node(store, path), options.zarr_format or node.zarr_format, name)
            else:
                assert metadata is not None
                _refuse_other_array(store, path, metadata, name)
    copies = []
    for relative, node, metadata in nodes:
        path = _join(base, relative)
        name = node_name(relative)
        replace = overwrite and relative == ""  # the root's erase takes everything below it along
        if isinstance(node, Group):
            _prepare_group(store, path, node, options.zarr_format or node.zarr_format, replace, name)
            tally.groups += 1
            continue
        assert metadata is not None
        destination = _prepare_array(store, path, metadata, replace, name)
        copies.append(ArrayCopy(name, node, destination, raw=metadata is node.metadata))
        tally.arrays += 1
    return copies


def _check_attributes_of(node: Array | Group, name: str) -> None:
    """Refuse, before anything is written, attributes gpuzarr cannot write (too deep to be read
    back; NaN and infinite numbers are copied as the source's document holds them)."""
    attributes = dict(node.attrs)
    try:
        check_attributes(attributes, attributes)
    except MetadataError as exc:
        raise MetadataError(f"{name}: {exc}") from None


def _refuse_other_data(store: Store, base: str, *, overwrite: bool) -> None:
    """Refuse a DST whose root is no Zarr node but holds other data.

    ``--overwrite`` erases everything below DST's root, so that a mistyped DST never deletes a
    directory of other files; and a copy without it would make such a directory a Zarr node,
    which a later ``--overwrite`` then erased whole.
    """
    if read_node(store, base) is not None or not store.supports_listing:
        return
    keys = list(itertools.islice(store.list_prefix(node_prefix(base)), 3))
    if keys:
        shown = ", ".join(repr(k) for k in keys[:2]) + (", ..." if len(keys) > 2 else "")
        what = "overwrite (--overwrite) replaces only a Zarr node" if overwrite else "a copy goes to a new place"
        raise ContainsNodeError(
            f"DST holds data that is not a Zarr array or group ({shown}); {what}: remove that data yourself, or "
            "copy to another place"
        )


def _prepare_group(store: Store, path: str, source: Group, zarr_format: int, overwrite: bool, name: str) -> None:
    attributes = dict(source.attrs)
    found = read_node(store, path)
    if found is None or found.implicit or overwrite:
        with keeping_attributes(attributes):  # their NaN and infinite numbers, as the source holds them
            create_group_node(store, path, attributes, overwrite=overwrite, zarr_format=zarr_format)
        return
    _refuse_other_group(found, zarr_format, name)
    if found.attributes != attributes:
        existing = open_node(store, path, device="cpu")
        existing.attrs.put(attributes)


def _refuse_other_group(found: NodeInfo | None, zarr_format: int, name: str) -> None:
    """ContainsNodeError where DST holds another node than a group of ``zarr_format`` there."""
    if found is None or found.implicit:
        return
    if found.node_type != "group" or found.zarr_format != zarr_format:
        raise ContainsNodeError(
            f"DST {name}: a Zarr v{found.zarr_format} {found.node_type} is there, the copy is a Zarr "
            f"v{zarr_format} group (pass overwrite=True, or --overwrite, to replace DST)"
        )


def _refuse_other_array(
    store: Store, path: str, metadata: ArrayMetadata | ArrayMetadataV2, name: str
) -> Array | None:
    """The array of ``metadata``'s encoding DST holds at ``path`` (its attributes may differ:
    they are written over), None where there is no node; ContainsNodeError where another node
    is there."""
    found = read_node(store, path)
    if found is None or found.implicit:
        return None
    existing = open_node(store, path, device="cpu")
    if not isinstance(existing, Array):
        raise ContainsNodeError(
            f"DST {name}: a group is there, the copy is an array (pass overwrite=True, or --overwrite, to replace DST)"
        )
    have, want = _encoding(existing.metadata), _encoding(metadata)
    if have != want:
        fields = sorted(k for k in have.keys() | want.keys() if have.get(k) != want.get(k))
        raise ContainsNodeError(
            f"DST {name}: an array with other metadata is there ({', '.join(fields)} differ); "
            "pass overwrite=True, or --overwrite, to replace DST"
        )
    return existing


def _encoding(metadata: ArrayMetadata | ArrayMetadataV2) -> dict[str, Any]:
    return {k: v for k, v in metadata.to_json().items() if k != "attributes"}


def _prepare_array(
    store: Store, path: str, metadata: ArrayMetadata | ArrayMetadataV2, overwrite: bool, name: str
) -> Array:
    existing = None if overwrite else _refuse_other_array(store, path, metadata, name)
    if existing is None:
        return create_array_node(store, path, metadata, overwrite=overwrite, device="cpu")
    if dict(existing.attrs) != metadata.attributes:
        existing.attrs.put(metadata.attributes)
    return existing
