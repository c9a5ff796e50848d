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
    group,
    open,
    open_array,
    open_consolidated,
    open_group,
)
from .core.array import Array
from .core.group import Group
from .creation import (
    array,
    empty,
    empty_like,
    full,
    full_like,
    ones,
    ones_like,
    open_like,
    zeros,
    zeros_like,
)
from .store import LocalStore, MemoryStore, Store

__version__ = "0.1.0"

__all__ = [
    "Array",
    "Group",
    "LocalStore",
    "MemoryStore",
    "Store",
    "__version__",
    "array",
    "config",
    "consolidate_metadata",
    "create",
    "create_group",
    "empty",
    "empty_like",
    "errors",
    "full",
    "full_like",
    "group",
    "ones",
    "ones_like",
    "open",
    "open_array",
    "open_consolidated",
    "open_group",
    "open_like",
    "zeros",
    "zeros_like",
]
