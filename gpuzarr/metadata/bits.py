"""An array's metadata read as its elements' bits: the same chunks, codecs and shape, with an
integer type of the same size in place of a type a device cannot hold (``bfloat16`` on CuPy).

Every codec the chain may hold moves or compresses elements as bytes of their size and never
looks at their values (``transpose``, ``bytes``, ``sharding_indexed`` and any bytes->bytes
codec), so the bits decoded are the elements' bits, and the fill value is its bits too.
Array->array codecs of numcodecs (``delta``, ``fixedscaleoffset``, ``quantize``, ...) compute
with the values and are refused, as are Zarr v2 arrays (whose filters do the same).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UnsupportedOperationError
from .chain import BYTES_TO_BYTES_NAMES
from .dtypes import DataType
from .v3 import ArrayMetadata

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .json_types import CodecJSON
    from .v2 import ArrayMetadataV2

#: codecs that move or compress elements as bytes without reading their values
_VALUE_BLIND = frozenset({"transpose", "bytes", "sharding_indexed", *BYTES_TO_BYTES_NAMES})


def as_bits_of(metadata: ArrayMetadata | ArrayMetadataV2, carrier: np.dtype[Any]) -> ArrayMetadata:
    """``metadata`` with ``carrier`` (an integer type of the same item size) as its data type
    and its fill value's bits as the fill value.

    Raises
    ------
    UnsupportedOperationError
        For Zarr v2 metadata, or a codec that reads the values (naming it).
    """
    if not isinstance(metadata, ArrayMetadata):
        raise UnsupportedOperationError(
            f"{metadata.dtype} is read as its bits from Zarr v3 arrays only (this one is Zarr v2)"
        )
    dtype = metadata.dtype
    if carrier.itemsize != dtype.itemsize or carrier.kind not in "iu":
        raise ValueError(f"{carrier} cannot carry the bits of {dtype}")
    for name in _codec_names(metadata.codecs):
        if name not in _VALUE_BLIND:
            raise UnsupportedOperationError(
                f"the codec {name!r} computes with the {dtype} values, which this device cannot hold: "
                "read such arrays on the CPU"
            )
    fill = np.asarray(metadata.fill_value, dtype=dtype).reshape(1).view(carrier)[0]
    return replace(metadata, data_type=DataType.from_json(carrier.name), fill_value=fill)


def _codec_names(chain: Iterable[CodecJSON]) -> Iterable[str]:
    """The names of a chain's codecs, those of shards' inner chunks and indexes included."""
    for codec in chain:
        yield codec["name"]
        if codec["name"] == "sharding_indexed":
            config = codec.get("configuration") or {}
            yield from _codec_names(config.get("codecs", []))
            yield from _codec_names(config.get("index_codecs", []))
