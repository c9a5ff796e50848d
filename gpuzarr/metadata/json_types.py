"""The JSON shapes of the metadata documents gpuzarr writes, and of their parts.

What gpuzarr reads is untrusted JSON (``Any``), checked field by field by the parsers, which name
what is wrong; once checked, and in everything gpuzarr writes, it has these shapes. They
type-check the code that builds documents and codec chains, and say what each holds. Zarr v3:
https://zarr-specs.readthedocs.io/en/latest/v3/core/index.html#array-metadata; Zarr v2:
https://zarr-specs.readthedocs.io/en/latest/v2/v2.0.html#metadata.
"""

# No ``from __future__ import annotations`` here: TypedDict reads ``NotRequired`` from the
# evaluated annotations (``__required_keys__``), which strings would hide.
from typing import Any, Literal, NotRequired, Required, TypedDict


class NamedConfigJSON(TypedDict):
    """A named extension point of a v3 document (a codec, a chunk grid, a chunk key encoding):
    ``{"name": ..., "configuration": {...}}``, the configuration left out where there is none."""

    name: str
    configuration: NotRequired[dict[str, Any]]
    #: False on an extension a reader may leave aside where it does not know it
    must_understand: NotRequired[bool]


#: one codec of a v3 ``codecs`` list (or of a ``sharding_indexed`` codec's chains)
CodecJSON = NamedConfigJSON


class ArrayMetadataV3JSON(TypedDict):
    """A v3 array's ``zarr.json``. The fields of extensions that gpuzarr keeps without
    understanding them (``must_understand: false``) come on top."""

    zarr_format: Literal[3]
    node_type: Literal["array"]
    shape: list[int]
    #: a core data type's name, or an extension data type's name and configuration
    data_type: str | dict[str, Any]
    chunk_grid: NamedConfigJSON
    chunk_key_encoding: NamedConfigJSON
    #: in the data type's own JSON form (a number, a string such as "NaN", a list, ...)
    fill_value: Any
    codecs: list[CodecJSON]
    attributes: dict[str, Any]
    dimension_names: NotRequired[list[str | None]]


#: A numcodecs codec's JSON, a v2 compressor or filter: ``{"id": "blosc", "cname": "lz4", ...}``.
#: Its keys other than ``id`` are the codec's own parameters, an open set that a TypedDict cannot
#: declare (PEP 728's ``extra_items``, which mypy 2.4 does not read).
NumcodecsJSON = dict[str, Any]


class ArrayMetadataV2JSON(TypedDict):
    """A v2 array's ``.zarray`` (its attributes are the separate ``.zattrs``)."""

    zarr_format: Literal[2]
    shape: list[int]
    chunks: list[int]
    #: a NumPy type string ("<u2"), or a list of fields for a structured type
    dtype: Any
    compressor: NumcodecsJSON | None
    fill_value: Any
    order: str
    filters: list[NumcodecsJSON] | None
    dimension_separator: str


class KvStoreJSON(TypedDict, total=False):
    """A TensorStore kvstore object as gpuzarr writes it (:meth:`gpuzarr.Array.spec`):
    ``{"driver": "file", "path": "/data/volume.zarr/"}``. Which members a driver has:
    https://google.github.io/tensorstore/kvstore/index.html"""

    driver: Required[Literal["file", "memory", "zip", "s3", "gcs", "http"]]
    #: a directory (``file``, ending in "/") or a key prefix (the others)
    path: str
    #: a zip kvstore's archive: a ``file`` kvstore whose path is the archive's file
    base: "KvStoreJSON"
    #: s3 and gcs
    bucket: str
    #: s3
    endpoint: str
    aws_region: str
    aws_credentials: dict[str, Any]
    requester_pays: bool
    host_header: str
    #: gcs
    user_project: str
    #: http
    base_url: str
    headers: list[str]


class TensorStoreSpecJSON(TypedDict):
    """A TensorStore spec that opens one array, as :meth:`gpuzarr.Array.spec` writes it (and
    ``gpuzarr.open`` and, for a local store, ``tensorstore.open`` read)."""

    driver: Literal["zarr3", "zarr2"]
    #: a kvstore object, or a URL (``memory://name``), whose array is then at ``path``
    kvstore: KvStoreJSON | str
    path: NotRequired[str]
    #: the array's v3 or v2 document, its attributes left out
    metadata: dict[str, Any]
    #: written only where they differ from TensorStore's defaults (True and False)
    fill_missing_data_reads: NotRequired[bool]
    store_data_equal_to_fill_value: NotRequired[bool]


__all__ = [
    "ArrayMetadataV2JSON",
    "ArrayMetadataV3JSON",
    "CodecJSON",
    "KvStoreJSON",
    "NamedConfigJSON",
    "NumcodecsJSON",
    "TensorStoreSpecJSON",
]
