"""The CPU backend: output buffers are NumPy arrays; inputs are anything NumPy can view."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..buffers import aligned_empty


def empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """An output buffer; page-aligned so that reads straight into it copy at full speed."""
    return aligned_empty(shape, dtype)


def as_host_array(value: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A NumPy view (or copy, when unavoidable) of a value to be written.

    Accepts NumPy arrays, scalars, anything with ``__array__`` or a host ``__dlpack__``, and
    device arrays (``__cuda_array_interface__`` or a CUDA ``__dlpack__``: CuPy, PyTorch), which
    are copied to the host through ``backends.cuda.host``.
    """
    from .cuda.host import device_to_host, is_device_array  # imports no GPU library by itself

    if is_device_array(value):
        value = device_to_host(value)
    elif not hasattr(value, "__array__") and hasattr(value, "__dlpack__"):
        value = np.from_dlpack(value)
    return np.asarray(value, dtype=dtype)
