"""TensorStore compatibility: ``zarr3``/``zarr2`` JSON specs, chunk layouts and ``Array.spec()``.

``gpuzarr.open(spec)`` opens or creates an array from a TensorStore-style JSON spec, and
``Array.spec()`` gives the spec that reopens an array, in gpuzarr and (for a local store) in
TensorStore. Every module here is pure JSON and number work except :mod:`.open`, the only one
that touches a Store or builds an Array:

* :mod:`.spec` -- :class:`TensorStoreSpec`, open flags, mode and option merging, ``array_spec_json``;
* :mod:`.kvstore` -- ``file`` and ``memory`` kvstores, the one parser of kvstore JSON;
* :mod:`.schema` -- the ``schema`` member;
* :mod:`.constraints` -- spec constraints against stored metadata;
* :mod:`.chunk_layout` and :mod:`.chunk_shapes` -- chunk layout constraints and TensorStore's
  choice of chunk shapes for a new array;
* :mod:`.create` -- metadata for a new array with TensorStore's defaults;
* :mod:`.open` -- ``open_spec``.

:func:`open_spec` is imported on first use, so that importing this package (for example from
``Array.spec()``) does not import ``gpuzarr.array``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .chunk_layout import ChunkGridConstraints, ChunkLayoutConstraints
from .chunk_shapes import ChosenLayout, choose_chunk_shapes
from .kvstore import KvStoreSpec
from .schema import Schema
from .spec import TensorStoreSpec, array_spec_json

if TYPE_CHECKING:
    from .open import open_spec

__all__ = [
    "ChosenLayout",
    "ChunkGridConstraints",
    "ChunkLayoutConstraints",
    "KvStoreSpec",
    "Schema",
    "TensorStoreSpec",
    "array_spec_json",
    "choose_chunk_shapes",
    "open_spec",
]


def __getattr__(name: str) -> Any:
    if name == "open_spec":
        from .open import open_spec

        return open_spec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
