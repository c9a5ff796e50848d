"""``read_batch`` of selections that are not boxes (an index array or mask on one axis): the
stacked result equals NumPy's selections stacked, on the CPU and on the (emulated) GPU path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from pathlib import Path

DATA = np.arange(7 * 6 * 5, dtype=np.int32).reshape(7, 6, 5)

SELECTIONS = [
    np.s_[0:2, [0, 4, 1]],  # an index array after a slice: NumPy keeps the axes in place
    np.s_[0:3, [0, 4, 1], 1:4],
    np.s_[[6, 0, 3], 1:4],
    np.s_[2, 0:3, [4, 0]],  # an integer, a slice, an array
    np.s_[1:5, np.array([True, False, True, True, False, False])],
]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("selection", SELECTIONS, ids=[str(i) for i in range(len(SELECTIONS))])
@pytest.mark.parametrize("sharded", [False, True], ids=["chunked", "sharded"])
def test_read_batch_with_an_index_array_stacks_numpys_selections(
    tmp_path: Path, request: pytest.FixtureRequest, device: str, selection: Any, sharded: bool
) -> None:
    """The batch's number went in front of each piece's place as an integer: with an index
    array and a slice between them NumPy moved their axis first, and a crop came back
    transposed (or the read failed where the piece was not square)."""
    if device == "gpu":
        request.getfixturevalue("emulated_gpu")
    path = str(tmp_path / "a.zarr")
    shards = (6, 6, 5) if sharded else None
    gpuzarr.create(path, data=DATA, chunks=(3, 3, 5), shards=shards, device="cpu")
    array = gpuzarr.open(path, device=device)
    got = np.asarray(array.read_batch([selection, selection]))
    np.testing.assert_array_equal(got, np.stack([DATA[selection], DATA[selection]]))
