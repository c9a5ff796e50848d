"""Zarr data types and their fill values.

A Zarr data type is identified by its v3 name (``"uint16"``); in memory it is a native-endian
NumPy dtype (byte order on disk is the ``bytes`` codec's business, not the data type's).

Besides the v3 core types this knows the extensions TensorStore writes — ``bfloat16``, the
``float8_*`` / ``float4_e2m1fn`` formats and the 1-byte-padded ``int4`` / ``int2`` (NumPy dtypes
from ml_dtypes, imported only when such an array is opened) — the core spec's raw types
``r8``, ``r16``, … (read as NumPy void, ``V1``, ``V2``, …; their fill value is a list of bytes),
and zarr-python's string, bytes and time types (:mod:`gpuzarr.metadata.named_dtypes`).
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..errors import GpuZarrError, MetadataError
from . import named_dtypes

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

#: NumPy stores a dtype's itemsize in a C int: no element may be larger.
MAX_ITEMSIZE = 2**31 - 1

#: Extension types (name -> ml_dtypes attribute): floats first, then padded small integers.
ML_FLOAT_TYPES = (
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
)
ML_INT_TYPES = ("int4", "int2")
EXTENSION_DATA_TYPES = ML_FLOAT_TYPES + ML_INT_TYPES


def _ml_dtype(name: str, field: str) -> np.dtype[Any]:
    try:
        import ml_dtypes
    except ImportError as exc:  # pragma: no cover - ml_dtypes is a dependency
        raise MetadataError(f"{field}: data type {name!r} needs the ml_dtypes package") from exc
    try:
        found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
    except AttributeError as exc:
        raise MetadataError(
            f"{field}: data type {name!r} needs a newer ml_dtypes ({ml_dtypes.__version__})"
        ) from exc
    return found


def _raw_bits(value: str) -> int | None:
    """``"r16"`` -> 16; None when ``value`` is not a raw type name."""
    if len(value) > 1 and value[0] == "r" and value[1:].isdigit():
        return int(value[1:])
    return None


def is_float_like(dtype: np.dtype[Any]) -> bool:
    """Real or complex floating point, ml_dtypes' floats included (NaN-aware comparisons)."""
    # ml_dtypes' types are of kind "V"; the name (which NumPy builds anew, about 4 µs) is asked
    # of those only: every chunk written asks this of its data type.
    return dtype.kind in "fc" or (dtype.kind == "V" and dtype.name in ML_FLOAT_TYPES)


def is_ml_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is one of ml_dtypes' types (``bfloat16``, the ``float8`` formats,
    ``int4`` ...), whatever its kind: ``float8_e5m2`` has NumPy's float kind, the others "V"."""
    return getattr(dtype.type, "__module__", "") == "ml_dtypes"


def is_integer_like(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "iu" or (dtype.kind == "V" and dtype.name in ML_INT_TYPES)


def is_variable_length(dtype: np.dtype[Any]) -> bool:
    """Whether elements of ``dtype`` are Python objects (variable-length strings or bytes):
    they have no fixed number of bytes, and buffers of them cannot be viewed as raw memory."""
    return bool(dtype.hasobject)


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
        named = named_dtypes.parse(value, field)
        if named is not None:
            return cls(*named)
        if isinstance(value, str) and value in CORE_DATA_TYPES:
            return cls(value, np.dtype(CORE_DATA_TYPES[value]).newbyteorder("="))
        if isinstance(value, str) and value in EXTENSION_DATA_TYPES:
            return cls(value, _ml_dtype(value, field))
        bits = _raw_bits(value) if isinstance(value, str) else None
        if bits is not None:
            if bits <= 0 or bits % 8:
                raise MetadataError(f"{field}: raw data type {value!r} needs a positive multiple of 8 bits")
            if bits // 8 > MAX_ITEMSIZE:
                raise MetadataError(
                    f"{field}: raw data type {value!r} has {bits // 8} bytes per element, more than "
                    f"the {MAX_ITEMSIZE} NumPy supports"
                )
            return cls(value, np.dtype(f"V{bits // 8}"))
        supported = ", ".join((*CORE_DATA_TYPES, *named_dtypes.NAMES))
        if isinstance(value, dict):
            name = value.get("name")
            raise MetadataError(f"{field}: extension data type {name!r} is not supported (supported: {supported})")
        raise MetadataError(f"{field}: unknown data type {value!r} (supported: {supported})")

    @classmethod
    def from_numpy(cls, dtype: Any) -> DataType:
        """The data type for a NumPy dtype, a v3 data type name or JSON object, or ``str``
        (variable-length strings, as in zarr-python)."""
        if isinstance(dtype, DataType):
            return dtype
        if dtype is str or (isinstance(dtype, str) and dtype == "str"):
            return cls.from_json(named_dtypes.STRING)
        if isinstance(dtype, dict):
            return cls.from_json(dtype, "dtype")
        if isinstance(dtype, str) and dtype in (*CORE_DATA_TYPES, *named_dtypes.NAMES):
            return cls.from_json(dtype, "dtype")
        if isinstance(dtype, str) and (dtype in EXTENSION_DATA_TYPES or _raw_bits(dtype) is not None):
            return cls.from_json(dtype)
        try:
            npdt = np.dtype(dtype)
        except Exception as exc:  # NumPy's dtype parser: TypeError, ValueError, SyntaxError, ...
            raise MetadataError(f"dtype: {dtype!r} is not a data type") from exc
        if npdt.name in EXTENSION_DATA_TYPES:
            return cls.from_json(npdt.name)
        if npdt.kind == "V" and npdt.fields is None and npdt.subdtype is None:
            # zarr-python's name for raw bytes (it reads no r* type); "r24" given by name stays.
            return cls.from_json({"name": "raw_bytes", "configuration": {"length_bytes": npdt.itemsize}})
        named = named_dtypes.from_numpy(npdt)
        if named is not None:
            return cls(*named)
        name = _NAME_BY_KIND_SIZE.get((npdt.kind, npdt.itemsize))
        if name is None:
            hint = "; structured types are stored in Zarr v2 (zarr_format=2)" if npdt.fields is not None else ""
            raise MetadataError(f"dtype: NumPy dtype {npdt} has no Zarr v3 core data type{hint}")
        return cls.from_json(name)

    def to_json(self) -> str | dict[str, Any]:
        """The v3 ``data_type``: a name, or ``{"name", "configuration"}`` for parametrised types."""
        if self.name in named_dtypes.NAMES:
            return named_dtypes.to_json(self.name, self.numpy_dtype)
        return self.name

    @property
    def itemsize(self) -> int:
        return self.numpy_dtype.itemsize

    @property
    def object_codec_id(self) -> str | None:
        """The codec of a variable-length type (``vlen-utf8``, ``vlen-bytes``), else None."""
        return named_dtypes.object_codec_id(self.name)

    @property
    def has_endianness(self) -> bool:
        """Whether stored elements have a byte order (the ``bytes`` codec needs ``endian``)."""
        dt = self.numpy_dtype
        if dt.itemsize == 1 or dt.fields is not None or is_variable_length(dt):
            return False
        return dt.kind not in "SV" or dt.name in ML_FLOAT_TYPES

    # -- fill values -------------------------------------------------------------------------

    @property
    def fill_kind(self) -> str:
        """"b" bool, "i" integer, "f" real float, "c" complex, "r" raw bytes, and for the types
        of :mod:`~gpuzarr.metadata.named_dtypes`: "t" time, "s" text, "y" bytes."""
        dt = self.numpy_dtype
        if self.name in named_dtypes.NAMES:
            return named_dtypes.fill_kind(self.name, dt)
        if dt.kind == "b":
            return "b"
        if is_integer_like(dt):
            return "i"
        if dt.kind == "c":
            return "c"
        if is_float_like(dt):
            return "f"
        return "r"

    def fill_value_from_json(self, value: Any, field: str = "fill_value") -> np.generic:
        """Parse a v3 JSON fill value for this type (every form the core spec allows)."""
        if self.name in named_dtypes.NAMES:
            return named_dtypes.fill_from_json(self.name, self.numpy_dtype, value, field)
        dt = self.numpy_dtype
        kind = self.fill_kind
        if kind == "b":
            if isinstance(value, bool):
                return np.bool_(value)
            raise MetadataError(f"{field}: expected true or false for bool, got {value!r}")
        if kind == "i":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise MetadataError(f"{field}: expected an integer for {self.name}, got {value!r}")
            if isinstance(value, float):
                if not value.is_integer():
                    raise MetadataError(
                        f"{field}: expected an integer for {self.name}, got {value!r}"
                    )
                value = int(value)
            low, high = _integer_range(dt)
            if not low <= value <= high:
                raise MetadataError(
                    f"{field}: {value} is out of range for {self.name} [{low}, {high}]"
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
            return _scalar(out)
        if (
            isinstance(value, list)
            and len(value) == dt.itemsize
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in value)
        ):
            return np.frombuffer(bytes(value), dtype=dt)[0]  # type: ignore[no-any-return]
        raise MetadataError(
            f"{field}: expected a list of {dt.itemsize} byte values (0-255) for {self.name}, got {value!r}"
        )

    def fill_value_to_json(self, value: np.generic) -> Any:
        """The normalised JSON form of a fill value (round-trips through fill_value_from_json)."""
        if self.name in named_dtypes.NAMES:
            return named_dtypes.fill_to_json(self.name, self.numpy_dtype, value)
        kind = self.fill_kind
        if kind == "b":
            return bool(value)
        if kind == "i":
            return int(value)
        if kind == "f":
            return _float_to_json(value)
        if kind == "c":
            return [_float_to_json(value.real), _float_to_json(value.imag)]
        return list(np.asarray(value, dtype=self.numpy_dtype).tobytes())

    def default_fill_value(self) -> np.generic:
        """Zero, or what zarr-python writes for the named types ("", b"", NaT)."""
        if self.name in named_dtypes.NAMES:
            return named_dtypes.default_fill(self.name, self.numpy_dtype)
        return _scalar(np.zeros((), dtype=self.numpy_dtype))

    def fill_value_from_python(self, value: Any) -> np.generic:
        """A fill value given by a user: a Python/NumPy scalar, or any JSON form.

        MetadataError for one this type cannot hold (NumPy's own TypeError or ValueError, for a
        complex number given to a float type, an array, ``pd.NA``, is named as the fill value's).
        """
        try:
            fill: Any = self._fill_value_from_python(value)
        except GpuZarrError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise MetadataError(f"fill_value: {value!r} is no value of {self.name} ({exc})") from exc
        if isinstance(fill, np.ndarray):  # NumPy's float32(array([1.5])) is an array
            raise MetadataError(f"fill_value: expected one value of {self.name}, got {value!r}")
        return cast("np.generic", fill)

    def _fill_value_from_python(self, value: Any) -> np.generic:
        if value is None:
            return self.default_fill_value()
        if self.name in named_dtypes.NAMES:
            return named_dtypes.fill_from_python(self.name, self.numpy_dtype, value)
        if isinstance(value, (str, list, tuple, dict)):
            return self.fill_value_from_json(list(value) if isinstance(value, tuple) else value)
        if isinstance(value, np.generic) and value.dtype == self.numpy_dtype:
            return value
        kind = self.fill_kind
        if kind == "i" and isinstance(value, (int, np.integer)):
            return self.fill_value_from_json(int(value))
        if kind in "fc":
            with np.errstate(over="ignore"):
                return self.numpy_dtype.type(value)  # type: ignore[no-any-return]
        if kind == "b":
            return np.bool_(bool(value))
        if kind == "r" and isinstance(value, (bytes, np.void)):
            return self.fill_value_from_json(list(np.asarray(value).tobytes()))
        return self.fill_value_from_json(value.item() if isinstance(value, np.generic) else value)


def _scalar(a: np.ndarray[Any, Any]) -> np.generic:
    """The scalar held by a 0-d array, keeping its exact dtype (and NaN payload)."""
    return cast("np.generic", a[()])


def _integer_range(dt: np.dtype[Any]) -> tuple[int, int]:
    if dt.kind in "iu":
        return int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    import ml_dtypes

    ml_info = ml_dtypes.iinfo(dt)  # type: ignore[no-untyped-call]  # ml_dtypes ships no stubs for iinfo
    return int(ml_info.min), int(ml_info.max)


_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_UINT_FOR_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _float_from_json(value: Any, dt: np.dtype[Any], field: str, name: str) -> np.generic:
    if isinstance(value, bool):
        raise MetadataError(f"{field}: expected a number for {name}, got {value!r}")
    if isinstance(value, (int, float)) and value == 0 and dt.name == "float8_e8m0fnu":
        # This format has no zero; TensorStore stores a 0 fill as its smallest value (bits 0x00).
        return _scalar(np.zeros((), dtype=dt))
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
            return _scalar(np.array(bits, dtype=_UINT_FOR_SIZE[dt.itemsize]).view(dt))
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
    """True if every element of ``a`` equals ``fill``; NaN compares equal to NaN, and a zero
    equals a zero of its own sign only."""
    if a.ndim > 1 and a.size > a.shape[-1]:
        # Real data rarely is fill: its first row usually settles it without a full scan.
        first_row = a[(0,) * (a.ndim - 1)]
        if not fill_value_bytes_equal(first_row, fill):
            return False
    if a.dtype.kind == "O":
        # Compare the objects themselves: NumPy would make bytes a bytes_ scalar, dropping NULs.
        boxed = np.empty((), dtype=object)
        boxed[()] = fill
        return bool(np.all(a == boxed))
    if a.dtype.kind in "mM":
        # NaT != NaT: times compare by their int64 counts.
        fill_count = np.asarray(fill, dtype=a.dtype).view(np.int64)
        return bool(np.all(a.view(np.int64) == fill_count))
    if a.dtype.kind == "V" and not is_float_like(a.dtype):
        # Raw and structured types: compare the bytes (NaN fields compare by bit pattern).
        fill_bytes = np.frombuffer(np.asarray(fill, dtype=a.dtype).tobytes(), dtype=np.uint8)
        flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(-1, a.dtype.itemsize)
        return bool(np.all(flat == fill_bytes))
    if is_float_like(a.dtype) and np.isnan(fill):
        same = _same_bits(a, fill)
        if same is not None:
            # A NaN of another sign or payload (``inf - inf`` is 0xffc00000 on x86) is not the
            # fill NaN: what reads back must be what was written (TensorStore stores it too).
            return same
        if a.dtype.kind == "c":
            f = complex(fill)
            re_ok = np.isnan(a.real) if math.isnan(f.real) else _equal_signed(a.real, f.real)
            im_ok = np.isnan(a.imag) if math.isnan(f.imag) else _equal_signed(a.imag, f.imag)
            return bool(np.all(re_ok & im_ok))
        return bool(np.all(np.isnan(a)))
    if is_float_like(a.dtype) and _has_a_zero_part(fill):
        # -0.0 == 0.0, yet a chunk of one is not the fill value of the other: what reads back
        # must be what was written (zarr-python and TensorStore store such chunks too). A value
        # without NaN has one bit pattern a sign: the bits compared in one pass (equality and
        # signs took two, and their temporaries, on every chunk written with the common fill 0).
        same = _same_bits(a, fill)
        return _equal_with_signs(a, fill) if same is None else same
    return bool(np.all(a == fill))


def _same_bits(a: np.ndarray[Any, Any], fill: np.generic) -> bool | None:
    """Whether every element of the float array ``a`` has ``fill``'s bits (complex: each
    part's); None for a type without a plain bit pattern (long double: padding bytes)."""
    size = a.dtype.itemsize // (2 if a.dtype.kind == "c" else 1)
    if size not in (1, 2, 4, 8):
        return None
    unsigned = np.dtype(f"u{size}")
    bits = np.ascontiguousarray(a).view(unsigned)
    fill_bits = np.asarray(fill, dtype=a.dtype).reshape(1).view(unsigned)
    if a.dtype.kind == "c":
        return bool(np.all(bits.reshape(-1, 2) == fill_bits))
    return bool(np.all(bits == fill_bits[0]))


def _has_a_zero_part(fill: np.generic) -> bool:
    value = complex(fill)  # real floats too (ml_dtypes' among them)
    return value.real == 0 or (value.imag == 0 and isinstance(fill, np.complexfloating))


def _equal_with_signs(a: np.ndarray[Any, Any], fill: np.generic) -> bool:
    """Whether every element of the float array ``a`` equals ``fill`` with the same sign
    (complex: part by part). Signs, not bytes: a long double's padding bytes are not its value."""
    if a.dtype.kind == "c":
        f = complex(fill)
        return bool(np.all(_equal_signed(a.real, f.real) & _equal_signed(a.imag, f.imag)))
    return bool(np.all(_equal_signed(a, fill)))


def _equal_signed(a: np.ndarray[Any, Any], fill: Any) -> np.ndarray[Any, Any]:
    """Element by element: equal to ``fill`` and of its sign (-0.0 is not 0.0)."""
    return (a == fill) & (np.signbit(a) == np.signbit(fill))  # type: ignore[no-any-return]


__all__ = ["CORE_DATA_TYPES", "DataType", "fill_value_bytes_equal", "is_variable_length"]
