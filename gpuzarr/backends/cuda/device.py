"""What the executor needs from a device, and the helpers both device implementations use.

A device is any object with the methods of :class:`Device`:

* ``numpy_device.CpuEmulatedDevice``: NumPy buffers, CPU decoders of each nvCOMP bitstream (zstd
  frames, raw deflate, LZ4 blocks) and the NumPy kernel models of ``kernel_reference``. CI runs
  the whole host side through it against the CPU engine.
* ``cupy_device.CudaDevice``: CuPy buffers, kvikio reads, nvCOMP's batched decoders and the
  kernels of kernels/*.cu.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable, Sequence

    from .launches import AssembleLaunch, FileRead, FileSpan

ChecksumKind = Literal["crc32", "adler32"]


class Device(Protocol):
    """What the executor needs from a device. Buffers are flat ``uint8`` device arrays."""

    #: whether :meth:`read_files` reads local files straight into device buffers
    reads_files: bool

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        """Make this device (and its stream) current for the work inside the block."""

    def free_memory(self) -> int | None:
        """Free device memory in bytes, None when unknown."""

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is an array in this device's memory."""

    def is_contiguous(self, value: Any) -> bool:
        """Whether the device array ``value`` is C-contiguous."""

    def from_host(self, host: np.ndarray[Any, Any]) -> Any:
        """A device copy of a host array."""

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[...] = src`` between device arrays of one shape and dtype."""

    def read_files(self, reads: Sequence[FileRead], staging: Any, work: Any) -> list[int]:
        """Read each file span into its place in ``staging`` or ``work``; bytes read per span."""

    def gather(self, box: Any, index: npt.NDArray[np.intp]) -> Any:
        """``box.ravel()[index]``: a new device array of ``index``'s shape."""

    def peek(self, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int], width: int) -> npt.NDArray[np.uint8]:
        """The first ``width`` bytes of each span of ``buffer`` on the host, (n, width), zero past
        a span's end."""

    def alloc(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes`` bytes (contents undefined), 8-byte aligned."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A C-contiguous output array (contents undefined)."""

    def copy_host_to_device(self, host: npt.NDArray[np.uint8], dst: Any, offset: int = 0) -> None:
        """Copy ``host`` to ``dst[offset:]``."""

    def decompress_batch(
        self,
        algorithm: str,
        src: Any,
        src_offsets: Sequence[int],
        src_nbytes: Sequence[int],
        dst: Any,
        dst_offsets: Sequence[int],
        dst_nbytes: Sequence[int],
    ) -> npt.NDArray[np.int64]:
        """Decode raw ``algorithm`` streams ("zstd", "deflate", "lz4") from spans of ``src`` into
        spans of ``dst``; return each stream's decoded size (-1 where decoding failed)."""

    def copy_spans(
        self, src: Any, src_offsets: Sequence[int], dst: Any, dst_offsets: Sequence[int], nbytes: Sequence[int]
    ) -> None:
        """Copy stored (uncompressed) streams."""

    def checksums(self, kind: ChecksumKind, buffer: Any, offsets: Sequence[int], nbytes: Sequence[int]) -> list[int]:
        """CRC-32 / Adler-32 of spans of ``buffer``."""

    def launch_unshuffle(
        self,
        kernel: str,
        buffer: Any,
        src_offsets: Sequence[int],
        dst_offsets: Sequence[int],
        nbytes: Sequence[int],
        typesizes: Sequence[int],
        partial_rule: int,
    ) -> None:
        """``byte_unshuffle`` / ``bit_unshuffle`` between spans of one buffer."""

    def launch_assemble(self, out: Any, work: Any, launch: AssembleLaunch) -> None:
        """``assemble_chunks`` from the decoded chunks in ``work`` into ``out``."""


def read_file_span(span: FileSpan) -> bytes:
    """The bytes of ``span`` on the host (fewer when the file is shorter)."""
    with open(span.path, "rb") as f:
        f.seek(span.offset)
        return f.read(span.nbytes)


def peek_index(
    size: int, offsets: Sequence[int], nbytes: Sequence[int], width: int, take: Callable[[Any], Any]
) -> npt.NDArray[np.uint8]:
    """``take(flat indices)`` of the first ``width`` bytes of each span, zeroed past its end."""
    start = np.asarray(offsets, dtype=np.int64).reshape(-1, 1)
    length = np.asarray(nbytes, dtype=np.int64).reshape(-1, 1)
    if start.size and (start.min() < 0 or (start + length).max() > size):
        raise ValueError(f"peek: a span leaves the {size}-byte buffer")
    column = np.arange(width, dtype=np.int64).reshape(1, -1)
    inside = column < length
    index = np.where(inside, start + column, 0)
    if size == 0:
        return np.zeros(index.shape, dtype=np.uint8)
    got = np.asarray(take(index.reshape(-1)), dtype=np.uint8).reshape(index.shape)
    return np.where(inside, got, 0).astype(np.uint8)


__all__ = ["ChecksumKind", "Device", "peek_index", "read_file_span"]
