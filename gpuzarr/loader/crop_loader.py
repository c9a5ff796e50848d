"""``CropLoader``: batches of crops of Zarr volumes for training and inference.

Batches are read ahead on a background thread (on a GPU: on a side CUDA stream) and handed over
as PyTorch tensors, CuPy arrays or NumPy arrays.

The pieces: :mod:`.volumes` checks the input, :mod:`.sampling` decides the crops of each epoch
and rank, :mod:`.reading` reads one batch (one ``read_batch`` per volume), :mod:`.chunked` and
:mod:`.cache` serve crops from cached chunks, :mod:`.prefetch` runs the background thread and
the buffer pool, :mod:`.ordering` orders the GPU work and hands batches over.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import config
from ..backends.cpu import torch_types
from ..backends.cuda.launch_checks import MAX_NDIM
from ..backends.cuda.phases import phase
from ..errors import DeviceError, InvalidArgumentError, PassEndedError
from ..metadata.dtypes import is_variable_length
from ..store.memory import MemoryStore
from .cache import CacheStats, ChunkCache
from .chunked import ChunkAssembler, all_regular, check_cacheable
from .ordering import OUTPUTS, HostOrdering, convert, ordering_for
from .prefetch import Background, BufferPool, Producer, Ready, read_one
from .reading import BatchReader
from .sampling import (
    Crops,
    EpochBatches,
    RandomSampler,
    Sampler,
    epoch_rng,
    grid_sampler,
    grid_tile_count,
    listed_sampler,
    rank_share,
)
from .shared import SharedSegments
from .volumes import UNNAMED, base_array, check_volumes, data_generation
from .workers import TASKS_PER_WORKER, Generations, ProcessProducer, WorkerProcesses, WorkerSpec

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import numpy.typing as npt

#: the version of the ``state_dict`` layout
STATE_VERSION = 1
#: the most batches a CPU loader on threads reads at once by default (see ``concurrent_batches``)
DEFAULT_CONCURRENT_BATCHES = 4
#: the most decoded bytes a GPU loader decodes ahead by default (see ``decode_ahead_bytes``): the
#: GPU batch budget's cap until 2026-11-28, where the default was measured. The budget's cap is now
#: 1 GiB; a window four times larger would keep four times the chunks on the device and make the
#: first batch of each window wait for all of them, which no run has measured yet.
DEFAULT_AHEAD_BYTES = 256 * 1024 * 1024

_forked = False


def _mark_forked() -> None:
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


@dataclass(frozen=True)
class Batch:
    """One batch of crops.

    Attributes
    ----------
    data
        ``(N, *crop_shape)`` on the loader's device, as the loader's output type (a PyTorch
        tensor, CuPy array or NumPy array); for dict input, a dict of them by field name.
        Its buffer is read into again only once nothing refers to it any more (see
        ``reuse_buffers`` of :class:`CropLoader`), so a batch may be kept.
    origins
        ``(N, ndim)`` int64: the origin of each crop in its volume.
    volume_index
        ``(N,)`` int64: the volume of each crop.
    index
        The batch's position in this rank's epoch.
    """

    data: Any
    origins: npt.NDArray[np.int64]
    volume_index: npt.NDArray[np.int64]
    index: int

    def __len__(self) -> int:
        return int(self.volume_index.shape[0])

    def pin_memory(self) -> Batch:
        """The batch with its CPU tensors copied into page-locked memory (``Tensor.pin_memory``).

        From there ``.to("cuda", non_blocking=True)`` copies without holding up the host.
        ``DataLoader(pin_memory=True)`` calls it on each batch of :meth:`CropLoader.as_dataset`.
        NumPy arrays, CuPy arrays and tensors already on a GPU are kept as they are.
        """
        torch = sys.modules.get("torch")  # a tensor exists only where torch is imported

        def pinned(field: Any) -> Any:
            if torch is not None and isinstance(field, torch.Tensor) and field.device.type == "cpu":
                return field.pin_memory()
            return field

        data = {name: pinned(f) for name, f in self.data.items()} if isinstance(self.data, dict) else pinned(self.data)
        return dataclasses.replace(self, data=data)


def _check_torch_types(dtypes: dict[str, np.dtype[Any]]) -> None:
    """Refuse ``output="torch"`` at once where PyTorch lacks a field's type.

    The field is named. PyTorch has none of strings, datetimes, ``int4`` or ``float8_e3m4``. Its machine-learning
    floats (``bfloat16``, ``float8_e4m3fn`` ...) come as tensors of their type.
    """
    try:
        import torch  # noqa: F401  (needed by every batch)
    except ImportError:
        # Said at the first batch (``ordering.convert``): a loader is made, measured and
        # resumed (``len``, ``state_dict``) without PyTorch too.
        return
    for name, dtype in dtypes.items():
        if not torch_types.supports(dtype):
            field = "" if name == UNNAMED else f"field {name!r}: "
            raise InvalidArgumentError(
                f"output='torch': {field}PyTorch has no tensor type for the data type {dtype}; pass output='numpy'"
            )


def _check_shareable(dtypes: dict[str, np.dtype[Any]]) -> None:
    """Refuse worker processes for a field of Python objects (variable-length strings, bytes).

    The workers read batches into shared memory, which holds fixed-size elements only. The
    field is named; it failed at the first batch with NumPy's "Cannot change data-type for
    array of references".
    """
    for name, dtype in dtypes.items():
        if is_variable_length(dtype):
            field = "" if name == UNNAMED else f"field {name!r}: "
            raise InvalidArgumentError(
                f"workers: {field}{dtype} elements are Python objects, which worker processes cannot hand over "
                "through shared memory; pass workers=0 (the loader's threads read them)"
            )


def _outputs_holding(dtypes: list[np.dtype[Any]]) -> str:
    """The outputs that hold batches of ``dtypes`` (numpy always; torch where it has their types)."""
    try:
        torch_holds = all(torch_types.supports(d) for d in dtypes)
    except ImportError:
        torch_holds = False
    return "output='torch' (a tensor of that type) or output='numpy'" if torch_holds else "output='numpy'"


def _distributed(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """The rank and world size.

    As given, else torch.distributed's when it is initialised (it cannot be when torch was never
    imported), else 0 and 1.
    """
    if rank is None or world_size is None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InvalidArgumentError(f"{name}: expected an integer, got {value!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError(
            f"rank {rank} / world_size {world_size}: expected world_size >= 1 and 0 <= rank < world_size"
        )
    return int(rank), int(world_size)


#: The most crops an epoch holds: their origins are drawn (and shuffled) for the whole epoch
#: at once, 24 bytes each for 3-d crops (a volume declared 2**20 voxels a side made the default,
#: its grid tiles, 2**42 crops, and NumPy asked for 32 TiB).
MAX_EPOCH_CROPS = 1 << 26


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InvalidArgumentError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _decode_ahead_lanes(lanes: int, device: str, prefetch: int, ahead_bytes: int | None) -> int:
    """``decode_ahead_lanes``, checked: 1, or 2 where a GPU loader decodes ahead."""
    if isinstance(lanes, bool) or lanes not in (1, 2):
        raise InvalidArgumentError(f"decode_ahead_lanes: expected 1 or 2, got {lanes!r}")
    if lanes == 2 and (device == "cpu" or prefetch == 0 or ahead_bytes == 0):
        raise InvalidArgumentError(
            "decode_ahead_lanes: a second lane decodes ahead on a background thread, which GPU loaders with "
            f"prefetch >= 1 and decode_ahead_bytes other than 0 do (this loader: device {device!r}, prefetch "
            f"{prefetch}, decode_ahead_bytes {ahead_bytes}); pass 1"
        )
    return lanes


#: The most dimensions a GPU loader's crops have where it puts them together from chunks (a
#: cache, decoding ahead): its box copies write batches of at most ``MAX_NDIM`` dimensions.
MAX_ASSEMBLED_NDIM = MAX_NDIM - 1


def _check_assembled_on_the_device(ndim: int) -> None:
    """Refuse caches and decoding ahead on a GPU for crops of more dimensions than it assembles.

    An 8-d volume raised a bare ValueError at the first batch, naming neither volume nor crop.
    """
    if ndim > MAX_ASSEMBLED_NDIM:
        raise InvalidArgumentError(
            f"cache_bytes, device_cache_bytes, decode_ahead_bytes: on a GPU these put crops together from "
            f"chunks, which takes crops of at most {MAX_ASSEMBLED_NDIM} dimensions; these have {ndim} (pass 0 "
            "for each, or read on the CPU)"
        )


def _check_concurrent_batches(device: str, prefetch: int, workers: int) -> None:
    """Refuse ``concurrent_batches`` > 1 where batches are not read on this process's threads."""
    if device != "cpu":
        raise InvalidArgumentError(
            f"concurrent_batches: a loader on {device} reads one batch at a time on its CUDA stream and decodes "
            "the chunks of the next batches ahead instead (pass 1 or None)"
        )
    if workers:
        raise InvalidArgumentError(
            "concurrent_batches: with workers, each worker process reads whole batches (pass 1 or None, or workers=0)"
        )
    if prefetch == 0:
        raise InvalidArgumentError(
            "concurrent_batches: batches are read at once on background threads, which prefetch=0 turns off "
            "(pass prefetch >= 1, or concurrent_batches 1 or None)"
        )


def _in_forked_child() -> bool:
    """Whether this process is a fork of one that may hold a CUDA context.

    That is an ``os.fork`` child or a forked torch DataLoader worker.
    """
    if _forked:
        return True
    cuda = sys.modules.get("torch.cuda")
    return bool(cuda is not None and getattr(cuda, "_is_in_bad_fork", lambda: False)())


class CropLoader:
    """Batches of fixed-shape crops of one or more Zarr volumes, read ahead in the background.

    Parameters
    ----------
    arrays
        A :class:`gpuzarr.Array`, a list of Arrays (one volume each), or a dict of field name
        -> Array or list of Arrays: paired volumes, cropped at the same origins (e.g.
        ``{"image": images, "label": labels}``). Volumes of one field share dtype and rank;
        paired volumes share their shape.
    crop_shape
        The shape of every crop, e.g. ``(64, 64, 64)``; it must fit inside every volume.
    batch_size
        Crops per batch.
    sampler
        ``"random"``: origins uniform over all valid origins of all volumes (with replacement).
        ``"grid"``: tiles of ``crop_shape`` at its multiples, then the tiles flush with the
        far edges, so they cover every voxel (for inference; pass ``shuffle=False`` to keep
        them in volume order). Or an iterable of ``(volume_index, origin)`` pairs.
    crops_per_epoch
        Crops in one epoch (across all ranks). Default: the number of grid tiles across all
        volumes (for a list of crops: its length). The grid and a list are repeated to reach it.
    seed
        The crops of an epoch are a function of ``(seed, epoch, rank, world_size)`` only.
    shuffle
        ``"grid"`` and lists: a new order of the crops every epoch.
    drop_last
        As ``torch.utils.data.DistributedSampler`` and ``DataLoader`` use it: cut the epoch to a
        multiple of ``world_size`` (instead of padding it with its first crops), and drop a last
        batch smaller than ``batch_size``.
    rank, world_size
        This process's share of each epoch. Default: torch.distributed's rank and world size
        when it is initialised, else 0 and 1. The shares are disjoint and together make the
        epoch.
    device
        ``"auto"`` (where the arrays are), ``"cpu"``, ``"gpu"``, ``"cuda:N"``. Arrays on another
        device are reopened on this one (nothing is read again).
    output
        ``"torch"`` (tensors, handed over with ``torch.from_dlpack`` on a GPU: no copy),
        ``"cupy"`` (GPU only) or ``"numpy"`` (a GPU loader copies to the host). Without
        ``"torch"``, torch is never imported.
    prefetch
        Batches read ahead on the background thread (0: each batch is read when asked for,
        on the calling thread).
    cache_bytes
        Budget of a host LRU cache of decoded chunks (0: none). With a cache, crops are
        assembled from whole cached chunks; without, each batch reads exactly its crops.
    device_cache_bytes
        Budget of a device LRU cache of decoded chunks (GPU only; 0: none). Looked up before the
        host cache.
    decode_ahead_bytes
        GPU loaders with ``prefetch`` > 0: the chunks of the next batches (at most 16) are
        decoded together, up to this many bytes of decoded chunks, and each batch is then put
        together from them on the device. A batched GPU decode takes about as long as its
        longest stream whatever their number, so this multiplies what one decode delivers.
        Default (None): the GPU batch budget (``gpuzarr.config`` ``gpu_batch_bytes``), at most
        256 MiB, where every volume has a regular chunk grid, else off; 0: off (each batch reads
        exactly its crops). The CPU decodes each batch's crops on its threads and takes only 0.
    decode_ahead_lanes
        GPU loaders decoding ahead: 1 (the default): the chunks of the next batches are
        decoded once the batches decoded before are put together and queued; 2: a second
        thread decodes them meanwhile, so that the next decode overlaps putting batches
        together and the consumer's work on them. Each of the two windows then gets half of
        ``decode_ahead_bytes``. The second lane reads on a CUDA stream of its own, so that its
        decode overlaps the batches put together meanwhile on the device too. Not yet measured
        on a GPU in this form; the two threads share one interpreter lock.
    reuse_buffers
        True (the default): batches are read into a pool of reused buffers, with no copy on
        the way to the consumer. A buffer is reused only once nothing refers to its batch any
        more (no Batch, tensor, array or view of them; the pool reads the reference count of
        the object owning the memory), so a kept batch is never overwritten: a loop that drops
        each batch reuses ``prefetch + 3`` buffers (and one more for each further batch read
        at once, see ``concurrent_batches``), one that keeps batches gets new ones.
        False: a new buffer for every batch.
    workers
        CPU loaders: worker processes that read whole batches (0, the default: threads of this
        process read them). Threads share one interpreter lock, which a batch of small crops
        (hundreds of chunk reads) passes between them thousands of times; on many cores that,
        not decoding, bounds a threaded loader. Each worker (started with ``spawn``, at the
        first iteration, and kept until :meth:`close`) reads batches straight into shared
        memory that the loader hands out without a copy, with ``concurrency // workers``
        threads (``gpuzarr.config``) and ``cache_bytes // workers`` of host cache. Each worker
        holds up to two batches at once, whatever ``prefetch`` says. A script that starts
        workers needs the ``if __name__ == "__main__":`` guard that ``spawn`` asks for.
    concurrent_batches
        CPU loaders on threads with ``prefetch`` > 0: how many batches background threads read
        at once, each with its share of the CPU workers (``gpuzarr.config`` ``concurrency``
        split evenly, at least one each), handed over in order. One batch alone leaves cores
        idle while it is planned, while its shards are fetched and while its last chunks
        finish; batches read side by side fill those gaps. Default (None):
        ``min(4, concurrency)``, and 1 with a host cache (batches read at once would each read
        the chunks that all of them miss). Each batch being read holds a buffer of its own, so
        the pool keeps ``concurrent_batches - 1`` more (see ``reuse_buffers``). GPU loaders
        read one batch at a time on their stream (and decode ahead instead); with ``workers``
        each worker process reads whole batches.

    Notes
    -----
    Each batch is one I/O plan: the crops of a batch are grouped by volume (a stable sort, so
    ``batch.volume_index`` is non-decreasing) and each volume's crops are read with one
    ``Array.read_batch``, which decodes chunks that crops share once and fetches the inner
    chunks of a shard with coalesced ranges.

    The loader uses threads and needs no worker processes. CUDA does not survive ``fork``:
    a GPU loader used in a forked process (an ``os.fork`` child, a forked DataLoader worker)
    raises DeviceError. On the CPU, :meth:`as_dataset` gives a ``torch.utils.data``
    IterableDataset for DataLoader workers started with ``spawn``.

    Examples
    --------
    >>> loader = CropLoader({"image": image, "label": label}, (64, 64, 64), 8, device="gpu")
    >>> for epoch in range(10):
    ...     loader.set_epoch(epoch)
    ...     for batch in loader:
    ...         train_step(batch.data["image"], batch.data["label"])
    """

    def __init__(
        self,
        arrays: Any,
        crop_shape: Sequence[int],
        batch_size: int,
        *,
        sampler: Any = "random",
        crops_per_epoch: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        device: str = "auto",
        output: str = "torch",
        prefetch: int = 2,
        cache_bytes: int = 0,
        device_cache_bytes: int = 0,
        decode_ahead_bytes: int | None = None,
        decode_ahead_lanes: int = 1,
        reuse_buffers: bool = True,
        workers: int = 0,
        concurrent_batches: int | None = None,
    ) -> None:
        self.volumes, self.crop_shape = check_volumes(arrays, crop_shape, device)
        self.batch_size = _count(batch_size, "batch_size", 1)
        self.seed = _count(seed, "seed", 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.prefetch = _count(prefetch, "prefetch", 0)
        self.reuse_buffers = bool(reuse_buffers)
        if output not in OUTPUTS:
            raise InvalidArgumentError(f"output: expected one of {list(OUTPUTS)}, got {output!r}")
        if output == "cupy" and self.device == "cpu":
            raise InvalidArgumentError("output='cupy' needs a GPU device; this loader reads on the CPU")
        if output == "cupy" and self.volumes.given_dtypes is not None:
            carried = [d for d in self.volumes.given_dtypes.values() if d not in self.volumes.dtypes.values()]
            raise InvalidArgumentError(
                f"output='cupy': CuPy arrays cannot hold {', '.join(sorted(map(str, carried)))}; pass "
                f"{_outputs_holding(carried)}"
            )
        if output == "torch":
            _check_torch_types(self.volumes.batch_dtypes)
        self.output = output
        self.rank, self.world_size = _distributed(rank, world_size)
        self._sampler = self._make_sampler(sampler, crops_per_epoch)
        cache = _count(cache_bytes, "cache_bytes", 0)
        device_cache = _count(device_cache_bytes, "device_cache_bytes", 0)
        if device_cache and self.device == "cpu":
            raise InvalidArgumentError(
                "device_cache_bytes: a device cache needs a GPU device; use cache_bytes on the CPU"
            )
        if decode_ahead_bytes is not None:
            decode_ahead_bytes = _count(decode_ahead_bytes, "decode_ahead_bytes", 0)
            if decode_ahead_bytes and self.device == "cpu":
                raise InvalidArgumentError(
                    "decode_ahead_bytes: decoding ahead is for GPU loaders; on the CPU each batch's crops are "
                    "decoded on the CPU threads (pass 0 or None)"
                )
            if decode_ahead_bytes:
                check_cacheable(self.volumes, "decode_ahead_bytes")
        self._decode_ahead_bytes = decode_ahead_bytes
        self._decode_ahead_lanes = _decode_ahead_lanes(
            decode_ahead_lanes, self.device, self.prefetch, decode_ahead_bytes
        )
        self.workers = _count(workers, "workers", 0)
        if self.workers and self.device != "cpu":
            raise InvalidArgumentError(
                f"workers: worker processes are for CPU loaders; this loader reads on {self.device}, on background "
                "threads and a CUDA stream of its own (pass workers=0)"
            )
        if self.workers:
            _check_shareable(self.volumes.dtypes)
        if concurrent_batches is not None:
            concurrent_batches = _count(concurrent_batches, "concurrent_batches", 1)
            if concurrent_batches > 1:
                _check_concurrent_batches(self.device, self.prefetch, self.workers)
        self._concurrent_batches = concurrent_batches
        self._cache_bytes = cache
        # With workers, each keeps its share of the host cache: none in this process.
        self.host_cache = ChunkCache(cache, "cache_bytes") if cache and not self.workers else None
        self.device_cache = ChunkCache(device_cache, "device_cache_bytes") if device_cache else None
        # What pickling carries (the arrays pickle themselves); the caches and threads do not travel.
        self._arguments: dict[str, Any] = {
            "arrays": arrays,
            "crop_shape": self.crop_shape,
            "batch_size": self.batch_size,
            "sampler": sampler if isinstance(sampler, str) else getattr(self._sampler, "crops", sampler),
            "crops_per_epoch": crops_per_epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
            "device": self.device,
            "output": self.output,
            "prefetch": self.prefetch,
            "cache_bytes": cache,
            "device_cache_bytes": device_cache,
            "decode_ahead_bytes": decode_ahead_bytes,
            "decode_ahead_lanes": self._decode_ahead_lanes,
            "reuse_buffers": self.reuse_buffers,
            "workers": self.workers,
            "concurrent_batches": concurrent_batches,
        }
        if cache or self.device_cache is not None:
            check_cacheable(self.volumes)
        if self.device != "cpu" and (cache or device_cache or decode_ahead_bytes):
            _check_assembled_on_the_device(len(self.crop_shape))
        self._ordering: HostOrdering | None = None
        self._epoch = 0
        #: batches handed out by the current (or last, unfinished) pass; 0 after a whole pass
        self._position = 0
        #: where the next pass starts: set by load_state_dict, used once
        self._resume: int | None = None
        # The pass is referenced weakly: dropping its iterator (a break) stops its thread.
        self._pass: weakref.ref[_Pass] | None = None
        #: the worker processes (started by the first pass that uses them), and their buffers
        self._processes: WorkerProcesses | None = None
        #: the generations of the volumes in memory when the worker processes started
        self._workers_saw: Generations = ()
        self._segments: SharedSegments | None = None
        self._stop_processes: weakref.finalize[Any, Any] | None = None
        #: the current (or last) pass's background thread, stopped before the next pass starts
        self._producer: Background | None = None

    def _make_sampler(self, sampler: Any, crops_per_epoch: int | None) -> Sampler:
        shapes = self.volumes.shapes
        count = None if crops_per_epoch is None else _count(crops_per_epoch, "crops_per_epoch", 1)
        if count is not None and count > MAX_EPOCH_CROPS:
            raise InvalidArgumentError(
                f"crops_per_epoch: {count} crops, more than an epoch holds ({MAX_EPOCH_CROPS}: each is planned ahead)"
            )
        # A name, compared as a name only: a NumPy array of pairs compares element by element.
        name = sampler if isinstance(sampler, str) else None
        if (count is None and name == "random") or name == "grid":
            tiles = grid_tile_count(shapes, self.crop_shape)
            if tiles > MAX_EPOCH_CROPS:
                what = "sampler 'grid'" if name == "grid" else "crops_per_epoch"
                raise InvalidArgumentError(
                    f"{what}: the volumes' {tiles} grid tiles are more than an epoch holds ({MAX_EPOCH_CROPS})"
                    + ("; give crops_per_epoch" if name == "random" else "; sample them at random instead")
                )
        if isinstance(sampler, Crops):  # a listed sampler's crops, from a pickled loader
            sampler = list(zip(sampler.volumes.tolist(), sampler.origins.tolist(), strict=True))
        if name == "random":
            return RandomSampler(shapes, self.crop_shape, count or grid_tile_count(shapes, self.crop_shape))
        if name == "grid":
            return grid_sampler(shapes, self.crop_shape, count)
        if name is not None:
            raise InvalidArgumentError(
                f"sampler: expected 'random', 'grid' or (volume_index, origin) pairs, got {sampler!r}"
            )
        try:
            items = iter(sampler)
        except TypeError as exc:
            raise InvalidArgumentError(f"sampler: expected 'random', 'grid' or an iterable, got {sampler!r}") from exc
        return listed_sampler(items, shapes, self.crop_shape, count)

    # -- pickling --------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The constructor's arguments, the epoch and the position.

        A copy in another process stands where this loader stands (its next pass starts where
        this one's would), with empty caches.
        """
        return {
            "arguments": self._arguments,
            "epoch": self._epoch,
            "position": self._position,
            "resume": self._resume,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        arguments = dict(state["arguments"])
        CropLoader.__init__(
            self, arguments.pop("arrays"), arguments.pop("crop_shape"), arguments.pop("batch_size"), **arguments
        )
        self._epoch, self._position, self._resume = state["epoch"], state["position"], state["resume"]

    # -- description -----------------------------------------------------------------------------

    @property
    def device(self) -> str:
        """Where batches are read and handed over: ``"cpu"`` or ``"cuda:N"``."""
        return self.volumes.device

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (see :meth:`set_epoch`)."""
        return self._epoch

    @property
    def crops_per_epoch(self) -> int:
        """Crops in one epoch, across all ranks."""
        return self._sampler.count

    def rank_crop_count(self) -> int:
        """Crops in this rank's share of an epoch."""
        n, w = self._sampler.count, self.world_size
        if w == 1:
            return n
        return n // w if self.drop_last else -(-n // w)

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        n = self.rank_crop_count()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __repr__(self) -> str:
        return (
            f"<gpuzarr.loader.CropLoader {len(self.volumes.shapes)} volume(s) crop_shape={self.crop_shape} "
            f"batch_size={self.batch_size} sampler={self._sampler.kind!r} device={self.device!r} "
            f"output={self.output!r} rank={self.rank}/{self.world_size}>"
        )

    def cache_stats(self) -> dict[str, CacheStats]:
        """Hits, misses, evictions and size of each chunk cache that is on (``"host"``, ``"device"``)."""
        stats = {}
        if self.host_cache is not None:
            stats["host"] = self.host_cache.stats()
        elif self._cache_bytes:
            stats["host"] = self._workers_cache_stats()
        if self.device_cache is not None:
            stats["device"] = self.device_cache.stats()
        return stats

    # -- the crop sequence -----------------------------------------------------------------------

    def epoch_crops(self, epoch: int | None = None) -> Crops:
        """Return the crops of ``epoch`` on this rank (default: the current epoch), in reading order."""
        e = self._epoch if epoch is None else _count(epoch, "epoch", 0)
        everything = self._sampler.epoch(epoch_rng(self.seed, e), self.shuffle)
        return rank_share(everything, self.rank, self.world_size, self.drop_last)

    def epoch_batches(self, epoch: int | None = None) -> EpochBatches:
        """Return the batches of ``epoch`` on this rank: each batch's crops grouped by volume.

        A sequence whose batches are made when they are asked for.
        """
        return EpochBatches(self.epoch_crops(epoch), self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration reads, from its first batch.

        As ``DistributedSampler.set_epoch``: without it every iteration repeats the same epoch.
        """
        self._close_pass(ended_by="set_epoch")
        epoch = _count(epoch, "epoch", 0)
        if self._resume is not None and epoch == self._epoch:
            # A state just loaded for this epoch stays: a training loop resumed at a
            # checkpoint's epoch calls set_epoch for it before iterating.
            return
        self._epoch = epoch
        self._position = 0
        self._resume = None

    # -- resuming --------------------------------------------------------------------------------

    def _fingerprint(self) -> dict[str, Any]:
        return {
            "sampler": self._sampler.kind,
            # The crops themselves where the user listed them: two lists of as many crops
            # resumed each other's position over other crops.
            "crops": self._sampler.digest(),
            "crop_shape": list(self.crop_shape),
            "batch_size": self.batch_size,
            "crops_per_epoch": self._sampler.count,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
            "volume_shapes": [list(s) for s in self.volumes.shapes],
        }

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands: the epoch and the batches of it handed out so far.

        Loaded (:meth:`load_state_dict`) into a loader made with the same arguments, that
        loader's next iteration yields exactly the batches this loader's current iteration has
        not handed out yet (batches read ahead are read again). After a completed pass the
        position is the epoch's length: the epoch is done. As with torchdata's
        ``StatefulDataLoader``, a new iteration of a loader starts at the epoch's first batch
        unless a state was loaded just before (:meth:`set_epoch` of the state's epoch keeps it).
        """
        return {
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "position": self._position,
            "loader": self._fingerprint(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`.

        Raises InvalidArgumentError when it was taken from a loader with other crops (sampler,
        shapes, seed, batching, rank).
        """
        try:
            version, epoch, position, fingerprint = (state[k] for k in ("version", "epoch", "position", "loader"))
        except (KeyError, TypeError) as exc:
            raise InvalidArgumentError(f"load_state_dict: not a CropLoader state_dict ({exc!r})") from exc
        if version != STATE_VERSION:
            raise InvalidArgumentError(f"load_state_dict: state version {version}, this loader reads {STATE_VERSION}")
        if not isinstance(fingerprint, dict):
            raise InvalidArgumentError(f"load_state_dict: not a CropLoader state_dict ('loader': {fingerprint!r})")
        mine = self._fingerprint()
        differ = sorted(k for k in mine.keys() | fingerprint.keys() if mine.get(k) != fingerprint.get(k))
        if differ:
            details = "; ".join(f"{k}: state {fingerprint.get(k)!r}, loader {mine.get(k)!r}" for k in differ)
            raise InvalidArgumentError(f"load_state_dict: the state is of a loader with other crops ({details})")
        position = _count(position, "position", 0)
        if position > len(self):
            raise InvalidArgumentError(
                f"load_state_dict: position {position} is past the {len(self)} batches of an epoch"
            )
        self._close_pass(ended_by="load_state_dict")
        self._epoch = _count(epoch, "epoch", 0)
        self._position = self._resume = position

    # -- iterating -------------------------------------------------------------------------------

    def _check_process(self) -> None:
        if self.device != "cpu" and _in_forked_child():
            raise DeviceError(
                f"CropLoader on {self.device} is used in a forked process (an os.fork child or a DataLoader worker "
                "started with fork), where CUDA cannot run. Iterate the loader in the main process: it reads on "
                "background threads and needs no workers (use a torch DataLoader with num_workers=0, or none at "
                "all); worker processes need multiprocessing_context='spawn'."
            )

    def _ordering_now(self) -> HostOrdering:
        if self._ordering is None:
            self._ordering = ordering_for(self.device)
        return self._ordering

    def _ahead_bytes(self, ordering: HostOrdering) -> int:
        """The decoded bytes a pass's producer decodes ahead (0: none)."""
        if self.prefetch == 0 or not ordering.on_device:
            return 0
        if self._decode_ahead_bytes is not None:
            return self._decode_ahead_bytes
        if not all_regular(self.volumes) or len(self.crop_shape) > MAX_ASSEMBLED_NDIM:
            return 0
        return min(ordering.batch_budget(), DEFAULT_AHEAD_BYTES)

    def _lanes(self, ordering: HostOrdering, ahead_bytes: int) -> int:
        """How many batches a pass on threads reads at once (see ``concurrent_batches``)."""
        if self.prefetch == 0 or ordering.on_device or ahead_bytes:
            return 1
        if self._concurrent_batches is not None:
            return self._concurrent_batches
        if self.host_cache is not None:
            # Batches read at once would each read the chunks that all of them miss.
            return 1
        return max(1, min(DEFAULT_CONCURRENT_BATCHES, int(config.get("concurrency"))))

    def _reader(self, ordering: HostOrdering, ahead_bytes: int) -> BatchReader:
        assembler = None
        if self.host_cache is not None or self.device_cache is not None or ahead_bytes:
            assembler = ChunkAssembler(self.volumes, self.crop_shape, ordering, self.host_cache, self.device_cache)
        return BatchReader(self.volumes, self.crop_shape, ordering, assembler)

    def _close_pass(self, ended_by: str | None = None) -> None:
        """End the pass under way.

        ``ended_by`` names what started another: the ended pass's next ``next()`` raises
        PassEndedError naming it. None is :meth:`close`, after which the pass simply stops.
        """
        current = self._pass() if self._pass is not None else None
        if current is not None:
            if current.batches_left and not current.closed:  # a pass cut short, not one done
                current.ended_by = ended_by
            current.close()
        self._pass = None
        # A pass whose iterator was dropped stopped its thread without waiting for it: that
        # thread may still be draining the workers' answers, which the next pass must not meet.
        if self._producer is not None:
            self._producer.stop()
            self._producer = None

    def __iter__(self) -> Iterator[Batch]:
        """A pass over this rank's batches of the current epoch.

        It starts from the first batch, or, the first time after :meth:`load_state_dict`, from
        the state's position. A new pass ends the one before.
        """
        return self._iterate(0, 1, self.reuse_buffers)

    def _iterate(self, share: int, shares: int, reuse_buffers: bool, processes: bool = True) -> _Pass:
        """Batches ``share, share + shares, ...`` from the position on.

        DataLoader workers take every ``shares``-th batch. The loader's worker processes read
        them when it has workers and ``processes`` allows them.
        """
        self._check_process()
        self._close_pass(ended_by="a new pass (iter)")
        use_workers = bool(self.workers and processes)
        if use_workers:
            workers, segments = self._worker_processes()  # before the resume position is taken
        ordering = self._ordering_now()
        ahead_bytes = self._ahead_bytes(ordering)
        reader = self._reader(ordering, ahead_bytes)
        batches = self.epoch_batches()
        start, self._resume = self._resume or 0, None
        self._position = start
        indices = range(start + share, len(batches), shares)
        # prefetch queued, one being read, one handed out, one still held by the loop variable
        size = self.prefetch + 3 if reuse_buffers else None
        producer: Background | None = None
        if use_workers:
            size = None if size is None else size + TASKS_PER_WORKER * self.workers
            # Made from what the buffers need, not through the loader: the pool's producer is the
            # loader's, and a lambda holding the loader kept both, and the worker processes, in a
            # cycle after the loader was dropped (until a garbage collection).
            shapes = {name: ((self.batch_size, *self.crop_shape), dtype) for name, dtype in self.volumes.dtypes.items()}
            pool = BufferPool(lambda: _shared_buffers(segments, shapes), size, ordering)
            producer = ProcessProducer(workers, segments, pool, batches, indices, self.prefetch, self.volumes.arrays)
        else:
            lanes = self._lanes(ordering, ahead_bytes)
            size = None if size is None else size + lanes - 1  # one more buffer read into per lane
            batch_size = self.batch_size  # not through the loader (see above)
            pool = BufferPool(lambda: reader.new_buffers(batch_size), size, ordering)
            if self.prefetch > 0:
                cpus = int(config.get("concurrency"))
                producer = Producer(
                    reader, ordering, pool, batches, indices, self.prefetch, ahead_bytes, lanes, cpus,
                    ahead_lanes=self._decode_ahead_lanes,
                )  # fmt: skip
        new_pass = _Pass(self, reader, ordering, pool, batches, indices, producer)
        self._pass = weakref.ref(new_pass)
        self._producer = producer
        return new_pass

    def _worker_processes(self) -> tuple[WorkerProcesses, SharedSegments]:
        """The worker processes and their shared buffers, started on first use.

        A fork of the process that started them starts its own: those are its parent's.
        """
        if self._processes is not None and self._processes.owner != os.getpid():
            self._processes = self._segments = self._stop_processes = None
        elif self._processes is not None and not self._processes.healthy():
            self.close()  # a worker died or was given up on: a new set
        elif self._processes is not None and self._in_memory_generations() != self._workers_saw:
            # A volume in memory was written through its Array: the workers hold copies of the
            # store taken when they started (a MemoryStore pickles as a copy). New ones copy it again.
            self.close()
        if self._processes is None or self._segments is None:
            self._workers_saw = self._in_memory_generations()
            spec = WorkerSpec(
                self._arguments["arrays"],
                self.crop_shape,
                self.batch_size,
                max(int(config.get("concurrency")) // self.workers, 1),
                self._cache_bytes // self.workers,
            )
            self._processes = WorkerProcesses(spec, self.workers)
            # as many buffer sets as a pass's pool keeps, one segment per field each
            keep = (self.prefetch + 3 + TASKS_PER_WORKER * self.workers) * len(self.volumes.fields)
            self._segments = SharedSegments(self.workers, keep)
            self._stop_processes = weakref.finalize(self, self._processes.close)
        return self._processes, self._segments

    def _in_memory_generations(self) -> Generations:
        """The ``data_generation`` of every volume whose store the workers get a copy of (a MemoryStore)."""
        return tuple(
            (field, v, data_generation(array))
            for field, arrays in self.volumes.arrays.items()
            for v, array in enumerate(arrays)
            if isinstance(getattr(base_array(array), "store", None), MemoryStore)
        )

    def _workers_cache_stats(self) -> CacheStats:
        """The workers' host caches together (as of each worker's last batch)."""
        seen = [] if self._processes is None else [s for s in self._processes.cache_stats if s is not None]
        return CacheStats(
            hits=sum(s.hits for s in seen),
            misses=sum(s.misses for s in seen),
            evictions=sum(s.evictions for s in seen),
            entries=sum(s.entries for s in seen),
            nbytes=sum(s.nbytes for s in seen),
            capacity=(self._cache_bytes // self.workers) * self.workers,
        )

    def close(self) -> None:
        """Stop reading ahead, and stop the worker processes (if any).

        A new iteration starts them again. Batches handed out stay valid.
        """
        self._close_pass()
        if self._segments is not None:
            self._segments.close()
        if self._stop_processes is not None:
            self._stop_processes()
        self._processes = self._segments = self._stop_processes = None

    def _handed_out(self, index: int) -> None:
        self._position = index + 1

    def _finished(self, finished_pass: _Pass) -> None:
        if self._pass is not None and self._pass() is finished_pass:
            self._pass = None
            # Every batch handed out: a state taken now says the epoch is done (loaded, the next
            # iteration yields nothing), not that it has not begun.
            self._position = len(self)

    def as_dataset(self) -> Any:
        """Return the loader as a ``torch.utils.data.IterableDataset`` of batches.

        For DataLoader worker processes (CPU loaders only; see
        :class:`gpuzarr.loader.CropDataset`).
        """
        from .dataset import CropDataset

        return CropDataset(self)


def _shared_buffers(segments: SharedSegments, shapes: dict[str, tuple[tuple[int, ...], Any]]) -> dict[str, Any]:
    """One shared-memory buffer per field for a batch the workers read."""
    return {name: segments.empty(shape, dtype) for name, (shape, dtype) in shapes.items()}


class _Pass:
    """One iteration over an epoch.

    Batches come from the background producer (or are read on the calling thread when
    ``prefetch`` is 0), handed over one at a time.
    """

    def __init__(
        self,
        loader: CropLoader,
        reader: BatchReader,
        ordering: HostOrdering,
        pool: BufferPool,
        batches: Sequence[Crops],
        indices: Sequence[int],
        producer: Background | None,
    ) -> None:
        self._loader: CropLoader | None = loader
        self._reader = reader
        self._ordering = ordering
        self._pool = pool
        self._batches = batches
        self._indices = iter(indices)
        #: batches of this pass not handed out yet
        self.batches_left = len(indices)
        self._output = loader.output
        self._batch_dtypes = loader.volumes.batch_dtypes
        self._keyed = loader.volumes.keyed
        self._pid = os.getpid()
        self._producer = producer
        #: what ended this pass before its last batch by starting another (see _close_pass)
        self.ended_by: str | None = None

    def __iter__(self) -> _Pass:
        return self

    @property
    def closed(self) -> bool:
        """Whether the pass ended (its last batch, a failure, or ``close``)."""
        return self._loader is None

    def _next_ready(self, producer: Background | None) -> Ready | None:
        if producer is not None:
            return producer.next()
        index = next(self._indices, None)
        if index is None:
            return None
        return read_one(self._reader, self._ordering, index, self._batches[index], self._pool.acquire())

    def __next__(self) -> Batch:
        # Taken once: ``close()`` from another thread (which ends a consumer waiting here) sets
        # them to None meanwhile, and reading them again found None.
        loader, producer = self._loader, self._producer
        if loader is None:
            if self.ended_by is not None:
                raise PassEndedError(
                    f"this pass over the CropLoader was ended by {self.ended_by} before its last batch: a loader "
                    "runs one pass at a time. Finish or leave a pass before starting the next, or make a second "
                    "CropLoader for a second pass at the same time."
                )
            raise StopIteration
        if os.getpid() != self._pid:
            raise DeviceError("an iteration of a CropLoader cannot continue in a forked process; start a new one there")
        try:
            with phase("loader-next"):
                ready = self._next_ready(producer)
        except BaseException:
            self.close()
            raise
        if ready is None:
            self.close()
            loader._finished(self)
            raise StopIteration
        with phase("loader-hand-over"):
            self._ordering.hand_over(ready.event, self._output)
            handed = self._batch_dtypes
            data = {name: convert(v, self._output, self._ordering, handed[name]) for name, v in ready.views.items()}
        if self._output == "numpy" and self._ordering.on_device:
            self._pool.give_back(ready.slot)  # the batch was copied to the host
        else:
            self._pool.lend(ready.slot, self._ordering.consumer_stream(self._output))
        loader._handed_out(ready.index)
        self.batches_left -= 1
        return Batch(
            data if self._keyed else data[UNNAMED],
            ready.crops.origins.copy(),
            ready.crops.volumes.copy(),
            ready.index,
        )

    def close(self) -> None:
        """Stop reading ahead.

        Batches handed out stay valid as long as they are referenced; on a GPU the consumer's
        work queued on them so far is waited for, since their memory may serve another stream
        once they are dropped.
        """
        # Taken once and cleared first: the consumer's thread and another may close at once.
        producer, loader = self._producer, self._loader
        self._producer = self._loader = None
        if producer is not None:
            producer.stop()
            if loader is not None and loader._producer is producer:
                loader._producer = None  # joined: nothing left for the next pass to wait for
        if loader is not None:
            self._pool.settle()

    def __del__(self) -> None:
        producer = self._producer
        if producer is not None:
            producer.stop(wait=False)
