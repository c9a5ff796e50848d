"""Reads on one CUDA device: the :class:`~gpuzarr.backends.Reader` of ``device="cuda:N"``.

:meth:`CudaReader.read` turns a SelectionPlan into a device array:

1. plan the GPU read (:func:`.gpu_plan.build_gpu_read_plan`); negative steps are read ascending
   and reversed by one device copy (:mod:`.mirror`); other selections the assemble kernel cannot
   express (index arrays, points) are read as their bounding box and gathered
   on the device (:mod:`.gather`), or, when that box is much larger than the result or the
   data type has no kernel (odd item sizes, more than 8 axes), read by the CPU engine and
   copied to the device once;
2. a small read (see :func:`is_small_read`) is read by the CPU engine and copied to the device
   in one piece: nvCOMP's batched decoders take milliseconds however small the batch, which
   the CPU's pool beats until a read has hundreds of chunks; any other read runs through
   :func:`.executor.execute` on a device object (:class:`.cupy_device.CudaDevice` on a GPU;
   tests pass ``device_factory`` to run on :class:`.numpy_device.CpuEmulatedDevice`);
3. write into the caller's ``out`` when given (in place when it is C-contiguous).

Under ``strict`` every CPU step (a selection or a codec the GPU cannot do) raises DeviceError
instead; otherwise each distinct reason is logged once per process.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import config
from ...errors import DeviceError, InvalidArgumentError
from ...plan.selection import SelectionPlan, plan_orthogonal
from ..cpu import empty as host_empty
from ..cpu import read_plan
from .cupy_device import CudaDevice
from .executor import execute
from .gather import gather_plan
from .gpu_plan import BATCH_BYTES, GpuArrayError, GpuPlanError, GpuReadPlan, build_gpu_read_plan
from .mirror import mirrored_plan, reversed_view
from .phases import phase
from .routes import SMALL_READ_ROUNDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...layout import ArrayLayout
    from ...store.base import Store
    from .device import Device

logger = logging.getLogger("gpuzarr")

_logged: set[str] = set()
_logged_lock = threading.Lock()


def log_fallback(reason: str) -> None:
    """Log ``reason`` (why something runs on the CPU) once per process."""
    with _logged_lock:
        if reason in _logged:
            return
        _logged.add(reason)
    logger.warning("gpuzarr: %s; this part of the read runs on the CPU and is copied to the GPU", reason)


#: the most decoded bytes (of its chunks, and of its result) a read sent to the CPU engine may
#: have: beyond it the staging block it fills, and the upload before the device can use any
#: of it, start to count
SMALL_READ_MAX_BYTES = 64 << 20


def small_read_chunks(gpu_plan: GpuReadPlan | None = None) -> int:
    """Reads of at most this many chunks go to the CPU engine: ``gpuzarr.config``
    ``gpu_small_read_chunks``, or by default :func:`gpuzarr.config.default_small_read_chunks`
    (two rounds of the CPU pool), and 16 rounds for a read whose every chunk nvCOMP would
    inflate (``routes.DEFLATE_SMALL_READ_ROUNDS``: gzip, zlib, Blosc-zlib)."""
    configured = config.get("gpu_small_read_chunks")
    if configured is not None:
        return int(configured)
    default = config.default_small_read_chunks()
    if gpu_plan is None or not gpu_plan.tasks:
        return default
    rounds = min(task.route.small_read_rounds for task in gpu_plan.tasks)
    return default * rounds // SMALL_READ_ROUNDS


def is_small_read(gpu_plan: GpuReadPlan) -> bool:
    """Whether the CPU engine reads ``gpu_plan``'s selection: at most :func:`small_read_chunks`
    chunks, whose decoded bytes and the result's each come to at most
    :data:`SMALL_READ_MAX_BYTES` (a batch of crops of one chunk can be far larger than it)."""
    tasks = gpu_plan.tasks
    if len(tasks) > small_read_chunks(gpu_plan) or gpu_plan.out_nbytes > SMALL_READ_MAX_BYTES:
        return False
    return sum(task.decoded_nbytes for task in tasks) <= SMALL_READ_MAX_BYTES


def _read_small(
    device: Device, layout: ArrayLayout, store: Store, plan: SelectionPlan, target: Any, budget: int
) -> None:
    """Read ``plan``'s selection with the CPU engine into ``target`` (a C-contiguous device array
    of ``plan.buffer_shape``): straight into a pinned block of the device's staging pool, then
    one copy on the read's own stream. ``target`` may be the caller's ``out``, which work
    already queued on that stream may still read or write: the copy comes after that work, as
    the device path's assemble does (a copy stream of its own would overwrite ``out`` under
    it). The block goes back to the pool with the copy's event."""
    block = device.staging.acquire(target.nbytes, budget)
    copied = None
    try:
        read_plan(layout, store, plan, block.view(np.dtype(layout.metadata.dtype)).reshape(plan.buffer_shape))
        copied = device.copy_host_to_device(block, target.reshape(-1).view(np.uint8))
    finally:
        device.staging.release(block, copied)


def batch_budget(device: Device) -> int:
    """Device bytes one batch may use: ``gpuzarr.config`` ``gpu_batch_bytes``, or a quarter of
    the free device memory capped at :data:`.gpu_plan.BATCH_BYTES` (two batches are in flight)."""
    configured = config.get("gpu_batch_bytes")
    if configured is not None:
        return int(configured)
    free = device.free_memory()
    return max(1 << 20, min(BATCH_BYTES, free // 4)) if free is not None else BATCH_BYTES


class CudaReader:
    """The :class:`~gpuzarr.backends.Reader` of CUDA device ``index``.

    ``device_factory`` makes the device object of one read from ``(index, stream)``:
    :class:`.cupy_device.CudaDevice` by default; tests pass the emulated device.
    """

    def __init__(self, index: int, *, device_factory: Callable[[int, Any], Device] | None = None) -> None:
        self.index = index
        self.device = f"cuda:{index}"
        self.device_factory: Callable[[int, Any], Device] = device_factory or CudaDevice

    def read(
        self,
        layout: ArrayLayout,
        store: Store,
        plan: SelectionPlan,
        out: Any = None,
        *,
        stream: Any = None,
        strict: bool = False,
    ) -> Any:
        """The selection ``plan`` describes, read into a device array of ``plan.shape`` (or
        into ``out``, a CuPy array)."""
        device = self.device_factory(self.index, stream)
        dtype = np.dtype(layout.metadata.dtype)
        with device.activate():
            if out is not None:
                _check_out(device, out, plan.shape, dtype)
            if math.prod(plan.shape) == 0:
                return out if out is not None else device.empty(plan.shape, dtype)
            mirror = mirrored_plan(layout, plan)
            if mirror is None:
                return _read(device, layout, store, plan, out, strict)
            # Negative steps: the same elements read ascending, then one reversing copy.
            ascending, axes = mirror
            data = _read(device, layout, store, ascending, None, strict)
            with phase("output"):
                target = out if out is not None else device.empty(plan.shape, dtype)
                device.copy(target, reversed_view(data, axes))
            return target


def _read(device: Device, layout: ArrayLayout, store: Store, plan: SelectionPlan, out: Any, strict: bool) -> Any:
    """``plan`` read on ``device`` into ``out`` or a new device array."""
    dtype = np.dtype(layout.metadata.dtype)
    budget = batch_budget(device)
    try:
        with phase("plan"):
            gpu_plan = build_gpu_read_plan(layout, plan, budget)
    except GpuPlanError as exc:
        return _read_gathered(device, layout, store, plan, out, strict, budget, exc)
    direct = out is not None and device.is_contiguous(out)
    with phase("output"):
        target = out.reshape(plan.buffer_shape) if direct else device.empty(plan.buffer_shape, dtype)
    if not strict and is_small_read(gpu_plan):
        with phase("small-read"):
            _read_small(device, layout, store, plan, target, budget)
        return out if direct else _deliver(device, target, plan, out)
    _execute(device, layout, store, gpu_plan, target, strict, budget)
    return out if direct else _deliver(device, target, plan, out)


def _read_gathered(
    device: Device,
    layout: ArrayLayout,
    store: Store,
    plan: SelectionPlan,
    out: Any,
    strict: bool,
    budget: int,
    cause: GpuPlanError,
) -> Any:
    """A selection that is not a strided box: read its bounding box on the device and gather
    from it (see .gather), or, when the box is too large or not readable either, read it on the
    CPU and copy it over."""
    dtype = np.dtype(layout.metadata.dtype)
    # A box of an array the kernel cannot assemble at all is no better than the selection.
    gathered = None if isinstance(cause, GpuArrayError) else gather_plan(layout, plan)
    reason = f"the GPU path cannot read this selection: {cause}"
    if gathered is not None:
        dims: Any = layout.dimensions()
        box_plan = plan_orthogonal(gathered.box, dims, allow_arrays=False)
        # Only the chunks the selection touches: the gather reads nothing else of the box, and
        # reading the others read (and refused, corrupt or missing) chunks the CPU path never
        # reads (rows 0 and 127 of 64 chunks read all 64).
        touched = {p.chunk_coords for p in plan.projections}
        box_plan = SelectionPlan(
            box_plan.shape, box_plan.buffer_shape, [p for p in box_plan.projections if p.chunk_coords in touched]
        )
        try:
            box_gpu_plan = build_gpu_read_plan(layout, box_plan, budget)
        except GpuPlanError as exc:
            reason = f"the GPU path cannot read this selection: {exc}"
        else:
            if not strict and is_small_read(box_gpu_plan):
                # A few chunks, as for a box: the CPU engine reads the selection itself (a point
                # selection or a negative step of one chunk paid a whole nvCOMP batch).
                target = device.empty(plan.buffer_shape, dtype)
                _read_small(device, layout, store, plan, target, budget)
                return _deliver(device, target, plan, out)
            box = device.empty(box_plan.buffer_shape, dtype)
            _execute(device, layout, store, box_gpu_plan, box, strict, budget)
            return _deliver(device, device.gather(box, gathered.index), plan, out)
    elif not isinstance(cause, GpuArrayError):
        reason += " and its bounding box is much larger than the result"
    if strict:
        raise DeviceError(f"{reason} (strict=True)") from cause
    log_fallback(reason)
    return _deliver(device, device.from_host(_read_on_host(layout, store, plan, dtype)), plan, out)


def _execute(
    device: Device, layout: ArrayLayout, store: Store, gpu_plan: Any, target: Any, strict: bool, budget: int
) -> None:
    """Run a GPU plan into ``target``; CPU decoding is logged, or raises under ``strict``."""
    if strict:
        for task in gpu_plan.tasks:
            if task.route.reason is not None:
                raise DeviceError(f"{task.key}: {task.route.reason} (strict=True)")

    def fallback(reason: str) -> None:
        if strict:
            raise DeviceError(f"{reason} (strict=True)")
        log_fallback(reason)

    execute(layout, store, gpu_plan, device, target, on_fallback=fallback, budget=budget)


def _read_on_host(layout: ArrayLayout, store: Store, plan: SelectionPlan, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    buffer = host_empty(plan.buffer_shape, dtype)
    read_plan(layout, store, plan, buffer)
    return buffer


def _deliver(device: Device, data: Any, plan: SelectionPlan, out: Any) -> Any:
    """``data`` (a device array of ``plan.buffer_shape``) as one of ``plan.shape``, written into
    ``out`` when given."""
    data = data.reshape(plan.shape)
    if out is None:
        return data
    device.copy(out, data)
    return out


def _check_out(device: Device, out: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
    if not device.is_array(out):
        raise TypeError(f"out: expected an array on the GPU (cupy.ndarray), got {type(out).__name__}")
    if tuple(out.shape) != shape or np.dtype(out.dtype) != dtype:
        raise InvalidArgumentError(
            f"out: expected shape {shape} and dtype {dtype}, got {tuple(out.shape)} and {out.dtype}"
        )


__all__ = ["SMALL_READ_MAX_BYTES", "CudaReader", "batch_budget", "is_small_read", "log_fallback", "small_read_chunks"]
