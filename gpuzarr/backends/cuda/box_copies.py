"""Box copies from separate device arrays into the rows of one output, in one launch of an
assemble kernel: how the data loader puts a batch of crops together from cached chunks.

A batch of 32 crops of 64^3 is about 250 boxes from about 100 chunks, and the loader puts one
together for every batch it hands out, so the host's share must stay small: :func:`box_copies`
checks the boxes against the shapes of their sources and of the output (the checks of
:func:`.launch_checks.check_assemble`, which boxes of C-contiguous sources make simple bounds),
and writes the kernel's tables straight into the one host block that a single copy uploads, in
the layout ``assemble_chunks`` and ``assemble_rows`` read (kernels/assemble.cu: a padded row of
``MAX_NDIM`` per box). What is per source (its strides, size and pointer) is worked out once per
source, not once per box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .launch_checks import MAX_NDIM
from .launches import AssembleLaunch

if TYPE_CHECKING:
    from collections.abc import Sequence

Int64Array = npt.NDArray[np.int64]

#: the tables of the kernel, in the order of its arguments after the sources' pointers
TABLES = ("src_strides", "src_offsets", "src_steps", "dst_offsets", "extents")
#: bytes kept at the block's end for the kernel's fill value (boxes never read it: every box has
#: a source; the kernel takes a pointer all the same)
FILL_NBYTES = 16
_ITEMSIZES = (1, 2, 4, 8, 16)
#: the most bytes a source or output may hold: element offsets and sizes stay far from wrapping
_MAX_NBYTES = 2.0**62


@dataclass(frozen=True)
class BoxCopies:
    """Checked box copies, their kernel arguments packed in one host block.

    ``block`` is int64 words: ``out_strides`` (``MAX_NDIM``), then the five ``(nboxes, MAX_NDIM)``
    tables of :data:`TABLES`, then one pointer per box (written by the device that launches, see
    :meth:`set_pointers`), then the fill value's :data:`FILL_NBYTES` bytes (zeros).
    """

    out_shape: tuple[int, ...]
    itemsize: int
    #: ``(nboxes,)``: the source each box reads, an index into the sources passed beside
    source: npt.NDArray[np.intp]
    #: ``(nsources,)``: the bytes each source must hold (its shape's, C-contiguous)
    source_nbytes: Int64Array
    block: Int64Array

    @property
    def nboxes(self) -> int:
        return len(self.source)

    @property
    def ndim(self) -> int:
        return len(self.out_shape)

    @property
    def out_strides(self) -> Int64Array:
        return self.block[:MAX_NDIM]

    def table(self, name: str) -> Int64Array:
        """The ``(nboxes, MAX_NDIM)`` table ``name`` (one of :data:`TABLES`), a view of the block."""
        i = TABLES.index(name)
        n = self.nboxes * MAX_NDIM
        start = MAX_NDIM + i * n
        return self.block[start : start + n].reshape(self.nboxes, MAX_NDIM)

    @property
    def pointers(self) -> npt.NDArray[np.uint64]:
        start = MAX_NDIM + len(TABLES) * self.nboxes * MAX_NDIM
        return self.block[start : start + self.nboxes].view(np.uint64)

    def set_pointers(self, source_pointers: Sequence[int]) -> None:
        """Each box's source pointer, from one pointer per source."""
        self.pointers[:] = np.asarray(source_pointers, dtype=np.uint64)[self.source]

    def check_output(self, out: Any) -> None:
        """That ``out`` (a device array) is the C-contiguous output the boxes were checked for."""
        if not out.flags.c_contiguous:
            raise ValueError("assemble: the output must be C-contiguous")
        if tuple(out.shape) != self.out_shape or out.dtype.itemsize != self.itemsize:
            raise ValueError(
                f"assemble: an output of shape {tuple(out.shape)} and {out.dtype.itemsize}-byte items for boxes "
                f"into {self.out_shape} of {self.itemsize}-byte items"
            )

    def check_sources(self, source_nbytes: Sequence[int]) -> None:
        """That there is one source per index the boxes use, each of its shape's size (the
        bounds of the boxes were checked against those shapes)."""
        held = np.asarray(source_nbytes, dtype=np.int64).reshape(-1)
        if held.size != self.source_nbytes.size:
            raise ValueError(f"assemble: {held.size} sources for boxes of {self.source_nbytes.size}")
        bad = np.flatnonzero(held != self.source_nbytes)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"assemble: source {i} holds {int(held[i])} bytes, its shape needs {int(self.source_nbytes[i])}"
            )

    def launch(self) -> AssembleLaunch:
        """The same launch as an :class:`.launches.AssembleLaunch` (views of the block), for the
        NumPy model of the kernel; its ``source_offsets`` are 0 (the sources are passed beside)."""
        return AssembleLaunch(
            out_strides=self.out_strides,
            source_offsets=np.zeros(self.nboxes, dtype=np.int64),
            source_nbytes=self.source_nbytes[self.source],
            src_strides=self.table("src_strides"),
            src_offsets=self.table("src_offsets"),
            src_steps=self.table("src_steps"),
            dst_offsets=self.table("dst_offsets"),
            extents=self.table("extents"),
            fill_value=np.zeros(self.itemsize, dtype=np.uint8),
            nchunks=self.nboxes,
            ndim=self.ndim,
            itemsize=self.itemsize,
            swap_width=0,
        )


def _boxes_table(name: str, values: npt.ArrayLike, nboxes: int, nd: int) -> Int64Array:
    table = np.asarray(values, dtype=np.int64)
    if table.shape != (nboxes, nd):
        raise ValueError(f"assemble: {name} must have shape {(nboxes, nd)}, got {table.shape}")
    return table


def box_copies(
    out_shape: tuple[int, ...],
    itemsize: int,
    source_shapes: npt.ArrayLike,
    source: npt.ArrayLike,
    out_row: npt.ArrayLike,
    src_start: npt.ArrayLike,
    dst_start: npt.ArrayLike,
    extent: npt.ArrayLike,
) -> BoxCopies:
    """Box ``i`` of shape ``extent[i]``, from ``src_start[i]`` of source ``source[i]`` (a
    C-contiguous array of shape ``source_shapes[source[i]]``) to ``dst_start[i]`` of row
    ``out_row[i]`` of a C-contiguous output of ``out_shape`` (rows first), checked and packed.

    Raises ValueError for a box that would read outside its source or write outside its row, a
    source index or row out of range, a negative start or extent, a source or output too large
    for int64 offsets, or an unsupported itemsize or rank: nothing a launch of the result does
    can leave its buffers. Boxes that overlap in the output are written in no set order (a
    loader's pieces never do: they partition their crops).
    """
    run = BoxRun(out_shape[0] if out_shape else 0, source_shapes, source, out_row, src_start, dst_start, extent)
    return box_copies_of_runs(tuple(out_shape[1:]), itemsize, [run], len(out_shape))[0]


class BoxRun(NamedTuple):
    """The boxes of one launch for :func:`box_copies_of_runs`: into an output of ``rows`` rows,
    from sources of ``source_shapes``; the rest as :func:`box_copies` takes them."""

    rows: int
    source_shapes: npt.ArrayLike
    source: npt.ArrayLike
    out_row: npt.ArrayLike
    src_start: npt.ArrayLike
    dst_start: npt.ArrayLike
    extent: npt.ArrayLike


def box_copies_of_runs(
    row_shape: tuple[int, ...], itemsize: int, runs: Sequence[BoxRun], out_ndim: int | None = None
) -> list[BoxCopies]:
    """:func:`box_copies` of each of ``runs``, launches into outputs of rows of ``row_shape``,
    checked together: a loader plans the batches of a window at once, and the checks of one
    batch are mostly NumPy's per-call overhead. Errors name the run when there are several."""
    if itemsize not in _ITEMSIZES:
        raise ValueError(f"assemble: itemsize must be one of {_ITEMSIZES}, got {itemsize}")
    if not runs:
        return []
    ndim = len(row_shape) + 1 if out_ndim is None else out_ndim
    if not 2 <= ndim <= MAX_NDIM:
        raise ValueError(f"assemble: box copies need 2 to {MAX_NDIM} output dimensions, got {ndim}")
    nd = ndim - 1
    row_extent = np.asarray(row_shape, dtype=np.int64)
    if (row_extent < 0).any() or any(r.rows < 0 for r in runs):
        raise ValueError("assemble: an output shape is negative")
    shapes_of, index_of, row_of, src_of, dst_of, ext_of = [], [], [], [], [], []
    for r, run in enumerate(runs):
        where = f"run {r}: " if len(runs) > 1 else ""
        index = np.asarray(run.source, dtype=np.intp).reshape(-1)
        n = len(index)
        shapes = np.asarray(run.source_shapes, dtype=np.int64)
        if shapes.ndim != 2 or shapes.shape[1] != nd:
            raise ValueError(f"assemble: {where}source_shapes must have shape (nsources, {nd}), got {shapes.shape}")
        row = np.asarray(run.out_row, dtype=np.int64).reshape(-1)
        if row.shape != (n,):
            raise ValueError(f"assemble: {where}out_row must have {n} entries, got {row.size}")
        shapes_of.append(shapes)
        index_of.append(index)
        row_of.append(row)
        src_of.append(_boxes_table(f"{where}src_start", run.src_start, n, nd))
        dst_of.append(_boxes_table(f"{where}dst_start", run.dst_start, n, nd))
        ext_of.append(_boxes_table(f"{where}extent", run.extent, n, nd))
    counts = [len(i) for i in index_of]
    nsources = [len(s) for s in shapes_of]
    box_run = np.repeat(np.arange(len(runs)), counts)
    box_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    source_start = np.concatenate([[0], np.cumsum(nsources)]).astype(np.int64)
    shapes = np.concatenate(shapes_of) if len(runs) != 1 else shapes_of[0]
    if (shapes < 0).any():
        raise ValueError("assemble: a source shape is negative")
    # Sizes and strides are int64 products: none may wrap (a wrapped size lets a small buffer
    # pass for a large shape). Counted in floats, which do not wrap.
    biggest = max(
        float(np.prod(row_extent, dtype=np.float64)) * max((r.rows for r in runs), default=0),
        float(shapes.astype(np.float64).prod(axis=1).max(initial=0.0)),
    )
    if biggest * itemsize >= _MAX_NBYTES:
        raise ValueError(f"assemble: a source or output of {biggest:.3g} elements is too large")
    index = np.concatenate(index_of) if len(runs) != 1 else index_of[0]
    row = np.concatenate(row_of) if len(runs) != 1 else row_of[0]
    src = np.concatenate(src_of) if len(runs) != 1 else src_of[0]
    dst = np.concatenate(dst_of) if len(runs) != 1 else dst_of[0]
    ext = np.concatenate(ext_of) if len(runs) != 1 else ext_of[0]
    if len(index):
        _check_boxes(runs, row_shape, np.asarray(nsources)[box_run], np.asarray([r.rows for r in runs])[box_run],
                     box_run, box_start, index, row, src, dst, ext, shapes, index + source_start[box_run])  # fmt: skip
    # C-order element strides of each source (once per source); the row axis has stride 0.
    strides = np.ones_like(shapes)
    for axis in range(nd - 2, -1, -1):
        strides[:, axis] = strides[:, axis + 1] * shapes[:, axis + 1]
    box_strides = strides[index + source_start[box_run]] if len(index) else np.zeros((0, nd), np.int64)
    out_strides = np.cumprod((*row_shape, 1)[::-1])[::-1]
    nbytes = shapes.prod(axis=1) * itemsize
    result = []
    for r, run in enumerate(runs):
        b0, b1, k0, k1 = int(box_start[r]), int(box_start[r + 1]), int(source_start[r]), int(source_start[r + 1])
        n = b1 - b0
        block = np.zeros(MAX_NDIM + len(TABLES) * n * MAX_NDIM + n + FILL_NBYTES // 8, dtype=np.int64)
        block[:ndim] = out_strides
        copies = BoxCopies((run.rows, *row_shape), itemsize, index_of[r], nbytes[k0:k1], block)
        tables = block[MAX_NDIM : MAX_NDIM + len(TABLES) * n * MAX_NDIM].reshape(len(TABLES), n, MAX_NDIM)
        tables[TABLES.index("src_strides"), :, 1:ndim] = box_strides[b0:b1]
        tables[TABLES.index("src_offsets"), :, 1:ndim] = src[b0:b1]
        tables[TABLES.index("src_steps")] = 1
        tables[TABLES.index("dst_offsets"), :, 0] = row[b0:b1]
        tables[TABLES.index("dst_offsets"), :, 1:ndim] = dst[b0:b1]
        tables[TABLES.index("extents")] = 1
        tables[TABLES.index("extents"), :, 1:ndim] = ext[b0:b1]
        result.append(copies)
    return result


def _check_boxes(
    runs: Sequence[BoxRun],
    row_shape: tuple[int, ...],
    nsources: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    box_run: npt.NDArray[np.int64],
    box_start: npt.NDArray[np.int64],
    index: npt.NDArray[np.intp],
    row: npt.NDArray[np.int64],
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    ext: npt.NDArray[np.int64],
    shapes: npt.NDArray[np.int64],
    global_index: npt.NDArray[np.int64],
) -> None:
    """ValueError naming the first box (by its run's numbering) that names a source or row out
    of range, has a negative start or extent, or writes or reads outside its row or source."""

    def name(i: int) -> str:
        r = int(box_run[i])
        return f"{f'run {r}: ' if len(runs) > 1 else ''}box {i - int(box_start[r])}"

    if index.min() < 0 or (index >= nsources).any():
        i = int(np.argmax((index < 0) | (index >= nsources)))
        raise ValueError(f"assemble: {name(i)} names a source outside the {int(nsources[i])} given")
    if row.min() < 0 or (row >= rows).any():
        i = int(np.argmax((row < 0) | (row >= rows)))
        raise ValueError(f"assemble: {name(i)} writes outside the output: row {int(row[i])} of {int(rows[i])}")
    for what, table in (("src_start", src), ("dst_start", dst), ("extent", ext)):
        if table.min() < 0:
            raise ValueError(f"assemble: {what} must not be negative")
    # A box with an empty extent copies nothing, wherever it starts (as check_assemble).
    live = ext.min(axis=1) > 0
    # Compared without sums, which could wrap: start + extent <= size is extent <= size - start.
    writes_out = live & (ext > np.asarray(row_shape, dtype=np.int64) - dst).any(axis=1)
    if writes_out.any():
        i = int(np.argmax(writes_out))
        raise ValueError(
            f"assemble: {name(i)} ({ext[i].tolist()} to {dst[i].tolist()} of row {int(row[i])}) writes "
            f"outside the output of shape {(int(rows[i]), *row_shape)}"
        )
    box_shapes = shapes[global_index]
    reads_out = live & (ext > box_shapes - src).any(axis=1)
    if reads_out.any():
        i = int(np.argmax(reads_out))
        raise ValueError(
            f"assemble: {name(i)} ({ext[i].tolist()} from {src[i].tolist()}) reads outside its source "
            f"{int(index[i])} of shape {tuple(box_shapes[i].tolist())}"
        )


def source_facts(sources: Sequence[Any]) -> tuple[list[int], list[int]]:
    """The device pointer and byte size of each source (device arrays, C-contiguous, else
    ValueError)."""
    pointers, nbytes = [], []
    for s in sources:
        if not s.flags.c_contiguous:
            raise ValueError("assemble: every source must be C-contiguous")
        pointers.append(int(s.data.ptr))
        nbytes.append(int(s.nbytes))
    return pointers, nbytes


__all__ = ["FILL_NBYTES", "TABLES", "BoxCopies", "BoxRun", "box_copies", "box_copies_of_runs", "source_facts"]
