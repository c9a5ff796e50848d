"""CropLoader on a real GPU: batches equal to NumPy slicing as CuPy arrays and PyTorch tensors,
the hand-over from the loader's side stream to PyTorch's current stream, reuse of buffers only
after the consumer's stream is done with them, and the device chunk cache. Skipped without a
usable GPU (and the torch parts without a CUDA build of PyTorch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.loader import CropLoader

from ..loader.helpers import assert_batch_matches, make_volume, values

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.gpu

CROP = (16, 16, 16)


@pytest.fixture(scope="module")
def volumes(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]]:
    root: Path = tmp_path_factory.mktemp("loader-gpu")
    sources = [values((70, 66, 50), salt=1), values((40, 80, 33), salt=2)]
    arrays = [
        make_volume(gpuzarr.LocalStore(root / "a.zarr"), sources[0], "v3-sharded-zstd", device="cpu"),
        make_volume(gpuzarr.LocalStore(root / "b.zarr"), sources[1], "v2-blosc-lz4", device="cpu"),
    ]
    return arrays, sources


def _torch_cuda() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here (a CPU build)")
    return torch


@pytest.mark.parametrize(
    ("cache", "options"),
    [
        (0, {}),
        (64 << 20, {}),
        # the second decode lane, with windows of about one batch (chunks of 8^3, 1 KiB) so that
        # a pass holds several of them
        (0, {"decode_ahead_lanes": 2, "decode_ahead_bytes": 512 << 10}),
        (64 << 20, {"decode_ahead_lanes": 2, "decode_ahead_bytes": 512 << 10}),
    ],
)
def test_cupy_batches_equal_numpy_slicing(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]], cache: int, options: dict[str, Any]
) -> None:
    import cupy

    arrays, sources = volumes
    loader = CropLoader(
        arrays, CROP, 8, crops_per_epoch=64, device="gpu", output="cupy", device_cache_bytes=cache, **options
    )
    for batch in loader:
        assert isinstance(batch.data, cupy.ndarray)
        cupy.cuda.get_current_stream().synchronize()
        host = type(batch)(batch.data.get(), batch.origins, batch.volume_index, batch.index)
        assert_batch_matches(host, sources, CROP)


def test_torch_batches_arrive_on_the_current_stream_without_a_copy(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]],
) -> None:
    torch = _torch_cuda()
    arrays, sources = volumes
    loader = CropLoader(arrays, CROP, 8, crops_per_epoch=96, device="gpu", output="torch", prefetch=3)
    stream = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(stream):
        for batch in loader:
            assert batch.data.is_cuda and batch.data.shape == (len(batch), *CROP)
            # work queued on the consumer's stream, read without a host wait in between
            sums.append((batch.data.to(torch.int64).sum(dim=(1, 2, 3)), batch.origins, batch.volume_index))
    stream.synchronize()
    for total, origins, volume_index in sums:
        for s, o, v in zip(total.cpu().numpy(), origins, volume_index):
            box = tuple(slice(int(a), int(a) + c) for a, c in zip(o, CROP))
            assert int(s) == int(sources[int(v)][box].astype(np.int64).sum())


def test_kept_torch_batches_are_never_overwritten(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]],
) -> None:
    torch = _torch_cuda()
    arrays, sources = volumes
    loader = CropLoader(arrays, CROP, 4, crops_per_epoch=48, device="gpu", output="torch", prefetch=2)
    kept = list(loader)
    torch.cuda.synchronize()
    for batch in kept:
        host = type(batch)(batch.data.cpu().numpy(), batch.origins, batch.volume_index, batch.index)
        assert_batch_matches(host, sources, CROP)


def _codecs_made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """From now on, every nvCOMP codec made, as (algorithm, stream handle, thread)."""
    import threading

    from gpuzarr.backends.cuda import cupy_device

    made: list[tuple[str, int, int]] = []
    new_codec = cupy_device._new_codec

    def counted(algorithm: str, device: int, stream: int) -> Any:
        made.append((algorithm, stream, threading.get_ident()))
        return new_codec(algorithm, device, stream)

    monkeypatch.setattr(cupy_device, "_new_codec", counted)
    return made


def test_the_loaders_stream_makes_each_codec_once(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The side stream's nvCOMP codecs serve every read of the loader, one per algorithm and
    thread, and go with the loader."""
    import gc

    from gpuzarr.backends.cuda import cupy_device
    from gpuzarr.loader.ordering import CudaOrdering

    made = _codecs_made(monkeypatch)
    arrays, sources = volumes
    # windows of about one batch, so that the pass is many reads on the loader's stream
    loader = CropLoader(arrays, CROP, 8, crops_per_epoch=64, device="gpu", output="numpy", decode_ahead_bytes=512 << 10)
    for _ in range(2):
        for batch in loader:
            assert_batch_matches(batch, sources, CROP)
    ordering = loader._ordering
    assert isinstance(ordering, CudaOrdering)
    handle = int(ordering.stream.ptr)
    del ordering
    ours = [m for m in made if m[1] == handle]
    assert ours, "no codec was made for the loader's stream"
    assert len(ours) == len(set(ours)), f"codecs made again for the loader's stream: {ours}"
    assert cupy_device._CODECS.keeps(handle)
    loader.close()
    del loader, batch  # nothing of the loader's is left referenced here
    gc.collect()
    assert not cupy_device._CODECS.keeps(handle)  # the cache lets the stream go at its next call


def test_the_second_lane_decodes_on_a_stream_of_its_own(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``decode_ahead_lanes=2``: the lane's windows are read on a stream other than the loader's,
    whose codecs are kept from read to read (each thread's made once; every pass has a lane
    thread of its own); three passes of windows of about one batch (the lane's memory going back
    to its pool window after window, pass after pass) equal NumPy slicing, with a device cache
    too small for the volume filled from the lane's windows."""
    from gpuzarr.backends.cuda import cupy_device
    from gpuzarr.loader.ordering import CudaOrdering

    made = _codecs_made(monkeypatch)
    arrays, sources = volumes
    loader = CropLoader(
        arrays, CROP, 8, crops_per_epoch=96, device="gpu", output="numpy", decode_ahead_bytes=512 << 10,
        decode_ahead_lanes=2, device_cache_bytes=128 << 10,
    )  # fmt: skip
    for _ in range(3):
        for batch in loader:
            assert_batch_matches(batch, sources, CROP)
    ordering = loader._ordering
    assert isinstance(ordering, CudaOrdering)
    lane = ordering.decode_lane()
    assert isinstance(lane, CudaOrdering) and lane is ordering.decode_lane()
    handle = int(lane.stream.ptr)
    assert handle != int(ordering.stream.ptr)
    on_lane = [m for m in made if m[1] == handle]
    assert on_lane, "no codec was made for the lane's stream"
    assert len(on_lane) == len(set(on_lane)), f"codecs made again for the lane's stream: {on_lane}"
    assert cupy_device._CODECS.keeps(handle)
    loader.close()


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def test_a_lane_window_is_not_overwritten_while_a_slow_loader_stream_reads_it(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader's stream made slow (a kernel spinning about 5 ms before each batch is put
    together), windows of about one batch on the second lane: the memory a window leaves goes
    back to the lane stream's pool while the loader's stream may still be batches behind, and
    the lane's next windows may take it at once. Without the lane's wait for the loader's stream
    (``ChunkAssembler._release_ahead``) they would overwrite chunks not yet read."""
    import cupy

    from gpuzarr.loader.ordering import CudaOrdering

    arrays, sources = volumes
    spin = cupy.RawKernel(_SPIN, "spin")
    clock_khz = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["clockRate"]
    assemble = CudaOrdering.assemble

    def slow_assemble(self: CudaOrdering, out: Any, chunks: Any, pieces: Any, copies: Any = None) -> None:
        with self._side.activate():
            spin((1,), (1,), (np.int64(clock_khz * 5),))
        assemble(self, out, chunks, pieces, copies)

    monkeypatch.setattr(CudaOrdering, "assemble", slow_assemble)
    loader = CropLoader(
        arrays, CROP, 8, crops_per_epoch=96, device="gpu", output="numpy", decode_ahead_bytes=512 << 10,
        decode_ahead_lanes=2,
    )  # fmt: skip
    for _ in range(2):
        for batch in loader:
            assert_batch_matches(batch, sources, CROP)
    loader.close()


def test_a_cpu_loaders_batch_pins_for_asynchronous_copies(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]],
) -> None:
    torch = _torch_cuda()
    arrays, sources = volumes
    batch = next(iter(CropLoader(arrays, CROP, 4, crops_per_epoch=4, device="cpu", output="torch")))
    pinned = batch.pin_memory()
    assert pinned.data.is_pinned() and not batch.data.is_pinned()
    on_gpu = pinned.data.to("cuda", non_blocking=True)
    torch.cuda.current_stream().synchronize()
    assert_batch_matches(type(batch)(on_gpu.cpu(), batch.origins, batch.volume_index, 0), sources, CROP)


def test_bfloat16_batches_arrive_as_bfloat16_tensors_on_the_device(tmp_path: Path) -> None:
    """CuPy holds no bfloat16: the device reads the int16 of its bits (nvCOMP and the kernels
    never look at values) and PyTorch gets a bfloat16 CUDA tensor of that memory."""
    import ml_dtypes

    torch = _torch_cuda()
    source = (values((40, 36, 30), salt=4).astype("float32") / 8).astype(ml_dtypes.bfloat16)
    volume = make_volume(gpuzarr.LocalStore(tmp_path / "bf.zarr"), source, "v3-sharded-zstd", device="cpu")
    loader = CropLoader(volume, CROP, 4, crops_per_epoch=12, device="gpu", output="torch")
    for batch in loader:
        assert batch.data.dtype == torch.bfloat16 and batch.data.is_cuda
        host = batch.data.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
        assert_batch_matches(type(batch)(host, batch.origins, batch.volume_index, batch.index), [source], CROP)
