"""The codec arguments of ``gpuzarr.create`` -> the JSON that a new array's metadata stores.

The keywords and their meanings are zarr-python 3's (``create_array``): ``filters``,
``serializer`` and ``compressors`` (a codec or a list; ``"auto"`` for the default, None or
``[]`` for none), the Zarr v2 spelling ``compressor``, and gpuzarr's full v3 chain ``codecs``.
Each codec may be

* a zarr-python codec object (``zarr.codecs.ZstdCodec(level=3)``,
  ``zarr.codecs.numcodecs.Delta(dtype="<i4")``), recognised by its ``to_dict()``;
* a numcodecs codec object (``numcodecs.Zstd(level=3)``), recognised by its ``get_config()``;
* JSON: ``{"name": ..., "configuration": {...}}`` or a name (v3), ``{"id": ...}`` (numcodecs).

Objects are recognised by these methods, not by their classes, so that neither library is
imported here. For v3, numcodecs codecs map as zarr-python's v2 -> v3 migration maps them
(``zarr.metadata.migrate_v3``): blosc, zstd and gzip to the codecs of the Zarr specification,
any other to ``numcodecs.<id>``. For v2, ``numcodecs.<id>`` codecs map back to ``{"id": ...}``.
Pure: JSON in, JSON out.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgumentError
from .chain import DEFAULT_INDEX_CODECS, bytes_codec, codec_kind, normalize_codec_json, with_array_to_bytes
from .numcodecs_v3 import encoded_dtype, numcodecs_id, with_dtype_defaults
from .v2 import compressor_to_codec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .json_types import CodecJSON, NumcodecsJSON

__all__ = ["merge_compressor", "v2_encoding", "v3_chain"]

_KIND_WORDS = {
    "array_to_array": "an array->array codec (a filter)",
    "array_to_bytes": "an array->bytes codec (a serializer)",
    "bytes_to_bytes": "a bytes->bytes codec (a compressor)",
}
_KEYWORD_OF_KIND = {"array_to_array": "filters", "array_to_bytes": "serializer", "bytes_to_bytes": "compressors"}


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"


def merge_compressor(compressor: Any, compressors: Any) -> Any:
    """``compressors`` after the v2 spelling ``compressor`` (one codec, or None for none)."""
    if _is_auto(compressor):
        return compressors
    if not _is_auto(compressors):
        raise InvalidArgumentError(
            "compressor, compressors: give one of them (compressor is the Zarr v2 spelling of compressors)"
        )
    return [] if compressor is None else compressor


def _as_list(value: Any) -> list[Any]:
    """None, a single codec or a sequence of codecs -> a list of codecs."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _plain_json(value: Any, field: str) -> Any:
    # zarr-python's to_dict() gives tuples (shapes, nested chains): store them as JSON lists.
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{field}: the codec's configuration is not JSON ({exc})") from exc


def _object_json(value: Any, field: str) -> dict[str, Any] | str | None:
    """The JSON of a codec object or a JSON codec; None when ``value`` is neither."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return _plain_json(to_dict(), field)  # type: ignore[no-any-return]
    get_config = getattr(value, "get_config", None)
    if callable(get_config):
        return _plain_json(get_config(), field)  # type: ignore[no-any-return]
    if isinstance(value, dict):
        return _plain_json(value, field)  # type: ignore[no-any-return]
    if isinstance(value, str):
        return value
    return None


def codec_json(value: Any, field: str) -> dict[str, Any]:
    """One codec argument (a zarr-python or numcodecs codec object, or JSON of either format) as
    its JSON, unchecked: where it goes, its format's chain checks it."""
    found = _object_json(value, field)
    if not isinstance(found, dict) or not ("id" in found or "name" in found):
        raise _not_a_codec(value, field)
    return found


def _not_a_codec(value: Any, field: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{field}: expected a codec (a zarr-python or numcodecs codec object, or its JSON), got {value!r}"
    )


def _blosc_tunables(value: Any, codec: dict[str, Any], itemsize: int) -> dict[str, Any]:
    # zarr-python's BloscCodec() marks the members left at None (typesize, shuffle) in
    # ``_tunable_attrs`` and derives them from the data type when the array is created; its
    # to_dict() shows placeholders (typesize 1, bitshuffle) instead. Derive them the same way.
    tunable = getattr(value, "_tunable_attrs", None)
    if codec.get("name") != "blosc" or not isinstance(tunable, (set, frozenset)):
        return codec
    config = dict(codec.get("configuration") or {})
    if "typesize" in tunable:
        config["typesize"] = itemsize
    if "shuffle" in tunable:
        config["shuffle"] = "bitshuffle" if itemsize == 1 else "shuffle"
    return {**codec, "configuration": config}


def codec_json_v3(value: Any, field: str, itemsize: int) -> CodecJSON:
    """One codec argument -> ``{"name": ..., "configuration": {...}}``."""
    found = _object_json(value, field)
    if found is None:
        raise _not_a_codec(value, field)
    if isinstance(found, dict) and "id" in found and "name" not in found:
        return compressor_to_codec(found, itemsize, field)
    if isinstance(found, dict):
        found = _blosc_tunables(value, found, itemsize)
    return normalize_codec_json(found, field)


def codec_json_v2(value: Any, field: str) -> NumcodecsJSON:
    """One codec argument -> numcodecs JSON ``{"id": ..., ...}``."""
    found = _object_json(value, field)
    if not isinstance(found, dict):
        raise _not_a_codec(value, field)
    if "id" in found:
        return found
    name = found.get("name")
    codec_id = numcodecs_id(name) if isinstance(name, str) else None
    if codec_id is None:
        raise InvalidArgumentError(
            f"{field}: {name!r} is a Zarr v3 codec; zarr_format=2 takes numcodecs codecs "
            "(e.g. numcodecs.Zstd(level=3) or {'id': 'zstd', 'level': 3})"
        )
    return {"id": codec_id, **normalize_codec_json(found, field)["configuration"]}


def _check_kind(codec: CodecJSON, field: str, expected: str) -> None:
    kind = codec_kind(codec["name"])
    if kind is not None and kind != expected:
        raise InvalidArgumentError(
            f"{field}: {codec['name']!r} is {_KIND_WORDS[kind]}: pass it in {_KEYWORD_OF_KIND[kind]}="
        )


def _check_order(chain: Sequence[CodecJSON], field: str) -> None:
    """Codecs of known kinds in the order array->array, array->bytes, bytes->bytes.

    The reader accepts numcodecs filters after the array->bytes codec (the Zarr v2 placement),
    but zarr-python does not read such a v3 chain, so gpuzarr does not write one.
    """
    rank = {"array_to_array": 0, "array_to_bytes": 1, "bytes_to_bytes": 2}
    highest, highest_name = 0, ""
    for i, codec in enumerate(chain):
        kind = codec_kind(codec["name"])
        if kind is None:
            continue
        if rank[kind] < highest or (rank[kind] == 1 and highest == 1):
            raise InvalidArgumentError(
                f"{field}[{i}]: {codec['name']!r} is {_KIND_WORDS[kind]} and cannot follow {highest_name!r}"
            )
        highest, highest_name = rank[kind], codec["name"]


def _filtered_dtype(filters: Sequence[CodecJSON], dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The data type the serializer receives after the numcodecs filters."""
    for i, codec in enumerate(filters):
        codec_id = numcodecs_id(codec["name"])
        if codec_id is not None:
            config = with_dtype_defaults(codec_id, codec["configuration"], dtype)
            dtype = encoded_dtype(codec_id, config, dtype, f"filters[{i}].configuration")
    return dtype


def with_zarr_python_defaults(chain: Sequence[CodecJSON], dtype: np.dtype[Any]) -> list[CodecJSON]:
    """``chain`` with the members zarr-python derives from the array's data type written out
    (numcodecs ``dtype``, ``decode_dtype``, ``elementsize``), in a sharding codec's chain too."""
    out: list[CodecJSON] = []
    serialized = dtype  # what the array->bytes codec receives, after numcodecs filters
    for i, codec in enumerate(chain):
        config = codec.get("configuration") or {}
        codec_id = numcodecs_id(codec["name"])
        if codec_id is not None:
            codec = {**codec, "configuration": with_dtype_defaults(codec_id, config, dtype)}
            if codec_kind(codec["name"]) == "array_to_array":
                serialized = encoded_dtype(codec_id, codec["configuration"], serialized, f"codecs[{i}].configuration")
        elif codec["name"] == "bytes" and "endian" not in config and serialized.byteorder != "|":
            # zarr-python's BytesCodec() is little endian (its machine's order) where a type has
            # a byte order (NumPy's "|": none, for one-byte, raw and object types).
            codec = {**codec, "configuration": {**config, "endian": "little"}}
        elif codec["name"] == "sharding_indexed" and isinstance(config, dict):
            # Its inner chunks are what the filters before it give.
            codec = {**codec, "configuration": _sharding_defaults(config, serialized)}
        out.append(codec)
    return out


def _sharding_defaults(config: dict[str, Any], dtype: np.dtype[Any]) -> dict[str, Any]:
    """A ``sharding_indexed`` configuration given in part with what zarr-python's
    ``ShardingCodec`` and TensorStore fill in: inner chunks as ``bytes``, the index as ``bytes``
    and ``crc32c``, at the shard's end."""
    config = dict(config)
    inner = config.get("codecs", [{"name": "bytes", "configuration": {}}])  # its byte order below
    if isinstance(inner, list):
        inner = [normalize_codec_json(c, "sharding_indexed.codecs") for c in inner]
        config["codecs"] = with_zarr_python_defaults(inner, dtype)
    index = config.get("index_codecs", [dict(codec) for codec in DEFAULT_INDEX_CODECS])
    if isinstance(index, list):
        # The index is a table of uint64: its ``bytes`` given without ``endian`` is little endian.
        # As given where it names its codec (a crc32c without configuration stays so); anything
        # else is checked, and refused naming the field.
        field = "sharding_indexed.index_codecs"
        named = [isinstance(c, dict) and isinstance(c.get("name"), str) for c in index]
        index = [c if ok else normalize_codec_json(c, field) for c, ok in zip(index, named, strict=True)]
        config["index_codecs"] = with_zarr_python_defaults(index, np.dtype("<u8"))
    config.setdefault("index_location", "end")
    return config


def v3_chain(
    dtype: np.dtype[Any],
    *,
    codecs: Any,
    compressors: Any,
    filters: Any,
    serializer: Any,
    default_compressors: Sequence[CodecJSON],
    default_serializer: CodecJSON | None = None,
) -> list[CodecJSON]:
    """The v3 codec chain of a new array: ``codecs`` as given, or filters + serializer +
    compressors, zarr-python's defaults filling in "auto" (see the module docstring).
    ``default_serializer``: the data type's own array->bytes codec where it is not ``bytes``
    with a byte order (``vlen-utf8`` for strings, ``bytes`` without ``endian`` for
    fixed-length bytes), as ``chain.serializer_codec`` gives it."""
    itemsize = dtype.itemsize
    own_serializer = (
        default_serializer.copy()
        if default_serializer is not None
        and (default_serializer["name"] != "bytes" or "endian" not in default_serializer.get("configuration", {}))
        else None
    )
    if codecs is not None:
        parts = (("compressors", compressors), ("filters", filters), ("serializer", serializer))
        # filters defaults to None in create(), the others to "auto"
        given = [name for name, value in parts if not (_is_auto(value) or (name == "filters" and value is None))]
        if given:
            raise InvalidArgumentError(f"codecs, {', '.join(given)}: give the whole chain as codecs, or the parts")
        chain = [codec_json_v3(c, f"codecs[{i}]", itemsize) for i, c in enumerate(_as_list(codecs))]
        # Like zarr-python: a chain without an array->bytes codec gets the default one.
        chain = with_array_to_bytes(chain, own_serializer or bytes_codec(itemsize))
        _check_order(chain, "codecs")
        return with_zarr_python_defaults(chain, dtype)
    filter_list = [] if _is_auto(filters) else _as_list(filters)
    array_to_array = [codec_json_v3(f, f"filters[{i}]", itemsize) for i, f in enumerate(filter_list)]
    for i, codec in enumerate(array_to_array):
        _check_kind(codec, f"filters[{i}]", "array_to_array")
    if _is_auto(serializer) and own_serializer is not None and _filtered_dtype(array_to_array, dtype) == dtype:
        # Filters that keep the data type (a transpose) keep its own serializer too: strings
        # with a transpose filter got ``bytes``, which refuses variable-length types.
        array_to_bytes = own_serializer
    elif _is_auto(serializer):
        # zarr-python picks the byte order by the array's type; a filter that widens a one-byte
        # type needs one too.
        wide = max(itemsize, _filtered_dtype(array_to_array, dtype).itemsize)
        array_to_bytes = bytes_codec(wide)
    else:
        array_to_bytes = codec_json_v3(serializer, "serializer", itemsize)
        _check_kind(array_to_bytes, "serializer", "array_to_bytes")
    if _is_auto(compressors):
        bytes_to_bytes = [c.copy() for c in default_compressors]
    else:
        bytes_to_bytes = [
            codec_json_v3(c, f"compressors[{i}]", itemsize) for i, c in enumerate(_as_list(compressors))
        ]
        for i, codec in enumerate(bytes_to_bytes):
            _check_kind(codec, f"compressors[{i}]", "bytes_to_bytes")
    return with_zarr_python_defaults([*array_to_array, array_to_bytes, *bytes_to_bytes], dtype)


def _refuse_filter_as_compressor(compressor: NumcodecsJSON) -> None:
    """Refuse a filter (an array -> array codec: ``packbits``, ``astype``, ``fixedscaleoffset``,
    ...) given as a new v2 array's compressor. The compressor takes the chunk's bytes, which a
    filter reads as other values: ``packbits`` as the compressor of float64 data stored
    ``7.7e-304`` for every value, and a copy to such a target reported success (zarr-python
    takes them too)."""
    name = compressor_to_codec(compressor, 1, "compressor")["name"]
    if codec_kind(name) == "array_to_array":
        raise InvalidArgumentError(
            f"compressor: {compressor['id']!r} is a filter (it changes the array's values or type), not a "
            "compressor: give it in filters=, and a compressor of bytes (zstd, blosc, gzip, ...) here"
        )


def v2_encoding(
    *, compressors: Any, filters: Any, serializer: Any, default_compressor: NumcodecsJSON
) -> tuple[NumcodecsJSON | None, list[NumcodecsJSON] | None]:
    """The ``compressor`` and ``filters`` of a new v2 array (numcodecs JSON)."""
    if not _is_auto(serializer):
        raise InvalidArgumentError("serializer: Zarr v2 arrays have no serializer (give zarr_format=3)")
    compressor: NumcodecsJSON | None
    if _is_auto(compressors):
        compressor = dict(default_compressor)
    else:
        listed = _as_list(compressors)
        if len(listed) > 1:
            raise InvalidArgumentError(f"compressors: Zarr v2 arrays have one compressor, got {len(listed)}")
        compressor = codec_json_v2(listed[0], "compressor") if listed else None
        if compressor is not None:
            _refuse_filter_as_compressor(compressor)
            compressor = _with_numcodecs_defaults(compressor)
        if compressor is not None and compressor["id"] == "zstd" and not compressor.get("checksum", True):
            # As zarr-python writes it: TensorStore's zarr2 driver refuses a "checksum" member.
            del compressor["checksum"]
    filter_list = [] if _is_auto(filters) else _as_list(filters)
    v2_filters = [_with_numcodecs_defaults(codec_json_v2(f, f"filters[{i}]")) for i, f in enumerate(filter_list)]
    return compressor, v2_filters or None


def _with_numcodecs_defaults(codec: NumcodecsJSON) -> NumcodecsJSON:
    """A v2 codec given in part (``{"id": "blosc"}``) with every member numcodecs fills in, as
    zarr-python writes a codec it built from such JSON: a reader without numcodecs' defaults
    (TensorStore's differ: zstd level 1, Blosc shuffle -1) reads what was meant. Members given
    keep their values; a codec numcodecs does not know or refuses is kept as given (the chain's
    checks name what is wrong with it)."""
    import numcodecs

    try:
        complete = numcodecs.get_codec(dict(codec)).get_config()
    except (ValueError, TypeError, KeyError):
        return codec
    if not isinstance(complete, dict) or complete.get("id") != codec["id"]:
        return codec
    return {**complete, **codec}

