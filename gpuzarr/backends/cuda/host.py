"""Device arrays given to writes (CuPy, PyTorch, anything with ``__cuda_array_interface__`` or a
CUDA ``__dlpack__``) come to the host here: writes encode on the CPU for now."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import kernels

#: DLPack device types whose memory the host cannot read directly (kDLCUDA, kDLCUDAManaged, kDLROCM)
_DEVICE_KINDS = (2, 13, 10)


def is_device_array(value: Any) -> bool:
    """Whether ``value`` lives in GPU memory (checked without importing any GPU library)."""
    if isinstance(value, np.ndarray):
        return False
    if hasattr(value, "__cuda_array_interface__"):
        return True
    device = getattr(value, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return int(device()[0]) in _DEVICE_KINDS
    except Exception:
        return False


def device_to_host(value: Any) -> np.ndarray[Any, Any]:
    """A host copy of a device array (synchronous)."""
    get = getattr(value, "get", None)
    if callable(get) and hasattr(value, "__cuda_array_interface__"):
        return np.asarray(get())  # CuPy, and CuPy-like arrays
    cupy = kernels.import_cupy()
    if hasattr(value, "__cuda_array_interface__"):
        return np.asarray(cupy.asnumpy(cupy.asarray(value)))
    return np.asarray(cupy.asnumpy(cupy.from_dlpack(value)))


__all__ = ["device_to_host", "is_device_array"]
