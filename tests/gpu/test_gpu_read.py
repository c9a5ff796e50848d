"""The GPU read path on a GPU: the matrix of tests/backends/cuda_matrix.py through CudaDevice
(nvCOMP, CuPy, kernels/*.cu), bit for bit against the CPU engine. Skipped without a usable GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from gpuzarr.backends.cuda.cupy_device import CudaDevice
from gpuzarr.plan.selection import plan_selection

from ..backends.cuda_matrix import ARRAYS, SELECTIONS, assert_bitwise_equal, cpu_result, make_array, read_gpu_plan

if TYPE_CHECKING:
    import gpuzarr

pytestmark = pytest.mark.gpu


def gpu_read(array: gpuzarr.Array, selection: Any, budget: int = 1 << 28) -> np.ndarray[Any, Any]:
    layout = array.layout
    plan = plan_selection(selection, layout.dimensions())
    out = read_gpu_plan(layout, array.store, plan, CudaDevice(), budget=budget)
    return np.asarray(out.get()).reshape(plan.shape)


@pytest.fixture(scope="module", params=sorted(ARRAYS))
def array(request: pytest.FixtureRequest) -> gpuzarr.Array:
    return make_array(request.param)


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_matches_cpu_engine(array: gpuzarr.Array, selection: str) -> None:
    sel = SELECTIONS[selection]
    assert_bitwise_equal(gpu_read(array, sel), cpu_result(array, sel))


def test_one_chunk_per_batch(array: gpuzarr.Array) -> None:
    assert_bitwise_equal(gpu_read(array, Ellipsis, budget=1), cpu_result(array, Ellipsis))
