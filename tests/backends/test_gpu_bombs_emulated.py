"""Decompression bombs and forged size fields on the GPU read path, run on the emulated device.

The chunks of ``tests/codecs/test_bombs.py`` are read with ``device="gpu"``: the host checks
every size that chooses a device buffer or an nvCOMP argument (a zstd frame's content size,
numcodecs' LZ4 prefix, Blosc's nbytes, a gzip trailer's ISIZE) against the chunk's size before
any stream joins a batch, and the chunks a batch cannot hold go to the CPU decoders, which stop at
the chunk's size. Each read raises a CorruptChunkError naming the key, and the process's peak
resident memory during the read stays within a few times the chunk's size.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError
from tests.codecs.test_bombs import PEAK_LIMIT, _write_case

if TYPE_CHECKING:
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu

#: cases whose codecs have a GPU route (zstd, gzip, blosc, numcodecs.zlib, numcodecs.lz4), and
#: the device calls none of them may reach: the bomb is refused on the host or by the CPU decoder
GPU_CASES = {
    "gzip": "deflate",
    "zstd-no-size": "zstd",
    "zstd-declares-1TiB": "zstd",
    "zstd-declares-1GiB": "zstd",
    "blosc-nbytes": "lz4",
    "numcodecs.lz4": "lz4",
    "v2-lz4": "lz4",
    "v2-zstd": "zstd",
    "v2-gzip": "deflate",
    "sharded-gzip": "deflate",
    "sharded-zstd-1TiB": "zstd",
}


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc to measure peak memory")
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_bomb_is_refused_on_the_host(emulated_gpu: EmulatedGpu, tmp_path: Path, name: str) -> None:
    key = _write_case(tmp_path, name)
    array = gpuzarr.open_array(str(tmp_path / name), mode="r", device="gpu")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident size to the current one
    before = _status("VmRSS")
    with pytest.raises(CorruptChunkError) as caught:
        array[...]
    peak = _status("VmHWM") - before
    assert caught.value.key == key
    assert not isinstance(caught.value.__cause__, MemoryError)
    assert peak < PEAK_LIMIT, f"peak resident memory grew by {peak >> 20} MiB"
    assert GPU_CASES[name] not in emulated_gpu.names()
