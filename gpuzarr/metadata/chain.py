"""Edits of a v3 codec chain (JSON), shared by everything that builds metadata for a new array.

A v3 chain is ``[array->array codecs..., one array->bytes codec, bytes->bytes codecs...]``, each
codec ``{"name": ..., "configuration": {...}}``. ``gpuzarr.create`` (:mod:`gpuzarr.metadata.build`)
and TensorStore specs (:mod:`gpuzarr.tensorstore.create`) complete a partial chain with the
same helpers; only their defaults differ (``ZARR_PYTHON_DEFAULTS``, ``TENSORSTORE_DEFAULTS`` in
:mod:`gpuzarr.metadata.build`). Pure: every function returns a new list.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError
from .json_util import split_name_configuration
from .numcodecs_v3 import ARRAY_TO_ARRAY_IDS, ARRAY_TO_BYTES_IDS, BYTES_TO_BYTES_IDS, PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from .dtypes import DataType
    from .json_types import CodecJSON

__all__ = [
    "ARRAY_TO_ARRAY_NAMES",
    "ARRAY_TO_BYTES_NAMES",
    "BYTES_TO_BYTES_NAMES",
    "DEFAULT_INDEX_CODECS",
    "NESTED_CHAINS",
    "bytes_codec",
    "codec_kind",
    "normalize_codec_json",
    "parse_codec_chain",
    "serializer_codec",
    "with_array_to_bytes",
    "with_transpose",
    "wrap_in_sharding",
]

#: Names of the array->bytes codecs: exactly one of them ends the array part of a chain.
ARRAY_TO_BYTES_NAMES = (
    "bytes",
    "sharding_indexed",
    "vlen-utf8",
    "vlen-bytes",
    *sorted(PREFIX + i for i in ARRAY_TO_BYTES_IDS),
)
#: Names of the array->array codecs, which come before the array->bytes codec.
ARRAY_TO_ARRAY_NAMES = ("transpose", *sorted(PREFIX + i for i in ARRAY_TO_ARRAY_IDS))
#: Names of the bytes->bytes codecs, which come after it.
BYTES_TO_BYTES_NAMES = ("blosc", "crc32c", "gzip", "zstd", *sorted(PREFIX + i for i in BYTES_TO_BYTES_IDS))

#: The shard index codecs that zarr-python, TensorStore and gpuzarr write by default.
DEFAULT_INDEX_CODECS: tuple[CodecJSON, ...] = (
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
)


def codec_kind(name: str) -> str | None:
    """"array_to_array", "array_to_bytes" or "bytes_to_bytes" for a codec name gpuzarr knows
    (None for others, e.g. codecs registered by users, whose kind only their class knows)."""
    for kind, names in (
        ("array_to_array", ARRAY_TO_ARRAY_NAMES),
        ("array_to_bytes", ARRAY_TO_BYTES_NAMES),
        ("bytes_to_bytes", BYTES_TO_BYTES_NAMES),
    ):
        if name in names:
            return kind
    return None


def normalize_codec_json(value: Any, field: str) -> CodecJSON:
    """``"gzip"`` or ``{"name": "gzip", "configuration": {...}}`` -> the object form."""
    name, config = split_name_configuration(value, field)
    if isinstance(value, dict) and value.get("must_understand") is False:
        return {"name": name, "configuration": dict(config), "must_understand": False}
    return {"name": name, "configuration": dict(config)}


def parse_codec_chain(value: Any, field_name: str) -> list[CodecJSON]:
    """A (possibly partial) codec chain: strings or ``{"name", "configuration"}`` objects."""
    if not isinstance(value, list):
        raise MetadataError(f"{field_name}: expected a list of codecs, got {value!r}")
    return [normalize_codec_json(c, f"{field_name}[{i}]") for i, c in enumerate(value)]


def bytes_codec(itemsize: int) -> CodecJSON:
    """The ``bytes`` codec for elements of ``itemsize`` bytes: little endian when that matters."""
    if itemsize == 1:
        return {"name": "bytes", "configuration": {}}
    return {"name": "bytes", "configuration": {"endian": "little"}}


def serializer_codec(data_type: DataType) -> CodecJSON:
    """The array->bytes codec zarr-python gives a new array of ``data_type``: ``vlen-utf8`` or
    ``vlen-bytes`` for variable-length types, else ``bytes`` (little endian where that matters)."""
    codec_id = data_type.object_codec_id
    if codec_id is not None:
        return {"name": codec_id, "configuration": {}}
    if data_type.has_endianness:
        return {"name": "bytes", "configuration": {"endian": "little"}}
    return {"name": "bytes", "configuration": {}}


def with_array_to_bytes(chain: Sequence[CodecJSON], codec: CodecJSON) -> list[CodecJSON]:
    """``chain``, with ``codec`` inserted after the array->array codecs when the chain has no
    array->bytes codec (as zarr-python and TensorStore both do)."""
    out = list(chain)
    if not any(c["name"] in ARRAY_TO_BYTES_NAMES for c in out):
        at = sum(1 for c in out if c["name"] in ARRAY_TO_ARRAY_NAMES)
        out.insert(at, codec)
    return out


def with_transpose(
    chain: Sequence[CodecJSON], order: Sequence[int], *, first: bool = False
) -> list[CodecJSON]:
    """``chain`` with a ``transpose`` codec for ``order`` (unchanged for the identity order).

    The codec goes just before the array->bytes codec, or with ``first`` at the very start of
    the chain (zarr-python's place for ``order="F"``).
    """
    out = list(chain)
    if tuple(order) == tuple(range(len(order))):
        return out
    codec: CodecJSON = {"name": "transpose", "configuration": {"order": list(order)}}
    at = 0 if first else next(i for i, c in enumerate(out) if c["name"] in ARRAY_TO_BYTES_NAMES)
    out.insert(at, codec)
    return out


def transpose_permutation(order: Any, rank: int) -> Any:
    """A transpose codec's ``order`` as the permutation it stands for: "C" the identity, "F"
    the reversal of ``rank`` axes; a list as it is."""
    if order == "C":
        return list(range(rank))
    if order == "F":
        return list(range(rank))[::-1]
    return order


def chain_order(chain: Sequence[CodecJSON], rank: int) -> list[int]:
    """The ``inner_order`` (TensorStore's term) that ``chain``'s transpose codecs make: the
    identity without one."""
    order = list(range(rank))
    for codec in chain:
        if codec["name"] == "transpose":
            perm = transpose_permutation((codec.get("configuration") or {}).get("order"), rank)
            order = [order[p] for p in perm]
    return order


def wrap_in_sharding(
    chain: Sequence[CodecJSON],
    inner_shape: Sequence[int],
    index_codecs: Sequence[CodecJSON],
    index_location: str = "end",
) -> list[CodecJSON]:
    """A chain of one ``sharding_indexed`` codec whose inner chunks of ``inner_shape`` are
    encoded with ``chain``; the index (at ``index_location`` of the shard) with ``index_codecs``."""
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(inner_shape),
                "codecs": list(chain),
                "index_codecs": copy.deepcopy(list(index_codecs)),
                "index_location": index_location,
            },
        }
    ]


#: The members of a codec's configuration that hold codec chains of their own (sharding's).
NESTED_CHAINS = ("codecs", "index_codecs")


def map_codecs(chain: Sequence[Any], change: Callable[[dict[str, Any]], dict[str, Any]]) -> list[Any]:
    """``chain`` (codec JSON) with ``change`` applied to every codec object in it, those of a
    sharding codec's inner chains included (innermost first); other items pass unchanged."""
    out: list[Any] = []
    for codec in chain:
        if isinstance(codec, dict):
            config = codec.get("configuration")
            if isinstance(config, dict) and any(isinstance(config.get(k), list) for k in NESTED_CHAINS):
                nested = {k: map_codecs(config[k], change) for k in NESTED_CHAINS if isinstance(config.get(k), list)}
                codec = {**codec, "configuration": {**config, **nested}}
            codec = change(codec)
        out.append(codec)
    return out


def iter_codecs(chain: Sequence[Any]) -> Iterator[dict[str, Any]]:
    """Every codec object of ``chain`` (codec JSON), those of sharding codecs' inner chains too."""
    for codec in chain:
        if isinstance(codec, dict):
            yield codec
            config = codec.get("configuration")
            if isinstance(config, dict):
                for key in NESTED_CHAINS:
                    if isinstance(config.get(key), list):
                        yield from iter_codecs(config[key])
