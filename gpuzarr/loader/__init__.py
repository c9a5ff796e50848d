"""Batches of crops of Zarr volumes for training and inference: :class:`CropLoader`.

Importing this package imports neither torch nor CuPy: torch is imported when a loader hands
out tensors (``output="torch"``) or when :class:`CropDataset` is asked for.
"""

from __future__ import annotations

from typing import Any

from .cache import CacheStats, ChunkCache
from .crop_loader import Batch, CropLoader

__all__ = ["Batch", "CacheStats", "ChunkCache", "CropDataset", "CropLoader"]


def __getattr__(name: str) -> Any:
    # CropDataset subclasses torch's IterableDataset: its module imports torch, on first use only.
    if name == "CropDataset":
        from .dataset import CropDataset

        return CropDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
