"""Zarr v3 core data types and their fill values.

A Zarr data type is identified by its v3 name (``"uint16"``); in memory it is a native-endian
NumPy dtype (byte order on disk is the ``bytes`` codec's business, not the data type's).
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MetadataError

CORE_DATA_TYPES: dict[str, str] = {
    "bool": "|b1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "complex64": "<c8",
    "complex128": "<c16",
}

_NAME_BY_KIND_SIZE = {
    (np.dtype(code).kind, np.dtype(code).itemsize): name for name, code in CORE_DATA_TYPES.items()
}


@dataclass(frozen=True)
class DataType:
    """A Zarr data type: its v3 ``name`` and the native-endian NumPy dtype holding it."""

    name: str
    numpy_dtype: np.dtype[Any]

    @classmethod
    def from_json(cls, value: Any, field: str = "data_type") -> DataType:
        if isinstance(value, str) and value in CORE_DATA_TYPES:
            return cls(value, np.dtype(CORE_DATA_TYPES[value]).newbyteorder("="))
        if isinstance(value, dict):
            name = value.get("name")
            raise MetadataError(
                f"{field}: extension data type {name!r} is not supported "
                f"(supported: {', '.join(CORE_DATA_TYPES)})"
            )
        raise MetadataError(
            f"{field}: unknown data type {value!r} (supported: {', '.join(CORE_DATA_TYPES)})"
        )

    @classmethod
    def from_numpy(cls, dtype: Any) -> DataType:
        """The data type for a NumPy dtype, name or v3 data type name."""
        if isinstance(dtype, DataType):
            return dtype
        if isinstance(dtype, str) and dtype in CORE_DATA_TYPES:
            return cls.from_json(dtype)
        try:
            npdt = np.dtype(dtype)
        except TypeError as exc:
            raise MetadataError(f"dtype: {dtype!r} is not a data type") from exc
        name = _NAME_BY_KIND_SIZE.get((npdt.kind, npdt.itemsize))
        if name is None:
            raise MetadataError(f"dtype: NumPy dtype {npdt} has no Zarr v3 core data type")
        return cls.from_json(name)

    def to_json(self) -> str:
        return self.name

    @property
    def itemsize(self) -> int:
        return self.numpy_dtype.itemsize

    # -- fill values -------------------------------------------------------------------------

    def fill_value_from_json(self, value: Any, field: str = "fill_value") -> np.generic:
        """Parse a v3 JSON fill value for this type (every form the core spec allows)."""
        dt = self.numpy_dtype
        kind = dt.kind
        if kind == "b":
            if isinstance(value, bool):
                return np.bool_(value)
            raise MetadataError(f"{field}: expected true or false for bool, got {value!r}")
        if kind in "iu":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise MetadataError(f"{field}: expected an integer for {self.name}, got {value!r}")
            if isinstance(value, float):
                if not value.is_integer():
                    raise MetadataError(
                        f"{field}: expected an integer for {self.name}, got {value!r}"
                    )
                value = int(value)
            info = np.iinfo(dt)
            if not info.min <= value <= info.max:
                raise MetadataError(
                    f"{field}: {value} is out of range for {self.name} [{info.min}, {info.max}]"
                )
            return dt.type(value)  # type: ignore[no-any-return]
        if kind == "f":
            return _float_from_json(value, dt, field, self.name)
        if kind == "c":
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                raise MetadataError(
                    f"{field}: expected [real, imaginary] for {self.name}, got {value!r}"
                )
            part = np.dtype(f"f{dt.itemsize // 2}")
            re = _float_from_json(value[0], part, f"{field}[0]", self.name)
            im = _float_from_json(value[1], part, f"{field}[1]", self.name)
            out = np.zeros((), dtype=dt)
            out.real = re
            out.imag = im
            return out[()]  # type: ignore[no-any-return]
        raise MetadataError(f"{field}: cannot parse a fill value for {self.name}")  # pragma: no cover

    def fill_value_to_json(self, value: np.generic) -> Any:
        """The normalised JSON form of a fill value (round-trips through fill_value_from_json)."""
        kind = self.numpy_dtype.kind
        if kind == "b":
            return bool(value)
        if kind in "iu":
            return int(value)  # type: ignore[call-overload]
        if kind == "f":
            return _float_to_json(value)
        if kind == "c":
            return [_float_to_json(value.real), _float_to_json(value.imag)]  # type: ignore[attr-defined]
        raise MetadataError(f"fill_value: cannot encode a fill value for {self.name}")  # pragma: no cover

    def default_fill_value(self) -> np.generic:
        return self.numpy_dtype.type(0)  # type: ignore[no-any-return]

    def fill_value_from_python(self, value: Any) -> np.generic:
        """A fill value given by a user: a Python/NumPy scalar, or any JSON form."""
        if value is None:
            return self.default_fill_value()
        if isinstance(value, (str, list, tuple, dict)):
            return self.fill_value_from_json(value)
        if isinstance(value, np.generic) and value.dtype == self.numpy_dtype:
            return value
        kind = self.numpy_dtype.kind
        if kind in "fc" or (kind in "iu" and isinstance(value, (int, np.integer))):
            if kind in "iu":
                return self.fill_value_from_json(int(value))
            return self.numpy_dtype.type(value)  # type: ignore[no-any-return]
        if kind == "b":
            return np.bool_(bool(value))
        return self.fill_value_from_json(value.item() if isinstance(value, np.generic) else value)


_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_UINT_FOR_SIZE = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _float_from_json(value: Any, dt: np.dtype[Any], field: str, name: str) -> np.generic:
    if isinstance(value, bool):
        raise MetadataError(f"{field}: expected a number for {name}, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            f = float(value)
        except OverflowError:
            raise MetadataError(f"{field}: {value!r} is out of range for {name}") from None
        with np.errstate(over="ignore"):
            result = dt.type(f)
        # A finite JSON number that does not fit the type is an error, not a silent infinity.
        if np.isinf(result) and not math.isinf(f):
            raise MetadataError(f"{field}: {value!r} is out of range for {name}")
        return result  # type: ignore[no-any-return]
    if isinstance(value, str):
        if value in _SPECIAL_FLOATS:
            return dt.type(_SPECIAL_FLOATS[value])  # type: ignore[no-any-return]
        if value.startswith("0x"):
            digits = value[2:]
            if not all(c in string.hexdigits for c in digits):
                raise MetadataError(f"{field}: {value!r} is not a hex bit pattern")
            if len(digits) != 2 * dt.itemsize:
                raise MetadataError(
                    f"{field}: hex fill value for {name} must have {2 * dt.itemsize} digits, "
                    f"got {value!r}"
                )
            bits = int(digits, 16)
            return np.array(bits, dtype=_UINT_FOR_SIZE[dt.itemsize]).view(dt)[()]  # type: ignore[no-any-return]
    raise MetadataError(
        f"{field}: expected a number, \"NaN\", \"Infinity\", \"-Infinity\" or a hex bit pattern "
        f"for {name}, got {value!r}"
    )


def _float_to_json(value: Any) -> Any:
    scalar = np.asarray(value)
    f = float(scalar)
    if math.isnan(f):
        bits = int(scalar.view(_UINT_FOR_SIZE[scalar.dtype.itemsize]))
        canonical = int(np.array(np.nan, dtype=scalar.dtype).view(_UINT_FOR_SIZE[scalar.dtype.itemsize]))
        if bits == canonical:
            return "NaN"
        # A non-canonical NaN payload only survives as its bit pattern.
        return "0x" + format(bits, f"0{2 * scalar.dtype.itemsize}x")
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def fill_value_bytes_equal(a: np.ndarray[Any, Any], fill: np.generic) -> bool:
    """True if every element of ``a`` equals ``fill``; NaN compares equal to NaN."""
    if a.dtype.kind in "fc" and np.isnan(fill):
        if a.dtype.kind == "c":
            f = complex(fill)  # type: ignore[arg-type]
            re_ok = np.isnan(a.real) if math.isnan(f.real) else a.real == f.real
            im_ok = np.isnan(a.imag) if math.isnan(f.imag) else a.imag == f.imag
            return bool(np.all(re_ok & im_ok))
        return bool(np.all(np.isnan(a)))
    return bool(np.all(a == fill))


__all__ = ["CORE_DATA_TYPES", "DataType", "fill_value_bytes_equal"]
