"""Opening the node a PATH (or store URL) names, and walking the hierarchy below a group."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from .. import api
from ..core.array import Array
from ..core.group import Group, validate_node_name
from ..errors import GpuZarrError, MetadataError, StorePermissionError, UnsupportedOperationError
from ..hierarchy import node_prefix

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

Node = Array | Group


@contextlib.contextmanager
def open_path(path: str, storage_options: dict[str, Any] | None, device: str = "cpu") -> Iterator[Node]:
    """The array or group at ``path`` (any store URL gpuzarr opens), read only; its store is
    closed (a zip archive's file, an object store's connections) when the block ends."""
    node = api.open(path, mode="r", device=device, storage_options=storage_options)
    try:
        yield node
    finally:
        node.store.close()


def walk(node: Node, on_error: Callable[[str, GpuZarrError], None] | None = None) -> Iterator[tuple[str, Node]]:
    """(path relative to ``node``, node) of ``node`` ("") and every node below it, each group
    before its children, names sorted.

    ``on_error`` receives a child whose metadata cannot be read (its path and the error: bad
    metadata, or a folder the file system will not let this process read) and the walk goes on
    without it; without ``on_error`` the error is raised. ``Group.members`` stops at the first
    such child, which is why this walker lists a group's children itself.
    """
    # An explicit stack, not recursion: hierarchies may be deeper than the recursion limit.
    stack: list[tuple[str, Node]] = [("", node)]
    while stack:
        relative, current = stack.pop()
        yield relative, current
        if isinstance(current, Group):
            children = list(_children(current, relative, on_error))
            stack.extend(reversed(children))


def children(group: Group, on_error: Callable[[str, GpuZarrError], None] | None = None) -> list[tuple[str, Node]]:
    """(name, node) of the group's children, names sorted; ``on_error`` as :func:`walk` takes it."""
    return list(_children(group, "", on_error))


def readable_children(group: Group) -> tuple[list[tuple[str, Node]], list[tuple[str, str]]]:
    """(name, node) of the group's children that could be read, and (name, why) of those that
    could not (bad metadata, a folder this process may not read), names sorted in each. A refusal
    to list the group's own folder, or a store that cannot list it, is raised: nothing of it can
    be shown."""
    unreadable: list[tuple[str, str]] = []

    def note(name: str, exc: GpuZarrError) -> None:
        if not name:
            raise exc
        unreadable.append((name, failure_reason(exc)))

    return children(group, on_error=note), unreadable


def failure_reason(exc: GpuZarrError) -> str:
    """What went wrong with a node: a store error's reason (its URL and key are shown beside
    it anyway), or the whole message."""
    return getattr(exc, "reason", None) or str(exc)


def _children(
    group: Group, relative: str, on_error: Callable[[str, GpuZarrError], None] | None
) -> Iterator[tuple[str, Node]]:
    try:
        names = _child_names(group)
    # The group's own folder may not be listed, or its store cannot list at all (HTTP).
    except (StorePermissionError, UnsupportedOperationError) as exc:
        if on_error is None:
            raise
        on_error(relative, exc)
        return
    for name in names:
        path = f"{relative}/{name}" if relative else name
        try:
            child = group[name]
        except KeyError:
            continue  # a directory holding no node
        except (MetadataError, StorePermissionError) as exc:
            if on_error is None:
                raise
            on_error(path, exc)
            continue
        yield path, child


def _child_names(group: Group) -> list[str]:
    """The names of the directories below ``group`` that may hold nodes (from its consolidated
    metadata when it has some), without reading any child's metadata.

    Where neither the consolidated metadata nor the store (HTTP) can name them, the members are
    unknown, and UnsupportedOperationError says so: a group shown, checked or copied as if it
    had none would be wrong without a word."""
    if group.consolidated:
        return list(group)
    if not group.store.supports_listing:
        raise UnsupportedOperationError(
            f"{node_name(group.path)}: the store ({type(group.store).__name__}) cannot list its keys and "
            "the group has no consolidated metadata, so its members are unknown. Consolidate its "
            "metadata where it is written (gpuzarr.consolidate_metadata), or name an array by its path"
        )
    _keys, dirs = group.store.list_dir(node_prefix(group.path))
    return sorted(name for name in (d.rstrip("/").rsplit("/", 1)[-1] for d in dirs) if _is_node_name(name))


def _is_node_name(name: str) -> bool:
    # A directory named like no node can be ("..") is not a child, not an error; one that holds
    # no node ("__pycache__") is skipped when it is opened.
    try:
        validate_node_name(name, existing=True)
    except MetadataError:
        return False
    return True


def node_name(relative: str) -> str:
    """How a node is named in the command line's output: "/" for the root, "/a/b" below it."""
    return "/" + relative
