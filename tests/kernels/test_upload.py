"""The host side of a launch's arguments: tables packed into one upload, pointers asked once per
distinct array. NumPy stands in for CuPy (the same asarray, slicing and views)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gpuzarr.backends.cuda import kernels


class CountingXp:
    """NumPy as the device module, counting the uploads (``asarray`` calls)."""

    def __init__(self) -> None:
        self.uploads: list[np.ndarray[Any, Any]] = []

    def asarray(self, host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        copy = np.array(host, copy=True)
        self.uploads.append(copy)
        return copy


def test_upload_together_is_one_copy_of_every_array_aligned() -> None:
    arrays = [
        np.arange(8, dtype=np.int64),
        np.arange(24, dtype=np.int64).reshape(3, 8) - 5,
        np.array([2**63 + 7, 1], dtype=np.uint64),
        np.frombuffer(b"\x01\x02\x03", dtype=np.uint8),  # a fill value of an odd size
        np.arange(6, dtype=np.int32).reshape(2, 3),
        np.zeros((0, 8), dtype=np.int64),
    ]
    xp = CountingXp()
    views = kernels.upload_together(xp, arrays)  # type: ignore[arg-type]
    assert len(xp.uploads) == 1
    (packed,) = xp.uploads
    base = packed.__array_interface__["data"][0]
    for view, array in zip(views, arrays, strict=True):
        assert view.dtype == array.dtype and view.shape == array.shape
        np.testing.assert_array_equal(view, array)
        assert np.shares_memory(view, packed) or view.size == 0
        assert (view.__array_interface__["data"][0] - base) % kernels.UPLOAD_ALIGNMENT == 0


def test_upload_together_of_nothing_but_empty_arrays() -> None:
    xp = CountingXp()
    (view,) = kernels.upload_together(xp, [np.zeros(0, dtype=np.int64)])  # type: ignore[arg-type]
    assert view.shape == (0,) and len(xp.uploads) == 1


def test_upload_together_views_are_not_copies_of_their_neighbours() -> None:
    first, second = kernels.upload_together(np, [np.array([1], dtype=np.int64), np.array([2, 3], dtype=np.int64)])
    first[0] = 9
    np.testing.assert_array_equal(second, [2, 3])


class Pointed:
    """A device array's stand-in: ``.data.ptr``, counting how often it is read."""

    reads = 0

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr

    @property
    def data(self) -> SimpleNamespace:
        Pointed.reads += 1
        return SimpleNamespace(ptr=self._ptr)


@pytest.mark.parametrize("pieces", [0, 1, 300])
def test_host_pointers_ask_each_array_once(pieces: int) -> None:
    arrays = [Pointed(4096 * (i + 1)) for i in range(7)]
    sources: list[Any] = [None if i % 11 == 5 else arrays[i % 7] for i in range(pieces)]
    Pointed.reads = 0
    pointers = kernels._host_pointers(sources)
    assert pointers.dtype == np.uint64
    assert pointers.tolist() == [0 if s is None else s._ptr for s in sources]
    assert Pointed.reads == len({id(s) for s in sources if s is not None})
