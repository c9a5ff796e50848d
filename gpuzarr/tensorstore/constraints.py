"""Constraints of a TensorStore spec against what is stored.

The ``metadata`` member of a spec holds zarr.json-like (zarr3) or .zarray-like (zarr2)
constraints, every member optional: :func:`check_v3_metadata` and :func:`check_v2_metadata`
validate and normalise them, :func:`check_metadata_constraints` compares them with a stored
document. :func:`check_schema_constraints` compares the ``schema`` member with a
:class:`StoredSchema`, what an array's metadata offers in TensorStore's terms
(:func:`stored_schema`). Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from ..errors import MetadataError
from ..metadata.chain import chain_order, parse_codec_chain
from ..metadata.dtypes import DataType
from ..metadata.json_util import expect_dict, expect_int_list, expect_str
from ..metadata.v2 import (
    ArrayMetadataV2,
    _fill_from_v2,
    _fill_to_v2,
    object_codec_of,
    parse_v2_dtype,
    v2_dtype_string,
)
from ..metadata.v3 import ARRAY_FIELDS, ArrayMetadata
from .codec_chains import codecs_match, json_subset
from .schema import Schema, check_ranks, normalize_unit

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..metadata.json_types import CodecJSON

__all__ = [
    "StoredSchema",
    "check_metadata_constraints",
    "check_schema_constraints",
    "check_v2_metadata",
    "check_v3_metadata",
    "codecs_match",
    "json_subset",
    "stored_schema",
]

_V3_METADATA_MEMBERS = ARRAY_FIELDS
_V2_METADATA_MEMBERS = frozenset(
    {
        "zarr_format",
        "shape",
        "chunks",
        "dtype",
        "compressor",
        "fill_value",
        "order",
        "filters",
        "dimension_separator",
    }
)


class MetadataConstraints(Protocol):
    """What :func:`check_metadata_constraints` reads of a :class:`~gpuzarr.tensorstore.spec.TensorStoreSpec`."""

    @property
    def driver(self) -> str: ...

    @property
    def metadata(self) -> dict[str, Any]: ...


def json_text(value: Any) -> str:
    """``value`` as JSON with sorted keys, for error messages."""
    return json.dumps(value, sort_keys=True)


def check_v3_metadata(doc: dict[str, Any]) -> dict[str, Any]:  # noqa: C901 - one check per JSON member
    """Validate zarr.json-like constraints (every member optional); returns a normalised copy."""
    f = "metadata"
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key not in _V3_METADATA_MEMBERS and not (
            isinstance(value, dict) and value.get("must_understand") is False
        ):
            raise MetadataError(f"{f}.{key}: unknown zarr3 metadata member")
    if "zarr_format" in doc and (doc["zarr_format"] != 3 or isinstance(doc["zarr_format"], bool)):
        raise MetadataError(f"{f}.zarr_format: expected 3, got {doc['zarr_format']!r}")
    if "node_type" in doc and doc["node_type"] != "array":
        raise MetadataError(f"{f}.node_type: expected 'array', got {doc['node_type']!r}")
    ranks: list[tuple[str, int]] = []
    if "shape" in doc:
        shape = expect_int_list(doc["shape"], f"{f}.shape")
        if any(s < 0 for s in shape):
            raise MetadataError(f"{f}.shape: entries must be >= 0, got {shape}")
        out["shape"] = shape
        ranks.append((f"{f}.shape", len(shape)))
    if "data_type" in doc:
        out["data_type"] = DataType.from_json(doc["data_type"], f"{f}.data_type").to_json()
    if "chunk_grid" in doc:
        grid = expect_dict(doc["chunk_grid"], f"{f}.chunk_grid")
        name = grid.get("name", "regular")
        if not isinstance(name, str):
            raise MetadataError(f"{f}.chunk_grid.name: expected a string, got {name!r}")
        config = expect_dict(grid.get("configuration"), f"{f}.chunk_grid.configuration")
        # Other grids (rectilinear) are kept as given: they can be matched on open, not created.
        norm: dict[str, Any] = {"name": name, "configuration": {} if name == "regular" else dict(config)}
        if name == "regular" and "chunk_shape" in config:
            cs = expect_int_list(config["chunk_shape"], f"{f}.chunk_grid.configuration.chunk_shape")
            if any(c < 1 for c in cs):
                raise MetadataError(
                    f"{f}.chunk_grid.configuration.chunk_shape: entries must be >= 1, got {cs}"
                )
            norm["configuration"]["chunk_shape"] = cs
            ranks.append((f"{f}.chunk_grid.configuration.chunk_shape", len(cs)))
        out["chunk_grid"] = norm
    if "chunk_key_encoding" in doc:
        cke = expect_dict(doc["chunk_key_encoding"], f"{f}.chunk_key_encoding")
        name = cke.get("name", "default")
        expect_str(name, f"{f}.chunk_key_encoding.name", ("default", "v2"))
        config = expect_dict(cke.get("configuration"), f"{f}.chunk_key_encoding.configuration")
        if "separator" in config:
            expect_str(config["separator"], f"{f}.chunk_key_encoding.configuration.separator", ("/", "."))
        out["chunk_key_encoding"] = {"name": name, "configuration": dict(config)}
    if "fill_value" in doc:
        out["fill_value"] = doc["fill_value"]
    if "codecs" in doc:
        out["codecs"] = parse_codec_chain(doc["codecs"], f"{f}.codecs")
    if "attributes" in doc:
        out["attributes"] = dict(expect_dict(doc["attributes"], f"{f}.attributes"))
    if doc.get("dimension_names") is not None:
        names = doc["dimension_names"]
        if not isinstance(names, list) or not all(n is None or isinstance(n, str) for n in names):
            raise MetadataError(f"{f}.dimension_names: expected a list of strings or nulls, got {names!r}")
        out["dimension_names"] = list(names)
        ranks.append((f"{f}.dimension_names", len(names)))
    if doc.get("storage_transformers") not in (None, []):
        raise MetadataError(f"{f}.storage_transformers: no storage transformer is supported")
    for key, value in doc.items():
        if key not in _V3_METADATA_MEMBERS:
            out[key] = value
    check_ranks(ranks)
    return out


def check_v2_metadata(doc: dict[str, Any]) -> dict[str, Any]:
    """Validate .zarray-like constraints (every member optional); returns a normalised copy."""
    f = "metadata"
    extra = set(doc) - _V2_METADATA_MEMBERS
    if extra:
        raise MetadataError(f"{f}.{sorted(extra)[0]}: unknown zarr2 metadata member")
    out: dict[str, Any] = {}
    if "zarr_format" in doc and (doc["zarr_format"] != 2 or isinstance(doc["zarr_format"], bool)):
        raise MetadataError(f"{f}.zarr_format: expected 2, got {doc['zarr_format']!r}")
    ranks: list[tuple[str, int]] = []
    for key in ("shape", "chunks"):
        if key in doc:
            values = expect_int_list(doc[key], f"{f}.{key}")
            if any(v < (1 if key == "chunks" else 0) for v in values):
                raise MetadataError(
                    f"{f}.{key}: entries must be >= {1 if key == 'chunks' else 0}, got {values}"
                )
            out[key] = values
            ranks.append((f"{f}.{key}", len(values)))
    if "dtype" in doc:
        object_codec = object_codec_of(doc.get("filters"), doc.get("compressor"))
        data_type, endian = parse_v2_dtype(doc["dtype"], f"{f}.dtype", object_codec)
        out["dtype"] = v2_dtype_string(data_type, endian)
        if "fill_value" in doc:
            out["fill_value"] = _fill_to_v2(
                _fill_from_v2(doc["fill_value"], data_type, f"{f}.fill_value"), data_type
            )
    elif "fill_value" in doc:
        out["fill_value"] = doc["fill_value"]
    if "order" in doc:
        out["order"] = expect_str(doc["order"], f"{f}.order", ("C", "F"))
    if "compressor" in doc:
        out["compressor"] = (
            None if doc["compressor"] is None else dict(expect_dict(doc["compressor"], f"{f}.compressor"))
        )
        if out["compressor"] is not None and not isinstance(out["compressor"].get("id"), str):
            raise MetadataError(
                f"{f}.compressor.id: expected a codec id string, got {out['compressor'].get('id')!r}"
            )
    if "filters" in doc:
        filters = doc["filters"]
        if filters is not None and not isinstance(filters, list):
            raise MetadataError(f"{f}.filters: expected a list or null, got {filters!r}")
        out["filters"] = (
            None
            if not filters
            else [dict(expect_dict(x, f"{f}.filters[{i}]")) for i, x in enumerate(filters)]
        )
    if "dimension_separator" in doc:
        out["dimension_separator"] = expect_str(
            doc["dimension_separator"], f"{f}.dimension_separator", (".", "/")
        )
    check_ranks(ranks)
    return out


def _mismatch(name: str, expected: Any, stored: Any) -> MetadataError:
    return MetadataError(f"{name}: expected {json_text(expected)}, stored {json_text(stored)}")


def check_metadata_constraints(spec: MetadataConstraints, stored: Mapping[str, Any]) -> None:  # noqa: C901 - one check per JSON member
    """Raise MetadataError naming the first ``metadata`` member that ``stored`` (the full
    zarr.json or .zarray document, attributes included for v3) does not satisfy."""
    for key, expected in spec.metadata.items():
        name = f"metadata.{key}"
        actual = stored.get(key)
        if spec.driver == "zarr3":
            if key == "codecs":
                rank = len(stored["shape"]) if isinstance(stored.get("shape"), list) else None
                if not codecs_match(expected, parse_codec_chain(actual or [], "codecs"), rank):
                    raise _mismatch(name, expected, actual)
            elif key == "chunk_key_encoding":
                default_sep = "/" if expected["name"] == "default" else "."
                want = (expected["name"], expected["configuration"].get("separator", default_sep))
                have_doc = expect_dict(actual, name)
                have_name = have_doc.get("name", "default")
                have = (
                    have_name,
                    (have_doc.get("configuration") or {}).get(
                        "separator", "/" if have_name == "default" else "."
                    ),
                )
                if want != have:
                    raise _mismatch(name, expected, actual)
            elif key == "fill_value":
                data_type = DataType.from_json(stored["data_type"])
                want_fill = data_type.fill_value_to_json(data_type.fill_value_from_json(expected, name))
                if want_fill != data_type.fill_value_to_json(data_type.fill_value_from_json(actual)):
                    raise _mismatch(name, expected, actual)
            elif key in ("chunk_grid", "attributes"):
                if not json_subset(expected, actual or {}):
                    raise _mismatch(name, expected, actual)
            elif key == "dimension_names":
                if [n or "" for n in expected] != [n or "" for n in (actual or [""] * len(expected))]:
                    raise _mismatch(name, expected, actual)
            elif key in ("zarr_format", "node_type"):
                continue
            elif actual != expected:
                raise _mismatch(name, expected, actual)
        else:
            if key == "dimension_separator":
                actual = stored.get(key, ".")
            # An object dtype ('|O') holds what the stored array's object codec says.
            object_codec = object_codec_of(stored.get("filters"), stored.get("compressor"))
            if key == "fill_value" and "dtype" in stored:
                data_type, _ = parse_v2_dtype(stored["dtype"], object_codec=object_codec)
                expected = _fill_to_v2(_fill_from_v2(expected, data_type, name), data_type)
                actual = _fill_to_v2(_fill_from_v2(actual, data_type), data_type)
            if key == "compressor" and expected is not None and actual is not None:
                if not json_subset(expected, actual):
                    raise _mismatch(name, expected, actual)
            elif key == "dtype":
                if parse_v2_dtype(expected, object_codec=object_codec) != parse_v2_dtype(
                    actual, object_codec=object_codec
                ):
                    raise _mismatch(name, expected, actual)
            elif key == "zarr_format":
                continue
            elif actual != expected:
                raise _mismatch(name, expected, actual)


def _field_fill(fill: Any, field_name: str, data_type: DataType) -> Any:
    """The JSON fill value of one field of a structured array whose fill value is ``fill``
    (None: stored null): a list of the elements' in C order where the field is a subarray."""
    if fill is None:
        return None
    value = np.asarray(fill[field_name])
    elements = [data_type.fill_value_to_json(value.reshape(-1)[k]) for k in range(value.size)]
    return elements[0] if value.ndim == 0 else elements


def _subarray_fill(value: Any, shape: tuple[int, ...], data_type: DataType) -> list[Any] | None:
    """A spec's fill value for a field with a subarray of ``shape``, broadcast to it as
    TensorStore broadcasts it, as a list of the elements' JSON in C order; None where it does not
    broadcast (then it matches nothing stored)."""
    values = np.asarray(value, dtype=object)
    # Leading dimensions of one element beyond the subarray's rank add nothing, as in TensorStore.
    while values.ndim > len(shape) and values.shape[0] == 1:
        values = values[0]
    try:
        values = np.broadcast_to(values, shape)
    except ValueError:
        return None
    return [data_type.fill_value_to_json(data_type.fill_value_from_python(v)) for v in values.reshape(-1)]


@dataclass(frozen=True)
class StoredSchema:
    """What an opened array offers for ``schema`` checks, in TensorStore's terms."""

    dtype: str
    shape: tuple[int, ...]
    labels: tuple[str, ...]
    fill_value: Any  # JSON; for a field with a subarray, a list of its elements' in C order
    dimension_units: tuple[str | None, ...] | None
    write_chunk: tuple[int, ...]
    read_chunk: tuple[int, ...]
    inner_order: tuple[int, ...]
    codec: dict[str, Any]
    #: The subarray shape of a field (its fill value's shape), () for the others.
    fill_shape: tuple[int, ...] = ()


def check_schema_constraints(schema: Schema, stored: StoredSchema) -> None:  # noqa: C901 - one check per JSON member
    """Raise MetadataError naming the first schema constraint that the stored array breaks."""
    rank = len(stored.shape)
    if schema.rank is not None and schema.rank != rank:
        raise _mismatch("rank", schema.rank, rank)
    if schema.dtype is not None and schema.dtype != stored.dtype:
        raise _mismatch("dtype", schema.dtype, stored.dtype)
    if schema.shape is not None and schema.shape != stored.shape:
        raise _mismatch("schema.domain.shape", list(schema.shape), list(stored.shape))
    # An empty stored label (an array written without dimension names) or unit agrees with
    # any, as TensorStore merges them; two given ones must be the same.
    if schema.labels is not None and any(
        w and h and w != h for w, h in zip(schema.labels, stored.labels, strict=True)
    ):
        raise _mismatch("schema.domain.labels", list(schema.labels), list(stored.labels))
    if schema.fill_value is not None:
        data_type = DataType.from_json(stored.dtype)
        if stored.fill_shape:  # a field's subarray: element by element
            want = _subarray_fill(schema.fill_value, stored.fill_shape, data_type)
        else:
            want = data_type.fill_value_to_json(data_type.fill_value_from_python(schema.fill_value))
        if want != stored.fill_value:
            raise _mismatch("schema.fill_value", schema.fill_value, stored.fill_value)
    if schema.dimension_units is not None:
        have = stored.dimension_units or (None,) * rank
        if any(w is not None and h is not None and w != h for w, h in zip(schema.dimension_units, have, strict=True)):
            raise _mismatch("schema.dimension_units", list(schema.dimension_units), list(have))
    layout = schema.chunk_layout or {}
    for member, actual in (
        ("write_chunk", stored.write_chunk),
        ("read_chunk", stored.read_chunk),
        ("chunk", stored.write_chunk),
        ("chunk", stored.read_chunk),
    ):
        shape = expect_dict(layout.get(member), f"schema.chunk_layout.{member}").get("shape")
        if shape is not None and (
            len(shape) != rank
            or any(w not in (None, 0, -1) and w != a for w, a in zip(shape, actual, strict=True))
        ):
            raise _mismatch(f"schema.chunk_layout.{member}.shape", shape, list(actual))
    if layout.get("inner_order") is not None and tuple(layout["inner_order"]) != stored.inner_order:
        raise _mismatch("schema.chunk_layout.inner_order", layout["inner_order"], list(stored.inner_order))
    if layout.get("grid_origin") is not None and any(layout["grid_origin"]):
        raise _mismatch("schema.chunk_layout.grid_origin", layout["grid_origin"], [0] * rank)
    if schema.codec is not None:
        codec = {k: v for k, v in schema.codec.items() if k != "driver"}
        if "codecs" in codec and not codecs_match(
            parse_codec_chain(codec.pop("codecs"), "schema.codec.codecs"),
            stored.codec.get("codecs", []),
            rank,
            strict=False,
        ):
            raise _mismatch("schema.codec.codecs", schema.codec["codecs"], stored.codec.get("codecs"))
        for key, value in codec.items():
            if not json_subset(value, stored.codec.get(key)):
                raise _mismatch(f"schema.codec.{key}", value, stored.codec.get(key))


def _inner_chain(codecs: list[CodecJSON]) -> list[CodecJSON]:
    if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        return _inner_chain(parse_codec_chain(codecs[0]["configuration"].get("codecs", []), "codecs"))
    return codecs


def _read_chunk(metadata: ArrayMetadata | ArrayMetadataV2) -> tuple[int, ...]:
    """The chunk read and decoded: the inner chunk when the chain is just ``sharding_indexed``
    (as :attr:`gpuzarr.Array.chunks`)."""
    codecs = metadata.codecs
    if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        return tuple(codecs[0]["configuration"]["chunk_shape"])
    return tuple(getattr(metadata.chunk_grid, "chunk_shapes", metadata.chunk_shape))


def stored_schema(metadata: ArrayMetadata | ArrayMetadataV2, field_name: str | None = None) -> StoredSchema:
    """An array's schema in TensorStore's terms, from its metadata.

    Parameters
    ----------
    metadata
        The stored metadata (its attributes included: ``dimension_units`` comes from them).
    field_name
        For one field of a structured zarr2 array: its dtype, and its subarray shape appended.

    Returns
    -------
    StoredSchema
    """
    dtype = metadata.dtype
    sub: tuple[int, ...] = ()
    fill: Any = None
    if field_name is not None and dtype.fields is not None:
        field_dtype = dtype.fields[field_name][0]
        sub, base = tuple(field_dtype.shape), field_dtype.base
        dtype_name = DataType.from_numpy(base).name
        fill = _field_fill(metadata.fill_value, field_name, DataType.from_numpy(base))
    elif dtype.fields is not None:
        dtype_name = "structured"
    else:
        dtype_name = metadata.data_type.name
        no_fill = isinstance(metadata, ArrayMetadataV2) and metadata.fill_value_v2 is None
        # A v2 array of no fill value (null) meets no fill value a schema asks for, as in
        # TensorStore; its reads fill with the type's default, which no schema named.
        fill = None if no_fill else metadata.data_type.fill_value_to_json(metadata.fill_value)
    rank = metadata.ndim
    inner_order = list(range(rank))
    codec: dict[str, Any]
    if isinstance(metadata, ArrayMetadataV2):
        if metadata.order == "F":
            inner_order = inner_order[::-1]
        codec = {
            "driver": "zarr",
            "compressor": metadata.compressor,
            "filters": list(metadata.filters) if metadata.filters else None,
        }
    else:
        inner_order = chain_order(_inner_chain([cast("CodecJSON", dict(c)) for c in metadata.codecs]), rank)
        codec = {"driver": "zarr3", "codecs": [dict(c) for c in metadata.codecs]}
    units = metadata.attributes.get("dimension_units") if metadata.zarr_format == 3 else None
    return StoredSchema(
        dtype=dtype_name,
        shape=tuple(metadata.shape) + sub,
        labels=tuple(n or "" for n in (metadata.dimension_names or ("",) * rank)) + ("",) * len(sub),
        fill_value=fill,
        dimension_units=tuple(normalize_unit(u) for u in units) + (None,) * len(sub)
        if isinstance(units, list)
        else None,
        write_chunk=tuple(metadata.chunk_shape) + sub,
        read_chunk=_read_chunk(metadata) + sub,
        inner_order=tuple(inner_order) + tuple(range(rank, rank + len(sub))),
        codec=codec,
        fill_shape=sub,
    )
