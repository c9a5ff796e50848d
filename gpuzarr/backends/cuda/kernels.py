"""The CUDA kernels of ``kernels/*.cu``: lazy loading through ``cupy.RawModule`` and checked launches.

Nothing here touches CUDA at import time. The first call that needs a kernel imports CuPy
(raising an ImportError that names the ``gpu`` extra when it is missing) and compiles that
kernel's source file with NVRTC through ``cupy.RawModule``; CuPy caches the compiled module per
device and on disk.

Every ``launch_*`` function checks sizes, offsets and alignment on the host first, with the pure
NumPy ``check_*`` functions of :mod:`.launch_checks`, so that corrupt input becomes a ``ValueError`` and never an
out-of-bounds device access. The launches are asynchronous on CuPy's current stream.
``kernel_reference`` holds a NumPy model of each kernel with the same arguments.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .box_copies import TABLES
from .launch_checks import MAX_NDIM, check_assemble, check_blocks, check_lz4, check_span_lengths, span_room

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

    from .box_copies import BoxCopies

BLOCK_THREADS = 256
MAX_GRID_Y = 65535
MAX_GRID_X = 65535

#: kernel family -> (source file in kernels/, extern "C" kernel names)
KERNEL_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "assemble": ("assemble.cu", ("assemble_chunks", "assemble_rows")),
    "shuffle": ("shuffle.cu", ("byte_unshuffle", "bit_unshuffle")),
    "crc32c": ("crc32c.cu", ("crc32c_batch", "crc32_batch")),
    "adler32": ("adler32.cu", ("adler32_batch",)),
    "lz4_check": ("lz4_check.cu", ("lz4_check_batch",)),
}
#: options given to NVRTC for every kernel file; the sources include no headers
NVRTC_OPTIONS = ("--std=c++17",)

GPU_EXTRA_HINT = 'install the gpu extra: pip install "gpuzarr[gpu]"'


def import_cupy() -> ModuleType:
    """Import CuPy, or raise an ImportError that says which extra provides it."""
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(f"gpuzarr's GPU kernels need CuPy, which is not installed; {GPU_EXTRA_HINT}") from exc
    module: ModuleType = cupy
    return module


def kernel_source_dir() -> Path:
    """The folder holding the ``.cu`` files: package data when installed, ``kernels/`` in a checkout."""
    package_root = Path(__file__).resolve().parents[2]
    for candidate in (package_root / "kernels", package_root.parent / "kernels"):
        if (candidate / "assemble.cu").is_file():
            return candidate
    raise FileNotFoundError(
        f"gpuzarr's CUDA kernel sources were not found in {package_root / 'kernels'} "
        f"or {package_root.parent / 'kernels'}"
    )


def kernel_source(family: str) -> str:
    """The CUDA C source of one kernel family (a key of ``KERNEL_FAMILIES``)."""
    if family not in KERNEL_FAMILIES:
        raise KeyError(f"unknown kernel family {family!r}; expected one of {sorted(KERNEL_FAMILIES)}")
    return (kernel_source_dir() / KERNEL_FAMILIES[family][0]).read_text(encoding="utf-8")


@functools.cache
def _raw_module(family: str) -> Any:
    cupy = import_cupy()
    return cupy.RawModule(code=kernel_source(family), options=NVRTC_OPTIONS, backend="nvrtc")


def get_kernel(name: str) -> Any:
    """The ``cupy.RawKernel`` called ``name`` (compiled on first use)."""
    for family, (_, names) in KERNEL_FAMILIES.items():
        if name in names:
            return _raw_module(family).get_function(name)
    raise KeyError(f"unknown kernel {name!r}")


# --- launches (need CuPy and a GPU) ------------------------------------------------------------


def _pointers(cupy: ModuleType, arrays: Sequence[Any | None]) -> Any:
    return cupy.asarray(_host_pointers(arrays))


def _host_pointers(arrays: Sequence[Any | None]) -> npt.NDArray[np.uint64]:
    """The device pointer of each array (0 for None), each distinct array asked once: a loader's
    batch passes hundreds of pieces of a hundred or so chunks."""
    known: dict[int, int] = {}
    pointers = []
    for a in arrays:
        if a is None:
            pointers.append(0)
            continue
        pointer = known.get(id(a))
        if pointer is None:
            pointer = known[id(a)] = a.data.ptr
        pointers.append(pointer)
    return np.array(pointers, dtype=np.uint64)


#: the alignment of each array in :func:`upload_together`'s one buffer (the widest element a
#: kernel table holds)
UPLOAD_ALIGNMENT = 8


def upload_together(xp: ModuleType, arrays: Sequence[npt.NDArray[Any]]) -> list[Any]:
    """Host arrays on the device with one host-to-device copy: device views of one buffer, each
    of its array's dtype and shape, each starting at a multiple of ``UPLOAD_ALIGNMENT`` bytes.

    A small copy from pageable memory costs about 20 us of host time on an H200, as much as
    the launch it feeds; an assemble launch has eight tables. ``xp`` is CuPy (NumPy in the
    tests of this packing)."""
    parts = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    starts, end = [], 0
    for part in parts:
        starts.append(end)
        end += -(-part.size // UPLOAD_ALIGNMENT) * UPLOAD_ALIGNMENT
    packed = np.zeros(max(end, UPLOAD_ALIGNMENT), dtype=np.uint8)
    for start, part in zip(starts, parts, strict=True):
        packed[start : start + part.size] = part
    device = xp.asarray(packed)
    return [
        device[start : start + part.size].view(a.dtype).reshape(a.shape)
        for a, start, part in zip(arrays, starts, parts, strict=True)
    ]


def _span_pointers(cupy: ModuleType, buffer: Any, offsets: Any) -> Any:
    """Device pointers to spans of ``buffer``, computed in NumPy as base + offsets (no CuPy view
    per span: thousands of Blosc blocks per batch)."""
    base = np.uint64(buffer.data.ptr)
    return cupy.asarray(base + np.asarray(offsets, dtype=np.int64).astype(np.uint64))


def _grid(work_items: int, rows: int, block: int) -> tuple[int, int, int]:
    x = max(1, min(-(-work_items // block), MAX_GRID_X))
    return (x, max(1, min(rows, MAX_GRID_Y)), 1)


def _check_alignment(kernel: str, arrays: Sequence[Any | None], itemsize: int) -> None:
    alignment = min(itemsize, 8)
    for i, a in enumerate(arrays):
        if a is not None and a.data.ptr % alignment:
            raise ValueError(f"{kernel}: buffer {i} is not aligned to {alignment} bytes")


#: the mean innermost extent from which ``assemble_rows`` (a warp per row, one division per
#: outer axis per row) is chosen over ``assemble_chunks`` (one division per axis per element)
ROWS_FROM_INNER = 16
WARP_THREADS = 32
MAX_BLOCK_THREADS = 1024
#: ``assemble_rows``' grid covers at least 1/ROWS_LOOP_LIMIT of the largest chunk's rows at once,
#: so that no chunk's rows loop more than that many times over the grid's warps
ROWS_LOOP_LIMIT = 8
ASSEMBLE_VARIANTS = ("items", "rows")


def assemble_kernel_and_grid(
    extents: npt.NDArray[np.int64], ndim: int, block: int = BLOCK_THREADS, variant: str | None = None
) -> tuple[str, tuple[int, int, int]]:
    """The assemble kernel for a launch of ``extents`` (the (nchunks, 8) table) and its grid.

    ``variant`` None picks ``assemble_rows`` when the copied rows (the innermost axis) hold
    ``ROWS_FROM_INNER`` elements or more on average, else ``assemble_chunks``; "items" and
    "rows" force one (the GPU tests run both on every geometry).
    """
    if variant is not None and variant not in ASSEMBLE_VARIANTS:
        raise ValueError(f"assemble: variant must be one of {ASSEMBLE_VARIANTS} or None, got {variant!r}")
    # assemble_rows takes 32 consecutive threads of a block for a warp: other block sizes would
    # leave elements unwritten (and assemble_chunks gains nothing from them).
    if block % WARP_THREADS or not WARP_THREADS <= block <= MAX_BLOCK_THREADS:
        raise ValueError(f"assemble: block must be a multiple of {WARP_THREADS} up to {MAX_BLOCK_THREADS}, got {block}")
    nchunks = len(extents)
    if variant is None:
        inner = float(extents[:, ndim - 1].mean()) if ndim > 0 and nchunks else 0.0
        variant = "rows" if inner >= ROWS_FROM_INNER else "items"
    if variant == "rows":
        rows = extents[:, : max(ndim - 1, 0)].prod(axis=1) if nchunks else np.zeros(1, np.int64)
        # Enough warps for the mean chunk's rows in one sweep (a loader's batch mixes pieces of
        # very different sizes: sizing by the largest would launch mostly idle blocks), and at
        # least a ROWS_LOOP_LIMIT-th of the largest chunk's rows.
        warps = max(-(-int(rows.sum()) // max(nchunks, 1)), -(-int(rows.max()) // ROWS_LOOP_LIMIT), 1)
        return "assemble_rows", _grid(warps * WARP_THREADS, nchunks, block)
    largest = int(extents[:, :ndim].prod(axis=1).max()) if nchunks else 1
    return "assemble_chunks", _grid(largest, nchunks, block)


def launch_assemble(
    out: Any,
    sources: Sequence[Any | None],
    src_strides: Any,
    src_offsets: Any,
    src_steps: Any,
    dst_offsets: Any,
    extents: Any,
    fill_value: bytes,
    *,
    out_strides: Sequence[int] | None = None,
    swap_width: int = 0,
    block: int = BLOCK_THREADS,
    variant: str | None = None,
) -> None:
    """Scatter decoded chunks into the CuPy array ``out`` with one launch of an assemble kernel
    (``assemble_rows`` or ``assemble_chunks``, see :func:`assemble_kernel_and_grid`; ``variant``
    forces one).

    ``sources`` are CuPy arrays (decoded chunk bytes, any dtype, C-contiguous) or ``None`` for a
    missing chunk; the per-chunk tables are (nchunks, ndim) integer array-likes in elements of
    ``out.dtype``. ``fill_value`` is the fill value's bytes in ``out``'s byte order.
    ``out_strides`` are ``out``'s element strides along each chunk axis (0 where an integer index
    drops the axis; ``out`` must then be C-contiguous); by default ``out``'s own strides, one per
    axis of ``out``.
    """
    cupy = import_cupy()
    itemsize = out.dtype.itemsize
    if out_strides is None:
        out_strides, out_nbytes = _own_strides(out)
    elif not out.flags.c_contiguous:
        raise ValueError("assemble: with out_strides given, the output must be C-contiguous")
    else:
        out_nbytes = out.nbytes
    if len(fill_value) != itemsize:
        raise ValueError(f"assemble: fill_value has {len(fill_value)} bytes, expected {itemsize}")
    ndim = len(out_strides)
    tables = check_assemble(
        out_nbytes,
        out_strides,
        [None if s is None else s.nbytes for s in sources],
        src_strides,
        src_offsets,
        src_steps,
        dst_offsets,
        extents,
        itemsize,
        swap_width,
    )
    kernel, grid = assemble_kernel_and_grid(tables[5], ndim, block, variant)
    if not sources or out.size == 0:
        return
    _check_alignment("assemble", [out, *sources], itemsize)
    out_table, strides, offsets, steps, dst, ext, pointers, fill = upload_together(
        cupy, [*tables, _host_pointers(sources), np.frombuffer(fill_value, dtype=np.uint8)]
    )
    get_kernel(kernel)(
        grid,
        (block,),
        (
            out,
            out_table,
            pointers,
            strides,
            offsets,
            steps,
            dst,
            ext,
            fill,
            np.int32(len(sources)),
            np.int32(ndim),
            np.int32(itemsize),
            np.int32(swap_width),
        ),
    )


def launch_box_copies(out: Any, copies: BoxCopies, *, block: int = BLOCK_THREADS, variant: str | None = None) -> None:
    """The checked box copies ``copies`` (:func:`.box_copies.box_copies`, its pointers set) into
    the CuPy array ``out``: one upload of its block and one launch of an assemble kernel (chosen
    as :func:`launch_assemble` chooses; ``variant`` forces one)."""
    cupy = import_cupy()
    copies.check_output(out)  # the boxes were checked against this shape only
    n, ndim = copies.nboxes, copies.ndim
    kernel, grid = assemble_kernel_and_grid(copies.table("extents"), ndim, block, variant)
    if n == 0 or out.size == 0:
        return
    device = cupy.asarray(copies.block)
    tables_start = MAX_NDIM
    rows = n * MAX_NDIM
    tables = [device[tables_start + i * rows : tables_start + (i + 1) * rows] for i in range(len(TABLES))]
    pointers_start = tables_start + len(TABLES) * rows
    get_kernel(kernel)(
        grid,
        (block,),
        (
            out,
            device[:MAX_NDIM],
            device[pointers_start : pointers_start + n],
            *tables,
            device[pointers_start + n :],
            np.int32(n),
            np.int32(ndim),
            np.int32(copies.itemsize),
            np.int32(0),
        ),
    )


def _own_strides(out: Any) -> tuple[list[int], int]:
    """``out``'s element strides and the bytes from its base pointer to its last element's end."""
    itemsize = out.dtype.itemsize
    out_strides = [s // itemsize for s in out.strides]
    if any(s * itemsize != t for s, t in zip(out_strides, out.strides)):
        raise ValueError(f"assemble: output strides {out.strides} are not multiples of {itemsize}")
    # The lowest address of `out` is its base pointer only when its strides are not negative.
    if any(s < 0 for s in out_strides):
        raise ValueError("assemble: the output must have non-negative strides")
    out_nbytes = (sum((n - 1) * s for n, s in zip(out.shape, out_strides)) + 1) * itemsize if out.size else 0
    return out_strides, out_nbytes


def launch_unshuffle(
    kernel: str,
    src: Sequence[Any],
    dst: Sequence[Any],
    nbytes: Any,
    typesizes: Any,
    *,
    partial_rule: int = 0,
    block: int = BLOCK_THREADS,
) -> None:
    """Run ``byte_unshuffle`` or ``bit_unshuffle`` over Blosc blocks (CuPy arrays, per block)."""
    _check_unshuffle_kernel(kernel)
    cupy = import_cupy()
    sizes, types = check_blocks(kernel, [s.nbytes for s in src], [d.nbytes for d in dst], nbytes, typesizes)
    _run_unshuffle(
        cupy, kernel, lambda: _pointers(cupy, src), lambda: _pointers(cupy, dst), sizes, types, partial_rule, block
    )


def launch_unshuffle_spans(
    kernel: str,
    buffer: Any,
    src_offsets: Sequence[int],
    dst_offsets: Sequence[int],
    nbytes: Sequence[int],
    typesizes: Sequence[int],
    partial_rule: int = 0,
    *,
    block: int = BLOCK_THREADS,
) -> None:
    """:func:`launch_unshuffle` between spans of one flat CuPy ``uint8`` buffer, given as offsets."""
    _check_unshuffle_kernel(kernel)
    cupy = import_cupy()
    size = int(buffer.nbytes)
    sizes, types = check_blocks(
        kernel, span_room(size, src_offsets, kernel), span_room(size, dst_offsets, kernel), nbytes, typesizes
    )
    _run_unshuffle(
        cupy,
        kernel,
        lambda: _span_pointers(cupy, buffer, src_offsets),
        lambda: _span_pointers(cupy, buffer, dst_offsets),
        sizes,
        types,
        partial_rule,
        block,
    )


def _check_unshuffle_kernel(kernel: str) -> None:
    if kernel not in ("byte_unshuffle", "bit_unshuffle"):
        raise ValueError(f"unshuffle: unknown kernel {kernel!r}")


def _run_unshuffle(
    cupy: ModuleType,
    kernel: str,
    src_pointers: Callable[[], Any],
    dst_pointers: Callable[[], Any],
    sizes: Any,
    types: Any,
    partial_rule: int,
    block: int,
) -> None:
    """The launch itself, once the blocks are checked (pointer tables made only when needed)."""
    if sizes.size == 0:
        return
    args: tuple[Any, ...] = (
        src_pointers(),
        dst_pointers(),
        cupy.asarray(sizes),
        cupy.asarray(types),
        np.int32(sizes.size),
    )
    if kernel == "bit_unshuffle":
        args += (np.int32(partial_rule),)
    get_kernel(kernel)(_grid(int(sizes.max()), sizes.size, block), (block,), args)


CHECKSUM_KERNELS = {"crc32c": "crc32c_batch", "crc32": "crc32_batch", "adler32": "adler32_batch"}


def launch_checksums(kind: str, buffers: Sequence[Any], sizes: Any, *, block: int = BLOCK_THREADS) -> Any:
    """CRC-32C, CRC-32 or Adler-32 (``kind``) of each CuPy buffer's first ``sizes[i]`` bytes;
    returns a CuPy ``uint32`` array."""
    _check_checksum_launch(kind, block)
    cupy = import_cupy()
    lengths = check_span_lengths([b.nbytes for b in buffers], sizes, kind)
    return _run_checksums(cupy, kind, lambda: _pointers(cupy, buffers), lengths, block)


def launch_checksum_spans(
    kind: str, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], *, block: int = BLOCK_THREADS
) -> Any:
    """:func:`launch_checksums` over spans of one flat CuPy ``uint8`` buffer, given as offsets;
    returns a CuPy ``uint32`` array (not yet on the host: read it after a synchronisation)."""
    _check_checksum_launch(kind, block)
    cupy = import_cupy()
    lengths = check_span_lengths(span_room(int(buffer.nbytes), offsets, kind), nbytes, kind)
    return _run_checksums(cupy, kind, lambda: _span_pointers(cupy, buffer, offsets), lengths, block)


LZ4_CHECK_THREADS = 128


def launch_lz4_check_spans(
    buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], decoded_nbytes: Sequence[int]
) -> Any:
    """``lz4_check_batch`` over raw LZ4 blocks at spans of one flat CuPy ``uint8`` buffer, each
    to decode to ``decoded_nbytes[i]`` bytes; returns a CuPy ``int64`` array of verdicts (-1: well
    formed; read it after a synchronisation)."""
    cupy = import_cupy()
    lengths, decoded = check_lz4(span_room(int(buffer.nbytes), offsets, "lz4_check"), nbytes, decoded_nbytes)
    verdicts = cupy.full(lengths.size, -1, dtype=cupy.int64)
    if lengths.size:
        threads = LZ4_CHECK_THREADS
        get_kernel("lz4_check_batch")(
            (min(-(-lengths.size // threads), MAX_GRID_X),),
            (threads,),
            (
                _span_pointers(cupy, buffer, offsets),
                cupy.asarray(lengths),
                cupy.asarray(decoded),
                verdicts,
                np.int32(lengths.size),
            ),
        )
    return verdicts


def _check_checksum_launch(kind: str, block: int) -> None:
    if kind not in CHECKSUM_KERNELS:
        raise ValueError(f"checksum kind must be one of {sorted(CHECKSUM_KERNELS)}, got {kind!r}")
    if not 32 <= block <= 1024:
        raise ValueError(f"{kind}: block must hold 32..1024 threads, got {block}")


def _run_checksums(cupy: ModuleType, kind: str, pointers: Callable[[], Any], lengths: Any, block: int) -> Any:
    sums = cupy.zeros(lengths.size, dtype=cupy.uint32)
    if lengths.size:
        get_kernel(CHECKSUM_KERNELS[kind])(
            (min(lengths.size, MAX_GRID_X),),
            (block,),
            (pointers(), cupy.asarray(lengths), sums, np.int32(lengths.size)),
        )
    return sums
