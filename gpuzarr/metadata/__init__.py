"""Metadata, data types, chunk grids and key encodings: pure Python + NumPy, no devices."""

from .chunk_grid import DimensionGrid, RegularChunkGrid
from .chunk_key_encoding import ChunkKeyEncoding
from .dtypes import DataType
from .v3 import ZARR_JSON, ArrayMetadata, parse_json_document

__all__ = [
    "ZARR_JSON",
    "ArrayMetadata",
    "ChunkKeyEncoding",
    "DataType",
    "DimensionGrid",
    "RegularChunkGrid",
    "parse_json_document",
]
