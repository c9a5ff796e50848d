"""The ``schema`` member of a TensorStore spec: rank, dtype, domain, fill value, units, layout, codec.

Reference: https://google.github.io/tensorstore/schema.html. Only the identity index transform
over a zero-origin domain is accepted (what :meth:`gpuzarr.Array.spec` gives). Pure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ..errors import MetadataError
from ..metadata.dtypes import CORE_DATA_TYPES, EXTENSION_DATA_TYPES
from ..metadata.json_util import expect_dict, expect_int

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Driver", "Schema", "normalize_unit", "parse_dtype_name"]

Driver = Literal["zarr3", "zarr2"]

_SCHEMA_MEMBERS = frozenset(
    {
        "rank",
        "dtype",
        "domain",
        "fill_value",
        "dimension_units",
        "chunk_layout",
        "codec",
    }
)
_DOMAIN_MEMBERS = frozenset({"rank", "shape", "inclusive_min", "exclusive_max", "inclusive_max", "labels"})


def parse_dtype_name(value: Any, field_name: str = "dtype") -> str:
    """A TensorStore data type name (``"uint16"``, ``"float32"``, ``"bool"``, ``"bfloat16"`` ...)."""
    if not isinstance(value, str):
        raise MetadataError(f"{field_name}: expected a data type name, got {value!r}")
    if value not in CORE_DATA_TYPES and value not in EXTENSION_DATA_TYPES:
        supported = ", ".join((*CORE_DATA_TYPES, *EXTENSION_DATA_TYPES))
        raise MetadataError(f"{field_name}: data type {value!r} is not supported (supported: {supported})")
    return value


_UNIT_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)?\s*(.*?)\s*$")


def normalize_unit(value: Any, field_name: str = "dimension_units") -> str | None:
    """A unit in TensorStore's normal form: ``"4nm"`` -> ``"4 nm"``, ``"1 nm"`` -> ``"nm"``,
    ``""`` -> ``"1"`` (unitless), ``None`` stays None (unknown). ``[4, "nm"]``, ``(4, "nm")`` and
    ``tensorstore.Unit`` objects are accepted too."""
    if value is None:
        return None
    if hasattr(value, "multiplier") and hasattr(value, "base_unit"):  # tensorstore.Unit
        value = [value.multiplier, value.base_unit]
    if isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[1], str):
        multiplier, unit = value[0], value[1]
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)):
            raise MetadataError(f"{field_name}: expected [number, unit], got {value!r}")
    elif isinstance(value, str):
        match = _UNIT_RE.match(value)
        if match is None:  # pragma: no cover - the pattern matches every string
            raise MetadataError(f"{field_name}: cannot parse unit {value!r}")
        multiplier = float(match.group(1)) if match.group(1) else 1.0
        unit = match.group(2)
    else:
        raise MetadataError(f"{field_name}: expected a unit string or null, got {value!r}")
    multiplier = float(multiplier)
    if not math.isfinite(multiplier):
        raise MetadataError(f"{field_name}: unit multiplier must be finite, got {value!r}")
    if multiplier == 1.0:
        return unit or "1"
    number = str(int(multiplier)) if multiplier.is_integer() and abs(multiplier) < 1e16 else repr(multiplier)
    return f"{number} {unit}" if unit else number


def bound_list(value: Any, field_name: str) -> tuple[int, ...]:
    """Domain bounds: integers, or ``[n]`` for an implicit (resizable) bound."""
    if not isinstance(value, list):
        raise MetadataError(f"{field_name}: expected a list of bounds, got {value!r}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, list) and len(v) == 1:
            v = v[0]
        out.append(expect_int(v, f"{field_name}[{i}]"))
    return tuple(out)


@dataclass(frozen=True)
class Schema:
    """The ``schema`` member (and the top-level ``dtype``/``rank``), validated.

    ``fill_value`` is the JSON value (``None`` when not given); ``chunk_layout`` and ``codec``
    stay JSON objects.
    """

    rank: int | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    labels: tuple[str, ...] | None = None
    fill_value: Any = None
    dimension_units: tuple[str | None, ...] | None = None
    chunk_layout: dict[str, Any] | None = None
    codec: dict[str, Any] | None = None
    #: ``transform.input_labels``: the labels of TensorStore's view of the array. TensorStore's
    #: ``spec()`` of an array states its dimension names here; a view that names them otherwise
    #: is refused (see :func:`check_view_labels`), as gpuzarr returns the array itself.
    view_labels: tuple[str, ...] | None = None
    #: ``transform``'s explicit upper bounds (None where implicit), by dimension, and the member
    #: that gave them. TensorStore's ``spec()`` of a field with a subarray bounds its dimensions
    #: explicitly; bounds that are the array's own extents make the identity view, others a
    #: smaller one, which is refused (see :func:`check_view_bounds`).
    view_bounds: tuple[int | None, ...] | None = None
    view_bounds_member: str = ""

    @classmethod
    def from_json(cls, value: Any, driver: Driver, field_name: str = "schema") -> Schema:  # noqa: C901 - one check per JSON member
        """Parse and validate the ``schema`` member of a spec for ``driver``."""
        doc = expect_dict(value, field_name)
        extra = set(doc) - _SCHEMA_MEMBERS
        if extra:
            raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown schema member")
        ranks: list[tuple[str, int]] = []
        rank = doc.get("rank")
        if rank is not None:
            ranks.append((f"{field_name}.rank", expect_int(rank, f"{field_name}.rank", 0)))
        dtype = doc.get("dtype")
        if dtype is not None:
            dtype = parse_dtype_name(dtype, f"{field_name}.dtype")
        shape = labels = None
        domain = expect_dict(doc.get("domain"), f"{field_name}.domain")
        if domain:
            d = f"{field_name}.domain"
            extra = set(domain) - _DOMAIN_MEMBERS
            if extra:
                raise MetadataError(f"{d}.{sorted(extra)[0]}: unknown domain member")
            if "rank" in domain:
                ranks.append((f"{d}.rank", expect_int(domain["rank"], f"{d}.rank", 0)))
            if "inclusive_min" in domain:
                origin = bound_list(domain["inclusive_min"], f"{d}.inclusive_min")
                if any(origin):
                    raise MetadataError(
                        f"{d}.inclusive_min: zarr arrays have a zero origin, got {list(origin)}"
                    )
                ranks.append((f"{d}.inclusive_min", len(origin)))
            candidates = []
            if "shape" in domain:
                candidates.append(("shape", bound_list(domain["shape"], f"{d}.shape")))
            if "exclusive_max" in domain:
                candidates.append(
                    ("exclusive_max", bound_list(domain["exclusive_max"], f"{d}.exclusive_max"))
                )
            if "inclusive_max" in domain:
                incl = bound_list(domain["inclusive_max"], f"{d}.inclusive_max")
                candidates.append(("inclusive_max", tuple(v + 1 for v in incl)))
            for name, candidate in candidates:
                if any(v < 0 for v in candidate):
                    raise MetadataError(f"{d}.{name}: bounds must be >= 0, got {list(candidate)}")
                if shape is not None and candidate != shape:
                    raise MetadataError(
                        f"{d}.{name}: implies shape {list(candidate)}, "
                        f"but the domain also gives {list(shape)}"
                    )
                shape = candidate
                ranks.append((f"{d}.{name}", len(candidate)))
            if "labels" in domain:
                raw = domain["labels"]
                if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
                    raise MetadataError(f"{d}.labels: expected a list of strings, got {raw!r}")
                labels = tuple(raw)
                named = [label for label in labels if label]
                if len(set(named)) != len(named):
                    # As TensorStore refuses them: a zarr.json of ["x", "x"] reopens nowhere.
                    repeated = sorted({label for label in named if named.count(label) > 1})
                    raise MetadataError(f"{d}.labels: {', '.join(map(repr, repeated))} names more than one dimension")
                ranks.append((f"{d}.labels", len(labels)))
        units = None
        if doc.get("dimension_units") is not None:
            raw = doc["dimension_units"]
            if not isinstance(raw, list):
                raise MetadataError(f"{field_name}.dimension_units: expected a list, got {raw!r}")
            units = tuple(normalize_unit(u, f"{field_name}.dimension_units[{i}]") for i, u in enumerate(raw))
            ranks.append((f"{field_name}.dimension_units", len(units)))
        chunk_layout = doc.get("chunk_layout")
        if chunk_layout is not None:
            chunk_layout = dict(expect_dict(chunk_layout, f"{field_name}.chunk_layout"))
        codec = doc.get("codec")
        if codec is not None:
            codec = dict(expect_dict(codec, f"{field_name}.codec"))
            expected = ("zarr3",) if driver == "zarr3" else ("zarr", "zarr2")
            if codec.get("driver", expected[0]) not in expected:
                raise MetadataError(
                    f"{field_name}.codec.driver: expected {expected[0]!r} for the {driver} driver, "
                    f"got {codec.get('driver')!r}"
                )
        check_ranks(ranks)
        if "fill_value" in doc and doc["fill_value"] is None:
            # TensorStore refuses it too; taken as "not given", it dropped nothing but hid a typo.
            raise MetadataError("schema.fill_value: null is no fill value; leave the member out to give none")
        return cls(
            rank=ranks[0][1] if ranks else None,
            dtype=dtype,
            shape=shape,
            labels=labels,
            fill_value=doc.get("fill_value"),
            dimension_units=units,
            chunk_layout=chunk_layout,
            codec=codec,
        )


def check_view_labels(schema: Schema, dimension_names: Sequence[str | None] | None) -> None:
    """Refuse ``transform.input_labels`` that name the dimensions otherwise than the array does:
    TensorStore opens such a spec as a relabelled view, which gpuzarr does not make (it would
    hand out the array under its own names, or none)."""
    if schema.view_labels is None:
        return
    names = [n or "" for n in (dimension_names or [""] * len(schema.view_labels))]
    if list(schema.view_labels) != names:
        raise MetadataError(
            f"transform.input_labels: {list(schema.view_labels)} would relabel the array's dimensions "
            f"{names} (relabelling transforms are not supported)"
        )


def check_view_bounds(schema: Schema, shape: Sequence[int]) -> None:
    """Refuse ``transform`` bounds that are not the extents ``shape`` of the array (or field)
    opened: TensorStore opens them as a view of part of it, which gpuzarr does not make."""
    if schema.view_bounds is None:
        return
    if len(schema.view_bounds) != len(shape):
        raise MetadataError(
            f"{schema.view_bounds_member}: {len(schema.view_bounds)} dimensions, the array has {len(shape)}"
        )
    for bound, extent in zip(schema.view_bounds, shape, strict=True):
        if bound is not None and bound != extent:
            raise MetadataError(
                f"{schema.view_bounds_member}: {list(schema.view_bounds)} would restrict the domain of shape "
                f"{list(shape)} (index transforms are not supported)"
            )


def check_ranks(ranks: list[tuple[str, int]]) -> None:
    for name, rank in ranks[1:]:
        if rank != ranks[0][1]:
            raise MetadataError(f"{name}: implies rank {rank}, but {ranks[0][0]} implies rank {ranks[0][1]}")


def apply_identity_transform(value: Any, schema: Schema) -> Schema:
    """Accept only the identity transform over a zero-origin domain (what ``spec()`` gives)."""
    doc = expect_dict(value, "transform")
    allowed = {
        "input_rank",
        "input_inclusive_min",
        "input_exclusive_max",
        "input_shape",
        "input_labels",
        "output",
    }
    extra = set(doc) - allowed
    if extra:
        raise MetadataError(f"transform.{sorted(extra)[0]}: index transforms are not supported")
    ranks: list[tuple[str, int]] = [("schema", schema.rank)] if schema.rank is not None else []
    if "input_rank" in doc:
        ranks.append(("transform.input_rank", expect_int(doc["input_rank"], "transform.input_rank", 0)))
    if "input_inclusive_min" in doc:
        origin = bound_list(doc["input_inclusive_min"], "transform.input_inclusive_min")
        if any(origin):
            raise MetadataError(
                "transform.input_inclusive_min: index transforms are not supported (non-zero origin)"
            )
        ranks.append(("transform.input_inclusive_min", len(origin)))
    view_bounds: tuple[int | None, ...] | None = None
    view_bounds_member = ""
    for key in ("input_exclusive_max", "input_shape"):
        if key in doc:
            bounds = doc[key]
            ranks.append((f"transform.{key}", len(bound_list(bounds, f"transform.{key}"))))
            if any(not isinstance(b, list) for b in bounds):
                # Explicit bounds: allowed where they are the array's extents (checked once the
                # array is known); with the origin 0, a shape and an exclusive max are the same.
                view_bounds = tuple(
                    None if isinstance(b, list) else expect_int(b, f"transform.{key}", 0) for b in bounds
                )
                view_bounds_member = f"transform.{key}"
    if "output" in doc:
        output = doc["output"]
        identity = isinstance(output, list) and all(
            isinstance(o, dict) and o == {"input_dimension": i} for i, o in enumerate(output)
        )
        if not identity:
            raise MetadataError("transform.output: index transforms are not supported (not the identity)")
        ranks.append(("transform.output", len(output)))
    view_labels = None
    if doc.get("input_labels") is not None:
        raw = doc["input_labels"]
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise MetadataError(f"transform.input_labels: expected a list of strings, got {raw!r}")
        ranks.append(("transform.input_labels", len(raw)))
        view_labels = tuple(raw)
    check_ranks(ranks)
    rank = ranks[0][1] if ranks and schema.rank is None else schema.rank
    return replace(
        schema, rank=rank, view_labels=view_labels, view_bounds=view_bounds, view_bounds_member=view_bounds_member
    )
