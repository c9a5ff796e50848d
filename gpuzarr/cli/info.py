"""``gpuzarr info PATH``: what an array or group is, as ``Array.info_complete()`` tells it.

An array prints zarr-python's ``info`` lines (shape, data type, chunk and shard shapes, codecs,
bytes stored, storage ratio, chunks stored), plus its dimension names. A group prints its own
summary and its children; ``--recursive`` adds the info of every array below it. ``--json``
gives the same as one JSON document. The stored sizes need a listing of the store; a store that
cannot list (HTTP) gives the rest and says so. A group's children need its consolidated metadata
there: without it, the group's own summary says that its members are unknown, and why.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any

from ..copying.nodes import failure_reason, node_name, open_path, readable_children, walk
from ..core.array import Array
from ..errors import UnsupportedOperationError
from .options import add_storage_options

if TYPE_CHECKING:
    import argparse

    from ..core.group import Group
    from ..core.info import ArrayInfo
    from ..errors import GpuZarrError

UNLISTED = "the store cannot list its keys: stored bytes and chunks are unknown"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "info",
        help="describe an array or group",
        description="Describe the array or group at PATH: shape, data type, chunks, shards, codecs, "
        "bytes stored, compression ratio and how many chunks are stored.",
    )
    parser.add_argument("path", metavar="PATH", help="an array or group (a path or store URL)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "-r", "--recursive", action="store_true", help="for a group: also the info of every array below it"
    )
    add_storage_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_path(args.path, args.storage_options) as node:
        if args.json:
            doc = array_json(node) if isinstance(node, Array) else group_json(node, args.recursive)
            print(json.dumps(_strict(doc), indent=2, allow_nan=False, default=str))
        elif isinstance(node, Array):
            print(array_text(node))
        else:
            print(group_text(node, args.recursive))
    return 0


def _strict(value: Any) -> Any:
    """``value`` as strict JSON: a float that is not finite (in attributes zarr-python wrote
    as ``NaN``) becomes the string Zarr's metadata uses for it ("NaN", "Infinity", "-Infinity")."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def _complete_info(array: Array) -> tuple[ArrayInfo, bool]:
    """The array's info with the stored sizes when the store can list them (and whether it could)."""
    if not array.store.supports_listing:
        return array.info, False
    return array.info_complete(), True


def _line(label: str, value: Any) -> str:
    # ArrayInfo's layout, so that added lines line up with its own.
    return f"{label:<19}: {value}"


def array_text(array: Array) -> str:
    info, listed = _complete_info(array)
    lines = [repr(info)]
    if array.dimension_names is not None:
        lines.append(_line("Dimension names", array.dimension_names))
    if not listed:
        lines.append(_line("Note", UNLISTED))
    return "\n".join(lines)


def array_json(array: Array) -> dict[str, Any]:
    info, listed = _complete_info(array)
    doc = dataclasses.asdict(info)
    # JSON's own spelling of the fill value (NaN as "NaN", bytes as base64), as the metadata has it
    doc["fill_value"] = array.metadata.to_json()["fill_value"]
    doc["storage_ratio"] = info.storage_ratio
    doc["dimension_names"] = None if array.dimension_names is None else list(array.dimension_names)
    doc["attributes"] = dict(array.attrs)
    doc["listed"] = listed
    return {"node_type": "array", **_lists(doc)}


def _lists(value: Any) -> Any:
    """Tuples as lists, recursively (``asdict`` keeps tuples, which JSON writes as lists anyway;
    this keeps the document equal to its own round trip)."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def _member_line(name: str, node: Array | Group, width: int) -> str:
    if isinstance(node, Array):
        return f"  {name:<{width}}  array {node.shape} {node.dtype}"
    return f"  {name:<{width}}  group"


def _children_or_why(group: Group) -> tuple[list[tuple[str, Array | Group]], list[tuple[str, str]], str | None]:
    """:func:`readable_children`, or none and why the group's members are unknown (a store
    that cannot list, HTTP, and no consolidated metadata)."""
    try:
        members, unreadable = readable_children(group)
    except UnsupportedOperationError as exc:
        return [], [], failure_reason(exc)
    return members, unreadable, None


def group_text(group: Group, recursive: bool) -> str:
    members, unreadable, unknown = _children_or_why(group)
    arrays = sum(isinstance(node, Array) for _, node in members)
    lines = [
        _line("Name", group.name),
        _line("Type", "Group"),
        _line("Zarr format", group.zarr_format),
        _line("Read-only", group.store.read_only),
        _line("Store type", type(group.store).__name__),
        _line("Attributes", len(group.attrs)),
    ]
    if unknown is not None:
        return "\n".join([*lines, _line("No. members", "unknown"), unknown])
    lines += [
        _line("No. members", len(members)),
        _line("No. arrays", arrays),
        _line("No. groups", len(members) - arrays),
    ]
    if unreadable:
        lines.append(_line("No. unreadable", len(unreadable)))
    if members or unreadable:
        lines.append("Members:")
        width = max(len(name) for name in [*(n for n, _ in members), *(n for n, _ in unreadable)])
        described = [(name, _member_line(name, node, width)) for name, node in members]
        described += [(name, f"  {name:<{width}}  unreadable: {why}") for name, why in unreadable]
        lines += [line for _, line in sorted(described)]
    if recursive:
        below, refused = _arrays_below(group)
        for relative, node in below:
            lines += ["", f"== {node_name(relative)}", array_text(node)]
        lines += ["", *(f"== {name}: unreadable: {why}" for name, why in refused.items())] if refused else []
    return "\n".join(lines)


def _arrays_below(group: Group) -> tuple[list[tuple[str, Array]], dict[str, str]]:
    """Every array below ``group``, and (node name, why) of every node below it that could
    not be read, children included: what ``--recursive`` could not describe, said."""
    refused: dict[str, str] = {}

    def note(path: str, exc: GpuZarrError) -> None:
        if path:
            refused[node_name(path)] = failure_reason(exc)

    arrays = [(relative, node) for relative, node in walk(group, on_error=note) if isinstance(node, Array)]
    return arrays, refused


def group_json(group: Group, recursive: bool) -> dict[str, Any]:
    readable, unreadable, unknown = _children_or_why(group)
    members: list[dict[str, Any]] = [
        {"name": name, "node_type": "array", "shape": list(node.shape), "dtype": str(node.dtype)}
        if isinstance(node, Array)
        else {"name": name, "node_type": "group"}
        for name, node in readable
    ]
    members += [{"name": name, "node_type": None, "unreadable": why} for name, why in unreadable]
    members.sort(key=lambda member: str(member["name"]))
    doc: dict[str, Any] = {
        "node_type": "group",
        "name": group.name,
        "zarr_format": group.zarr_format,
        "read_only": group.store.read_only,
        "store_type": type(group.store).__name__,
        "attributes": dict(group.attrs),
        "members": members,
    }
    if unknown is not None:
        doc["members"] = None
        doc["members_unknown"] = unknown
        return doc
    if recursive:
        below, refused = _arrays_below(group)
        doc["arrays"] = {node_name(relative): array_json(node) for relative, node in below}
        doc["unreadable"] = refused
    return doc
