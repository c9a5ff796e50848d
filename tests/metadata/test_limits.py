"""Metadata that would size an allocation beyond what NumPy or the machine can hold is refused
when the array is opened (or created), with a MetadataError naming the field
(gpuzarr/metadata/limits.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError

if TYPE_CHECKING:
    from collections.abc import Callable


def edited(zarr_format: int, edit: Callable[[dict[str, Any]], None], **create: Any) -> gpuzarr.MemoryStore:
    """A small array written by gpuzarr whose metadata document ``edit`` then changed."""
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(store=store, shape=(10,), chunks=(5,), dtype="f4", zarr_format=zarr_format, **create)
    a[:] = np.arange(10)
    key = "zarr.json" if zarr_format == 3 else ".zarray"
    doc = json.loads(bytes(store.get(key)))  # type: ignore[arg-type]
    edit(doc)
    store.set(key, json.dumps(doc).encode())
    return store


def open_fails(store: gpuzarr.MemoryStore, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        gpuzarr.open_array(store, mode="r")


def regular(chunk_shape: list[int]) -> dict[str, Any]:
    return {"name": "regular", "configuration": {"chunk_shape": chunk_shape}}


def test_rank_above_numpys_limit_is_refused_at_open(zarr_format: int) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["shape"] = [1] * 65
        if zarr_format == 3:
            doc["chunk_grid"] = regular([1] * 65)
        else:
            doc["chunks"] = [1] * 65

    open_fails(edited(zarr_format, edit), r"shape: at most 64 dimensions are supported, got 65")


@pytest.mark.parametrize(
    ("shape", "match"),
    [([2**63], r"shape\[0\]: must be less than 2\*\*63"), ([2**62, 2**62], r"shape: .* elements")],
)
def test_shape_numpy_cannot_index_is_refused(zarr_format: int, shape: list[int], match: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["shape"] = shape
        if zarr_format == 3:
            doc["chunk_grid"] = regular([1] * len(shape))
        else:
            doc["chunks"] = [1] * len(shape)

    open_fails(edited(zarr_format, edit), match)


def test_chunk_shape_of_2_63_is_refused(zarr_format: int) -> None:
    def edit(doc: dict[str, Any]) -> None:
        if zarr_format == 3:
            doc["chunk_grid"] = regular([2**63])
        else:
            doc["chunks"] = [2**63]

    open_fails(edited(zarr_format, edit), r"must be less than 2\*\*63")


def test_a_terabyte_chunk_is_refused_at_open_naming_the_field(zarr_format: int) -> None:
    def edit(doc: dict[str, Any]) -> None:
        if zarr_format == 3:
            doc["chunk_grid"] = regular([2**40])
        else:
            doc["chunks"] = [2**40]

    field = r"chunk_grid\.configuration\.chunk_shape" if zarr_format == 3 else "chunks"
    open_fails(
        edited(zarr_format, edit),
        rf"{field} \[1099511627776\] makes one chunk of 4\.0 TiB, more than config max_chunk_bytes \(2\.0 GiB\)",
    )


def test_max_chunk_bytes_is_the_limit() -> None:
    store = edited(3, lambda doc: doc.update(chunk_grid=regular([2**20])))  # 4 MiB of float32
    with gpuzarr.config.set(max_chunk_bytes=2**22):
        assert gpuzarr.open_array(store, mode="r").chunks == (2**20,)
    with gpuzarr.config.set(max_chunk_bytes=2**22 - 1), pytest.raises(MetadataError, match=r"4\.0 MiB"):
        gpuzarr.open_array(store, mode="r")


def test_create_refuses_a_chunk_over_the_limit(zarr_format: int) -> None:
    with gpuzarr.config.set(max_chunk_bytes=1024), pytest.raises(MetadataError, match="max_chunk_bytes"):
        gpuzarr.create(store=gpuzarr.MemoryStore(), shape=(1000,), chunks=(1000,), dtype="f4", zarr_format=zarr_format)


def test_rectilinear_chunk_edges_count() -> None:
    grid = {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [[5, 2**40]]}}
    open_fails(edited(3, lambda doc: doc.update(chunk_grid=grid)), r"chunk_shapes \(largest chunk\) \[1099511627776\]")


def sharded(inner: list[int]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["chunk_grid"] = regular([2**40])
        doc["codecs"][0]["configuration"]["chunk_shape"] = inner

    return edit


def test_large_shards_of_small_inner_chunks_open() -> None:
    # A shard is never decoded whole when the chain is sharding alone: only inner chunks count.
    store = edited(3, sharded([2**18]), shards=(10,))
    with gpuzarr.config.set(max_chunk_bytes=2**26):
        gpuzarr.open_array(store, mode="r")


def test_a_terabyte_inner_chunk_is_refused() -> None:
    store = edited(3, sharded([2**40]), shards=(10,))
    open_fails(store, r"configuration\.chunk_shape \[1099511627776\] makes one chunk")


def test_a_shard_index_over_the_limit_is_refused() -> None:
    # 2**40 inner chunks of one element: a 16 TiB shard index.
    store = edited(3, sharded([1]), shards=(10,))
    open_fails(store, r"makes 1099511627776 inner chunks per shard, an index of 16\.0 TiB")


def test_max_chunk_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        gpuzarr.config.set(max_chunk_bytes=0)
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        gpuzarr.config.set(max_chunk_bytes=None)
