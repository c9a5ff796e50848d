"""Each CUDA kernel on random data against its NumPy model (kernel_reference).

Outputs are poisoned with 0xAB before each launch so that an element the kernel fails to write
shows up. Skipped without a usable GPU (tests/conftest.py).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from gpuzarr.backends.cuda import kernel_reference as ref
from gpuzarr.backends.cuda import kernels, launch_checks

from ..kernels.assemble_geometry import random_chunk_geometry

pytestmark = pytest.mark.gpu

POISON = 0xAB


@pytest.fixture
def cp() -> Any:
    return kernels.import_cupy()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("variant", ["items", "rows"])
@pytest.mark.parametrize(("ndim", "most"), [(1, 6), (2, 6), (3, 6), (5, 6), (8, 6), (1, 100), (2, 80), (3, 40)])
@pytest.mark.parametrize(
    ("dtype", "big_endian"),
    [("u1", False), ("<u2", True), ("<f4", False), ("<f8", True), ("<c8", True), ("<c16", True)],
)
def test_assemble_chunks(
    cp: Any, rng: np.random.Generator, ndim: int, most: int, dtype: str, big_endian: bool, variant: str
) -> None:
    """Both assemble kernels (one thread per element; one warp per row) on the same geometries,
    short rows and rows longer than a warp."""
    native = np.dtype(dtype)
    itemsize = native.itemsize
    geometry = random_chunk_geometry(rng, ndim, nchunks=int(rng.integers(1, 40)), most=most)
    host_sources: list[np.ndarray | None] = []
    strides = []
    for c, shape in enumerate(geometry["chunk_shapes"]):
        order = rng.permutation(ndim)
        stored = rng.integers(0, 256, int(np.prod(shape)) * itemsize, dtype=np.uint8)
        stored_shape = [int(shape[a]) for a in order]
        stored_strides = np.cumprod([1, *stored_shape[::-1]])[:-1][::-1]
        strides.append([int(stored_strides[list(order).index(d)]) for d in range(ndim)])
        host_sources.append(None if c % 4 == 3 else stored)
    swap_width = (itemsize // 2 if native.kind == "c" else itemsize) if big_endian else 0
    fill = rng.integers(0, 256, itemsize, dtype=np.uint8)

    out = cp.full(geometry["out_shape"], 0, dtype=native)
    out.view(cp.uint8)[...] = POISON
    device_sources = [None if s is None else cp.asarray(s) for s in host_sources]
    kernels.launch_assemble(
        out,
        device_sources,
        strides,
        geometry["offsets"],
        geometry["steps"],
        geometry["dst"],
        geometry["extents"],
        fill.tobytes(),
        swap_width=swap_width,
        variant=variant,
    )

    expected = np.full(out.nbytes, POISON, np.uint8)
    tables = launch_checks.check_assemble(
        expected.nbytes,
        [s // itemsize for s in out.strides],
        [None if s is None else s.nbytes for s in host_sources],
        strides,
        geometry["offsets"],
        geometry["steps"],
        geometry["dst"],
        geometry["extents"],
        itemsize,
        swap_width,
    )
    ref.assemble_chunks(
        expected, tables[0], host_sources, *tables[1:], fill, len(host_sources), ndim, itemsize, swap_width
    )
    np.testing.assert_array_equal(cp.asnumpy(out).reshape(-1).view(np.uint8), expected)


@pytest.mark.parametrize("variant", ["items", "rows"])
def test_assemble_into_a_strided_output(cp: Any, rng: np.random.Generator, variant: str) -> None:
    # A transposed (Fortran-ordered) output view of a larger array.
    base = cp.full((9, 12), 0, dtype=cp.float32)
    base.view(cp.uint8)[...] = POISON
    out = base[1:7, 2:10].T  # shape (8, 6), strides (4, 48)
    chunk = rng.standard_normal((8, 6)).astype("<f4")
    kernels.launch_assemble(
        out,
        [cp.asarray(chunk.reshape(-1).view(np.uint8))],
        [[6, 1]],
        [[0, 0]],
        [[1, 1]],
        [[0, 0]],
        [[8, 6]],
        b"\0" * 4,
        variant=variant,
    )
    np.testing.assert_array_equal(cp.asnumpy(out), chunk)
    untouched = np.ones((9, 12), bool)
    untouched[1:7, 2:10] = False
    assert (cp.asnumpy(base).view(np.uint8).reshape(9, 12, 4)[untouched] == POISON).all()


@pytest.mark.parametrize("kernel", ["byte_unshuffle", "bit_unshuffle"])
@pytest.mark.parametrize("partial_rule", [0, 1])
def test_unshuffle(cp: Any, rng: np.random.Generator, kernel: str, partial_rule: int) -> None:
    typesizes = rng.choice([1, 2, 3, 4, 8, 16, 17], size=60).astype(np.int32)
    nbytes = np.array([int(rng.integers(0, 70_000)) for _ in typesizes], np.int64)
    nbytes[:4] = [0, 1, 8 * 16, 8 * 16 + 5]
    host_src = [rng.integers(0, 256, n, dtype=np.uint8) for n in nbytes]
    src = [cp.asarray(s) for s in host_src]
    dst = [cp.full(int(n), POISON, dtype=cp.uint8) for n in nbytes]
    kernels.launch_unshuffle(kernel, src, dst, nbytes, typesizes, partial_rule=partial_rule)
    expected = [np.full(int(n), POISON, np.uint8) for n in nbytes]
    if kernel == "byte_unshuffle":
        ref.byte_unshuffle(host_src, expected, nbytes, typesizes, len(expected))
    else:
        ref.bit_unshuffle(host_src, expected, nbytes, typesizes, len(expected), partial_rule)
    for got, want in zip(dst, expected):
        np.testing.assert_array_equal(cp.asnumpy(got), want)


@pytest.mark.parametrize("block", [32, 96, 256, 1024])
def test_crc32c(cp: Any, rng: np.random.Generator, block: int) -> None:
    sizes = np.array([0, 1, 7, 8, 9, 255, 4097, 1 << 20, *rng.integers(0, 200_000, 30)], np.int64)
    host = [rng.integers(0, 256, int(n) + 3, dtype=np.uint8) for n in sizes]  # 3 bytes past the size
    crcs = kernels.launch_checksums("crc32c", [cp.asarray(h) for h in host], sizes, block=block)
    expected = np.zeros(sizes.size, np.uint32)
    ref.crc32c_batch(host, sizes, expected, sizes.size, block_threads=block)
    np.testing.assert_array_equal(cp.asnumpy(crcs), expected)


@pytest.mark.parametrize("kind", ["crc32", "adler32"])
@pytest.mark.parametrize("block", [32, 96, 256, 1024])
def test_crc32_and_adler32(cp: Any, rng: np.random.Generator, kind: str, block: int) -> None:
    sizes = np.array([0, 1, 7, 8, 9, 255, 4097, 1 << 20, *rng.integers(0, 200_000, 30)], np.int64)
    host = [rng.integers(0, 256, int(n) + 3, dtype=np.uint8) for n in sizes]  # 3 bytes past the size
    sums = kernels.launch_checksums(kind, [cp.asarray(h) for h in host], sizes, block=block)
    expected = np.zeros(sizes.size, np.uint32)
    model = ref.crc32_batch if kind == "crc32" else ref.adler32_batch
    model(host, sizes, expected, sizes.size, block_threads=block)
    np.testing.assert_array_equal(cp.asnumpy(sums), expected)
    fn = zlib.crc32 if kind == "crc32" else zlib.adler32
    assert cp.asnumpy(sums).tolist() == [fn(h[: int(n)].tobytes()) for h, n in zip(host, sizes)]


def _pack(parts: list[npt.NDArray[np.uint8]], gap: int = 5) -> tuple[npt.NDArray[np.uint8], list[int]]:
    """The parts laid out in one buffer with ``gap`` poison bytes between them, and their offsets."""
    offsets, at = [], 0
    for p in parts:
        offsets.append(at)
        at += p.size + gap
    flat = np.full(max(at, 1), POISON, np.uint8)
    for o, p in zip(offsets, parts):
        flat[o : o + p.size] = p
    return flat, offsets


@pytest.mark.parametrize("kernel", ["byte_unshuffle", "bit_unshuffle"])
def test_unshuffle_spans_matches_the_per_array_launch(cp: Any, rng: np.random.Generator, kernel: str) -> None:
    typesizes = rng.choice([1, 2, 4, 8, 16], size=40).astype(np.int32)
    nbytes = np.array([int(rng.integers(0, 20_000)) for _ in typesizes], np.int64)
    host_src = [rng.integers(0, 256, n, dtype=np.uint8) for n in nbytes]
    packed, src_offsets = _pack(host_src)
    dst_offsets = [packed.size + o for o in src_offsets]
    buffer = cp.asarray(np.concatenate([packed, np.full(packed.size, POISON, np.uint8)]))
    kernels.launch_unshuffle_spans(kernel, buffer, src_offsets, dst_offsets, nbytes, typesizes, 0)
    expected = [np.full(int(n), POISON, np.uint8) for n in nbytes]
    if kernel == "byte_unshuffle":
        ref.byte_unshuffle(host_src, expected, nbytes, typesizes, len(expected))
    else:
        ref.bit_unshuffle(host_src, expected, nbytes, typesizes, len(expected), 0)
    got = cp.asnumpy(buffer)
    for o, n, want in zip(dst_offsets, nbytes, expected):
        np.testing.assert_array_equal(got[o : o + int(n)], want)


@pytest.mark.parametrize("kind", ["crc32", "adler32", "crc32c"])
def test_checksum_spans_match_zlib_and_the_model(cp: Any, rng: np.random.Generator, kind: str) -> None:
    sizes = np.array([0, 1, 9, 4097, *rng.integers(0, 100_000, 20)], np.int64)
    parts = [rng.integers(0, 256, int(n), dtype=np.uint8) for n in sizes]
    packed, offsets = _pack(parts)
    sums = cp.asnumpy(kernels.launch_checksum_spans(kind, cp.asarray(packed), offsets, sizes))
    expected = np.zeros(sizes.size, np.uint32)
    model = {"crc32": ref.crc32_batch, "adler32": ref.adler32_batch, "crc32c": ref.crc32c_batch}[kind]
    model(parts, sizes, expected, sizes.size, block_threads=kernels.BLOCK_THREADS)
    np.testing.assert_array_equal(sums, expected)


def test_lz4_check_matches_the_model(cp: Any, rng: np.random.Generator) -> None:
    from numcodecs import LZ4

    payloads = [b"", b"x", bytes(1 << 20), rng.integers(0, 256, 70_000, dtype=np.uint8).tobytes()]
    payloads += [(np.arange(int(n)) // 7 % 251).astype("<u2").tobytes() for n in rng.integers(10, 100_000, 12)]
    blocks = [np.frombuffer(bytes(LZ4().encode(p))[4:], np.uint8) for p in payloads]
    decoded = [len(p) for p in payloads]
    # Each well-formed block, then spoilt copies: truncated, a wrong size, random bytes changed.
    for block, size in list(zip(blocks, decoded))[:8]:
        blocks.append(block[: block.size // 2])
        decoded.append(size)
        blocks.append(block)
        decoded.append(size + 1)
        spoilt = block.copy()
        spoilt[rng.integers(0, max(spoilt.size, 1), 3) % max(spoilt.size, 1)] = rng.integers(0, 256, 3, dtype=np.uint8)
        blocks.append(spoilt)
        decoded.append(size)
    packed, offsets = _pack(blocks)
    sizes = np.array([b.size for b in blocks], np.int64)
    got = cp.asnumpy(kernels.launch_lz4_check_spans(cp.asarray(packed), offsets, sizes, decoded))
    expected = np.zeros(len(blocks), np.int64)
    ref.lz4_check_batch(blocks, sizes, np.array(decoded, np.int64), expected, len(blocks))
    np.testing.assert_array_equal(got, expected)
    assert (got[: len(payloads)] == -1).all() and (got[len(payloads) :: 3][:8] >= 0).all()


@pytest.mark.parametrize("ndim", [1, 3, 4])
def test_box_copies_from_separate_arrays(cp: Any, rng: np.random.Generator, ndim: int) -> None:
    """``CudaDevice.assemble_boxes``: the loader's cached batches, one launch from many arrays."""
    from gpuzarr.backends.cuda.box_copies import box_copies
    from gpuzarr.backends.cuda.cupy_device import CudaDevice

    rows, nboxes = 16, 12
    row_shape = tuple(int(n) for n in rng.integers(3, 9, size=ndim))
    shapes = rng.integers(1, 7, size=(nboxes, ndim))
    extent = np.minimum(rng.integers(1, 7, size=(nboxes, ndim)), np.minimum(shapes, row_shape))
    src_start = rng.integers(0, shapes - extent + 1)
    dst_start = rng.integers(0, np.asarray(row_shape) - extent + 1)
    row = rng.permutation(rows)[:nboxes]
    host = [rng.integers(0, 1 << 30, size=tuple(s), dtype=np.int32) for s in shapes.tolist()]
    expected = np.full((rows, *row_shape), -1, dtype=np.int32)
    for i, source in enumerate(host):
        src = tuple(slice(s, s + e) for s, e in zip(src_start[i], extent[i], strict=True))
        dst = tuple(slice(d, d + e) for d, e in zip(dst_start[i], extent[i], strict=True))
        expected[(int(row[i]), *dst)] = source[src]
    out = cp.full(expected.shape, -1, dtype=cp.int32)
    copies = box_copies(expected.shape, 4, shapes, np.arange(nboxes), row, src_start, dst_start, extent)
    device = CudaDevice(0)
    with device.activate():
        device.assemble_boxes(out, [cp.asarray(h) for h in host], copies)
    np.testing.assert_array_equal(cp.asnumpy(out), expected)


@pytest.mark.parametrize("variant", ["items", "rows"])
def test_box_copies_with_either_kernel(cp: Any, rng: np.random.Generator, variant: str) -> None:
    """``kernels.launch_box_copies`` with each assemble kernel forced: sources shared by several
    boxes, the tables and pointers uploaded in one block."""
    from gpuzarr.backends.cuda.box_copies import box_copies, source_facts

    rows, nboxes, nsources = 12, 20, 6
    row_shape = (5, 7, 33)
    shapes = rng.integers(1, 40, size=(nsources, 3))
    source = rng.integers(0, nsources, size=nboxes)
    extent = np.minimum(rng.integers(1, 40, size=(nboxes, 3)), np.minimum(shapes[source], row_shape))
    src_start = rng.integers(0, shapes[source] - extent + 1)
    dst_start = rng.integers(0, np.asarray(row_shape) - extent + 1)
    row = rng.integers(0, rows, size=nboxes)
    host = [rng.integers(0, 1 << 15, size=tuple(s), dtype=np.uint16) for s in shapes.tolist()]
    expected = np.zeros((rows, *row_shape), dtype=np.uint16)
    for i, k in enumerate(source.tolist()):  # boxes may overlap: the last one written wins on the host
        src = tuple(slice(a, a + e) for a, e in zip(src_start[i], extent[i], strict=True))
        dst = tuple(slice(a, a + e) for a, e in zip(dst_start[i], extent[i], strict=True))
        expected[(int(row[i]), *dst)] = host[k][src]
    # Only boxes that do not overlap are compared: which of two overlapping boxes lands last on
    # the device is not defined.
    covered = np.zeros(expected.shape, dtype=np.int32)
    for i in range(nboxes):
        dst = tuple(slice(a, a + e) for a, e in zip(dst_start[i], extent[i], strict=True))
        covered[(int(row[i]), *dst)] += 1
    copies = box_copies((rows, *row_shape), 2, shapes, source, row, src_start, dst_start, extent)
    sources = [cp.asarray(h) for h in host]
    copies.set_pointers(source_facts(sources)[0])
    out = cp.zeros(expected.shape, dtype=cp.uint16)
    kernels.launch_box_copies(out, copies, variant=variant)
    once = covered == 1
    np.testing.assert_array_equal(cp.asnumpy(out)[once], expected[once])
    assert (cp.asnumpy(out)[covered == 0] == 0).all()


def test_box_copies_of_a_loader_batch(cp: Any, rng: np.random.Generator) -> None:
    """A loader's batch: 32 random 64^3 crops of a 320^3 uint16 volume put together from its
    64^3 chunks in one launch (the row kernel), equal to NumPy slicing."""
    from gpuzarr.backends.cuda.box_copies import box_copies
    from gpuzarr.backends.cuda.cupy_device import CudaDevice
    from gpuzarr.loader.pieces import crop_pieces

    volume = rng.integers(0, 1 << 16, size=(320, 320, 320), dtype=np.uint16)
    origins = rng.integers(0, 320 - 64 + 1, size=(32, 3))
    pieces = crop_pieces(origins, (64, 64, 64), (64, 64, 64), volume.shape)
    chunks = [
        cp.asarray(volume[tuple(slice(int(k) * 64, int(k) * 64 + 64) for k in coords)]) for coords in pieces.chunks
    ]
    copies = box_copies(
        (32, 64, 64, 64), 2, pieces.chunk_shapes, pieces.chunk, pieces.crop, pieces.src_start, pieces.dst_start,
        pieces.extent,
    )  # fmt: skip
    assert kernels.assemble_kernel_and_grid(copies.table("extents"), copies.ndim)[0] == "assemble_rows"
    out = cp.full((32, 64, 64, 64), 0xABAB, dtype=cp.uint16)
    device = CudaDevice(0)
    with device.activate():
        device.assemble_boxes(out, chunks, copies)
    expected = np.stack([volume[tuple(slice(int(o), int(o) + 64) for o in origin)] for origin in origins])
    np.testing.assert_array_equal(cp.asnumpy(out), expected)
