"""Metadata for a new array from a TensorStore spec, with TensorStore's defaults.

The shape, data type, fill value, dimension names and units come from the spec's ``metadata``
constraints and its schema (a contradiction between the two raises MetadataError naming both).
Chunk shapes come from the metadata or, failing that, are chosen from ``schema.chunk_layout`` as
TensorStore chooses them (:func:`~gpuzarr.tensorstore.chunk_shapes.choose_chunk_shapes`); a
``sharding_indexed`` codec is added when the read and write chunks differ, a ``transpose`` codec
for ``inner_order``. Partial codecs are completed with TensorStore's defaults, so gpuzarr and
TensorStore write the same zarr.json. Pure: nothing here reads or writes a store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..codecs.registry import codec_from_json
from ..errors import MetadataError
from ..metadata.build import TENSORSTORE_DEFAULTS
from ..metadata.chain import (
    ARRAY_TO_BYTES_NAMES,
    chain_order,
    parse_codec_chain,
    with_array_to_bytes,
    with_transpose,
    wrap_in_sharding,
)
from ..metadata.dtypes import CORE_DATA_TYPES, DataType
from ..metadata.v2 import ArrayMetadataV2, parse_v2_dtype
from ..metadata.v3 import ArrayMetadata
from .chunk_layout import ChunkLayoutConstraints
from .chunk_shapes import ChosenLayout, choose_chunk_shapes
from .codec_chains import CodecsDoNotMerge, codecs_match, merged_codecs
from .schema import normalize_unit

if TYPE_CHECKING:
    from ..metadata.json_types import CodecJSON
    from .spec import TensorStoreSpec

__all__ = ["build_metadata"]

def _bytes_codec() -> CodecJSON:
    """The array->bytes codec TensorStore adds to a chain without one (``_fill_codec_defaults``
    completes it for the data type)."""
    return {"name": "bytes", "configuration": {}}


def _pick(name_a: str, a: Any, name_b: str, b: Any, same: Any = None) -> Any:
    """``a`` or ``b``, whichever is given; both given and different raises."""
    if a is not None and b is not None:
        equal = same(a, b) if same is not None else a == b
        if not equal:
            raise MetadataError(f"{name_a}: {a!r} contradicts {name_b} {b!r}")
    return a if a is not None else b


def _merged_codecs(given: list[CodecJSON], asked: list[CodecJSON], rank: int) -> list[CodecJSON]:
    """``metadata.codecs`` with the ``schema.codec`` chain merged in, as TensorStore merges
    them on create: the two chains' non-strict merge (:func:`merged_codecs`: a lone
    ``sharding_indexed`` codec without inner codecs takes the schema's as theirs, a trailing
    transpose or a member the metadata leaves out is added), which must still meet
    ``metadata.codecs`` strictly; MetadataError otherwise."""
    try:
        merged = merged_codecs(given, asked, rank)
    except CodecsDoNotMerge as exc:
        raise MetadataError(f"metadata.codecs: {given!r} contradicts schema.codec.codecs {asked!r} ({exc})") from None
    if not codecs_match(given, merged, rank, strict=True):
        raise MetadataError(
            f"metadata.codecs: {given!r} contradicts schema.codec.codecs {asked!r} (together they make {merged!r})"
        )
    return merged


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


def _with_configuration(codec: CodecJSON, configuration: dict[str, Any]) -> CodecJSON:
    """``codec`` with ``configuration`` instead of its own (a new object)."""
    replaced = codec.copy()
    replaced["configuration"] = configuration
    return replaced


def _fill_codec_defaults(chain: list[CodecJSON], itemsize: int) -> list[CodecJSON]:
    """Complete partial codecs with TensorStore's defaults (so both write the same zarr.json)."""
    out: list[CodecJSON] = []
    previous = None
    for codec in chain:
        config = dict(codec.get("configuration") or {})
        name = codec["name"]
        if name == "bytes" and itemsize > 1:
            config.setdefault("endian", "little")
        elif name == "bytes":
            config.pop("endian", None)  # elements of one byte have no byte order
        elif name == "blosc" and previous in ARRAY_TO_BYTES_NAMES:
            # Right after the array->bytes codec, Blosc sees the elements: shuffle by them.
            defaults = {
                "cname": "lz4",
                "clevel": 5,
                "shuffle": "shuffle" if itemsize > 1 else "bitshuffle",
                "typesize": itemsize,
                "blocksize": 0,
            }
            config = {**defaults, **config}
        elif name == "blosc":  # after another compressor: bytes of no element size
            config = {"cname": "lz4", "clevel": 5, "shuffle": "noshuffle", "blocksize": 0, **config}
        elif name == "gzip":
            config.setdefault("level", 6)
        elif name == "zstd":
            config = {"level": 3, "checksum": False, **config}
        elif name == "sharding_indexed":
            # Shards within shards: the inner shards' chains are completed as the outer's.
            inner = parse_codec_chain(config.get("codecs", []), "sharding_indexed.codecs")
            config["codecs"] = _fill_codec_defaults(with_array_to_bytes(inner, _bytes_codec()), itemsize)
            _fill_index_defaults(config)
        filled: CodecJSON = {**codec, "configuration": config}
        out.append(filled)
        previous = name
    return out


def _fill_index_defaults(config: dict[str, Any]) -> None:
    """Complete a ``sharding_indexed`` configuration's index as TensorStore writes it: its
    codecs (TensorStore's, where none are given) with their defaults, and ``index_location``."""
    index = parse_codec_chain(
        config.get("index_codecs", list(TENSORSTORE_DEFAULTS.index_codecs)), "sharding_indexed.index_codecs"
    )
    config["index_codecs"] = _fill_codec_defaults(index, 8)
    config.setdefault("index_location", "end")


def _insert_transpose(chain: list[CodecJSON], order: tuple[int, ...]) -> list[CodecJSON]:
    """A transpose codec for ``inner_order`` just before the array->bytes codec, unless the chain
    already has one (TensorStore then takes the chain as given)."""
    if any(c["name"] == "transpose" for c in chain):
        return chain
    return with_transpose(chain, order)


def _ordered(
    chain: list[CodecJSON], chosen: tuple[int, ...], hard: Any, fixed: bool, field: str
) -> list[CodecJSON]:
    """``chain`` in the chosen ``inner_order``: a transpose inserted where the chain is not
    ``fixed`` (given whole in ``metadata``); a fixed chain is taken as given, and a hard
    ``inner_order`` it does not have is refused, as TensorStore refuses it (inserting one
    made an array that the same spec then failed to open)."""
    if not fixed:
        return _insert_transpose(chain, chosen)
    have = chain_order(chain, len(chosen))
    if hard is not None and list(hard) != have:
        raise MetadataError(
            f"schema.chunk_layout.inner_order: {list(hard)} contradicts {field}, whose order is {have}"
        )
    return chain


def _check_codecs(chain: list[CodecJSON] | None, field: str) -> None:
    """Refuse an unknown codec or a bad configuration under the name the spec gives it (once
    defaults and a bytes codec are added, the chain's indexes no longer match the spec's).
    ``sharding_indexed`` is left to the build: its ``chunk_shape`` may still be to choose."""
    for i, codec in enumerate(chain or []):
        if codec["name"] != "sharding_indexed":
            codec_from_json(codec, f"{field}[{i}]")


def _choose_v3(extent: tuple[int, ...], layout: dict[str, Any], single: bool) -> ChosenLayout:
    try:
        return choose_chunk_shapes(extent, ChunkLayoutConstraints.from_json(layout), zarr_format=3, single_chunk=single)
    except MetadataError as exc:
        if not single:
            raise
        raise MetadataError(
            f"{exc} (metadata.codecs without sharding_indexed have one chunk shape: a read chunk "
            "other than the write chunk needs sharding_indexed in metadata.codecs)"
        ) from exc


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
    _check_codecs(codecs, "metadata.codecs")
    # Codecs a schema asks for, and metadata does not fix, may be wrapped in sharding_indexed
    # where the chunk layout needs it (TensorStore does; it refuses fixed metadata.codecs).
    wrappable = codecs is None
    if schema.codec is not None and "codecs" in schema.codec:
        asked = parse_codec_chain(schema.codec["codecs"], "schema.codec.codecs")
        _check_codecs(asked, "schema.codec.codecs")
        codecs = asked if codecs is None else _merged_codecs(codecs, asked, len(shape))

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
    # Codecs fixed without sharding_indexed have one chunk shape: the read and write
    # constraints both apply to it (TensorStore merges them; choosing each apart and then
    # refusing the difference failed specs TensorStore takes).
    single = codecs is not None and not wrappable and sharding is None
    chosen = _choose_v3(extent, layout, single)
    hard_order = layout.get("inner_order")

    itemsize = data_type.itemsize
    if sharding is not None:
        config = dict(sharding["configuration"])
        inner = with_array_to_bytes(
            parse_codec_chain(config.get("codecs", []), "sharding_indexed.codecs"), _bytes_codec()
        )
        config["chunk_shape"] = list(chosen.read_chunk)
        inner_fixed = not wrappable and "codecs" in sharding["configuration"]
        config["codecs"] = _fill_codec_defaults(
            _ordered(inner, chosen.inner_order, hard_order, inner_fixed, "metadata.codecs sharding_indexed codecs"),
            itemsize,
        )
        _fill_index_defaults(config)
        chain: list[CodecJSON] = [c if c is not sharding else _with_configuration(c, config) for c in codecs or []]
    elif chosen.sharded:
        if codecs is not None and not wrappable:
            raise MetadataError(
                f"schema.chunk_layout: read chunk {list(chosen.read_chunk)} differs from write chunk "
                f"{list(chosen.write_chunk)}, which needs sharding_indexed in metadata.codecs"
            )
        given = with_array_to_bytes(list(codecs), _bytes_codec()) if codecs else [_bytes_codec()]
        inner = _fill_codec_defaults(_insert_transpose(given, chosen.inner_order), itemsize)
        # In object form ({"name": "crc32c", "configuration": {}}), as TensorStore writes them.
        index_codecs = parse_codec_chain(list(TENSORSTORE_DEFAULTS.index_codecs), "index_codecs")
        chain = wrap_in_sharding(inner, chosen.read_chunk, index_codecs)
    else:
        given = list(codecs) if codecs else list(TENSORSTORE_DEFAULTS.compressors)
        fixed = codecs is not None and not wrappable
        chain = _ordered(
            with_array_to_bytes(given, _bytes_codec()), chosen.inner_order, hard_order, fixed, "metadata.codecs"
        )
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


#: The members TensorStore's zarr2 driver fills in of a compressor given in part (what it writes).
_ZARR2_COMPRESSOR_DEFAULTS: dict[str, dict[str, Any]] = {
    "blosc": {"cname": "lz4", "clevel": 5, "shuffle": -1, "blocksize": 0},
    "zstd": {"level": 1},
    "zlib": {"level": 1},
    "gzip": {"level": 1},
    "bz2": {"level": 1},
}


def _zarr2_compressor(compressor: Any) -> Any:
    """``compressor`` written whole with TensorStore's defaults, as TensorStore writes one given
    in part (``{"id": "blosc"}``); others as given."""
    if isinstance(compressor, dict) and compressor.get("id") in _ZARR2_COMPRESSOR_DEFAULTS:
        return {"id": compressor["id"], **_ZARR2_COMPRESSOR_DEFAULTS[compressor["id"]], **compressor}
    return compressor


def _build_v2(spec: TensorStoreSpec) -> ArrayMetadataV2:
    md, schema = spec.metadata, spec.schema
    v2_dtype = md.get("dtype")
    if v2_dtype is None:
        if schema.dtype is None:
            raise MetadataError("metadata.dtype: required to create an array (or give dtype)")
        # extension types (bfloat16, int4, float8_*) are written by name, as TensorStore does
        v2_dtype = CORE_DATA_TYPES.get(schema.dtype, schema.dtype)
    elif (
        schema.dtype is not None
        and spec.field is None
        and parse_v2_dtype(v2_dtype)[0].name != schema.dtype
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
    compressor = _zarr2_compressor(
        md["compressor"] if "compressor" in md else codec.get("compressor", TENSORSTORE_DEFAULTS.v2_compressor)
    )
    filters = md["filters"] if "filters" in md else codec.get("filters")
    fill = _v2_fill(md, schema.fill_value, spec.field is None, shape, v2_dtype)
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


def _v2_fill(md: dict[str, Any], schema_fill: Any, whole_records: bool, shape: list[int], v2_dtype: Any) -> Any:
    """The ``fill_value`` of a zarr2 array created from a spec: the metadata's, else the
    schema's; both given must agree (a structured array's schema fill is one field's, which
    ``whole_records`` False leaves unchecked)."""
    fill = md.get("fill_value", schema_fill)
    if "fill_value" in md and md["fill_value"] is None and schema_fill is not None:
        # null: no fill value. Taken as "not given", the schema's was dropped, and the array
        # read as zeros (TensorStore refuses the pair).
        raise MetadataError(
            f"schema.fill_value: {schema_fill!r} asks for a fill value, but metadata.fill_value is null "
            "(no fill value)"
        )
    if "fill_value" in md and schema_fill is not None and whole_records:
        _pick(
            "metadata.fill_value",
            md["fill_value"],
            "schema.fill_value",
            schema_fill,
            same=lambda a, b: (
                ArrayMetadataV2.from_json(_v2_doc(shape, shape, v2_dtype, None, None, a, "C", ".")).fill_value
                == ArrayMetadataV2.from_json(
                    _v2_doc(shape, shape, v2_dtype, None, None, b, "C", ".")
                ).fill_value
            ),
        )
    if isinstance(fill, float) and not np.isfinite(fill):
        fill = "NaN" if np.isnan(fill) else ("Infinity" if fill > 0 else "-Infinity")
    return fill


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
