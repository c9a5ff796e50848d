"""Device selection: ``device="auto" | "cpu" | "gpu" | "cuda" | "cuda:N"``.

A device string resolves once, when an array is opened, to ``"cpu"`` or ``"cuda:N"``:

* ``"cpu"``: NumPy results.
* ``"gpu"`` / ``"cuda"``: the current CUDA device; ``"cuda:N"``: device N. Raises DeviceError,
  naming what is missing, when the GPU path cannot run (CuPy or nvCOMP not installed, no device).
* ``"auto"``: the GPU when the GPU path can run, else the CPU. The environment variable
  ``GPUZARR_DEVICE`` (``cpu``, ``gpu``, ``cuda:N``), when set, is what ``"auto"`` means: CI jobs
  and test suites on GPU hosts use it to keep NumPy results.

The probe (``backends.cuda.runtime.probe``) imports CuPy only when it is installed, so a
machine without the GPU extra pays nothing; it runs once per process.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, Any

from ..errors import DeviceError
from ..metadata.dtypes import is_ml_dtype

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np

DEVICES = ("auto", "cpu", "gpu", "cuda")
ENVIRONMENT_VARIABLE = "GPUZARR_DEVICE"

#: ``device`` of the caller whose call this thread runs (``gpuzarr.open_async``): what "gpu" and
#: "cuda" take as the current device here, where CUDA's own is this thread's
_caller = threading.local()


def _probe() -> tuple[str | None, int]:
    from .cuda.runtime import probe

    return probe()


def gpu_unavailable_reason() -> str | None:
    """Why the GPU read path cannot run in this process, or None when it can."""
    return _probe()[0]


def gpu_available() -> bool:
    """True when CuPy and nvCOMP are installed and CuPy sees a usable CUDA device."""
    return gpu_unavailable_reason() is None


def device_count() -> int:
    return _probe()[1]


def _current_device() -> int:
    from .cuda.runtime import current_device

    return current_device()


def _cuda(device: str) -> str:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise DeviceError(f"device={device!r}: the GPU read path cannot run here: {reason}")
    if device in ("gpu", "cuda"):
        index: int | None = getattr(_caller, "device", None)
        return f"cuda:{_current_device() if index is None else index}"
    index_text = device.partition(":")[2]
    if not index_text.isdigit():
        raise DeviceError(f"device={device!r}: expected 'cuda:N' with a device number N")
    index = int(index_text)
    if index >= device_count():
        raise DeviceError(f"device={device!r}: this machine has {device_count()} CUDA device(s)")
    return f"cuda:{index}"


def _is_cuda(device: str) -> bool:
    return device in ("gpu", "cuda") or device.startswith("cuda:")


def resolve_device(device: str) -> str:
    """The concrete device reads run on: ``"cpu"`` or ``"cuda:N"``."""
    if not isinstance(device, str):
        raise DeviceError(f"device: expected a string, got {device!r}")
    if device == "cpu":
        return "cpu"
    if _is_cuda(device):
        return _cuda(device)
    if device != "auto":
        raise DeviceError(f"device: expected one of {list(DEVICES)} or 'cuda:N', got {device!r}")
    forced = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if forced and forced != "auto":
        if forced != "cpu" and not _is_cuda(forced):
            raise DeviceError(f"{ENVIRONMENT_VARIABLE}={forced!r}: expected cpu, gpu, cuda or cuda:N")
        return resolve_device(forced)
    return _cuda("cuda") if gpu_available() else "cpu"


def callers_device(device: Any) -> int | None:
    """The CUDA device ``device`` resolves to on this thread now where that is the thread's
    current device ("gpu", "cuda", "auto" on a GPU); None where it does not depend on the
    thread (the CPU, "cuda:N") or the GPU path cannot run (the DeviceError is raised where it
    is opened). A device string that names nothing raises DeviceError here.
    """
    if not isinstance(device, str) or (device not in DEVICES and not device.startswith("cuda:")):
        resolve_device(device)  # raises, naming what is wrong
    if device == "cpu" or device.startswith("cuda:"):
        return None
    try:
        return device_index(resolve_device(device))
    except DeviceError:
        return None


@contextlib.contextmanager
def current_device_of_caller(index: int | None) -> Iterator[None]:
    """Within: "gpu" and "cuda" resolve to device ``index`` on this thread (None: unchanged)."""
    before = getattr(_caller, "device", None)
    _caller.device = index if index is not None else before
    try:
        yield
    finally:
        _caller.device = before


def cupy_supports(dtype: np.dtype[Any]) -> bool:
    """Whether CuPy arrays can hold ``dtype``: booleans, integers, floats and complex numbers.
    Structured, raw (``r*``), extended-precision and ml_dtypes types (bfloat16, float8, int4,
    ...), strings, bytes, datetime64 and timedelta64 cannot."""
    if dtype.fields is not None or is_ml_dtype(dtype):
        # ml_dtypes' float8_e5m2 is of kind "f" like NumPy's floats, and CuPy holds it no more
        # than the others: it opened on the GPU with device="auto".
        return False
    if dtype.kind in "fc":
        return dtype.itemsize <= (8 if dtype.kind == "f" else 16)  # no long double
    return dtype.kind in "biu"


#: integer types of each item size that carry the bits of a type CuPy cannot hold
_BIT_CARRIERS = {1: "uint8", 2: "int16"}


def bits_carrier(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """The integer type of ``dtype``'s size that carries its elements' bits on a CuPy device,
    for the machine-learning types CuPy cannot hold (ml_dtypes' ``bfloat16``, the ``float8``
    formats, ``int4`` held a byte each); None for any other type. A loader reads such arrays
    as these bits on the GPU and hands the batches over as their own type (a PyTorch
    ``bfloat16`` tensor), which no decode or copy on the way ever looks at."""
    if not is_ml_dtype(dtype) or dtype.fields is not None:
        return None
    import numpy as np

    carrier = _BIT_CARRIERS.get(dtype.itemsize)
    return None if carrier is None else np.dtype(carrier)


def resolve_device_for(device: str, dtype: np.dtype[Any]) -> str:
    """:func:`resolve_device` for an array of ``dtype``: "auto" stays on the CPU for data types
    CuPy cannot hold, and asking for the GPU explicitly raises naming the type."""
    resolved = resolve_device(device)
    if resolved == "cpu" or cupy_supports(dtype):
        return resolved
    if device == "auto":
        return "cpu"
    # Variable-length strings and bytes are Python objects: they exist in host memory only.
    why = " (variable-length strings and bytes are Python objects)" if dtype.hasobject else ""
    loader = (
        "; gpuzarr.loader.CropLoader(..., device='gpu') reads it on the GPU as its bits and hands "
        f"batches over as {dtype} tensors"
        if bits_carrier(dtype) is not None
        else ""
    )
    raise DeviceError(
        f"device={device!r}: CuPy arrays cannot hold the data type {dtype}{why}; open this array "
        f"with device='cpu' (or 'auto'){loader}"
    )


def device_index(resolved: str) -> int | None:
    """N of a resolved ``"cuda:N"``, None for ``"cpu"``."""
    return None if resolved == "cpu" else int(resolved.partition(":")[2])
