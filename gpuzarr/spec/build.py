"""Turning ``gpuzarr.create(...)`` keyword arguments into v3 array metadata."""

from __future__ import annotations

from typing import Any

from ..errors import MetadataError
from .chunk_grid import RegularChunkGrid
from .chunk_key_encoding import ChunkKeyEncoding
from .dtypes import CORE_DATA_TYPES, EXTENSION_DATA_TYPES, DataType
from .rectilinear import RectilinearChunkGrid
from .v2 import ArrayMetadataV2, v2_dtype_string
from .v3 import ArrayMetadata, normalize_codec_json

DEFAULT_COMPRESSOR: dict[str, Any] = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
_ARRAY_TO_BYTES = ("bytes", "sharding_indexed")
_ARRAY_TO_ARRAY = ("transpose",)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _shape_tuple(value: Any, field: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,)
    try:
        shape = tuple(int(v) for v in value)
    except TypeError as exc:
        raise MetadataError(f"{field}: expected a sequence of integers, got {value!r}") from exc
    return shape


def build_codec_chain(
    dtype: DataType,
    ndim: int,
    codecs: Any,
    compressor: Any,
    filters: Any,
    order: str,
) -> list[dict[str, Any]]:
    """The chain for a v3 array: explicit ``codecs``, or filters + bytes + compressor(s)."""
    if codecs is not None:
        if compressor not in (None, "auto") or filters is not None:
            raise MetadataError("codecs: give either codecs or compressor/filters, not both")
        chain = [normalize_codec_json(c, f"codecs[{i}]") for i, c in enumerate(_as_list(codecs))]
        if not any(c["name"] in _ARRAY_TO_BYTES for c in chain):
            # Like zarr-python: a chain without an array->bytes codec gets the default one.
            n_a2a = sum(1 for c in chain if c["name"] in _ARRAY_TO_ARRAY)
            chain.insert(n_a2a, _bytes_codec(dtype))
    else:
        compressors = [DEFAULT_COMPRESSOR] if compressor == "auto" else _as_list(compressor)
        chain = [
            *(normalize_codec_json(f, "filters") for f in _as_list(filters)),
            _bytes_codec(dtype),
            *(normalize_codec_json(c, "compressor") for c in compressors),
        ]
    if order == "F" and ndim > 1:
        chain.insert(0, {"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}})
    elif order not in ("C", "F"):
        raise MetadataError(f"order: expected 'C' or 'F', got {order!r}")
    return chain


def _bytes_codec(dtype: DataType) -> dict[str, Any]:
    if dtype.itemsize == 1:
        return {"name": "bytes", "configuration": {}}
    return {"name": "bytes", "configuration": {"endian": "little"}}


def _is_rectilinear(chunks: Any) -> bool:
    return isinstance(chunks, (list, tuple)) and any(isinstance(c, (list, tuple)) for c in chunks)


def _rectilinear(chunks: Any, ndim: int, field: str) -> RectilinearChunkGrid:
    config = {"kind": "inline", "chunk_shapes": [c if isinstance(c, int) else list(c) for c in chunks]}
    try:
        return RectilinearChunkGrid.from_json({"name": "rectilinear", "configuration": config}, ndim)
    except MetadataError as exc:
        raise MetadataError(f"{field}: {exc}") from exc


def _validated_grid(
    grid: RegularChunkGrid | RectilinearChunkGrid, ndim: int
) -> RegularChunkGrid | RectilinearChunkGrid:
    if isinstance(grid, RegularChunkGrid):
        return RegularChunkGrid.from_json(grid.to_json(), ndim)
    return grid


def build_v3_metadata(
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = None,
    shards: Any = None,
    codecs: Any = None,
    compressor: Any = "auto",
    filters: Any = None,
    order: str = "C",
    fill_value: Any = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_separator: str | None = None,
) -> ArrayMetadata:
    shape_t = _shape_tuple(shape, "shape")
    data_type = DataType.from_numpy(dtype)
    if shards is None and _is_rectilinear(chunks):
        grid: RegularChunkGrid | RectilinearChunkGrid = _rectilinear(chunks, len(shape_t), "chunks")
        chunk_shape = grid.chunk_shape
    else:
        chunk_shape = tuple(max(s, 1) for s in shape_t) if chunks is None else _shape_tuple(chunks, "chunks")
        grid = RegularChunkGrid(chunk_shape)
    if len(chunk_shape) != len(shape_t):
        raise MetadataError(f"chunks: must have {len(shape_t)} entries, got {len(chunk_shape)}")
    chain = build_codec_chain(data_type, len(shape_t), codecs, compressor, filters, order)
    if shards is not None:
        if _is_rectilinear(shards):
            grid = _rectilinear(shards, len(shape_t), "shards")
        else:
            grid = RegularChunkGrid(_shape_tuple(shards, "shards"))
        per_axis = [
            [s] if isinstance(s, int) else list(s) for s in getattr(grid, "chunk_shapes", grid.chunk_shape)
        ]
        if len(per_axis) != len(shape_t):
            raise MetadataError(f"shards: must have {len(shape_t)} entries, got {len(per_axis)}")
        for axis, (sizes, c) in enumerate(zip(per_axis, chunk_shape, strict=True)):
            if any(n % c for n in sizes):
                raise MetadataError(
                    f"shards: shard extents {sizes} on axis {axis} must be multiples of the chunk size {c}"
                )
        chain = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(chunk_shape),
                    "codecs": chain,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }
        ]
    if isinstance(chunk_key_encoding, str):
        default_separator = "/" if chunk_key_encoding == "default" else "."
        cke = ChunkKeyEncoding(chunk_key_encoding, dimension_separator or default_separator)
    elif isinstance(chunk_key_encoding, dict):
        cke = ChunkKeyEncoding.from_json(chunk_key_encoding)
    elif chunk_key_encoding is None:
        cke = ChunkKeyEncoding("default", dimension_separator or "/")
    else:
        raise MetadataError(f"chunk_key_encoding: expected a name or an object, got {chunk_key_encoding!r}")
    names = None if dimension_names is None else tuple(dimension_names)
    return ArrayMetadata(
        shape=shape_t,
        data_type=data_type,
        chunk_grid=_validated_grid(grid, len(shape_t)),
        fill_value=data_type.fill_value_from_python(fill_value),
        codecs=tuple(chain),
        chunk_key_encoding=cke,
        attributes=dict(attributes or {}),
        dimension_names=names,
    )


# No "checksum" member: TensorStore's zarr2 driver rejects it, and false is the default anyway.
DEFAULT_V2_COMPRESSOR: dict[str, Any] = {"id": "zstd", "level": 0}


def build_v2_metadata(
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = None,
    compressor: Any = "auto",
    filters: Any = None,
    order: str = "C",
    fill_value: Any = None,
    attributes: dict[str, Any] | None = None,
    dimension_separator: str | None = None,
) -> ArrayMetadataV2:
    """v2 metadata from create() arguments; ``compressor``/``filters`` are numcodecs JSON dicts.

    ``dtype`` may carry a byte order (">f4") or be a structured dtype; it is written as given.
    """
    from .v2 import parse_v2_dtype

    shape_t = _shape_tuple(shape, "shape")
    chunk_shape = tuple(max(s, 1) for s in shape_t) if chunks is None else _shape_tuple(chunks, "chunks")
    if len(chunk_shape) != len(shape_t):
        raise MetadataError(f"chunks: must have {len(shape_t)} entries, got {len(chunk_shape)}")
    import numpy as np

    descr: Any
    if isinstance(dtype, str) and (dtype in EXTENSION_DATA_TYPES or dtype.startswith("r")):
        data_type_v3 = DataType.from_numpy(dtype)
        descr = dtype if dtype in EXTENSION_DATA_TYPES else f"|V{data_type_v3.itemsize}"
    else:
        npdt = np.dtype(CORE_DATA_TYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
        descr = npdt.descr if npdt.fields is not None else npdt.str
        if npdt.name in EXTENSION_DATA_TYPES:
            descr = npdt.name
        elif npdt.fields is None and npdt.itemsize > 1 and npdt.byteorder == "=":
            descr = npdt.newbyteorder("<").str
    data_type, endian = parse_v2_dtype([list(d) for d in descr] if isinstance(descr, list) else descr)
    if compressor == "auto":
        compressor = DEFAULT_V2_COMPRESSOR
    if order not in ("C", "F"):
        raise MetadataError(f"order: expected 'C' or 'F', got {order!r}")
    fill: Any
    if fill_value is None:
        fill = None
    elif data_type.numpy_dtype.fields is not None:
        fill = np.asarray(fill_value, dtype=data_type.numpy_dtype)[()]
    else:
        fill = data_type.fill_value_from_python(fill_value)
    metadata = ArrayMetadataV2(
        shape=shape_t,
        data_type=data_type,
        chunk_grid=RegularChunkGrid(chunk_shape),
        fill_value_v2=fill,
        endian=endian,
        order=order,
        compressor=dict(compressor) if compressor is not None else None,
        filters=tuple(dict(f) for f in _as_list(filters)) or None,
        dimension_separator=dimension_separator or ".",
        attributes=dict(attributes or {}),
    )
    v2_dtype_string(data_type, endian)
    return metadata
