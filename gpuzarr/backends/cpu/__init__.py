"""The CPU backend: reads into NumPy arrays, writes from anything NumPy (or a GPU) can hand over.

The read and write engines run chunks on the shared thread pool (:mod:`gpuzarr.parallel`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidArgumentError
from .host_arrays import as_host_array, empty, host_output, is_device_array, mark_written
from .read import read_plan
from .write import write_plan

if TYPE_CHECKING:
    from ...layout import ArrayLayout
    from ...plan.selection import SelectionPlan
    from ...store.base import Store


class CpuReader:
    """The :class:`~gpuzarr.backends.Reader` of ``device="cpu"``: NumPy results."""

    device = "cpu"

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
        """Read ``plan`` into a new NumPy array, or into ``out``; ``stream`` and ``strict`` are
        ignored, so that one data loader runs on both devices."""
        dtype = np.dtype(layout.metadata.dtype)
        buffer = empty(plan.buffer_shape, dtype) if out is None else _output_buffer(out, plan, dtype)
        read_plan(layout, store, plan, buffer)
        if out is not None:
            mark_written(out)
            return out
        return buffer.reshape(plan.shape) if buffer.shape != plan.shape else buffer


def _output_buffer(given: Any, plan: SelectionPlan, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``out`` checked, as an array of ``plan.buffer_shape`` sharing its memory."""
    out = host_output(given)  # a NumPy view of a tensor's or buffer's own memory
    if out.shape != plan.shape or out.dtype != dtype:
        raise InvalidArgumentError(
            f"out: expected shape {plan.shape} and dtype {dtype}, got {out.shape} and {out.dtype}"
        )
    if not out.flags.writeable:
        raise InvalidArgumentError("out: the buffer is read-only")
    buffer = out if plan.buffer_shape == plan.shape else out.reshape(plan.buffer_shape)
    if not np.shares_memory(buffer, out) and buffer.size:
        raise InvalidArgumentError("out: a point selection needs a contiguous output buffer")
    return buffer


CPU_READER = CpuReader()

__all__ = ["CPU_READER", "CpuReader", "as_host_array", "empty", "is_device_array", "read_plan", "write_plan"]
