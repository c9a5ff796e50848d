"""Zarr v2 metadata (``.zarray`` + ``.zattrs``), normalised into the v3 chain model.

Everything above metadata/ sees one model: a v2 array becomes a :class:`ArrayMetadataV2` whose
``codecs`` is a v3-style chain —

* ``order: "F"``                 -> a reversing ``transpose`` codec,
* the dtype's byte order         -> the ``bytes`` codec's ``endian``,
* an object array's object codec -> the array->bytes codec in place of ``bytes`` (``vlen-utf8``
  or ``vlen-bytes``, the first filter, or the compressor when there are no filters),
* ``filters`` and ``compressor`` -> bytes->bytes codecs (``blosc``, ``zstd``, ``gzip`` map to the
  native codecs; every other numcodecs id to ``numcodecs.<id>``),
* ``dimension_separator``        -> the ``v2`` chunk key encoding,

while the original v2 fields are kept so that the metadata is written back as v2.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..errors import MetadataError
from . import named_dtypes
from .chunk_grid import RegularChunkGrid
from .chunk_key_encoding import ChunkKeyEncoding
from .dtypes import CORE_DATA_TYPES, EXTENSION_DATA_TYPES, DataType
from .json_util import document_bytes, expect_dict, expect_int_list
from .limits import check_chunk_bytes, check_shape

if TYPE_CHECKING:
    from .json_types import ArrayMetadataV2JSON, CodecJSON, NumcodecsJSON

ZARRAY = ".zarray"
ZATTRS = ".zattrs"
ZGROUP = ".zgroup"

_V2_FIELDS = {
    "zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters",
    "dimension_separator",
}
_NATIVE_COMPRESSORS = {"blosc", "zstd", "gzip"}
#: numcodecs' object codecs (zarr-python's list): the one among filters and compressor tells
#: what an object ('|O') array holds.
OBJECT_CODEC_IDS = ("vlen-utf8", "vlen-bytes", "vlen-array", "pickle", "json2", "msgpack2")
_OBJECT_TYPES = {"vlen-utf8": named_dtypes.STRING, "vlen-bytes": named_dtypes.VARIABLE_LENGTH_BYTES}
_BLOSC_SHUFFLE_NAMES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def object_codec_of(filters: Any, compressor: Any) -> str | None:
    """The id of the first object codec among ``filters`` and ``compressor`` (as zarr-python
    looks for it), or None."""
    for config in [*(filters if isinstance(filters, (list, tuple)) else ()), compressor]:
        if isinstance(config, dict) and config.get("id") in OBJECT_CODEC_IDS:
            return str(config["id"])
    return None


def parse_v2_dtype(
    value: Any, field_name: str = "dtype", object_codec: str | None = None
) -> tuple[DataType, str | None]:
    """A v2 dtype (string or structured list) -> (DataType, bytes-codec endian or None).

    ``object_codec`` is the object codec id found in the filters or compressor
    (:func:`object_codec_of`), which says what an object dtype (``|O``) holds.
    """
    if isinstance(value, list):
        try:
            npdt = np.dtype(_numpy_fields(value))
        except Exception as exc:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
            raise MetadataError(f"{field_name}: invalid structured dtype {value!r} ({exc})") from exc
        if npdt.itemsize == 0 or npdt.hasobject:
            # Chunks are raw bytes: an element needs a size, and bytes never become objects.
            raise MetadataError(
                f"{field_name}: a structured dtype needs fields of fixed, nonzero size, got {value!r}"
            )
        return DataType("structured", npdt), None
    if not isinstance(value, str):
        raise MetadataError(f"{field_name}: expected a dtype string or a list of fields, got {value!r}")
    if value in EXTENSION_DATA_TYPES:
        # TensorStore's extensions, written without a byte order (always little endian).
        data_type = DataType.from_json(value, field_name)
        return data_type, "little" if data_type.itemsize > 1 else None
    if len(value) >= 3 and value[0] in "|<>" and value[1] == "V" and value[2:].isdigit():
        return DataType.from_json(f"r{8 * int(value[2:])}", field_name), None
    try:
        npdt = np.dtype(value)
    except Exception as exc:  # SyntaxError from '(,)<u2' (comma strings go through ast), ValueError, ...
        raise MetadataError(f"{field_name}: {value!r} is not a valid dtype string") from exc
    if npdt.kind == "O":
        return _object_data_type(value, field_name, object_codec), None
    if len(value) < 3 or value[0] not in "<>|":
        raise MetadataError(f"{field_name}: {value!r} must start with a byte order '<', '>' or '|'")
    if npdt.kind in "SUMm":
        return _named_v2_dtype(value, npdt, field_name)
    if npdt.kind not in "biufc":
        raise MetadataError(f"{field_name}: data type {value!r} is not supported (numeric types only)")
    native = npdt.newbyteorder("=")
    name = next((n for n, code in CORE_DATA_TYPES.items() if np.dtype(code) == native.newbyteorder("<")), None)
    if name is None:
        raise MetadataError(f"{field_name}: data type {value!r} is not supported")
    data_type = DataType(name, native)
    if npdt.itemsize == 1:
        return data_type, None
    if value[0] == "|":
        raise MetadataError(f"{field_name}: {value!r} needs a byte order ('<' or '>')")
    return data_type, "little" if value[0] == "<" else "big"


def _object_data_type(value: str, field_name: str, object_codec: str | None) -> DataType:
    """What an object array holds, by its object codec (zarr-python reads the same two)."""
    if value != "|O":
        raise MetadataError(f"{field_name}: object arrays are written '|O', got {value!r}")
    if object_codec is None:
        raise MetadataError(
            f"{field_name}: an object array ('|O') needs an object codec (vlen-utf8 or vlen-bytes) in "
            "filters or compressor, and has none"
        )
    name = _OBJECT_TYPES.get(object_codec)
    if name is None:
        raise MetadataError(
            f"{field_name}: object arrays encoded with {object_codec!r} are not supported "
            "(only vlen-utf8 strings and vlen-bytes bytes)"
        )
    return DataType.from_json(name, field_name)


def _named_v2_dtype(value: str, npdt: np.dtype[Any], field_name: str) -> tuple[DataType, str | None]:
    """Fixed-length bytes and strings (``|S8``, ``<U8``) and times (``<M8[s]``, ``<m8[ns]``)."""
    if npdt.kind == "S" and value[0] != "|":
        raise MetadataError(f"{field_name}: bytes types are written '|S<n>', got {value!r}")
    if npdt.kind != "S" and value[0] == "|":
        raise MetadataError(f"{field_name}: {value!r} needs a byte order ('<' or '>')")
    named = named_dtypes.from_numpy(npdt)
    assert named is not None
    endian = None if npdt.kind == "S" else ("little" if value[0] == "<" else "big")
    return DataType(*named), endian


def _numpy_fields(fields: list[Any] | tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """A v2 structured dtype's JSON fields as NumPy takes them: JSON gives lists where NumPy
    wants tuples, for each field, a subarray field's shape and, in turn, the fields of a nested
    structure (``[["a", "u1"], ["n", [["x", "<f4"]]]]``, which zarr-python 2 wrote)."""
    out: list[tuple[Any, ...]] = []
    for f in fields:
        if not isinstance(f, (list, tuple)) or len(f) not in (2, 3):
            raise ValueError(f"field {f!r} is not [name, dtype] or [name, dtype, shape]")
        dtype = _numpy_fields(f[1]) if isinstance(f[1], (list, tuple)) else f[1]
        out.append((f[0], dtype) if len(f) == 2 else (f[0], dtype, tuple(f[2])))
    return out


def v2_dtype_string(data_type: DataType, endian: str | None) -> Any:
    dt = data_type.numpy_dtype
    if data_type.name in named_dtypes.NAMES:
        return named_dtypes.v2_dtype(data_type.name, dt, endian)
    if dt.fields is not None:
        return [list(_field_descr(f)) for f in dt.descr]
    if data_type.name in EXTENSION_DATA_TYPES:
        return data_type.name
    if data_type.fill_kind == "r":
        return f"|V{dt.itemsize}"
    if dt.itemsize == 1:
        return "|" + dt.str[1:]
    return ("<" if endian != "big" else ">") + dt.str[1:]


def _field_descr(descr: tuple[Any, ...]) -> tuple[Any, ...]:
    return descr if len(descr) == 3 else descr[:2]


#: Extension types whose v2 fill value TensorStore's zarr2 driver writes and reads only as base64
#: bytes (a number is refused there); gpuzarr writes them so, and reads either.
_V2_BASE64_FILL_TYPES = frozenset({"float4_e2m1fn"})


def _fill_from_v2(value: Any, data_type: DataType, field_name: str = "fill_value") -> np.generic | None:
    if value is None:
        return None
    dt = data_type.numpy_dtype
    if data_type.name in named_dtypes.VLEN_BYTES_NAMES and value == 0 and type(value) is int:
        # zarr-python 2's dtype=bytes wrote 0, which numcodecs' vlen-bytes stores as b"".
        return data_type.fill_value_from_json("", field_name)
    if data_type.name in named_dtypes.NAMES:
        return data_type.fill_value_from_json(value, field_name)  # the same JSON as in v3
    special = ("NaN", "Infinity", "-Infinity")
    is_bytes = (
        dt.fields is not None
        or data_type.fill_kind == "r"
        or (data_type.name in _V2_BASE64_FILL_TYPES and isinstance(value, str) and value not in special)
    )
    if is_bytes or (isinstance(value, str) and data_type.fill_kind not in "fc" and value not in special):
        if not isinstance(value, str):
            raise MetadataError(f"{field_name}: expected base64 bytes for a structured type, got {value!r}")
        try:
            decoded = base64.standard_b64decode(value)
        except ValueError as exc:
            raise MetadataError(f"{field_name}: {value!r} is not valid base64") from exc
        if len(decoded) != dt.itemsize:
            raise MetadataError(
                f"{field_name}: base64 value has {len(decoded)} bytes, expected {dt.itemsize}"
            )
        return cast("np.generic", np.frombuffer(decoded, dtype=dt)[0])
    if dt.kind == "c" and isinstance(value, (int, float)) and not isinstance(value, bool):
        # A number is the real part, parsed (and refused when it overflows) as that float type.
        real = DataType.from_json(f"float{4 * dt.itemsize}").fill_value_from_json(value, field_name)
        return dt.type(real)  # type: ignore[no-any-return]
    if dt.kind == "b" and isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return np.bool_(value)
    if data_type.fill_kind == "f" and isinstance(value, str) and _DECIMAL.fullmatch(value):
        # A number written as a string ("1.5"): zarr-python and TensorStore's zarr2 driver read it.
        return data_type.fill_value_from_json(float(value), field_name)
    return data_type.fill_value_from_json(value, field_name)


#: A JSON number's form, as a v2 float fill written as a string may hold one
_DECIMAL = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _fill_to_v2(value: np.generic | None, data_type: DataType) -> Any:
    if value is None:
        return None
    dt = data_type.numpy_dtype
    if dt.kind == "S":
        # All the bytes, NULs included: TensorStore's zarr2 driver reads no shorter form.
        return base64.standard_b64encode(np.asarray(value, dtype=dt).tobytes()).decode()
    if data_type.name in named_dtypes.NAMES:
        return data_type.fill_value_to_json(value)
    if dt.fields is not None or data_type.fill_kind == "r" or data_type.name in _V2_BASE64_FILL_TYPES:
        return base64.standard_b64encode(np.asarray(value, dtype=dt).tobytes()).decode()
    if data_type.fill_kind == "f":
        return _float_to_v2(float(value))
    if data_type.fill_kind == "c":
        # Each part as a real fill is written: v2 has no hex bit patterns (the v3 form), which
        # zarr-python refuses and TensorStore's zarr2 driver reads as a number.
        number = complex(value)
        return [_float_to_v2(number.real), _float_to_v2(number.imag)]
    return data_type.fill_value_to_json(value)


def _float_to_v2(f: float) -> Any:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def v2_fill_from_python(value: Any, data_type: DataType) -> np.generic | None:
    """A fill value given to a create, as the v2 metadata will hold it: what ``.zarray`` says,
    read back. The handle that creates an array and every later one then agree (a NaN's
    payload, which v2's ``"NaN"`` does not keep, made the creating handle skip writing chunks of
    that NaN, which read back as another one)."""
    if value is None:
        return None
    dt = data_type.numpy_dtype
    fill = _record_from_python(value, dt) if dt.fields is not None else data_type.fill_value_from_python(value)
    return _fill_from_v2(_fill_to_v2(fill, data_type), data_type)


def _record_from_python(value: Any, dt: np.dtype[Any]) -> np.generic:
    """A structured type's fill value: a record (a tuple or list of one value per field, a
    NumPy record) or its bytes."""
    if isinstance(value, bytes):
        if len(value) != dt.itemsize:
            raise MetadataError(f"fill_value: {len(value)} bytes given for a record of {dt.itemsize} bytes")
        return cast("np.generic", np.frombuffer(value, dtype=dt)[0])
    if isinstance(value, list) and dt.names is not None and len(value) == len(dt.names):
        value = tuple(value)  # JSON's record: NumPy takes a list for many records
    try:
        record = np.asarray(value, dtype=dt)
    except (TypeError, ValueError, OverflowError) as exc:
        raise MetadataError(f"fill_value: {value!r} is not a record of {dt} ({exc})") from exc
    if record.shape != ():
        raise MetadataError(
            f"fill_value: expected one record of {dt} (a tuple of one value per field), got {value!r}"
        )
    return cast("np.generic", record[()])


#: The largest element size c-blosc shuffles (larger elements are taken as single bytes).
_BLOSC_MAX_TYPESIZE = 255


def compressor_to_codec(config: NumcodecsJSON, typesize: int, field_name: str) -> CodecJSON:
    """A numcodecs compressor/filter config -> a v3-style codec JSON object."""
    config = expect_dict(config, field_name)
    codec_id = config.get("id")
    if not isinstance(codec_id, str):
        raise MetadataError(f"{field_name}.id: expected a codec id string, got {codec_id!r}")
    params = {k: v for k, v in config.items() if k != "id"}
    if codec_id == "blosc":
        shuffle = params.get("shuffle", 1)
        if shuffle == -1:  # AUTOSHUFFLE: bit-shuffle for 1-byte types, byte-shuffle otherwise
            shuffle = 2 if typesize == 1 else 1
        if isinstance(shuffle, bool) or not isinstance(shuffle, int) or shuffle not in _BLOSC_SHUFFLE_NAMES:
            raise MetadataError(f"{field_name}.shuffle: expected -1, 0, 1 or 2, got {shuffle!r}")
        return {
            "name": "blosc",
            "configuration": {
                "cname": params.get("cname", "lz4"),
                "clevel": params.get("clevel", 5),
                "shuffle": _BLOSC_SHUFFLE_NAMES[shuffle],
                # c-blosc takes elements of more than 255 bytes as single bytes, and says so
                # in the frames it writes (BLOSC_MAX_TYPESIZE).
                "typesize": typesize if typesize <= _BLOSC_MAX_TYPESIZE else 1,
                "blocksize": params.get("blocksize", 0),
            },
        }
    if codec_id == "zstd":
        level, checksum = params.get("level", 1), params.get("checksum", False)
        return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}
    if codec_id == "gzip":
        return {"name": "gzip", "configuration": {"level": params.get("level", 1)}}
    if codec_id == "shuffle" and params.get("elementsize") is None:
        # numcodecs' own default, which a numcodecs config means; in a v3 chain a shuffle
        # without it would shuffle elements of the data type's size (zarr-python's rule).
        params["elementsize"] = 4
    return {"name": f"numcodecs.{codec_id}", "configuration": params}


@dataclass(frozen=True, eq=False)
class ArrayMetadataV2:
    """Validated Zarr v2 array metadata with its v3-model view (``codecs`` etc.)."""

    shape: tuple[int, ...]
    data_type: DataType
    chunk_grid: RegularChunkGrid
    fill_value_v2: np.generic | None
    endian: str | None
    order: str = "C"
    compressor: NumcodecsJSON | None = None
    filters: tuple[NumcodecsJSON, ...] | None = None
    dimension_separator: str = "."
    attributes: dict[str, Any] = field(default_factory=dict)
    zarr_format: int = 2
    #: Members of .zarray this format does not define: ignored, as the v2 spec asks ("Other keys
    #: SHOULD NOT be present ... and SHOULD be ignored"), and written back unchanged.
    extra_fields: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(s < 0 for s in self.shape):
            raise MetadataError(f"shape: entries must be >= 0, got {list(self.shape)}")
        check_shape(self.shape, "shape")
        check_shape(self.chunk_shape, "chunks")
        check_chunk_bytes(self.chunk_shape, self.dtype, "chunks")
        # Validate the codec configs now so bad metadata fails at open time.
        self.codecs  # noqa: B018

    # -- the v3 model ----------------------------------------------------------------------------

    @property
    def fill_value(self) -> np.generic:
        if self.fill_value_v2 is None:
            return self.data_type.default_fill_value()
        return self.fill_value_v2

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.data_type.numpy_dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self.chunk_grid.chunk_shape

    @property
    def dimension_names(self) -> None:
        return None

    @cached_property
    def chunk_key_encoding(self) -> ChunkKeyEncoding:
        # Cached: every chunk read asks for its key (a frozen dataclass costs ~1 µs to build).
        return ChunkKeyEncoding("v2", self.dimension_separator)

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        return self.chunk_key_encoding.encode(coords)

    @property
    def codecs(self) -> tuple[CodecJSON, ...]:
        return tuple(codec for codec, _ in self._chain)

    @property
    def codec_fields(self) -> tuple[str, ...]:
        """The .zarray field each of :attr:`codecs` comes from (``order``, ``dtype``,
        ``filters[i]``, ``compressor``), which errors about a codec name."""
        return tuple(where for _, where in self._chain)

    @cached_property
    def _chain(self) -> tuple[tuple[CodecJSON, str], ...]:
        # Cached: a consolidated group's members() asked for it three times an array.
        chain: list[tuple[CodecJSON, str]] = []
        if self.order == "F" and self.ndim > 1:
            chain.append(({"name": "transpose", "configuration": {"order": list(range(self.ndim))[::-1]}}, "order"))
        # (field, numcodecs config) of the filters, then the compressor
        stages = [(f"filters[{i}]", f) for i, f in enumerate(self.filters or ())]
        if self.compressor is not None:
            stages.append(("compressor", self.compressor))
        object_codec = self.data_type.object_codec_id
        if object_codec is None:
            bytes_config = {} if self.endian is None else {"endian": self.endian}
            chain.append(({"name": "bytes", "configuration": bytes_config}, "dtype"))
            typesize = self.dtype.itemsize
        else:
            # The object codec turns the elements into bytes, so it must come first; what
            # follows compresses plain bytes.
            where, first = stages.pop(0) if stages else ("filters", None)
            if first is None or first.get("id") != object_codec:
                raise MetadataError(
                    f"{where}: the object codec {object_codec!r} must be the first filter (or the "
                    f"compressor when there are no filters), got {first!r}"
                )
            extra = set(first) - {"id"}
            if extra:
                raise MetadataError(f"{where}: unexpected members {sorted(extra)} of {object_codec!r}")
            chain.append(({"name": object_codec, "configuration": {}}, where))
            typesize = 1
        for where, config in stages:
            chain.append((compressor_to_codec(config, typesize, where), where))
        return tuple(chain)

    def evolve(self, **changes: Any) -> ArrayMetadataV2:
        return replace(self, **changes)

    # -- JSON ------------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Any, attributes: Any = None) -> ArrayMetadataV2:
        doc = expect_dict(doc, ZARRAY)
        if doc.get("zarr_format") != 2:
            raise MetadataError(f"zarr_format: expected 2, got {doc.get('zarr_format')!r}")
        extra = {k: v for k, v in doc.items() if k not in _V2_FIELDS}
        for required in ("shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters"):
            if required not in doc:
                raise MetadataError(f"{required}: required field is missing")
        shape = tuple(expect_int_list(doc["shape"], "shape"))
        chunks = expect_int_list(doc["chunks"], "chunks")
        if len(chunks) != len(shape):
            raise MetadataError(f"chunks: must have {len(shape)} entries, got {len(chunks)}")
        if any(c <= 0 for c in chunks):
            raise MetadataError(f"chunks: entries must be positive, got {chunks}")
        compressor = doc["compressor"]
        if compressor is not None:
            compressor = expect_dict(compressor, "compressor")
        filters = doc["filters"]
        if filters is not None:
            if not isinstance(filters, list):
                raise MetadataError(f"filters: expected a list or null, got {filters!r}")
            filters = tuple(expect_dict(f, f"filters[{i}]") for i, f in enumerate(filters))
        data_type, endian = parse_v2_dtype(doc["dtype"], object_codec=object_codec_of(filters, compressor))
        order = doc["order"]
        if order not in ("C", "F"):
            raise MetadataError(f"order: expected 'C' or 'F', got {order!r}")
        separator = doc.get("dimension_separator", ".")
        if separator not in (".", "/"):
            raise MetadataError(f"dimension_separator: expected '.' or '/', got {separator!r}")
        fill = _fill_from_v2(doc["fill_value"], data_type)
        return cls(
            shape=shape,
            data_type=data_type,
            chunk_grid=RegularChunkGrid(tuple(chunks)),
            fill_value_v2=fill,
            endian=endian,
            order=order,
            compressor=compressor,
            filters=filters or None,
            dimension_separator=separator,
            attributes=dict(expect_dict(attributes, ZATTRS)) if attributes is not None else {},
            extra_fields=extra,
        )

    def to_json(self) -> ArrayMetadataV2JSON:
        return {
            "zarr_format": 2,
            "shape": list(self.shape),
            "chunks": list(self.chunk_shape),
            "dtype": v2_dtype_string(self.data_type, self.endian),
            "compressor": self.compressor,
            "fill_value": _fill_to_v2(self.fill_value_v2, self.data_type),
            "order": self.order,
            "filters": list(self.filters) if self.filters else None,
            "dimension_separator": self.dimension_separator,
        }

    def to_dict(self) -> dict[str, Any]:
        """The .zarray document with the attributes of .zattrs, as a new dict of JSON values
        (zarr-python's ``to_dict``)."""
        return copy.deepcopy({**self.to_json(), "attributes": self.attributes})

    def documents(self) -> dict[str, bytes]:
        """The metadata documents to store, by key relative to the array."""
        # Members the format does not define go back where they were (not into to_json(), which
        # specs and comparisons take: TensorStore refuses extra members there).
        zarray = {**self.extra_fields, **self.to_json()}
        docs = {ZARRAY: json.dumps(zarray, indent=2, allow_nan=False).encode()}
        docs[ZATTRS] = document_bytes(self.attributes, attributes_member=None)
        return docs
