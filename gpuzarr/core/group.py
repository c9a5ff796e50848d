"""``Group``: a Zarr v3 or v2 group, and opening and creating the nodes below it.

:func:`open_node` opens whatever lives at a path; :func:`create_group_node` and
:func:`create_array_node` write new nodes through :func:`gpuzarr.hierarchy.write_node`. The
public wrappers in :mod:`gpuzarr.api` and the ``Group`` methods both call them.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..attributes import Attributes
from ..codecs.blosc import refuse_unbuilt_blosc
from ..consolidated import (
    ConsolidatedView,
    load_view,
    record_metadata_write,
    record_node_erased,
    recorded_if_interrupted,
    write_group_documents,
)
from ..errors import (
    ContainsNodeError,
    GroupNotFoundError,
    IncompatibleNodeError,
    InvalidArgumentError,
    InvalidKeyError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
)
from ..hierarchy import (
    CHILDREN_READ_AT_ONCE,
    array_metadata,
    group_documents,
    node_prefix,
    read_node,
    require_node,
    write_node,
)
from ..layout import with_complete_codecs
from ..metadata.build import build_metadata
from ..metadata.v2 import ZATTRS, ArrayMetadataV2
from ..parallel import io_runner
from ..store import make_store
from .array import Array
from .array_config import with_write_empty_chunks, write_empty_chunks_of
from .from_data import as_data, shape_and_dtype
from .from_data import write_data as write_data_into
from .info import GroupInfo
from .like import like_arguments
from .tree import TreeRepr, render_tree

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..hierarchy import NodeInfo
    from ..metadata.v3 import ArrayMetadata
    from ..store.base import Store


def validate_node_name(name: str, *, existing: bool = False) -> str:
    """Node names per the v3 spec: non-empty, no '/', not only periods, no '__' prefix.

    ``existing``: the name of a node to open, not to create. The '__' prefix is then allowed:
    the spec reserves it for new nodes, zarr-python writes such nodes anyway, and a group lists
    them, so they must open through it. A path that could lead out of the group never is.
    """
    if not isinstance(name, str) or not name:
        raise MetadataError(f"node name: must be a non-empty string, got {name!r}")
    if "/" in name:
        raise MetadataError(f"node name {name!r}: must not contain '/'")
    if set(name) == {"."}:
        raise MetadataError(f"node name {name!r}: must not consist only of periods")
    if name.startswith("__") and not existing:
        raise MetadataError(f"node name {name!r}: names starting with '__' are reserved")
    if name in METADATA_NAMES and not existing:
        # The key of its parent's own document: the write failed late with an OSError, or (a
        # v2 '.zmetadata') made a child that broke consolidating and that zarr-python does not list.
        raise MetadataError(f"node name {name!r}: the name of a metadata document")
    return name


#: names of metadata documents, which no node of a group may take
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})


class Group:
    """A group node. ``g["a/b"]`` opens a descendant; ``list(g)`` lists the children's names.

    A group opened with consolidated metadata (``consolidated``) finds its descendants there,
    with no further metadata reads, as zarr-python does; nodes missing from it are not looked
    for in the store.
    """

    @classmethod
    def open(cls, store: Any, zarr_format: int | None = None, *, device: str = "auto") -> Group:
        """The group at ``store`` (a path, URL, Store or kvstore dict), as zarr-python names it.

        :func:`gpuzarr.open_group` that never creates.

        ``zarr_format`` (None: either) is the format it must have. GroupNotFoundError where
        there is no such group.
        """
        if zarr_format not in (None, 2, 3):
            raise MetadataError(f"zarr_format: expected None, 2 or 3, got {zarr_format!r}")
        node, path = open_node_of_kind(store, Group, GroupNotFoundError, device)
        if zarr_format is not None and node.zarr_format != zarr_format:
            raise GroupNotFoundError(f"{path or '/'!r} is a Zarr v{node.zarr_format} group, not v{zarr_format}")
        return node

    @classmethod
    def from_store(
        cls, store: Any, *, attributes: dict[str, Any] | None = None, zarr_format: int = 3, overwrite: bool = False
    ) -> Group:
        """A new group at ``store``, by zarr-python's classmethod name: :func:`gpuzarr.create_group`.

        ContainsNodeError where a node is there, unless ``overwrite``.
        """
        if zarr_format not in (2, 3):
            raise MetadataError(f"zarr_format: expected 2 or 3, got {zarr_format!r}")
        opened, path = make_store(store)
        return create_group_node(opened, path, attributes, overwrite=overwrite, zarr_format=zarr_format)

    def __init__(
        self,
        store: Store,
        path: str,
        attributes: dict[str, Any],
        device: str = "auto",
        zarr_format: int = 3,
        *,
        consolidated: ConsolidatedView | None = None,
        implicit: bool = False,
    ) -> None:
        self.store = store
        self.path = path.strip("/")
        self._attributes = dict(attributes)
        self._device = device
        self._zarr_format = zarr_format
        self._consolidated = consolidated
        #: no metadata document of its own (yet): setting attributes writes its group documents
        self._implicit = implicit
        #: held from reading the attributes to writing their change, so that changes made
        #: through this handle from several threads keep each other
        self._metadata_lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        """A pickled Group carries no lock: its copy makes its own."""
        state = dict(self.__dict__)
        del state["_metadata_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._metadata_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"<gpuzarr.Group {self.store!r} path={self.path or '/'!r}>"

    @property
    def zarr_format(self) -> int:
        """The Zarr format version: 2 or 3."""
        return self._zarr_format

    @property
    def attrs(self) -> Attributes:
        """The user attributes, a mutable mapping written through to the store."""
        return Attributes(lambda: self._attributes, self._put_attributes, self._metadata_lock)

    @property
    def consolidated(self) -> bool:
        """Whether the group navigates by consolidated metadata (see :func:`gpuzarr.open_group`)."""
        return self._consolidated is not None

    def _put_attributes(self, attrs: dict[str, Any]) -> None:
        with self._metadata_lock:
            if self.store.read_only:
                raise ReadOnlyError(f"group {self.path or '/'!r} is read-only")
            documents = group_documents(attrs, self._zarr_format, self._attributes)
            if self._zarr_format == 2 and not self._implicit:
                documents = {ZATTRS: documents[ZATTRS]}  # .zgroup never changes
            # An implicit group made explicit: the nodes below it are its descendants now, which
            # the consolidated metadata above records as for a new group.
            with recorded_if_interrupted(self.store, self.path, new_node=self._implicit):
                write_group_documents(self.store, self.path, documents)
                self._attributes = dict(attrs)
                record_metadata_write(self.store, self.path, new_node=self._implicit)
            self._implicit = False

    def _child_path(self, name: str, *, existing: bool = False) -> str:
        """The path of the descendant ``name`` ("a/b").

        That of a node to create, or (``existing``) of one to open, which may have a name
        reserved for new nodes.
        """
        if not isinstance(name, str):  # g[...], g[0], g[b"x"]: a bare AttributeError came out
            raise MetadataError(
                f"node name: expected a string naming a member, got {name!r} (an array's elements are read "
                "as group[name][...])"
            )
        parts = [validate_node_name(p, existing=existing) for p in name.strip("/").split("/")]
        return "/".join([self.path, *parts]) if self.path else "/".join(parts)

    def __getitem__(self, name: str) -> Array | Group:
        path = self._child_path(name, existing=True)
        if self._consolidated is not None:
            info = self._consolidated.lookup(path)
            if info is None:
                raise KeyError(name)
            return _node(self.store, path, info, self._device, self._consolidated, recorded=True)
        try:
            return open_node(self.store, path, device=self._device, implicit_format=self._zarr_format)
        except NodeNotFoundError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            path = self._child_path(name, existing=True)
            if self._consolidated is not None:
                return self._consolidated.lookup(path) is not None
            return read_node(self.store, path) is not None
        except (MetadataError, InvalidKeyError):  # a name no child can have: '..', a backslash
            return False

    def __iter__(self) -> Iterator[str]:
        """Names of the child arrays and groups, sorted.

        From the consolidated metadata when the group has it; else from the store (explicit, v2
        or implicit nodes).
        """
        if self._consolidated is not None:
            yield from self._consolidated.children(self.path)
            return
        for path, _info in self._child_nodes():
            yield path.rsplit("/", 1)[-1]

    def _child_nodes(self) -> Iterator[tuple[str, NodeInfo]]:
        """(path, what its metadata says) of each child node in the store, sorted by name.

        Their metadata is read :data:`CHILDREN_READ_AT_ONCE` children at a time, as many
        requests in flight as the store takes (on an object store, one child after the other
        took 10 s for 200 children at 20 ms each), and no further than the caller takes them
        (``tree(max_nodes=...)`` of a group of a million children).
        """
        _keys, dirs = self.store.list_dir(node_prefix(self.path))
        # By name: the listing sorts "name/", which puts "a-b/" and "a.c/" before "a/".
        paths = sorted(d.rstrip("/") for d in dirs)
        run = io_runner(self.store.io_concurrency)
        for start in range(0, len(paths), CHILDREN_READ_AT_ONCE):
            batch = paths[start : start + CHILDREN_READ_AT_ONCE]
            infos = run(lambda path: read_node(self.store, path), batch)
            yield from (
                (path, _in_format(info, self._zarr_format))
                for path, info in zip(batch, infos, strict=True)
                if info is not None
            )

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self) -> list[str]:
        """The names of the group's children, sorted."""
        return list(self)

    def members(
        self, max_depth: int | None = 0, *, recursive: bool = False, use_consolidated_for_children: bool = True
    ) -> tuple[tuple[str, Any], ...]:
        """(path, node) pairs of the arrays and groups below this group, as zarr-python gives them.

        Parameters
        ----------
        max_depth
            0 (the default): the children only; n: down to n levels below the children;
            None: every descendant.
        recursive
            The same as ``max_depth=None``.
        use_consolidated_for_children
            As zarr-python's: where this group has no consolidated metadata, whether a child
            group's own is used (True) or its children are read from the store (False).

        Returns
        -------
        tuple of (str, Array or Group)
            Paths relative to this group ("a", "a/b"), each group followed by its descendants;
            names sorted within a group.
        """
        if recursive:
            max_depth = None
        if max_depth is not None and (not isinstance(max_depth, int) or max_depth < 0):
            raise InvalidArgumentError(f"max_depth: expected None or an integer >= 0, got {max_depth!r}")
        return tuple(self._iter_members(max_depth, use_consolidated_for_children))

    def _iter_members(self, max_depth: int | None, consolidated_children: bool = True) -> Iterator[tuple[str, Any]]:
        # A stack, not recursion: a hierarchy may be deeper than Python's recursion limit (1,100
        # nested groups raised RecursionError). Each group comes before its descendants.
        stack: list[tuple[str, int | None, Iterator[tuple[str, Array | Group]]]] = [
            ("", max_depth, self._children(consolidated_children))
        ]
        while stack:
            prefix, depth, children = stack[-1]
            item = next(children, None)
            if item is None:
                stack.pop()
                continue
            name, node = item
            yield prefix + name, node
            if isinstance(node, Group) and (depth is None or depth > 0):
                deeper = None if depth is None else depth - 1
                stack.append((f"{prefix}{name}/", deeper, node._children(consolidated_children)))

    def _children(self, consolidated_children: bool = True) -> Iterator[tuple[str, Array | Group]]:
        """(name, node) of each child, opened, sorted by name.

        A child group comes with its own consolidated metadata where ``consolidated_children``.
        """
        if self._consolidated is not None:
            return self._recorded_children()
        # Each child's metadata read once (it was read again to open the child).
        return (
            (path.rsplit("/", 1)[-1], _opened(self.store, path, info, self._device, consolidated_children))
            for path, info in self._child_nodes()
        )

    def _recorded_children(self) -> Iterator[tuple[str, Array | Group]]:
        """:meth:`_children` from the consolidated metadata.

        A child erased by another thread after the names were listed is left out, as a listing
        of the store leaves it out (its look-up raised KeyError inside the iteration).
        """
        view = self._consolidated
        assert view is not None
        for name, path, info in self._recorded_entries(view):
            yield name, _node(self.store, path, info, self._device, view, recorded=True)

    def _recorded_entries(self, view: ConsolidatedView) -> Iterator[tuple[str, str, NodeInfo]]:
        """(name, path, record) of each child ``view`` records, sorted by name.

        A child erased by another thread after the names were listed is left out.
        """
        for name in view.children(self.path):
            path = self._child_path(name, existing=True)
            info = view.lookup(path)
            if info is not None:
                yield name, path, info

    @property
    def name(self) -> str:
        """The group's path with a leading "/" ("/" for a root group), as h5py and zarr-python name it."""
        return "/" + self.path

    @property
    def basename(self) -> str:
        """The last component of :attr:`name` ("" for a root group)."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def read_only(self) -> bool:
        """Whether the store refuses writes."""
        return self.store.read_only

    @property
    def info(self) -> GroupInfo:
        """A summary that prints as zarr-python's ``Group.info``: name, type, format, read-only, store type."""
        return GroupInfo(
            name=self.path,
            zarr_format=self._zarr_format,
            read_only=self.read_only,
            store_type=type(self.store).__name__,
        )

    def info_complete(self) -> GroupInfo:
        """:attr:`info` plus how many arrays and groups lie below the group, at any depth."""
        members = self.members(max_depth=None)
        arrays = sum(isinstance(node, Array) for _, node in members)
        return dataclasses.replace(
            self.info, count_members=len(members), count_arrays=arrays, count_groups=len(members) - arrays
        )

    def update_attributes(self, new_attributes: dict[str, Any]) -> Group:
        """Merge ``new_attributes`` into the attributes (one metadata write); returns the group."""
        with self._metadata_lock:
            self._put_attributes({**self._attributes, **new_attributes})
        return self

    def get(self, name: str, default: Any = None) -> Any:
        """The child ``name`` (nested: "a/b"), or ``default`` where there is none.

        A name no child can have (with a backslash, or ``..``) gives ``default`` too, as in
        zarr-python.
        """
        try:
            self._child_path(name, existing=True)  # a name no child can have: no child
        except (MetadataError, InvalidKeyError):
            return default
        try:
            return self[name]
        except (KeyError, InvalidKeyError):  # damaged metadata is raised, not taken for absence
            return default

    def tree(
        self, expand: bool | None = None, level: int | None = None, *, max_nodes: int = 500, plain: bool = False
    ) -> TreeRepr:
        """The hierarchy below this group as text, as zarr-python's ``Group.tree()`` draws it.

        Parameters
        ----------
        expand
            zarr-python's first argument, which it refuses unless None (zarr 2's widget opened
            expanded or not), as gpuzarr does: the text shows every node down to ``level``.
        level
            How many levels below the children to show (None: all; 0: the children only).
        max_nodes
            Stop after this many nodes, saying so in the first line.
        plain
            No bold names: plain text for logs and files (names are bold only on a terminal or
            in Jupyter anyway).

        Returns
        -------
        TreeRepr
            ``print(g.tree())`` shows it; ``str()`` and ``.text`` give the text.
        """
        if expand is not None:
            raise NotImplementedError("tree: expand is not implemented (as in zarr-python): the text shows every level")
        if level is not None and (isinstance(level, bool) or not isinstance(level, int) or level < 0):
            raise InvalidArgumentError(f"level: expected None or an integer >= 0, got {level!r}")
        if not isinstance(max_nodes, int) or max_nodes < 0:
            raise InvalidArgumentError(f"max_nodes: expected an integer >= 0, got {max_nodes!r}")
        members = list(itertools.islice(self._iter_members(level), max_nodes + 1))
        truncated = len(members) > max_nodes
        return render_tree(self.name, members[:max_nodes], truncated_at=max_nodes if truncated else None, plain=plain)

    def create_group(
        self, name: str, *, attributes: dict[str, Any] | None = None, overwrite: bool = False
    ) -> Group:
        """Create a child group (``name`` may be nested: "a/b"; missing parents are created)."""
        return create_group_node(
            self.store, self._child_path(name), attributes, overwrite=overwrite, device=self._device,
            zarr_format=self._zarr_format, consolidated=self._consolidated,
        )

    def create_array(self, name: str, **kwargs: Any) -> Array:
        """Create a child array (``name`` may be nested: "a/b").

        Takes :func:`gpuzarr.create`'s keyword arguments (``data`` too), and zarr-python's
        ``config`` and ``write_data``.
        """
        kwargs.setdefault("device", self._device)
        kwargs.setdefault("zarr_format", self._zarr_format)
        refuse_v3_memory_order(kwargs["zarr_format"], kwargs.get("order"))
        return new_array(self.store, self._child_path(name), **kwargs)

    def zeros(self, *, name: str, shape: Any, **kwargs: Any) -> Array:
        """A child array of zeros: :meth:`create_array` with ``fill_value=0`` (nothing stored)."""
        return self.create_array(name, shape=shape, **{"fill_value": 0, **kwargs})

    def ones(self, *, name: str, shape: Any, **kwargs: Any) -> Array:
        """A child array of ones: its fill value, and nothing stored."""
        return self.full(name=name, shape=shape, fill_value=1, **kwargs)

    def full(self, *, name: str, shape: Any, fill_value: Any, **kwargs: Any) -> Array:
        """A child array of ``fill_value``: its fill value, and nothing stored."""
        return self.create_array(name, shape=shape, fill_value=fill_value, **kwargs)

    def empty(self, *, name: str, shape: Any, **kwargs: Any) -> Array:
        """A child array with nothing written (it reads as its fill value)."""
        return self.create_array(name, shape=shape, **kwargs)

    def empty_like(self, *, name: str, data: Any, **kwargs: Any) -> Array:
        """A child array like ``data``, nothing written: :func:`gpuzarr.empty_like` here.

        It takes the shape, dtype, chunks, codecs and fill value; ``kwargs`` override them.
        """
        return self._like("empty", name, data, kwargs)

    def zeros_like(self, *, name: str, data: Any, **kwargs: Any) -> Array:
        """A child array like ``data`` whose elements read as 0 (:func:`gpuzarr.zeros_like`)."""
        return self._like("zeros", name, data, kwargs)

    def ones_like(self, *, name: str, data: Any, **kwargs: Any) -> Array:
        """A child array like ``data`` whose elements read as 1 (:func:`gpuzarr.ones_like`)."""
        return self._like("ones", name, data, kwargs)

    def full_like(self, *, name: str, data: Any, **kwargs: Any) -> Array:
        """A child array like ``data`` whose elements read as ``fill_value``.

        ``fill_value`` is a keyword; from a Zarr array, its own by default
        (:func:`gpuzarr.full_like`).
        """
        return self._like("full", name, data, kwargs)

    def _like(self, kind: str, name: str, data: Any, kwargs: dict[str, Any]) -> Array:
        hierarchy_format = kwargs.get("zarr_format", self._zarr_format)
        return self.create_array(name, **like_arguments(kind, data, kwargs, hierarchy_format))

    def create(self, name: str, **kwargs: Any) -> Array:
        """:meth:`create_array` by zarr-python's other name for it."""
        return self.create_array(name, **kwargs)

    def array(self, name: str, **kwargs: Any) -> Array:
        """:meth:`create_array` by zarr-python's older name for it (``data=`` to write)."""
        return self.create_array(name, **kwargs)

    def create_dataset(self, name: str, **kwargs: Any) -> Array:
        """:meth:`create_array` by h5py's name, as zarr-python keeps it.

        ``data`` is written, and gives the shape and dtype where they are not given (h5py's
        rule; zarr-python wants the shape).
        """
        return self.create_array(name, **kwargs)

    def require_dataset(self, name: str, *, shape: Any, **kwargs: Any) -> Array:
        """:meth:`require_array` by h5py's name, as zarr-python keeps it."""
        return self.require_array(name, shape=shape, **kwargs)

    def require_groups(self, *names: str) -> tuple[Group, ...]:
        """:meth:`require_group` of each name, in order."""
        return tuple(self.require_group(name) for name in names)

    def require_array(self, name: str, *, shape: Any, dtype: Any = None, exact: bool = False, **kwargs: Any) -> Array:
        """The child array ``name``, created when there is none, as zarr-python's ``require_array``.

        ``kwargs`` are :meth:`create_array`'s, for creating it. An existing array must have
        ``shape``, and a dtype that casts safely to ``dtype`` (the same dtype with ``exact``);
        otherwise, or where a group is there, IncompatibleNodeError (a ``ContainsNodeError``
        and a ``TypeError``, as zarr-python raises).
        """
        node: Array | Group | None = None
        if name not in self:
            try:
                return self.create_array(name, shape=shape, dtype=dtype, **kwargs)
            except ContainsNodeError:
                node = self._made_meanwhile(name)
                if node is None:
                    raise
        node = self[name] if node is None else node
        where = self._child_path(name, existing=True)
        if not isinstance(node, Array):
            raise IncompatibleNodeError(f"{where!r} is a group, not an array")
        wanted = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        if node.shape != wanted:
            raise IncompatibleNodeError(f"{where!r}: an array of shape {node.shape} is there, not {wanted}")
        if dtype is not None:
            want = np.dtype(dtype)
            fits = node.dtype == want if exact else np.can_cast(node.dtype, want)
            if not fits:
                raise IncompatibleNodeError(f"{where!r}: an array of dtype {node.dtype} is there; {want} does not fit")
        return node

    def arrays(self) -> Iterator[tuple[str, Array]]:
        """(name, array) of the child arrays, sorted by name."""
        for name, node in self._iter_members(0):
            if isinstance(node, Array):
                yield name, node

    def groups(self) -> Iterator[tuple[str, Group]]:
        """(name, group) of the child groups, sorted by name."""
        for name, node in self._iter_members(0):
            if isinstance(node, Group):
                yield name, node

    def array_values(self) -> Iterator[Array]:
        """The child arrays, sorted by name."""
        return (array for _, array in self.arrays())

    def group_values(self) -> Iterator[Group]:
        """The child groups, sorted by name."""
        return (group for _, group in self.groups())

    def array_keys(self) -> Iterator[str]:
        """The names of the child arrays, sorted."""
        recorded = self._recorded_names("array")
        return iter(recorded) if recorded is not None else (name for name, _ in self.arrays())

    def group_keys(self) -> Iterator[str]:
        """The names of the child groups, sorted."""
        recorded = self._recorded_names("group")
        return iter(recorded) if recorded is not None else (name for name, _ in self.groups())

    def _recorded_names(self, node_type: str) -> list[str] | None:
        """The sorted names of the children of ``node_type`` that consolidated metadata records.

        They are not opened (an Array each: 10^4 arrays took 0.37 s, zarr-python 0.16 s), so a
        recorded array whose metadata cannot be opened is named here and refused by
        ``group[name]``, :meth:`arrays` and :meth:`members`. None where this group lists its
        children from the store.
        """
        view = self._consolidated
        if view is None:
            return None
        return [name for name, _, info in self._recorded_entries(view) if info.node_type == node_type]

    def nmembers(self, max_depth: int | None = 0) -> int:
        """How many nodes :meth:`members` gives for ``max_depth``."""
        return len(self.members(max_depth))

    def __delitem__(self, name: str) -> None:
        """Erase the child ``name`` (nested: "a/b") with everything below it.

        The consolidated metadata of the groups above that keep some forgets it too. KeyError
        where there is no such node.
        """
        path = self._child_path(name, existing=True)
        if self.store.read_only:
            raise ReadOnlyError(f"group {self.path or '/'!r} is read-only: cannot erase {name!r}")
        info = read_node(self.store, path)
        if info is None and self._consolidated is not None:
            info = self._consolidated.lookup(path)  # recorded, though its metadata is gone
        if info is None:
            raise KeyError(name)
        # An implicit group (a directory with nodes below it, no metadata) has no format of its
        # own: it is recorded in the format of the hierarchy it lies in.
        zarr_format = self._zarr_format if info.implicit else info.zarr_format
        with recorded_if_interrupted(self.store, path, erased=zarr_format):
            self.store.erase_prefix(node_prefix(path))
            record_node_erased(self.store, path, zarr_format)

    def _made_meanwhile(self, name: str) -> Array | Group | None:
        """The child ``name`` another thread or process made since this group looked, or None.

        It is read from the store: a consolidated group's record may not have it yet.
        """
        path = self._child_path(name, existing=True)
        info = read_node(self.store, path)
        return None if info is None else _opened(self.store, path, info, self._device, True)

    def require_group(self, name: str) -> Group:
        """The child group ``name``, created when it does not exist."""
        node: Array | Group | None = None
        if name not in self:
            try:
                return self.create_group(name)
            except ContainsNodeError:
                node = self._made_meanwhile(name)
                if node is None:
                    raise
        node = self[name] if node is None else node
        if isinstance(node, Group):
            return node
        raise IncompatibleNodeError(f"{self._child_path(name, existing=True)!r} is an array, not a group")


def chunk_key_encoding_json(encoding: Any) -> Any:
    """zarr-python's forms of a chunk key encoding as Zarr v3 JSON.

    Its objects (``to_dict()``), its shorthand ``{"name": ..., "separator": ...}`` and the
    ``(name, separator)`` pairs ``zarr.create`` takes; names and full JSON pass unchanged.
    """
    to_dict = getattr(encoding, "to_dict", None)
    if callable(to_dict):
        encoding = to_dict()
    if isinstance(encoding, tuple) and len(encoding) == 2 and all(isinstance(e, str) for e in encoding):
        encoding = {"name": encoding[0], "configuration": {"separator": encoding[1]}}
    if isinstance(encoding, dict) and "separator" in encoding and "configuration" not in encoding:
        rest = {k: v for k, v in encoding.items() if k != "separator"}
        encoding = {**rest, "configuration": {"separator": encoding["separator"]}}
    return encoding


def v2_separator(encoding: Any) -> str:
    """The ``dimension_separator`` of a Zarr v2 array that zarr-python's ``chunk_key_encoding`` asks for.

    It is ``{"name": "v2", "separator": "/"}``, its JSON form (``"configuration"``) or
    zarr-python's ``V2ChunkKeyEncoding``.
    """
    encoding = chunk_key_encoding_json(encoding)
    if not isinstance(encoding, dict) or set(encoding) - {"name", "configuration"}:
        name, separator = None, None
    else:
        configuration = encoding.get("configuration") or {}
        name = encoding.get("name")
        separator = configuration.get("separator", ".") if isinstance(configuration, dict) else None
        if isinstance(configuration, dict) and set(configuration) - {"separator"}:
            separator = None
    if name != "v2" or separator not in (".", "/"):
        raise InvalidArgumentError(
            f"chunk_key_encoding: a Zarr v2 array takes {{'name': 'v2', 'separator': '.' or '/'}}, got {encoding!r}"
        )
    return str(separator)


def refuse_v3_memory_order(zarr_format: int, order: Any) -> None:
    """Refuse ``create_array``'s ``order`` for a Zarr v3 array unless it is C.

    zarr-python takes it for the memory order of reads alone; gpuzarr returns C-ordered arrays,
    so any other is refused rather than ignored (a transpose filter, or
    ``gpuzarr.create(order="F")``, stores chunks transposed).
    """
    if zarr_format == 3 and order not in (None, "C"):
        raise InvalidArgumentError(
            f"order {order!r}: a Zarr v3 array keeps no memory order and gpuzarr returns C-ordered arrays; "
            "to store chunks transposed give a transpose filter, or use gpuzarr.create(order='F')"
        )


def new_array(
    store: Store,
    path: str,
    *,
    shape: Any = None,
    dtype: Any = None,
    data: Any = None,
    overwrite: bool = False,
    device: str = "auto",
    config: Any = None,
    write_data: bool = True,
    chunk_shape: Any = None,
    write_empty_chunks: bool | None = None,
    **metadata_options: Any,
) -> Array:
    """Create the array at ``path`` of ``store``.

    Its shape and dtype are given or taken from ``data`` (written into it unless
    ``write_data`` is False), ``metadata_options`` as
    :func:`gpuzarr.metadata.build.build_metadata` takes them, ``config`` as zarr-python's
    (:func:`write_empty_chunks_of`; ``write_empty_chunks``, its keyword in ``zarr.create``),
    ``chunk_shape`` zarr-python's other name for ``chunks``. zarr-python's forms of
    ``chunk_key_encoding`` (objects, ``{"name", "separator"}``, ``(name, separator)``; a v2
    array's sets ``dimension_separator``) and ``order=None`` (C) are taken here.
    What :func:`gpuzarr.create`, :func:`gpuzarr.create_array` and :meth:`Group.create_array`
    share.
    """
    if chunk_shape is not None:
        if metadata_options.get("chunks") not in (None, "auto"):
            raise InvalidArgumentError("chunks and chunk_shape: give one of them")
        metadata_options["chunks"] = chunk_shape
    if metadata_options.get("order", "C") is None:  # zarr-python's default: C
        metadata_options["order"] = "C"
    if "zarr_format" in metadata_options and metadata_options["zarr_format"] is None:
        metadata_options["zarr_format"] = 3  # zarr-python's: its default format
    encoding = metadata_options.get("chunk_key_encoding")
    if encoding is not None:
        if metadata_options.get("zarr_format", 3) == 2:  # v2 keeps the separator alone
            separator = v2_separator(encoding)
            given = metadata_options.get("dimension_separator")
            if given is not None and given != separator:
                raise InvalidArgumentError(
                    f"chunk_key_encoding {encoding!r} and dimension_separator {given!r}: they disagree"
                )
            metadata_options["chunk_key_encoding"] = None
            metadata_options["dimension_separator"] = separator
        else:
            metadata_options["chunk_key_encoding"] = chunk_key_encoding_json(encoding)
    config = with_write_empty_chunks(config, write_empty_chunks)
    write_empty_chunks = write_empty_chunks_of(config)
    if data is not None:
        data = as_data(data)
        shape, dtype = shape_and_dtype(data, shape, dtype)
    elif shape is None:
        raise InvalidArgumentError("shape: required when no data is given")
    metadata = build_metadata(shape=shape, dtype="float64" if dtype is None else dtype, **metadata_options)
    if not isinstance(metadata, ArrayMetadataV2):
        metadata = with_complete_codecs(metadata)
    array = create_array_node(
        store, path, metadata, overwrite=overwrite, device=device, store_data_equal_to_fill_value=write_empty_chunks
    )
    if data is not None and write_data:
        write_data_into(array, data)
    return array


#: Array or Group, the kind of node asked for
NodeT = TypeVar("NodeT", "Array", "Group")


def open_node_of_kind(
    store: Any, kind: type[NodeT], not_found: type[NodeNotFoundError], device: str
) -> tuple[NodeT, str]:
    """The node at ``store`` and its path, where it is a ``kind`` (Array or Group).

    What ``Array.open`` and ``Group.open`` open (``store``: a path, URL, Store or kvstore
    dict). ``not_found`` is raised where nothing, or the other kind of node, is there.
    """
    opened, path = make_store(store)
    try:
        node = open_node(opened, path, device=device)
    except NodeNotFoundError as exc:
        raise not_found(str(exc)) from None
    if not isinstance(node, kind):
        other, wanted = ("a group", "an array") if isinstance(node, Group) else ("an array", "a group")
        raise not_found(f"{path or '/'!r} is {other}, not {wanted}")
    return node, path


def open_node(
    store: Store,
    path: str,
    device: str = "auto",
    use_consolidated: bool | None = None,
    implicit_format: int | None = None,
) -> Array | Group:
    """Open whatever node lives at ``path``: a v3 or v2 array or group, or an implicit group.

    An implicit group takes ``implicit_format`` (its parent's, where it is opened through one),
    by default the format of the nearest group above it with metadata (3 where there is none).
    A group's consolidated metadata is used as zarr-python's ``use_consolidated`` says: None,
    when present; True, required; False, not read. Raises NodeNotFoundError when nothing is
    there.
    """
    info = require_node(store, path)
    if info.implicit:
        info = _in_format(info, implicit_format if implicit_format is not None else _format_above(store, path))
    view = load_view(store, path, info, use_consolidated) if info.node_type == "group" else None
    return _node(store, path, info, device, view)


def refuse_unwritable_codecs(metadata: ArrayMetadata | ArrayMetadataV2) -> None:
    """Refuse a new array whose chunks cannot be written here, before its metadata is.

    That is a Blosc compressor numcodecs' c-blosc lacks (``snappy``, left out of its wheels).
    """
    if isinstance(metadata, ArrayMetadataV2):
        refuse_unbuilt_blosc([metadata.compressor], "compressor")
    else:
        refuse_unbuilt_blosc(list(metadata.codecs), "codecs")


def _format_above(store: Store, path: str) -> int:
    """The format of the nearest node above ``path`` that has metadata; 3 where none has."""
    parts = path.strip("/").split("/") if path.strip("/") else []
    for end in range(len(parts) - 1, -1, -1):
        info = read_node(store, "/".join(parts[:end]), allow_implicit=False)
        if info is not None:
            return info.zarr_format
    return 3


def _in_format(info: NodeInfo, implicit_format: int) -> NodeInfo:
    """``info``, where an implicit group (no metadata, so no format), in ``implicit_format``.

    In a v2 hierarchy it was a v3 group, and nodes created through it were v3 nodes that
    zarr-python and the hierarchy's v2 consolidated metadata never show.
    """
    return dataclasses.replace(info, zarr_format=implicit_format) if info.implicit else info


def _opened(store: Store, path: str, info: NodeInfo, device: str, consolidated: bool = True) -> Array | Group:
    """:func:`open_node` of a node whose metadata ``info`` was read already.

    A group comes with its consolidated metadata when present, unless not ``consolidated``.
    """
    view = load_view(store, path, info, None if consolidated else False) if info.node_type == "group" else None
    return _node(store, path, info, device, view)


def _node(
    store: Store, path: str, info: NodeInfo, device: str, view: ConsolidatedView | None, recorded: bool = False
) -> Array | Group:
    """The node ``info`` describes; ``recorded``: found in ``view`` (errors name that entry)."""
    if info.node_type == "array":
        where = view.entry_name(path) if recorded and view is not None else None
        return Array(store, path, array_metadata(info, path, where), device=device, metadata_source=where)
    return Group(
        store, path, info.attributes, device=device, zarr_format=info.zarr_format, consolidated=view,
        implicit=info.implicit,
    )  # fmt: skip


def create_group_node(
    store: Store,
    path: str,
    attributes: dict[str, Any] | None = None,
    *,
    overwrite: bool = False,
    device: str = "auto",
    zarr_format: int = 3,
    consolidated: ConsolidatedView | None = None,
) -> Group:
    """Write a new group at ``path`` of ``store`` (see :func:`gpuzarr.hierarchy.write_node`).

    The groups above that record their descendants in consolidated metadata record it too;
    ``consolidated`` is the view of the group it is created through, which the new group shares.
    """
    attrs = dict(attributes or {})
    documents = group_documents(attrs, zarr_format)
    with recorded_if_interrupted(store, path, new_node=True):
        written = write_node(store, path, documents, overwrite=overwrite, zarr_format=zarr_format)
        record_metadata_write(store, path, new_node=True, replaced=written.replaced, new_parents=written.new_parents)
    return Group(store, path, attrs, device=device, zarr_format=zarr_format, consolidated=consolidated)


def create_array_node(
    store: Store,
    path: str,
    metadata: ArrayMetadata | ArrayMetadataV2,
    *,
    overwrite: bool = False,
    device: str = "auto",
    store_data_equal_to_fill_value: bool = False,
) -> Array:
    """Write a new array with ``metadata`` at ``path`` of ``store`` and return it open."""
    # Resolve the codec chain before touching the store: bad codecs fail without side effects.
    array = Array(store, path, metadata, device=device, store_data_equal_to_fill_value=store_data_equal_to_fill_value)
    refuse_unwritable_codecs(metadata)
    with recorded_if_interrupted(store, path, new_node=True):
        written = write_node(store, path, metadata.documents(), overwrite=overwrite, zarr_format=metadata.zarr_format)
        record_metadata_write(store, path, new_node=True, replaced=written.replaced, new_parents=written.new_parents)
    return array
