"""NumPy models of the CUDA kernels in ``kernels/*.cu``.

Each function takes the arguments of its kernel launch in the same order, with two changes: a
device array of pointers becomes a list of NumPy ``uint8`` buffers (``None`` for a null pointer),
and output arguments are NumPy arrays written in place. The models say what a launch computes
(element for element, byte for byte), so that the host-side preparation of a launch can be
tested on machines without a GPU, and so that the GPU tests have something to compare against.
They are written for clarity, not speed. This module never imports cupy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_NDIM = 8
ITEMSIZES = (1, 2, 4, 8, 16)
CRC32C_POLY = 0x82F63B78
CRC32_POLY = 0xEDB88320
ADLER_MOD = 65521

UInt8Array = npt.NDArray[np.uint8]
Int64Array = npt.NDArray[np.int64]


def _swap_groups(items: UInt8Array, swap_width: int) -> UInt8Array:
    """Reverse every ``swap_width``-byte group along the last axis (bytes of one item)."""
    itemsize = items.shape[-1]
    if swap_width <= 1:
        return items
    if itemsize % swap_width:
        raise ValueError(f"swap_width {swap_width} does not divide itemsize {itemsize}")
    groups = items.reshape(*items.shape[:-1], itemsize // swap_width, swap_width)
    return groups[..., ::-1].reshape(items.shape)


def _item_view(
    buffer: UInt8Array, base: int, shape: Sequence[int], strides: Sequence[int], itemsize: int
) -> UInt8Array:
    """A (*shape, itemsize) byte view of ``buffer``; NumPy rejects any view that leaves it."""
    if base < 0:
        raise ValueError(f"view starts at element {base}, before the buffer")
    return np.ndarray(
        shape=(*shape, itemsize),
        dtype=np.uint8,
        buffer=buffer,
        offset=base * itemsize,
        strides=(*(s * itemsize for s in strides), 1),
    )


def assemble_chunks(
    out: UInt8Array,
    out_strides: Int64Array,
    sources: Sequence[UInt8Array | None],
    src_strides: Int64Array,
    src_offsets: Int64Array,
    src_steps: Int64Array,
    dst_offsets: Int64Array,
    extents: Int64Array,
    fill_value: UInt8Array,
    nchunks: int,
    ndim: int,
    itemsize: int,
    swap_width: int,
) -> None:
    """Model of ``assemble_chunks`` (kernels/assemble.cu).

    For chunk ``c`` the region ``extents[c]`` of the output starting at ``dst_offsets[c]`` receives
    the chunk's elements ``src_offsets[c] + r * src_steps[c]`` (``r`` the index in the region), read
    with element strides ``src_strides[c]`` and byte-swapped in groups of ``swap_width`` bytes, or
    ``fill_value`` where ``sources[c]`` is ``None``. ``out`` is the output's bytes (``uint8``,
    base pointer first), the per-axis tables have 8 columns of which ``ndim`` are read.
    """
    if itemsize not in ITEMSIZES:
        raise ValueError(f"itemsize must be one of {ITEMSIZES}, got {itemsize}")
    if not 0 <= ndim <= MAX_NDIM:
        raise ValueError(f"ndim must be in 0..{MAX_NDIM}, got {ndim}")
    fill = np.asarray(fill_value, dtype=np.uint8)[:itemsize]
    for c in range(nchunks):
        shape = [int(e) for e in extents[c, :ndim]]
        if 0 in shape:
            continue
        dst_base = int(np.dot(dst_offsets[c, :ndim], out_strides[:ndim]))
        dst = _item_view(out, dst_base, shape, [int(s) for s in out_strides[:ndim]], itemsize)
        source = sources[c]
        if source is None:
            dst[...] = fill
            continue
        src_base = int(np.dot(src_offsets[c, :ndim], src_strides[c, :ndim]))
        steps = [int(a) * int(b) for a, b in zip(src_strides[c, :ndim], src_steps[c, :ndim])]
        src = _item_view(source, src_base, shape, steps, itemsize)
        dst[...] = _swap_groups(src, swap_width)


#: Model of ``assemble_rows`` (kernels/assemble.cu): the copies of ``assemble_chunks``, which the
#: device walks a row of the innermost axis per warp rather than an element per thread.
assemble_rows = assemble_chunks


def byte_unshuffle(
    src: Sequence[UInt8Array],
    dst: Sequence[UInt8Array],
    nbytes: Int64Array,
    typesizes: npt.NDArray[np.int32],
    nblocks: int,
) -> None:
    """Model of ``byte_unshuffle`` (kernels/shuffle.cu): c-blosc1's unshuffle of each block."""
    for b in range(nblocks):
        size, typesize = int(nbytes[b]), max(int(typesizes[b]), 1)
        n = size // typesize
        s, d = src[b], dst[b]
        d[: n * typesize] = s[: n * typesize].reshape(typesize, n).T.reshape(-1)
        d[n * typesize : size] = s[n * typesize : size]


def bit_unshuffle(
    src: Sequence[UInt8Array],
    dst: Sequence[UInt8Array],
    nbytes: Int64Array,
    typesizes: npt.NDArray[np.int32],
    nblocks: int,
    partial_rule: int,
) -> None:
    """Model of ``bit_unshuffle`` (kernels/shuffle.cu).

    The bit-shuffled part of a block holds ``typesize * 8`` bit rows of ``m / 8`` bytes; row
    ``j * 8 + b`` holds bit ``b`` of byte ``j`` of elements ``0 .. m - 1``, least significant bit
    first. ``partial_rule`` 0 copies a block whose element count is not a multiple of 8 verbatim
    (c-blosc1), 1 bit-un-shuffles its first ``n - n % 8`` elements (c-blosc2 frame formats >= 3).
    """
    for b in range(nblocks):
        size, typesize = int(nbytes[b]), max(int(typesizes[b]), 1)
        n = size // typesize
        m = n - n % 8
        if m != n and partial_rule == 0:
            m = 0
        s, d = src[b], dst[b]
        shuffled = m * typesize
        if m:
            rows = s[:shuffled].reshape(typesize, 8, m // 8)
            bits = np.unpackbits(rows, axis=-1, bitorder="little")  # [byte j, bit b, element i]
            d[:shuffled] = np.packbits(bits.transpose(2, 0, 1), axis=-1, bitorder="little").reshape(-1)
        d[shuffled:size] = s[shuffled:size]


def _crc_table(poly: int) -> npt.NDArray[np.uint32]:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(poly), table >> 1).astype(np.uint32)
    return table


def _multmodp(a: int, b: int, poly: int = CRC32C_POLY) -> int:
    """``a * b`` modulo the CRC polynomial ``poly``, reflected bit order (as in crc32c.cu)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1


def _x8nmodp(nbytes: int, poly: int = CRC32C_POLY) -> int:
    """x^(8 * nbytes) modulo the polynomial."""
    p, x2n = 1 << 31, 1 << 30  # x^0, then x^(2^k) for k = 0, 1, ...
    for _ in range(3):
        x2n = _multmodp(x2n, x2n, poly)
    while nbytes:
        if nbytes & 1:
            p = _multmodp(x2n, p, poly)
        nbytes >>= 1
        x2n = _multmodp(x2n, x2n, poly)
    return p


def _segments(n: int, block_threads: int) -> tuple[int, npt.NDArray[np.int64]]:
    """The kernels' split of an ``n``-byte buffer: segment length and each thread's length."""
    seg = -(-n // block_threads)
    seg = (seg + 7) & ~7
    lengths = np.clip(n - np.arange(block_threads, dtype=np.int64) * seg, 0, seg)
    return seg, lengths


def _tree(block_threads: int, seg: int, n: int) -> list[tuple[int, int, int]]:
    """The kernels' tree reduction, in order: (left, right, bytes of the right run) per merge."""
    steps = []
    width = 1
    while width < block_threads:
        for t in range(0, block_threads - width, 2 * width):
            steps.append((t, t + width, min((t + 2 * width) * seg, n) - min((t + width) * seg, n)))
        width *= 2
    return steps


def _crc_batch(
    poly: int,
    buffers: Sequence[UInt8Array],
    sizes: Int64Array,
    crcs: npt.NDArray[np.uint32],
    nbuffers: int,
    block_threads: int,
) -> None:
    table = _crc_table(poly)
    for b in range(nbuffers):
        n = int(sizes[b])
        seg, lengths = _segments(n, block_threads)
        # All segments advance together, one byte per step (the kernel's slicing-by-8 gives the
        # same register as eight single-byte steps).
        padded = np.zeros(block_threads * seg, dtype=np.uint8)
        padded[:n] = buffers[b][:n]
        lanes = padded.reshape(block_threads, seg)
        regs = np.zeros(block_threads, dtype=np.uint32)
        for k in range(seg):
            stepped = table[(regs ^ lanes[:, k]) & 0xFF] ^ (regs >> 8)
            regs = np.where(lengths > k, stepped, regs).astype(np.uint32)
        partial = [int(r) for r in regs]
        for left, right, right_len in _tree(block_threads, seg, n):
            partial[left] = _multmodp(_x8nmodp(right_len, poly), partial[left], poly) ^ partial[right]
        init = _multmodp(_x8nmodp(n, poly), 0xFFFFFFFF, poly)
        crcs[b] = partial[0] ^ init ^ 0xFFFFFFFF


def crc32c_batch(
    buffers: Sequence[UInt8Array],
    sizes: Int64Array,
    crcs: npt.NDArray[np.uint32],
    nbuffers: int,
    *,
    block_threads: int = 256,
) -> None:
    """Model of ``crc32c_batch`` (kernels/crc32c.cu), including its split into ``block_threads``
    segments per buffer and the merge of the segment CRCs, so the merge arithmetic is tested too.
    """
    _crc_batch(CRC32C_POLY, buffers, sizes, crcs, nbuffers, block_threads)


def crc32_batch(
    buffers: Sequence[UInt8Array],
    sizes: Int64Array,
    crcs: npt.NDArray[np.uint32],
    nbuffers: int,
    *,
    block_threads: int = 256,
) -> None:
    """Model of ``crc32_batch`` (kernels/crc32c.cu): the same method with the IEEE polynomial."""
    _crc_batch(CRC32_POLY, buffers, sizes, crcs, nbuffers, block_threads)


def adler32_batch(
    buffers: Sequence[UInt8Array],
    sizes: Int64Array,
    sums: npt.NDArray[np.uint32],
    nbuffers: int,
    *,
    block_threads: int = 256,
) -> None:
    """Model of ``adler32_batch`` (kernels/adler32.cu): per-segment sums from zero, merged by the
    same tree as the kernel's."""
    for b in range(nbuffers):
        n = int(sizes[b])
        seg, lengths = _segments(n, block_threads)
        data = buffers[b][:n].astype(np.int64)
        part_a, part_b = [], []
        for t in range(block_threads):
            piece = data[t * seg : t * seg + int(lengths[t])]
            weights = np.arange(piece.size, 0, -1, dtype=np.int64)  # L - i
            part_a.append(int(piece.sum()) % ADLER_MOD)
            part_b.append(int((piece % ADLER_MOD * weights % ADLER_MOD).sum()) % ADLER_MOD)
        for left, right, right_len in _tree(block_threads, seg, n):
            left_a = part_a[left]
            part_a[left] = (left_a + part_a[right]) % ADLER_MOD
            part_b[left] = (part_b[left] + (right_len % ADLER_MOD) * left_a + part_b[right]) % ADLER_MOD
        total_a = (part_a[0] + 1) % ADLER_MOD
        total_b = (part_b[0] + n % ADLER_MOD) % ADLER_MOD
        sums[b] = (total_b << 16) | total_a


LZ4_MIN_MATCH = 4
LZ4_LAST_LITERALS = 5
LZ4_MFLIMIT = 12


def _lz4_length(src: bytes, ip: int, n: int, length: int) -> tuple[int, int] | None:
    """A length field's value after its extension bytes (while they are 255), and the offset
    after it; None when the block ends inside it."""
    while True:
        if ip >= n:
            return None
        extra = src[ip]
        ip += 1
        length += extra
        if extra != 255:
            return length, ip


def lz4_walk(src: bytes, n: int, out_n: int) -> int:
    """The walk of ``lz4_check.cu``'s ``lz4_walk``: -1 when the ``n``-byte block is well formed
    and decodes to ``out_n`` bytes, else the offset of the sequence where it breaks the format."""
    ip = op = 0
    while True:
        sequence = ip
        if ip >= n:
            return sequence
        token = src[ip]
        ip += 1
        literals = token >> 4
        if literals == 15:
            found = _lz4_length(src, ip, n, literals)
            if found is None:
                return sequence
            literals, ip = found
        if literals > n - ip or literals > out_n - op:
            return sequence
        ip += literals
        op += literals
        if ip == n:
            return -1 if op == out_n else sequence
        if op > out_n - LZ4_MFLIMIT or n - ip < 2:
            return sequence
        offset = src[ip] | (src[ip + 1] << 8)
        ip += 2
        if offset == 0 or offset > op:
            return sequence
        match = token & 15
        if match == 15:
            found = _lz4_length(src, ip, n, match)
            if found is None:
                return sequence
            match, ip = found
        match += LZ4_MIN_MATCH
        if match > out_n - LZ4_LAST_LITERALS - op:
            return sequence
        op += match


def lz4_check_batch(
    blocks: Sequence[UInt8Array],
    sizes: Int64Array,
    decoded_sizes: Int64Array,
    verdicts: Int64Array,
    nblocks: int,
) -> None:
    """Model of ``lz4_check_batch`` (kernels/lz4_check.cu): each block's walk, one verdict each."""
    for b in range(nblocks):
        n = int(sizes[b])
        verdicts[b] = lz4_walk(bytes(blocks[b][:n]), n, int(decoded_sizes[b]))


def as_uint8(buffer: Any) -> UInt8Array:
    """A flat ``uint8`` view of a contiguous NumPy array (helper for callers of the models)."""
    array = np.ascontiguousarray(buffer)
    return array.reshape(-1).view(np.uint8)
