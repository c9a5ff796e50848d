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


def _write_numbered(field: Any, selection: Any) -> np.ndarray[Any, Any]:
    """Write numbered values through ``field[selection]``; the records NumPy's same write makes."""
    expected = RECORDS.copy()
    shape = expected["y"][selection].shape
    value = np.arange(int(np.prod(shape)), dtype="<i4").reshape(shape) + 1000
    expected["y"][selection] = value
    field[selection] = value
    return expected


@pytest.mark.parametrize("selection", SELECTIONS, ids=[str(i) for i in range(len(SELECTIONS))])
def test_writes_order_axes_as_numpy_does_and_keep_the_other_fields(field: Any, selection: Any) -> None:
    expected = _write_numbered(field, selection)
    np.testing.assert_array_equal(field[...], expected["y"])
    np.testing.assert_array_equal(field.array[...]["z"], RECORDS["z"])


@pytest.mark.parametrize(
    "selection",
    [np.s_[[3, -1], 0], np.s_[[0, -4, 2, -2], :], np.s_[[-3, 1, 1], 2]],
    ids=["pair", "two-pairs", "repeat"],
)
def test_a_negative_and_a_positive_index_of_one_record_write_as_numpy_does(field: Any, selection: Any) -> None:
    """-1 and 3 name one record: they were two entries of the records read and written back,
    and whichever came last in index order won, not the last value (NumPy's rule)."""
    expected = _write_numbered(field, selection)
    np.testing.assert_array_equal(field[...], expected["y"])


def test_bad_writes_and_selections_raise_gpuzarr_errors(field: Any) -> None:
    """They raised NumPy's bare ValueError and IndexError, where the array raises these."""
    with pytest.raises(gpuzarr.errors.InvalidArgumentError, match="could not broadcast"):
        field[0:2] = np.ones(4)
    with pytest.raises(gpuzarr.errors.UnwritableValueError, match=r"field 'y'.*cannot write 'abc'"):
        field[0:2] = "abc"
    with pytest.raises(gpuzarr.errors.InvalidSelectionError, match="could not be broadcast"):
        field[[0, 1], [0, 1, 2]]
    with pytest.raises(gpuzarr.errors.BoundsCheckError, match="out of range"):
        field[[0, 4]] = 1
    with pytest.raises(gpuzarr.errors.InvalidSelectionError, match=r"got 1\.5"):
        field[1.5]
    np.testing.assert_array_equal(field[...], RECORDS["y"])


def test_a_value_with_leading_axes_of_length_one_writes_as_numpy_does(field: Any) -> None:
    field[0:2, 1] = np.full((1, 1, 2, 2, 5), 7)
    expected = RECORDS["y"].copy()
    expected[0:2, 1] = 7
    np.testing.assert_array_equal(field[...], expected)


def test_a_subarray_index_out_of_range_is_a_bounds_check_error() -> None:
    from gpuzarr.errors import BoundsCheckError

    records = np.zeros((3,), dtype=[("v", "<i4", (2,))])
    array = gpuzarr.array(records, store=gpuzarr.MemoryStore(), zarr_format=2, chunks=(2,))
    field = gpuzarr.open(array.store, field="v")
    with pytest.raises(BoundsCheckError, match="'v'"):
        field[:, 5]
    np.testing.assert_array_equal(field[:, 1], [0, 0, 0])
