"""Crops assembled from cached decoded chunks: what the loader does when a chunk cache is on.

The chunks a batch's crops touch (on the planning grid: the inner chunks of a sharded array)
are looked up in the device cache, then in the host cache (a host hit is copied to the device
and kept there too), and the rest are read whole with one ``read_batch`` per chunk shape (edge
chunks are smaller), which fetches and decodes each once. The crops are then put together from
their pieces (:mod:`.pieces`): on a GPU in one launch of the assemble kernel on the loader's
side stream, on the CPU each crop's pieces on one of the CPU threads.

Chunks read on a GPU stay on the device; the host cache gets a host copy of each. A chunk read
on the CPU goes into the host cache as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from .pieces import crop_pieces

if TYPE_CHECKING:
    import numpy as np

    from ..core.array import Array
    from .cache import ChunkCache, ChunkKey
    from .ordering import HostOrdering
    from .volumes import Volumes


def regular_chunks(array: Array, label: str) -> tuple[int, ...]:
    """The chunk shape a cache keys by; InvalidArgumentError for a rectilinear grid."""
    chunks = array.chunks
    if not all(isinstance(c, int) for c in chunks):
        raise InvalidArgumentError(
            f"cache_bytes/device_cache_bytes: {label} has a rectilinear chunk grid, which the chunk caches do not "
            "support; leave the caches off for it"
        )
    return tuple(int(c) for c in chunks)


def check_cacheable(volumes: Volumes) -> dict[str, list[tuple[int, ...]]]:
    """Each volume's chunk shape by field; InvalidArgumentError for a rectilinear grid."""
    return {
        name: [regular_chunks(a, volumes.describe(name, v)) for v, a in enumerate(items)]
        for name, items in volumes.arrays.items()
    }


class ChunkAssembler:
    """Reads crops of one loader through its chunk caches (either may be None)."""

    def __init__(
        self,
        volumes: Volumes,
        crop_shape: tuple[int, ...],
        ordering: HostOrdering,
        host_cache: ChunkCache | None,
        device_cache: ChunkCache | None,
    ) -> None:
        self.volumes = volumes
        self.crop_shape = crop_shape
        self.ordering = ordering
        self.host_cache = host_cache
        self.device_cache = device_cache
        self.chunks = check_cacheable(volumes)

    def read(self, field: str, volume: int, origins: np.ndarray[Any, Any], out: Any) -> None:
        """Fill ``out`` (``(len(origins), *crop_shape)`` on the loader's device) with the crops
        of ``volumes.arrays[field][volume]`` at ``origins``."""
        array = self.volumes.arrays[field][volume]
        chunk = self.chunks[field][volume]
        pieces = crop_pieces(origins, self.crop_shape, chunk, array.shape)
        needed = pieces.chunk_keys()
        with self.ordering.producing():
            found = self._look_up(field, volume, needed)
            missing = [c for c in needed if c not in found]
            found.update(self._read_chunks(field, volume, array, chunk, missing))
            self.ordering.assemble(out, [found[c] for c in needed], pieces)

    def _look_up(self, field: str, volume: int, needed: list[tuple[int, ...]]) -> dict[tuple[int, ...], Any]:
        found: dict[tuple[int, ...], Any] = {}
        for coords in needed:
            key: ChunkKey = (field, volume, coords)
            value = self.device_cache.get(key) if self.device_cache is not None else None
            if value is None and self.host_cache is not None:
                host = self.host_cache.get(key)
                if host is not None:
                    value = self.ordering.from_host(host) if self.ordering.on_device else host
                    if self.device_cache is not None:
                        self.device_cache.put(key, value)
            if value is not None:
                found[coords] = value
        return found

    def _read_chunks(
        self, field: str, volume: int, array: Array, chunk: tuple[int, ...], missing: list[tuple[int, ...]]
    ) -> dict[tuple[int, ...], Any]:
        """Read the ``missing`` chunks whole (one read_batch per chunk shape) and cache them."""
        boxes: dict[tuple[int, ...], list[tuple[tuple[int, ...], tuple[slice, ...]]]] = {}
        for coords in missing:
            box = tuple(slice(k * c, min((k + 1) * c, n)) for k, c, n in zip(coords, chunk, array.shape, strict=True))
            boxes.setdefault(tuple(s.stop - s.start for s in box), []).append((coords, box))
        read: dict[tuple[int, ...], Any] = {}
        for group in boxes.values():
            stacked = array.read_batch([box for _, box in group], stream=self.ordering.stream)
            for i, (coords, _) in enumerate(group):
                # A copy of its own, so that a cached chunk does not hold its whole batch alive.
                value = stacked[i].copy()
                key: ChunkKey = (field, volume, coords)
                if self.device_cache is not None:
                    self.device_cache.put(key, value)
                if self.host_cache is not None:
                    self.host_cache.put(key, self.ordering.to_host(value) if self.ordering.on_device else value)
                read[coords] = value
        return read

