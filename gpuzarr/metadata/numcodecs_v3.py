"""zarr-python 3's ``numcodecs.*`` codecs in Zarr v3 chains: names, kinds and data types.

zarr-python 3.1 registers one v3 codec per numcodecs codec below (``zarr.codecs.numcodecs``,
formerly ``numcodecs.zarr3``). Each is named ``numcodecs.<id>`` and its configuration is the
numcodecs codec's ``get_config()`` without ``"id"``::

    {"name": "numcodecs.delta", "configuration": {"dtype": "<i4", "astype": "<i2"}}

Each has one kind, and so one place in a chain: filters (array -> array) before the array ->
bytes codec, ``pcodec`` and ``zfpy`` as the array -> bytes codec, the rest after it. Zarr v2
chains (:mod:`.v2`) are the exception: there every filter and the compressor run on the chunk's
bytes, after ``bytes``.

Pure: names, JSON and NumPy data types. :mod:`gpuzarr.codecs.numcodecs_codec` and
:mod:`gpuzarr.codecs.numcodecs_filters` run the codecs; :mod:`.build` uses the same rules to
write what zarr-python writes.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from ..errors import MetadataError

__all__ = [
    "ARRAY_TO_ARRAY_IDS",
    "ARRAY_TO_BYTES_IDS",
    "BYTES_TO_BYTES_IDS",
    "PREFIX",
    "encoded_dtype",
    "encoded_shape",
    "numcodecs_id",
    "numcodecs_kind",
    "with_dtype_defaults",
]

PREFIX = "numcodecs."

#: Filters: they map a chunk array to an array, maybe of another data type or shape.
ARRAY_TO_ARRAY_IDS = frozenset({"astype", "bitround", "delta", "fixedscaleoffset", "packbits", "quantize"})
#: Serializers: they encode a chunk array into bytes themselves (in place of ``bytes``).
ARRAY_TO_BYTES_IDS = frozenset({"pcodec", "zfpy"})
#: Compressors and checksums.
BYTES_TO_BYTES_IDS = frozenset({
    "adler32", "blosc", "bz2", "crc32", "crc32c", "fletcher32", "gzip", "jenkins_lookup3", "lz4",
    "lzma", "shuffle", "zlib", "zstd",
})  # fmt: skip

Kind = Literal["array_to_array", "array_to_bytes", "bytes_to_bytes"]

#: Configuration members zarr-python fills in from the array's data type when they are missing
#: (``evolve_from_array_spec`` of its FixedScaleOffset, Quantize, AsType and Shuffle): a data
#: type as NumPy names it ("float64"), or the element size in bytes.
_DTYPE_DEFAULTS: dict[str, tuple[str, str]] = {
    "fixedscaleoffset": ("dtype", "name"),
    "quantize": ("dtype", "name"),
    "astype": ("decode_dtype", "name"),
    "shuffle": ("elementsize", "itemsize"),
}

#: The member naming the data type a filter encodes to (absent: the data type it receives).
_ENCODED_DTYPE_MEMBER = {
    "delta": "astype",
    "fixedscaleoffset": "astype",
    "quantize": "astype",
    "astype": "encode_dtype",
}


def numcodecs_id(name: str) -> str | None:
    """``"numcodecs.delta"`` -> ``"delta"``; None for a name without the prefix."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else None


def numcodecs_kind(name: str) -> Kind | None:
    """The kind of one of zarr-python's ``numcodecs.*`` codecs (None: not one of them)."""
    codec_id = numcodecs_id(name)
    if codec_id in ARRAY_TO_ARRAY_IDS:
        return "array_to_array"
    if codec_id in ARRAY_TO_BYTES_IDS:
        return "array_to_bytes"
    if codec_id in BYTES_TO_BYTES_IDS:
        return "bytes_to_bytes"
    return None


def with_dtype_defaults(codec_id: str, config: dict[str, Any], dtype: np.dtype[Any]) -> dict[str, Any]:
    """``config`` with the members zarr-python derives from ``dtype`` filled in when missing.

    zarr-python writes them into the array's metadata, so gpuzarr does too, and a chain written
    without them decodes as zarr-python decodes it.
    """
    rule = _DTYPE_DEFAULTS.get(codec_id)
    if rule is None or config.get(rule[0]) is not None:
        return dict(config)
    member, what = rule
    return {**config, member: str(dtype) if what == "name" else dtype.itemsize}


def _dtype_member(config: dict[str, Any], member: str, field: str) -> np.dtype[Any]:
    try:
        dtype: np.dtype[Any] = np.dtype(config[member])
    except Exception as exc:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
        raise MetadataError(f"{field}.{member}: {config[member]!r} is not a data type") from exc
    return dtype


def encoded_dtype(codec_id: str, config: dict[str, Any], dtype: np.dtype[Any], field: str) -> np.dtype[Any]:
    """The data type of a filter's encoded array, given the ``dtype`` it receives, as numcodecs
    sees it (a configured byte order included).

    ``quantize`` with an ``astype`` encodes to that type, as numcodecs does (zarr-python assumes
    it keeps the type, so it cannot read such a chain back).
    """
    if codec_id == "packbits":
        return np.dtype(np.uint8)
    member = _ENCODED_DTYPE_MEMBER.get(codec_id)
    if member is None or config.get(member) is None:
        return dtype
    return _dtype_member(config, member, field)


def encoded_shape(codec_id: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a filter's encoded array: packbits packs 8 booleans a byte after a header
    byte (the number of padding bits); the other filters keep the shape."""
    if codec_id == "packbits":
        return (1 + math.ceil(math.prod(shape) / 8),)
    return shape
