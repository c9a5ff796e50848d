"""gpuzarr: Zarr v2/v3 arrays read straight into GPU memory.

Machines without a GPU get bit-identical NumPy results from the same code.

Importing gpuzarr creates no CUDA context, thread pool or native state: GPU libraries are
imported on first GPU use only.
"""

from __future__ import annotations

from . import config, errors
from .api import (
    consolidate_metadata,
    create,
    create_group,
    open,
    open_array,
    open_consolidated,
    open_group,
)
from .array import Array
from .group import Group
from .store import LocalStore, MemoryStore, Store

__version__ = "0.1.0"

__all__ = [
    "Array",
    "Group",
    "LocalStore",
    "MemoryStore",
    "Store",
    "__version__",
    "config",
    "consolidate_metadata",
    "create",
    "create_group",
    "errors",
    "open",
    "open_array",
    "open_consolidated",
    "open_group",
]
