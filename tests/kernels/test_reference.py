"""The NumPy models of the CUDA kernels against independent ground truth.

Un-shuffles are checked on real Blosc frames written by numcodecs (c-blosc1) and against
numcodecs.Shuffle, CRC-32C against google_crc32c, assembly against NumPy slicing of an array
whose chunks are stored transposed and big-endian.
"""

from __future__ import annotations

import itertools
import zlib
from typing import Any

import google_crc32c
import numpy as np
import pytest
from numcodecs import Blosc, Shuffle

from gpuzarr.backends.cuda import kernel_reference as ref
from gpuzarr.backends.cuda.launch_checks import check_assemble, check_blocks, check_span_lengths

from .blosc_frames import shuffled_blocks

RNG = np.random.default_rng(20240601)


def compressible(dtype: str, n: int) -> np.ndarray:
    # Runs with a little noise: every block compresses, so no frame is stored memcpyed.
    return (np.arange(n) // 4 % 50 + RNG.integers(0, 2, n)).astype(dtype)


# --- shuffle ----------------------------------------------------------------------------------


def unshuffle_frame(frame: bytes, kernel: str, partial_rule: int = 0) -> bytes:
    parsed = shuffled_blocks(frame)
    dst = [np.full_like(b, 0xAB) for b in parsed.blocks]
    sizes = np.array([b.size for b in parsed.blocks], dtype=np.int64)
    typesizes = np.full(len(dst), parsed.typesize, dtype=np.int32)
    if kernel == "byte":
        ref.byte_unshuffle(parsed.blocks, dst, sizes, typesizes, len(dst))
    else:
        ref.bit_unshuffle(parsed.blocks, dst, sizes, typesizes, len(dst), partial_rule)
    return b"".join(d.tobytes() for d in dst)


FRAME_CASES = [
    # dtype, element count, blocksize (0: blosc chooses), typesize override
    ("<u2", 1000, 256, None),
    ("<f8", 333, 0, None),  # one block, 333 elements: not a multiple of 8
    ("<u4", 5001, 1000, None),  # 20 full blocks and a 4-byte leftover block
    ("u1", 999, 200, None),
    ("<c16", 77, 0, None),
    ("<i8", 4096, 0, None),  # blocks large enough for c-blosc to split streams (with lz4: no)
    ("u1", 4099, 512, 4),  # typesize 4 over a byte array: leftover bytes inside the last block
    ("<u4", 6000, 1024, 16),
]


@pytest.mark.parametrize("cname", ["zstd", "lz4"])
@pytest.mark.parametrize(("dtype", "n", "blocksize", "typesize"), FRAME_CASES)
def test_byte_unshuffle_matches_blosc_frames(
    cname: str, dtype: str, n: int, blocksize: int, typesize: Any
) -> None:
    data = compressible(dtype, n)
    frame = Blosc(
        cname=cname, clevel=5, shuffle=Blosc.SHUFFLE, blocksize=blocksize, typesize=typesize
    ).encode(data)
    assert unshuffle_frame(frame, "byte") == data.tobytes()


@pytest.mark.parametrize("cname", ["zstd", "lz4"])
@pytest.mark.parametrize(("dtype", "n", "blocksize", "typesize"), FRAME_CASES)
def test_bit_unshuffle_matches_blosc_frames(
    cname: str, dtype: str, n: int, blocksize: int, typesize: Any
) -> None:
    data = compressible(dtype, n)
    frame = Blosc(
        cname=cname, clevel=5, shuffle=Blosc.BITSHUFFLE, blocksize=blocksize, typesize=typesize
    ).encode(data)
    assert shuffled_blocks(frame).version == 2
    assert unshuffle_frame(frame, "bit", partial_rule=0) == data.tobytes()


def test_partial_rule_matters_for_c_blosc1_frames() -> None:
    # A block of 333 eight-byte elements: c-blosc1 stores it without bit-shuffling it, so only
    # the c-blosc1 rule restores it.
    data = compressible("<f8", 333)
    frame = Blosc(cname="zstd", clevel=5, shuffle=Blosc.BITSHUFFLE).encode(data)
    assert unshuffle_frame(frame, "bit", partial_rule=1) != data.tobytes()


@pytest.mark.parametrize("typesize", [1, 2, 3, 4, 8, 16, 17])
@pytest.mark.parametrize("n", [0, 1, 5, 64, 1001])
def test_byte_unshuffle_matches_numcodecs_shuffle(typesize: int, n: int) -> None:
    data = RNG.integers(0, 256, n * typesize, dtype=np.uint8)
    expected = np.frombuffer(Shuffle(typesize).decode(data), np.uint8) if n else data
    out = np.full_like(data, 0xAB)
    ref.byte_unshuffle([data], [out], np.array([data.size]), np.array([typesize], np.int32), 1)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(("typesize", "n", "tail"), [(1, 24, 0), (4, 29, 3), (8, 8, 5), (3, 17, 2)])
def test_bit_unshuffle_partial_rule_one(typesize: int, n: int, tail: int) -> None:
    # Rule 1 (c-blosc2): the first n - n % 8 elements as a block of their own, the rest verbatim.
    m = n - n % 8
    block = RNG.integers(0, 256, n * typesize + tail, dtype=np.uint8)
    whole = np.full_like(block, 0xAB)
    ref.bit_unshuffle([block], [whole], np.array([block.size]), np.array([typesize], np.int32), 1, 1)
    head = np.full(m * typesize, 0xAB, np.uint8)
    ref.bit_unshuffle(
        [block[: m * typesize]], [head], np.array([head.size]), np.array([typesize], np.int32), 1, 0
    )
    np.testing.assert_array_equal(whole[: m * typesize], head)
    np.testing.assert_array_equal(whole[m * typesize :], block[m * typesize :])


def test_bit_unshuffle_layout_by_hand() -> None:
    # 8 uint16 elements: element i has only bit 0 of byte 1 set when i == 5, so bit row 8
    # (byte 1, bit 0) is 0b00100000 and every other row is zero.
    shuffled = np.zeros(16, np.uint8)
    shuffled[8] = 1 << 5
    out = np.zeros(16, np.uint8)
    ref.bit_unshuffle([shuffled], [out], np.array([16]), np.array([2], np.int32), 1, 0)
    expected = np.zeros(8, "<u2")
    expected[5] = 1 << 8
    np.testing.assert_array_equal(out.view("<u2"), expected)


def test_check_blocks_rejects_bad_sizes() -> None:
    check_blocks("byte_unshuffle", [10], [10], [10], [2])
    with pytest.raises(ValueError, match="block 0 has 11 bytes"):
        check_blocks("byte_unshuffle", [10], [12], [11], [2])
    with pytest.raises(ValueError, match=r"typesizes must be in 1\.\.255"):
        check_blocks("bit_unshuffle", [10], [10], [10], [0])
    with pytest.raises(ValueError, match="1 sources, 2 destinations"):
        check_blocks("bit_unshuffle", [10], [10, 10], [10], [1])


# --- crc32c -----------------------------------------------------------------------------------

CRC_SIZES = [0, 1, 7, 8, 9, 63, 255, 256, 257, 2048, 4097, 100_003]


@pytest.mark.parametrize("block_threads", [32, 37, 256, 1024])
def test_crc32c_matches_google_crc32c(block_threads: int) -> None:
    buffers = [RNG.integers(0, 256, n, dtype=np.uint8) for n in CRC_SIZES]
    crcs = np.zeros(len(buffers), np.uint32)
    ref.crc32c_batch(buffers, np.array(CRC_SIZES, np.int64), crcs, len(buffers), block_threads=block_threads)
    assert crcs.tolist() == [google_crc32c.value(b.tobytes()) for b in buffers]


@pytest.mark.parametrize("block_threads", [32, 37, 256, 1024])
def test_crc32_matches_zlib(block_threads: int) -> None:
    buffers = [RNG.integers(0, 256, n, dtype=np.uint8) for n in CRC_SIZES]
    crcs = np.zeros(len(buffers), np.uint32)
    ref.crc32_batch(buffers, np.array(CRC_SIZES, np.int64), crcs, len(buffers), block_threads=block_threads)
    assert crcs.tolist() == [zlib.crc32(b.tobytes()) for b in buffers]


@pytest.mark.parametrize("block_threads", [32, 37, 256, 1024])
def test_adler32_matches_zlib(block_threads: int) -> None:
    sizes = [*CRC_SIZES, 300_000]
    buffers = [RNG.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    buffers.append(np.full(70_000, 255, dtype=np.uint8))  # the largest sums the reductions see
    sizes.append(70_000)
    sums = np.zeros(len(buffers), np.uint32)
    ref.adler32_batch(buffers, np.array(sizes, np.int64), sums, len(buffers), block_threads=block_threads)
    assert sums.tolist() == [zlib.adler32(b.tobytes()) for b in buffers]


def test_crc32c_of_a_prefix() -> None:
    data = RNG.integers(0, 256, 1000, dtype=np.uint8)
    crcs = np.zeros(1, np.uint32)
    ref.crc32c_batch([data], np.array([996]), crcs, 1)
    assert int(crcs[0]) == google_crc32c.value(data[:996].tobytes())
    with pytest.raises(ValueError, match="buffer 0 is 1000 bytes long, size says 1001"):
        check_span_lengths([1000], [1001])


# --- assemble ---------------------------------------------------------------------------------


def chunk_projections(shape: tuple[int, ...], chunks: tuple[int, ...], selection: tuple[slice, ...]):  # type: ignore[no-untyped-def]
    """(chunk coords, src offsets, steps, dst offsets, extents) of a slice selection, per chunk."""
    per_axis = []
    for size, chunk, sel in zip(shape, chunks, selection):
        index = np.arange(size)[sel]
        step = sel.step or 1
        axis = []
        for k in range(-(-size // chunk)):
            hit = np.flatnonzero(index // chunk == k)
            if hit.size:
                axis.append((k, int(index[hit[0]] - k * chunk), step, int(hit[0]), int(hit.size)))
        per_axis.append(axis)
    for combo in itertools.product(*per_axis):
        yield tuple(zip(*combo)) if combo else ((),) * 5


ASSEMBLE_CASES = [
    # shape, chunks, selection, storage order of the chunk axes, dtype
    ((10,), (4,), (slice(1, 9),), (0,), "<u2"),
    ((13, 9), (4, 5), (slice(None), slice(None)), (1, 0), ">f4"),
    ((13, 9), (4, 5), (slice(2, 12, 3), slice(1, None, 2)), (0, 1), ">i8"),
    ((7, 6, 5), (3, 4, 2), (slice(1, 7, 2), slice(0, 6), slice(4, 0, -1)), (2, 0, 1), ">c8"),
    ((7, 6, 5), (3, 4, 2), (slice(None), slice(2, 5), slice(None, None, 2)), (2, 1, 0), "<c16"),
    ((5, 4, 3, 2, 2, 2, 2, 3), (2, 3, 2, 1, 2, 1, 2, 2), (slice(None),) * 8, tuple(range(7, -1, -1)), ">u4"),
    ((33,), (8,), (slice(3, 30, 5),), (0,), "u1"),
    ((), (), (), (), ">f8"),
]


@pytest.mark.parametrize(("shape", "chunks", "selection", "order", "dtype"), ASSEMBLE_CASES)
@pytest.mark.parametrize("output_order", ["C", "F"])
def test_assemble_matches_numpy_slicing(shape, chunks, selection, order, dtype, output_order) -> None:  # type: ignore[no-untyped-def]
    native = np.dtype(dtype).newbyteorder("=")
    data = (RNG.standard_normal(shape) * 100).astype(native) if shape else np.array(3.5, native)
    fill = np.array(7, native)
    # Negative steps are turned into positive ones before a launch: reverse the axis afterwards.
    positive = tuple(
        slice(*s.indices(n)) if (s.step or 1) > 0 else slice(None) for s, n in zip(selection, shape)
    )
    flips = [d for d, s in enumerate(selection) if (s.step or 1) < 0]
    if flips:
        positive = tuple(
            slice(s.indices(n)[1] + 1, s.indices(n)[0] + 1, -s.indices(n)[2]) if d in flips else p
            for d, (s, n, p) in enumerate(zip(selection, shape, positive))
        )
    expected = data[positive].copy()
    missing = set()

    sources, tables = [], []
    for n_chunk, (coords, src_off, steps, dst_off, ext) in enumerate(
        chunk_projections(shape, chunks, positive)
    ):
        region = tuple(slice(k * c, (k + 1) * c) for k, c in zip(coords, chunks))
        chunk = np.full(chunks, fill, native)
        block = data[region]
        chunk[tuple(slice(0, n) for n in block.shape)] = block
        stored = np.ascontiguousarray(chunk.transpose(order)).astype(np.dtype(dtype))
        strides = [stored.strides[order.index(d)] // stored.itemsize for d in range(len(shape))]
        if n_chunk % 3 == 2:  # every third chunk is missing
            missing.add(n_chunk)
            sources.append(None)
            expected[tuple(slice(o, o + e) for o, e in zip(dst_off, ext))] = fill
        else:
            sources.append(stored.reshape(-1).view(np.uint8))
        tables.append((strides, src_off, steps, dst_off, ext))

    itemsize = native.itemsize
    out_bytes = np.full(expected.nbytes, 0xAB, np.uint8)
    out = np.ndarray(expected.shape, native, buffer=out_bytes, order=output_order)
    out_strides = [s // itemsize for s in out.strides]
    swap_width = itemsize // 2 if native.kind == "c" else itemsize
    swap_width = swap_width if np.dtype(dtype).byteorder == ">" else 0
    columns = [np.array([t[i] for t in tables], np.int64).reshape(len(tables), len(shape)) for i in range(5)]
    padded = check_assemble(
        out_bytes.nbytes,
        out_strides,
        [None if s is None else s.nbytes for s in sources],
        *columns,
        itemsize,
        swap_width,
    )
    ref.assemble_chunks(
        out_bytes,
        padded[0],
        sources,
        *padded[1:],
        fill.reshape(1).view(np.uint8),
        len(sources),
        len(shape),
        itemsize,
        swap_width,
    )
    if flips:
        out = np.flip(out, axis=flips)
        expected = np.flip(expected, axis=flips)
    np.testing.assert_array_equal(out, expected)


def _geometry(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "out_nbytes": 4 * 6 * 4,
        "out_strides": [6, 1],
        "source_nbytes": [4 * 12],
        "src_strides": [[4, 1]],
        "src_offsets": [[0, 1]],
        "src_steps": [[1, 1]],
        "dst_offsets": [[1, 2]],
        "extents": [[3, 3]],
        "itemsize": 4,
        "swap_width": 0,
    }
    base.update(changes)
    return base


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"extents": [[3, 4]]}, "chunk 0 reads elements 1..12"),
        ({"src_steps": [[2, 1]]}, "chunk 0 reads elements"),
        ({"dst_offsets": [[2, 2]]}, "chunk 0 writes output elements 14..28"),
        ({"src_offsets": [[-1, 1]]}, "src_offsets must not be negative"),
        ({"src_steps": [[0, 1]]}, "src_steps must be >= 1"),
        ({"extents": [[3, 3, 1]]}, r"extents: expected shape \(1, 2\)"),
        ({"itemsize": 3}, "itemsize must be"),
        ({"swap_width": 8}, "does not divide"),
        # int64 spans that wrap to in-bounds values: 2**62 * 4 is 0 in int64
        ({"out_strides": [4, 1], "dst_offsets": [[2**62, 2]]}, "chunk 0's output offsets.*past 64-bit"),
        ({"src_offsets": [[2**62, 1]]}, "chunk 0's source offsets.*past 64-bit"),
    ],
)
def test_check_assemble_rejects(changes: dict[str, Any], message: str) -> None:
    check_assemble(**_geometry())
    with pytest.raises(ValueError, match=message):
        check_assemble(**_geometry(**changes))


def test_check_assemble_ignores_empty_and_missing_chunks() -> None:
    check_assemble(**_geometry(extents=[[0, 99]]))
    check_assemble(**_geometry(source_nbytes=[None], src_offsets=[[100, 100]]))


def test_reference_refuses_what_the_check_refuses() -> None:
    # The model reads through NumPy views, which refuse to leave their buffer: a launch the host
    # check would have let through could not silently read out of bounds in the model either.
    out = np.zeros(24 * 4, np.uint8)
    src = np.zeros(12 * 4, np.uint8)
    table = np.zeros((1, 8), np.int64)
    extents = table.copy()
    extents[0, :2] = [3, 4]
    strides = table.copy()
    strides[0, :2] = [4, 1]
    offsets = table.copy()
    offsets[0, :2] = [0, 1]
    with pytest.raises(ValueError):
        ref.assemble_chunks(
            out,
            np.array([6, 1] + [0] * 6),
            [src],
            strides,
            offsets,
            np.ones((1, 8), np.int64),
            table,
            extents,
            np.zeros(4, np.uint8),
            1,
            2,
            4,
            0,
        )
