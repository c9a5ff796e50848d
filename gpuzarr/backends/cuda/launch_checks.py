"""Host-side checks of every kernel launch: pure NumPy, no CUDA.

Each ``check_*`` function validates the arguments of one kernel of ``kernels/*.cu`` (sizes,
offsets, strides, extents) so that corrupt input becomes a ``ValueError`` and never an
out-of-bounds device access. The launchers of :mod:`.kernels` call them, and ``bind`` calls them
on the batch it binds before any device sees it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Sequence

#: the most dimensions assemble.cu's tables hold
MAX_NDIM = 8

Int64Table = npt.NDArray[np.int64]


def _table(name: str, values: Any, rows: int, ndim: int, pad: int) -> Int64Table:
    """An int64 (rows, 8) table from a (rows, ndim) array-like, padded with ``pad``."""
    array = np.asarray(values, dtype=np.int64)
    if array.shape != (rows, ndim):
        raise ValueError(f"{name}: expected shape {(rows, ndim)}, got {array.shape}")
    table = np.full((rows, MAX_NDIM), pad, dtype=np.int64)
    table[:, :ndim] = array
    return table


#: the largest element index the int64 spans below may reach before they could wrap
_MAX_INDEX = 2.0**62


def _check_no_wrap(
    out_table: Int64Table, strides: Int64Table, offsets: Int64Table, steps: Int64Table, dst: Int64Table, ext: Int64Table
) -> None:
    """ValueError where a span's int64 sums of products could wrap (a wrapped span can look in
    bounds): the sums of the products' magnitudes, counted in floats, bound every partial sum."""
    reach = (ext - 1).astype(np.float64)
    out_f = out_table.astype(np.float64)
    src_f = strides.astype(np.float64)
    sums = (
        np.abs(dst * out_f).sum(axis=1) + np.abs(reach * out_f).sum(axis=1),
        np.abs(offsets * src_f).sum(axis=1) + np.abs(reach * src_f * steps).sum(axis=1),
    )
    for what, total in zip(("output", "source"), sums, strict=True):
        if total.size and total.max() >= _MAX_INDEX:
            c = int(np.argmax(total))
            raise ValueError(f"assemble: chunk {c}'s {what} offsets, strides and extents reach past 64-bit indices")


def _span(base: npt.NDArray[np.int64], extents: Int64Table, strides: Int64Table) -> tuple[Any, Any]:
    """Lowest and highest element index touched by each row's strided region."""
    reach = (extents - 1) * strides
    low = base + np.where(reach < 0, reach, 0).sum(axis=1)
    high = base + np.where(reach > 0, reach, 0).sum(axis=1)
    return low, high


def check_assemble(
    out_nbytes: int,
    out_strides: Sequence[int],
    source_nbytes: Sequence[int | None],
    src_strides: Any,
    src_offsets: Any,
    src_steps: Any,
    dst_offsets: Any,
    extents: Any,
    itemsize: int,
    swap_width: int,
) -> tuple[Int64Table, ...]:
    """Validate the geometry of an ``assemble_chunks`` launch; return the padded (n, 8) tables.

    Raises ValueError when any element read or written would fall outside its buffer, when a
    step or extent is negative, or when itemsize/swap_width are not supported. Returns
    ``(out_strides[8], src_strides, src_offsets, src_steps, dst_offsets, extents)``.
    """
    if itemsize not in (1, 2, 4, 8, 16):
        raise ValueError(f"assemble: itemsize must be 1, 2, 4, 8 or 16, got {itemsize}")
    if swap_width > 1 and (swap_width not in (2, 4, 8, 16) or itemsize % swap_width):
        raise ValueError(f"assemble: swap_width {swap_width} does not divide itemsize {itemsize}")
    ndim = len(out_strides)
    if ndim > MAX_NDIM:
        raise ValueError(f"assemble: at most {MAX_NDIM} dimensions, got {ndim}")
    n = len(source_nbytes)
    out_table = _table("out_strides", [list(out_strides)], 1, ndim, 0)
    strides = _table("src_strides", src_strides, n, ndim, 0)
    offsets = _table("src_offsets", src_offsets, n, ndim, 0)
    steps = _table("src_steps", src_steps, n, ndim, 1)
    dst = _table("dst_offsets", dst_offsets, n, ndim, 0)
    ext = _table("extents", extents, n, ndim, 1)
    for name, table in (("src_offsets", offsets), ("dst_offsets", dst), ("extents", ext)):
        if (table < 0).any():
            raise ValueError(f"assemble: {name} must not be negative, got {table[:, :ndim].tolist()}")
    if (steps < 1).any():
        raise ValueError(f"assemble: src_steps must be >= 1, got {steps[:, :ndim].tolist()}")
    _check_no_wrap(out_table, strides, offsets, steps, dst, ext)
    live = ext.prod(axis=1) > 0
    out_low, out_high = _span((dst * out_table).sum(axis=1), ext, np.broadcast_to(out_table, ext.shape))
    bad = live & ((out_low < 0) | ((out_high + 1) * itemsize > out_nbytes))
    if bad.any():
        c = int(np.argmax(bad))
        raise ValueError(
            f"assemble: chunk {c} writes output elements {int(out_low[c])}..{int(out_high[c])}, "
            f"outside the output of {out_nbytes // itemsize} elements"
        )
    src_low, src_high = _span((offsets * strides).sum(axis=1), ext, strides * steps)
    # Vectorised (a loader's batch has hundreds of pieces); None (a missing chunk) reads nothing.
    held = np.array([-1 if n is None else n for n in source_nbytes], dtype=np.int64).reshape(-1)
    bad = live & (held >= 0) & ((src_low < 0) | ((src_high + 1) * itemsize > held))
    if bad.any():
        c = int(np.argmax(bad))
        raise ValueError(
            f"assemble: chunk {c} reads elements {int(src_low[c])}..{int(src_high[c])}, "
            f"outside its decoded buffer of {int(held[c]) // itemsize} elements"
        )
    return out_table[0], strides, offsets, steps, dst, ext


def check_blocks(
    kernel: str, src_nbytes: Sequence[int] | Any, dst_nbytes: Sequence[int] | Any, nbytes: Any, typesizes: Any
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """Validate the per-block arguments of ``byte_unshuffle``/``bit_unshuffle`` (``src_nbytes``
    and ``dst_nbytes``: the bytes each source and destination holds). Vectorised: a batch holds
    thousands of Blosc blocks."""
    sizes = np.asarray(nbytes, dtype=np.int64).reshape(-1)
    types = np.asarray(typesizes, dtype=np.int32).reshape(-1)
    src = np.asarray(src_nbytes, dtype=np.int64).reshape(-1)
    dst = np.asarray(dst_nbytes, dtype=np.int64).reshape(-1)
    if not (src.size == dst.size == sizes.size == types.size):
        raise ValueError(
            f"{kernel}: got {src.size} sources, {dst.size} destinations, {sizes.size} sizes and {types.size} typesizes"
        )
    if ((types < 1) | (types > 255)).any():
        raise ValueError(f"{kernel}: typesizes must be in 1..255, got {types.tolist()}")
    bad = np.flatnonzero((sizes < 0) | (sizes > src) | (sizes > dst))
    if bad.size:
        b = int(bad[0])
        raise ValueError(
            f"{kernel}: block {b} has {int(sizes[b])} bytes; its source holds {int(src[b])} "
            f"and its destination {int(dst[b])}"
        )
    return sizes, types


def check_span_lengths(buffer_nbytes: Sequence[int] | Any, sizes: Any, name: str = "crc32c") -> npt.NDArray[np.int64]:
    """Validate the spans a kernel reads one of per buffer (``crc32c_batch``, ``crc32_batch``,
    ``adler32_batch``, and the blocks of ``lz4_check_batch``): each of ``sizes`` within what its
    buffer holds (``buffer_nbytes``); ``name`` names the launch in the error."""
    lengths = np.asarray(sizes, dtype=np.int64).reshape(-1)
    held = np.asarray(buffer_nbytes, dtype=np.int64).reshape(-1)
    if lengths.size != held.size:
        raise ValueError(f"{name}: got {held.size} buffers and {lengths.size} sizes")
    bad = np.flatnonzero((lengths < 0) | (lengths > held))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"{name}: buffer {b} is {int(held[b])} bytes long, size says {int(lengths[b])}")
    return lengths


def check_lz4(
    buffer_nbytes: Sequence[int] | Any, sizes: Any, decoded_sizes: Any
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Validate an ``lz4_check_batch`` launch: the blocks' sizes (:func:`check_span_lengths`)
    and one decoded size (>= 0) per block; returns both as int64 arrays."""
    lengths = check_span_lengths(buffer_nbytes, sizes, "lz4_check")
    decoded = np.asarray(decoded_sizes, dtype=np.int64).reshape(-1)
    if decoded.size != lengths.size:
        raise ValueError(f"lz4_check: got {lengths.size} blocks and {decoded.size} decoded sizes")
    bad = np.flatnonzero(decoded < 0)
    if bad.size:
        raise ValueError(f"lz4_check: block {int(bad[0])} has decoded size {int(decoded[bad[0]])}")
    return lengths, decoded


def span_room(buffer_nbytes: int, offsets: Sequence[int] | Any, name: str) -> npt.NDArray[np.int64]:
    """The bytes from each offset to the end of a ``buffer_nbytes``-byte buffer, for the checks
    above; an offset outside the buffer raises."""
    start = np.asarray(offsets, dtype=np.int64).reshape(-1)
    bad = np.flatnonzero((start < 0) | (start > buffer_nbytes))
    if bad.size:
        raise ValueError(f"{name}: offset {int(start[bad[0]])} lies outside the {buffer_nbytes}-byte buffer")
    return buffer_nbytes - start


__all__ = ["MAX_NDIM", "check_assemble", "check_blocks", "check_lz4", "check_span_lengths", "span_room"]
