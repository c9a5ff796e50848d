"""Where a node of a store lies, so that a copy can refuse a destination that overlaps its
source whatever names them: paths, URLs, Store objects, kvstore dicts or open nodes."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from ..store import innermost
from ..store.local import LocalStore
from ..store.memory import MemoryStore
from ..store.zip import ZipStore

if TYPE_CHECKING:
    from ..store.base import Store


def node_place(store: Store, path: str) -> tuple[str, tuple[str, ...]]:
    """(what holds the data, the parts of the node's place in it): two nodes overlap where the
    first is the same and one's parts begin the other's.

    A local directory and a zip archive are places in the file system (real paths, so that two
    roots one inside the other, or a link to either, meet; an archive's members below its
    file), a memory store is its dict (``memory://name`` stores share one), a store of an object
    service or fsspec is its URL's service and path; any other store is itself. Views (read
    only, cached) are the store they show.
    """
    store = innermost(store)
    inner = _parts(path, "/")
    if isinstance(store, LocalStore):
        return "file", _parts(os.path.realpath(store.root), os.sep) + inner
    if isinstance(store, ZipStore):
        return "file", (*_parts(os.path.realpath(store.path), os.sep), "", *inner)  # "": no folder has it
    if isinstance(store, MemoryStore):
        return f"memory:{id(store.data)}", inner
    url = getattr(store, "url", None)
    if isinstance(url, str) and "://" in url:
        scheme, _, rest = url.partition("://")
        return f"url:{scheme}", _parts(rest, "/") + inner
    return f"store:{id(store)}", inner


def _parts(path: str, separator: str) -> tuple[str, ...]:
    return tuple(part for part in path.split(separator) if part)


def refuse_overlapping_nodes(source: tuple[Store, str], destination: tuple[Store, str]) -> None:
    """Raise InvalidArgumentError where the destination node is the source node, or one lies
    inside the other: a copy would read what it writes, and ``overwrite`` would erase the
    source before reading it."""
    (held_a, a), (held_b, b) = node_place(*source), node_place(*destination)
    shorter = min(len(a), len(b))
    if held_a == held_b and a[:shorter] == b[:shorter]:
        raise InvalidArgumentError(
            f"the destination ({destination[0]!r}, {destination[1] or '/'!r}) and the source "
            f"({source[0]!r}, {source[1] or '/'!r}) overlap: copy to another place"
        )
