"""Dask arrays whose blocks gpuzarr reads (:func:`to_dask`), and Dask arrays written into gpuzarr
arrays (:func:`store_dask`, :func:`from_dask`). See docs/dask.md. Reading lives in
:mod:`.dask_read`, writing in :mod:`.dask_write`; this module is the public face of both.

Reading: the graph is Dask's own ``da.from_array`` graph: one key holds the gpuzarr ``Array``
(store, path, metadata and options; no data, no open file, no CUDA object), and one task per
block calls ``Array.read`` on it with the block's slices. Graphs stay small and cheap to build
for 10**6 blocks, and a worker unpickles the Array once and reuses it (and the shard indexes it
has read) for all its blocks. Each worker resolves the Array's device again: CuPy blocks on a
worker with a GPU, NumPy blocks on the CPU.

Writing: Dask's ``da.store`` writes each block into its region (one task per block), through a
small proxy of the target array. Before that, the block boundaries are checked against the
target's stored chunks (its shards, when sharded): two blocks writing one stored object is a
read-modify-write race between tasks, which gpuzarr's locks and conditional writes settle on
one host or an object store, but not between hosts sharing a network file system, nor on a
store without locks. Like xarray's ``to_zarr``, writes with such blocks are refused
(:class:`~gpuzarr.errors.UnalignedChunksError`) unless ``safe_chunks=False``.
"""

from __future__ import annotations

try:
    import dask.array  # noqa: F401 - checked here, so that a missing Dask names the extra
except ImportError as exc:  # pragma: no cover - the test environment has dask
    raise ImportError(
        "gpuzarr's Dask integration (to_dask, from_dask, store_dask) needs dask[array]; install it "
        "with: pip install 'gpuzarr[dask]'"
    ) from exc

from .dask_read import to_dask
from .dask_write import from_dask, store_dask

__all__ = ["from_dask", "store_dask", "to_dask"]
