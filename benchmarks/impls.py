"""The implementations under test, behind one small interface.

Each implementation opens an array (outside the timed region) and then reads the whole array,
one crop, a batch of crops, or writes the whole array. ``unavailable()`` says why it cannot run
here (a missing optional package, no GPU); such implementations are skipped with that note.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class SkipImpl(Exception):
    """This implementation cannot handle this dataset (reported as skipped, not as an error)."""


def _missing(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except Exception as exc:
        return f"{module} not importable ({type(exc).__name__}: {exc})"
    return None


def _gpu_note() -> str | None:
    try:
        from gpuzarr.backends.select import gpu_available
    except Exception as exc:
        return f"gpuzarr not importable ({exc})"
    return None if gpu_available() else "no usable CUDA GPU (CuPy missing or no device)"


def _sync_gpu() -> None:
    import cupy

    cupy.cuda.get_current_stream().synchronize()


class Impl:
    name = ""
    device = "cpu"
    is_gpuzarr = False

    def unavailable(self) -> str | None:
        return None

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        yield

    def open(self, path: Path, zarr_format: int, write: bool = False) -> Any:
        raise NotImplementedError

    def read_full(self, h: Any) -> Any:
        return h[...]

    def read_one(self, h: Any, sel: tuple[slice, ...]) -> Any:
        return h[sel]

    def read_each(self, h: Any, sels: list[tuple[slice, ...]]) -> list[Any]:
        return [self.read_one(h, s) for s in sels]

    def read_batch(self, h: Any, sels: list[tuple[slice, ...]]) -> Any:
        return self.read_each(h, sels)

    def write_full(self, h: Any, data: np.ndarray[Any, Any]) -> None:
        h[...] = data

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        """The ``loader`` workload: batches of 32 crops as torch tensors, one batch after the
        other (each batch read as :meth:`read_batch` reads, stacked, ``torch.from_numpy``);
        the list of them when ``keep``, else how many (each dropped as a training step would)."""
        import torch

        from .loader_workload import batches_of, consume

        batches = (torch.from_numpy(np.stack([np.asarray(c) for c in self.read_batch(h, b)])) for b in batches_of(sels))
        return consume(batches, keep)

    def load_batches_cached(self, h: Any, sels: list[tuple[slice, ...]], keep: bool, cache_bytes: int) -> Any:
        """The ``loader-*-cached`` workloads: as :meth:`load_batches`, with a cache of decoded
        chunks of ``cache_bytes`` that lives from one call to the next (a training loop's later
        epochs); peers without such a cache are skipped."""
        raise SkipImpl("no cache of decoded chunks")

    def finish(self) -> None:
        """Called at the end of every timed call (GPU implementations synchronise here)."""

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        return np.asarray(x)


# -- gpuzarr ------------------------------------------------------------------------------------------


class GpuzarrCPU(Impl):
    name = "gpuzarr-cpu"
    is_gpuzarr = True
    _device = "cpu"

    def __init__(self) -> None:
        self._cached_loaders: dict[tuple[Any, ...], Any] = {}

    def unavailable(self) -> str | None:
        return _missing("gpuzarr")

    def open(self, path: Path, zarr_format: int, write: bool = False) -> Any:
        import gpuzarr
        from gpuzarr.errors import DeviceError

        try:
            return gpuzarr.open(str(path), mode="r+" if write else "r", device=self._device)
        except DeviceError as exc:
            raise SkipImpl(f"device {self._device!r} unavailable: {exc}") from exc
        except Exception as exc:
            if zarr_format == 2:
                raise SkipImpl(f"cannot open a v2 array: {type(exc).__name__}: {exc}") from exc
            raise

    def read_full(self, h: Any) -> Any:
        return h.read()

    def read_batch(self, h: Any, sels: list[tuple[slice, ...]]) -> Any:
        return h.read_batch(sels)

    def _new_loader(self, h: Any, sels: list[tuple[slice, ...]], **options: Any) -> Any:
        """A CropLoader over ``sels`` in their order, read ahead two batches, handing out torch
        tensors (CuPy arrays on a GPU)."""
        from gpuzarr.loader import CropLoader

        from .loader_workload import LOADER_BATCH

        crops = [(0, tuple(s.start for s in sel)) for sel in sels]
        shape = tuple(s.stop - s.start for s in sels[0])
        output = "torch" if self._device == "cpu" else "cupy"
        return CropLoader(h, shape, LOADER_BATCH, sampler=crops, shuffle=False, output=output, prefetch=2, **options)

    def _kept_loader(self, h: Any, sels: list[tuple[slice, ...]], **options: Any) -> Any:
        """One loader per array, crops and options, kept from call to call (a training loop
        keeps its loader from epoch to epoch)."""
        key = (id(h), tuple((s.start, s.stop) for sel in sels for s in sel), tuple(sorted(options.items())))
        loader = self._cached_loaders.get(key)
        if loader is None:
            loader = self._cached_loaders[key] = self._new_loader(h, sels, **options)
        return loader

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        from .loader_workload import consume

        return consume((batch.data for batch in self._new_loader(h, sels)), keep)

    def load_batches_cached(self, h: Any, sels: list[tuple[slice, ...]], keep: bool, cache_bytes: int) -> Any:
        """One loader per array and crops, kept from call to call with its chunk cache (the
        device cache on a GPU, the host cache on the CPU); every call is one more epoch."""
        from .loader_workload import consume

        caches = {"cache_bytes": cache_bytes} if self._device == "cpu" else {"device_cache_bytes": cache_bytes}
        return consume((batch.data for batch in self._kept_loader(h, sels, **caches)), keep)


def loader_workers() -> int:
    """The worker processes of ``gpuzarr-cpu-workers``: one per CPU, at most 8 (each then reads
    with ``concurrency // workers`` threads)."""
    return max(1, min(8, os.cpu_count() or 1))


class GpuzarrCPUWorkers(GpuzarrCPU):
    """``CropLoader(workers=N)`` for the loader workloads only: worker processes, each reading
    whole batches into shared memory. One loader per array and crops is kept from call to call,
    as a training loop keeps it from epoch to epoch, so its workers start once (in the warm-up
    call) rather than in every timed one."""

    name = "gpuzarr-cpu-workers"

    def _only_loader(self) -> SkipImpl:
        return SkipImpl("loader workloads only (CropLoader worker processes)")

    def read_full(self, h: Any) -> Any:
        raise self._only_loader()

    def read_one(self, h: Any, sel: tuple[slice, ...]) -> Any:
        raise self._only_loader()

    def read_batch(self, h: Any, sels: list[tuple[slice, ...]]) -> Any:
        raise self._only_loader()

    def write_full(self, h: Any, data: np.ndarray[Any, Any]) -> None:
        raise self._only_loader()

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        return self.load_batches_cached(h, sels, keep, 0)

    def load_batches_cached(self, h: Any, sels: list[tuple[slice, ...]], keep: bool, cache_bytes: int) -> Any:
        from .loader_workload import consume

        loader = self._kept_loader(h, sels, cache_bytes=cache_bytes, workers=loader_workers())
        return consume((batch.data for batch in loader), keep)


class GpuzarrGPU(GpuzarrCPU):
    name = "gpuzarr-gpu"
    device = "gpu"
    _device = "gpu"

    def unavailable(self) -> str | None:
        return _missing("gpuzarr") or _gpu_note()

    def read_full(self, h: Any) -> Any:
        from gpuzarr.errors import DeviceError

        try:
            return h.read()
        except DeviceError as exc:
            raise SkipImpl(f"GPU read path unavailable: {exc}") from exc

    def finish(self) -> None:
        _sync_gpu()

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        import cupy

        return cupy.asnumpy(x) if isinstance(x, cupy.ndarray) else np.asarray(x)


class GpuzarrGPUDirect(GpuzarrGPU):
    """``gpu_direct_reads=True``: kvikio reads local chunk files into device memory, with or
    without GPUDirect Storage. Against ``gpuzarr-gpu-host`` it is the measurement that decides
    what ``gpu_direct_reads="auto"`` should pick. Both variants send every read through the
    device path (``gpu_small_read_chunks=0``), so against ``gpuzarr-gpu`` they also show what the
    small-read rule changes."""

    name = "gpuzarr-gpu-direct"
    direct_reads = True

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        from gpuzarr import config

        with config.set(gpu_direct_reads=self.direct_reads, gpu_small_read_chunks=0):
            yield


class GpuzarrGPUHost(GpuzarrGPUDirect):
    """``gpu_direct_reads=False``: every byte read on the host and copied in the batch's pinned
    staging buffer."""

    name = "gpuzarr-gpu-host"
    direct_reads = False


# -- zarr-python ---------------------------------------------------------------------------------------


class ZarrPython(Impl):
    name = "zarr-python"

    def unavailable(self) -> str | None:
        return _missing("zarr")

    def open(self, path: Path, zarr_format: int, write: bool = False) -> Any:
        import zarr

        with self.context():
            return zarr.open_array(store=str(path), mode="r+" if write else "r", zarr_format=zarr_format)

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        """What a PyTorch user writes today: a map-style dataset of crops in a DataLoader with
        two (forked) workers, collated into batches."""
        from torch.utils.data import DataLoader

        from .loader_workload import LOADER_BATCH, CropsDataset, consume

        return consume(DataLoader(CropsDataset(h, sels), batch_size=LOADER_BATCH, num_workers=2), keep)


class ZarrPythonZarrs(ZarrPython):
    name = "zarr-python+zarrs"

    def unavailable(self) -> str | None:
        return _missing("zarr") or _missing("zarrs")

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        import zarr

        with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
            yield

    def open(self, path: Path, zarr_format: int, write: bool = False) -> Any:
        arr = super().open(path, zarr_format, write)
        pipeline = type(arr._async_array.codec_pipeline).__name__
        if "Zarrs" not in pipeline:
            raise SkipImpl(f"zarrs pipeline not selected (got {pipeline})")
        return arr

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        return Impl.load_batches(self, h, sels, keep)  # in this process: zarrs decodes in parallel itself


class ZarrPythonGPU(ZarrPython):
    name = "zarr-python-gpu"
    device = "gpu"

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        raise SkipImpl("loader workload: the GPU peers are not measured (CPU peers only)")

    def load_batches_cached(self, h: Any, sels: list[tuple[slice, ...]], keep: bool, cache_bytes: int) -> Any:
        raise SkipImpl("loader workload: the GPU peers are not measured (CPU peers only)")

    def unavailable(self) -> str | None:
        return _missing("zarr") or _gpu_note()

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        import zarr

        with zarr.config.enable_gpu():
            yield

    def finish(self) -> None:
        _sync_gpu()

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        import cupy

        return cupy.asnumpy(x) if isinstance(x, cupy.ndarray) else np.asarray(x)


# -- TensorStore -----------------------------------------------------------------------------------------


class TensorStore(Impl):
    name = "tensorstore"

    def __init__(self) -> None:
        self._cached: dict[tuple[Any, ...], Any] = {}

    def unavailable(self) -> str | None:
        return _missing("tensorstore")

    def open(self, path: Path, zarr_format: int, write: bool = False) -> Any:
        import tensorstore as ts

        spec = {
            "driver": "zarr3" if zarr_format == 3 else "zarr",
            "kvstore": {"driver": "file", "path": str(path)},
        }
        # No chunk cache (TensorStore's default): every read decodes, as for the others.
        return ts.open(spec, open=True, read=True, write=write).result()

    def _out(self, x: Any) -> Any:
        return x

    def read_full(self, h: Any) -> Any:
        return self._out(h.read().result())

    def read_one(self, h: Any, sel: tuple[slice, ...]) -> Any:
        return self._out(h[sel].read().result())

    def read_batch(self, h: Any, sels: list[tuple[slice, ...]]) -> Any:
        futures = [h[s].read() for s in sels]  # all in flight at once
        return [self._out(f.result()) for f in futures]

    def write_full(self, h: Any, data: np.ndarray[Any, Any]) -> None:
        h.write(data).result()

    def load_batches_cached(self, h: Any, sels: list[tuple[slice, ...]], keep: bool, cache_bytes: int) -> Any:
        """The same array opened again with a ``cache_pool`` of ``cache_bytes`` (kept from call
        to call) and without rechecking cached chunks against the files, as gpuzarr's caches."""
        import tensorstore as ts

        key = (id(h), cache_bytes)
        cached = self._cached.get(key)
        if cached is None:
            context = ts.Context({"cache_pool": {"total_bytes_limit": cache_bytes}})
            cached = ts.open(h.spec(minimal_spec=True), context=context, recheck_cached_data=False, open=True).result()
            self._cached[key] = cached
        return self.load_batches(cached, sels, keep)


class TensorStoreCuPy(TensorStore):
    name = "tensorstore+cupy"
    device = "gpu"

    def load_batches(self, h: Any, sels: list[tuple[slice, ...]], keep: bool) -> Any:
        raise SkipImpl("loader workload: the GPU peers are not measured (CPU peers only)")

    def load_batches_cached(self, h: Any, sels: list[tuple[slice, ...]], keep: bool, cache_bytes: int) -> Any:
        raise SkipImpl("loader workload: the GPU peers are not measured (CPU peers only)")

    def unavailable(self) -> str | None:
        return _missing("tensorstore") or _gpu_note()

    def _out(self, x: Any) -> Any:
        import cupy

        return cupy.asarray(x)

    def write_full(self, h: Any, data: np.ndarray[Any, Any]) -> None:
        raise SkipImpl("write: same as tensorstore (host data)")

    def finish(self) -> None:
        _sync_gpu()

    def to_numpy(self, x: Any) -> np.ndarray[Any, Any]:
        import cupy

        return cupy.asnumpy(x) if isinstance(x, cupy.ndarray) else np.asarray(x)


CPU_IMPLS: list[type[Impl]] = [GpuzarrCPU, GpuzarrCPUWorkers, ZarrPython, ZarrPythonZarrs, TensorStore]
GPU_IMPLS: list[type[Impl]] = [GpuzarrGPU, GpuzarrGPUDirect, GpuzarrGPUHost, ZarrPythonGPU, TensorStoreCuPy]
ALL_IMPL_NAMES = [c.name for c in CPU_IMPLS + GPU_IMPLS]


def implementations(device: str) -> list[Impl]:
    classes = CPU_IMPLS + (GPU_IMPLS if device == "gpu" else [])
    return [c() for c in classes]
