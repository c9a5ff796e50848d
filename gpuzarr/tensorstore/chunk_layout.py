"""Chunk layout constraints and the choice of chunk shapes for a new array.

TensorStore describes how an array *should* be chunked with a ``ChunkLayout``: JSON such as ::

    {"inner_order": [0, 1, 2],
     "chunk": {"aspect_ratio": [2, 1, 1]},
     "read_chunk": {"elements": 2000000},
     "write_chunk": {"elements": 1000000000, "shape_soft_constraint": [-1, 0, 0]}}

Each of ``write_chunk`` (the stored chunk, i.e. the shard when sharding), ``read_chunk`` (the
smallest independently readable unit: the inner chunk of a shard) and ``codec_chunk`` takes a
``shape`` (0 = unconstrained, -1 = the full extent of the dimension), an ``aspect_ratio``
(0 = unconstrained, i.e. 1) and a target number of ``elements``; each also has a
``*_soft_constraint`` twin. ``chunk`` is shorthand that applies to both read and write chunks
(its aspect ratio also to the codec chunk). Hard constraints must hold; a soft one is a preference
that gives way to a hard one. The TensorStore reference: https://google.github.io/tensorstore/
(``ChunkLayout`` in the JSON schema docs, and the "Selection of chunk layout when creating a new
array" section of the zarr and zarr3 driver docs).

This module parses and merges the constraints (:class:`ChunkLayoutConstraints`);
:mod:`gpuzarr.tensorstore.chunk_shapes` chooses chunk shapes that meet them. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import MetadataError

__all__ = [
    "ChunkGridConstraints",
    "ChunkLayoutConstraints",
]

#: Largest rank an index space may have (TensorStore's ``kMaxRank``).
MAX_RANK = 32

# TensorStore keeps indices within +-(2**62 - 2) so that sums of two never overflow int64; chunk
# sizes, element counts and origins beyond that are rejected when parsed.
_MAX_FINITE_INDEX = 2**62 - 2
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

Usage = Literal["write", "read", "codec"]
_USAGES: tuple[Usage, ...] = ("write", "read", "codec")

_GRID_MEMBERS = (
    "shape",
    "shape_soft_constraint",
    "aspect_ratio",
    "aspect_ratio_soft_constraint",
    "elements",
    "elements_soft_constraint",
)
_LAYOUT_MEMBERS = (
    "rank",
    "inner_order",
    "inner_order_soft_constraint",
    "grid_origin",
    "grid_origin_soft_constraint",
    "chunk",
    "write_chunk",
    "read_chunk",
    "codec_chunk",
)


# --------------------------------------------------------------------------------------------
# JSON scalars
# --------------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    return "null" if value is None else repr(value)


def _json_int64(value: Any, where: str) -> int:
    """A JSON integer; an integral float such as ``1000.0`` counts, as it does for TensorStore."""
    if isinstance(value, bool):
        raise MetadataError(f"{where}: expected 64-bit signed integer, got {_describe(value)}")
    if isinstance(value, int):
        result = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        result = int(value)
    else:
        raise MetadataError(f"{where}: expected 64-bit signed integer, got {_describe(value)}")
    if not _INT64_MIN <= result <= _INT64_MAX:
        raise MetadataError(f"{where}: expected 64-bit signed integer, got {value!r}")
    return result


def _json_float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetadataError(f"{where}: expected a number, got {_describe(value)}")
    return float(value)


def _json_array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise MetadataError(f"{where}: expected array, got {_describe(value)}")
    if len(value) > MAX_RANK:
        raise MetadataError(f"{where}: rank {len(value)} is outside the valid range [0, {MAX_RANK}]")
    return list(value)


# --------------------------------------------------------------------------------------------
# Per-dimension value kinds. Each has a "no constraint" default, a validity test, and (shape
# only) values that are always soft: -1 says "full extent", which is a preference, not a size.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _VectorKind:
    default: Any
    is_valid: Callable[[Any], bool]
    parse: Callable[[Any, str], Any]
    always_soft: Callable[[Any], bool] = lambda value: False


def _parse_origin(value: Any, where: str) -> int | None:
    result = _json_int64(value, where)
    # TensorStore's "implicit" origin (the most negative int64) is the same as no constraint.
    return None if result == _INT64_MIN else result


_SHAPE = _VectorKind(
    default=0,
    is_valid=lambda x: x == -1 or 0 <= x <= _MAX_FINITE_INDEX,
    parse=_json_int64,
    always_soft=lambda x: x == -1,
)
_ASPECT_RATIO = _VectorKind(
    default=0.0,
    is_valid=lambda x: math.isfinite(x) and x >= 0,
    parse=_json_float,
)
_ORIGIN = _VectorKind(
    default=None,
    is_valid=lambda x: x is None or -_MAX_FINITE_INDEX <= x <= _MAX_FINITE_INDEX,
    parse=_parse_origin,
)


# --------------------------------------------------------------------------------------------
# Mutable working form: merged value + hard bit per dimension, exactly what merging needs.
# --------------------------------------------------------------------------------------------


class _Vector:
    """Per-dimension constraint values with a hard/soft bit each."""

    __slots__ = ("hard", "values")

    def __init__(self, rank: int, default: Any) -> None:
        self.values: list[Any] = [default] * rank
        self.hard: list[bool] = [False] * rank

    def merge(self, new: Sequence[Any], hard: bool, kind: _VectorKind, where: str) -> None:
        """Merge ``new`` like TensorStore: a hard value beats a soft one, two hard values must agree."""
        for i, x in enumerate(new):
            if not kind.is_valid(x):
                raise MetadataError(f"{where}: invalid value for dimension {i}: {list(new)}")
        new_hard = [hard and not kind.always_soft(x) for x in new]
        # Check every dimension before changing any, so a failed merge leaves no trace.
        for i, x in enumerate(new):
            if new_hard[i] and self.hard[i] and x != kind.default and self.values[i] != x:
                raise MetadataError(
                    f"{where}: new hard constraint ({x}) for dimension {i} does not match "
                    f"existing hard constraint ({self.values[i]})"
                )
        for i, x in enumerate(new):
            if x == kind.default:
                continue
            if new_hard[i] or self.values[i] == kind.default:
                self.values[i] = x
                self.hard[i] = self.hard[i] or new_hard[i]


class _Grid:
    """Working form of the constraints on one of the write / read / codec chunk grids."""

    __slots__ = ("aspect_ratio", "elements", "elements_hard", "shape")

    def __init__(self, rank: int) -> None:
        self.shape = _Vector(rank, _SHAPE.default)
        self.aspect_ratio = _Vector(rank, _ASPECT_RATIO.default)
        self.elements: int | None = None
        self.elements_hard = False

    def merge_elements(self, value: int, hard: bool, where: str) -> None:
        if not 0 <= value <= _MAX_FINITE_INDEX:
            raise MetadataError(f"{where}: invalid value: {value}")
        if self.elements is not None:
            if not hard:
                return  # an existing value, hard or soft, wins over a new soft one
            if self.elements_hard and self.elements != value:
                raise MetadataError(
                    f"{where}: new hard constraint ({value}) does not match existing hard "
                    f"constraint ({self.elements})"
                )
        self.elements = value
        self.elements_hard = self.elements_hard or hard

    def merge_grid(self, other: _Grid, where: str) -> None:
        """Merge all of ``other`` (with its own hard/soft bits) into this grid."""
        for mine, theirs, kind, name in (
            (self.shape, other.shape, _SHAPE, "shape"),
            (self.aspect_ratio, other.aspect_ratio, _ASPECT_RATIO, "aspect_ratio"),
        ):
            # Merging hard and soft entries separately is what one mixed merge does: the two sets
            # of dimensions are disjoint and each entry only meets this grid's entry.
            for hard in (True, False):
                mine.merge(
                    [v if h == hard else kind.default for v, h in zip(theirs.values, theirs.hard)],
                    hard,
                    kind,
                    f"{where}.{name}",
                )
        if other.elements is not None:
            self.merge_elements(other.elements, other.elements_hard, f"{where}.elements")


# --------------------------------------------------------------------------------------------
# Frozen public form
# --------------------------------------------------------------------------------------------


def _split(vector: _Vector, kind: _VectorKind) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """Hard and soft halves of ``vector``, each ``None`` where it holds nothing."""
    hard = tuple(v if h else kind.default for v, h in zip(vector.values, vector.hard))
    soft = tuple(kind.default if h else v for v, h in zip(vector.values, vector.hard))
    empty = (kind.default,) * len(vector.values)
    return (None if hard == empty else hard), (None if soft == empty else soft)


def _grid_fields(grid: _Grid) -> dict[str, Any]:
    """The :class:`ChunkGridConstraints` fields (hard and soft halves) of a working grid."""
    shape, shape_soft = _split(grid.shape, _SHAPE)
    aspect, aspect_soft = _split(grid.aspect_ratio, _ASPECT_RATIO)
    return {
        "shape": shape,
        "shape_soft_constraint": shape_soft,
        "aspect_ratio": aspect,
        "aspect_ratio_soft_constraint": aspect_soft,
        "elements": grid.elements if grid.elements_hard else None,
        "elements_soft_constraint": None if grid.elements_hard else grid.elements,
    }


def _vector_json(values: tuple[Any, ...] | None, kind: _VectorKind) -> list[Any] | None:
    if values is None:
        return None
    return [None if v == kind.default else v for v in values]


@dataclass(frozen=True)
class ChunkGridConstraints:
    """Constraints on one chunk grid (write, read or codec), in TensorStore's JSON terms.

    A dimension's constraint is either hard (in ``shape`` / ``aspect_ratio``) or soft (in the
    ``*_soft_constraint`` twin), never both; ``0`` (``0.0``) marks "no constraint" in a vector and
    a vector with no constraint at all is ``None``. A shape entry of ``-1`` means "the full extent
    of the dimension"; it is always a soft constraint.
    """

    shape: tuple[int, ...] | None = None
    shape_soft_constraint: tuple[int, ...] | None = None
    aspect_ratio: tuple[float, ...] | None = None
    aspect_ratio_soft_constraint: tuple[float, ...] | None = None
    elements: int | None = None
    elements_soft_constraint: int | None = None

    def __post_init__(self) -> None:
        # Normalise through the working form so that equal constraints compare equal, whichever
        # way they were written down (e.g. a -1 given as hard is stored as soft).
        grid = self._to_grid(self.rank() or 0, "chunk_layout")
        for name, value in _grid_fields(grid).items():
            object.__setattr__(self, name, value)

    def rank(self) -> int | None:
        """The rank implied by the vectors, or ``None`` if none is given."""
        ranks = {
            len(v)
            for v in (
                self.shape,
                self.shape_soft_constraint,
                self.aspect_ratio,
                self.aspect_ratio_soft_constraint,
            )
            if v is not None
        }
        if len(ranks) > 1:
            raise MetadataError(f"chunk_layout: chunk grid vectors have different ranks {sorted(ranks)}")
        return ranks.pop() if ranks else None

    def _to_grid(self, rank: int, where: str) -> _Grid:
        grid = _Grid(rank)
        for hard in (True, False):
            suffix = "" if hard else "_soft_constraint"
            for name, vector, kind in (
                ("shape", grid.shape, _SHAPE),
                ("aspect_ratio", grid.aspect_ratio, _ASPECT_RATIO),
            ):
                values = getattr(self, name + suffix)
                if values is None:
                    continue
                if len(values) != rank:
                    raise MetadataError(
                        f"{where}.{name}{suffix}: rank {len(values)} does not match existing rank {rank}"
                    )
                if kind is _ASPECT_RATIO:
                    values = [_json_float(v, f"{where}.{name}{suffix}") for v in values]
                else:
                    values = [_json_int64(v, f"{where}.{name}{suffix}") for v in values]
                vector.merge(values, hard, kind, f"{where}.{name}{suffix}")
        if self.elements is not None:
            grid.merge_elements(_json_int64(self.elements, f"{where}.elements"), True, f"{where}.elements")
        if self.elements_soft_constraint is not None:
            grid.merge_elements(
                _json_int64(self.elements_soft_constraint, f"{where}.elements_soft_constraint"),
                False,
                f"{where}.elements_soft_constraint",
            )
        return grid

    @staticmethod
    def _from_grid(grid: _Grid) -> ChunkGridConstraints:
        return ChunkGridConstraints(**_grid_fields(grid))

    def to_json(self) -> dict[str, Any]:
        """TensorStore ``ChunkLayout/Grid`` JSON; members without a constraint are left out."""
        out: dict[str, Any] = {}
        for name, kind in (
            ("shape", _SHAPE),
            ("shape_soft_constraint", _SHAPE),
            ("aspect_ratio", _ASPECT_RATIO),
            ("aspect_ratio_soft_constraint", _ASPECT_RATIO),
        ):
            vector = _vector_json(getattr(self, name), kind)
            if vector is not None:
                out[name] = vector
        if self.elements is not None:
            out["elements"] = self.elements
        if self.elements_soft_constraint is not None:
            out["elements_soft_constraint"] = self.elements_soft_constraint
        return out


@dataclass(frozen=True)
class ChunkLayoutConstraints:
    """Constraints on the chunk layout of an array, parsed from TensorStore ``ChunkLayout`` JSON.

    Use :meth:`from_json` to build one: it applies TensorStore's merging rules (``chunk`` feeds
    both ``read_chunk`` and ``write_chunk``; a hard constraint beats a soft one; conflicting hard
    constraints are a :class:`~gpuzarr.errors.MetadataError`). ``grid_origin`` entries of ``None``
    are unconstrained. At most one of ``inner_order`` / ``inner_order_soft_constraint`` is set.
    """

    rank: int | None = None
    inner_order: tuple[int, ...] | None = None
    inner_order_soft_constraint: tuple[int, ...] | None = None
    grid_origin: tuple[int | None, ...] | None = None
    grid_origin_soft_constraint: tuple[int | None, ...] | None = None
    write_chunk: ChunkGridConstraints = field(default_factory=ChunkGridConstraints)
    read_chunk: ChunkGridConstraints = field(default_factory=ChunkGridConstraints)
    codec_chunk: ChunkGridConstraints = field(default_factory=ChunkGridConstraints)

    def __post_init__(self) -> None:
        ranks = {self.rank} if self.rank is not None else set()
        for name in (
            "inner_order",
            "inner_order_soft_constraint",
            "grid_origin",
            "grid_origin_soft_constraint",
        ):
            value = getattr(self, name)
            if value is not None:
                ranks.add(len(value))
        for usage in _USAGES:
            grid_rank = self.grid(usage).rank()
            if grid_rank is not None:
                ranks.add(grid_rank)
        if len(ranks) > 1:
            raise MetadataError(f"chunk_layout: constraints have different ranks {sorted(ranks)}")
        rank = ranks.pop() if ranks else None
        if rank is not None and not 0 <= rank <= MAX_RANK:
            raise MetadataError(f"chunk_layout.rank: expected integer in [0, {MAX_RANK}], got {rank}")
        object.__setattr__(self, "rank", rank)
        for name in ("inner_order", "inner_order_soft_constraint"):
            value = getattr(self, name)
            if value is not None:
                _check_permutation(value, f"chunk_layout.{name}")
                object.__setattr__(self, name, tuple(value))
        if rank == 0:
            # A rank-0 array has no dimensions to order; TensorStore keeps no inner order for it.
            object.__setattr__(self, "inner_order", None)
            object.__setattr__(self, "inner_order_soft_constraint", None)
        if self.inner_order is not None:
            # A hard inner order makes a soft one meaningless; TensorStore keeps only the hard one.
            object.__setattr__(self, "inner_order_soft_constraint", None)
        origin = _Vector(rank or 0, None)
        for hard, name in ((True, "grid_origin"), (False, "grid_origin_soft_constraint")):
            value = getattr(self, name)
            if value is not None:
                where = f"chunk_layout.{name}"
                parsed = [None if v is None else _parse_origin(v, where) for v in value]
                origin.merge(parsed, hard, _ORIGIN, where)
        hard_origin, soft_origin = _split(origin, _ORIGIN)
        object.__setattr__(self, "grid_origin", hard_origin)
        object.__setattr__(self, "grid_origin_soft_constraint", soft_origin)

    def grid(self, usage: Usage) -> ChunkGridConstraints:
        """The constraints on the ``usage`` chunk grid."""
        return {"write": self.write_chunk, "read": self.read_chunk, "codec": self.codec_chunk}[usage]

    # ---- JSON ------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, json: Any) -> ChunkLayoutConstraints:
        """Parse TensorStore ``ChunkLayout`` JSON.

        Members are applied in TensorStore's order (``rank``, ``inner_order``, ``grid_origin``,
        ``chunk``, ``write_chunk``, ``read_chunk``, ``codec_chunk``; hard before soft), which
        decides which of two soft constraints survives.

        Raises
        ------
        MetadataError
            If the JSON is malformed, a value is out of range, ranks disagree or two hard
            constraints conflict. The message names the member.
        """
        builder = _LayoutBuilder()
        builder.load(json)
        return builder.freeze()

    def to_json(self) -> dict[str, Any]:
        """TensorStore ``ChunkLayout`` JSON, as ``tensorstore.ChunkLayout.to_json`` writes it."""
        out: dict[str, Any] = {}
        rank_dependent = any(
            value is not None
            for value in (
                self.inner_order,
                self.inner_order_soft_constraint,
                self.grid_origin,
                self.grid_origin_soft_constraint,
                *(
                    getattr(self.grid(usage), name)
                    for usage in _USAGES
                    for name in _GRID_MEMBERS
                    if not name.startswith("elements")
                ),
            )
        )
        if self.rank is not None and not rank_dependent:
            out["rank"] = self.rank
        if self.inner_order is not None:
            out["inner_order"] = list(self.inner_order)
        if self.inner_order_soft_constraint is not None:
            out["inner_order_soft_constraint"] = list(self.inner_order_soft_constraint)
        for name in ("grid_origin", "grid_origin_soft_constraint"):
            vector = _vector_json(getattr(self, name), _ORIGIN)
            if vector is not None:
                out[name] = vector
        for usage in _USAGES:
            grid_json = self.grid(usage).to_json()
            if grid_json:
                out[f"{usage}_chunk"] = grid_json
        return out


def _check_permutation(value: Sequence[int], where: str) -> None:
    if sorted(value) != list(range(len(value))):
        raise MetadataError(f"{where}: invalid permutation: {list(value)}")


class _LayoutBuilder:
    """Accumulates JSON members into the working form, as TensorStore's JSON binder does."""

    def __init__(self) -> None:
        self.rank: int | None = None
        self.inner_order: tuple[int, ...] | None = None
        self.inner_order_hard = False
        self.origin = _Vector(0, None)
        self.grids: dict[Usage, _Grid] = {usage: _Grid(0) for usage in _USAGES}

    def ensure_rank(self, rank: int, where: str) -> None:
        if not 0 <= rank <= MAX_RANK:
            raise MetadataError(f"{where}: rank {rank} is outside the valid range [0, {MAX_RANK}]")
        if self.rank is None:
            # Element counts may already be set: they do not depend on the rank, so keep them.
            self.rank = rank
            self.origin = _Vector(rank, None)
            for grid in self.grids.values():
                grid.shape = _Vector(rank, _SHAPE.default)
                grid.aspect_ratio = _Vector(rank, _ASPECT_RATIO.default)
            return
        if self.rank != rank:
            raise MetadataError(f"{where}: rank {rank} does not match existing rank {self.rank}")

    def load(self, json: Any) -> None:
        if not isinstance(json, Mapping):
            raise MetadataError(f"chunk_layout: expected object, got {_describe(json)}")
        extra = [key for key in json if key not in _LAYOUT_MEMBERS]
        if extra:
            raise MetadataError(f"chunk_layout: object includes extra members: {extra}")
        if "rank" in json:
            rank = json["rank"]
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_RANK:
                raise MetadataError(
                    f"chunk_layout.rank: expected integer in the range [0, {MAX_RANK}], got {_describe(rank)}"
                )
            self.ensure_rank(rank, "chunk_layout.rank")
        for name, hard in (("inner_order", True), ("inner_order_soft_constraint", False)):
            if json.get(name) is not None:
                self.load_inner_order(json[name], hard, f"chunk_layout.{name}")
        for name, hard in (("grid_origin", True), ("grid_origin_soft_constraint", False)):
            if name in json:
                where = f"chunk_layout.{name}"
                values = self.load_vector(json[name], _ORIGIN, where)
                self.origin.merge(values, hard, _ORIGIN, where)
        # ``chunk`` before the specific grids, whatever the key order in the document.
        if "chunk" in json:
            self.load_grid(json["chunk"], ("write", "read"), "chunk_layout.chunk")
        for usage in _USAGES:
            key = f"{usage}_chunk"
            if key in json:
                self.load_grid(json[key], (usage,), f"chunk_layout.{key}")

    def load_vector(self, json: Any, kind: _VectorKind, where: str) -> list[Any]:
        items = _json_array(json, where)
        values = [
            kind.default if item is None else kind.parse(item, f"{where}[{i}]")
            for i, item in enumerate(items)
        ]
        self.ensure_rank(len(values), where)
        return values

    def load_inner_order(self, json: Any, hard: bool, where: str) -> None:
        items = _json_array(json, where)
        order: list[int] = []
        for i, item in enumerate(items):
            value = _json_int64(item, f"{where}[{i}]") if item is not None else None
            if value is None or not 0 <= value < MAX_RANK:
                raise MetadataError(
                    f"{where}[{i}]: expected integer in the range [0, {MAX_RANK - 1}], got {_describe(item)}"
                )
            order.append(value)
        _check_permutation(order, where)
        self.ensure_rank(len(order), where)
        if self.inner_order is not None:
            if not hard:
                return
            if self.inner_order_hard and tuple(order) != self.inner_order:
                raise MetadataError(
                    f"{where}: new hard constraint ({order}) does not match existing hard "
                    f"constraint ({list(self.inner_order)})"
                )
        self.inner_order = tuple(order)
        self.inner_order_hard = self.inner_order_hard or hard

    def load_grid(self, json: Any, usages: tuple[Usage, ...], where: str) -> None:
        if not isinstance(json, Mapping):
            raise MetadataError(f"{where}: expected object, got {_describe(json)}")
        extra = [key for key in json if key not in _GRID_MEMBERS]
        if extra:
            raise MetadataError(f"{where}: object includes extra members: {extra}")
        is_chunk = usages == ("write", "read")
        for name, kind in (("shape", _SHAPE), ("aspect_ratio", _ASPECT_RATIO)):
            # ``chunk.aspect_ratio`` also shapes the codec chunk; ``chunk.shape`` does not.
            targets = (*usages, "codec") if is_chunk and kind is _ASPECT_RATIO else usages
            for suffix, hard in (("", True), ("_soft_constraint", False)):
                member = name + suffix
                if member not in json:
                    continue
                values = self.load_vector(json[member], kind, f"{where}.{member}")
                for usage in targets:
                    vector = self.grids[usage].shape if kind is _SHAPE else self.grids[usage].aspect_ratio
                    vector.merge(values, hard, kind, f"{where}.{member}")
        for member, hard in (("elements", True), ("elements_soft_constraint", False)):
            if member in json:
                value = _json_int64(json[member], f"{where}.{member}")
                for usage in usages:
                    self.grids[usage].merge_elements(value, hard, f"{where}.{member}")

    def freeze(self) -> ChunkLayoutConstraints:
        hard_origin, soft_origin = _split(self.origin, _ORIGIN)
        return ChunkLayoutConstraints(
            rank=self.rank,
            inner_order=self.inner_order if self.inner_order_hard else None,
            inner_order_soft_constraint=None if self.inner_order_hard else self.inner_order,
            grid_origin=hard_origin,
            grid_origin_soft_constraint=soft_origin,
            write_chunk=ChunkGridConstraints._from_grid(self.grids["write"]),
            read_chunk=ChunkGridConstraints._from_grid(self.grids["read"]),
            codec_chunk=ChunkGridConstraints._from_grid(self.grids["codec"]),
        )
