"""Device arrays given to writes (CuPy, PyTorch, anything with ``__cuda_array_interface__`` or a
CUDA ``__dlpack__``; see ``backends.cpu.is_device_array``) come to the host here: writes encode
on the CPU for now."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import kernels


def device_to_host(value: Any) -> np.ndarray[Any, Any]:
    """A host copy of a device array (synchronous)."""
    get = getattr(value, "get", None)
    if callable(get) and hasattr(value, "__cuda_array_interface__"):
        return np.asarray(get())  # CuPy, and CuPy-like arrays
    cupy = kernels.import_cupy()
    if hasattr(value, "__cuda_array_interface__"):
        return np.asarray(cupy.asnumpy(cupy.asarray(value)))
    return np.asarray(cupy.asnumpy(cupy.from_dlpack(value)))


__all__ = ["device_to_host"]
