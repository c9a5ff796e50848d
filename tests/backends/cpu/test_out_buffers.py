"""``read(out=...)`` and ``read_batch(out=...)`` on the CPU into memory that is not a NumPy array:
PyTorch CPU tensors, objects exporting only DLPack, and objects exporting only the buffer
protocol. The read lands in the caller's memory, never in a copy; wrong shapes, dtypes and
layouts are refused with both what was expected and what was given."""

from __future__ import annotations

import array as pyarray
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import InvalidArgumentError

X = np.arange(20 * 12, dtype="float32").reshape(20, 12)


@pytest.fixture
def arr(store: gpuzarr.Store) -> gpuzarr.Array:
    a = gpuzarr.create(store, shape=X.shape, dtype=X.dtype, chunks=(6, 5), device="cpu")
    a[...] = X
    return a


class DLPackOnly:
    """Exports a NumPy array's memory through DLPack alone (no buffer protocol, no __array__)."""

    def __init__(self, base: np.ndarray[Any, Any]) -> None:
        self._base = base

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._base.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._base.__dlpack_device__()


def test_torch_tensor_is_filled_in_place(arr: gpuzarr.Array) -> None:
    torch = pytest.importorskip("torch")
    out = torch.full((4, 7), -1.0, dtype=torch.float32)
    pointer = out.data_ptr()
    result = arr.read((slice(2, 6), slice(3, 10)), out=out)
    assert result is out and out.data_ptr() == pointer
    np.testing.assert_array_equal(out.numpy(), X[2:6, 3:10])
    batch = torch.empty((3, 2, 12), dtype=torch.float32)
    crops = [(slice(0, 2), slice(None)), (slice(9, 11), slice(None)), (slice(18, 20), slice(None))]
    assert arr.read_batch(crops, out=batch) is batch
    np.testing.assert_array_equal(batch.numpy(), np.stack([X[c] for c in crops]))
    # A point selection reshapes the output view: still the tensor's own memory.
    points = torch.empty((3,), dtype=torch.float32)
    arr.read((np.array([0, 5, 19]), np.array([0, 6, 11])), out=points)
    np.testing.assert_array_equal(points.numpy(), X[[0, 5, 19], [0, 6, 11]])


def test_torch_tensor_mismatches_are_named(arr: gpuzarr.Array) -> None:
    torch = pytest.importorskip("torch")
    sel = (slice(0, 4), slice(0, 6))
    expected = r"expected shape \(4, 6\) and dtype float32, "
    with pytest.raises(InvalidArgumentError, match=expected + r"got \(4, 5\) and float32"):
        arr.read(sel, out=torch.empty((4, 5), dtype=torch.float32))
    with pytest.raises(InvalidArgumentError, match=expected + r"got \(4, 6\) and float64"):
        arr.read(sel, out=torch.empty((4, 6), dtype=torch.float64))
    transposed = torch.empty((6, 4), dtype=torch.float32).t()
    with pytest.raises(InvalidArgumentError, match=r"C-contiguous Tensor, got strides \(4, 16\) for shape \(4, 6\)"):
        arr.read(sel, out=transposed)
    with pytest.raises(InvalidArgumentError, match="DLPack"):
        arr.read(sel, out=torch.empty((4, 6), dtype=torch.float32, requires_grad=True))


def test_dlpack_only_exporter(arr: gpuzarr.Array) -> None:
    base = np.zeros((5, 12), dtype="float32")
    out = DLPackOnly(base)
    assert arr.read((slice(10, 15),), out=out) is out
    np.testing.assert_array_equal(base, X[10:15])
    with pytest.raises(InvalidArgumentError, match=r"expected shape \(5, 12\) and dtype float32, got \(12, 5\)"):
        arr.read((slice(10, 15),), out=DLPackOnly(np.zeros((12, 5), dtype="float32")))
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        arr.read((slice(10, 15),), out=DLPackOnly(np.zeros((12, 5), dtype="float32").T))


def test_buffer_protocol_only_exporter(arr: gpuzarr.Array) -> None:
    flat = pyarray.array("f", [0.0] * 12)  # exports the buffer protocol, nothing else
    assert arr.read((3, slice(None)), out=flat) is flat
    np.testing.assert_array_equal(np.frombuffer(flat, dtype="float32"), X[3])
    shaped = memoryview(bytearray(2 * 12 * 4)).cast("B").cast("f", (2, 12))
    arr.read((slice(7, 9),), out=shaped)
    np.testing.assert_array_equal(np.asarray(shaped), X[7:9])
    with pytest.raises(InvalidArgumentError, match=r"got \(12,\) and float64"):
        arr.read((3, slice(None)), out=pyarray.array("d", [0.0] * 12))
    with pytest.raises(InvalidArgumentError, match="read-only"):
        arr.read((3, slice(None)), out=memoryview(bytes(48)).cast("f"))
    strided = memoryview(bytearray(24 * 4)).cast("f")[::2]
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        arr.read((3, slice(None)), out=strided)


def test_objects_without_memory_are_refused(arr: gpuzarr.Array) -> None:
    with pytest.raises(TypeError, match="DLPack or the buffer protocol"):
        arr.read((3, slice(None)), out=[0.0] * 12)


def test_read_batch_names_the_crop_that_differs(arr: gpuzarr.Array) -> None:
    crops = [(slice(0, 2), slice(0, 4)), (slice(2, 4), slice(0, 4)), (slice(4, 7), slice(0, 4))]
    with pytest.raises(InvalidArgumentError, match=r"selection 2 has shape \(3, 4\), expected \(2, 4\)"):
        arr.read_batch(crops)
    # Points of the crops' shape: the right shape, but not a box.
    rows, cols = np.indices((2, 4))
    with pytest.raises(InvalidArgumentError, match="selection 1 selects points"):
        arr.read_batch([(slice(0, 2), slice(0, 4)), (rows, cols)])


def test_a_read_only_dlpack_view_is_replaced_by_the_same_memory_writable() -> None:
    # NumPy before 2.3 marks every DLPack import read-only; an exporter whose __array__ views
    # the same memory (a PyTorch CPU tensor) is written through that instead. A copy is not.
    from gpuzarr.backends.cpu.host_arrays import _writable_same_memory

    base = np.zeros((3, 4), np.float32)
    read_only = base.view()
    read_only.flags.writeable = False

    class Viewing:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:  # type: ignore[type-arg]
            return base

    class Copying:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:  # type: ignore[type-arg]
            return base.copy()

    class Failing:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:  # type: ignore[type-arg]
            raise RuntimeError("no")

    assert _writable_same_memory(Viewing(), read_only) is base
    assert _writable_same_memory(Copying(), read_only) is read_only
    assert _writable_same_memory(Failing(), read_only) is read_only
    shifted = base[1:].view()
    shifted.flags.writeable = False
    assert _writable_same_memory(Viewing(), shifted) is shifted  # another shape and start: kept


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_tensors_of_machine_learning_floats_are_filled_in_place(store: gpuzarr.Store, name: str) -> None:
    """NumPy's DLPack has no bfloat16 or float8: such a tensor is filled through its bits."""
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = (np.arange(8 * 6, dtype="float32").reshape(8, 6) / 4).astype(getattr(ml_dtypes, name))
    a = gpuzarr.create(store, shape=values.shape, dtype=values.dtype, chunks=(3, 4), device="cpu")
    a[...] = values
    out = torch.full((5, 4), -1.0, dtype=getattr(torch, name))
    pointer = out.data_ptr()
    assert a.read((slice(2, 7), slice(1, 5)), out=out) is out
    assert out.data_ptr() == pointer
    np.testing.assert_array_equal(out.float().numpy(), values[2:7, 1:5].astype("float32"))
    batch = torch.empty((2, 2, 6), dtype=getattr(torch, name))
    crops = [(slice(0, 2), slice(None)), (slice(5, 7), slice(None))]
    assert a.read_batch(crops, out=batch) is batch
    np.testing.assert_array_equal(batch.float().numpy(), np.stack([values[c] for c in crops]).astype("float32"))
    # What a tensor of any other type gets: a mismatch named, a gradient refused.
    with pytest.raises(InvalidArgumentError, match=rf"dtype {name}, got \(5, 4\) and float16"):
        a.read((slice(2, 7), slice(1, 5)), out=torch.empty((5, 4), dtype=torch.float16))
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        a.read((slice(2, 7), slice(1, 5)), out=torch.empty((4, 5), dtype=getattr(torch, name)).t())
    with pytest.raises(InvalidArgumentError, match="DLPack"):
        a.read((slice(2, 7), slice(1, 5)), out=torch.empty((5, 4), dtype=getattr(torch, name), requires_grad=True))


def test_a_tensor_read_into_is_marked_changed_for_autograd(arr: gpuzarr.Array) -> None:
    """As ``Tensor.copy_``: a graph that saved the tensor raises instead of giving gradients
    computed from the values read since."""
    torch = pytest.importorskip("torch")
    weights = torch.ones((4, 5), requires_grad=True)
    out = torch.zeros((4, 5), dtype=torch.float32)
    loss = (weights * out).sum()  # saves ``out`` for the gradient of ``weights``
    arr.read((slice(0, 4), slice(0, 5)), out=out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    batch = torch.zeros((2, 4, 5))
    before = batch._version
    arr.read_batch([(slice(0, 4), slice(0, 5)), (slice(4, 8), slice(5, 10))], out=batch)
    assert batch._version > before


def test_a_tensor_with_its_negative_bit_set_is_refused(arr: gpuzarr.Array) -> None:
    torch = pytest.importorskip("torch")
    negated = torch.zeros((4, 5), dtype=torch.float32)._neg_view()
    with pytest.raises(InvalidArgumentError, match="negative bit"):
        arr.read((slice(0, 4), slice(0, 5)), out=negated)
    assert not negated.resolve_neg().any()  # nothing was written
