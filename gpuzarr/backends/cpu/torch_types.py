"""PyTorch tensors of host arrays and host arrays of PyTorch tensors, without copies.

NumPy and PyTorch share most element types, and ``torch.from_numpy`` and DLPack carry those.
The machine-learning types (``bfloat16``, the ``float8`` formats), which NumPy knows only
through ml_dtypes, cross neither: ``torch.from_numpy`` refuses an ml_dtypes array, and NumPy
refuses a DLPack tensor of ``bfloat16``. Both libraries can view memory as another type of the
same size, so these cross as their bits, an integer array of the same item size, viewed as the
type on the other side. The memory stays shared; nothing is converted or copied.

Functions that take tensors import nothing: a tensor exists only where torch is imported.
"""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np

from ...metadata.dtypes import is_ml_dtype

#: NumPy types ``torch.from_numpy`` takes (native byte order only), by name
_SHARED = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
    | {"float16", "float32", "float64", "complex64", "complex128"}
)

#: An integer type of each item size, to carry bits neither library converts.
_CARRIERS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def torch_type_name(dtype: np.dtype[Any]) -> str | None:
    """The name of PyTorch's type for arrays of ``dtype`` (``"bfloat16"``, ``"uint16"``), or None
    where it surely has none (strings, structured and datetime types). A name given for an
    ml_dtypes type is checked against torch by :func:`supports`. Needs no torch."""
    if dtype.fields is not None or dtype.subdtype is not None:
        return None
    if dtype.name in _SHARED:
        return dtype.name if dtype.isnative else None
    if is_ml_dtype(dtype):
        # ml_dtypes and PyTorch name their machine-learning floats alike (bfloat16,
        # float8_e4m3fn, float8_e5m2, ..., complex32). _torch_type checks that PyTorch's type of
        # the name is a float of the same size: its sub-byte integers (torch.int4) are
        # placeholders whose bytes hold no values.
        return dtype.name
    return None


def _torch_type(dtype: np.dtype[Any]) -> Any:
    """PyTorch's type for ``dtype``, or None (torch must be imported)."""
    import torch

    name = torch_type_name(dtype)
    found = getattr(torch, name, None) if name is not None else None
    if not isinstance(found, torch.dtype) or found.itemsize != dtype.itemsize:
        return None
    if is_ml_dtype(dtype) and not (found.is_floating_point or found.is_complex):
        return None
    return found


def supports(dtype: np.dtype[Any]) -> bool:
    """Whether a tensor can hold arrays of ``dtype`` (imports torch)."""
    return _torch_type(dtype) is not None


def as_tensor(values: np.ndarray[Any, Any]) -> Any:
    """A CPU tensor sharing ``values``' memory, of the same element type.

    ml_dtypes' types come through an integer view of their bits. Raises TypeError naming the
    type where PyTorch has none.
    """
    import torch

    if values.dtype.name in _SHARED:
        return torch.from_numpy(values)
    target = _torch_type(values.dtype)
    carrier = _CARRIERS.get(values.dtype.itemsize)
    if target is None or carrier is None:
        raise TypeError(f"PyTorch has no tensor type for {values.dtype}")
    return torch.from_numpy(values.view(np.dtype(carrier))).view(target)


def viewed_as(tensor: Any, dtype: np.dtype[Any]) -> Any:
    """``tensor`` (any device; the integer bits of ``dtype``'s elements) viewed as PyTorch's
    type for ``dtype``, sharing its memory. Raises TypeError naming the type where PyTorch has
    none."""
    target = _torch_type(dtype)
    if target is None:
        raise TypeError(f"PyTorch has no tensor type for {dtype}")
    return tensor.view(target)


def host_view(tensor: Any) -> np.ndarray[Any, Any] | None:
    """A NumPy view of a CPU tensor of a machine-learning type NumPy's DLPack refuses
    (``bfloat16``, ``float8_*``), typed as ml_dtypes' type of the same name; None for any other
    tensor, or where this ml_dtypes has no such type."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
        return None
    if not tensor.is_floating_point() and not tensor.is_complex():
        return None
    if tensor.requires_grad:  # as NumPy's DLPack refuses it for the types it has
        return None
    name = str(tensor.dtype).removeprefix("torch.")
    same = getattr(ml_dtypes, name, None)
    carrier = _CARRIERS.get(tensor.element_size())
    if same is None or carrier is None or np.dtype(same).itemsize != tensor.element_size():
        return None
    bits: np.ndarray[Any, Any] = np.from_dlpack(tensor.view(getattr(torch, carrier)))
    typed: np.ndarray[Any, Any] = bits.view(np.dtype(same))
    return typed
