"""``CropDataset``: a CPU CropLoader as a ``torch.utils.data.IterableDataset``.

It serves DataLoader worker processes.

Each worker takes every ``num_workers``-th batch of its rank's epoch (worker w: batches w,
w + num_workers, ...), so a DataLoader, which takes one batch from each worker in turn, yields
the loader's batches in their order. Batches are read into new buffers (they cross a process
boundary, so none is reused). Use it with ``batch_size=None``: each item already is a batch.

This module imports torch; ``gpuzarr.loader`` imports it only when ``CropDataset`` is asked for.
GPU loaders are not offered here: CUDA does not survive ``fork``, and a GPU loader needs no
workers (iterate the CropLoader itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch.utils.data import IterableDataset, get_worker_info

from ..errors import InvalidArgumentError
from .crop_loader import Batch, CropLoader

if TYPE_CHECKING:
    from collections.abc import Iterator


class CropDataset(IterableDataset[Batch]):
    """A CPU :class:`CropLoader`'s batches, shared among DataLoader workers.

    Parameters
    ----------
    loader
        The loader (on the CPU). It is pickled into each worker (its arrays pickle; its caches
        start empty there), at the epoch and position it stands at.

    Examples
    --------
    >>> dataset = CropLoader(volume, (64, 64, 64), 16, device="cpu").as_dataset()
    >>> batches = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=4,
    ...                                       multiprocessing_context="spawn")
    """

    def __init__(self, loader: CropLoader) -> None:
        if loader.device != "cpu":
            raise InvalidArgumentError(
                f"CropDataset: the loader reads on {loader.device}; DataLoader workers cannot share a GPU loader. "
                "Iterate the CropLoader itself in the main process (it reads ahead on a background thread)."
            )
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (workers get it when the DataLoader starts them)."""
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches per epoch on this rank (all workers together)."""
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        info: Any = get_worker_info()
        worker, workers = (0, 1) if info is None else (int(info.id), int(info.num_workers))
        return iter(self.loader._iterate(worker, workers, reuse_buffers=False, processes=False))
