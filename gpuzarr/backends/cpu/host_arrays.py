"""The CPU backend: output buffers are NumPy arrays; inputs are anything NumPy can view."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...metadata.dtypes import is_variable_length
from ...output_pool import pooled_empty
from . import torch_types


def empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """An output buffer; page-aligned so that reads straight into it copy at full speed, and
    taken from the pool of outputs nothing refers to any more (:mod:`gpuzarr.output_pool`).

    Arrays of strings and bytes objects hold references, which NumPy must allocate itself.
    """
    if is_variable_length(dtype):
        return np.empty(shape, dtype)
    return pooled_empty(shape, dtype)


def as_host_array(value: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A NumPy view (or copy, when unavoidable) of a value to be written.

    Accepts NumPy arrays, scalars, anything with ``__array__`` or a host ``__dlpack__``, and
    device arrays (``__cuda_array_interface__`` or a CUDA ``__dlpack__``: CuPy), which are
    copied to the host through ``backends.cuda.host``. PyTorch tensors go through
    :func:`_torch_values`. The conversion to ``dtype`` is NumPy's (ml_dtypes' for its types)
    whatever the source, so that one array holds the same values whoever wrote them.
    """
    torch = sys.modules.get("torch")  # a tensor cannot exist without it
    if torch is not None and isinstance(value, torch.Tensor):
        return np.asarray(_torch_values(value), dtype=dtype)
    if is_device_array(value):
        from ..cuda.host import device_to_host

        value = device_to_host(value)
    elif not hasattr(value, "__array__") and hasattr(value, "__dlpack__"):
        value = np.from_dlpack(value)
    values = np.asarray(value, dtype=dtype)
    return _canonical_bools(values) if values.dtype == np.bool_ else values


def _canonical_bools(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``values`` with every true element the byte 1, as Zarr stores booleans.

    A NumPy bool array made by a view of other bytes (``.view(bool)``, ``np.frombuffer``)
    holds them as they are, and NumPy copies them through; TensorStore refuses a chunk holding
    a byte other than 0 and 1.
    """
    bits = values.view(np.uint8)
    if values.size == 0 or int(bits.max()) <= 1:
        return values
    canonical: np.ndarray[Any, Any] = np.not_equal(bits, 0)
    return canonical


def _torch_values(value: Any) -> np.ndarray[Any, Any]:
    """A PyTorch tensor's values as a NumPy array of its own type, on the host.

    Gradients, a negative or conjugate bit and a GPU device are resolved first (a tensor that
    requires grad, an ``nn.Parameter``, gives its values). ``bfloat16`` and the ``float8``
    types, which ``Tensor.numpy()`` refuses, come as their bits viewed as ml_dtypes' type of
    the same name; the caller's conversion is then NumPy's, as for any other source.
    """
    import torch  # a tensor is here: torch is imported already

    tensor = value.detach().resolve_neg().resolve_conj()
    if tensor.layout != torch.strided:  # sparse
        tensor = tensor.to_dense()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    values: np.ndarray[Any, Any] | None
    try:
        values = tensor.numpy()
    except TypeError:  # a type NumPy has none of
        values = None
    if values is not None:
        return values
    if not (tensor.is_floating_point() or tensor.is_complex()):
        # PyTorch's sub-byte integer types are placeholders whose bytes hold no values.
        raise TypeError(f"cannot write a PyTorch tensor of {tensor.dtype}: it has no values NumPy can take")
    values = torch_types.host_view(tensor)
    if values is not None:
        return values
    # Widened exactly (float32 holds every bfloat16 and float8 value; complex64 every
    # complex32), where this ml_dtypes has no type of the name.
    try:
        wider: np.ndarray[Any, Any] = tensor.to(torch.complex64 if tensor.is_complex() else torch.float32).numpy()
    except (NotImplementedError, RuntimeError) as exc:  # packed types (float4_e2m1fn_x2)
        raise TypeError(f"cannot write a PyTorch tensor of {tensor.dtype}: {exc}") from exc
    return wider


def host_output(out: Any) -> np.ndarray[Any, Any]:
    """A NumPy view of ``out``'s own memory, for reading into it (never a copy).

    NumPy arrays are taken as they are. Other objects are viewed through DLPack (a PyTorch CPU
    tensor) or the buffer protocol, and must be C-contiguous: the read writes through one view,
    which point selections reshape, and a reshape of a strided view would be a copy that the
    caller never sees.
    """
    if isinstance(out, np.ndarray):
        return out
    view: np.ndarray[Any, Any]
    _refuse_lazy_negation(out)
    if hasattr(out, "__dlpack__"):
        if is_device_array(out):
            raise TypeError(f"out: expected host memory on device 'cpu', got a GPU {type(out).__name__}")
        try:
            view = np.from_dlpack(out)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            # A tensor of bfloat16 or a float8 type: NumPy's DLPack has no such types, ml_dtypes
            # has them, and the tensor's bits are viewed as those.
            bits = torch_types.host_view(out)
            if bits is None:
                name = type(out).__name__
                raise InvalidArgumentError(f"out: cannot write into this {name} through DLPack: {exc}") from exc
            view = bits
        if not view.flags.writeable:
            view = _writable_same_memory(out, view)
    else:
        try:
            view = np.asarray(memoryview(out))
        except TypeError:
            raise TypeError(
                f"out: expected a numpy.ndarray or an object exporting DLPack or the buffer protocol "
                f"on device 'cpu', got {type(out).__name__}"
            ) from None
    if not view.flags.c_contiguous:
        raise InvalidArgumentError(
            f"out: expected a C-contiguous {type(out).__name__}, got strides {view.strides} for shape {view.shape}"
        )
    return view


def _refuse_lazy_negation(out: Any) -> None:
    """A PyTorch tensor with its negative bit set (``torch._neg_view``) shows its memory negated;
    DLPack hands over the memory as it is, so values read into it would read back negated."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(out, torch.Tensor) and out.is_neg():
        raise InvalidArgumentError(
            "out: the tensor has its negative bit set (a lazy negation, such as torch._neg_view "
            "makes): values read into its memory would read back negated; pass a tensor without it"
        )


def mark_written(out: Any) -> None:
    """Tell autograd that ``out``, a PyTorch tensor just read into, changed in place, as
    ``Tensor.copy_`` does: a graph that saved it for its backward pass then raises "modified by
    an inplace operation" instead of computing gradients from the new values."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(out, torch.Tensor):
        torch.autograd.graph.increment_version(out)


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


def _writable_same_memory(out: Any, view: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``view`` (``out`` through DLPack, read-only), or a writable array of ``out``'s own
    ``__array__`` where that is the very same memory: NumPy before 2.3 marks every DLPack
    import read-only (a PyTorch CPU tensor among them), whose ``__array__`` views it."""
    try:
        other = np.asarray(out)
    except Exception:  # any exporter's failure: keep the read-only view, which is refused
        return view
    same = (
        other.flags.writeable
        and other.dtype == view.dtype
        and other.shape == view.shape
        and other.strides == view.strides
        and (other.size == 0 or other.__array_interface__["data"][0] == view.__array_interface__["data"][0])
    )
    return other if same else view
