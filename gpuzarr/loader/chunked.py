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

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.cuda.phases import phase
from ..errors import InvalidArgumentError
from .cache import note_generation_in
from .pieces import crop_pieces, crop_pieces_of_runs
from .sampling import volume_runs
from .volumes import data_generation

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import numpy as np

    from ..core.array import Array
    from .cache import ChunkCache, ChunkKey
    from .ordering import HostOrdering
    from .pieces import CropPieces
    from .sampling import Crops
    from .volumes import Volumes

    #: a chunk for the device cache, and its volume's ``data_generation`` when it was read
    _DevicePut = tuple[ChunkKey, Any, int]


def regular_chunks(array: Array, label: str, option: str = "cache_bytes/device_cache_bytes") -> tuple[int, ...]:
    """The chunk shape a cache keys by; InvalidArgumentError naming ``option`` for a
    rectilinear grid."""
    chunks = array.chunks
    if not _is_regular(array):
        raise InvalidArgumentError(
            f"{option}: {label} has a rectilinear chunk grid, which the chunk caches and decoding ahead do not "
            "support; leave them off for it"
        )
    return tuple(int(c) for c in chunks)


def _is_regular(array: Array) -> bool:
    return all(isinstance(c, int) for c in array.chunks)


def all_regular(volumes: Volumes) -> bool:
    """Whether every volume has a regular chunk grid (what the assembler keys chunks by)."""
    return all(_is_regular(a) for items in volumes.arrays.values() for a in items)


def check_cacheable(
    volumes: Volumes, option: str = "cache_bytes/device_cache_bytes"
) -> dict[str, list[tuple[int, ...]]]:
    """Each volume's chunk shape by field; InvalidArgumentError naming ``option`` for a
    rectilinear grid."""
    return {
        name: [regular_chunks(a, volumes.describe(name, v), option) for v, a in enumerate(items)]
        for name, items in volumes.arrays.items()
    }


#: batches of a window whose crop pieces (and copies) are worked out together
PLANNED_TOGETHER = 8


@dataclass
class DecodedWindow:
    """The chunks of the first ``taken`` of some batches, decoded together
    (:meth:`ChunkAssembler.decode_window`), and the pieces of their crops."""

    taken: int
    chunks: dict[ChunkKey, Any]
    pieces: dict[tuple[str, int, bytes], CropPieces]
    #: each run's copies planned by the ordering (:meth:`.ordering.HostOrdering.plan_copies`), by
    #: the same keys as ``pieces``
    copies: dict[tuple[str, int, bytes], Any] = dataclasses.field(default_factory=dict)
    #: the ordering of the lane that read the chunks where it is not the loader's own (a second
    #: decode lane on a stream of its own), else None
    lane: HostOrdering | None = None
    #: the event recorded on the lane's stream after its reads (None: read on the loader's stream)
    ready: Any = None
    #: the chunks for the device cache, put there by :meth:`ChunkAssembler.use_window` on the
    #: loader's stream (a lane's chunks may not be complete on it before then), each with its
    #: volume's ``data_generation`` when it was read
    device_puts: list[_DevicePut] = dataclasses.field(default_factory=list)
    #: each volume's ``data_generation`` before its chunks were read, by (field, volume)
    generations: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)


class ChunkAssembler:
    """Reads crops of one loader through its chunk caches (either may be None), and through the
    chunks of the batches it was told to decode ahead (:meth:`decode_ahead`)."""

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
        #: the decoded chunks of the batches decoded ahead (views of the arrays they were read
        #: into), until the next :meth:`decode_ahead`
        self._ahead: dict[ChunkKey, Any] = {}
        #: the pieces of the runs of crops that :meth:`decode_ahead` looked at, by field, volume
        #: and the origins' bytes, for :meth:`read` to take instead of working them out again
        self._pieces: dict[tuple[str, int, bytes], CropPieces] = {}
        #: the copies of those runs the ordering planned with them (the GPU's box copies)
        self._copies: dict[tuple[str, int, bytes], Any] = {}
        #: the lane whose stream read the chunks decoded ahead (None: the loader's own stream)
        self._ahead_lane: HostOrdering | None = None
        #: each volume's ``Array.data_generation`` when its chunks were last cached
        self._generations: dict[tuple[str, int], int] = {}

    def read(self, field: str, volume: int, origins: np.ndarray[Any, Any], out: Any) -> None:
        """Fill ``out`` (``(len(origins), *crop_shape)`` on the loader's device) with the crops
        of ``volumes.arrays[field][volume]`` at ``origins``."""
        array = self.volumes.arrays[field][volume]
        generation = self._forget_if_written(field, volume, array)
        chunk = self.chunks[field][volume]
        key = (field, volume, origins.tobytes())
        pieces = self._pieces.pop(key, None)
        copies = self._copies.pop(key, None)
        if pieces is None:
            with phase("loader-pieces"):
                pieces = crop_pieces(origins, self.crop_shape, chunk, array.shape)
        needed = pieces.chunk_keys()
        with self.ordering.producing():
            with phase("loader-look-up"):
                found = self._look_up(field, volume, needed, generation)
            missing = [c for c in needed if c not in found]
            found.update(self._read_chunks(field, volume, array, chunk, missing))
            with phase("loader-assemble"):
                self.ordering.assemble(out, [found[c] for c in needed], pieces, copies)

    def chunks_of(
        self, crops: Crops, pieces: dict[tuple[str, int, bytes], CropPieces]
    ) -> dict[tuple[str, int], set[tuple[int, ...]]]:
        """The chunks ``crops`` cross, by (field, volume); the pieces worked out on the way go
        to ``pieces``, by field, volume and the origins' bytes."""
        return self.chunks_of_batches([crops], pieces)[0]

    def chunks_of_batches(
        self,
        batches: Sequence[Crops],
        pieces: dict[tuple[str, int, bytes], CropPieces],
        copies: dict[tuple[str, int, bytes], Any] | None = None,
    ) -> list[dict[tuple[str, int], set[tuple[int, ...]]]]:
        """:meth:`chunks_of` of each of ``batches``, the pieces of all their crops of one
        volume worked out together (``crop_pieces_of_runs``); with ``copies``, the copies the
        ordering plans for those pieces go there, planned together too."""
        runs: dict[tuple[str, int], list[tuple[int, np.ndarray[Any, Any]]]] = {}
        for i, crops in enumerate(batches):
            for volume, start, stop in volume_runs(crops.volumes):
                for field in self.volumes.fields:
                    runs.setdefault((field, volume), []).append((i, crops.origins[start:stop]))
        wanted: list[dict[tuple[str, int], set[tuple[int, ...]]]] = [{} for _ in batches]
        for (field, volume), items in runs.items():
            shape = self.volumes.arrays[field][volume].shape
            found = crop_pieces_of_runs([o for _, o in items], self.crop_shape, self.chunks[field][volume], shape)
            for (i, origins), run_pieces in zip(items, found, strict=True):
                pieces[(field, volume, origins.tobytes())] = run_pieces
                wanted[i].setdefault((field, volume), set()).update(run_pieces.chunk_keys())
            if copies is not None:
                dtype = self.volumes.dtypes[field]
                sized = [(len(origins), run_pieces) for (_, origins), run_pieces in zip(items, found, strict=True)]
                planned = self.ordering.plan_copies(self.crop_shape, dtype, sized)
                if planned is not None:
                    for (_, origins), run_copies in zip(items, planned, strict=True):
                        copies[(field, volume, origins.tobytes())] = run_copies
        return wanted

    def decode_ahead(self, batches: Sequence[Crops], budget: int) -> int:
        """Read the chunks of the first of ``batches`` (as many as their chunks not cached fit
        ``budget`` bytes, at least one) together, for :meth:`read` to take their crops from.

        On a GPU each chunk-shape group is one ``read_batch``: one batched decode for the chunks
        of many batches, whose time is that of its longest stream rather than the sum of them.
        Returns how many batches were decoded ahead. The chunks decoded ahead before are
        dropped first.
        """
        self.drop_ahead()
        return self.use_window(self.decode_window(batches, budget))

    def decode_window(self, batches: Sequence[Crops], budget: int, lane: HostOrdering | None = None) -> DecodedWindow:
        """What :meth:`decode_ahead` reads, without handing it to :meth:`read` yet: a window
        that :meth:`use_window` hands over later. It reads the caches (and puts what it reads
        in them) but changes nothing :meth:`read` uses, so it may run on another thread while
        :meth:`read` puts together the batches of the window before.

        ``lane``: that thread's ordering where it is not the loader's (``decode_lane()``, a
        stream of its own): the chunks are read on its stream, the window carries an event
        recorded there after them, and the chunks for the device cache are put there by
        :meth:`use_window`, after the loader's stream has waited for that event."""
        ordering = self.ordering if lane is None else lane
        deferred: list[_DevicePut] | None = None if ordering is self.ordering else []
        pieces: dict[tuple[str, int, bytes], CropPieces] = {}
        copies: dict[tuple[str, int, bytes], Any] = {}
        wanted: dict[tuple[str, int], set[tuple[int, ...]]] = {}
        with phase("loader-window-plan"):
            taken = self._plan_window(batches, budget, pieces, wanted, copies)
        for cache in (self.device_cache, self.host_cache):
            if cache is not None:
                cache.count_misses(sum(len(chunks) for chunks in wanted.values()))
        chunks: dict[ChunkKey, Any] = {}
        generations: dict[tuple[str, int], int] = {}
        with ordering.producing():
            for (field, volume), coords in wanted.items():
                array = self.volumes.arrays[field][volume]
                chunk = self.chunks[field][volume]
                generations[(field, volume)] = data_generation(array)
                read = self._read_chunks(
                    field, volume, array, chunk, sorted(coords), ordering, deferred, generations[(field, volume)]
                )
                chunks.update({(field, volume, c): value for c, value in read.items()})
            if deferred is None:
                return DecodedWindow(taken, chunks, pieces, copies, generations=generations)
            return DecodedWindow(
                taken, chunks, pieces, copies, ordering, ordering.record(), deferred, generations=generations
            )

    def _plan_window(
        self,
        batches: Sequence[Crops],
        budget: int,
        pieces: dict[tuple[str, int, bytes], CropPieces],
        wanted: dict[tuple[str, int], set[tuple[int, ...]]],
        copies: dict[tuple[str, int, bytes], Any] | None = None,
    ) -> int:
        """How many of ``batches`` a window holds: as many as their chunks not cached fit
        ``budget`` bytes, at least one. Their chunks go to ``wanted``, the pieces of their
        crops to ``pieces`` and the copies the ordering plans for them to ``copies``.

        The batches are worked out :data:`PLANNED_TOGETHER` at a time: most windows that read
        chunks stop before, and a window of cached chunks takes them all."""
        nbytes, taken = 0, 0
        # Chunks found in a cache while planning this window, not looked up again for the next
        # batches that cross them: with a device cache holding the volume, a window of 8
        # batches of 32 64^3 crops looked up about 790 chunks, 125 of them distinct.
        cached: dict[tuple[str, int], set[tuple[int, ...]]] = {}
        for crossed in self._chunks_of_groups(batches, pieces, copies):
            new: dict[tuple[str, int], set[tuple[int, ...]]] = {}
            for key, chunks in crossed.items():
                seen = cached.setdefault(key, set())
                fresh = chunks - wanted.get(key, set()) - seen
                hits = {c for c in fresh if self._cached(key, c)}
                seen |= hits
                new[key] = fresh - hits
            more = sum(len(coords) * self._chunk_nbytes(*key) for key, coords in new.items())
            if taken and nbytes + more > budget:
                break
            for key, coords in new.items():
                wanted.setdefault(key, set()).update(coords)
            nbytes, taken = nbytes + more, taken + 1
        return taken

    def _chunks_of_groups(
        self,
        batches: Sequence[Crops],
        pieces: dict[tuple[str, int, bytes], CropPieces],
        copies: dict[tuple[str, int, bytes], Any] | None,
    ) -> Iterator[dict[tuple[str, int], set[tuple[int, ...]]]]:
        """:meth:`chunks_of_batches` of ``batches``, each group of :data:`PLANNED_TOGETHER`
        worked out once the caller has taken the one before."""
        for start in range(0, len(batches), PLANNED_TOGETHER):
            yield from self.chunks_of_batches(batches[start : start + PLANNED_TOGETHER], pieces, copies)

    def use_window(self, window: DecodedWindow) -> int:
        """Let :meth:`read` take crops from ``window`` (the chunks decoded ahead before are
        dropped); how many batches it holds. A window read on a lane's stream is waited for by
        the loader's stream first, and its chunks for the device cache are copied there on it."""
        self._release_ahead()
        self.ordering.wait_for(window.ready)
        for (field, volume), generation in window.generations.items():
            if not self._note_generation(field, volume, generation):
                # Read before a write that a batch here has seen end: maybe the old data.
                for key in [k for k in window.chunks if k[0] == field and k[1] == volume]:
                    del window.chunks[key]
        if window.device_puts and self.device_cache is not None:
            with self.ordering.producing():
                for key, value, generation in window.device_puts:
                    self.device_cache.put(key, value.copy(), generation)
        self._ahead, self._pieces, self._copies = window.chunks, window.pieces, window.copies
        self._ahead_lane = window.lane
        return window.taken

    def drop_ahead(self) -> None:
        """Forget the chunks decoded ahead (and the pieces of their crops)."""
        self._release_ahead()
        self._ahead, self._pieces, self._copies = {}, {}, {}

    def _release_ahead(self) -> None:
        """Before the chunks decoded ahead on a lane's stream are let go of: that stream waits
        for what the loader's stream has queued so far, the batches put together from them.

        Their memory goes back to the lane stream's memory pool, where the lane's next reads
        may take it at once; ordered behind that wait, they write it only once those batches
        have read it."""
        lane, self._ahead_lane = self._ahead_lane, None
        if lane is not None:
            lane.wait_for(self.ordering.record())

    def _forget_if_written(self, field: str, volume: int, array: Any) -> int:
        """Drop the cached and decoded-ahead chunks of a volume written through its Array since
        they were read: the caches served the old data (TensorStore's cache sees such writes).
        Writes through another Array object, or another process, are not seen (docs/loader.md).
        Returns the volume's generation now: what the chunks found in the caches belong to."""
        generation = data_generation(array)
        for cache in (self.device_cache, self.host_cache):
            if cache is not None:  # the caches live from pass to pass: each keeps what it saw
                cache.note_generation(field, volume, generation)
        self._note_generation(field, volume, generation)
        return generation

    def _note_generation(self, field: str, volume: int, generation: int) -> bool:
        """``note_generation_in`` the generations of the chunks decoded ahead: a later one drops
        the volume's; whether it is the latest noted."""
        moved = note_generation_in(self._generations, (field, volume), generation)
        if moved > 0:
            for key in [k for k in self._ahead if k[0] == field and k[1] == volume]:
                del self._ahead[key]
        return moved >= 0

    def _cached(self, key: tuple[str, int], coords: tuple[int, ...]) -> bool:
        full: ChunkKey = (key[0], key[1], coords)
        device, host = self.device_cache, self.host_cache
        return (device is not None and full in device) or (host is not None and full in host)

    def _chunk_nbytes(self, field: str, volume: int) -> int:
        return math.prod(self.chunks[field][volume]) * self.volumes.arrays[field][volume].dtype.itemsize

    def _look_up(
        self, field: str, volume: int, needed: list[tuple[int, ...]], generation: int
    ) -> dict[tuple[int, ...], Any]:
        """The chunks of ``needed`` decoded ahead or in a cache: the device cache, then the host
        cache (whose chunks a GPU loader copies to the device, and into the device cache, as
        of the volume's ``generation``)."""
        found: dict[tuple[int, ...], Any] = {}
        rest = needed  # a window of cached chunks read nothing ahead
        if self._ahead:
            rest = []
            for coords in needed:
                value = self._ahead.get((field, volume, coords))
                if value is not None:
                    found[coords] = value
                else:
                    rest.append(coords)
        for cache in (self.device_cache, self.host_cache):
            if cache is None or not rest:
                continue
            keys: list[ChunkKey] = [(field, volume, coords) for coords in rest]
            missing = []
            for key, value in zip(keys, cache.get_many(keys), strict=True):
                if value is None:
                    missing.append(key[2])
                    continue
                if cache is self.host_cache and self.ordering.on_device:
                    value = self.ordering.from_host(value)
                    if self.device_cache is not None:
                        self.device_cache.put(key, value, generation)
                found[key[2]] = value
            rest = missing
        return found

    def _read_chunks(
        self,
        field: str,
        volume: int,
        array: Array,
        chunk: tuple[int, ...],
        missing: list[tuple[int, ...]],
        ordering: HostOrdering | None = None,
        device_puts: list[_DevicePut] | None = None,
        generation: int | None = None,
    ) -> dict[tuple[int, ...], Any]:
        """Read the ``missing`` chunks whole (one read_batch per chunk shape, on ``ordering``'s
        stream: by default the loader's) and cache them; the chunks returned are views of the
        arrays read into. With ``device_puts`` the chunks for the device cache go there instead
        (see :meth:`decode_window`).

        The chunks are cached as of the volume's ``data_generation`` before the reads: where a
        write through the Array ends meanwhile and another thread's batch drops the volume's
        cached chunks, they may be the old data, and the caches refuse them."""
        ordering = self.ordering if ordering is None else ordering
        if generation is None:
            generation = data_generation(array)
        boxes: dict[tuple[int, ...], list[tuple[tuple[int, ...], tuple[slice, ...]]]] = {}
        for coords in missing:
            box = tuple(slice(k * c, min((k + 1) * c, n)) for k, c, n in zip(coords, chunk, array.shape, strict=True))
            boxes.setdefault(tuple(s.stop - s.start for s in box), []).append((coords, box))
        read: dict[tuple[int, ...], Any] = {}
        for group in boxes.values():
            stacked = array.read_batch([box for _, box in group], stream=ordering.stream)
            for i, (coords, _) in enumerate(group):
                value = stacked[i]
                key: ChunkKey = (field, volume, coords)
                # Cached chunks are copies of their own, so that one does not hold its whole
                # batch alive.
                if self.device_cache is not None:
                    if device_puts is None:
                        self.device_cache.put(key, value.copy(), generation)
                    else:
                        device_puts.append((key, value, generation))
                if self.host_cache is not None:
                    # On a device, a copy to the host on the reads' stream (current here), waited for.
                    self.host_cache.put(
                        key, ordering.to_host(value) if ordering.on_device else value.copy(), generation
                    )
                read[coords] = value
        return read

