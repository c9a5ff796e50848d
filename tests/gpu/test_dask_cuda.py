"""gpuzarr.to_dask on device="gpu" arrays on a real GPU: CuPy meta and CuPy blocks, in this process
and in a dask_cuda LocalCUDACluster (one worker process per GPU), and CuPy blocks written back
with from_dask. Skipped without a usable GPU, and the cluster test without dask_cuda."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.gpu

VALUES = np.arange(37 * 29, dtype="<i4").reshape(37, 29)


def _gpu_array(tmp_path: Path) -> gpuzarr.Array:
    path = tmp_path / "a.zarr"
    written = gpuzarr.create(path, shape=VALUES.shape, dtype=VALUES.dtype, chunks=(4, 5), shards=(16, 10), device="cpu")
    written[...] = VALUES
    opened = gpuzarr.open(path, device="gpu")
    assert isinstance(opened, gpuzarr.Array) and opened.device.startswith("cuda:")
    return opened


def _host(x: Any) -> np.ndarray[Any, Any]:
    import cupy

    assert isinstance(x, cupy.ndarray), type(x)
    return np.asarray(x.get())


def test_blocks_and_meta_are_cupy_arrays(tmp_path: Path) -> None:
    cupy = pytest.importorskip("cupy")
    x = gpuzarr.to_dask(_gpu_array(tmp_path))
    assert isinstance(x._meta, cupy.ndarray) and x._meta.shape == (0, 0)
    assert x.chunks == ((16, 16, 5), (10, 10, 9))
    np.testing.assert_array_equal(_host(x.compute(scheduler="threads")), VALUES)
    np.testing.assert_array_equal(_host(x[3:30:2, 4].compute(scheduler="threads")), VALUES[3:30:2, 4])
    # CuPy blocks are written back through the host.
    out = gpuzarr.from_dask(x * 2, tmp_path / "b.zarr", chunks=(8, 5), shards=(16, 10), device="cpu")
    np.testing.assert_array_equal(out[...], VALUES * 2)


def test_local_cuda_cluster_reads_cupy_blocks(tmp_path: Path) -> None:
    cupy = pytest.importorskip("cupy")
    dask_cuda = pytest.importorskip("dask_cuda")
    distributed = pytest.importorskip("distributed")
    x = gpuzarr.to_dask(_gpu_array(tmp_path))
    with (
        dask_cuda.LocalCUDACluster(host="127.0.0.1", dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        # Each worker sees its own GPU as device 0: the Array travels with device="gpu" and
        # resolves it there.
        result = client.compute(x).result()
        assert isinstance(result, cupy.ndarray)
        np.testing.assert_array_equal(result.get(), VALUES)
        total = client.compute(x.sum()).result()
        assert int(total) == int(VALUES.sum())
