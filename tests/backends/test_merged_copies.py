"""Copies of stored streams merged where they follow each other in the staging and the work
buffer (``launches.merged_copies``), and a read of uncompressed chunks from a memory store on
the emulated device: one copy for the batch, the CPU's result."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import gpuzarr
from gpuzarr.backends.cuda.launches import merged_copies

from .cuda_matrix import assert_bitwise_equal, cpu_result, open_on_gpu

if TYPE_CHECKING:
    from .emulated_gpu import EmulatedGpu


def test_spans_that_follow_each_other_in_both_buffers_are_one_copy() -> None:
    # 12 bytes at 0 -> 100, then the next at the following multiple of 8 in both buffers: 16 -> 116
    assert merged_copies([0, 16, 40], [100, 116, 140], [12, 24, 8]) == ([0], [100], [48])
    # no padding at all
    assert merged_copies([0, 8], [0, 8], [8, 8]) == ([0], [0], [16])


def test_spans_apart_in_either_buffer_stay_apart() -> None:
    cases = [
        ([0, 16], [100, 124], [12, 8]),  # a different gap in the work buffer (another span there)
        ([0, 24], [0, 24], [12, 8]),  # a gap of 12: room for another span in between
        ([16, 0], [16, 0], [8, 8]),  # backwards
        ([0, 4], [0, 4], [8, 8]),  # overlapping
    ]
    for src, dst, n in cases:
        assert merged_copies(src, dst, n) == (src, dst, n), (src, dst, n)
    assert merged_copies([], [], []) == ([], [], [])


def test_merging_copies_the_same_bytes_to_the_same_places() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 30, size=40).tolist()
    src, dst, at_s, at_d = [], [], 0, 1000
    for n in sizes:
        src.append(at_s)
        dst.append(at_d)
        at_s = -(-(at_s + n) // 8) * 8
        at_d = -(-(at_d + n) // 8) * 8
        if rng.random() < 0.2:  # now and then another span in between
            at_d += 8
    staging = rng.integers(0, 256, size=at_s + 8, dtype=np.uint8)
    one_by_one = np.zeros(at_d + 8, dtype=np.uint8)
    for s, d, n in zip(src, dst, sizes, strict=True):
        one_by_one[d : d + n] = staging[s : s + n]
    merged = np.zeros_like(one_by_one)
    runs = merged_copies(src, dst, sizes)
    assert len(runs[0]) < len(src)
    for s, d, n in zip(*runs, strict=True):
        merged[d : d + n] = staging[s : s + n]
    covered = np.zeros(one_by_one.size, dtype=bool)
    for d, n in zip(dst, sizes, strict=True):
        covered[d : d + n] = True
    np.testing.assert_array_equal(merged[covered], one_by_one[covered])


def test_uncompressed_chunks_from_a_memory_store_are_one_copy(emulated_gpu: EmulatedGpu) -> None:
    array = gpuzarr.create(
        gpuzarr.MemoryStore(), shape=(40, 50), dtype="<u2", chunks=(8, 10),
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}],
    )
    array[...] = np.arange(2000, dtype="<u2").reshape(40, 50)
    got = open_on_gpu(array)[...]
    assert_bitwise_equal(np.asarray(got), cpu_result(array, Ellipsis))
    assert [n for name, n in emulated_gpu.calls() if name == "copy"] == [1]  # 25 chunks, one copy
