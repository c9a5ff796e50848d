"""xarray's conventions for Zarr attributes, which ``convert`` keeps when it changes the format.

xarray (``xarray/backends/zarr.py``) stores the same facts differently in the two formats:

* dimension names: the ``_ARRAY_DIMENSIONS`` attribute in Zarr v2, ``dimension_names`` in v3;
* the CF ``_FillValue`` (the value that marks missing data): in Zarr v2 it *is* the array's
  ``fill_value`` (no attribute; xarray reads the fill value back as ``_FillValue``); in Zarr v3
  it is an attribute of its own, JSON-encoded by xarray's ``FillValueCoder`` (floats as base64
  of a little-endian float64, complex numbers as two of those, integers and booleans as JSON
  numbers), and the array's ``fill_value`` only says what missing chunks read as.

A copy that moved the attributes unchanged would make xarray read another dataset (values no
longer masked, or masked by the wrong value). These functions translate; this module does not
import xarray (the command line does not need it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import struct
from typing import Any

import numpy as np

from ..errors import MetadataError

#: xarray's attribute for the dimension names of a Zarr v2 array.
DIMENSIONS_ATTRIBUTE = "_ARRAY_DIMENSIONS"
#: The CF attribute for the value that marks missing data.
FILL_VALUE_ATTRIBUTE = "_FillValue"


def _float_to_json(value: Any) -> str:
    return base64.standard_b64encode(struct.pack("<d", float(value))).decode()


def _float_from_json(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)  # written by something other than xarray: take the number as it is
    try:
        raw = base64.standard_b64decode(value) if isinstance(value, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 8:
        raise MetadataError(
            f"{where}: attribute {FILL_VALUE_ATTRIBUTE!r}: expected a number or the base64 of a "
            f"little-endian float64 (xarray's encoding), got {value!r}"
        )
    result: float = struct.unpack("<d", raw)[0]
    return result


def xarray_decodes_fill_attribute(dtype: np.dtype[Any]) -> bool:
    """Whether xarray reads a Zarr v3 ``_FillValue`` attribute of an array of ``dtype``: its
    ``FillValueCoder`` decodes booleans and numbers only (dates, durations, text and bytes
    fail the whole dataset's open), so a copy writes the attribute for those alone."""
    return dtype.kind in "biufc"


def encode_fill_attribute(value: Any, dtype: np.dtype[Any]) -> Any:
    """The ``_FillValue`` attribute of a Zarr v3 array of ``dtype`` for the fill value ``value``,
    as xarray's ``FillValueCoder.encode`` writes it."""
    kind = dtype.kind
    if kind == "S" or isinstance(value, bytes):
        return base64.standard_b64encode(bytes(value)).decode()
    if kind == "V":  # opaque bytes (xarray has no encoding of its own): base64, as "S"
        return base64.standard_b64encode(np.asarray(value, dtype).tobytes()).decode()
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "f":
        return _float_to_json(value)
    if kind == "c":
        return [_float_to_json(complex(value).real), _float_to_json(complex(value).imag)]
    return str(value)  # text (kind "U", "T" or object strings)


def decode_fill_attribute(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    """The fill value a Zarr v3 ``_FillValue`` attribute (xarray's encoding) stands for, for an
    array of ``dtype``; MetadataError naming ``where`` when it cannot be one."""
    kind = dtype.kind
    if kind in "SV":
        raw = None
        if isinstance(value, str):
            with contextlib.suppress(binascii.Error, ValueError):
                raw = base64.standard_b64decode(value)
        if raw is not None and (kind == "S" or len(raw) == dtype.itemsize):
            return raw if kind == "S" else np.frombuffer(raw, dtype)[0]
        what = "base64 bytes" if kind == "S" else f"the base64 of {dtype.itemsize} bytes"
        raise MetadataError(f"{where}: attribute {FILL_VALUE_ATTRIBUTE!r}: expected {what}, got {value!r}")
    if kind == "b":
        return bool(value)
    if kind in "iu":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
        raise MetadataError(f"{where}: attribute {FILL_VALUE_ATTRIBUTE!r}: expected an integer, got {value!r}")
    if kind == "f":
        return _float_from_json(value, where)
    if kind == "c":
        if isinstance(value, list | tuple) and len(value) == 2:
            return complex(_float_from_json(value[0], where), _float_from_json(value[1], where))
        raise MetadataError(f"{where}: attribute {FILL_VALUE_ATTRIBUTE!r}: expected two base64 floats, got {value!r}")
    return value if isinstance(value, str | bytes) else str(value)
