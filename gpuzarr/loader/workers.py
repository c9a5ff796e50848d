"""Worker processes of a CPU loader: each reads whole batches into shared memory.

Threads of one Python process share one interpreter lock, and a batch of small crops is hundreds
of chunk reads, each a few lock hand-overs around its native decode: on many cores the threads
wait for the lock more than they decode. Worker processes have a lock each. A worker (started
with ``spawn``: no fork of a process that runs threads) opens the loader's arrays on the CPU and
reads the batches it is given with the same :class:`~.reading.BatchReader` the loader would use,
straight into the loader's shared-memory buffers (:mod:`.shared`); what crosses the pipe is the
crops of a batch and the names of its buffers, one way, and the batch's index (or its error),
the other.

Batches go out to the workers in turn and come back in order, at most :data:`TASKS_PER_WORKER`
per worker at once, so a worker has its next batch at hand when it finishes one. Each worker
reads a batch with its own share of the CPU threads (``gpuzarr.config`` ``concurrency`` divided
among the workers) and keeps its own share of the host cache budget.

A write through one of the loader's Arrays moves its ``data_generation`` in the loader's process
only: each batch carries the generations of its volumes, which the worker's copies of the Arrays
take before the batch is read, so that a worker's cache drops what it held of a volume written
since, as the loader's own cache does.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, WorkerProcessError
from .prefetch import POLL_S, Background, Ready
from .sampling import Crops
from .volumes import base_array, data_generation

if TYPE_CHECKING:
    from collections.abc import Sequence
    from multiprocessing.connection import Connection

    from .cache import CacheStats
    from .prefetch import BufferPool
    from .shared import SharedSegments

#: batches a worker holds at once: the one it reads and the next
TASKS_PER_WORKER = 2
#: seconds a worker is given to finish when the loader closes, before it is terminated
EXIT_S = 5.0
#: seconds the batches still out when a pass stops are waited for, before their workers are
#: terminated (and replaced by the next pass)
DRAIN_S = 30.0
#: the index a worker answers with when it could not start
_STARTUP = -1


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to read batches: the loader's arrays (they pickle) and its shape of
    things, and the worker's share of the threads and of the host cache."""

    arrays: Any
    crop_shape: tuple[int, ...]
    batch_size: int
    concurrency: int
    cache_bytes: int


def _portable(error: BaseException, worker: int) -> BaseException:
    """``error`` as it can cross to the loader's process: itself where it pickles (gpuzarr's
    errors do, with their notes; so do the builtin ones), with a note naming the worker; else a
    WorkerProcessError carrying its type, message and traceback."""
    where = f"raised in loader worker process {worker} (pid {os.getpid()})"
    error.add_note(where)
    try:
        again = pickle.loads(pickle.dumps(error))
    except Exception:
        again = None
    if type(again) is type(error) and str(again) == str(error):
        return error
    text = "".join(traceback.format_exception(error)).rstrip()
    return WorkerProcessError(f"{type(error).__name__}: {error} ({where})\n{text}")


def serve(connection: Connection, spec: WorkerSpec, worker: int) -> None:
    """A worker's life: read each batch sent until told to stop (None), answering
    ``(index, error or None, its host cache's stats or None)``."""
    # Ctrl-C goes to the whole process group; the loader's process stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .. import config
    from .cache import ChunkCache
    from .chunked import ChunkAssembler
    from .ordering import HostOrdering
    from .reading import BatchReader
    from .shared import SegmentMaps
    from .volumes import check_volumes

    maps = SegmentMaps()
    try:
        config.set(concurrency=spec.concurrency)
        volumes, crop_shape = check_volumes(spec.arrays, spec.crop_shape, "cpu")
        ordering = HostOrdering()
        cache = ChunkCache(spec.cache_bytes, "cache_bytes") if spec.cache_bytes else None
        assembler = ChunkAssembler(volumes, crop_shape, ordering, cache, None) if cache is not None else None
        reader = BatchReader(volumes, crop_shape, ordering, assembler)
    except BaseException as exc:
        connection.send((_STARTUP, _portable(exc, worker), None))
        return
    shapes = {name: ((spec.batch_size, *crop_shape), dtype) for name, dtype in volumes.dtypes.items()}
    try:
        while True:
            task = connection.recv()
            if task is None:
                return
            index, crop_volumes, origins, names, unmapped, generations = task
            maps.unmap(unmapped)
            take_generations(volumes.arrays, generations)
            crops = Crops(crop_volumes, origins)
            views: dict[str, Any] = {}
            answer: tuple[int, BaseException | None, CacheStats | None]
            try:
                views = {name: maps.array(names[name], *shapes[name])[: len(crops)] for name in shapes}
                reader.read(crops, views)
            except BaseException as exc:
                answer = (index, _portable(exc, worker), None)
            else:
                answer = (index, None, None if cache is None else cache.stats())
            finally:
                # No view of a segment may outlive the task: the segment may be unmapped next.
                views.clear()
                del views
            connection.send(answer)
    except (EOFError, OSError):
        return  # the loader's process went away
    finally:
        maps.close()


#: (field, volume, ``data_generation``) of each volume a batch reads
Generations = tuple[tuple[str, int, int], ...]


def generations_of(arrays: dict[str, list[Any]], crops: Crops) -> Generations:
    """The ``data_generation`` of every volume ``crops`` read, in every field."""
    touched = sorted({int(v) for v in crops.volumes.tolist()})
    return tuple((field, v, data_generation(arrays[field][v])) for field in arrays for v in touched)


def take_generations(arrays: dict[str, list[Any]], generations: Generations) -> None:
    """Give a worker's copies of the loader's Arrays the loader's ``generations``."""
    for field, volume, generation in generations:
        base_array(arrays[field][volume]).data_generation = generation


class WorkerProcesses:
    """``count`` worker processes, started with ``spawn`` and kept until :meth:`close`."""

    def __init__(self, spec: WorkerSpec, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.count = count
        #: the process that started the workers: the only one that may talk to them (a fork of it
        #: holds copies of the pipes, and must leave the workers alone)
        self.owner = os.getpid()
        self._connections: list[Connection] = []
        self._processes: list[Any] = []
        self._lock = threading.Lock()
        self._broken = False
        #: each worker's host cache counters as of its last batch (None: no cache, or none yet)
        self.cache_stats: list[CacheStats | None] = [None] * count
        for worker in range(count):
            ours, theirs = context.Pipe(duplex=True)
            process = context.Process(
                target=serve, args=(theirs, spec, worker), name=f"gpuzarr-loader-worker-{worker}", daemon=True
            )
            try:
                process.start()  # pickles the spec: the arrays and their stores
            except BaseException as exc:
                # An interrupt (Ctrl-C) too: the workers started so far would be left running,
                # and this one's pipe ends open.
                ours.close()
                theirs.close()
                self.close()
                if process.pid is not None:  # started before the interrupt came
                    process.terminate()
                    process.join(EXIT_S)
                if not isinstance(exc, Exception):
                    raise
                if isinstance(exc, OSError):  # out of processes, memory or descriptors
                    raise WorkerProcessError(f"loader worker process {worker} could not start: {exc!r}") from None
                raise InvalidArgumentError(
                    f"workers: the loader's arrays cannot be sent to a worker process ({type(exc).__name__}: {exc}); "
                    "their stores must pickle (pass workers=0 to read on threads)"
                ) from None
            theirs.close()
            self._connections.append(ours)
            self._processes.append(process)

    def alive(self, worker: int) -> bool:
        """Whether worker ``worker`` runs; False once the set is closed (the loader dropped while
        its producer's thread still drains, which :meth:`close` stops the workers for)."""
        processes = self._processes
        return worker < len(processes) and bool(processes[worker].is_alive())

    @property
    def pids(self) -> list[int]:
        return [int(p.pid) for p in self._processes]

    def healthy(self) -> bool:
        """Whether every worker is alive and none was given up on."""
        return not self._broken and all(p.is_alive() for p in self._processes)

    def send(self, worker: int, task: tuple[Any, ...]) -> None:
        """Give worker ``worker`` a batch to read."""
        try:
            self._connections[worker].send(task)
        except (OSError, ValueError):
            # Not chained: the pipe's error holds a buffer in a reference cycle, which some
            # CPython 3.12 releases crash on collecting (gh-111049).
            raise self._exited(worker, int(task[0])) from None

    def receive(self, worker: int, index: int, stop: threading.Event | None, deadline: float | None = None) -> bool:
        """Wait for worker ``worker`` to finish batch ``index``; False when ``stop`` was set or
        ``deadline`` (a ``time.monotonic()`` time) passed first.

        Raises the batch's error, or WorkerProcessError when the worker exited.
        """
        connection = self._connections[worker]
        while not connection.poll(POLL_S):
            if stop is not None and stop.is_set():
                return False
            if deadline is not None and time.monotonic() > deadline:
                return False
            if not self._processes[worker].is_alive() and not connection.poll():
                raise self._exited(worker, index)
        try:
            answered, error, stats = connection.recv()
        except (EOFError, OSError):
            raise self._exited(worker, index) from None  # not chained: see send
        if error is not None:
            try:
                raise error
            finally:
                del error  # no cycle through this frame: see Background.next
        if stats is not None:
            self.cache_stats[worker] = stats
        if answered != index:  # pragma: no cover - the protocol answers in order
            raise WorkerProcessError(f"loader worker process {worker} answered batch {answered}, expected {index}")
        return True

    def give_up(self, worker: int) -> None:
        """Terminate worker ``worker``, which did not answer in time (it may never write into the
        batch it holds again); the set is then no longer :meth:`healthy`."""
        self._broken = True
        process = self._processes[worker]
        process.kill()  # not SIGTERM, which a stopped process would hold until it runs again
        process.join(EXIT_S)

    def _exited(self, worker: int, index: int) -> WorkerProcessError:
        process = self._processes[worker]
        process.join(POLL_S)
        return WorkerProcessError(
            f"loader worker process {worker} (pid {process.pid}) exited with code {process.exitcode} while it had "
            f"batch {index} to read"
        )

    def close(self) -> None:
        """Stop the workers (each after the batch it is reading), terminating those that do not.

        In a fork of the process that started them, only this copy's pipes are let go of.
        """
        if os.getpid() != self.owner:
            self._connections, self._processes = [], []
            return
        with self._lock:
            connections, self._connections = self._connections, []
            processes, self._processes = self._processes, []
        for connection in connections:
            with contextlib.suppress(OSError, ValueError):
                connection.send(None)
        for process in processes:
            process.join(EXIT_S)
            if process.is_alive():
                process.terminate()
                process.join(EXIT_S)
        for connection in connections:
            connection.close()


class ProcessProducer(Background):
    """The background thread of one pass over an epoch whose batches the workers read: it hands
    batches ``indices`` of ``batches`` out to the workers in turn, each into a slot of ``pool``,
    and queues them for the consumer in order."""

    def __init__(
        self,
        processes: WorkerProcesses,
        segments: SharedSegments,
        pool: BufferPool,
        batches: Sequence[Crops],
        indices: Sequence[int],
        prefetch: int,
        arrays: dict[str, list[Any]],
    ) -> None:
        self._processes = processes
        self._segments = segments
        self._pool = pool
        self._batches = batches
        self._indices = indices
        #: the loader's Arrays, whose generations each batch carries (see the module docstring)
        self._arrays = arrays
        super().__init__(max(prefetch, 1))

    def _run(self) -> None:
        processes = self._processes
        in_flight: collections.deque[tuple[int, int, Any]] = collections.deque()
        upcoming = iter(self._indices)
        turn = 0
        try:
            while True:
                while len(in_flight) < TASKS_PER_WORKER * processes.count:
                    index = next(upcoming, None)
                    if index is None:
                        break
                    slot = self._pool.acquire()
                    crops = self._batches[index]
                    names = {name: self._segments.name_of(buffer) for name, buffer in slot.buffers.items()}
                    generations = generations_of(self._arrays, crops)
                    task = (index, crops.volumes, crops.origins, names, self._segments.unmapped_by(turn), generations)
                    processes.send(turn, task)
                    in_flight.append((index, turn, slot))
                    turn = (turn + 1) % processes.count
                if not in_flight:
                    break
                # Off the list before the answer is read: an error answer is the batch's last.
                index, worker, slot = in_flight.popleft()
                if not processes.receive(worker, index, self._stop):
                    in_flight.appendleft((index, worker, slot))  # still out: drained below
                    return
                crops = self._batches[index]
                views = {name: buffer[: len(crops)] for name, buffer in slot.buffers.items()}
                queued = self._put(Ready(index, crops, slot, views, None))
                del slot, views
                if not queued:
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            self._fail(exc)
            return
        finally:
            self._drain(in_flight)
        self._end()

    def _drain(self, in_flight: collections.deque[tuple[int, int, Any]]) -> None:
        """Wait for the batches still out (after a stop or an error): their slots must not be
        read into once the pass lets go of them. A worker that does not answer within
        :data:`DRAIN_S` (a read stuck on a store) is terminated instead."""
        deadline = time.monotonic() + DRAIN_S
        while in_flight:
            index, worker, _ = in_flight.popleft()
            answered = False
            with contextlib.suppress(BaseException):
                answered = self._processes.receive(worker, index, None, deadline)
            if not answered and self._processes.alive(worker):
                self._processes.give_up(worker)
