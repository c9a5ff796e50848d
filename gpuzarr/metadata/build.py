"""Metadata for a new array from ``gpuzarr.create(...)``'s keyword arguments (v3 and v2).

:func:`build_v3` and :func:`build_v2` complete what the caller leaves out with
``ZARR_PYTHON_DEFAULTS``, so gpuzarr creates what zarr-python creates; TensorStore specs build
their metadata in :mod:`gpuzarr.tensorstore.create` with the same chain helpers
(:mod:`gpuzarr.metadata.chain`) and ``TENSORSTORE_DEFAULTS``. Pure: imports only ``metadata``.
"""

from __future__ import annotations

import math
import numbers
import operator
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError
from . import named_dtypes
from .auto_chunks import DEFAULT_MAX_BYTES, SHARDED_MAX_BYTES, normalize_chunks
from .chain import (
    DEFAULT_INDEX_CODECS,
    map_codecs,
    serializer_codec,
    with_transpose,
    wrap_in_sharding,
)
from .chunk_grid import RegularChunkGrid
from .chunk_key_encoding import ChunkKeyEncoding
from .codec_args import merge_compressor, v2_encoding, v3_chain
from .dtypes import CORE_DATA_TYPES, EXTENSION_DATA_TYPES, DataType
from .json_util import check_attributes
from .rectilinear import RectilinearChunkGrid
from .v2 import (
    OBJECT_CODEC_IDS,
    ArrayMetadataV2,
    object_codec_of,
    parse_v2_dtype,
    v2_dtype_string,
    v2_fill_from_python,
)
from .v3 import ArrayMetadata

if TYPE_CHECKING:
    from .json_types import CodecJSON, NumcodecsJSON


__all__ = ["TENSORSTORE_DEFAULTS", "ZARR_PYTHON_DEFAULTS", "CreateDefaults", "build_metadata", "build_v2", "build_v3"]


@dataclass(frozen=True)
class CreateDefaults:
    """What a library writes for a new array when the caller gives no codecs.

    Attributes
    ----------
    compressors
        v3: the bytes->bytes codecs after ``bytes`` when no chain is given.
    v2_compressor
        v2: the ``compressor`` of .zarray.
    index_codecs
        The shard index codecs of a ``sharding_indexed`` codec that gpuzarr adds.
    """

    compressors: tuple[CodecJSON, ...]
    v2_compressor: NumcodecsJSON
    index_codecs: tuple[CodecJSON, ...] = DEFAULT_INDEX_CODECS


#: zarr-python's defaults, used by ``gpuzarr.create``: zstd at level 0 (v3 and v2). The v2
#: compressor has no "checksum" member: TensorStore's zarr2 driver rejects it, and false is the
#: default anyway.
ZARR_PYTHON_DEFAULTS = CreateDefaults(
    compressors=({"name": "zstd", "configuration": {"level": 0, "checksum": False}},),
    v2_compressor={"id": "zstd", "level": 0},
)
#: TensorStore's defaults, used for TensorStore specs: ``bytes`` alone (v3), blosc lz4 (v2).
TENSORSTORE_DEFAULTS = CreateDefaults(
    compressors=(),
    v2_compressor={"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -1, "blocksize": 0},
)


def _shape_tuple(value: Any, field: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,)
    try:
        # operator.index, not int: a shape of (4.5,) was cut to (4,) without a word.
        shape = tuple(operator.index(v) for v in value)
    except TypeError as exc:
        raise MetadataError(f"{field}: expected a sequence of integers, got {value!r}") from exc
    return shape


def _codec_chain(
    dtype: DataType,
    ndim: int,
    codecs: Any,
    compressors: Any,
    filters: Any,
    serializer: Any,
    order: str,
) -> list[CodecJSON]:
    """The chain for a v3 array: explicit ``codecs``, or filters + serializer + compressors."""
    chain = v3_chain(
        dtype.numpy_dtype,
        codecs=codecs,
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        default_compressors=ZARR_PYTHON_DEFAULTS.compressors,
        default_serializer=serializer_codec(dtype),
    )
    if order == "F":
        chain = with_transpose(chain, tuple(range(ndim))[::-1], first=True)
    elif order != "C":
        raise MetadataError(f"order: expected 'C' or 'F', got {order!r}")
    return chain


def _is_rectilinear(chunks: Any) -> bool:
    return isinstance(chunks, (list, tuple)) and any(isinstance(c, (list, tuple)) for c in chunks)


def _rectilinear(chunks: Any, shape: tuple[int, ...], field: str) -> RectilinearChunkGrid:
    config = {
        "kind": "inline",
        # NumPy integers as Python's, whose JSON form the grid reads
        "chunk_shapes": [
            int(c) if isinstance(c, numbers.Integral) else [int(n) if isinstance(n, numbers.Integral) else n for n in c]
            for c in chunks
        ],
    }
    try:
        return RectilinearChunkGrid.from_json({"name": "rectilinear", "configuration": config}, shape)
    except MetadataError as exc:
        raise MetadataError(f"{field}: {exc}") from exc


def _chunk_shape(chunks: Any, shape: tuple[int, ...], typesize: int, sharded: bool = False) -> tuple[int, ...]:
    """The regular chunk shape ``chunks`` asks for; guessed as zarr-python does when omitted
    (aiming at smaller chunks when they are the inner chunks of shards)."""
    max_bytes = SHARDED_MAX_BYTES if sharded else DEFAULT_MAX_BYTES
    return normalize_chunks(chunks, shape, typesize, max_bytes=max_bytes)


def _within_shards(guess: tuple[int, ...], shards: Any) -> tuple[int, ...]:
    """Guessed inner chunks made to divide the shards (an axis's largest divisor of its shard
    extents, rectilinear ones too, no larger than the guess); the shards' own errors are left to
    their checks."""
    if not isinstance(shards, (list, tuple)) or len(shards) != len(guess):
        return guess
    out = []
    for g, extents in zip(guess, shards, strict=True):
        listed: list[Any] = [extents] if isinstance(extents, numbers.Integral) else list(extents)
        # NumPy integers too; booleans are no extents.
        if not listed or not all(not isinstance(n, bool) and isinstance(n, numbers.Integral) for n in listed):
            return guess
        sizes = [int(n) for n in listed]
        if min(sizes) <= 0:
            return guess
        out.append(_largest_divisor_at_most(math.gcd(*sizes), g))
    return tuple(out)


def _largest_divisor_at_most(n: int, limit: int) -> int:
    best = 1
    d = 1
    while d * d <= n:
        if n % d == 0:
            for divisor in (d, n // d):
                if best < divisor <= limit:
                    best = divisor
        d += 1
    return best


def _validated_grid(
    grid: RegularChunkGrid | RectilinearChunkGrid, ndim: int
) -> RegularChunkGrid | RectilinearChunkGrid:
    if isinstance(grid, RegularChunkGrid):
        return RegularChunkGrid.from_json(grid.to_json(), ndim)
    return grid


def build_v3(
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
    compressors: Any = "auto",
    serializer: Any = "auto",
) -> ArrayMetadata:
    """v3 metadata from ``gpuzarr.create``'s arguments (see its docstring), with zarr-python's
    defaults. ``shards`` wraps the chain in ``sharding_indexed`` with inner chunks ``chunks``.
    """
    shape_t = _shape_tuple(shape, "shape")
    data_type = DataType.from_numpy(dtype)
    shards, index_location = _shards_form(shards)
    auto_shards = isinstance(shards, str) and shards == "auto"
    if shards is None and _is_rectilinear(chunks):
        grid: RegularChunkGrid | RectilinearChunkGrid = _rectilinear(chunks, shape_t, "chunks")
        chunk_shape = grid.chunk_shape
    else:
        chunk_shape = _chunk_shape(chunks, shape_t, data_type.itemsize, sharded=shards is not None)
        if auto_shards:
            shards = _auto_shards(shape_t, chunk_shape)
        elif shards is not None and (chunks is None or chunks is True or (isinstance(chunks, str) and chunks == "auto")):  # noqa: E501
            # Guessed inner chunks: within the shards given, whose extents they must divide.
            chunk_shape = _within_shards(chunk_shape, shards)
        grid = RegularChunkGrid(chunk_shape)
    if len(chunk_shape) != len(shape_t):
        raise MetadataError(f"chunks: must have {len(shape_t)} entries, got {len(chunk_shape)}")
    compressors = merge_compressor(compressor, compressors)
    chain = map_codecs(
        _codec_chain(data_type, len(shape_t), codecs, compressors, filters, serializer, order), _numcodecs_written
    )
    for codec in chain:
        name = str(codec.get("name", ""))
        if name.startswith("numcodecs.") and name[len("numcodecs.") :] in OBJECT_CODEC_IDS:
            # zarr-python has no such v3 codecs (UnknownCodecError): an array only gpuzarr opens.
            raise MetadataError(
                f"codecs: {name} is a Zarr v2 object codec, which Zarr v3 arrays do not take "
                "(zarr-python does not open them); v3 text and bytes arrays take vlen-utf8 / vlen-bytes"
            )
    if shards is not None:
        if _is_rectilinear(shards):
            grid = _rectilinear(shards, shape_t, "shards")
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
        chain = wrap_in_sharding(chain, chunk_shape, ZARR_PYTHON_DEFAULTS.index_codecs, index_location)
    if isinstance(chunk_key_encoding, str):
        default_separator = "/" if chunk_key_encoding == "default" else "."
        cke = ChunkKeyEncoding(chunk_key_encoding, dimension_separator or default_separator)
    elif isinstance(chunk_key_encoding, dict):
        cke = ChunkKeyEncoding.from_json(chunk_key_encoding)
    elif chunk_key_encoding is None:
        cke = ChunkKeyEncoding("default", dimension_separator or "/")
    else:
        raise MetadataError(f"chunk_key_encoding: expected a name or an object, got {chunk_key_encoding!r}")
    names = None if dimension_names is None else _dimension_names(dimension_names)
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


def build_v2(
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
    compressors: Any = "auto",
    serializer: Any = "auto",
) -> ArrayMetadataV2:
    """v2 metadata from create() arguments; ``compressor``/``compressors``/``filters`` are
    numcodecs codecs or their JSON (:mod:`.codec_args`).

    ``dtype`` may carry a byte order (">f4") or be a structured dtype; it is written as given.
    """
    shape_t = _shape_tuple(shape, "shape")
    descr: Any
    named = _named_type(dtype)
    if named is not None:
        descr = v2_dtype_string(named, "big" if _byte_order(dtype) == ">" else "little")
    elif isinstance(dtype, str) and (dtype in EXTENSION_DATA_TYPES or dtype.startswith("r")):
        data_type_v3 = DataType.from_numpy(dtype)
        descr = dtype if dtype in EXTENSION_DATA_TYPES else f"|V{data_type_v3.itemsize}"
    else:
        try:
            npdt = np.dtype(CORE_DATA_TYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
        except Exception as exc:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
            raise MetadataError(f"dtype: {dtype!r} is not a data type") from exc
        descr = npdt.descr if npdt.fields is not None else npdt.str
        if npdt.name in EXTENSION_DATA_TYPES:
            descr = npdt.name
        elif npdt.fields is None and npdt.itemsize > 1 and npdt.byteorder == "=":
            descr = npdt.newbyteorder("<").str
    v2_compressor, v2_filters = v2_encoding(
        compressors=merge_compressor(compressor, compressors),
        filters=filters,
        serializer=serializer,
        default_compressor=ZARR_PYTHON_DEFAULTS.v2_compressor,
    )
    filter_list = list(v2_filters or [])
    data_type, endian = parse_v2_dtype(
        [list(d) for d in descr] if isinstance(descr, list) else descr,
        # zarr-python 2's dtype=object with an object codec in filters says what it holds.
        object_codec=named.object_codec_id if named is not None else object_codec_of(filter_list, v2_compressor),
    )
    chunk_shape = _chunk_shape(chunks, shape_t, data_type.itemsize)
    codec_id = data_type.object_codec_id
    compressor_is_object_codec = isinstance(v2_compressor, dict) and v2_compressor.get("id") == codec_id
    if codec_id is not None and not filter_list and not compressor_is_object_codec:
        filter_list = [{"id": codec_id}]  # zarr-python's default filters for the type
    elif codec_id is not None and object_codec_of(filter_list, v2_compressor) is None:
        raise MetadataError(
            f"filters: a {data_type.name} array needs the object codec {codec_id!r} as its first filter"
        )
    elif codec_id is None and (found := object_codec_of(filter_list, v2_compressor)) is not None:
        # zarr-python refuses to open such an array ("No Zarr data type found"); pickle is
        # refused wherever it stands (numcodecs_codec.UNSAFE_IDS).
        raise MetadataError(
            f"filters: {found!r} is an object codec, for arrays of dtype object ('|O'), not {data_type.name}"
        )
    if order not in ("C", "F"):
        raise MetadataError(f"order: expected 'C' or 'F', got {order!r}")
    metadata = ArrayMetadataV2(
        shape=shape_t,
        data_type=data_type,
        chunk_grid=RegularChunkGrid(chunk_shape),
        fill_value_v2=v2_fill_from_python(fill_value, data_type),
        endian=endian,
        order=order,
        compressor=v2_compressor,
        filters=tuple(dict(f) for f in filter_list) or None,
        dimension_separator=dimension_separator or ".",
        attributes=dict(attributes or {}),
    )
    v2_dtype_string(data_type, endian)
    return metadata


def _named_type(dtype: Any) -> DataType | None:
    """The data type of a string, bytes or time ``dtype`` (named_dtypes), else None."""
    if isinstance(dtype, (dict, DataType)) or dtype is str or (
        isinstance(dtype, str) and dtype in (*named_dtypes.NAMES, "str")
    ):
        data_type = DataType.from_numpy(dtype)
        return data_type if data_type.name in named_dtypes.NAMES else None
    try:
        npdt = np.dtype(dtype)
    except Exception:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
        return None
    # Object arrays are parsed with the object codec of their filters, as v2 metadata is.
    return DataType.from_numpy(npdt) if npdt.kind in named_dtypes.KINDS.replace("O", "") else None


def _byte_order(dtype: Any) -> str:
    try:
        order: str = np.dtype(dtype).byteorder
    except Exception:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
        return "="
    return order


def _dimension_names(value: Any) -> tuple[str | None, ...]:
    """``dimension_names`` as given to a create: strings or None (an integer was written, and
    the array could not be opened again; bytes failed in the JSON encoder)."""
    if not hasattr(value, "__iter__"):  # a string is its characters, as zarr-python takes it
        raise MetadataError(f"dimension_names: expected a sequence of strings or None, got {value!r}")
    names = tuple(value)
    bad = [n for n in names if n is not None and not isinstance(n, str)]
    if bad:
        raise MetadataError(f"dimension_names: expected strings or None, got {bad[0]!r} in {list(names)!r}")
    return names


def zarr_python_data_type(dtype: Any) -> Any:
    """``dtype``, or what a data type object of zarr-python's (``zarr.dtype.Int8()``,
    ``VariableLengthUTF8()``, ``DateTime64(unit="s")``, ...) stands for: its NumPy dtype (which
    keeps a byte order), or its Zarr v3 JSON where that dtype is ``object`` (variable-length
    bytes). Anything else is returned as it is."""
    module = type(dtype).__module__ or ""
    if not module.startswith("zarr.core.dtype") or not callable(getattr(dtype, "to_native_dtype", None)):
        return dtype
    native = np.dtype(dtype.to_native_dtype())
    if native.kind != "O":
        return native
    with warnings.catch_warnings():  # zarr-python's warning that its v3 form may change
        warnings.simplefilter("ignore")
        return dtype.to_json(zarr_format=3)


def build_metadata(
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = None,
    shards: Any = None,
    zarr_format: int = 3,
    codecs: Any = None,
    compressor: Any = "auto",
    filters: Any = None,
    order: str = "C",
    fill_value: Any = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_separator: str | None = None,
    compressors: Any = "auto",
    serializer: Any = "auto",
) -> ArrayMetadata | ArrayMetadataV2:
    """v3 or v2 metadata from ``gpuzarr.create``'s arguments (:func:`build_v3`, :func:`build_v2`).

    Raises MetadataError for a v3-only argument with ``zarr_format=2``, an unknown format, or
    attributes that cannot be written as JSON (see :func:`check_attributes`; those of a node
    copied keep their NaN and infinite numbers in :func:`keeping_attributes`'s block).
    """
    metadata: ArrayMetadata | ArrayMetadataV2
    dtype = zarr_python_data_type(dtype)
    if zarr_format == 3:
        metadata = build_v3(
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            shards=shards,
            codecs=codecs,
            compressor=compressor,
            filters=filters,
            order=order,
            fill_value=fill_value,
            dimension_names=dimension_names,
            attributes=attributes,
            chunk_key_encoding=chunk_key_encoding,
            dimension_separator=dimension_separator,
            compressors=compressors,
            serializer=serializer,
        )
    elif zarr_format == 2:
        for name, value in (("shards", shards), ("codecs", codecs), ("dimension_names", dimension_names),
                            ("chunk_key_encoding", chunk_key_encoding)):
            if value is not None:
                raise MetadataError(f"{name}: not available for zarr_format=2")
        metadata = build_v2(
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            compressor=compressor,
            filters=filters,
            order=order,
            fill_value=fill_value,
            attributes=attributes,
            dimension_separator=dimension_separator,
            compressors=compressors,
            serializer=serializer,
        )
    else:
        raise MetadataError(f"zarr_format: expected 2 or 3, got {zarr_format!r}")
    check_attributes(metadata.attributes)
    return metadata




def _shards_form(shards: Any) -> tuple[Any, str]:
    """zarr-python's forms of ``shards``: (the shard shape, "auto" or None, and the index
    location). A dict ``{"shape": ..., "index_location": "start" | "end"}`` says both."""
    if not isinstance(shards, dict):
        return shards, "end"
    extra = set(shards) - {"shape", "index_location"}
    if extra:
        raise MetadataError(f"shards: unexpected members {sorted(extra)} (expected 'shape' and 'index_location')")
    if "shape" not in shards:
        raise MetadataError("shards.shape: required in the dict form of shards")
    location = shards.get("index_location") or "end"
    if location not in ("start", "end"):
        raise MetadataError(f"shards.index_location: expected 'start' or 'end', got {location!r}")
    return shards["shape"], str(location)


def _auto_shards(shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shards="auto"`` as zarr-python 3.1 chooses them (it calls the rule experimental): two
    chunks along each axis holding more than eight chunks, one along the others."""
    return tuple(c * 2 if c and n // c > 8 else c for n, c in zip(shape, chunk_shape, strict=True))


#: The members of numcodecs filters that name a data type numcodecs views chunks as.
_VIEWED_TYPE_MEMBERS = ("dtype", "astype", "encode_dtype", "decode_dtype")


def _numcodecs_written(codec: dict[str, Any]) -> dict[str, Any]:
    """A ``numcodecs.*`` codec (JSON) as a new array writes it; other codecs as they are.

    - An empty ``configuration`` is written out where there is none: the spec makes the member
      optional, but zarr-python opens no numcodecs codec without it ("Named configuration does
      not have a 'configuration' key").
    - The data types its configuration names are written little-endian. numcodecs views what it
      is handed as those types without converting it, and zarr-python's writer, its reader of
      arrays stored little-endian (as it stores every array it makes, a ``dtype=">i4"`` one too)
      and gpuzarr hand it chunks in the machine's order, little-endian on the machines both run
      on. A big-endian type (``delta(dtype=">i4")``) made the filter code other values than the
      array's, and the data did not come back, in either library.
    """
    if not str(codec.get("name", "")).startswith("numcodecs."):
        return codec
    config = dict(codec.get("configuration") or {})
    for member in _VIEWED_TYPE_MEMBERS:
        value = config.get(member)
        if not isinstance(value, str) or not value.startswith(">"):
            continue
        try:
            typed = np.dtype(value)
        except TypeError:
            continue
        if typed.itemsize > 1:
            config[member] = typed.newbyteorder("<").str
    return {**codec, "configuration": config}
