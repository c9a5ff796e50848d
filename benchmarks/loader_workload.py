"""The ``loader`` workload: epochs of training crops, batch by batch, as a training loop sees
them (``--only loader``; not part of the default run).

Per dataset (the sharded zstd and the v2 blosc-lz4 volumes), two workloads: ``loader-64^3`` and
``loader-128^3``, N random unaligned crops (``--crops``) in batches of 32, every batch a torch
tensor (gpuzarr-gpu: a CuPy array). One timed call is one pass over the N crops, from creating
the loader (or DataLoader) to the last batch:

* ``gpuzarr-cpu`` / ``gpuzarr-gpu``: ``gpuzarr.loader.CropLoader`` with the crops as its sampler,
  read ahead on its background thread (``prefetch=2``), one ``read_batch`` per batch;
* ``zarr-python``: a ``torch.utils.data.DataLoader`` with ``num_workers=2`` (fork) over a
  map-style dataset whose ``__getitem__`` reads one crop with zarr-python, collated into batches;
* ``zarr-python+zarrs``: zarr-python with the zarrs codec pipeline, each batch's crops read one
  after the other in this process (zarrs decodes in parallel itself), stacked, ``torch.from_numpy``;
* ``tensorstore``: each batch's reads all in flight at once, then stacked, ``torch.from_numpy``.

The warm-up pass keeps its batches, and every batch is compared with the ground truth; the
timed passes drop each batch once the next is taken, as a training loop does (so buffers can
be reused).

``loader-64^3-cached`` and ``loader-128^3-cached``: the same crops, read by a loader that keeps
a cache of decoded chunks twice the volume's size from one call to the next (a training loop's
later epochs over a volume that fits in memory; the warm-up pass fills it). gpuzarr: one
CropLoader kept with ``cache_bytes`` on the CPU, ``device_cache_bytes`` on a GPU; TensorStore:
the array opened again with a ``cache_pool`` of that size and ``recheck_cached_data=False``.
zarr-python and zarrs keep no decoded chunks and are skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .workloads import Workload, random_boxes

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .impls import Impl

LOADER_DATASETS = ("sharded-zstd", "v2-blosc-lz4")
LOADER_CROPS = (64, 128)
LOADER_BATCH = 32
#: the chunk caches of the ``-cached`` workloads hold this many times the volume's decoded bytes
#: (all of it, with room for each library's own bookkeeping)
CACHE_VOLUMES = 2
HELP = (
    f"N random unaligned 64^3 / 128^3 crops in batches of {LOADER_BATCH} as torch tensors: gpuzarr CropLoader; "
    "zarr-python in a DataLoader with 2 workers; zarrs and TensorStore batch by batch"
)


def batches_of(sels: list[tuple[slice, ...]], batch: int = LOADER_BATCH) -> list[list[tuple[slice, ...]]]:
    return [sels[i : i + batch] for i in range(0, len(sels), batch)]


def consume(batches: Iterable[Any], keep: bool) -> Any:
    """The batches (``keep``), or how many there were, each dropped before the next is taken."""
    if keep:
        return list(batches)
    count = 0
    for _ in batches:
        count += 1
    return count


def check_batches(truth: np.ndarray[Any, Any], sels: list[tuple[slice, ...]], keep: dict[str, bool]) -> Any:
    def check(impl: Impl, got: Any) -> str | None:
        # Checked once, on the warm-up pass; the timed passes after it drop their batches.
        keep[impl.name] = False
        crops = [crop for batch in got for crop in impl.to_numpy(batch)]
        if len(crops) != len(sels):
            return f"{len(crops)} crops for {len(sels)} selections"
        for i, (crop, sel) in enumerate(zip(crops, sels)):
            if not np.array_equal(crop, truth[sel]):
                return f"crop {i} {sel} differs"
        return None

    return check


def loader_workloads(truth: np.ndarray[Any, Any], chunks: tuple[int, ...], n_crops: int) -> list[Workload]:
    """Two workloads per crop size that fits the volume: without caches, and with a cache of
    decoded chunks that holds the whole volume (``-cached``), warmed by the warm-up pass."""
    workloads = []
    cache_bytes = CACHE_VOLUMES * truth.nbytes
    for size in LOADER_CROPS:
        if any(size > n for n in truth.shape):
            continue
        sels = random_boxes(truth.shape, (size,) * truth.ndim, chunks, n_crops, seed=3)
        nbytes = len(sels) * size**truth.ndim * truth.itemsize
        keep: dict[str, bool] = {}
        workloads.append(
            Workload(
                f"loader-{size}^3",
                nbytes,
                len(sels),
                lambda impl, h, sels=sels, keep=keep: impl.load_batches(h, sels, keep.get(impl.name, True)),
                check_batches(truth, sels, keep),
                check_every_run=False,
            )
        )
        keep_cached: dict[str, bool] = {}
        workloads.append(
            Workload(
                f"loader-{size}^3-cached",
                nbytes,
                len(sels),
                lambda impl, h, sels=sels, keep=keep_cached: impl.load_batches_cached(
                    h, sels, keep.get(impl.name, True), cache_bytes
                ),
                check_batches(truth, sels, keep_cached),
                check_every_run=False,
            )
        )
    return workloads


class CropsDataset:
    """A map-style dataset (for a torch DataLoader): item i is crop i read with zarr-python."""

    def __init__(self, array: Any, sels: list[tuple[slice, ...]]) -> None:
        self.array = array
        self.sels = sels

    def __len__(self) -> int:
        return len(self.sels)

    def __getitem__(self, i: int) -> np.ndarray[Any, Any]:
        return np.asarray(self.array[self.sels[i]])
