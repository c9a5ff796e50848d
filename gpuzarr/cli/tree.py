"""``gpuzarr tree PATH``: the hierarchy below a group, drawn as ``Group.tree()`` draws it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..copying.nodes import failure_reason, open_path, readable_children
from ..core.array import Array
from ..core.group import Group
from ..core.tree import TreeRepr, render_tree
from ..errors import StorePermissionError, UnsupportedOperationError
from .options import add_storage_options, non_negative_int

if TYPE_CHECKING:
    import argparse



def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tree",
        help="draw the hierarchy below a group",
        description="Draw the groups and arrays below the group at PATH (arrays with their shape "
        "and data type). Names are bold on a terminal unless --plain.",
    )
    parser.add_argument("path", metavar="PATH", help="a group or array (a path or store URL)")
    parser.add_argument(
        "-L", "--level", type=non_negative_int, metavar="N",
        help="levels shown below the group's children (0: the children only; default: all)",
    )
    parser.add_argument(
        "--max-nodes", type=non_negative_int, default=500, metavar="N",
        help="stop after N nodes, saying so (default 500)",
    )
    parser.add_argument("--plain", action="store_true", help="no bold names, even on a terminal")
    add_storage_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_path(args.path, args.storage_options) as node:
        if isinstance(node, Array):
            # An array is a tree of one node: its name, shape and data type.
            name = "/" + node.path.rsplit("/", 1)[-1] if node.path else "/"
            drawn = render_tree(f"{name} {node.shape} {node.dtype}", [], plain=args.plain)
        else:
            drawn = _draw_group(node, args.level, args.max_nodes, args.plain)
    print(drawn.text, end="")
    return 0


def _draw_group(group: Group, level: int | None, max_nodes: int, plain: bool) -> TreeRepr:
    """``Group.tree()``'s drawing (nodes in the same order, the same truncation), but a child
    that cannot be read (bad metadata, a folder this process may not read) is drawn with the
    reason, and the rest of the hierarchy after it. The group's own listing refused raises."""
    max_depth = None if level is None else level + 1
    members: list[tuple[str, Any]] = []
    stack = [iter(_listed(group, ""))]
    while stack and len(members) <= max_nodes:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        path, node = item
        members.append(item)
        if isinstance(node, Group) and (max_depth is None or path.count("/") + 1 < max_depth):
            try:
                stack.append(iter(_listed(node, path)))
            # its metadata reads, its folder does not list (or its store cannot list at all)
            except (StorePermissionError, UnsupportedOperationError) as exc:
                members[-1] = (path, f"unreadable: {failure_reason(exc)}")
    truncated = len(members) > max_nodes
    return render_tree(group.name, members[:max_nodes], truncated_at=max_nodes if truncated else None, plain=plain)


def _listed(group: Group, path: str) -> list[tuple[str, Any]]:
    """(path, child or a note saying why it could not be read) of ``group``'s children, sorted
    by name. Raises StorePermissionError where the group's own folder may not be listed."""
    readable, unreadable = readable_children(group)
    found: list[tuple[str, Any]] = [*readable, *((name, f"unreadable: {why}") for name, why in unreadable)]
    return [(f"{path}/{name}" if path else name, node) for name, node in sorted(found, key=lambda item: item[0])]
