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
from typing import TYPE_CHECKING, Any

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
    source index or row out of range, a negative start or extent, or an unsupported itemsize or
    rank: nothing a launch of the result does can leave its buffers.
    """
    if itemsize not in _ITEMSIZES:
        raise ValueError(f"assemble: itemsize must be one of {_ITEMSIZES}, got {itemsize}")
    ndim = len(out_shape)
    if not 2 <= ndim <= MAX_NDIM:
        raise ValueError(f"assemble: box copies need 2 to {MAX_NDIM} output dimensions, got {ndim}")
    nd = ndim - 1
    rows, row_shape = out_shape[0], np.asarray(out_shape[1:], dtype=np.int64)
    if rows < 0 or (row_shape < 0).any():
        raise ValueError(f"assemble: output shape {out_shape} is negative")
    index = np.asarray(source, dtype=np.intp).reshape(-1)
    n = len(index)
    shapes = np.asarray(source_shapes, dtype=np.int64)
    if shapes.ndim != 2 or shapes.shape[1] != nd:
        raise ValueError(f"assemble: source_shapes must have shape (nsources, {nd}), got {shapes.shape}")
    if (shapes < 0).any():
        raise ValueError("assemble: a source shape is negative")
    row = np.asarray(out_row, dtype=np.int64).reshape(-1)
    src = _boxes_table("src_start", src_start, n, nd)
    dst = _boxes_table("dst_start", dst_start, n, nd)
    ext = _boxes_table("extent", extent, n, nd)
    if row.shape != (n,):
        raise ValueError(f"assemble: out_row must have {n} entries, got {row.size}")
    if n:
        if index.min() < 0 or index.max() >= len(shapes):
            raise ValueError(f"assemble: a box names a source outside the {len(shapes)} given")
        if row.min() < 0 or row.max() >= rows:
            i = int(np.argmax((row < 0) | (row >= rows)))
            raise ValueError(f"assemble: box {i} writes outside the output: row {int(row[i])} of {rows}")
        for name, table in (("src_start", src), ("dst_start", dst), ("extent", ext)):
            if table.min() < 0:
                raise ValueError(f"assemble: {name} must not be negative")
        # A box with an empty extent copies nothing, wherever it starts (as check_assemble).
        live = ext.min(axis=1) > 0
        writes_out = live & ((dst + ext) > row_shape).any(axis=1)
        if writes_out.any():
            i = int(np.argmax(writes_out))
            raise ValueError(
                f"assemble: box {i} ({ext[i].tolist()} to {dst[i].tolist()} of row {int(row[i])}) writes "
                f"outside the output of shape {tuple(out_shape)}"
            )
        reads_out = live & ((src + ext) > shapes[index]).any(axis=1)
        if reads_out.any():
            i, k = int(np.argmax(reads_out)), int(index[int(np.argmax(reads_out))])
            raise ValueError(
                f"assemble: box {i} ({ext[i].tolist()} from {src[i].tolist()}) reads outside its source {k} "
                f"of shape {tuple(shapes[k].tolist())}"
            )
    # C-order element strides of each source (once per source); the row axis has stride 0.
    strides = np.ones_like(shapes)
    for axis in range(nd - 2, -1, -1):
        strides[:, axis] = strides[:, axis + 1] * shapes[:, axis + 1]
    words = MAX_NDIM + len(TABLES) * n * MAX_NDIM + n + FILL_NBYTES // 8
    block = np.zeros(words, dtype=np.int64)
    block[:ndim] = np.cumprod((*out_shape[1:], 1)[::-1])[::-1]
    copies = BoxCopies(tuple(out_shape), itemsize, index, shapes.prod(axis=1) * itemsize, block)
    copies.table("src_strides")[:, 1:ndim] = strides[index]
    copies.table("src_offsets")[:, 1:ndim] = src
    copies.table("src_steps")[:] = 1
    dst_table = copies.table("dst_offsets")
    dst_table[:, 0] = row
    dst_table[:, 1:ndim] = dst
    ext_table = copies.table("extents")
    ext_table[:] = 1
    ext_table[:, 1:ndim] = ext
    return copies


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


__all__ = ["FILL_NBYTES", "TABLES", "BoxCopies", "box_copies", "source_facts"]
