"""Split a Blosc1 frame into its shuffled blocks, the input of the un-shuffle kernels.

A test helper, independent of gpuzarr's own frame parser: it follows c-blosc1's blosc_d for
frames whose streams are zstd or lz4 (the codecs numcodecs can decode on their own).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
from numcodecs import LZ4, Zstd

MAX_SPLITS = 16
MIN_BUFFERSIZE = 128


class ShuffledBlocks(NamedTuple):
    version: int
    flags: int
    typesize: int
    blocks: list[np.ndarray]


def shuffled_blocks(frame: bytes) -> ShuffledBlocks:
    version, _, flags, typesize, nbytes, blocksize, _ = struct.unpack_from("<BBBBIII", frame)
    if flags & 0x2:
        raise ValueError("frame is memcpyed: it holds no shuffled blocks")
    compcode = flags >> 5
    decoders = {
        1: lambda raw, n: LZ4().decode(struct.pack("<I", n) + raw),
        4: lambda raw, n: Zstd().decode(raw),
    }
    decode = decoders[compcode]
    nblocks = -(-nbytes // blocksize)
    starts = struct.unpack_from(f"<{nblocks}i", frame, 16)
    blocks = []
    for b, start in enumerate(starts):
        bsize = min(blocksize, nbytes - b * blocksize)
        leftover = bsize != blocksize
        split = not flags & 0x10 and typesize <= MAX_SPLITS and bsize // typesize >= MIN_BUFFERSIZE
        nsplits = typesize if split and not leftover else 1
        neblock = bsize // nsplits
        pos, parts = start, []
        for _ in range(nsplits):
            (cbytes,) = struct.unpack_from("<i", frame, pos)
            raw = frame[pos + 4 : pos + 4 + cbytes]
            pos += 4 + cbytes
            parts.append(np.frombuffer(raw if cbytes == neblock else decode(raw, neblock), np.uint8))
        blocks.append(np.concatenate(parts))
        assert blocks[-1].size == bsize
    return ShuffledBlocks(version, flags, typesize, blocks)
