"""The GPU read plan: what to read, how to decode it and where it lands, decided on the host.

Two pure steps, both testable without a GPU:

1. :func:`build_gpu_read_plan` (layout + SelectionPlan, no I/O): one :class:`ChunkTask` per stored
   chunk or inner chunk the selection touches (inner chunks of many shards mixed), each with its
   store key (the shard's key for an inner chunk, plus its position in the shard), its
   :class:`.routes.DecodeRoute` (which nvCOMP route decodes it, or a CPU fallback with the reason), and
   its rows of the assemble launch (source offsets and steps, destination offsets, extents,
   transpose expressed as source strides). Tasks are cut into batches that fit a device-memory
   budget.
2. :func:`.bind.bind_batch` (a batch + the encoded bytes read for it): streams, staging and
   work layouts and the kernel arguments of that batch (see :mod:`.bind`).

Alignment: nvCOMP documents 1-byte input/output and 8-byte scratch alignment for its batched
zstd and LZ4 decompressors (``nvcomp<Alg>DecompressRequiredAlignments``) and asks for at most
8 bytes for any of its algorithms; every stream and every decoded chunk starts at a multiple of
:data:`ALIGNMENT` (8), which also meets assemble.cu's ``min(itemsize, 8)``, except the zstd
frames of one shard file that the device reads at once (``bind._coalesce``): they keep their
file layout, relying on zstd's documented 1-byte input alignment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ...parallel import batches_by_bytes
from .launch_checks import MAX_NDIM
from .routes import DecodeRoute, c_strides, decode_route, swap_width

if TYPE_CHECKING:
    from ...layout import ArrayLayout
    from ...plan.selection import SelectionPlan

ALIGNMENT = 8
#: Default device-memory budget of one batch (encoded and decoded bytes, un-shuffle and nvCOMP
#: scratch: see :func:`task_cost`). nvCOMP's batched zstd decode takes about as long as its
#: slowest frame whatever the batch holds, and the executor waits for each batch's decode, so
#: every batch a read is cut into adds that latency once. On an H200 (benchmarks/results/
#: 2026-11-28-h200-lease3.md, benchmarks.batch_sweep), a 128 MiB sharded zstd volume of 64^3
#: chunks read in 71 ms as 4 batches at 256 MiB and in 37-40 ms as one at 1 or 4 GiB.
BATCH_BYTES = 1024 * 1024 * 1024
ITEMSIZES = (1, 2, 4, 8, 16)

Int64Array = npt.NDArray[np.int64]


class GpuPlanError(ValueError):
    """The selection or the array cannot be read by the GPU path at all (say why)."""


class GpuArrayError(GpuPlanError):
    """No selection of this array can be assembled on the GPU (its data type or rank)."""


def align(n: int, alignment: int = ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


# --- the static plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkTask:
    """One stored chunk, or inner chunk ``inner`` of the shard stored at ``key``."""

    coords: tuple[int, ...]
    key: str
    inner: int | None
    shape: tuple[int, ...]
    decoded_nbytes: int
    route: DecodeRoute
    #: rows of the plan's assemble tables that read this chunk
    rows: tuple[int, ...]

    @property
    def where(self) -> str:
        """What an error message names beside the key."""
        return "" if self.inner is None else f"inner chunk {self.inner}: "


@dataclass(frozen=True)
class GpuReadPlan:
    """Everything about a read that is known before any byte is read."""

    buffer_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    #: assemble.cu ``out_strides``: output element strides along each chunk axis (0 where an
    #: integer index drops the axis), padded to 8
    out_strides: Int64Array
    ndim: int
    fill_value: bytes
    swap_width: int
    fill_missing: bool
    tasks: tuple[ChunkTask, ...]
    #: per assemble row (n, 8) tables, padded as check_assemble pads them
    src_offsets: Int64Array
    src_steps: Int64Array
    dst_offsets: Int64Array
    extents: Int64Array
    batches: tuple[tuple[int, ...], ...]
    sharded: bool = False

    @property
    def out_nbytes(self) -> int:
        return math.prod(self.buffer_shape) * self.dtype.itemsize


def _row(
    chunk_selection: tuple[Any, ...], out_selection: tuple[Any, ...], chunk_shape: tuple[int, ...]
) -> tuple[list[int], list[int], list[int], list[int]]:
    offsets, steps, dst, extents = [], [], [], []
    kept = iter(out_selection)
    for axis, (sel, n) in enumerate(zip(chunk_selection, chunk_shape, strict=True)):
        if isinstance(sel, (int, np.integer)) and not isinstance(sel, bool):
            offsets.append(int(sel))
            steps.append(1)
            dst.append(0)
            extents.append(1)
            continue
        if not isinstance(sel, slice):
            raise GpuPlanError(f"axis {axis}: index arrays are not supported by the GPU assemble kernel")
        start, stop, step = sel.indices(n)
        if step < 1:
            raise GpuPlanError(f"axis {axis}: negative steps are not supported by the GPU assemble kernel")
        count = len(range(start, stop, step))
        out = next(kept)
        if not isinstance(out, slice) or out.step not in (None, 1):
            raise GpuPlanError(f"axis {axis}: the output selection {out!r} is not a unit-step slice")
        if out.stop - out.start != count:
            raise GpuPlanError(f"axis {axis}: chunk selection of {count} elements maps to {out!r}")
        offsets.append(start)
        steps.append(step)
        dst.append(int(out.start))
        extents.append(count)
    return offsets, steps, dst, extents


def _padded(rows: list[list[int]], ndim: int, pad: int) -> Int64Array:
    table = np.full((len(rows), MAX_NDIM), pad, dtype=np.int64)
    if rows and ndim:
        table[:, :ndim] = np.asarray(rows, dtype=np.int64).reshape(len(rows), ndim)
    return table


def _batch_axes(kept: list[bool], out_selection: tuple[Any, ...], buffer_shape: tuple[int, ...]) -> int:
    """How many leading output axes carry the selection's index in a batched read (0 or 1),
    from the first projection; raises GpuPlanError where the kernel cannot express the read."""
    lead = len(out_selection) - sum(kept)
    if lead == 1 and not isinstance(out_selection[0], (int, np.integer)):
        raise GpuPlanError("point (vectorised) selections are not supported by the GPU assemble kernel")
    if lead not in (0, 1) or len(buffer_shape) != sum(kept) + lead:
        raise GpuPlanError("the output selection does not match the chunk selection")
    if lead and not any(kept):
        raise GpuPlanError("a batch of single-element selections has no axis to carry the batch index")
    return lead


def _add_batch_index(dst: list[int], kept: list[bool], index: Any, buffer_shape: tuple[int, ...]) -> None:
    """Fold a batched read's selection ``index`` into the destination offset of the last kept
    axis, whose output stride is 1."""
    if not isinstance(index, (int, np.integer)) or not 0 <= int(index) < buffer_shape[0]:
        raise GpuPlanError(f"batch index {index!r} is not an integer within the batch")
    last_kept = len(kept) - 1 - kept[::-1].index(True)
    dst[last_kept] += int(index) * math.prod(buffer_shape[1:])


def task_cost(route: DecodeRoute, decoded_nbytes: int) -> int:
    """Device bytes one chunk takes in its batch: its encoded bytes (at most about its decoded
    size), its decoded bytes, the un-shuffle scratch of shuffled Blosc chunks and nvCOMP's
    decoder scratch (zstd: about three times the decoded bytes)."""
    decoded = align(decoded_nbytes)
    return decoded * (3 if route.shuffled else 2) + math.ceil(route.scratch * decoded)


def build_gpu_read_plan(layout: ArrayLayout, plan: SelectionPlan, budget: int = BATCH_BYTES) -> GpuReadPlan:
    """Plan a read of ``plan`` (a basic selection) for the GPU path.

    Raises :class:`GpuPlanError` where the assemble kernel cannot express the read (index arrays,
    point selections, negative steps, item sizes other than 1/2/4/8/16, more than 8 dimensions).
    """
    dtype = np.dtype(layout.metadata.dtype)
    if dtype.itemsize not in ITEMSIZES or dtype.hasobject:
        raise GpuArrayError(f"data type {dtype} ({dtype.itemsize}-byte items) is not supported by the GPU path")
    ndim = len(layout.chunk_shape)
    if ndim > MAX_NDIM:
        raise GpuArrayError(f"{ndim}-d arrays exceed the assemble kernel's {MAX_NDIM} dimensions")
    if plan.buffer_shape != plan.shape:
        raise GpuPlanError("point (vectorised) selections are not supported by the GPU assemble kernel")
    # Group projections by chunk (a chunk shared by several selections is decoded once).
    by_chunk: dict[tuple[int, ...], list[int]] = {}
    rows_src: list[list[int]] = []
    rows_step: list[list[int]] = []
    rows_dst: list[list[int]] = []
    rows_ext: list[list[int]] = []
    first_kept: list[bool] | None = None
    # A batched read (Array.read_batch) prefixes each out_selection with the selection's index
    # along a leading output axis. The kernel knows only chunk axes, so that index becomes an
    # element offset on the last kept axis, whose output stride is 1.
    lead = 0
    for p in plan.projections:
        kept = [isinstance(s, slice) for s in p.chunk_selection]
        if first_kept is None:
            first_kept = kept
            lead = _batch_axes(kept, p.out_selection, plan.buffer_shape)
        elif kept != first_kept:
            raise GpuPlanError("projections drop different axes")
        out_selection = p.out_selection[lead:]
        o, s, d, e = _row(p.chunk_selection, out_selection, layout.chunk_shape_at(p.chunk_coords))
        if lead:
            _add_batch_index(d, kept, p.out_selection[0], plan.buffer_shape)
        by_chunk.setdefault(p.chunk_coords, []).append(len(rows_src))
        rows_src.append(o)
        rows_step.append(s)
        rows_dst.append(d)
        rows_ext.append(e)
    buffer_strides = iter(c_strides(plan.buffer_shape[lead:]))
    out_strides = np.zeros(MAX_NDIM, dtype=np.int64)
    for axis, is_kept in enumerate(first_kept or [True] * ndim):
        out_strides[axis] = next(buffer_strides, 0) if is_kept else 0
    routes: dict[tuple[int, ...], DecodeRoute] = {}
    tasks: list[ChunkTask] = []
    for coords, rows in by_chunk.items():
        pipeline = layout.pipeline_at(coords)
        shape = pipeline.spec.shape
        route = routes.get(shape)
        if route is None:
            route = routes[shape] = decode_route(pipeline)
        if layout.sharding is not None:
            shard, inner = layout.shard_of(coords)
            key, position = layout.key(shard), inner
        else:
            key, position = layout.key(coords), None
        tasks.append(ChunkTask(coords, key, position, shape, pipeline.spec.nbytes, route, tuple(rows)))
    # Inner chunks of one shard next to each other (one index read per shard and batch).
    tasks.sort(key=lambda t: (t.key, -1 if t.inner is None else t.inner))
    sizes = [task_cost(t.route, t.decoded_nbytes) for t in tasks]
    batches = tuple(tuple(r) for r in batches_by_bytes(sizes, budget))
    spec = layout.chunk_pipeline.spec
    fill = np.full((), spec.fill_value, dtype=dtype).tobytes()
    return GpuReadPlan(
        buffer_shape=plan.buffer_shape,
        dtype=dtype,
        out_strides=out_strides,
        ndim=ndim,
        fill_value=fill,
        swap_width=swap_width(layout.chunk_pipeline, dtype),
        fill_missing=layout.fill_missing_data_reads,
        tasks=tuple(tasks),
        src_offsets=_padded(rows_src, ndim, 0),
        src_steps=_padded(rows_step, ndim, 1),
        dst_offsets=_padded(rows_dst, ndim, 0),
        extents=_padded(rows_ext, ndim, 1),
        batches=batches,
        sharded=layout.sharding is not None,
    )
