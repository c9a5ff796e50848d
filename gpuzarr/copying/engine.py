"""Copying arrays and hierarchies between stores, their encoding kept or changed: the engine of
:func:`gpuzarr.convert` and of the ``gpuzarr copy`` / ``convert`` commands.

A whole hierarchy (groups with their attributes, arrays with theirs, dimension names and fill
values) or one array is copied from any readable store to any writable one; the format options
(:mod:`.destination`) change how the copy is encoded.

How data moves, array by array:

* **Encoding unchanged** (no format option changes it): stored objects (chunks, or whole shards)
  are copied byte for byte, without decoding; one stored object per task.
* **Encoding changed**: the copy is written region by region, each region a box of whole stored
  objects of the *destination* (:mod:`.regions`), so that no two workers write one stored object
  and no write reads back what it replaces; the source is read with the CPU reader.

Resuming: a second run into an existing destination whose metadata matches what the copy would
write goes on where the first stopped. A stored object (unchanged encoding) is skipped when its
bytes there equal the source's; a region (changed encoding) is skipped when the destination
already decodes to exactly the bytes the source decodes to there. Anything else is written again
(a stored object of the destination that cannot be decoded included), and a stored object of
the destination that the source does not have is erased, so a region that differs is never
skipped. Regions where neither side stores anything are not visited. Destination nodes with
other metadata are an error unless ``overwrite``, which replaces everything at the destination
first; nodes of the destination that the source lacks are left. The destination's nodes are
created or checked by :mod:`.destination_nodes`.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.group import Group
from ..core.info import stored_chunk_coords
from ..errors import CorruptChunkError
from .destination_nodes import ArrayCopy, Tally, prepare_nodes
from .progress import Progress, run_parallel
from .regions import Region, RegionPlan, chunks_in, object_box, slices, stored_boxes, stored_chunks

if TYPE_CHECKING:
    from ..core.array import Array
    from ..store.base import Store
    from .destination import FormatOptions

log = logging.getLogger("gpuzarr.copying")


def copy_nodes(
    source: Array | Group,
    store: Store,
    base: str,
    options: FormatOptions,
    *,
    overwrite: bool,
    jobs: int,
    progress: bool | None,
    description: str,
) -> tuple[Tally, Progress]:
    """Create the copy's nodes at ``base`` of ``store``, then copy the arrays' data on ``jobs``
    threads: what was done, and the closed progress (its bytes and time)."""
    tally = Tally()
    copies = prepare_nodes(source, store, base, options, overwrite=overwrite, tally=tally)
    total = sum(c.source.nbytes for c in copies)
    with Progress(total, description, progress) as shown:
        for item in copies:
            copy_array(item, jobs, shown, tally)
    if isinstance(source, Group) and source.consolidated:
        from ..api import consolidate_metadata

        consolidate_metadata(store, base)  # as the source had it: one document opens the whole hierarchy
    return tally, shown


# -- data -------------------------------------------------------------------------------------------


def copy_array(item: ArrayCopy, jobs: int, progress: Progress, tally: Tally) -> None:
    """Copy the data of one array (see the module docstring), resuming where DST has it."""
    log.info("copying %s (%s)", item.name, "stored bytes" if item.raw else "decoded and encoded again")

    def done(_: Any, result: tuple[int, int, int]) -> None:
        nbytes, written, skipped = result
        progress.update(nbytes, written + skipped)
        tally.written += written
        tally.skipped += skipped

    if item.raw:
        objects, untouched = _raw_objects(item)
        progress.update(untouched, 0)
        run_parallel(lambda coords: _copy_object(item, coords), objects, jobs, done)
    else:
        regions, untouched = _regions_to_visit(item)
        progress.update(untouched, 0)
        run_parallel(lambda region: _copy_region(item, region), regions, jobs, done)


def _raw_objects(item: ArrayCopy) -> tuple[list[tuple[int, ...]], int]:
    """The stored objects to look at (stored in SRC or DST), and the decoded bytes of the rest."""
    if not (item.source.store.supports_listing and item.destination.store.supports_listing):
        grid = item.source.metadata.chunk_grid.grid_shape(item.source.shape)
        return list(itertools.product(*(range(n) for n in grid))), 0
    listed = set(stored_chunk_coords(item.source, complete=True)) | set(
        stored_chunk_coords(item.destination, complete=True)
    )
    objects = sorted(listed)
    visited = sum(_object_nbytes(item.source, c) for c in objects)
    return objects, item.source.nbytes - visited


def _object_nbytes(array: Array, coords: tuple[int, ...]) -> int:
    box = object_box(array.metadata.chunk_grid.dimensions(array.shape), coords)
    return math.prod(stop - start for start, stop in box) * array.dtype.itemsize


def _copy_object(item: ArrayCopy, coords: tuple[int, ...]) -> tuple[int, int, int]:
    """Copy one stored object's bytes unless DST has the same: (decoded bytes, chunks written,
    chunks skipped)."""
    source, destination = item.source, item.destination
    layout = source.layout
    chunks = stored_chunks(source, coords)
    nbytes = _object_nbytes(source, coords)
    key = destination.layout.key(coords)
    value = source.store.get(layout.key(coords))
    present = destination.store.get(key)
    if value is None and present is None:
        return nbytes, 0, chunks
    if value is not None and present is not None and bytes(value) == bytes(present):
        return nbytes, 0, chunks
    if value is None:
        destination.store.erase(key)
    else:
        destination.store.set(key, value)
    return nbytes, chunks, 0


def _regions_to_visit(item: ArrayCopy) -> tuple[list[tuple[Region, bool]], int]:
    """The destination's regions to look at, each with whether DST stores anything in it, and
    the decoded bytes of the regions neither side stores anything in."""
    plan = RegionPlan(item.destination, read_from=item.source)
    src_boxes, dst_boxes = stored_boxes(item.source), stored_boxes(item.destination)
    if src_boxes is None or dst_boxes is None:
        return [(r, True) for r in plan.regions], 0
    in_destination = {r.object_ranges for r in plan.touching(dst_boxes)}  # regions made anew: by their objects
    if not _same_fill(item.source, item.destination):
        # What SRC stores nothing in reads as SRC's fill value, which DST must store (a convert
        # may change the fill value, following xarray's _FillValue conventions).
        return [(r, r.object_ranges in in_destination) for r in plan.regions], 0
    regions = [(r, r.object_ranges in in_destination) for r in plan.touching(src_boxes + dst_boxes)]
    visited = sum(r.size for r, _ in regions) * item.source.dtype.itemsize
    return regions, item.source.nbytes - visited


def _copy_region(item: ArrayCopy, task: tuple[Region, bool]) -> tuple[int, int, int]:
    """Write one region of DST from SRC where they differ: (decoded bytes, chunks written,
    chunks skipped)."""
    region, stored_in_destination = task
    destination = item.destination
    data = item.source.read(region.selection)
    chunks = chunks_in(destination, region.selection)
    if not stored_in_destination:
        # DST stores nothing here, so it reads as the fill value; the writer stores only the
        # chunks that differ from it.
        destination.write(region.selection, data)
        return data.nbytes, chunks, 0
    present = _read_or_none(destination, region.selection)
    if present is not None and _same(present, data):
        return data.nbytes, 0, chunks
    # Some stored objects differ (or cannot be decoded): write those alone (each whole, so no
    # read-modify-write). A damaged object of DST, left by an interrupted or broken run, is one
    # that differs, so a resumed copy repairs it.
    dims = destination.metadata.chunk_grid.dimensions(destination.shape)
    origin = [s.start for s in region.selection]
    written = 0
    for coords in region.objects():
        box = slices(object_box(dims, coords))
        within = tuple(slice(s.start - o, s.stop - o) for s, o in zip(box, origin, strict=True))
        old = _read_or_none(destination, box) if present is None else present[within]
        if old is None or not _same(old, data[within]):
            destination.write(box, data[within])
            written += chunks_in(destination, box)
    return data.nbytes, written, chunks - written


def _read_or_none(array: Array, selection: tuple[slice, ...]) -> np.ndarray[Any, Any] | None:
    """``array[selection]``, or None when a stored object there cannot be decoded."""
    try:
        values: np.ndarray[Any, Any] = array.read(selection)  # the CPU reader: NumPy
    except CorruptChunkError as exc:
        log.info("DST %s: %s; writing it again", exc.key, exc.reason)
        return None
    return values


def _same_fill(source: Array, destination: Array) -> bool:
    """Whether a missing chunk reads the same in both arrays."""
    one = np.full((), source.metadata.fill_value, dtype=source.dtype)
    other = np.full((), destination.metadata.fill_value, dtype=destination.dtype)
    return _same(one, other)


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Equal bit for bit (NaNs with their payloads, -0.0 apart from 0.0); object arrays (strings)
    element by element."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.hasobject:
        return bool(np.array_equal(a, b))
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
