"""Writes accept device arrays: CuPy-like arrays, ``__cuda_array_interface__`` objects and CUDA
DLPack producers come to the host once; host DLPack producers are viewed as NumPy."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cpu import is_device_array


class CupyLike:
    """A device array as CuPy presents it: the interface plus ``get()``."""

    def __init__(self, data: np.ndarray[Any, Any]) -> None:
        self.data = data
        self.__cuda_array_interface__ = {"shape": data.shape, "typestr": data.dtype.str, "data": (0, False)}

    def get(self) -> np.ndarray[Any, Any]:
        return self.data.copy()


class CudaDlpack:
    """A CUDA DLPack producer with no ``get()``, like a PyTorch tensor on the GPU."""

    def __init__(self, data: np.ndarray[Any, Any]) -> None:
        self.data = data

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, stream: Any = None) -> Any:
        raise AssertionError("only the fake CuPy below may consume this")


class HostDlpack:
    def __init__(self, data: np.ndarray[Any, Any]) -> None:
        self.data = data

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.data.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.data.__dlpack__(**kwargs)


def _array() -> gpuzarr.Array:
    return gpuzarr.create(gpuzarr.MemoryStore(), shape=(3, 4), dtype="<i4", chunks=(2, 2), device="cpu")


def test_cupy_like_arrays_are_written() -> None:
    a = _array()
    data = np.arange(12, dtype="<i4").reshape(3, 4)
    a[...] = CupyLike(data)
    np.testing.assert_array_equal(a[...], data)


def test_host_dlpack_is_written() -> None:
    a = _array()
    data = np.arange(12, dtype="<i4").reshape(3, 4) * 2
    a[...] = HostDlpack(data)
    np.testing.assert_array_equal(a[...], data)
    assert not is_device_array(HostDlpack(data))


def test_cuda_dlpack_goes_through_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.arange(12, dtype="<i4").reshape(3, 4) + 5
    fake = types.ModuleType("cupy")
    fake.from_dlpack = lambda value: value.data  # type: ignore[attr-defined]
    fake.asnumpy = lambda value: np.asarray(value)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)
    a = _array()
    value = CudaDlpack(data)
    assert is_device_array(value)
    a[...] = value
    np.testing.assert_array_equal(a[...], data)


def test_cuda_dlpack_without_cupy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now raises ImportError
    with pytest.raises(ImportError, match=r"gpuzarr\[gpu\]"):
        _array()[...] = CudaDlpack(np.zeros((3, 4), "<i4"))
