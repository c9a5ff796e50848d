"""Runs of small chunks, read and decoded with little Python a chunk.

A chunk of a few KiB decodes in a few microseconds, and the path that takes chunks of any size
(a task a chunk, the store's ``get_into`` with a bounded buffer, a decode that finds its own
scratch buffer, the checks a large chunk pays for) spent about 31 µs on each 2 KiB Blosc chunk
file of a whole read where TensorStore spends 12 (2 cores). Here the chunks of a run share one
:meth:`~gpuzarr.store.base.Store.value_reader` (a local store opens each directory once), one
decode buffer and one pipeline, and a chunk costs an open, an ``fstat``, a read, the decoder
and a copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ... import buffers
from ...metadata.chunk_grid import RegularChunkGrid
from .placement import is_direct, place_missing, spans_trailing_axes

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ...codecs.pipeline import CodecPipeline
    from ...layout import ArrayLayout
    from ...plan.selection import ChunkProjection
    from ...store.base import Buffer, Store

#: Chunks of at most this many decoded bytes are read in runs here. Above it the decoder's own
#: time hides the Python around it.
SMALL_CHUNK_NBYTES = 32 * 1024
#: Small zstd chunks stored in fewer bytes than this each (masks, labels, fields constant over
#: a chunk) are read and written on the calling thread alone: their codec runs at memory speed,
#: so the Python around each chunk is most of its time, and two threads would only hand the
#: GIL back and forth over it (``read._read_runs``, ``write._write_chunks``).
ALONE_STORED_NBYTES = 1024


def decodes_in_runs(pipeline: CodecPipeline) -> bool:
    """Whether chunks (or inner chunks) of ``pipeline`` are small and decode into a buffer of
    their bytes (:attr:`CodecPipeline.decodes_in_buffer`): :class:`ChunkPlacer` takes them."""
    return pipeline.spec.nbytes <= SMALL_CHUNK_NBYTES and pipeline.decodes_in_buffer


def reads_in_runs(layout: ArrayLayout) -> bool:
    """Whether the chunks of ``layout`` are unsharded, of one shape (a regular grid) and taken
    by :func:`decodes_in_runs`: :func:`read_run` reads them."""
    return (
        layout.sharding is None
        and isinstance(layout.metadata.chunk_grid, RegularChunkGrid)
        and decodes_in_runs(layout.chunk_pipeline)
    )


class ChunkPlacer:
    """Decodes whole chunks of one pipeline (:func:`decodes_in_runs`) into the places of a
    read's output that their projections name, one chunk after another on one thread: one
    decode buffer and the chunk array viewing it serve them all."""

    def __init__(self, pipeline: CodecPipeline, out: np.ndarray[Any, Any]) -> None:
        self.pipeline = pipeline
        self.out = out
        self.shape = pipeline.spec.shape
        self.buffer = buffers.scratch(pipeline.spec.nbytes, "decoded")
        self.decoded = pipeline.chunk_in(self.buffer)
        # Where no whole chunk can land contiguous in ``out`` (a 2-d grid's chunks, read
        # whole), no chunk is asked.
        self.may_be_direct = out.ndim != len(self.shape) or spans_trailing_axes(out.shape, self.shape)

    def place(self, raw: Buffer, key: str, targets: list[ChunkProjection]) -> None:
        """Decode ``raw`` (a whole stored chunk; ``key`` names it in errors) into every place
        ``targets`` name: straight into ``out`` where it lands there whole and contiguous."""
        out = self.out
        if self.may_be_direct and len(targets) == 1 and is_direct(out, targets[0], self.shape):
            # The trailing Ellipsis keeps the region a view where ``out`` is 0-d.
            region = out[(*targets[0].out_selection, Ellipsis)]
            stored = self.pipeline.decode_in(raw, key, region.reshape(-1).view(np.uint8))
            if stored is not None:  # uncompressed: the stored bytes, still to copy
                region[...] = stored
            return
        stored = self.pipeline.decode_in(raw, key, self.buffer)
        chunk = self.decoded if stored is None else stored
        for p in targets:
            out[p.out_selection] = chunk[p.chunk_selection]


def read_run(
    layout: ArrayLayout,
    store: Store,
    run: Sequence[list[ChunkProjection]],
    out: np.ndarray[Any, Any],
    refuse: Callable[[str, int], Exception],
) -> None:
    """Read the chunks of ``run`` (the projections of each chunk, all of ``layout``'s one
    pipeline: :func:`reads_in_runs`) one after the other into ``out``. A stored chunk of more
    bytes than its codecs ever write raises ``refuse(key, size)``; an absent one is the fill
    value (or ChunkNotFoundError where the layout says so); a corrupt one CorruptChunkError."""
    pipeline = layout.chunk_pipeline
    placer = ChunkPlacer(pipeline, out)
    with store.value_reader(pipeline.max_stored_nbytes, refuse) as read:
        for targets in run:
            key = layout.key(targets[0].chunk_coords)
            raw = read(key)
            if raw is None:
                place_missing(layout, key, targets, out)
            else:
                placer.place(raw, key, targets)
