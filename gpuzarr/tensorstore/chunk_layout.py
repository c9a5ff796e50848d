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

:func:`choose_chunk_shapes` picks what TensorStore's ``zarr3`` driver (and, with
``zarr_format=2``, its ``zarr`` driver) picks when it creates an array, so an array that gpuzarr
creates from a chunk layout is chunked like one that TensorStore would create. In short:

1. explicit sizes (``shape``, with -1 meaning the dimension's extent) are taken as given;
2. the remaining sizes follow the aspect ratio, scaled by a common factor found by bisection so
   that the chunk holds about ``elements`` elements (default 1024 * 1024) and not more; each size
   is clamped to ``[1, extent]``. The bisection stops at a fixed resolution, so the result is not
   always the largest fitting chunk; it is reproduced step for step to agree with TensorStore;
3. the write (shard) chunk must be a multiple of the read chunk in every dimension: a soft read
   size moves to the nearest divisor of the write size, a soft write size to the nearest multiple
   of the read size; two hard sizes that disagree are an error. The read chunk is chosen first,
   then the write chunk in multiples of it. zarr v2 has one chunk: read and write constraints are
   merged (a conflict between hard ones is an error) and one shape is chosen.

The data type plays no part in the choice (only in rejecting chunks too large to encode). Pure
Python.
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from ..errors import MetadataError

__all__ = [
    "DEFAULT_CHUNK_ELEMENTS",
    "ChosenLayout",
    "ChunkGridConstraints",
    "ChunkLayoutConstraints",
    "choose_chunk_shapes",
]

#: Target number of elements per chunk when no ``elements`` constraint is given.
DEFAULT_CHUNK_ELEMENTS = 1024 * 1024

#: Largest rank an index space may have (TensorStore's ``kMaxRank``).
MAX_RANK = 32

# TensorStore keeps indices within +-(2**62 - 2) so that sums of two never overflow int64; chunk
# sizes, element counts and origins beyond that are rejected when parsed.
_MAX_FINITE_INDEX = 2**62 - 2
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

#: Most inner chunks one shard may hold (the sharding codec's limit on its index).
MAX_INNER_CHUNKS_PER_SHARD = 1024**3

# How far from the requested size a divisor of the write chunk size is searched for.
_MAX_DIVISOR_SEARCH_DISTANCE = 1_000_000

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


# --------------------------------------------------------------------------------------------
# Choosing chunk shapes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChosenLayout:
    """The chunking chosen for a new array.

    ``write_chunk`` is the stored chunk (the shard when sharded), ``read_chunk`` the inner chunk;
    they are equal when no sharding is needed, always for ``zarr_format=2``. ``inner_order`` is
    the storage order of dimensions within a chunk, outermost first.
    """

    read_chunk: tuple[int, ...]
    write_chunk: tuple[int, ...]
    inner_order: tuple[int, ...]

    @property
    def sharded(self) -> bool:
        return self.read_chunk != self.write_chunk


def _nearest_multiple(divisor: int, target: int) -> int:
    """The multiple of ``divisor`` nearest ``target``, at least ``divisor``; ties go down."""
    if target < divisor:
        return divisor
    lower = target // divisor * divisor
    upper = lower + divisor
    if upper > _MAX_FINITE_INDEX:  # the next multiple up would not be a valid size
        return lower
    return lower if target - lower <= upper - target else upper


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (these bases suffice for every 64-bit n)."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _find_factor(n: int) -> int:
    """A nontrivial factor of the odd composite ``n`` (Pollard's rho, Brent's variant)."""
    for c in range(1, n):
        x = y = 2
        factor = 1
        while factor == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            factor = math.gcd(abs(x - y), n)
        if factor != n:
            return factor
    raise AssertionError(f"no factor found for {n}")  # unreachable for composite n


def _prime_factors(n: int) -> list[int]:
    factors: list[int] = []
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            factors.append(p)
            n //= p
    pending = [n] if n > 1 else []
    while pending:
        m = pending.pop()
        if _is_prime(m):
            factors.append(m)
        else:
            f = _find_factor(m)
            pending += [f, m // f]
    return factors


@lru_cache(maxsize=256)
def _divisors(n: int) -> tuple[int, ...]:
    """All divisors of ``n``, ascending."""
    divisors = [1]
    counts: dict[int, int] = {}
    for p in _prime_factors(n):
        counts[p] = counts.get(p, 0) + 1
    for p, k in counts.items():
        divisors = [d * p**e for d in divisors for e in range(k + 1)]
    return tuple(sorted(divisors))


@lru_cache(maxsize=4096)
def _nearest_divisor(dividend: int, target: int) -> int:
    """The divisor of ``dividend`` nearest ``target``; on a tie the smaller one.

    Only divisors less than ``_MAX_DIVISOR_SEARCH_DISTANCE`` away from ``target`` count; failing
    those, ``dividend`` itself is used. Cached because the bisection asks the same question often.
    """
    if target >= dividend:
        return dividend
    if dividend % target == 0:
        return target
    # Most answers are a few steps away; look there first before factorising ``dividend``.
    for offset in range(1, 64):
        if target > offset and dividend % (target - offset) == 0:
            return target - offset
        if dividend % (target + offset) == 0:
            return target + offset
    divisors = _divisors(dividend)
    above = bisect.bisect_left(divisors, target)  # divisors[above] > target: target is no divisor
    best: int | None = None
    for candidate in (divisors[above - 1], divisors[above]):
        distance = abs(candidate - target)
        # ``below`` comes first, so on a tie it stays.
        if distance < _MAX_DIVISOR_SEARCH_DISTANCE and (best is None or distance < abs(best - target)):
            best = candidate
    return dividend if best is None else best


def _fill_from_aspect_ratio(
    aspect_ratio: Sequence[float],
    chunk: list[int],
    target_elements: int,
    extent: Sequence[int],
    map_size: Callable[[int, int], int],
) -> None:
    """Fill the 0 entries of ``chunk`` in proportion to ``aspect_ratio``.

    Every free size is ``ratio[i] * factor`` (clamped to ``[1, extent]``, then passed through
    ``map_size``), where the ratios are scaled so that the largest free one is 1. ``factor`` is
    searched by bisection (geometric while the bracket spans more than a factor of 4, then
    arithmetic) for the largest chunk not above ``target_elements``; the search stops once the
    bracket is narrower than half a step of the finest dimension, so it can settle just short of
    the best size. The arithmetic is IEEE double throughout, as in TensorStore, so every midpoint
    and hence the result is the same.
    """
    rank = len(chunk)
    # Just below 2**62, so that a size converted back to an integer stays a finite index.
    size_cap = float.fromhex("0x1.fffffffffffffp61")
    max_size = [min(float(target_elements), max(1.0, float(n)), size_cap) for n in extent]

    largest = 0.0
    for i in range(rank):
        if chunk[i] == 0 and math.isfinite(aspect_ratio[i]) and aspect_ratio[i] > largest:
            largest = aspect_ratio[i]
    ratio: list[float] = []
    for a in aspect_ratio:
        if not math.isfinite(a) or a <= 0:
            r = 1.0
        elif largest > 0:
            r = a / largest
            if r == 0:  # underflow: keep the dimension alive at the smallest normal double
                r = sys.float_info.min
        else:
            r = a
        ratio.append(r)

    def size_at(i: int, factor: float) -> int:
        if chunk[i] != 0:
            return chunk[i]
        return map_size(i, max(1, int(min(ratio[i] * factor, max_size[i]))))

    def elements_at(factor: float) -> int:
        total = 1
        for i in range(rank):
            total *= size_at(i, factor)
            if total > _INT64_MAX:  # saturate like the int64 product it mirrors
                return _INT64_MAX
        return total

    min_factor_increment = math.inf
    max_factor = 0.0
    for i in range(rank):
        if chunk[i] == 0:
            min_factor_increment = min(min_factor_increment, 1.0 / ratio[i])
            max_factor = max(max_factor, max_size[i] / ratio[i])
    # Leeway for rounding at both ends of the search range, kept finite and nonzero.
    min_factor_increment = max(min_factor_increment / 2, sys.float_info.min)
    max_factor = min(max_factor, sys.float_info.max / 4.0) * 2.0

    min_factor = min_factor_increment
    max_factor_elements = elements_at(max_factor)
    for _ in range(100):
        if not min_factor + min_factor_increment < max_factor:
            break
        if max_factor > min_factor * 4.0 and min_factor > 0:
            mid_factor = math.sqrt(min_factor * max_factor)
        else:
            mid_factor = min_factor + (max_factor - min_factor) / 2.0
        if not math.isfinite(mid_factor) or mid_factor <= min_factor or mid_factor >= max_factor:
            break
        mid_elements = elements_at(mid_factor)
        if mid_elements >= target_elements:
            max_factor = mid_factor
            max_factor_elements = mid_elements
        if mid_elements <= target_elements:
            min_factor = mid_factor
    factor = max_factor if max_factor_elements == target_elements else min_factor
    for i in range(rank):
        chunk[i] = size_at(i, factor)


def _initial_chunk(grid: _Grid, extent: Sequence[int]) -> tuple[list[int], list[bool]]:
    """Sizes fixed by the shape constraint (0 = still free) and which of them are hard."""
    chunk = list(grid.shape.values)
    hard = list(grid.shape.hard)
    for i, size in enumerate(chunk):
        if size == 0:
            hard[i] = False
        elif size == -1:
            chunk[i] = max(1, extent[i])
    return chunk, hard


def _complete_chunk(
    grid: _Grid, extent: Sequence[int], chunk: list[int], map_size: Callable[[int, int], int]
) -> None:
    """Choose the still-free sizes of ``chunk`` from the grid's aspect ratio and element count."""
    if 0 not in chunk:
        return
    # An aspect ratio of 0 means "unconstrained", which is the same as 1.
    aspect_ratio = [a if a != 0 else 1.0 for a in grid.aspect_ratio.values]
    target = grid.elements if grid.elements is not None else DEFAULT_CHUNK_ELEMENTS
    _fill_from_aspect_ratio(aspect_ratio, chunk, target, extent, map_size)


def _choose_read_write(read: _Grid, write: _Grid, extent: Sequence[int]) -> tuple[list[int], list[int]]:
    """Read and write chunk shapes for a format with sharding (zarr v3)."""
    write_chunk, write_hard = _initial_chunk(write, extent)
    read_chunk, read_hard = _initial_chunk(read, extent)
    # Where both sizes are given, the write size must be a multiple of the read size.
    for i in range(len(extent)):
        read_size, write_size = read_chunk[i], write_chunk[i]
        if read_size == 0 or write_size == 0 or write_size % read_size == 0:
            continue
        if read_hard[i] and write_hard[i]:
            raise MetadataError(
                f"chunk_layout: incompatible chunk size constraints for dimension {i}: "
                f"read size of {read_size}, write size of {write_size}"
            )
        if read_hard[i]:
            write_chunk[i] = _nearest_multiple(read_size, write_size)
        else:
            # The write size wins when it is hard, and also when neither is.
            read_chunk[i] = _nearest_divisor(write_size, read_size)

    def map_read_size(i: int, size: int) -> int:
        return _nearest_divisor(write_chunk[i], size) if write_chunk[i] != 0 else size

    _complete_chunk(read, extent, read_chunk, map_read_size)

    def map_write_size(i: int, size: int) -> int:
        return _nearest_multiple(read_chunk[i], size)

    _complete_chunk(write, extent, write_chunk, map_write_size)
    return read_chunk, write_chunk


def _choose_single(read: _Grid, write: _Grid, extent: Sequence[int]) -> list[int]:
    """One chunk shape serving both reads and writes (zarr v2, which cannot shard)."""
    try:
        read.merge_grid(write, "chunk_layout.write_chunk")
    except MetadataError as error:
        raise MetadataError(
            "chunk_layout: write_chunk constraints not compatible with existing read_chunk "
            f"constraints: {error}"
        ) from None
    chunk, _ = _initial_chunk(read, extent)
    _complete_chunk(read, extent, chunk, lambda i, size: size)
    return chunk


def _check_encodable(chunk: Sequence[int], itemsize: int) -> None:
    """Reject a chunk whose size in bytes does not fit in an int64."""
    if math.prod(chunk) * itemsize > _INT64_MAX:
        raise MetadataError(
            f"chunk_layout: a chunk of shape {list(chunk)} with {itemsize}-byte elements is too large "
            f"to encode (more than 2**63 - 1 bytes)"
        )


def _check_shard_grid(read_chunk: Sequence[int], write_chunk: Sequence[int]) -> None:
    """Reject a shard that would hold more inner chunks than a shard index may list."""
    grid = [w // r for r, w in zip(read_chunk, write_chunk)]
    if math.prod(grid) > MAX_INNER_CHUNKS_PER_SHARD:
        raise MetadataError(
            f"chunk_layout: write chunk {list(write_chunk)} holds a grid of {grid} read chunks, "
            f"more than {MAX_INNER_CHUNKS_PER_SHARD} entries"
        )


def choose_chunk_shapes(
    shape: tuple[int, ...] | Sequence[int],
    constraints: ChunkLayoutConstraints | None = None,
    *,
    zarr_format: int = 3,
    itemsize: int = 1,
) -> ChosenLayout:
    """Choose read and write chunk shapes for a new array, as TensorStore does.

    Parameters
    ----------
    shape
        The array shape (finite; dimensions of length 0 get chunk size 1).
    constraints
        Chunk layout constraints; ``None`` means none.
    zarr_format
        3 for TensorStore's ``zarr3`` driver: the write chunk may be a multiple of the read
        chunk, which then calls for a sharding codec. 2 for its ``zarr`` driver: read and write
        constraints are merged and a single chunk shape is chosen.
    itemsize
        Bytes per element. The data type never changes the choice; it only decides whether a
        (huge) chosen chunk is too large to encode, which TensorStore rejects.

    Returns
    -------
    ChosenLayout

    Raises
    ------
    MetadataError
        If the constraints cannot be met: rank mismatch, conflicting hard sizes, a hard nonzero
        ``grid_origin`` (Zarr grids start at 0), hard ``codec_chunk`` shape (not supported by
        Zarr), for zarr v2 a hard ``inner_order`` that is neither C nor Fortran order, or a
        chosen chunk that is too large (its byte size overflows int64, or a shard would hold more
        than 2**30 inner chunks).
    """
    if isinstance(itemsize, bool) or not isinstance(itemsize, int) or itemsize < 1:
        raise MetadataError(f"itemsize must be a positive integer, got {itemsize!r}")
    if zarr_format not in (2, 3):
        raise MetadataError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
    extent = [int(n) for n in shape]
    if any(n < 0 for n in extent):
        raise MetadataError(f"shape must not be negative, got {list(extent)}")
    if constraints is None:
        constraints = ChunkLayoutConstraints()
    rank = len(extent)
    if constraints.rank is not None and constraints.rank != rank:
        raise MetadataError(
            f"chunk_layout: rank {constraints.rank} does not match the rank of the array shape {rank}"
        )
    if constraints.grid_origin is not None:
        for i, origin in enumerate(constraints.grid_origin):
            if origin is not None and origin != 0:
                raise MetadataError(
                    f"chunk_layout.grid_origin: Zarr chunk grids start at 0, but dimension {i} "
                    f"requires {origin}"
                )
    if constraints.codec_chunk.shape is not None:
        raise MetadataError("chunk_layout.codec_chunk.shape: codec chunk shape constraints are not supported")

    read = constraints.read_chunk._to_grid(rank, "chunk_layout.read_chunk")
    write = constraints.write_chunk._to_grid(rank, "chunk_layout.write_chunk")
    order = constraints.inner_order or constraints.inner_order_soft_constraint
    c_order = tuple(range(rank))

    if zarr_format == 3:
        read_chunk, write_chunk = _choose_read_write(read, write, extent)
        _check_encodable(read_chunk, itemsize)
        if read_chunk != write_chunk:
            _check_shard_grid(read_chunk, write_chunk)
        # Any permutation can be stored (a transpose codec does it).
        return ChosenLayout(tuple(read_chunk), tuple(write_chunk), order if order is not None else c_order)

    chunk = tuple(_choose_single(read, write, extent))
    _check_encodable(chunk, itemsize)
    inner_order = c_order
    if order is not None and order != c_order:
        if order == c_order[::-1]:
            inner_order = order
        elif constraints.inner_order is not None:
            raise MetadataError(
                f"chunk_layout.inner_order: zarr v2 stores chunks in C or F order only, got {list(order)}"
            )
    return ChosenLayout(chunk, chunk, inner_order)
