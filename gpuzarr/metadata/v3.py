"""Zarr v3 array metadata (``zarr.json`` with ``node_type: "array"``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from ..errors import MetadataError
from .chain import normalize_codec_json as normalize_codec_json  # re-exported: codecs import it from here
from .chunk_grid import RegularChunkGrid
from .chunk_key_encoding import ChunkKeyEncoding
from .dtypes import DataType
from .json_util import document_bytes, expect_dict, expect_int_list, loads_document, split_name_configuration
from .limits import check_chunk_bytes, check_shape
from .rectilinear import RectilinearChunkGrid

if TYPE_CHECKING:
    import numpy as np

    from .json_types import ArrayMetadataV3JSON, CodecJSON

ZARR_JSON = "zarr.json"

ARRAY_FIELDS = frozenset({
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "dimension_names",
    "storage_transformers",
})


def parse_chunk_grid(value: Any, shape: tuple[int, ...]) -> RegularChunkGrid | RectilinearChunkGrid:
    """The ``chunk_grid`` object of an array of ``shape``: ``regular``, or the ``rectilinear``
    extension (ZEP 3)."""
    ndim = len(shape)
    name, _config = split_name_configuration(value, "chunk_grid")
    if name == "rectilinear":
        return RectilinearChunkGrid.from_json(value, shape)
    if name != "regular":
        raise MetadataError(f"chunk_grid.name: unsupported chunk grid {name!r} (expected 'regular' or 'rectilinear')")
    return RegularChunkGrid.from_json(value, ndim)


@dataclass(frozen=True, eq=False)
class ArrayMetadata:
    """Validated, normalised Zarr v3 array metadata.

    ``codecs`` holds the JSON codec chain (each ``{"name", "configuration"}``); the codec
    implementations resolve it (codecs.pipeline) so that this layer stays pure.
    """

    shape: tuple[int, ...]
    data_type: DataType
    chunk_grid: RegularChunkGrid | RectilinearChunkGrid
    fill_value: np.generic
    codecs: tuple[CodecJSON, ...]
    chunk_key_encoding: ChunkKeyEncoding = field(default_factory=ChunkKeyEncoding)
    attributes: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)
    zarr_format: int = 3

    def __post_init__(self) -> None:
        if self.data_type.numpy_dtype.fields is not None:
            # Zarr v2's structured types have no v3 form that keeps each field's byte order
            # (zarr-python's "structured" is marked unstable, and gpuzarr reads none).
            raise MetadataError(
                f"data_type: the structured type {self.data_type.numpy_dtype} has no Zarr v3 form; "
                "keep it in Zarr v2 (zarr_format=2)"
            )
        if any(s < 0 for s in self.shape):
            raise MetadataError(f"shape: entries must be >= 0, got {list(self.shape)}")
        check_shape(self.shape, "shape")
        if isinstance(self.chunk_grid, RectilinearChunkGrid):
            chunk_field = "chunk_grid.configuration.chunk_shapes (largest chunk)"
        else:
            chunk_field = "chunk_grid.configuration.chunk_shape"
        check_shape(self.chunk_shape, chunk_field)
        if [c["name"] for c in self.codecs] != ["sharding_indexed"]:
            # With a chain of sharding alone, shards are never decoded whole: the sharding
            # codec checks its inner chunks and index instead (codecs/sharding.py).
            check_chunk_bytes(self.chunk_shape, self.dtype, chunk_field)
        if isinstance(self.chunk_grid, RectilinearChunkGrid):
            self.chunk_grid.validate_shape(self.shape)
        if self.dimension_names is not None and len(self.dimension_names) != len(self.shape):
            raise MetadataError(
                f"dimension_names: must have {len(self.shape)} entries, "
                f"got {len(self.dimension_names)}"
            )

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.data_type.numpy_dtype

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        shape = self.chunk_grid.chunk_shape
        listed = getattr(self.chunk_grid, "chunk_shapes", None)
        if listed is not None and any(s == () for s in listed) and self.codecs:
            # An axis of extent 0 listing no chunk: under sharding, a shard of one inner chunk
            # there (1 divided no inner chunk but 1).
            first = self.codecs[0]
            configuration = first.get("configuration") or {}
            inner = configuration.get("chunk_shape") if first.get("name") == "sharding_indexed" else None
            if isinstance(inner, list) and len(inner) == len(shape):
                shape = tuple(int(c) if s == () else n for s, n, c in zip(listed, shape, inner, strict=True))
        return shape

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        return self.chunk_key_encoding.encode(coords)

    def evolve(self, **changes: Any) -> ArrayMetadata:
        return replace(self, **changes)

    # -- JSON ----------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Any) -> ArrayMetadata:
        doc = expect_dict(doc, "zarr.json")
        zarr_format = doc.get("zarr_format")
        if isinstance(zarr_format, bool) or not isinstance(zarr_format, int) or zarr_format != 3:
            raise MetadataError(f"zarr_format: expected 3, got {doc.get('zarr_format')!r}")
        if doc.get("node_type") != "array":
            raise MetadataError(f"node_type: expected 'array', got {doc.get('node_type')!r}")
        extra: dict[str, Any] = {}
        for key in set(doc) - ARRAY_FIELDS:
            value = doc[key]
            if isinstance(value, dict) and value.get("must_understand") is False:
                extra[key] = value
            else:
                raise MetadataError(
                    f"{key}: unknown metadata field (only objects with "
                    "\"must_understand\": false may be ignored)"
                )
        for required in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"):
            if required not in doc:
                raise MetadataError(f"{required}: required field is missing")
        shape = tuple(expect_int_list(doc["shape"], "shape"))
        data_type = DataType.from_json(doc["data_type"])
        chunk_grid = parse_chunk_grid(doc["chunk_grid"], shape)
        if isinstance(chunk_grid, RectilinearChunkGrid):
            chunk_grid.validate_shape(shape)
        cke = ChunkKeyEncoding.from_json(doc["chunk_key_encoding"])
        fill_value = data_type.fill_value_from_json(doc["fill_value"])
        raw_codecs = doc["codecs"]
        if not isinstance(raw_codecs, list) or not raw_codecs:
            raise MetadataError(f"codecs: expected a non-empty list, got {raw_codecs!r}")
        codecs = tuple(normalize_codec_json(c, f"codecs[{i}]") for i, c in enumerate(raw_codecs))
        transformers = doc.get("storage_transformers", [])
        if transformers not in ([], None):
            raise MetadataError(
                f"storage_transformers: no storage transformer is supported, got {transformers!r}"
            )
        attributes = expect_dict(doc.get("attributes", {}), "attributes")
        dim_names = doc.get("dimension_names")
        if dim_names is not None:
            if not isinstance(dim_names, list) or not all(
                n is None or isinstance(n, str) for n in dim_names
            ):
                raise MetadataError(
                    f"dimension_names: expected a list of strings or nulls, got {dim_names!r}"
                )
            dim_names = tuple(dim_names)
        return cls(
            shape=shape,
            data_type=data_type,
            chunk_grid=chunk_grid,
            fill_value=fill_value,
            codecs=codecs,
            chunk_key_encoding=cke,
            attributes=dict(attributes),
            dimension_names=dim_names,
            extra_fields=extra,
        )

    def to_json(self) -> ArrayMetadataV3JSON:
        doc: ArrayMetadataV3JSON = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type.to_json(),
            "chunk_grid": self.chunk_grid.to_json(),
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": self.data_type.fill_value_to_json(self.fill_value),
            # dict(): a codec may be any mapping (ArrayMetadata is public); JSON is a dict.
            "codecs": [cast("CodecJSON", dict(c)) for c in self.codecs],
            "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = list(self.dimension_names)
        # Extension fields kept as read: beyond the core shape, by their nature.
        cast("dict[str, Any]", doc).update(self.extra_fields)
        return doc

    def to_dict(self) -> ArrayMetadataV3JSON:
        """The zarr.json document as a new dict of JSON values (zarr-python's ``to_dict``)."""
        return copy.deepcopy(self.to_json())

    def to_bytes(self) -> bytes:
        return document_bytes(cast("dict[str, Any]", self.to_json()))

    def documents(self) -> dict[str, bytes]:
        """The metadata documents to store, by key relative to the array."""
        return {ZARR_JSON: self.to_bytes()}


def parse_json_document(raw: bytes, key: str) -> dict[str, Any]:
    """Decode a metadata document, naming its key when it is not a JSON object."""
    doc = loads_document(raw, key)
    if not isinstance(doc, dict):
        raise MetadataError(f"{key}: expected a JSON object, got {type(doc).__name__}")
    return doc
