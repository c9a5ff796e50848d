"""Host arrays as tensors and tensors as host arrays, machine-learning floats included: the same
memory, the same values, and None or a named TypeError where PyTorch or NumPy has no such type."""

from __future__ import annotations

import numpy as np
import pytest

from gpuzarr.backends.cpu import torch_types

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

#: ml_dtypes' types that PyTorch has a tensor type of, by the same name
SHARED_ML = ["bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]


@pytest.mark.parametrize("name", SHARED_ML)
def test_ml_floats_cross_both_ways_in_the_same_memory(name: str) -> None:
    dtype = np.dtype(getattr(ml_dtypes, name))
    values = np.array([0.5, 1, 2, 4, 8, 16], dtype="float32").astype(dtype).reshape(2, 3)
    tensor = torch_types.as_tensor(values)
    assert tensor.dtype == getattr(torch, name) and tuple(tensor.shape) == (2, 3)
    assert tensor.data_ptr() == values.ctypes.data
    np.testing.assert_array_equal(tensor.float().numpy(), values.astype("float32"))
    back = torch_types.host_view(tensor)
    assert back is not None and back.dtype == dtype and np.shares_memory(back, values)
    back[0, 0] = dtype.type(8)  # written through: the caller's tensor sees it
    assert float(tensor[0, 0]) == 8.0


def test_what_pytorch_has_and_lacks() -> None:
    for name in ["bool", "int8", "uint16", "uint64", "float16", "float64", "complex64"]:
        assert torch_types.supports(np.dtype(name)), name
    lacking = ["int4", "uint4", "float8_e3m4", "float8_e4m3b11fnuz", "float4_e2m1fn"]
    for dtype in [np.dtype(getattr(ml_dtypes, n)) for n in lacking if hasattr(ml_dtypes, n)]:
        assert not torch_types.supports(dtype), dtype
        with pytest.raises(TypeError, match=f"PyTorch has no tensor type for {dtype}"):
            torch_types.as_tensor(np.zeros(3, dtype))
    for other in [">u2", "U4", "S3", "M8[s]", "m8[ns]", "V6", [("a", "u1"), ("b", "f4")], ("u1", (2,))]:
        assert not torch_types.supports(np.dtype(other)), other


def test_host_view_is_only_for_cpu_tensors_numpy_cannot_take() -> None:
    assert torch_types.host_view(torch.zeros(3, dtype=torch.float32)) is None  # DLPack carries it
    assert torch_types.host_view(torch.zeros(3, dtype=torch.int16)) is None
    assert torch_types.host_view(np.zeros(3, dtype=ml_dtypes.bfloat16)) is None
    assert torch_types.host_view(torch.zeros(3, dtype=torch.bfloat16, requires_grad=True)) is None
    assert torch_types.host_view(torch.zeros(3, dtype=torch.bfloat16, device="meta")) is None
    strided = torch.zeros((4, 6), dtype=torch.bfloat16)[:, ::2]
    view = torch_types.host_view(strided)
    assert view is not None and view.shape == (4, 3) and view.strides == (12, 4)
