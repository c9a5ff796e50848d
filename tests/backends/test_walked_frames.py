"""zstd frames in files that passed the host's walk are kept (``backends/cuda/walked_frames.py``):
a frame read again from a file of the same version is not walked again, and one in a rewritten
file is, so a malformed frame written over a good one is still refused before the decode."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from numcodecs import Zstd

from gpuzarr.backends.cuda import bind
from gpuzarr.backends.cuda.launches import FileSpan
from gpuzarr.backends.cuda.walked_frames import WALKED_FRAMES, WalkedFrames
from gpuzarr.errors import CorruptChunkError
from gpuzarr.store.local import stat_version
from tests.file_times import wait_for_a_new_change_time

from .cuda_matrix import assert_bitwise_equal, cpu_result, make_local_array, open_on_gpu

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sizes of the frames the host walks, in order (the kept frames emptied first)."""
    seen: list[int] = []
    walk = bind.check_zstd_frame

    def counted(read: Any, size: int, decoded_nbytes: int) -> Any:
        seen.append(size)
        return walk(read, size, decoded_nbytes)

    monkeypatch.setattr(bind, "check_zstd_frame", counted)
    WALKED_FRAMES.clear()
    yield seen
    WALKED_FRAMES.clear()


def test_a_second_read_of_unchanged_files_walks_no_frame(
    emulated_gpu: EmulatedGpu, tmp_path: Path, walks: list[int]
) -> None:
    array = make_local_array(tmp_path)
    gpu = open_on_gpu(array)
    first = np.asarray(gpu[...])
    walked = len(walks)
    assert walked == sum(1 for p in (tmp_path / "a.zarr" / "c").rglob("*") if p.is_file())
    assert_bitwise_equal(np.asarray(gpu[...]), first)
    assert len(walks) == walked  # nothing walked again
    assert_bitwise_equal(first, cpu_result(array, ...))


def test_a_rewritten_file_is_walked_again_and_a_malformed_frame_refused(
    emulated_gpu: EmulatedGpu, tmp_path: Path, walks: list[int]
) -> None:
    array = make_local_array(tmp_path)
    gpu = open_on_gpu(array)
    gpu[...]
    victim = tmp_path / "a.zarr" / "c" / "1" / "1"
    good = victim.read_bytes()
    before = len(walks)
    # The same size, a block header of the reserved type 3, the old modification time put back:
    # only the change time tells this version from the one walked.
    times = os.stat(victim)
    wait_for_a_new_change_time(victim)
    with open(victim, "r+b") as f:
        f.write(bytes(_reserved_block(good)))
    os.utime(victim, ns=(times.st_atime_ns, times.st_mtime_ns))
    with pytest.raises(CorruptChunkError, match="reserved block type") as caught:
        gpu[...]
    assert caught.value.key == "c/1/1"
    assert len(walks) == before + 1  # only the rewritten file walked again


def _reserved_block(frame: bytes) -> bytearray:
    """``frame`` with its first block's type set to the reserved 3 (same size)."""
    forged = bytearray(frame)
    descriptor = forged[4]
    single_segment = bool(descriptor & 0x20)
    fcs = (0, 2, 4, 8)[descriptor >> 6] or (1 if single_segment else 0)
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x3] + fcs
    forged[start] |= 0x06
    return forged


def test_a_frame_of_another_decoded_size_is_walked_again(tmp_path: Path) -> None:
    frame = Zstd(level=1).encode(bytes(1000))
    path = tmp_path / "f"
    path.write_bytes(frame)
    span = FileSpan(str(path), 0, len(frame), stat_version(os.stat(path)))
    frames = WalkedFrames()
    frames.add(frames.key(span, 1000))
    assert frames.passed(frames.key(span, 1000))
    assert not frames.passed(frames.key(span, 999))
    assert frames.key(FileSpan(str(path), 0, len(frame)), 1000) is None  # no version: never kept
    assert not frames.passed(None)


def test_the_least_recently_read_frames_go_first() -> None:
    frames = WalkedFrames(capacity=2)
    spans = [FileSpan(f"/f{i}", 0, 10, stat_version(os.stat("/"))) for i in range(3)]
    keys = [frames.key(s, 10) for s in spans]
    frames.add(keys[0])
    frames.add(keys[1])
    assert frames.passed(keys[0])  # read again: now the most recent
    frames.add(keys[2])
    assert len(frames) == 2
    assert frames.passed(keys[0]) and frames.passed(keys[2]) and not frames.passed(keys[1])
