"""Process-wide settings.

``concurrency`` is the knob for CPU parallelism: the number of chunks decoded or encoded
at once (numcodecs' compressors release the GIL, so threads scale across cores). It defaults to
the number of CPUs this process may use. Change it with ``gpuzarr.config.set(concurrency=8)``;
the thread pool is created on first use, never at import.

GPU reads add ``gpu_batch_bytes``, ``io_threads``, ``file_handles`` and ``strict`` (see
``_settings`` below):

* ``io_threads``: kvikio's I/O thread count. None (the default) means
  :func:`default_io_threads`, ``min(16, CPUs this process may use)``, set once per process when
  kvikio is first used, unless the ``KVIKIO_NTHREADS`` environment variable already chose
  (kvikio's own default is one thread). A number is applied whenever it changes.
* ``gpu_direct_reads``: which route the bytes of zstd and uncompressed chunks in local files
  take. ``"auto"`` (the default) and True: kvikio reads them into device memory whenever it is
  installed, straight with GPUDirect Storage, through its own host bounce buffers on its I/O
  threads in its compatibility mode. False: they are read on the host by the prefetch thread
  and travel in the batch's pinned staging copy. Measured without GDS on H100 and H200 hosts,
  kvikio's route was about 8 % faster on sharded zstd (0.97-1.22 in nine comparisons), 27-49 % on
  uncompressed chunks and level on unsharded zstd (benchmarks/results/2026-11-28-h200-loader-and-direct-reads.md).
* ``file_handles``: how many kvikio file handles stay open between reads. None (the default)
  means :func:`default_file_handles`, sized from the open-file limit (``ulimit -n``): each handle
  holds two file descriptors, and half of the limit is left to everything else.

* ``gpu_small_read_chunks``: a GPU read of at most this many chunks is read by the CPU engine
  and copied to the device in one piece. None (the default) means :func:`default_small_read_chunks`,
  twice ``concurrency``; 0 sends every read through the device path. Measured on an H100 host
  (``benchmarks/results/2026-11-24-h100-bench-run1.md``), one 64³ crop of eight 512 KiB zstd
  chunks took 13 ms through nvCOMP, whose batched decoders start at about 10 ms however few
  streams a batch has, and 3 ms on the host's CPU cores; at about 320 chunks (a batch of 64
  crops) the two were level. Reads whose every chunk nvCOMP would inflate (gzip, zlib,
  Blosc-zlib) take 16 times ``concurrency`` by default: nvCOMP inflates each stream at about
  14 MB/s (37 ms for 512 KiB on an H200), where a core takes 1-2 ms. ``strict=True`` reads keep
  the device path.

``gpu_trust_payloads`` (default True): whether GPU reads hand compressed chunks to nvCOMP.
nvCOMP does not promise to detect a damaged or crafted stream: a zstd or deflate stream may
decode to wrong bytes, or make its decoder read or write out of bounds and lose the process's
CUDA context (docs/gpu.md, "Left to nvCOMP"). gpuzarr's own checks cannot stand in: the
host's walk of zstd frames sees only their block headers, the LZ4 block walk reads its verdict
after the decode, and a checksum can be forged along with the data. False, for data from
sources you do not trust: every compressed chunk is decoded on the CPU, whose decoders refuse
malformed streams with a CorruptChunkError and never write outside their buffers, and copied to
the device; uncompressed chunks stay on the GPU (gpuzarr's kernels check every bound). It
applies to what is decoded from then on, in this process: chunks already in a data loader's
caches stay there, and Dask workers need it set in their own processes. Under ``strict`` such
chunks raise DeviceError instead.

``remote_concurrency`` (default 32) is how many requests a read keeps in flight against a
remote store (object stores, HTTP): their readers fetch on that many threads, since they wait on
the network rather than on cores (``Store.io_concurrency``; a store's own ``io_concurrency``
storage option wins). Local reads keep ``concurrency``.

``max_chunk_bytes`` bounds what metadata may ask one chunk to decode to (see
:mod:`gpuzarr.metadata.limits`): an array whose chunk (or inner chunk of a shard, or shard index)
is larger is refused when it is opened or created, with a MetadataError naming the field. The
default, 2 GiB (``2**31`` bytes), is Blosc1's and LZ4's largest buffer, so no chunk that blosc or
lz4 ever wrote is refused; it is far below the memory of a machine that trains on such data,
while one forged chunk shape can no longer ask for terabytes. Raise it to read larger chunks:
``gpuzarr.config.set(max_chunk_bytes=8 * 2**30)``.

The same setting bounds what one decoder may produce where the metadata does not fix a chunk's
decoded size: variable-length strings and bytes (``vlen-utf8``, ``vlen-bytes``) and
``numcodecs.pcodec``/``zfpy`` streams. Where the metadata fixes it (``bytes`` and any
compressors), the bound is that size. A stream that would decode to more is a
CorruptChunkError naming the key, raised before the memory is allocated.

``max_metadata_bytes`` (default 256 MiB) bounds a metadata document (``zarr.json``, ``.zarray``,
``.zattrs``, ``.zmetadata``): a larger one is a MetadataError naming its key, raised before its
bytes are read where the store knows their number first (local files, zip members). The
consolidated metadata of a hierarchy of a hundred thousand arrays is far smaller; raise it for
more: ``gpuzarr.config.set(max_metadata_bytes=2**30)``.

``async_concurrency`` (default 32) is how many reads and writes started by
``Array.read_async``, ``Array.write_async`` and :func:`gpuzarr.open_async` run at once; more
wait their turn in order. Each one still decodes on the shared ``concurrency`` threads. The
default is ``remote_concurrency``'s: calls that wait on a remote store overlap their waits. From
16 and 64 arrays behind an HTTP server answering every request 20 ms late (``python -m
benchmarks.many_arrays``), 32 threads read within 5 % of TensorStore's futures; with 16 arrays, 8
threads took 1.3 times as long.

``max_rectilinear_chunks`` (default 4,194,304) bounds the chunk sizes a rectilinear chunk grid
lists, all axes together, once its ``[size, count]`` runs are expanded: a run of a few bytes of
JSON asking for more is a MetadataError naming it, before any memory is taken (each listed chunk
costs about 24 bytes; the default, about 100 MB at most). The axis's extent bounds it too.

``host_output_pool_bytes`` (default 256 MiB) bounds the host memory of read outputs that
:mod:`gpuzarr.output_pool` keeps to hand out again once nothing refers to them, so that a loop
of reads does not pay the kernel's page faults on every new output. 0 turns the pool off.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .errors import InvalidArgumentError, UnknownSettingError

_lock = threading.Lock()
_settings: dict[str, Any] = {
    "concurrency": None,
    # GPU reads: device bytes one batch may use (None: from free memory, see
    # backends/cuda/reader.batch_budget); kvikio's I/O threads (None: default_io_threads());
    # open kvikio file handles kept (None: default_file_handles()); whether a part of a GPU
    # read that would run on the CPU raises instead.
    "gpu_batch_bytes": None,
    "io_threads": None,
    "file_handles": None,
    # the direct kvikio route: "auto" (kvikio whenever installed, as True), True or False
    "gpu_direct_reads": "auto",
    "strict": False,
    # whether GPU reads hand compressed chunks to nvCOMP (False: the CPU decodes them; see the module)
    "gpu_trust_payloads": True,
    # GPU reads of at most this many chunks run on the CPU engine (None: default_small_read_chunks())
    "gpu_small_read_chunks": None,
    # requests in flight per read against a remote store (Store.io_concurrency)
    "remote_concurrency": 32,
    # the largest decoded chunk metadata may ask for (gpuzarr.metadata.limits)
    "max_chunk_bytes": 2**31,
    # bytes of read outputs kept for reuse once unreferenced (gpuzarr.output_pool); 0: none
    "host_output_pool_bytes": 256 * 2**20,
    # the largest metadata document read (zarr.json, .zarray, .zmetadata, ...)
    "max_metadata_bytes": 256 * 2**20,
    # the most chunk sizes a rectilinear grid may list, all axes together (gpuzarr.metadata.rectilinear)
    "max_rectilinear_chunks": 2**22,
    # reads and writes of read_async, write_async and open_async running at once (gpuzarr.futures)
    "async_concurrency": 32,
}
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_request_pool: ThreadPoolExecutor | None = None
_request_pool_size = 0
#: I/O pools by thread count: kept, never replaced, because a read may be submitting to one
#: while another read asks for a different size (stores of different ``io_concurrency``)
_io_pools: dict[int, ThreadPoolExecutor] = {}


def _default_concurrency() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: the most kvikio I/O threads the default gives (more rarely helps one device's reads)
MAX_DEFAULT_IO_THREADS = 16
#: bounds of the default number of cached kvikio file handles
MIN_FILE_HANDLES, MAX_FILE_HANDLES = 16, 65536


def default_io_threads() -> int:
    """The kvikio I/O thread count when ``io_threads`` is None: ``min(16, CPUs this process may use)``."""
    return min(MAX_DEFAULT_IO_THREADS, _default_concurrency())


def default_small_read_chunks() -> int:
    """``gpu_small_read_chunks`` when it is None: twice ``concurrency``.

    The CPU engine then takes the reads it decodes in one or two rounds of its pool.
    """
    return 2 * max(int(get("concurrency")), 1)


def default_file_handles() -> int:
    """Cached kvikio file handles when ``file_handles`` is None.

    A quarter of the soft open-file limit (two descriptors per handle, half the limit left
    free), between 16 and 65536.
    """
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        return 256
    if soft == resource.RLIM_INFINITY or soft < 0:
        return MAX_FILE_HANDLES
    return max(MIN_FILE_HANDLES, min(MAX_FILE_HANDLES, soft // 4))


def names() -> list[str]:
    """Every setting's name, in the order the module declares them."""
    return list(_settings)


def get(name: str) -> Any:
    """The value of setting ``name`` (``concurrency`` None reads as the CPUs this process may use)."""
    if name not in _settings:
        raise UnknownSettingError(f"unknown gpuzarr setting {name!r} (known: {sorted(_settings)})")
    value = _settings[name]
    if name == "concurrency" and value is None:
        return _default_concurrency()
    return value


#: settings that are positive integers or None, and those that are positive integers
_POSITIVE_OR_NONE = ("concurrency", "gpu_batch_bytes", "io_threads", "file_handles")
_REQUIRED_POSITIVE = (
    "max_chunk_bytes", "remote_concurrency", "max_metadata_bytes", "max_rectilinear_chunks", "async_concurrency",
)


class _Restore:
    """What :func:`set` returns: used as a context manager, it puts the old values back on exit."""

    def __init__(self, old: dict[str, Any]) -> None:
        self._old = old

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        _settings.update(self._old)


def set(**settings: Any) -> _Restore:  # noqa: A001 - mirrors zarr.config.set
    """Change settings, e.g. ``gpuzarr.config.set(concurrency=4)``.

    The change lasts until the next ``set``, or, used as a context manager, until the block
    ends: ``with gpuzarr.config.set(strict=True): ...`` (as kvikio's ``defaults.set``).
    Every value is checked before any is changed: InvalidArgumentError for a value out of
    range, UnknownSettingError (an InvalidArgumentError and a KeyError) for a name that is not a
    setting.
    """
    for name, value in settings.items():
        if name not in _settings:
            raise UnknownSettingError(f"unknown gpuzarr setting {name!r} (known: {sorted(_settings)})")
        not_positive = value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1)
        if name in _POSITIVE_OR_NONE and not_positive:
            raise InvalidArgumentError(f"{name} must be a positive integer or None, got {value!r}")
        if name in _REQUIRED_POSITIVE and (value is None or not_positive):
            raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
        if name == "gpu_small_read_chunks" and value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise InvalidArgumentError(f"gpu_small_read_chunks must be a non-negative integer or None, got {value!r}")
        if name == "host_output_pool_bytes" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidArgumentError(f"host_output_pool_bytes must be a non-negative integer, got {value!r}")
        if name == "gpu_direct_reads" and value != "auto" and not isinstance(value, bool):
            raise InvalidArgumentError(f"gpu_direct_reads must be 'auto', True or False, got {value!r}")
        if name in ("strict", "gpu_trust_payloads") and not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    old = {name: _settings[name] for name in settings}
    _settings.update(settings)
    return _Restore(old)


def thread_pool() -> ThreadPoolExecutor:
    """The shared worker pool, (re)created to match ``concurrency``.

    It has ``concurrency`` threads: the calling thread usually works too and uses
    ``concurrency - 1`` of them (see ``gpuzarr.parallel.run_tasks``); a caller that must not
    work (``caller_works=False``) uses them all.
    """
    global _pool, _pool_size
    size = max(get("concurrency"), 1)
    with _lock:
        if _pool is None or _pool_size != size:
            # The old pool is let go of, not shut down: a pass that took it a moment ago on
            # another thread still submits to it (a shut-down pool raised "cannot schedule new
            # futures after shutdown" there). Its threads end once nothing refers to it
            # (ThreadPoolExecutor wakes them when it is collected).
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="gpuzarr", initializer=_mark_pool_thread)
            _pool_size = size
        return _pool


def io_thread_pool(workers: int) -> ThreadPoolExecutor:
    """The pool of fetches from remote stores: ``workers - 1`` threads (the caller works too).

    Separate from :func:`thread_pool`, so that local reads keep ``concurrency`` threads; one
    pool per size, made on first use (idle threads cost only their stacks).
    """
    size = max(workers - 1, 1)
    with _lock:
        pool = _io_pools.get(size)
        if pool is None:
            pool = _io_pools[size] = ThreadPoolExecutor(
                max_workers=size, thread_name_prefix="gpuzarr-io", initializer=_mark_pool_thread
            )
        return pool


def request_pool() -> ThreadPoolExecutor:
    """The pool the futures of :mod:`gpuzarr.futures` run on: ``async_concurrency`` threads.

    Separate from :func:`thread_pool` and the I/O pools, which each request uses in turn: a
    request waiting on a pool it fills itself would never end.
    """
    global _request_pool, _request_pool_size
    size = int(get("async_concurrency"))
    with _lock:
        if _request_pool is None or _request_pool_size != size:
            # Let go of, not shut down, as thread_pool's: requests already queued on it still run.
            _request_pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="gpuzarr-request")
            _request_pool_size = size
        return _request_pool


_thread_state = threading.local()


def _mark_pool_thread() -> None:
    _thread_state.in_pool = True


def in_pool_thread() -> bool:
    """Whether the calling thread is one of gpuzarr's pool threads."""
    return getattr(_thread_state, "in_pool", False)


def _after_fork() -> None:
    # Threads do not survive fork(): a child must build its own pools.
    global _pool, _pool_size, _request_pool, _request_pool_size
    _pool, _pool_size = None, 0
    _request_pool, _request_pool_size = None, 0
    _io_pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
