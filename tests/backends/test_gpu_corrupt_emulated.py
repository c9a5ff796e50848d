"""Corrupt input on the GPU read path, run on the emulated device: frames the host knows are bad
never enter a batch, chunks a batch cannot hold go to the CPU, nvCOMP's CUDA and out-of-memory
errors pass through without a retry stream by stream, a broken CUDA context is a DeviceError,
and the first failed batch of a read is logged at WARNING."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import pytest
from numcodecs import Zstd

from gpuzarr.backends.cuda.device import is_device_failure
from gpuzarr.backends.cuda.executor import FILE_READ_ATTEMPTS
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice
from gpuzarr.errors import CorruptChunkError, DeviceError
from tests.file_times import wait_for_a_new_change_time

from .cuda_matrix import assert_bitwise_equal, cpu_result, make_array, make_local_array, open_on_gpu

if TYPE_CHECKING:
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu


def _victim(tmp_path: Path) -> Path:
    return tmp_path / "a.zarr" / "c" / "1" / "1"


def _zstd_streams(gpu: EmulatedGpu) -> int:
    return sum(n for name, n in gpu.calls() if name == "zstd")


def test_a_file_replaced_after_the_host_walked_it_never_reaches_the_decoder(
    emulated_gpu: EmulatedGpu, tmp_path: Path
) -> None:
    """The host walks each frame the device will read; a file replaced between that walk and
    the device's read (new inode or modification time) is an error naming the chunk, raised
    before any stream of the batch is decoded, not bytes nobody checked handed to nvCOMP."""
    array = make_local_array(tmp_path)
    victim = _victim(tmp_path)
    other = Zstd(level=1).encode(b"\0" * 1536)  # a valid frame of another chunk's size

    class ReplacedUnderTheRead(CpuEmulatedDevice):
        def read_files(self, reads: Any, staging: Any, work: Any) -> list[int]:
            replacement = victim.with_name("replacement")
            replacement.write_bytes(other)
            replacement.replace(victim)  # what a writer does: a new file under the old name
            return super().read_files(reads, staging, work)

    emulated_gpu.device_class = ReplacedUnderTheRead
    emulated_gpu.devices.clear()
    with pytest.raises(CorruptChunkError, match="changed while it was being read") as caught:
        open_on_gpu(array)[...]
    assert caught.value.key == "c/1/1"
    assert _zstd_streams(emulated_gpu) == 0


#: What changes a file in place while the device reads it: (how, every read or only the first,
#: how many reads of the batch that makes)
IN_PLACE_CHANGES = [
    # Same size, the old modification time put back: only the change time tells. Done to every
    # read, it is refused; done once, the batch is read again and the read goes on.
    ("rewritten, modification time put back", "every", FILE_READ_ATTEMPTS),
    ("rewritten, modification time put back", "once", 2),
    # A chmod or a new link moves the change time and the mode or link count: the bytes are the
    # same, and the read goes on at once.
    ("chmod", "once", 1),
    ("hard link", "once", 1),
    # Setting the access time moves only the change time, which a hidden rewrite would too.
    ("access time set", "once", 2),
]


@pytest.mark.parametrize(("how", "when", "reads"), IN_PLACE_CHANGES)
def test_a_file_changed_in_place_after_the_host_walked_it(
    emulated_gpu: EmulatedGpu, tmp_path: Path, how: str, when: str, reads: int
) -> None:
    """Same inode, size and modification time: what else changed decides whether the batch is
    read again, and a file that changes at every read is refused before any of it is decoded."""
    array = make_local_array(tmp_path)
    expected = cpu_result(array, Ellipsis)
    victim = _victim(tmp_path)
    content = victim.read_bytes()
    calls: list[int] = []

    class ChangedUnderTheRead(CpuEmulatedDevice):
        def read_files(self, reads: Any, staging: Any, work: Any) -> list[int]:
            calls.append(1)
            if when == "every" or len(calls) == 1:
                wait_for_a_new_change_time(victim)
                before = victim.stat()
                if how == "chmod":
                    victim.chmod(0o600 if before.st_mode & 0o777 != 0o600 else 0o644)
                elif how == "hard link":
                    os.link(victim, tmp_path / f"backup{len(calls)}")
                elif how == "access time set":
                    os.utime(victim, ns=(before.st_atime_ns + 1_000_000_000, before.st_mtime_ns))
                else:  # the same bytes: what a rewrite writes does not matter to the check
                    with open(victim, "r+b") as f:
                        f.write(content)
                    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
                after = victim.stat()
                assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
                    before.st_ino, before.st_size, before.st_mtime_ns,
                )  # fmt: skip
                assert after.st_ctime_ns != before.st_ctime_ns
            return super().read_files(reads, staging, work)

    emulated_gpu.device_class = ChangedUnderTheRead
    emulated_gpu.devices.clear()
    if when == "every":
        refused = f"changed while it was being read.*each of {reads} reads"
        with pytest.raises(CorruptChunkError, match=refused) as caught:
            open_on_gpu(array)[...]
        assert caught.value.key == "c/1/1"
        assert _zstd_streams(emulated_gpu) == 0
    else:
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    assert len(calls) == reads


def test_direct_reads_of_several_frames_go_to_the_cpu(
    emulated_gpu: EmulatedGpu, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    array = make_local_array(tmp_path)
    expected = cpu_result(array, Ellipsis)
    victim = _victim(tmp_path)
    decoded = bytes(Zstd().decode(victim.read_bytes()))
    half = len(decoded) // 2
    victim.write_bytes(bytes(Zstd().encode(decoded[:half])) + bytes(Zstd().encode(decoded[half:])))
    assert_bitwise_equal(cpu_result(array, Ellipsis), expected)  # the CPU path accepts it
    with caplog.at_level(logging.INFO, logger="gpuzarr"):
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    assert "follow the first frame" in caplog.text


@pytest.mark.parametrize("where", ["file", "memory"])
def test_malformed_frames_name_their_key(emulated_gpu: EmulatedGpu, tmp_path: Path, where: str) -> None:
    array = make_local_array(tmp_path) if where == "file" else make_array("v3-zstd-f4")
    key = "c/1/1"
    frame = bytearray(bytes(array.store.get(key)))  # type: ignore[arg-type]
    single = bool(frame[4] & 0x20)
    first = 5 + (0 if single else 1) + ((0, 2, 4, 8)[frame[4] >> 6] or int(single))  # the first block
    frame[first] |= 0x06  # reserved block type
    array.store.set(key, bytes(frame))
    with pytest.raises(CorruptChunkError, match="reserved block type") as info:
        open_on_gpu(array)[...]
    assert info.value.key == key
    assert _zstd_streams(emulated_gpu) == 0  # rejected before any batch


class _Failing(CpuEmulatedDevice):
    error: BaseException = ValueError("nvCOMP: the batch could not be decoded")
    broken: BaseException | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decode_error = self.error
        self.context_error = self.broken


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        RuntimeError("nvCOMP failed: cudaErrorLaunchFailure"),
        RuntimeError("Out of memory allocating 1073741824 bytes"),
        MemoryError("out of memory"),
    ],
)
def test_device_failures_pass_through_without_retries(
    emulated_gpu: EmulatedGpu, tmp_path: Path, error: BaseException
) -> None:
    assert is_device_failure(error)
    emulated_gpu.device_class = type("Failing", (_Failing,), {"error": error})
    with pytest.raises(type(error), match=str(error)):
        open_on_gpu(make_local_array(tmp_path))[...]
    assert not [name for name in emulated_gpu.names() if name.endswith(" alone")]


def test_bad_data_errors_are_retried_one_by_one_and_logged_once(
    emulated_gpu: EmulatedGpu, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert not is_device_failure(_Failing.error)
    array = make_local_array(tmp_path, "v3-blosc-zstd-bitshuffle-f8")
    emulated_gpu.device_class = _Failing
    with caplog.at_level(logging.DEBUG, logger="gpuzarr"):
        assert_bitwise_equal(open_on_gpu(array)[...], cpu_result(array, Ellipsis))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "batched" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert emulated_gpu.names().count("zstd alone") == _zstd_streams(emulated_gpu)


def test_a_broken_context_is_a_device_error(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    emulated_gpu.device_class = type(
        "Broken", (_Failing,), {"broken": RuntimeError("cudaErrorIllegalAddress: an illegal memory access")}
    )
    with pytest.raises(DeviceError, match=r"CUDA context failed.*cudaErrorIllegalAddress"):
        open_on_gpu(make_local_array(tmp_path))[...]
    assert not [name for name in emulated_gpu.names() if name.endswith(" alone")]


def test_data_errors_are_not_device_failures() -> None:
    assert not is_device_failure(ValueError("CUDA-looking text in a ValueError"))
    assert not is_device_failure(RuntimeError("Could not determine the decompressed size."))
    assert not is_device_failure(RuntimeError("nvcompErrorCannotDecompress"))
