"""``Group.tree()``: the hierarchy drawn with box-drawing characters, as zarr-python draws it.

::

    /
    ├── images (1024, 1024) uint8
    └── labels
        └── mask (1024, 1024) bool

Groups are named, arrays get their shape and dtype. Names are bold on a terminal (ANSI) and in
Jupyter (HTML), unless ``plain``. No third-party renderer is needed.
"""

from __future__ import annotations

import sys
from collections import deque
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["TreeRepr", "render_tree"]


class TreeRepr:
    """A drawn hierarchy: ``print`` or ``repr`` shows the text, Jupyter the HTML."""

    def __init__(self, text: str, html: str, truncated: str = "") -> None:
        self.text = truncated + text
        self._html = truncated + html

    def __repr__(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, str]:
        html = (
            '<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
            "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">"
            f"{self._html}</pre>\n"
        )
        return {"text/plain": self.text, "text/html": html}


def render_tree(
    root_name: str, members: Sequence[tuple[str, Any]], *, truncated_at: int | None = None, plain: bool = False
) -> TreeRepr:
    """Draw ``members`` ((path relative to the root, node) pairs) below ``root_name``.

    Parameters
    ----------
    root_name
        The first line: the group's name ("/" for a root).
    members
        Every node to draw, as ``Group.members`` gives them; a node whose parent is missing is
        not drawn. A string in place of a node is drawn as a note (why it could not be read).
    truncated_at
        When not None, a first line says the listing stopped at that many nodes.
    plain
        No bold names (no ANSI codes, no ``<b>``).

    Returns
    -------
    TreeRepr
    """
    ansi = not plain and sys.stdout.isatty()
    bold_open, bold_close = ("\x1b[1m", "\x1b[0m") if ansi else ("", "")
    html_open, html_close = ("", "") if plain else ("<b>", "</b>")
    children: dict[str, list[tuple[str, Any]]] = {}
    for key, node in sorted(members, key=lambda m: m[0]):
        children.setdefault(key.rpartition("/")[0], []).append((key, node))

    text = [f"{bold_open}{root_name}{bold_close}"]
    html = [f"{html_open}{escape(root_name)}{html_close}"]
    # An explicit stack, not recursion: hierarchies may be deeper than Python's recursion limit.
    stack = [("", deque(children.get("", [])))]
    while stack:
        prefix, remaining = stack[-1]
        if not remaining:
            stack.pop()
            continue
        key, node = remaining.popleft()
        name = key.rpartition("/")[2]
        last = not remaining
        connector = "└── " if last else "├── "
        # An array shows its shape and type; a note (a string) stands for a node that could
        # not be read, and says why.
        detail = ""
        if hasattr(node, "shape"):
            detail = f" {node.shape} {node.dtype}"
        elif isinstance(node, str):
            detail = f" ({node})"
        text.append(f"{prefix}{connector}{bold_open}{name}{bold_close}{detail}")
        html.append(f"{prefix}{connector}{html_open}{escape(name)}{html_close}{escape(detail)}")
        if key in children:
            stack.append((prefix + ("    " if last else "│   "), deque(children[key])))
    note = "" if truncated_at is None else f"Truncated at max_nodes={truncated_at}, some nodes may be missing\n"
    return TreeRepr("\n".join(text) + "\n", "\n".join(html) + "\n", note)
