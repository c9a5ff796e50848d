"""``Group``: a Zarr v3 group (zarr.json with node_type "group") and its children."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .attributes import Attributes
from .errors import ContainsNodeError, MetadataError, NodeNotFoundError, ReadOnlyError
from .hierarchy import node_prefix, read_node
from .spec.v2 import ZATTRS
from .spec.v3 import ZARR_JSON
from .store.base import Store


def validate_node_name(name: str) -> str:
    """Node names per the v3 spec: non-empty, no '/', not only periods, no '__' prefix."""
    if not isinstance(name, str) or not name:
        raise MetadataError(f"node name: must be a non-empty string, got {name!r}")
    if "/" in name:
        raise MetadataError(f"node name {name!r}: must not contain '/'")
    if set(name) == {"."}:
        raise MetadataError(f"node name {name!r}: must not consist only of periods")
    if name.startswith("__"):
        raise MetadataError(f"node name {name!r}: names starting with '__' are reserved")
    return name


class Group:
    """A group node. ``g["a/b"]`` opens a descendant; ``list(g)`` lists the children's names."""

    def __init__(
        self, store: Store, path: str, attributes: dict[str, Any], device: str = "auto", zarr_format: int = 3
    ) -> None:
        self.store = store
        self.path = path.strip("/")
        self._attributes = dict(attributes)
        self._device = device
        self._zarr_format = zarr_format

    def __repr__(self) -> str:
        return f"<gpuzarr.Group {self.store!r} path={self.path or '/'!r}>"

    @property
    def zarr_format(self) -> int:
        return self._zarr_format

    @property
    def attrs(self) -> Attributes:
        return Attributes(lambda: self._attributes, self._put_attributes)

    def _put_attributes(self, attrs: dict[str, Any]) -> None:
        if self.store.read_only:
            raise ReadOnlyError(f"group {self.path or '/'!r} is read-only")
        try:
            if self._zarr_format == 2:
                key, doc = ZATTRS, attrs
            else:
                key, doc = ZARR_JSON, {"zarr_format": 3, "node_type": "group", "attributes": attrs}
            raw = json.dumps(doc, indent=2, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"attributes: values must be JSON-serialisable ({exc})") from exc
        self.store.set(node_prefix(self.path) + key, raw)
        self._attributes = dict(attrs)

    def _child_path(self, name: str) -> str:
        parts = [validate_node_name(p) for p in name.strip("/").split("/")]
        return "/".join([self.path, *parts]) if self.path else "/".join(parts)

    def __getitem__(self, name: str) -> Any:
        from .api import open_node

        path = self._child_path(name)
        try:
            return open_node(self.store, path, device=self._device)
        except NodeNotFoundError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            return read_node(self.store, self._child_path(name)) is not None
        except MetadataError:
            return False

    def __iter__(self) -> Iterator[str]:
        """Names of the child arrays and groups (explicit, v2, or implicit), sorted."""
        _keys, dirs = self.store.list_dir(node_prefix(self.path))
        for d in dirs:
            name = d.rstrip("/").rsplit("/", 1)[-1]
            if read_node(self.store, d.rstrip("/")) is not None:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self) -> list[str]:
        return list(self)

    def members(self, recursive: bool = False) -> list[tuple[str, Any]]:
        """(name, node) pairs of the children; with ``recursive``, of every descendant."""
        out = []
        for name in self:
            node = self[name]
            out.append((name, node))
            if recursive and isinstance(node, Group):
                out.extend((f"{name}/{sub}", child) for sub, child in node.members(recursive=True))
        return out

    def create_group(
        self, name: str, *, attributes: dict[str, Any] | None = None, overwrite: bool = False
    ) -> Group:
        """Create a child group (``name`` may be nested: "a/b"; missing parents are created)."""
        from .api import create_group

        return create_group(
            self.store, path=self._child_path(name), attributes=attributes, overwrite=overwrite,
            device=self._device, zarr_format=self._zarr_format,
        )

    def create_array(self, name: str, **kwargs: Any) -> Any:
        """Create a child array; takes :func:`gpuzarr.create`'s keyword arguments."""
        from .api import create

        kwargs.setdefault("device", self._device)
        kwargs.setdefault("zarr_format", self._zarr_format)
        return create(self.store, path=self._child_path(name), **kwargs)

    def require_group(self, name: str) -> Group:
        if name in self:
            node = self[name]
            if isinstance(node, Group):
                return node
            raise ContainsNodeError(f"{self._child_path(name)!r} is an array, not a group")
        return self.create_group(name)
