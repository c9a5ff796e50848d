"""Readers: where a planned selection is executed, on the CPU or on a CUDA device.

``Array`` resolves its device once (:mod:`.select`) and asks :func:`reader_for` for the reader of
that device; every read (``a[...]``, ``read``, ``oindex``, ``vindex``, ``read_batch``) is then one
call of :meth:`Reader.read` with the array's :class:`~gpuzarr.layout.ArrayLayout`, its store and a
:class:`~gpuzarr.plan.SelectionPlan`.

* ``backends/cpu/``: NumPy buffers and the thread pool; also the write path and the host view of
  values to be written.
* ``backends/cuda/``: kvikio, nvCOMP and our kernels. It is the only package that imports cupy,
  nvidia.nvcomp or kvikio, and it does so lazily; its CPU fallback calls ``backends/cpu``, the
  one sideways edge between the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .select import device_index

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..layout import ArrayLayout
    from ..plan.selection import SelectionPlan
    from ..store.base import Store


class Reader(Protocol):
    """Executes selection plans on one device."""

    #: The resolved device: ``"cpu"`` or ``"cuda:N"``.
    device: str

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
        """Read the selection ``plan`` describes into a new array of ``plan.shape``, or into ``out``.

        Parameters
        ----------
        layout
            The resolved array: metadata, prepared pipelines, planning grid, shard addressing.
        store
            Where the array's chunks are.
        plan
            The selection, as chunk projections over ``layout``'s planning grid.
        out
            A caller-owned array of ``plan.shape`` and the array's dtype on this reader's device.
        stream
            GPU readers: the CUDA stream the read is ordered on. The CPU reader ignores it.
        strict
            GPU readers: raise :class:`~gpuzarr.errors.DeviceError` instead of running any part
            of the read on the CPU.

        Returns
        -------
        A NumPy array (CPU) or CuPy array (GPU) of ``plan.shape``: ``out`` when given.
        """
        ...


def reader_for(device: str, *, device_factory: Callable[[int, Any], Any] | None = None) -> Reader:
    """The reader for a resolved device (``"cpu"`` or ``"cuda:N"``).

    ``device_factory`` (GPU readers; ``(device index, stream) -> device``) replaces the CuPy
    device, as the tests do to run the GPU path on an emulated device.
    """
    index = device_index(device)
    if index is None:
        from .cpu import CPU_READER

        return CPU_READER
    from .cuda.reader import CudaReader

    return CudaReader(index, device_factory=device_factory)


__all__ = ["Reader", "reader_for"]
