"""``verify``'s check of consolidated metadata against the documents it copies.

A group with consolidated metadata is navigated through it: its arrays open, and their chunks
decode, even when their own metadata documents (``zarr.json``, ``.zarray``/``.zattrs``) are
gone or say something else. Tools that do not read consolidated metadata (zarr-python with
``use_consolidated=False``, TensorStore, a reader of one array's path) would then see another
hierarchy, so every node the consolidated metadata records must have a document of its own that
agrees with it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..consolidated import MEMBER, load_view
from ..copying.nodes import node_name
from ..core.group import Group
from ..errors import MetadataError, StoreError, StorePermissionError
from ..hierarchy import read_node, require_node

if TYPE_CHECKING:
    from ..copying.nodes import Node
    from ..hierarchy import NodeInfo


def consolidated_problems(root: Node) -> list[tuple[str, str, bool]]:
    """(node, what is wrong, whether the store refused it) for each node recorded in ``root``'s
    consolidated metadata whose own metadata document is missing, unreadable or different; []
    without consolidated metadata. A document the store refuses (permission denied) is
    unreadable, not corrupt, and the nodes after it are checked all the same."""
    if not isinstance(root, Group) or not root.consolidated:
        return []
    store = root.store
    view = load_view(store, root.path, require_node(store, root.path), None)
    if view is None:  # the group's consolidated metadata was read when it was opened
        return []
    problems = []
    for relative, recorded in sorted(view.entries().items()):
        path = "/".join(p for p in (root.path, relative) if p)
        name = node_name(relative)
        try:
            found = read_node(store, path, allow_implicit=False)
        except MetadataError as exc:
            problems.append((name, f"its own metadata document cannot be read: {exc}", False))
            continue
        except (StoreError, StorePermissionError) as exc:  # refused (permission denied), or the store failed
            problems.append((name, str(exc), True))
            continue
        if found is None:
            problems.append(
                (name, f"the consolidated metadata records a Zarr v{recorded.zarr_format} {recorded.node_type}, "
                 "but its own metadata document is missing", False)
            )
            continue
        differing = _differing_fields(recorded, found)
        if differing:
            problems.append(
                (name, f"its metadata document and the consolidated metadata differ in {', '.join(differing)}", False)
            )
    return problems


def _differing_fields(recorded: NodeInfo, found: NodeInfo) -> list[str]:
    """The fields in which two records of one node differ, sorted."""
    if (recorded.node_type, recorded.zarr_format) != (found.node_type, found.zarr_format):
        return ["node_type/zarr_format"]
    have, want = _comparable(found), _comparable(recorded)
    return sorted(k for k in have.keys() | want.keys() if _canonical(have.get(k)) != _canonical(want.get(k)))


def _comparable(info: NodeInfo) -> dict[str, Any]:
    # A group's own consolidated member is not part of what its parent records.
    fields = {k: v for k, v in info.document.items() if k not in (MEMBER, "attributes")}
    fields["attributes"] = info.attributes
    return fields


def _canonical(value: Any) -> str:
    # JSON text, so that NaN (which zarr-python writes in attributes) equals NaN.
    return json.dumps(value, sort_keys=True, allow_nan=True)
