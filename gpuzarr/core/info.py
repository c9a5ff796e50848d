"""``Array.info`` and ``Array.info_complete()``: the summary zarr-python prints for an array.

The same lines, labels and order as zarr-python 3's ``ArrayInfo``; values are gpuzarr's (the
data type by its Zarr name, codecs as their JSON). ``info_complete`` adds what needs a listing
of the store: bytes stored (metadata documents included, as zarr-python counts them), the
storage ratio, and how many chunks (and shards) exist out of how many the grid has.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ..metadata.limits import format_bytes
from ..metadata.v2 import ArrayMetadataV2

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ..metadata.json_types import CodecJSON
    from .array import Array

__all__ = [
    "ArrayInfo",
    "array_info",
    "byte_info",
    "count_chunks",
    "count_initialized",
    "human_readable_size",
    "nbytes_stored",
    "stored_chunk_coords",
]

def human_readable_size(size: int) -> str:
    """``size`` bytes with a binary unit and one decimal (``"1.3K"``), or plain under 1 KiB.

    Parameters
    ----------
    size
        A number of bytes.

    Returns
    -------
    str
    """
    if size < 2**10:
        return str(size)
    # format_bytes' "1.3 KiB", in zarr-python's spelling
    value, unit = format_bytes(size).split()
    return f"{value}{unit[0]}"


def byte_info(size: int) -> str:
    """``"1286 (1.3K)"``: the exact count, and the readable one from 1 KiB up.

    Parameters
    ----------
    size
        A number of bytes.

    Returns
    -------
    str
    """
    return str(size) if size < 2**10 else f"{size} ({human_readable_size(size)})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrayInfo:
    """A summary of an array; ``repr`` (or ``print``) shows it as zarr-python does.

    Attributes
    ----------
    zarr_format, data_type, fill_value, shape, chunk_shape, shard_shape, order, read_only, store_type
        What the metadata and the store say (``shard_shape`` None when not sharded).
    filters, serializer, compressors
        The codec chain as JSON: array->array codecs, the array->bytes codec (None for v2) and
        bytes->bytes codecs (v2: its filters and compressor).
    count_bytes
        The size of the decoded array.
    count_bytes_stored, count_chunks, count_chunks_initialized, count_shards, count_shards_initialized
        :meth:`gpuzarr.Array.info_complete` only (None otherwise): bytes under the array's path,
        chunks in the grid and stored, and for a sharded array the same for shards.
    """

    zarr_format: int
    data_type: Any
    fill_value: Any
    shape: tuple[int, ...]
    chunk_shape: tuple[Any, ...]
    shard_shape: tuple[int, ...] | None
    order: str
    read_only: bool
    store_type: str
    filters: tuple[Any, ...]
    serializer: CodecJSON | None
    compressors: tuple[Any, ...]
    count_bytes: int
    count_bytes_stored: int | None = None
    count_chunks: int | None = None
    count_chunks_initialized: int | None = None
    count_shards: int | None = None
    count_shards_initialized: int | None = None

    @property
    def storage_ratio(self) -> float | None:
        """Decoded bytes per stored byte, when the stored bytes are known and not 0."""
        if not self.count_bytes_stored:
            return None
        return self.count_bytes / self.count_bytes_stored

    def _lines(self) -> list[tuple[str, Any]]:
        lines: list[tuple[str, Any]] = [
            ("Type", "Array"),
            ("Zarr format", self.zarr_format),
            ("Data type", self.data_type),
            ("Fill value", self.fill_value),
            ("Shape", self.shape),
        ]
        if self.shard_shape is not None:
            lines.append(("Shard shape", self.shard_shape))
        lines += [
            ("Chunk shape", self.chunk_shape),
            ("Order", self.order),
            ("Read-only", self.read_only),
            ("Store type", self.store_type),
            ("Filters", self.filters),
        ]
        if self.serializer is not None:
            lines.append(("Serializer", self.serializer))
        lines += [("Compressors", self.compressors), ("No. bytes", byte_info(self.count_bytes))]
        if self.count_bytes_stored is not None:
            lines.append(("No. bytes stored", byte_info(self.count_bytes_stored)))
        if self.storage_ratio is not None:
            lines.append(("Storage ratio", f"{self.storage_ratio:.1f}"))
        if self.count_shards_initialized is not None:
            lines.append(("Shards Initialized", f"{self.count_shards_initialized} of {self.count_shards}"))
        if self.count_chunks_initialized is not None:
            lines.append(("Chunks Initialized", f"{self.count_chunks_initialized} of {self.count_chunks}"))
        return lines

    def __repr__(self) -> str:
        return "\n".join(f"{label:<19}: {value}" for label, value in self._lines())


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupInfo:
    """A summary of a group; ``repr`` (or ``print``) shows it as zarr-python does.

    ``count_members``, ``count_arrays`` and ``count_groups`` (every node below the group, at
    any depth) are :meth:`gpuzarr.Group.info_complete`'s only (None otherwise).
    """

    name: str
    zarr_format: int
    read_only: bool
    store_type: str
    count_members: int | None = None
    count_arrays: int | None = None
    count_groups: int | None = None

    def _lines(self) -> list[tuple[str, Any]]:
        lines: list[tuple[str, Any]] = [
            ("Name", self.name),
            ("Type", "Group"),
            ("Zarr format", self.zarr_format),
            ("Read-only", self.read_only),
            ("Store type", self.store_type),
        ]
        if self.count_members is not None:
            lines += [
                ("No. members", self.count_members),
                ("No. arrays", self.count_arrays),
                ("No. groups", self.count_groups),
            ]
        return lines

    def __repr__(self) -> str:
        return "\n".join(f"{label:<11} : {value}" for label, value in self._lines())


def codec_parts(array: Array) -> tuple[tuple[Any, ...], CodecJSON | None, tuple[Any, ...]]:
    """(filters, serializer, compressors) as zarr-python splits them, in JSON."""
    metadata = array.metadata
    if isinstance(metadata, ArrayMetadataV2):
        compressors = () if metadata.compressor is None else (dict(metadata.compressor),)
        return tuple(dict(f) for f in metadata.filters or ()), None, compressors
    chain = array.codecs
    pipeline = array.layout.pipeline
    sharding = array.layout.sharding
    if sharding is not None and sharding.inner is not None:
        # As zarr-python: for a sharded array, the codecs of the inner chunks.
        chain = chain[0]["configuration"]["codecs"]
        pipeline = sharding.inner
    n_filters = len(pipeline.array_to_array)
    return tuple(chain[:n_filters]), chain[n_filters], tuple(chain[n_filters + 1 :])


def array_info(array: Array, *, complete: bool = False) -> ArrayInfo:
    """The summary of ``array``; ``complete`` adds what a listing of the store tells."""
    metadata = array.metadata
    filters, serializer, compressors = codec_parts(array)
    info = ArrayInfo(
        zarr_format=array.zarr_format,
        data_type=(
            metadata.to_json()["dtype"] if isinstance(metadata, ArrayMetadataV2) else metadata.data_type.to_json()
        ),
        fill_value=array.fill_value,
        shape=array.shape,
        chunk_shape=array.chunks,
        shard_shape=array.shards,
        # v3 arrays read in C order (F order on disk is a transpose codec, among the filters).
        order=array.order,
        read_only=array.read_only,
        store_type=type(array.store).__name__,
        filters=filters,
        serializer=serializer,
        compressors=compressors,
        count_bytes=array.nbytes,
    )
    if not complete:
        return info
    # In bounds: "64 of 1" for a small array in one big shard would read as corruption.
    shards, chunks = count_initialized(array, in_bounds=True)
    sharded = array.shards is not None
    return dataclasses.replace(
        info,
        count_bytes_stored=nbytes_stored(array),
        count_chunks=count_chunks(array),
        count_chunks_initialized=chunks,
        count_shards=math.prod(metadata.chunk_grid.grid_shape(array.shape)) if sharded else None,
        count_shards_initialized=shards if sharded else None,
    )


def _prefix(array: Array) -> str:
    return array.path + "/" if array.path else ""


def nbytes_stored(array: Array) -> int:
    """Bytes of every value under the array's path.

    Chunks and metadata documents, as zarr-python's ``nbytes_stored`` counts them.
    """
    total = 0
    for key in array.store.list_prefix(_prefix(array)):
        # get_into with length 0 reads no bytes and reports the value's size.
        got = array.store.get_into(key, bytearray, 0, 0)
        total += 0 if got is None else got[1]
    return total


def count_chunks(array: Array) -> int:
    """The number of chunks in the grid (inner chunks when sharded), as ``zarr.Array.nchunks``."""
    return math.prod(d.nchunks for d in array.layout.dimensions())


def stored_chunk_coords(array: Array, *, complete: bool = False) -> Iterator[tuple[int, ...]]:
    """Grid coordinates of every chunk (or shard, when sharded) stored.

    They come from a listing of the store's keys under the array's path.

    Parameters
    ----------
    array
        The array whose stored objects are listed.
    complete
        Raise StorePermissionError where a local folder of the array's chunks may not be
        listed (a listing skips it): what copies, counts and shrinks would otherwise take for
        missing chunks. ``gpuzarr verify`` lists without, and reports those folders itself.

    Yields
    ------
    tuple of int
        The coordinates of one stored object in the array's chunk (or shard) grid.
    """
    metadata = array.metadata
    encoding = metadata.chunk_key_encoding
    grid = metadata.chunk_grid.grid_shape(array.shape)
    prefix = _prefix(array)
    keys = _complete_listing(array, prefix) if complete else array.store.list_prefix(prefix)
    for key in keys:
        rest = key[len(prefix) :]
        parts = rest.split(encoding.separator)
        if encoding.name == "default":
            if parts[0] != "c":
                continue
            parts = parts[1:]
        elif rest == "0" and not grid:
            parts = []
        if len(parts) != len(grid) or not all(p.isdigit() for p in parts):
            continue
        coords = tuple(int(p) for p in parts)
        # Re-encoding rules out look-alikes ("01", metadata documents); the bound, chunks left
        # outside a shrunk grid.
        if metadata.chunk_key(coords) == rest and all(c < n for c, n in zip(coords, grid, strict=True)):
            yield coords


def _complete_listing(array: Array, prefix: str) -> Iterable[str]:
    """The keys under ``prefix``, from a listing that missed none.

    StorePermissionError where a local folder of them may not be listed (one walk finds both).
    """
    from ..errors import StorePermissionError
    from ..store import innermost
    from ..store.local import LocalStore

    store = innermost(array.store)
    if not isinstance(store, LocalStore):
        return array.store.list_prefix(prefix)
    keys, folders = store.listing(prefix)  # prefix: "" or the array's "path/"
    if folders:
        shown = ", ".join(repr(f) for f in folders[:3]) + (", ..." if len(folders) > 3 else "")
        raise StorePermissionError(
            str(store.root), folders[0], f"this process may not list {shown}: the chunks there cannot be found"
        )
    return keys


def count_initialized(array: Array, *, in_bounds: bool = False) -> tuple[int, int]:
    """(stored objects, chunks in them): shards and their inner chunks when sharded.

    Every inner chunk position of a stored shard counts, as in zarr-python's
    ``nchunks_initialized``; ``in_bounds`` counts only those that intersect the array, so the
    count never exceeds ``nchunks`` (an edge shard holds positions past the array's end).
    """
    layout = array.layout
    sharding = layout.sharding
    objects = chunks = 0
    for coords in stored_chunk_coords(array, complete=True):
        objects += 1
        if sharding is None:
            chunks += 1
        elif in_bounds:
            chunks += layout.inner_chunks_in_bounds(coords)
        else:
            extent = array.metadata.chunk_grid.chunk_shape_at(coords)
            chunks += math.prod(e // c for e, c in zip(extent, sharding.chunk_shape, strict=True))
    return objects, chunks
