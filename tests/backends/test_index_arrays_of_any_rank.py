"""An integer index array of any rank with slices and integers, as NumPy takes it: a 0-d one is
an integer, one of several dimensions gives the result its shape in place of its axis (or first,
where an integer stands apart from it); several of them, masks over some axes among them, with
slices and integers. Reads on the CPU and the (emulated) GPU path; writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from pathlib import Path

DATA = np.arange(3 * 4 * 5).reshape(3, 4, 5)
IDX2 = np.array([[0, 1], [1, 2]])
IDX3 = np.array([[[3, 0]], [[1, 1]]])

SELECTIONS = [
    np.array(1),
    (np.array(1), slice(1, 3)),
    (slice(None), np.array(-2), 4),
    IDX2,
    (slice(None), IDX3),
    (1, slice(None), IDX2),  # an integer apart from the array: the array's axes go first
    (slice(None), 2, IDX2),
    (Ellipsis, IDX2),
    (IDX2, Ellipsis, 0),
    (slice(0, 2), IDX3, 4),
    # several index arrays (a mask standing for its nonzero() arrays) with slices
    ([0, 2], slice(None), [4, 0]),
    (DATA[..., 0] % 3 == 0,),
    (np.array(1), slice(None), [1, 2]),
    (slice(1, 3), [[3], [0]], [2, 2, 1]),
]
IDS = [str(i) for i in range(len(SELECTIONS))]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("selection", SELECTIONS, ids=IDS)
def test_reads_match_numpy(tmp_path: Path, request: pytest.FixtureRequest, device: str, selection: Any) -> None:
    if device == "gpu":
        request.getfixturevalue("emulated_gpu")
    path = str(tmp_path / "a.zarr")
    gpuzarr.create(path, data=DATA, chunks=(2, 3, 2), device="cpu")
    got = np.asarray(gpuzarr.open(path, device=device)[selection])
    expected = DATA[selection]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("selection", SELECTIONS, ids=IDS)
def test_writes_match_numpy(selection: Any) -> None:
    array = gpuzarr.create(None, data=DATA, chunks=(2, 3, 2), device="cpu")
    expected = DATA.copy()
    shape = expected[selection].shape
    value = np.arange(int(np.prod(shape))).reshape(shape) + 1000
    expected[selection] = value
    array[selection] = value
    np.testing.assert_array_equal(array[...], expected)


def test_a_zero_d_bool_array_is_still_refused() -> None:
    array = gpuzarr.create(None, data=DATA, chunks=(2, 3, 2), device="cpu")
    with pytest.raises(IndexError):
        array[np.array(True)]
