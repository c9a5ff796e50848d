"""Volumes for the loader tests, and the check every batch must pass: equal to NumPy slicing of
its source at ``batch.origins``."""

from __future__ import annotations

import threading
import zlib
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from gpuzarr.loader import Batch, CropLoader

LE = {"name": "bytes", "configuration": {"endian": "little"}}

#: tests of PyTorch output (the loader's default): skipped where the test extra's torch is missing
needs_torch = pytest.mark.skipif(find_spec("torch") is None, reason="torch (the test extra) is not installed")

#: the outputs a test runs with, torch's skipped where it is missing
OUTPUTS = ["numpy", pytest.param("torch", marks=needs_torch)]

#: name -> gpuzarr.create keyword arguments: the layouts a loader reads
LAYOUTS: dict[str, dict[str, Any]] = {
    "v3-sharded-zstd": {"chunks": (8, 8, 8), "shards": (16, 16, 16), "codecs": [LE, {"name": "zstd"}]},
    "v2-blosc-lz4": {
        "chunks": (8, 12, 8),
        "zarr_format": 2,
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    },
    "v3-gzip": {"chunks": (10, 10, 10), "codecs": [LE, {"name": "gzip"}]},
}


def values(shape: tuple[int, ...], dtype: str = "<u2", salt: int = 0) -> np.ndarray[Any, Any]:
    """Distinct-enough values: every crop of a volume differs from every other one."""
    rng = np.random.default_rng(zlib.crc32(f"{shape}{dtype}{salt}".encode()))
    n = int(np.prod(shape))
    data = (np.arange(n) * 7 + salt * 1000 + rng.integers(0, 5, size=n)) % np.iinfo(np.dtype(dtype)).max
    return data.astype(dtype).reshape(shape)


def make_volume(store: Any, data: np.ndarray[Any, Any], layout: str = "v3-sharded-zstd", **extra: Any) -> gpuzarr.Array:
    """``data`` written as a Zarr array of ``layout`` into ``store``."""
    kwargs = {**LAYOUTS[layout], **extra}
    array = gpuzarr.create(store, shape=data.shape, dtype=data.dtype, **kwargs)
    array[...] = data
    return array


def to_numpy(x: Any) -> np.ndarray[Any, Any]:
    """A batch field as NumPy (a torch tensor on the CPU, or a NumPy array)."""
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x.cpu().numpy())


def assert_batch_matches(batch: Batch, sources: list[np.ndarray[Any, Any]], crop_shape: tuple[int, ...]) -> None:
    """Every crop of ``batch`` equals its source volume sliced at its origin."""
    data = to_numpy(batch.data)
    assert data.shape == (len(batch), *crop_shape)
    assert batch.origins.dtype == np.int64 and batch.volume_index.dtype == np.int64
    for i, (volume, origin) in enumerate(zip(batch.volume_index, batch.origins)):
        box = tuple(slice(int(o), int(o) + c) for o, c in zip(origin, crop_shape))
        np.testing.assert_array_equal(data[i], sources[int(volume)][box], err_msg=f"crop {i} at {origin}")


def crop_list(batches: list[Batch]) -> list[tuple[int, tuple[int, ...]]]:
    """(volume, origin) of every crop of ``batches``, in order."""
    return [(int(v), tuple(int(o) for o in origin)) for b in batches for v, origin in zip(b.volume_index, b.origins)]


def read_all(loader: CropLoader) -> tuple[list[tuple[int, tuple[int, ...]]], list[np.ndarray[Any, Any]]]:
    """One pass of ``loader``: (volume, origin) of every crop, and a copy of every batch's data."""
    crops, data = [], []
    for batch in loader:
        crops += crop_list([batch])
        data.append(to_numpy(batch.data).copy())
    return crops, data


def loader_threads() -> list[threading.Thread]:
    """The loaders' background threads running now (they are named "gpuzarr-loader")."""
    return [t for t in threading.enumerate() if t.name == "gpuzarr-loader"]
