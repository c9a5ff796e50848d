"""``gpuzarr tree PATH``: the hierarchy below a group, drawn as ``Group.tree()`` draws it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..convert.nodes import open_path
from ..core.array import Array
from ..core.tree import render_tree
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
            drawn = node.tree(level=args.level, max_nodes=args.max_nodes, plain=args.plain)
    print(drawn.text, end="")
    return 0
