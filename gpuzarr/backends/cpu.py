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

    Accepts NumPy arrays, scalars, anything with ``__array__``, and device arrays exposing
    ``__cuda_array_interface__`` through their ``get()`` (CuPy) — copied to the host.
    """
    if hasattr(value, "__cuda_array_interface__") and hasattr(value, "get"):
        value = value.get()
    return np.asarray(value, dtype=dtype)
