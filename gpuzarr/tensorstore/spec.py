"""TensorStore-style JSON specs for the ``zarr3`` and ``zarr2`` drivers: parsing and validation.

A spec names a driver, a key-value store and constraints on the array::

    {"driver": "zarr3",
     "kvstore": {"driver": "file", "path": "/data/x.zarr/"},
     "path": "raw",                                  # joined to kvstore.path with "/"
     "create": true, "delete_existing": true,
     "metadata": {"shape": [100, 200], "data_type": "uint16"},   # zarr.json-like, all optional
     "schema": {"chunk_layout": {"write_chunk": {"shape": [64, 64]}}, "fill_value": 0}}

Reference: https://google.github.io/tensorstore/driver/zarr3/index.html and
https://google.github.io/tensorstore/driver/zarr2/index.html.

This module is pure: it turns a JSON spec into a validated :class:`TensorStoreSpec`, applies
TensorStore's open-mode rules (``open`` defaults to true when neither ``open`` nor ``create`` is
given; ``delete_existing`` needs ``create`` and not ``open``; ``assume_metadata`` and
``assume_cached_metadata`` need ``open`` and not ``delete_existing``), merges a zarr-python
``mode`` and keyword options into a spec, and checks a spec's constraints against stored
metadata JSON. Reading, writing and choosing defaults for new arrays live in
``gpuzarr.tensorstore.open``.

Not supported: index ``transform``s other than the identity on the whole array, kvstore
drivers other than ``file`` and ``memory``, and a non-default zarr2 ``metadata_key``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import MetadataError
from ..spec.dtypes import CORE_DATA_TYPES, DataType
from ..spec.json_util import expect_dict, expect_int, expect_int_list, expect_str
from ..spec.v2 import _fill_from_v2, _fill_to_v2, parse_v2_dtype, v2_dtype_string
from ..spec.v3 import ARRAY_FIELDS, normalize_codec_json

Driver = Literal["zarr3", "zarr2"]

#: Driver names and the driver they mean ("zarr" is TensorStore's old name of "zarr2").
DRIVERS: dict[str, Driver] = {"zarr3": "zarr3", "zarr2": "zarr2", "zarr": "zarr2"}

#: Context resources and cache policies: meaningful to TensorStore only, accepted and ignored.
IGNORED_MEMBERS = frozenset(
    {
        "context",
        "cache_pool",
        "metadata_cache_pool",
        "data_copy_concurrency",
        "file_io_concurrency",
        "recheck_cached_metadata",
        "recheck_cached_data",
        "recheck_cached",
    }
)
_OPEN_FLAGS = ("open", "create", "delete_existing", "assume_metadata", "assume_cached_metadata")
_SPEC_MEMBERS = frozenset(
    {
        "driver",
        "kvstore",
        "path",
        *_OPEN_FLAGS,
        "metadata",
        "dtype",
        "rank",
        "schema",
        "field",
        "fill_missing_data_reads",
        "store_data_equal_to_fill_value",
        "transform",
        "key_encoding",
        "metadata_key",
    }
)
_KVSTORE_IGNORED = frozenset(
    {
        "context",
        "file_io_concurrency",
        "file_io_sync",
        "file_io_locking",
        "file_io_mode",
        "file_io_retries",
        "memory_key_value_store",
        "atomic",
    }
)
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

#: zarr-python modes as TensorStore open flags (``"r"`` also opens the store read-only).
MODE_FLAGS: dict[str, dict[str, bool]] = {
    "r": {"open": True, "create": False, "delete_existing": False},
    "r+": {"open": True, "create": False, "delete_existing": False},
    "a": {"open": True, "create": True, "delete_existing": False},
    "w": {"open": False, "create": True, "delete_existing": True},
    "w-": {"open": False, "create": True, "delete_existing": False},
}

#: Keyword options of ``open_spec`` that are schema constraints, as in ``tensorstore.open``.
_SCHEMA_KWARGS = {
    "fill_value": "fill_value",
    "dimension_units": "dimension_units",
    "chunk_layout": "chunk_layout",
    "codec": "codec",
}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _expect_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise MetadataError(f"{name}: expected true or false, got {value!r}")
    return value


def join_path(*parts: str) -> str:
    """Join path components with "/" (empty components are dropped; no leading/trailing "/")."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


# -- kvstore ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvStoreSpec:
    """A ``file`` or ``memory`` key-value store.

    ``path`` is the directory (file) or key prefix (memory), without a trailing "/". ``url`` is
    kept when the spec gave a URL string (``"file:///data/x.zarr"``, ``"memory://name"``), so that
    the URL's meaning in gpuzarr (a named memory store) is kept.
    """

    driver: Literal["file", "memory"]
    path: str = ""
    url: str | None = None

    @classmethod
    def from_json(cls, value: Any, field_name: str = "kvstore") -> KvStoreSpec:
        if isinstance(value, str):
            if value.startswith("file://"):
                from urllib.parse import unquote, urlparse

                if "|" in value:
                    raise MetadataError(f"{field_name}: URL pipelines ('|') are not supported, got {value!r}")
                return cls("file", unquote(urlparse(value).path).rstrip("/") or "/", value)
            if value.startswith("memory://"):
                return cls("memory", "", value)
            raise MetadataError(
                f"{field_name}: expected a 'file://' or 'memory://' URL or a kvstore object, got {value!r}"
            )
        doc = expect_dict(value, field_name)
        if not doc:
            raise MetadataError(f"{field_name}: required member is missing")
        driver = doc.get("driver")
        if driver not in ("file", "memory"):
            raise MetadataError(f"{field_name}.driver: expected 'file' or 'memory', got {driver!r}")
        path = doc.get("path", "")
        if not isinstance(path, str):
            raise MetadataError(f"{field_name}.path: expected a string, got {path!r}")
        extra = set(doc) - {"driver", "path"} - _KVSTORE_IGNORED
        if extra:
            raise MetadataError(f"{field_name}.{sorted(extra)[0]}: unknown kvstore member")
        if driver == "file":
            if not path:
                raise MetadataError(f"{field_name}.path: a file kvstore needs a path")
            return cls("file", path.rstrip("/") or "/")
        return cls("memory", path.strip("/"))

    def joined(self, path: str) -> KvStoreSpec:
        """This store with ``path`` appended to its path (for a URL store: to the URL)."""
        if not path.strip("/"):
            return self
        if self.driver == "file":
            new_path = self.path.rstrip("/") + "/" + path.strip("/")
            return KvStoreSpec("file", new_path, None)
        if self.url is not None:
            return KvStoreSpec("memory", join_path(self.path, path), self.url)
        return KvStoreSpec("memory", join_path(self.path, path))

    def to_json(self) -> Any:
        if self.url is not None and self.driver == "memory":
            return self.url.rstrip("/") + ("/" + self.path if self.path else "")
        if self.driver == "file":
            return {"driver": "file", "path": self.path.rstrip("/") + "/"}
        return {"driver": "memory", "path": self.path + "/"} if self.path else {"driver": "memory"}


# -- schema ----------------------------------------------------------------------------------------


def parse_dtype_name(value: Any, field_name: str = "dtype") -> str:
    """A TensorStore data type name (``"uint16"``, ``"float32"``, ``"bool"`` ...)."""
    if not isinstance(value, str):
        raise MetadataError(f"{field_name}: expected a data type name, got {value!r}")
    if value not in CORE_DATA_TYPES:
        raise MetadataError(
            f"{field_name}: data type {value!r} is not supported (supported: {', '.join(CORE_DATA_TYPES)})"
        )
    return value


_UNIT_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)?\s*(.*?)\s*$")


def normalize_unit(value: Any, field_name: str = "dimension_units") -> str | None:
    """A unit in TensorStore's normal form: ``"4nm"`` -> ``"4 nm"``, ``"1 nm"`` -> ``"nm"``,
    ``""`` -> ``"1"`` (unitless), ``None`` stays None (unknown). ``[4, "nm"]`` is accepted too."""
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], str):
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


def _bound_list(value: Any, field_name: str) -> tuple[int, ...]:
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

    @classmethod
    def from_json(cls, value: Any, driver: Driver, field_name: str = "schema") -> Schema:
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
                origin = _bound_list(domain["inclusive_min"], f"{d}.inclusive_min")
                if any(origin):
                    raise MetadataError(
                        f"{d}.inclusive_min: zarr arrays have a zero origin, got {list(origin)}"
                    )
                ranks.append((f"{d}.inclusive_min", len(origin)))
            candidates = []
            if "shape" in domain:
                candidates.append(("shape", _bound_list(domain["shape"], f"{d}.shape")))
            if "exclusive_max" in domain:
                candidates.append(
                    ("exclusive_max", _bound_list(domain["exclusive_max"], f"{d}.exclusive_max"))
                )
            if "inclusive_max" in domain:
                incl = _bound_list(domain["inclusive_max"], f"{d}.inclusive_max")
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
        _check_ranks(ranks)
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


def _check_ranks(ranks: list[tuple[str, int]]) -> None:
    for name, rank in ranks[1:]:
        if rank != ranks[0][1]:
            raise MetadataError(f"{name}: implies rank {rank}, but {ranks[0][0]} implies rank {ranks[0][1]}")


# -- metadata constraints --------------------------------------------------------------------------


def _check_v3_metadata(doc: dict[str, Any]) -> dict[str, Any]:
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
    _check_ranks(ranks)
    return out


def parse_codec_chain(value: Any, field_name: str) -> list[dict[str, Any]]:
    """A (possibly partial) codec chain: strings or ``{"name", "configuration"}`` objects."""
    if not isinstance(value, list):
        raise MetadataError(f"{field_name}: expected a list of codecs, got {value!r}")
    return [normalize_codec_json(c, f"{field_name}[{i}]") for i, c in enumerate(value)]


def _check_v2_metadata(doc: dict[str, Any]) -> dict[str, Any]:
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
        data_type, endian = parse_v2_dtype(doc["dtype"], f"{f}.dtype")
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
    _check_ranks(ranks)
    return out


# -- the spec --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorStoreSpec:
    """A validated zarr3/zarr2 TensorStore spec.

    ``kvstore`` already includes the spec's ``path``. ``metadata`` holds the normalised metadata
    constraints (zarr.json-like for zarr3, .zarray-like for zarr2), every member optional.
    """

    driver: Driver
    kvstore: KvStoreSpec
    open: bool = True
    create: bool = False
    delete_existing: bool = False
    assume_metadata: bool = False
    assume_cached_metadata: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    schema: Schema = field(default_factory=Schema)
    field: str | None = None
    fill_missing_data_reads: bool = True
    store_data_equal_to_fill_value: bool = False
    read_only: bool = False

    @property
    def zarr_format(self) -> int:
        return 3 if self.driver == "zarr3" else 2

    @classmethod
    def from_json(cls, spec: Any, *, mode: str | None = None, **options: Any) -> TensorStoreSpec:
        """Parse ``spec``; ``mode`` (zarr-python's) and ``options`` (spec members or the keyword
        options of ``tensorstore.open``: shape, dtype, fill_value, ...) are merged in first."""
        doc = merge_options(expect_dict(spec, "spec"), options)
        doc = apply_mode(doc, mode)
        unknown = set(doc) - _SPEC_MEMBERS - IGNORED_MEMBERS
        if unknown:
            raise MetadataError(f"{sorted(unknown)[0]}: unknown TensorStore spec member")
        raw_driver = doc.get("driver")
        if raw_driver not in DRIVERS:
            raise MetadataError(f"driver: expected one of {sorted(DRIVERS)}, got {raw_driver!r}")
        driver = DRIVERS[raw_driver]
        if "kvstore" not in doc:
            raise MetadataError("kvstore: required member is missing")
        path = doc.get("path", "")
        if not isinstance(path, str):
            raise MetadataError(f"path: expected a string, got {path!r}")
        kvstore = KvStoreSpec.from_json(doc["kvstore"]).joined(path)
        flags = parse_open_flags(doc)

        schema = Schema.from_json(doc.get("schema"), driver)
        top_dtype = doc.get("dtype")
        if top_dtype is not None:
            top_dtype = parse_dtype_name(top_dtype)
            if schema.dtype is not None and schema.dtype != top_dtype:
                raise MetadataError(f"dtype: {top_dtype!r} contradicts schema.dtype {schema.dtype!r}")
            schema = _replace(schema, dtype=top_dtype)
        if doc.get("rank") is not None:
            rank = expect_int(doc["rank"], "rank", 0)
            if schema.rank is not None and schema.rank != rank:
                raise MetadataError(f"rank: {rank} contradicts the schema's rank {schema.rank}")
            schema = _replace(schema, rank=rank)
        if "transform" in doc:
            schema = _apply_identity_transform(doc["transform"], schema)

        metadata = expect_dict(doc.get("metadata"), "metadata")
        if driver == "zarr3":
            for key in ("field", "key_encoding", "metadata_key"):
                if doc.get(key) is not None:
                    raise MetadataError(f"{key}: only the zarr2 driver has this member")
            metadata = _check_v3_metadata(metadata)
        else:
            metadata = _check_v2_metadata(metadata)
            if doc.get("metadata_key", ".zarray") != ".zarray":
                raise MetadataError(f"metadata_key: only '.zarray' is supported, got {doc['metadata_key']!r}")
            if doc.get("key_encoding") is not None:
                sep = expect_str(doc["key_encoding"], "key_encoding", (".", "/"))
                if metadata.get("dimension_separator", sep) != sep:
                    raise MetadataError(
                        f"key_encoding: {sep!r} contradicts metadata.dimension_separator "
                        f"{metadata['dimension_separator']!r}"
                    )
                metadata["dimension_separator"] = sep
        field_name = doc.get("field")
        if field_name is not None and not isinstance(field_name, str):
            raise MetadataError(f"field: expected a string or null, got {field_name!r}")
        return cls(
            driver=driver,
            kvstore=kvstore,
            metadata=metadata,
            schema=schema,
            field=field_name,
            fill_missing_data_reads=_expect_bool(
                doc.get("fill_missing_data_reads", True), "fill_missing_data_reads"
            ),
            store_data_equal_to_fill_value=_expect_bool(
                doc.get("store_data_equal_to_fill_value", False), "store_data_equal_to_fill_value"
            ),
            read_only=mode == "r",
            **flags,
        )


def _replace(schema: Schema, **changes: Any) -> Schema:
    from dataclasses import replace

    return replace(schema, **changes)


def parse_open_flags(doc: dict[str, Any]) -> dict[str, bool]:
    """TensorStore's open-mode rules: ``open`` defaults to true when neither ``open`` nor
    ``create`` is given; ``delete_existing`` requires ``create`` and not ``open``;
    ``assume_metadata``/``assume_cached_metadata`` require ``open`` and not ``delete_existing``."""
    given = {k: _expect_bool(doc[k], k) for k in _OPEN_FLAGS if k in doc}
    flags = {k: given.get(k, False) for k in _OPEN_FLAGS}
    if "open" not in given and "create" not in given:
        flags["open"] = True
    if not flags["open"] and not flags["create"]:
        raise MetadataError("open: at least one of open and create must be true")
    if flags["delete_existing"] and not flags["create"]:
        raise MetadataError("delete_existing: requires create=true")
    if flags["delete_existing"] and flags["open"]:
        raise MetadataError("delete_existing: requires open=false")
    for name in ("assume_metadata", "assume_cached_metadata"):
        if flags[name] and not flags["open"]:
            raise MetadataError(f"{name}: requires open=true")
    return flags


def apply_mode(doc: dict[str, Any], mode: str | None) -> dict[str, Any]:
    """Merge a zarr-python ``mode`` into the spec's open flags; a contradiction raises."""
    if mode is None:
        return doc
    if mode not in MODE_FLAGS:
        raise ValueError(f"mode: expected one of {list(MODE_FLAGS)}, got {mode!r}")
    out = dict(doc)
    for name, value in MODE_FLAGS[mode].items():
        if name in doc and doc[name] != value:
            raise MetadataError(
                f"{name}: the spec gives {_json(doc[name])}, but mode={mode!r} means {_json(value)}"
            )
        out[name] = value
    return out


def merge_options(doc: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Merge keyword options into a spec, as ``tensorstore.open(spec, **options)`` does.

    Spec members (``create=True``, ``metadata=...``) are set at the top level; ``shape``,
    ``fill_value``, ``dimension_units``, ``chunk_layout`` and ``codec`` go to the schema;
    ``path`` is appended to the spec's path. A value that contradicts the spec raises.
    """
    out = dict(doc)
    schema = dict(expect_dict(out.get("schema"), "schema"))
    for name, value in options.items():
        if value is None:
            continue
        if name == "path":
            out["path"] = join_path(out.get("path", ""), value) if isinstance(value, str) else value
        elif name == "shape":
            domain = dict(expect_dict(schema.get("domain"), "schema.domain"))
            shape = [int(v) for v in value]
            if "shape" in domain and _bound_list(domain["shape"], "schema.domain.shape") != tuple(shape):
                raise MetadataError(f"shape: {shape} contradicts schema.domain.shape {domain['shape']}")
            domain["shape"] = shape
            schema["domain"] = domain
        elif name in _SCHEMA_KWARGS:
            key = _SCHEMA_KWARGS[name]
            if hasattr(value, "to_json"):
                value = value.to_json()
            if key in schema and schema[key] != value:
                raise MetadataError(f"{name}: {value!r} contradicts schema.{key} {schema[key]!r}")
            schema[key] = value
        elif name in _SPEC_MEMBERS:
            if name == "dtype" and not isinstance(value, str):
                value = _dtype_name(value)
            if name in out and out[name] != value:
                raise MetadataError(f"{name}: {_json(value)} contradicts the spec's {_json(out[name])}")
            out[name] = value
        else:
            raise TypeError(f"open_spec: unexpected keyword argument {name!r}")
    if schema:
        out["schema"] = schema
    return out


def _dtype_name(value: Any) -> str:
    """A NumPy dtype (or TensorStore dtype object) as a TensorStore data type name."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and name in CORE_DATA_TYPES:
        return name
    return DataType.from_numpy(value).name


def _apply_identity_transform(value: Any, schema: Schema) -> Schema:
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
        origin = _bound_list(doc["input_inclusive_min"], "transform.input_inclusive_min")
        if any(origin):
            raise MetadataError(
                "transform.input_inclusive_min: index transforms are not supported (non-zero origin)"
            )
        ranks.append(("transform.input_inclusive_min", len(origin)))
    for key in ("input_exclusive_max", "input_shape"):
        if key in doc:
            bounds = doc[key]
            ranks.append((f"transform.{key}", len(_bound_list(bounds, f"transform.{key}"))))
            if any(not isinstance(b, list) for b in bounds):
                # An explicit bound restricts the view: only the identity on a whole array is allowed.
                raise MetadataError(f"transform.{key}: index transforms are not supported (explicit bounds)")
    if "output" in doc:
        output = doc["output"]
        identity = isinstance(output, list) and all(
            isinstance(o, dict) and o == {"input_dimension": i} for i, o in enumerate(output)
        )
        if not identity:
            raise MetadataError("transform.output: index transforms are not supported (not the identity)")
        ranks.append(("transform.output", len(output)))
    if doc.get("input_labels") is not None and any(doc["input_labels"]):
        raise MetadataError("transform.input_labels: index transforms are not supported (labels)")
    _check_ranks(ranks)
    return _replace(schema, rank=ranks[0][1]) if ranks and schema.rank is None else schema


# -- constraints against stored metadata -----------------------------------------------------------


def _mismatch(name: str, expected: Any, stored: Any) -> MetadataError:
    return MetadataError(f"{name}: expected {_json(expected)}, stored {_json(stored)}")


def json_subset(constraint: Any, stored: Any) -> bool:
    """Whether every member given in ``constraint`` equals the one in ``stored`` (recursively)."""
    if isinstance(constraint, dict):
        return isinstance(stored, dict) and all(
            k in stored and json_subset(v, stored[k]) for k, v in constraint.items()
        )
    if isinstance(constraint, list):
        return (
            isinstance(stored, list)
            and len(constraint) == len(stored)
            and all(json_subset(c, s) for c, s in zip(constraint, stored, strict=True))
        )
    return bool(constraint == stored)


_ARRAY_TO_BYTES = ("bytes", "sharding_indexed")


def codecs_match(constraint: list[dict[str, Any]], stored: list[dict[str, Any]]) -> bool:
    """Whether a partial codec chain matches a stored one (a chain without an array->bytes
    codec leaves that codec unconstrained, as in TensorStore)."""
    if not any(c["name"] in _ARRAY_TO_BYTES for c in constraint):
        stored = [c for c in stored if c["name"] not in _ARRAY_TO_BYTES]
    if len(constraint) != len(stored):
        return False
    for c, s in zip(constraint, stored, strict=True):
        if c["name"] != s["name"]:
            return False
        config = dict(c.get("configuration") or {})
        stored_config = dict(s.get("configuration") or {})
        if c["name"] == "sharding_indexed" and "codecs" in config:
            inner = parse_codec_chain(config.pop("codecs"), "codecs")
            if not codecs_match(inner, parse_codec_chain(stored_config.get("codecs", []), "codecs")):
                return False
        if not json_subset(config, stored_config):
            return False
    return True


def check_metadata_constraints(spec: TensorStoreSpec, stored: dict[str, Any]) -> None:
    """Raise MetadataError naming the first ``metadata`` member that ``stored`` (the full
    zarr.json or .zarray document, attributes included for v3) does not satisfy."""
    for key, expected in spec.metadata.items():
        name = f"metadata.{key}"
        actual = stored.get(key)
        if spec.driver == "zarr3":
            if key == "codecs":
                if not codecs_match(expected, parse_codec_chain(actual or [], "codecs")):
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
            if key == "fill_value" and "dtype" in stored:
                data_type, _ = parse_v2_dtype(stored["dtype"])
                expected = _fill_to_v2(_fill_from_v2(expected, data_type, name), data_type)
                actual = _fill_to_v2(_fill_from_v2(actual, data_type), data_type)
            if key == "compressor" and expected is not None and actual is not None:
                if not json_subset(expected, actual):
                    raise _mismatch(name, expected, actual)
            elif key == "dtype":
                if parse_v2_dtype(expected) != parse_v2_dtype(actual):
                    raise _mismatch(name, expected, actual)
            elif key == "zarr_format":
                continue
            elif actual != expected:
                raise _mismatch(name, expected, actual)


@dataclass(frozen=True)
class StoredSchema:
    """What an opened array offers for ``schema`` checks, in TensorStore's terms."""

    dtype: str
    shape: tuple[int, ...]
    labels: tuple[str, ...]
    fill_value: Any
    dimension_units: tuple[str | None, ...] | None
    write_chunk: tuple[int, ...]
    read_chunk: tuple[int, ...]
    inner_order: tuple[int, ...]
    codec: dict[str, Any]


def check_schema_constraints(schema: Schema, stored: StoredSchema) -> None:
    """Raise MetadataError naming the first schema constraint that the stored array breaks."""
    rank = len(stored.shape)
    if schema.rank is not None and schema.rank != rank:
        raise _mismatch("rank", schema.rank, rank)
    if schema.dtype is not None and schema.dtype != stored.dtype:
        raise _mismatch("dtype", schema.dtype, stored.dtype)
    if schema.shape is not None and schema.shape != stored.shape:
        raise _mismatch("schema.domain.shape", list(schema.shape), list(stored.shape))
    if schema.labels is not None and schema.labels != stored.labels:
        raise _mismatch("schema.domain.labels", list(schema.labels), list(stored.labels))
    if schema.fill_value is not None:
        data_type = DataType.from_json(stored.dtype)
        want = data_type.fill_value_to_json(data_type.fill_value_from_python(schema.fill_value))
        if want != stored.fill_value:
            raise _mismatch("schema.fill_value", schema.fill_value, stored.fill_value)
    if schema.dimension_units is not None:
        have = stored.dimension_units or (None,) * rank
        if any(w is not None and w != h for w, h in zip(schema.dimension_units, have, strict=True)):
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
            parse_codec_chain(codec.pop("codecs"), "schema.codec.codecs"), stored.codec.get("codecs", [])
        ):
            raise _mismatch("schema.codec.codecs", schema.codec["codecs"], stored.codec.get("codecs"))
        for key, value in codec.items():
            if not json_subset(value, stored.codec.get(key)):
                raise _mismatch(f"schema.codec.{key}", value, stored.codec.get(key))
