"""One field of a structured v2 array (``gpuzarr.open(..., field=...)``): selections mixing an
index array on the array's axes with integers on the field's subarray axes read and write as
NumPy indexes the field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from pathlib import Path

RECORDS = np.zeros((4, 3), dtype=[("y", "<i4", (2, 5)), ("z", "<f8")])
RECORDS["y"] = np.arange(4 * 3 * 2 * 5).reshape(4, 3, 2, 5)
RECORDS["z"] = np.arange(12).reshape(4, 3) + 0.5

SELECTIONS = [
    np.s_[:, [0, 2], :, 1],  # index array, slice, integer: NumPy puts the broadcast axis first
    np.s_[:, [0, 2], 1],
    np.s_[1, [2, 0, 2], 0],
    np.s_[[3, 0], 1:3, :, 4],
    np.s_[[[0, 1], [2, 3]], 0, 1],
    np.s_[:, [-1, 0]],
    np.s_[np.array([True, False, True, False]), :, 1],
    np.s_[1:3, 0, :, 2],  # no index array: the records' own selection
]


@pytest.fixture
def field(tmp_path: Path) -> Any:
    path = str(tmp_path / "s.zarr")
    gpuzarr.create(path, data=RECORDS, chunks=(3, 2), zarr_format=2, device="cpu")
    return gpuzarr.open(path, field="y", device="cpu")


@pytest.mark.parametrize("selection", SELECTIONS, ids=[str(i) for i in range(len(SELECTIONS))])
def test_reads_order_axes_as_numpy_does(field: Any, selection: Any) -> None:
    expected = RECORDS["y"][selection]
    got = field[selection]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("selection", SELECTIONS, ids=[str(i) for i in range(len(SELECTIONS))])
def test_writes_order_axes_as_numpy_does_and_keep_the_other_fields(field: Any, selection: Any) -> None:
    expected = RECORDS.copy()
    shape = expected["y"][selection].shape
    value = np.arange(int(np.prod(shape)), dtype="<i4").reshape(shape) + 1000
    expected["y"][selection] = value
    field[selection] = value
    np.testing.assert_array_equal(field[...], expected["y"])
    np.testing.assert_array_equal(field.array[...]["z"], RECORDS["z"])
