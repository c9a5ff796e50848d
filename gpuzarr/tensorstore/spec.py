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
``mode`` and keyword options into a spec. The kvstore, the schema and the checks against stored
metadata live in :mod:`~gpuzarr.tensorstore.kvstore`, :mod:`~gpuzarr.tensorstore.schema` and
:mod:`~gpuzarr.tensorstore.constraints`; reading and writing in :mod:`gpuzarr.tensorstore.open`.

Not supported: index ``transform``s other than the identity on the whole array, kvstore
drivers other than ``file``, ``memory``, ``zip``, ``s3``, ``gcs`` and ``http`` (see
:mod:`.kvstore`), and a non-default zarr2 ``metadata_key``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import unquote

from ..errors import MetadataError
from ..hierarchy import parse_mode
from ..metadata.dtypes import CORE_DATA_TYPES, EXTENSION_DATA_TYPES, DataType
from ..metadata.json_util import expect_dict, expect_int, expect_str
from ..store.shown import shown_url
from .constraints import check_v2_metadata, check_v3_metadata, json_text
from .kvstore import KvStoreSpec, join_path
from .schema import Driver, Schema, apply_identity_transform, bound_list, parse_dtype_name

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..metadata.json_types import KvStoreJSON, TensorStoreSpecJSON

__all__ = ["TensorStoreSpec", "apply_mode", "array_spec_json", "merge_options", "parse_open_flags"]

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
#: The context resources whose references and specs are checked as TensorStore checks them
#: (resource kind -> the members of its spec and the check of each value).
_RESOURCE_MEMBERS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "cache_pool": {"total_bytes_limit": lambda v: _is_count(v, 0)},
    "metadata_cache_pool": {"total_bytes_limit": lambda v: _is_count(v, 0)},
    "data_copy_concurrency": {"limit": lambda v: v == "shared" or _is_count(v, 1)},
    "file_io_concurrency": {"limit": lambda v: v == "shared" or _is_count(v, 1)},
}


def _is_count(value: Any, least: int) -> bool:
    """A whole number of at least ``least``: an int, or a float without a fraction (``1e9``,
    as JSON written from Python gives it), as TensorStore takes it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _check_resource(kind: str, value: Any, field: str) -> None:
    """A context resource of ``kind``: a reference (``"cache_pool"``, ``"cache_pool#name"``) or
    a spec object, refused where TensorStore refuses it (it was accepted and ignored)."""
    if isinstance(value, str):
        if value != kind and not value.startswith(kind + "#"):
            raise MetadataError(
                f"{field}: a reference to a {kind!r} resource names it ({kind!r} or '{kind}#id'), got {value!r}"
            )
        return
    members = _RESOURCE_MEMBERS[kind]
    if value is None:  # TensorStore's default resource of the kind
        return
    if not isinstance(value, dict):
        raise MetadataError(f"{field}: expected a {kind!r} resource (an object or a reference), got {value!r}")
    for name, item in value.items():
        check = members.get(name)
        if check is None:
            raise MetadataError(f"{field}.{name}: unknown member of a {kind!r} resource")
        if not check(item):
            raise MetadataError(f"{field}.{name}: not a valid value, got {item!r}")


def check_ignored_members(doc: Mapping[str, Any]) -> None:
    """Refuse the context and cache members TensorStore refuses, though gpuzarr uses none of
    them: a spec gpuzarr opens is one TensorStore opens."""
    for name in ("recheck_cached_metadata", "recheck_cached_data", "recheck_cached"):
        if name in doc:
            value = doc[name]
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (isinstance(value, bool) or value == "open" or number):
                raise MetadataError(f"{name}: expected true, false, \"open\" or a time in seconds, got {value!r}")
    for kind in _RESOURCE_MEMBERS:
        if kind in doc:
            _check_resource(kind, doc[kind], kind)
    context = doc.get("context")
    if context is None:
        return
    if not isinstance(context, dict):
        raise MetadataError(f"context: expected an object, got {context!r}")
    for name, value in context.items():
        kind = name.split("#", 1)[0]
        if kind in _RESOURCE_MEMBERS and value is not None and not isinstance(value, str):
            _check_resource(kind, value, f"context.{name}")


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

#: Keyword options of ``open_spec`` that are schema constraints, as in ``tensorstore.open``.
_SCHEMA_KWARGS = {
    "fill_value": "fill_value",
    "dimension_units": "dimension_units",
    "chunk_layout": "chunk_layout",
    "codec": "codec",
}


#: the driver steps a TensorStore URL pipeline may end in, and the drivers they name
_URL_DRIVER_SCHEMES = {"zarr3": "zarr3", "zarr2": "zarr"}


def spec_of_url(value: str) -> dict[str, Any] | None:
    """The JSON spec of a TensorStore URL whose pipeline ends in a driver step
    (``"file:///data/a.zarr|zarr3:"``, ``"gs://b/g.zarr|zarr3:raw/a"``, ``"...|zarr2:"``), as
    ``tensorstore.open(url)`` reads it: the kvstore's URL, then the driver, with the path after
    its colon (percent-decoded) inside the kvstore; None for a string without such a step."""
    kvstore, bar, step = value.rpartition("|")
    scheme, colon, path = step.partition(":")
    if not bar or scheme not in _URL_DRIVER_SCHEMES or (path and not colon) or "://" not in kvstore:
        return None  # no driver step, or a local path that holds a "|" (a directory "a|zarr3")
    if "?" in path or "#" in path or path.startswith("/"):
        raise MetadataError(
            f"spec: the {scheme!r} step of {shown_url(value)!r} takes a relative path without a query or fragment"
        )
    spec: dict[str, Any] = {"driver": _URL_DRIVER_SCHEMES[scheme], "kvstore": kvstore}
    if unquote(path).strip("/"):
        spec["path"] = unquote(path)
    return spec


def _expect_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise MetadataError(f"{name}: expected true or false, got {value!r}")
    return value


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
        """3 for the zarr3 driver, 2 for zarr2."""
        return 3 if self.driver == "zarr3" else 2

    @classmethod
    def from_json(cls, spec: Any, *, mode: str | None = None, **options: Any) -> TensorStoreSpec:  # noqa: C901 - one check per JSON member
        """Parse ``spec``; ``mode`` (zarr-python's) and ``options`` (spec members or the keyword
        options of ``tensorstore.open``: shape, dtype, fill_value, ...) are merged in first."""
        by_access = _read_only_by_access(options.pop("read", None), options.pop("write", None), mode)
        read_only = mode == "r" or by_access
        if isinstance(spec, str):  # tensorstore.open("file:///a.zarr|zarr3:")
            url = spec
            spec = spec_of_url(url)
            if spec is None:
                raise MetadataError(
                    f"spec: {shown_url(url)!r} is no TensorStore URL of an array: it ends in '|zarr3:' or '|zarr2:'"
                )
        doc = merge_options(expect_dict(spec, "spec"), options)
        doc = apply_mode(doc, mode)
        unknown = set(doc) - _SPEC_MEMBERS - IGNORED_MEMBERS
        if unknown:
            raise MetadataError(f"{sorted(unknown)[0]}: unknown TensorStore spec member")
        check_ignored_members(doc)
        raw_driver = doc.get("driver")
        if raw_driver not in DRIVERS:
            raise MetadataError(f"driver: expected one of {sorted(DRIVERS)}, got {raw_driver!r}")
        driver = DRIVERS[raw_driver]
        if "kvstore" not in doc:
            raise MetadataError("kvstore: required member is missing")
        path = doc.get("path", "")
        if not isinstance(path, str):
            raise MetadataError(f"path: expected a string, got {path!r}")
        kvstore = KvStoreSpec.from_json(doc["kvstore"], completed=True).joined(path)
        if kvstore.driver == "file" and not kvstore.path:
            raise MetadataError("kvstore.path: a file kvstore needs a path (its own, or the spec's path)")
        flags = parse_open_flags(doc)
        if read_only and (flags.get("create") or flags.get("delete_existing")):
            raise MetadataError("create: an array opened read only (read=True without write) is never created")

        schema = Schema.from_json(doc.get("schema"), driver)
        top_dtype = doc.get("dtype")
        if top_dtype is not None:
            top_dtype = parse_dtype_name(top_dtype)
            if schema.dtype is not None and schema.dtype != top_dtype:
                raise MetadataError(f"dtype: {top_dtype!r} contradicts schema.dtype {schema.dtype!r}")
            schema = replace(schema, dtype=top_dtype)
        if doc.get("rank") is not None:
            rank = expect_int(doc["rank"], "rank", 0)
            if schema.rank is not None and schema.rank != rank:
                raise MetadataError(f"rank: {rank} contradicts the schema's rank {schema.rank}")
            schema = replace(schema, rank=rank)
        if "transform" in doc:
            schema = apply_identity_transform(doc["transform"], schema)

        metadata = expect_dict(doc.get("metadata"), "metadata")
        if driver == "zarr3":
            for key in ("field", "key_encoding", "metadata_key"):
                if doc.get(key) is not None:
                    raise MetadataError(f"{key}: only the zarr2 driver has this member")
            metadata = check_v3_metadata(metadata)
        else:
            metadata = check_v2_metadata(metadata)
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
            read_only=read_only,
            **flags,
        )


def _read_only_by_access(read: Any, write: Any, mode: str | None) -> bool:
    """``tensorstore.open``'s ``read=``/``write=``: read only where ``read`` is given true and
    ``write`` is not (neither given, or both false: read and write). A ``mode`` of zarr-python's
    that contradicts them raises."""
    for name, value in (("read", read), ("write", write)):
        if value is not None and not isinstance(value, bool):
            raise MetadataError(f"{name}: expected true or false, got {value!r}")
    read_only = bool(read) and not write
    if write and mode == "r":
        raise MetadataError("write: True contradicts mode='r'")
    if read_only and mode not in (None, "r"):
        raise MetadataError(f"read: True without write opens read only, which contradicts mode={mode!r}")
    return read_only


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
    """Merge a zarr-python ``mode`` (:data:`gpuzarr.hierarchy.MODES`) into the spec's open
    flags; a contradiction raises."""
    if mode is None:
        return doc
    out = dict(doc)
    for name, value in parse_mode(mode).flags().items():
        if name in doc and doc[name] != value:
            raise MetadataError(
                f"{name}: the spec gives {json_text(doc[name])}, but mode={mode!r} means {json_text(value)}"
            )
        out[name] = value
    return out


def merge_options(doc: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Merge keyword options into a spec, as ``tensorstore.open(spec, **options)`` does.

    Spec members (``create=True``, ``metadata=...``) are set at the top level; ``shape``,
    ``domain``, ``fill_value``, ``dimension_units``, ``chunk_layout`` and ``codec`` go to the schema;
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
            _merge_shape(schema, value)
        elif name == "domain":
            _merge_domain(schema, value)
        elif name == "schema":
            _merge_schema(schema, value)
        elif name in _SCHEMA_KWARGS:
            _merge_schema_option(schema, name, value)
        elif name in IGNORED_MEMBERS:
            given = _ignored_member(name, value)
            if name in out and out[name] != given:
                # Both are checked (the spec's stays): an option does not hide what the spec holds.
                check_ignored_members({name: given})
            else:
                out[name] = given
        elif name in _SPEC_MEMBERS:
            if name == "dtype" and not isinstance(value, str):
                value = _dtype_name(value)
            if name in out and out[name] != value:
                raise MetadataError(f"{name}: {json_text(value)} contradicts the spec's {json_text(out[name])}")
            out[name] = value
        else:
            raise TypeError(f"open_spec: unexpected keyword argument {name!r}")
    if schema:
        out["schema"] = schema
    return out


def _merge_schema_option(schema: dict[str, Any], name: str, value: Any) -> None:
    """``tensorstore.open(spec, fill_value=..., codec=..., chunk_layout=..., dimension_units=...)``."""
    key = _SCHEMA_KWARGS[name]
    if hasattr(value, "to_json"):
        value = value.to_json()
    if key in schema and schema[key] != value:
        raise MetadataError(f"{name}: {value!r} contradicts schema.{key} {schema[key]!r}")
    schema[key] = value


def _merged_json(have: dict[str, Any], given: dict[str, Any], field_name: str) -> dict[str, Any]:
    """Two JSON objects with the members of both, nested objects merged the same way (as
    TensorStore merges chunk layouts); a member both give differently raises, naming it."""
    out = dict(have)
    for key, value in given.items():
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merged_json(out[key], value, f"{field_name}.{key}")
        elif key in out and out[key] != value:
            raise MetadataError(f"schema: {field_name}.{key} {json_text(value)} contradicts {json_text(out[key])}")
        else:
            out[key] = value
    return out


def _ignored_member(name: str, value: Any) -> Any:
    """``tensorstore.open(spec, context=ts.Context(...), recheck_cached_data=False)``: kept as
    the spec's members, which only TensorStore uses (and gpuzarr checks), in their JSON form."""
    if name == "context" and hasattr(value, "spec"):
        value = value.spec
    return value.to_json() if hasattr(value, "to_json") else value


def _merge_shape(schema: dict[str, Any], value: Any) -> None:
    """``tensorstore.open(spec, shape=[...])``: the schema's domain shape."""
    domain = dict(expect_dict(schema.get("domain"), "schema.domain"))
    shape = [int(v) for v in value]
    if "shape" in domain and bound_list(domain["shape"], "schema.domain.shape") != tuple(shape):
        raise MetadataError(f"shape: {shape} contradicts schema.domain.shape {domain['shape']}")
    domain["shape"] = shape
    schema["domain"] = domain


def _merge_domain(schema: dict[str, Any], value: Any) -> None:
    """``tensorstore.open(spec, domain=ts.IndexDomain(...))`` (or its JSON): its members join
    the schema's domain, which checks them (a zero origin; labels, shape and bounds that agree)."""
    given = expect_dict(value.to_json() if hasattr(value, "to_json") else value, "domain")
    domain = dict(expect_dict(schema.get("domain"), "schema.domain"))
    for key, member in given.items():
        if key not in domain:
            domain[key] = member
            continue
        have = domain[key]
        if key == "labels" and isinstance(member, list) and isinstance(have, list) and len(member) == len(have):
            # An empty label leaves the dimension unlabelled: the other side's names it.
            if all(not a or not b or a == b for a, b in zip(have, member, strict=True)):
                domain[key] = [a or b for a, b in zip(have, member, strict=True)]
                continue
        elif key in _DOMAIN_BOUNDS:
            # [[4], 5] (an implicit, resizable bound) and [4, 5] are the same bounds.
            if bound_list(member, f"domain.{key}") == bound_list(have, f"schema.domain.{key}"):
                continue
        elif member == have:
            continue
        raise MetadataError(f"domain: {key} {json_text(member)} contradicts schema.domain.{key} {json_text(have)}")
    schema["domain"] = domain


#: members of a domain that hold bounds, implicit ([n]) or not
_DOMAIN_BOUNDS = frozenset({"shape", "inclusive_min", "exclusive_max", "inclusive_max"})


def _merge_schema(schema: dict[str, Any], value: Any) -> None:
    """``tensorstore.open(spec, schema=ts.Schema(...))``: its members join the spec's schema."""
    given = expect_dict(value.to_json() if hasattr(value, "to_json") else value, "schema")
    for key, member in given.items():
        if key == "domain":
            _merge_domain(schema, member)
            continue
        if key == "chunk_layout" and isinstance(schema.get(key), dict) and isinstance(member, dict):
            schema[key] = _merged_json(schema[key], member, f"schema.{key}")
            continue
        if key in schema and schema[key] != member:
            raise MetadataError(f"schema: {key} {member!r} contradicts schema.{key} {schema[key]!r}")
        schema[key] = member


def _dtype_name(value: Any) -> str:
    """A NumPy dtype (or TensorStore dtype object) as a TensorStore data type name."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and (name in CORE_DATA_TYPES or name in EXTENSION_DATA_TYPES):
        return name  # also TensorStore's own dtype objects (ts.bfloat16), which NumPy does not take
    return DataType.from_numpy(value).name


def array_spec_json(
    kvstore: Mapping[str, Any] | str, path: str, metadata_json: Mapping[str, Any], options: Mapping[str, bool]
) -> TensorStoreSpecJSON:
    """The TensorStore spec that reopens an array (see :meth:`gpuzarr.Array.spec`).

    Parameters
    ----------
    kvstore
        The store's kvstore (:meth:`gpuzarr.Store.kvstore_json`): a JSON object, whose ``path``
        is extended by ``path``, or a URL (``memory://name``), kept with ``path`` as the spec's
        ``path`` member.
    path
        The array's path inside the store ("" for its root).
    metadata_json
        The array's metadata document; its attributes are left out.
    options
        ``fill_missing_data_reads`` and ``store_data_equal_to_fill_value``, written when they
        differ from TensorStore's defaults.

    Returns
    -------
    dict
        ``{"driver", "kvstore", ["path"], "metadata", ...}``.
    """
    path = path.strip("/")
    kv: KvStoreJSON | str
    spec_path = ""
    if isinstance(kvstore, str):
        kv, spec_path = kvstore, path
    else:
        # A store's own kvstore object (``Store.kvstore_json``, which stores written outside
        # gpuzarr type as a plain dict): taken as the kvstore it describes.
        kv = cast("KvStoreJSON", dict(kvstore))
        if path:
            base = str(kv.get("path", "")).rstrip("/")
            kv["path"] = (base + "/" + path if base or kv.get("driver") == "file" else path) + "/"
    metadata = dict(metadata_json)
    metadata.pop("attributes", None)
    driver: Literal["zarr3", "zarr2"] = "zarr3" if metadata.get("zarr_format") == 3 else "zarr2"
    spec: TensorStoreSpecJSON = (
        {"driver": driver, "kvstore": kv, "path": spec_path, "metadata": metadata}
        if spec_path
        else {"driver": driver, "kvstore": kv, "metadata": metadata}
    )
    if not options.get("fill_missing_data_reads", True):
        spec["fill_missing_data_reads"] = False
    if options.get("store_data_equal_to_fill_value", False):
        spec["store_data_equal_to_fill_value"] = True
    return spec
