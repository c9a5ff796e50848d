"""gpuzarr: Zarr v2/v3 arrays read straight into GPU memory.

Machines without a GPU get bit-identical NumPy results from the same code.

Importing gpuzarr creates no CUDA context, thread pool or native state: GPU libraries are
imported on first GPU use only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import config, errors
from .api import (
    consolidate_metadata,
    create,
    create_array,
    create_group,
    group,
    open,
    open_array,
    open_async,
    open_consolidated,
    open_group,
    tree,
)
from .core.array import Array
from .core.group import Group
from .creation import (
    array,
    empty,
    empty_like,
    from_array,
    full,
    full_like,
    ones,
    ones_like,
    open_like,
    zeros,
    zeros_like,
)
from .save_load import load, save, save_array, save_group
from .store import LocalStore, MemoryStore, Store

if TYPE_CHECKING:
    # For type checkers only (the "as" marks a re-export): at run time __getattr__ imports them.
    from .copying import convert as convert
    from .debug_info import print_debug_info as print_debug_info
    from .integrations.dask import from_dask as from_dask
    from .integrations.dask import store_dask as store_dask
    from .integrations.dask import to_dask as to_dask

__version__ = "0.1.0"

#: Public names whose module imports an optional library (Dask): imported on first use, so that
#: ``import gpuzarr`` never imports it. Not in ``__all__``: ``from gpuzarr import *`` works
#: without Dask installed.
_DASK_NAMES = ("from_dask", "store_dask", "to_dask")


#: Public names imported on first use: their modules cost ``import gpuzarr`` time (the copy
#: engine, ``importlib.metadata``) that most programs never need back.
_LAZY_NAMES = {
    "convert": "copying",
    "print_debug_info": "debug_info",
    "release_gpu_buffers": "backends.cuda.cupy_device",
}


def __getattr__(name: str) -> Any:
    if name in _DASK_NAMES:
        from .integrations import dask as dask_integration

        return getattr(dask_integration, name)
    if name in _LAZY_NAMES:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'gpuzarr' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_DASK_NAMES, *_LAZY_NAMES])


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
    "convert",
    "create",
    "create_array",
    "create_group",
    "empty",
    "empty_like",
    "errors",
    "from_array",
    "full",
    "full_like",
    "group",
    "load",
    "ones",
    "ones_like",
    "open",
    "open_array",
    "open_async",
    "open_consolidated",
    "open_group",
    "print_debug_info",
    "open_like",
    "release_gpu_buffers",
    "save",
    "save_array",
    "save_group",
    "tree",
    "zeros",
    "zeros_like",
]
