"""The data types zarr-python 3 adds to the core spec: strings, bytes and times.

========================= ===================================== ===================== =====================
v3 ``data_type``           configuration                         NumPy                 v2 ``dtype``
========================= ===================================== ===================== =====================
``string``                 none                                  ``StringDType()``     ``|O`` + ``vlen-utf8``
``variable_length_bytes``  none (``bytes`` is read as well)      ``object``            ``|O`` + ``vlen-bytes``
``null_terminated_bytes``  ``{"length_bytes": n}``               ``S<n>``              ``|S<n>``
``fixed_length_utf32``     ``{"length_bytes": 4 n}``             ``U<n>``              ``<U<n>``, ``>U<n>``
``raw_bytes``              ``{"length_bytes": n}``               ``V<n>``              ``|V<n>``
``numpy.datetime64``       ``{"unit": "s", "scale_factor": 1}``  ``datetime64[1s]``    ``<M8[s]``
``numpy.timedelta64``      ``{"unit": "ns", "scale_factor": 1}`` ``timedelta64[ns]``   ``<m8[ns]``
========================= ===================================== ===================== =====================

``string`` is NumPy's variable-width ``StringDType`` (object arrays of ``str`` on NumPy 1), as in
zarr-python. The two variable-length types are encoded by the ``vlen-utf8`` / ``vlen-bytes``
codecs (:mod:`gpuzarr.codecs.vlen`), which v2 lists as the first filter.

Fill values are the same JSON in v2 and v3: a string for the text types (zarr-python also reads
a number for ``string``), base64 for the byte types, and the int64 count of units for the time
types (``NaT`` is -2**63; the string ``"NaT"`` is read too). The default fill value, as in
zarr-python, is the empty string, the empty bytes, zero bytes, and NaT.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, cast

import numpy as np

from ..errors import MetadataError

STRING = "string"
VARIABLE_LENGTH_BYTES = "variable_length_bytes"
#: zarr-python reads ``bytes`` (the zarr-extensions name) as variable-length bytes too.
VLEN_BYTES_NAMES = (VARIABLE_LENGTH_BYTES, "bytes")
#: name -> NumPy kind of the types with a ``length_bytes`` configuration
LENGTH_TYPES = {"null_terminated_bytes": "S", "fixed_length_utf32": "U", "raw_bytes": "V"}
#: name -> NumPy kind of the types with a ``unit`` and ``scale_factor``
TIME_TYPES = {"numpy.datetime64": "M", "numpy.timedelta64": "m"}
TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as", "generic")
NAMES = (STRING, *VLEN_BYTES_NAMES, *LENGTH_TYPES, *TIME_TYPES)
#: The NumPy kinds only these types have (raw ``V`` is shared with the core ``r*`` types).
KINDS = "TOSUMm"

_NAT = np.iinfo(np.int64).min
_MAX_SCALE = 2**31 - 1


def string_dtype() -> np.dtype[Any]:
    """The NumPy dtype of ``string`` arrays: ``StringDType()`` (NumPy 2), else ``object``."""
    string_type = getattr(np.dtypes, "StringDType", None)
    return np.dtype(object) if string_type is None else np.dtype(string_type())


def object_codec_id(name: str) -> str | None:
    """The codec that encodes a variable-length type (``vlen-utf8``, ``vlen-bytes``), else None."""
    if name == STRING:
        return "vlen-utf8"
    if name in VLEN_BYTES_NAMES:
        return "vlen-bytes"
    return None


# -- names <-> NumPy dtypes ------------------------------------------------------------------------


def parse(value: Any, field: str) -> tuple[str, np.dtype[Any]] | None:
    """(name, native NumPy dtype) of a v3 ``data_type`` of this module, None for other types."""
    name, config = value, None
    if isinstance(value, dict):
        name, config = value.get("name"), value.get("configuration")
        extra = set(value) - {"name", "configuration"}
        if name in NAMES and extra:
            raise MetadataError(f"{field}: unexpected members {sorted(extra)} of data type {name!r}")
    if not isinstance(name, str) or name not in NAMES:
        return None
    if name in LENGTH_TYPES:
        return name, _length_dtype(name, config, field)
    if name in TIME_TYPES:
        return name, _time_dtype(name, config, field)
    if config not in (None, {}):
        raise MetadataError(f"{field}: data type {name!r} takes no configuration, got {config!r}")
    return name, string_dtype() if name == STRING else np.dtype(object)


def _length_dtype(name: str, config: Any, field: str) -> np.dtype[Any]:
    if not isinstance(config, dict) or set(config) != {"length_bytes"}:
        raise MetadataError(f"{field}.configuration: expected {{\"length_bytes\": n}} for {name}, got {config!r}")
    length = config["length_bytes"]
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise MetadataError(f"{field}.configuration.length_bytes: expected a positive integer, got {length!r}")
    kind = LENGTH_TYPES[name]
    if kind == "U":
        if length % 4:
            raise MetadataError(
                f"{field}.configuration.length_bytes: {name} needs a multiple of 4 (UTF-32), got {length}"
            )
        length //= 4
    if length * np.dtype(f"{kind}1").itemsize > 2**31 - 1:
        # NumPy stores the itemsize in a C int.
        raise MetadataError(
            f"{field}.configuration.length_bytes: at most {2**31 - 1} bytes per element are supported, "
            f"got {config['length_bytes']}"
        )
    return np.dtype(f"{kind}{length}")


def _time_dtype(name: str, config: Any, field: str) -> np.dtype[Any]:
    if not isinstance(config, dict) or set(config) != {"unit", "scale_factor"}:
        raise MetadataError(
            f"{field}.configuration: expected {{\"unit\": ..., \"scale_factor\": ...}} for {name}, got {config!r}"
        )
    unit, scale = config["unit"], config["scale_factor"]
    if unit not in TIME_UNITS:
        raise MetadataError(f"{field}.configuration.unit: expected one of {list(TIME_UNITS)}, got {unit!r}")
    if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= _MAX_SCALE:
        raise MetadataError(
            f"{field}.configuration.scale_factor: expected an integer from 1 to {_MAX_SCALE}, got {scale!r}"
        )
    if unit == "generic":
        if scale != 1:
            raise MetadataError(f"{field}.configuration.scale_factor: must be 1 for the generic unit, got {scale}")
        return np.dtype(TIME_TYPES[name] + "8")
    return np.dtype(f"{TIME_TYPES[name]}8[{scale}{unit}]")


def from_numpy(dtype: np.dtype[Any]) -> tuple[str, np.dtype[Any]] | None:
    """(name, native dtype) for a NumPy dtype of this module's kinds, None for other kinds."""
    kind = dtype.kind
    if kind == "T":
        if hasattr(dtype, "na_object"):
            raise MetadataError(f"dtype: {dtype} has an na_object, which the Zarr string data type cannot store")
        return STRING, string_dtype()  # coerce=False or not, arrays read back as zarr-python gives them
    if kind == "O":
        raise MetadataError(
            "dtype: object is ambiguous; use dtype='string' (variable-length strings) or "
            "'variable_length_bytes'"
        )
    if kind in "SU":
        if dtype.itemsize == 0:
            other = "'string'" if kind == "U" else "'variable_length_bytes'"
            raise MetadataError(f"dtype: {dtype} has no length; give one ({kind}8) or use dtype={other}")
        return ("null_terminated_bytes" if kind == "S" else "fixed_length_utf32"), dtype.newbyteorder("=")
    if kind in "Mm":
        return ("numpy.datetime64" if kind == "M" else "numpy.timedelta64"), dtype.newbyteorder("=")
    return None


def to_json(name: str, dtype: np.dtype[Any]) -> str | dict[str, Any]:
    """The v3 ``data_type`` JSON, as zarr-python writes it."""
    if name in LENGTH_TYPES:
        return {"name": name, "configuration": {"length_bytes": dtype.itemsize}}
    if name in TIME_TYPES:
        unit, scale = np.datetime_data(dtype)
        return {"name": name, "configuration": {"unit": unit, "scale_factor": int(scale)}}
    return name


def v2_dtype(name: str, dtype: np.dtype[Any], endian: str | None) -> str:
    """The v2 ``dtype`` string (``endian`` is the byte order of multi-byte elements)."""
    if object_codec_id(name) is not None:
        return "|O"
    if dtype.kind in "UMm":
        return dtype.newbyteorder(">" if endian == "big" else "<").str
    return dtype.str  # |S8, |V8


# -- fill values -----------------------------------------------------------------------------------


def fill_kind(name: str, dtype: np.dtype[Any]) -> str:
    """"t" time, "s" text, "y" bytes, "r" raw bytes (see :attr:`DataType.fill_kind`)."""
    if name in TIME_TYPES:
        return "t"
    if name == STRING or dtype.kind == "U":
        return "s"
    if name in VLEN_BYTES_NAMES or dtype.kind == "S":
        return "y"
    return "r"


def _generic(value: object) -> np.generic:
    # The fill value of a variable-length type is the Python str or bytes an element holds:
    # NumPy's str_ and bytes_ scalars would drop trailing NUL characters.
    return cast("np.generic", value)


def default_fill(name: str, dtype: np.dtype[Any]) -> np.generic:
    kind = fill_kind(name, dtype)
    if kind == "t":
        return _time_from_int(_NAT, dtype)
    if kind == "s":
        return _generic("") if name == STRING else np.str_("")
    if kind == "y":
        return _generic(b"") if name in VLEN_BYTES_NAMES else np.bytes_(b"")
    return cast("np.generic", np.zeros((), dtype=dtype)[()])


def _time_from_int(value: int, dtype: np.dtype[Any]) -> np.generic:
    return cast("np.generic", np.array(value, dtype=np.int64).view(dtype)[()])


def fill_from_json(name: str, dtype: np.dtype[Any], value: Any, field: str) -> np.generic:
    """A JSON fill value (v2 or v3) of a type of this module."""
    kind = fill_kind(name, dtype)
    if kind == "t":
        if value == "NaT":
            return _time_from_int(_NAT, dtype)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MetadataError(f"{field}: expected an integer or \"NaT\" for {name}, got {value!r}")
        if not _NAT <= value < 2**63:
            raise MetadataError(f"{field}: {value} is out of the int64 range of {name}")
        _refuse_generic_time(name, dtype, value != _NAT, field)
        return _time_from_int(value, dtype)
    if kind == "s":
        if name == STRING and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # zarr-python 2 wrote numbers as the fill value of string arrays
        if not isinstance(value, str):
            raise MetadataError(f"{field}: expected a string for {name}, got {value!r}")
        return _text(name, dtype, value, field)
    if not isinstance(value, str):
        raise MetadataError(f"{field}: expected a base64 string for {name}, got {value!r}")
    try:
        raw = base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise MetadataError(f"{field}: {value!r} is not valid base64 ({exc})") from exc
    return _bytes(name, dtype, raw, field)


def _text(name: str, dtype: np.dtype[Any], value: str, field: str) -> np.generic:
    # JSON's escapes can spell a lone surrogate ("\ud800"): no Unicode text, and NumPy's string
    # types refuse it when a chunk is compared with the fill value.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MetadataError(f"{field}: {value!r} is not Unicode text ({exc.reason})") from exc
    if name == STRING:
        return _generic(value)
    length = dtype.itemsize // 4
    if len(value) > length:
        raise MetadataError(f"{field}: {value!r} has more than the {length} characters of {name}")
    return np.str_(value)


def _bytes(name: str, dtype: np.dtype[Any], raw: bytes, field: str) -> np.generic:
    if name in VLEN_BYTES_NAMES:
        return _generic(raw)
    if dtype.kind == "S":
        if len(raw) > dtype.itemsize:
            raise MetadataError(f"{field}: {len(raw)} bytes do not fit the {dtype.itemsize} of {name}")
        return cast("np.generic", np.array(raw, dtype=dtype)[()])
    if len(raw) != dtype.itemsize:
        raise MetadataError(f"{field}: expected {dtype.itemsize} bytes for {name}, got {len(raw)}")
    return cast("np.generic", np.frombuffer(raw, dtype=dtype)[0])


def fill_to_json(name: str, dtype: np.dtype[Any], value: Any) -> Any:
    """The JSON form of a fill value, as zarr-python writes it."""
    kind = fill_kind(name, dtype)
    if kind == "t":
        return int(np.asarray(value, dtype=dtype).view(np.int64))
    if kind == "s":
        return str(value)
    if kind == "y":
        return base64.standard_b64encode(bytes(value)).decode("ascii")
    return base64.standard_b64encode(np.asarray(value, dtype=dtype).tobytes()).decode("ascii")


def fill_from_python(name: str, dtype: np.dtype[Any], value: Any) -> np.generic:
    """A fill value a user gave: a scalar of the type (``str``, ``bytes``, ``numpy.datetime64``,
    a date string, a count of units, ...)."""
    field = "fill_value"
    kind = fill_kind(name, dtype)
    if kind == "t":
        return _time_from_python(name, dtype, value)
    if kind == "s":
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise MetadataError(f"{field}: expected a str for {name}, got {value!r}")
        return _text(name, dtype, str(value), field)
    if isinstance(value, str):
        value = value.encode("utf-8")
    if kind == "r" and isinstance(value, (list, tuple)):
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in value):
            raise MetadataError(f"{field}: expected byte values 0-255 for {name}, got {value!r}")
        value = bytes(value)
    if isinstance(value, np.void):
        value = value.tobytes()
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise MetadataError(f"{field}: expected bytes for {name}, got {value!r}")
    return _bytes(name, dtype, bytes(value), field)


def _time_from_python(name: str, dtype: np.dtype[Any], value: Any) -> np.generic:
    # NumPy's timedelta64 is an np.integer too: a time of its own unit, not a count of the array's.
    is_time = isinstance(value, (np.datetime64, np.timedelta64))
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and not is_time:
        # A count of the array's units, as in the JSON form.
        return fill_from_json(name, dtype, int(value), "fill_value")
    if isinstance(value, (bool, float, complex, np.bool_, np.inexact)):
        raise MetadataError(f"fill_value: expected a {name} value, got {value!r}")
    try:
        # Date strings, "NaT", datetime objects and NumPy times of any unit.
        time = cast("np.generic", np.asarray(value).astype(dtype)[()])
    except (TypeError, ValueError, OverflowError) as exc:
        raise MetadataError(f"fill_value: {value!r} is not a {name} value for {dtype} ({exc})") from exc
    _refuse_generic_time(name, dtype, not np.isnat(time), "fill_value")
    return time


def _refuse_generic_time(name: str, dtype: np.dtype[Any], is_time: bool, field: str) -> None:
    """A time of no unit (``M8``, ``m8``) holds only NaT: NumPy converts no other value of it
    (``ValueError`` wherever it is read), and zarr-python refuses the array."""
    if is_time and np.datetime_data(dtype)[0] == "generic":
        raise MetadataError(f"{field}: a {name} of generic unit ({dtype}) holds only NaT; give the type a unit")


def full(shape: tuple[int, ...], fill: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``np.full(shape, fill, dtype)``, keeping the exact object in object arrays (``np.full``
    turns bytes into a NumPy bytes scalar first, which drops trailing NUL bytes)."""
    if dtype.kind != "O":
        return np.full(shape, fill, dtype=dtype)
    out = np.empty(shape, dtype=dtype)
    out.fill(fill)
    return out
