"""TensorStore compatibility: ``zarr3``/``zarr2`` JSON specs, chunk layouts and ``Array.spec()``.

``gpuzarr.open(spec)`` opens or creates an array from a TensorStore-style JSON spec, and
``Array.spec()`` gives the spec that reopens an array, in gpuzarr and (for a local store) in
TensorStore. Every module here is pure JSON and number work except :mod:`.open`, the only one
that touches a Store or builds an Array:

* :mod:`.spec` -- ``TensorStoreSpec``, open flags, mode and option merging, ``array_spec_json``;
* :mod:`.kvstore` -- ``file`` and ``memory`` kvstores, the one parser of kvstore JSON (also used
  by ``gpuzarr.store.make_store``);
* :mod:`.schema` -- the ``schema`` member;
* :mod:`.constraints` -- spec constraints against stored metadata;
* :mod:`.chunk_layout` and :mod:`.chunk_shapes` -- chunk layout constraints and TensorStore's
  choice of chunk shapes for a new array;
* :mod:`.create` -- metadata for a new array with TensorStore's defaults;
* :mod:`.open` -- ``open_spec`` and ``open_parsed``.

This package re-exports only the leaf modules, which import nothing above ``metadata/``; import
``spec``, ``constraints``, ``create`` and ``open`` from their modules. So the store layer can
use the kvstore parser, and ``Array.spec()`` the spec module, without an import cycle.
"""

from __future__ import annotations

from .chunk_layout import ChunkGridConstraints, ChunkLayoutConstraints
from .chunk_shapes import ChosenLayout, choose_chunk_shapes
from .kvstore import KvStoreSpec, join_path
from .schema import Schema, normalize_unit

__all__ = [
    "ChosenLayout",
    "ChunkGridConstraints",
    "ChunkLayoutConstraints",
    "KvStoreSpec",
    "Schema",
    "choose_chunk_shapes",
    "join_path",
    "normalize_unit",
]
