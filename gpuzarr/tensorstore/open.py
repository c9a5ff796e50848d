"""Opening and creating arrays from TensorStore-style JSON specs, and ``Array.spec()``.

``open_spec`` follows TensorStore's ``zarr3``/``zarr2`` drivers:

* open an existing array, checking the spec's ``metadata`` and ``schema``/``dtype``/``rank``
  constraints against what is stored (a mismatch raises MetadataError naming the field);
* create one: the metadata is built from the ``metadata`` constraints and the schema (shape from
  ``metadata.shape`` or ``schema.domain``; chunk shapes from the metadata or, failing that,
  chosen from ``schema.chunk_layout`` as TensorStore chooses them; a ``sharding_indexed`` codec
  when the read and write chunks differ; a ``transpose`` codec for ``inner_order``; TensorStore's
  default codecs: ``bytes`` alone for zarr3, blosc for zarr2);
* ``delete_existing``, ``open`` + ``create``, ``assume_metadata`` (metadata taken from the spec,
  never read nor written; resizing then raises) and ``assume_cached_metadata``;
* ``field`` opens one field of a zarr2 structured array (:class:`FieldArray`);
* ``fill_missing_data_reads`` and ``store_data_equal_to_fill_value``.

The parsing and the rules live in :mod:`gpuzarr.tensorstore.spec`; this module does the I/O.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..array import Array
from ..errors import ArrayNotFoundError, ContainsNodeError, MetadataError, ReadOnlyError
from ..hierarchy import array_metadata, node_exists, node_prefix, read_node
from ..spec.dtypes import CORE_DATA_TYPES, DataType
from ..spec.v2 import ArrayMetadataV2
from ..spec.v3 import ArrayMetadata
from ..store import LocalStore, MemoryStore, make_store
from ..store.base import Store
from .chunk_layout import ChunkLayoutConstraints
from .chunk_shapes import choose_chunk_shapes
from .constraints import StoredSchema, check_metadata_constraints, check_schema_constraints, parse_codec_chain
from .kvstore import KvStoreSpec, join_path
from .schema import normalize_unit
from .spec import TensorStoreSpec

#: TensorStore's default zarr2 compressor.
DEFAULT_V2_COMPRESSOR: dict[str, Any] = {
    "id": "blosc",
    "cname": "lz4",
    "clevel": 5,
    "shuffle": -1,
    "blocksize": 0,
}
#: TensorStore's default shard index codecs.
DEFAULT_INDEX_CODECS: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c", "configuration": {}},
]
_ARRAY_TO_BYTES = ("bytes", "sharding_indexed")


def is_tensorstore_spec(value: Any) -> bool:
    """Whether ``value`` is a TensorStore spec (a dict whose driver is zarr3, zarr2 or zarr)."""
    return isinstance(value, dict) and value.get("driver") in ("zarr3", "zarr2", "zarr")


def open_spec(spec: dict[str, Any], *, mode: str | None = None, device: str = "auto", **kwargs: Any) -> Any:
    """Open or create the array a TensorStore-style JSON spec describes.

    Parameters
    ----------
    spec
        ``{"driver": "zarr3" | "zarr2" | "zarr", "kvstore": {...} | "file://..." , ...}``.
        ``kvstore`` may also be a gpuzarr Store object.
    mode
        zarr-python's mode ("r", "r+", "a", "w", "w-"), merged with the spec's ``open``,
        ``create`` and ``delete_existing``; a contradiction raises MetadataError.
    device
        "auto", "gpu" or "cpu".
    **kwargs
        Spec members (``create=True``, ``metadata={...}``) or ``tensorstore.open``'s options
        (``shape``, ``dtype``, ``fill_value``, ``chunk_layout``, ``dimension_units``, ``codec``).

    Returns
    -------
    Array, or FieldArray when ``field`` is given.
    """
    store_obj: Store | None = None
    if isinstance(spec, dict) and isinstance(spec.get("kvstore"), Store):
        store_obj = spec["kvstore"]
        spec = {**spec, "kvstore": {"driver": "memory"}}
    parsed = TensorStoreSpec.from_json(spec, mode=mode, **kwargs)
    store, path = _make_store(parsed.kvstore, parsed.read_only, store_obj)
    return open_parsed(parsed, store, path, device)


def _make_store(kvstore: KvStoreSpec, read_only: bool, store_obj: Store | None) -> tuple[Store, str]:
    if store_obj is not None:
        s, _ = make_store(store_obj, read_only=read_only)
        return s, kvstore.path
    if kvstore.url is not None:
        s, base = make_store(kvstore.url, read_only=read_only)
        return s, join_path(base, kvstore.path)
    if kvstore.driver == "file":
        return LocalStore(kvstore.path, read_only=read_only), ""
    return MemoryStore(read_only=read_only), kvstore.path


def open_parsed(spec: TensorStoreSpec, store: Store, path: str, device: str = "auto") -> Any:
    """Open or create the array ``spec`` describes at ``path`` of ``store``."""
    options = {
        "fill_missing_data_reads": spec.fill_missing_data_reads,
        "store_data_equal_to_fill_value": spec.store_data_equal_to_fill_value,
    }
    metadata: ArrayMetadata | ArrayMetadataV2
    if spec.assume_metadata or spec.assume_cached_metadata:
        metadata = build_metadata(spec)
        cls = _AssumedMetadataArray if spec.assume_metadata else Array
        return _select_field(cls(store, path, metadata, device=device, **options), spec)
    exists = spec.open and node_exists(store, path)
    if exists:
        info = read_node(store, path, allow_implicit=False)
        if info is None or info.node_type != "array":
            raise ArrayNotFoundError(f"{path or '/'!r} in {store!r} is a group, not an array")
        if info.zarr_format != spec.zarr_format:
            raise MetadataError(
                f"driver: {spec.driver!r} expects Zarr v{spec.zarr_format}, found a Zarr v{info.zarr_format} "
                f"array at {path or '/'!r}"
            )
        metadata = array_metadata(info, path)
        array = Array(store, path, metadata, device=device, **options)
        check_metadata_constraints(spec, metadata.to_json())
        result = _select_field(array, spec)
        check_schema_constraints(spec.schema, stored_schema(array, spec.field))
        return result
    if not spec.create:
        raise ArrayNotFoundError(f"no Zarr v{spec.zarr_format} array at {path or '/'!r} in {store!r}")
    if store.read_only:
        raise ReadOnlyError(f"cannot create an array in read-only {store!r}")
    if not spec.delete_existing and node_exists(store, path):
        raise ContainsNodeError(
            f"a node already exists at {path or '/'!r} in {store!r} (set delete_existing or open)"
        )
    metadata = build_metadata(spec)
    array = Array(store, path, metadata, device=device, **options)  # resolves codecs before any write
    result = _select_field(array, spec)
    if spec.delete_existing or node_exists(store, path):
        store.erase_prefix(node_prefix(path))
    for key, document in metadata.documents().items():
        store.set(node_prefix(path) + key, document)
    return result


class _AssumedMetadataArray(Array):
    """An array opened with ``assume_metadata``: its metadata is never written."""

    def _write_metadata(self, metadata: Any) -> None:
        raise MetadataError(
            "assume_metadata: the array was opened without its stored metadata; resizing or "
            "changing attributes is not supported"
        )


# -- building metadata for a new array -------------------------------------------------------------


def _pick(name_a: str, a: Any, name_b: str, b: Any, same: Any = None) -> Any:
    """``a`` or ``b``, whichever is given; both given and different raises."""
    if a is not None and b is not None:
        equal = same(a, b) if same is not None else a == b
        if not equal:
            raise MetadataError(f"{name_a}: {a!r} contradicts {name_b} {b!r}")
    return a if a is not None else b


def _with_hard_shape(
    layout: dict[str, Any], member: str, shape: list[int], source: str, extent: tuple[int, ...]
) -> dict[str, Any]:
    """``layout`` with ``layout[member].shape`` set to ``shape`` (a hard constraint from the
    metadata); a contradicting hard shape already in the layout raises."""
    grid = dict(layout.get(member) or {})
    existing = grid.get("shape")
    if existing is not None:
        if len(existing) != len(shape):
            raise MetadataError(
                f"schema.chunk_layout.{member}.shape: expected {len(shape)} entries, got {len(existing)}"
            )
        for e, s, n in zip(existing, shape, extent, strict=True):
            if e not in (None, 0) and (n if e == -1 else e) != s:
                raise MetadataError(
                    f"{source}: {shape} contradicts schema.chunk_layout.{member}.shape {existing}"
                )
    grid["shape"] = list(shape)
    return {**layout, member: grid}


def _fill_codec_defaults(chain: list[dict[str, Any]], itemsize: int) -> list[dict[str, Any]]:
    """Complete partial codecs with TensorStore's defaults (so both write the same zarr.json)."""
    out = []
    for codec in chain:
        config = dict(codec.get("configuration") or {})
        name = codec["name"]
        if name == "bytes" and itemsize > 1:
            config.setdefault("endian", "little")
        elif name == "blosc":
            defaults = {
                "cname": "lz4",
                "clevel": 5,
                "shuffle": "shuffle" if itemsize > 1 else "bitshuffle",
                "typesize": itemsize,
                "blocksize": 0,
            }
            config = {**defaults, **config}
        elif name == "gzip":
            config.setdefault("level", 6)
        elif name == "zstd":
            config = {"level": 3, "checksum": False, **config}
        out.append({**codec, "configuration": config})
    return out


def _insert_transpose(chain: list[dict[str, Any]], order: tuple[int, ...]) -> list[dict[str, Any]]:
    """Put a transpose codec just before the array->bytes codec (unless one is there)."""
    if order == tuple(range(len(order))) or any(c["name"] == "transpose" for c in chain):
        return chain
    at = next(i for i, c in enumerate(chain) if c["name"] in _ARRAY_TO_BYTES)
    return [*chain[:at], {"name": "transpose", "configuration": {"order": list(order)}}, *chain[at:]]


def _with_array_to_bytes(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if any(c["name"] in _ARRAY_TO_BYTES for c in chain):
        return chain
    # As in TensorStore, a chain without an array->bytes codec gets "bytes" after the array->array ones.
    at = sum(1 for c in chain if c["name"] == "transpose")
    return [*chain[:at], {"name": "bytes", "configuration": {}}, *chain[at:]]


def build_metadata(spec: TensorStoreSpec) -> ArrayMetadata | ArrayMetadataV2:
    """The metadata of a new array from the spec's metadata constraints and schema."""
    return _build_v3(spec) if spec.driver == "zarr3" else _build_v2(spec)


def _build_v3(spec: TensorStoreSpec) -> ArrayMetadata:
    md, schema = spec.metadata, spec.schema
    shape = _pick(
        "metadata.shape",
        md.get("shape"),
        "schema.domain.shape",
        list(schema.shape) if schema.shape is not None else None,
    )
    if shape is None:
        raise MetadataError("metadata.shape: required to create an array (or give schema.domain.shape)")
    if schema.rank is not None and schema.rank != len(shape):
        raise MetadataError(f"rank: {schema.rank} contradicts metadata.shape {shape}")
    dtype = _pick("metadata.data_type", md.get("data_type"), "dtype", schema.dtype)
    if dtype is None:
        raise MetadataError("metadata.data_type: required to create an array (or give dtype)")
    data_type = DataType.from_json(dtype)
    fill = _pick(
        "metadata.fill_value",
        md.get("fill_value"),
        "schema.fill_value",
        schema.fill_value,
        same=lambda a, b: (
            data_type.fill_value_to_json(data_type.fill_value_from_python(a))
            == data_type.fill_value_to_json(data_type.fill_value_from_python(b))
        ),
    )
    fill_json = data_type.fill_value_to_json(data_type.fill_value_from_python(fill))
    labels = list(schema.labels) if schema.labels is not None else None
    names = _pick(
        "metadata.dimension_names",
        md.get("dimension_names"),
        "schema.domain.labels",
        labels,
        same=lambda a, b: [x or "" for x in a] == [x or "" for x in b],
    )
    attributes = dict(md.get("attributes") or {})
    if schema.dimension_units is not None:
        units = list(schema.dimension_units)
        stored_units = attributes.get("dimension_units")
        if stored_units is not None and [normalize_unit(u) for u in stored_units] != units:
            raise MetadataError(
                f"schema.dimension_units: {units} contradicts "
                f"metadata.attributes.dimension_units {stored_units}"
            )
        attributes["dimension_units"] = units
    codecs = md.get("codecs")
    if schema.codec is not None and "codecs" in schema.codec:
        codecs = _pick(
            "metadata.codecs",
            codecs,
            "schema.codec.codecs",
            parse_codec_chain(schema.codec["codecs"], "schema.codec.codecs"),
        )

    extent = tuple(shape)
    layout = dict(schema.chunk_layout or {})
    grid = md.get("chunk_grid") or {"name": "regular", "configuration": {}}
    if grid["name"] != "regular":
        raise MetadataError(
            f"metadata.chunk_grid.name: only 'regular' grids can be created from a spec, got {grid['name']!r}"
        )
    grid_shape = grid["configuration"].get("chunk_shape")
    if grid_shape is not None:
        layout = _with_hard_shape(
            layout, "write_chunk", grid_shape, "metadata.chunk_grid.configuration.chunk_shape", extent
        )
    sharding = next((c for c in codecs or [] if c["name"] == "sharding_indexed"), None)
    if sharding is not None and "chunk_shape" in sharding["configuration"]:
        layout = _with_hard_shape(
            layout,
            "read_chunk",
            sharding["configuration"]["chunk_shape"],
            "metadata.codecs sharding_indexed chunk_shape",
            extent,
        )
    elif codecs is not None and grid_shape is not None:
        layout = _with_hard_shape(
            layout, "read_chunk", grid_shape, "metadata.chunk_grid.configuration.chunk_shape", extent
        )
    chosen = choose_chunk_shapes(extent, ChunkLayoutConstraints.from_json(layout), zarr_format=3)

    itemsize = data_type.itemsize
    if sharding is not None:
        config = dict(sharding["configuration"])
        inner = _with_array_to_bytes(parse_codec_chain(config.get("codecs", []), "sharding_indexed.codecs"))
        config["chunk_shape"] = list(chosen.read_chunk)
        config["codecs"] = _fill_codec_defaults(_insert_transpose(inner, chosen.inner_order), itemsize)
        config["index_codecs"] = _fill_codec_defaults(
            parse_codec_chain(
                config.get("index_codecs", DEFAULT_INDEX_CODECS), "sharding_indexed.index_codecs"
            ),
            8,
        )
        config.setdefault("index_location", "end")
        chain = [c if c is not sharding else {**c, "configuration": config} for c in codecs or []]
    elif chosen.sharded:
        if codecs is not None:
            raise MetadataError(
                f"schema.chunk_layout: read chunk {list(chosen.read_chunk)} differs from write chunk "
                f"{list(chosen.write_chunk)}, which needs sharding_indexed in metadata.codecs"
            )
        inner = _fill_codec_defaults(
            _insert_transpose([{"name": "bytes", "configuration": {}}], chosen.inner_order), itemsize
        )
        chain = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(chosen.read_chunk),
                    "codecs": inner,
                    "index_codecs": [dict(c) for c in DEFAULT_INDEX_CODECS],
                    "index_location": "end",
                },
            }
        ]
    else:
        chain = _insert_transpose(_with_array_to_bytes(list(codecs or [])), chosen.inner_order)
    chain = _fill_codec_defaults(chain, itemsize)

    cke = dict(md.get("chunk_key_encoding") or {"name": "default", "configuration": {}})
    cke_config = dict(cke.get("configuration") or {})
    cke_config.setdefault("separator", "/" if cke["name"] == "default" else ".")
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": data_type.to_json(),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chosen.write_chunk)}},
        "chunk_key_encoding": {"name": cke["name"], "configuration": cke_config},
        "fill_value": fill_json,
        "codecs": chain,
        "attributes": attributes,
    }
    if names is not None and any(names):
        doc["dimension_names"] = list(names)
    doc.update({k: v for k, v in md.items() if isinstance(v, dict) and v.get("must_understand") is False})
    return ArrayMetadata.from_json(doc)




def _subarray_shape(v2_dtype: Any, field_name: str | None) -> tuple[int, ...]:
    if field_name is None or not isinstance(v2_dtype, list):
        return ()
    npdt = np.dtype([tuple(f) for f in v2_dtype])
    if npdt.fields is None or field_name not in npdt.fields:
        return ()
    return tuple(npdt.fields[field_name][0].shape)


def _build_v2(spec: TensorStoreSpec) -> ArrayMetadataV2:
    md, schema = spec.metadata, spec.schema
    v2_dtype = md.get("dtype")
    if v2_dtype is None:
        if schema.dtype is None:
            raise MetadataError("metadata.dtype: required to create an array (or give dtype)")
        v2_dtype = CORE_DATA_TYPES[schema.dtype]
    elif (
        schema.dtype is not None
        and spec.field is None
        and DataType.from_numpy(np.dtype(v2_dtype)).name != schema.dtype
    ):
        raise MetadataError(f"dtype: {schema.dtype!r} contradicts metadata.dtype {v2_dtype!r}")
    sub = _subarray_shape(v2_dtype, spec.field)
    domain = list(schema.shape) if schema.shape is not None else None
    if domain is not None and sub:
        if tuple(domain[len(domain) - len(sub) :]) != sub:
            raise MetadataError(
                f"schema.domain.shape: {domain} must end with the field's subarray shape {list(sub)}"
            )
        domain = domain[: len(domain) - len(sub)]
    shape = _pick("metadata.shape", md.get("shape"), "schema.domain.shape", domain)
    if shape is None:
        raise MetadataError("metadata.shape: required to create an array (or give schema.domain.shape)")
    if schema.rank is not None and schema.rank != len(shape) + len(sub):
        raise MetadataError(f"rank: {schema.rank} contradicts metadata.shape {shape}")
    if schema.dimension_units is not None and any(u is not None for u in schema.dimension_units):
        raise MetadataError("schema.dimension_units: the zarr2 driver cannot store dimension units")
    layout = dict(schema.chunk_layout or {})
    if sub and layout:
        raise MetadataError("schema.chunk_layout: not supported when creating a field of a structured type")
    if md.get("chunks") is not None:
        layout = _with_hard_shape(layout, "chunk", md["chunks"], "metadata.chunks", tuple(shape))
    if md.get("order") is not None:
        order_perm = list(range(len(shape)))
        layout_order = layout.get("inner_order")
        wanted = order_perm if md["order"] == "C" else order_perm[::-1]
        if layout_order is not None and list(layout_order) != wanted:
            raise MetadataError(
                f"metadata.order: {md['order']!r} contradicts schema.chunk_layout.inner_order {layout_order}"
            )
        layout["inner_order"] = wanted
    chosen = choose_chunk_shapes(tuple(shape), ChunkLayoutConstraints.from_json(layout), zarr_format=2)
    order = "F" if len(shape) > 1 and chosen.inner_order == tuple(range(len(shape)))[::-1] else "C"
    codec = {k: v for k, v in (schema.codec or {}).items() if k != "driver"}
    compressor = md["compressor"] if "compressor" in md else codec.get("compressor", DEFAULT_V2_COMPRESSOR)
    filters = md["filters"] if "filters" in md else codec.get("filters")
    fill = md.get("fill_value", schema.fill_value)
    if "fill_value" in md and schema.fill_value is not None and spec.field is None:
        _pick(
            "metadata.fill_value",
            md["fill_value"],
            "schema.fill_value",
            schema.fill_value,
            same=lambda a, b: (
                ArrayMetadataV2.from_json(_v2_doc(shape, shape, v2_dtype, None, None, a, "C", ".")).fill_value
                == ArrayMetadataV2.from_json(
                    _v2_doc(shape, shape, v2_dtype, None, None, b, "C", ".")
                ).fill_value
            ),
        )
    if isinstance(fill, float) and not np.isfinite(fill):
        fill = "NaN" if np.isnan(fill) else ("Infinity" if fill > 0 else "-Infinity")
    doc = _v2_doc(
        shape,
        list(chosen.write_chunk),
        v2_dtype,
        compressor,
        filters,
        fill,
        order,
        md.get("dimension_separator", "."),
    )
    return ArrayMetadataV2.from_json(doc, {})


def _v2_doc(
    shape: Any, chunks: Any, dtype: Any, compressor: Any, filters: Any, fill: Any, order: str, sep: str
) -> dict[str, Any]:
    return {
        "zarr_format": 2,
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": dtype,
        "compressor": compressor,
        "fill_value": fill,
        "order": order,
        "filters": filters,
        "dimension_separator": sep,
    }


# -- what an open array offers to schema checks ---------------------------------------------------


def _inner_chain(codecs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        return _inner_chain(parse_codec_chain(codecs[0]["configuration"].get("codecs", []), "codecs"))
    return codecs


def stored_schema(array: Array, field_name: str | None = None) -> StoredSchema:
    """The array's schema in TensorStore's terms (for one field of a structured zarr2 array)."""
    metadata = array.metadata
    dtype = array.dtype
    sub: tuple[int, ...] = ()
    fill: Any = None
    if field_name is not None and dtype.fields is not None:
        field_dtype = dtype.fields[field_name][0]
        sub, base = tuple(field_dtype.shape), field_dtype.base
        dtype_name = DataType.from_numpy(base).name
    elif dtype.fields is not None:
        dtype_name = "structured"
    else:
        dtype_name = metadata.data_type.name
        fill = metadata.data_type.fill_value_to_json(array.fill_value)
    rank = array.ndim
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
        for c in _inner_chain([dict(c) for c in metadata.codecs]):
            if c["name"] == "transpose":
                order = c["configuration"].get("order")
                perm = (
                    list(range(rank))[::-1] if order == "F" else list(range(rank)) if order == "C" else order
                )
                inner_order = [inner_order[o] for o in perm]
        codec = {"driver": "zarr3", "codecs": [dict(c) for c in metadata.codecs]}
    units = array.attrs.get("dimension_units") if metadata.zarr_format == 3 else None
    return StoredSchema(
        dtype=dtype_name,
        shape=tuple(array.shape) + sub,
        labels=tuple(n or "" for n in (array.dimension_names or ("",) * rank)) + ("",) * len(sub),
        fill_value=fill,
        dimension_units=tuple(normalize_unit(u) for u in units) + (None,) * len(sub)
        if isinstance(units, list)
        else None,
        write_chunk=tuple(metadata.chunk_shape) + sub,
        read_chunk=tuple(array.chunks) + sub,
        inner_order=tuple(inner_order) + tuple(range(rank, rank + len(sub))),
        codec=codec,
    )


# -- fields of structured zarr2 arrays --------------------------------------------------------------


def _select_field(array: Array, spec: TensorStoreSpec) -> Any:
    return array if spec.field is None else select_field(array, spec.field)


def select_field(array: Array, field_name: str) -> FieldArray:
    """One field of a structured array, checked to exist."""
    fields = array.dtype.fields
    if fields is None:
        raise MetadataError(
            f"field: {field_name!r} given, but the array's data type {array.dtype} has no fields"
        )
    if field_name not in fields:
        raise MetadataError(f"field: expected one of {list(fields)}, got {field_name!r}")
    return FieldArray(array, field_name)


class FieldArray:
    """One field of a structured zarr2 array, as TensorStore presents it: a numeric array whose
    shape is the array's shape followed by the field's subarray shape.

    Reading reads whole records and takes the field. Writing reads the records, replaces the
    field and writes the records back (read-modify-write of every touched record; concurrent
    writers of other fields may be lost). The subarray (trailing) dimensions take integers and
    slices only.
    """

    def __init__(self, array: Array, field_name: str) -> None:
        fields = array.dtype.fields
        assert fields is not None
        self.array = array
        self.field = field_name
        field_dtype = fields[field_name][0]
        self._subshape: tuple[int, ...] = tuple(field_dtype.shape)
        self._dtype = field_dtype.base

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape) + self._subshape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        return tuple(self.array.chunks) + self._subshape

    @property
    def fill_value(self) -> Any:
        return np.asarray(self.array.fill_value)[self.field][()]

    def __repr__(self) -> str:
        return f"<gpuzarr.FieldArray field={self.field!r} of {self.array!r}>"

    def _split(self, selection: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        sel = selection if isinstance(selection, tuple) else (selection,)
        if any(s is Ellipsis for s in sel):
            i = next(i for i, s in enumerate(sel) if s is Ellipsis)
            fill = self.ndim - (len(sel) - 1)
            sel = (*sel[:i], *(slice(None),) * fill, *sel[i + 1 :])
        if len(sel) > self.ndim:
            raise IndexError(f"too many indices: {len(sel)} for a {self.ndim}-d field array")
        sel = sel + (slice(None),) * (self.ndim - len(sel))
        outer, inner = sel[: self.array.ndim], sel[self.array.ndim :]
        for s in inner:
            if not isinstance(s, (slice, int, np.integer)):
                raise IndexError(
                    f"field {self.field!r}: subarray dimensions take integers and slices, got {s!r}"
                )
        return outer, inner

    def __getitem__(self, selection: Any) -> Any:
        outer, inner = self._split(selection)
        records = self.array[outer]
        values = np.asarray(records)[self.field]
        return values[(Ellipsis, *inner)] if inner else values

    def read(self, selection: Any = Ellipsis) -> Any:
        return self[selection]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        data = self[...]
        return data if dtype is None else data.astype(dtype, copy=False)

    def __setitem__(self, selection: Any, value: Any) -> None:
        outer, inner = self._split(selection)
        records = np.array(self.array[outer], copy=True)
        view = records[self.field]
        if inner:
            view[(Ellipsis, *inner)] = value
        else:
            view[...] = value
        self.array[outer] = records

    def spec(self) -> dict[str, Any]:
        """The TensorStore spec of this field (the array's spec with ``field``)."""
        return {**self.array.spec(), "field": self.field}


# -- Array.spec() ---------------------------------------------------------------------------------


def _memory_store_url(store: MemoryStore) -> str | None:
    from ..store import _named_memory

    for name, data in list(_named_memory.items()):
        if data is getattr(store, "data", None):
            return f"memory://{name}"
    return None


def array_spec(array: Array) -> dict[str, Any]:
    """The TensorStore spec of ``array`` (see :meth:`gpuzarr.Array.spec`).

    A local store gives ``{"driver": "file", "path": ...}``, which TensorStore opens too. A named
    memory store (``memory://name``) gives its URL, which gpuzarr reopens in the same process; an
    anonymous memory store gives ``{"driver": "memory"}``, which (as in TensorStore without a
    shared context) opens a new, empty store.
    """
    store = array.store
    kvstore: Any
    path = ""
    if isinstance(store, LocalStore):
        root = os.fspath(store.root)
        kvstore = {
            "driver": "file",
            "path": (os.path.join(root, array.path) if array.path else root).rstrip("/") + "/",
        }
    elif isinstance(store, MemoryStore):
        url = _memory_store_url(store)
        if url is not None:
            kvstore, path = url, array.path
        else:
            kvstore = {"driver": "memory", **({"path": array.path + "/"} if array.path else {})}
    else:
        raise MetadataError(f"spec: no TensorStore kvstore for {store!r}")
    metadata = array.metadata.to_json()
    metadata.pop("attributes", None)
    spec: dict[str, Any] = {
        "driver": "zarr3" if array.zarr_format == 3 else "zarr2",
        "kvstore": kvstore,
        **({"path": path} if path else {}),
        "metadata": metadata,
    }
    if not array.fill_missing_data_reads:
        spec["fill_missing_data_reads"] = False
    if array.store_data_equal_to_fill_value:
        spec["store_data_equal_to_fill_value"] = True
    return spec
