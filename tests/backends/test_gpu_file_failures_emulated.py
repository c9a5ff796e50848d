"""Chunk files the device reads that the file system refuses or that go away, run on the
emulated device: a file removed after the host located it has the batch read again (the chunk
is then missing, as the host path reads it), and a file the system will not open or read is the
store's typed error naming the chunk, as on the host path, never a corrupt chunk."""

from __future__ import annotations

import contextlib
import errno
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cuda import executor, numpy_device
from gpuzarr.backends.cuda.launches import FileSpan
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice
from gpuzarr.errors import StoreError, StorePermissionError
from tests.permissions import NOBODY, without_permission

from .cuda_matrix import assert_bitwise_equal, make_local_array, open_on_gpu

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu

#: a zstd array (the host walks each frame in its file before the device reads it) and an
#: uncompressed one (only the device opens the file)
ROUTES = ["v3-zstd-f4", "v3-raw-u1"]
VICTIM = "c/1/1"


def _victim(tmp_path: Path) -> Path:
    return tmp_path / "a.zarr" / VICTIM


def _without_the_victim(array: gpuzarr.Array, tmp_path: Path) -> np.ndarray[Any, Any]:
    """What the host path reads once the victim's file is gone: its chunk is the fill value."""
    content = _victim(tmp_path).read_bytes()
    _victim(tmp_path).unlink()
    expected = np.asarray(gpuzarr.open(array.store, device="cpu")[...])
    _victim(tmp_path).write_bytes(content)
    return expected


@pytest.mark.parametrize("name", ROUTES)
def test_a_file_removed_before_the_device_reads_it_is_read_again_as_missing(
    emulated_gpu: EmulatedGpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    array = make_local_array(tmp_path, name)
    expected = _without_the_victim(array, tmp_path)
    fetches: list[int] = []
    fetch_batch = executor.fetch_batch

    def removed_after_the_host_located_it(*args: Any, **kwargs: Any) -> Any:
        fetched = fetch_batch(*args, **kwargs)
        fetches.append(1)
        if len(fetches) == 1:
            assert any(isinstance(f, FileSpan) and f.path.endswith(VICTIM) for f in fetched)
            _victim(tmp_path).unlink()  # what erasing the chunk (it equals the fill value) does
        return fetched

    monkeypatch.setattr(executor, "fetch_batch", removed_after_the_host_located_it)
    with gpuzarr.config.set(gpu_direct_reads=True):
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    assert len(fetches) == 2  # the batch, read again


def test_a_file_removed_under_the_device_read_is_read_again_as_missing(
    emulated_gpu: EmulatedGpu, tmp_path: Path
) -> None:
    array = make_local_array(tmp_path, "v3-raw-u1")
    expected = _without_the_victim(array, tmp_path)
    reads: list[int] = []

    class RemovedUnderTheRead(CpuEmulatedDevice):
        def read_files(self, reads_: Any, staging: Any, work: Any) -> list[int]:
            reads.append(1)
            if len(reads) == 1:
                _victim(tmp_path).unlink()
            return super().read_files(reads_, staging, work)

    emulated_gpu.device_class = RemovedUnderTheRead
    emulated_gpu.devices.clear()
    with gpuzarr.config.set(gpu_direct_reads=True):
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    assert len(reads) == 2


@contextlib.contextmanager
def _searchable_by_nobody(tmp_path: Path) -> Iterator[None]:
    """The folders down to the array searchable by ``nobody`` (pytest keeps them to root): a
    file whose own mode refuses it can then be looked at (``stat``), not opened. The group's
    bits too: ``without_permission`` changes the user only, and root's group owns them."""
    folders = [p for p in [*reversed(tmp_path.parents), tmp_path] if str(p).startswith(("/tmp/", str(tmp_path)))]
    modes = [(p, p.stat().st_mode & 0o7777) for p in folders]
    for p, mode in modes:
        p.chmod(mode | 0o055)
    try:
        yield
    finally:
        for p, mode in reversed(modes):
            p.chmod(mode)


@pytest.mark.parametrize("when", ["before the host locates it", "after the host located it"])
@pytest.mark.parametrize("name", ROUTES)
def test_a_file_the_system_will_not_open_is_the_stores_permission_error(
    emulated_gpu: EmulatedGpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, when: str
) -> None:
    """As the host path raises it: naming the chunk and the store, with the system's errno.
    Before, the host's own open (the link check) refuses; after (a chmod meanwhile), the
    device's open, or the host's walk of the frame the device will read."""
    if os.geteuid() != 0:
        pytest.skip("needs root to look at a file as another user")
    array = make_local_array(tmp_path, name)
    gpu_array, cpu_array = open_on_gpu(array), gpuzarr.open(array.store, device="cpu")
    for path in (tmp_path / "a.zarr").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    victim = _victim(tmp_path)

    def refuse() -> None:  # root's only: nobody may look at it, not open it
        euid = os.geteuid()
        os.seteuid(0)
        victim.chmod(0o600)
        os.seteuid(euid)

    if when.startswith("before"):
        refuse()
    else:
        fetch_batch = executor.fetch_batch

        def refused_after_the_host_located_it(*args: Any, **kwargs: Any) -> Any:
            fetched = fetch_batch(*args, **kwargs)
            assert any(isinstance(f, FileSpan) and f.path.endswith(VICTIM) for f in fetched)
            refuse()
            return fetched

        monkeypatch.setattr(executor, "fetch_batch", refused_after_the_host_located_it)
    with _searchable_by_nobody(tmp_path), gpuzarr.config.set(gpu_direct_reads=True):
        with without_permission(), pytest.raises(StorePermissionError) as on_gpu:
            assert os.geteuid() == NOBODY
            gpu_array[...]
        with without_permission(), pytest.raises(StorePermissionError) as on_cpu:
            cpu_array[...]
    for error in (on_gpu.value, on_cpu.value):
        assert (error.key, error.errno, error.url) == (VICTIM, errno.EACCES, str(tmp_path / "a.zarr"))
    if when.startswith("after"):
        assert f"read {victim}: Permission denied" in str(on_gpu.value)


def test_a_file_that_cannot_be_read_on_the_cpu_fallback_is_the_stores_error(tmp_path: Path) -> None:
    # The CPU decodes what the device could not from the file again: gone by then, the read
    # fails naming the chunk and the store (the batch has been read: too late to read it again).
    span = FileSpan(str(tmp_path / "a.zarr" / "c" / "0"), 0, 10, None, str(tmp_path / "a.zarr"))
    with pytest.raises(StoreError) as caught:
        executor._read_span("c/0", span)
    assert not isinstance(caught.value, StorePermissionError)
    assert (caught.value.key, caught.value.errno, caught.value.url) == ("c/0", errno.ENOENT, str(tmp_path / "a.zarr"))



def test_a_read_error_naming_no_file_is_reported_for_the_chunk_that_failed(
    emulated_gpu: EmulatedGpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error from a read (EIO) names no file, unlike a refused open: the device says
    which read failed, and the error names that chunk, not the batch's first. (The disk's
    error is made here: no file system here fails a read on demand.)"""
    array = make_local_array(tmp_path, "v3-raw-u1")
    read_file_span = numpy_device.read_file_span

    def failing(span: FileSpan) -> bytes:
        if span.path.endswith(VICTIM):
            raise OSError(errno.EIO, "Input/output error")
        return read_file_span(span)

    monkeypatch.setattr(numpy_device, "read_file_span", failing)
    with gpuzarr.config.set(gpu_direct_reads=True), pytest.raises(StoreError) as caught:
        open_on_gpu(array)[...]
    assert (caught.value.key, caught.value.errno) == (VICTIM, errno.EIO)
    assert str(_victim(tmp_path)) in str(caught.value)
    assert caught.value.__cause__ is not caught.value
