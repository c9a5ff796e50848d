"""One batch read into its output buffers: the I/O plan of a batch.

The crops of a batch are grouped by volume (see ``sampling.group_by_volume``); each volume's
crops are one ``Array.read_batch`` call, straight into that volume's rows of the batch buffer,
so chunks that several crops share are fetched and decoded once, and the inner chunks of a shard
are fetched with coalesced ranges. With a chunk cache the crops are assembled from cached chunks
instead (:mod:`.chunked`). Errors from the read name the volume and the crops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CorruptChunkError, GpuZarrError
from .chunked import DecodedWindow
from .sampling import crop_name, volume_runs

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from .chunked import ChunkAssembler
    from .ordering import HostOrdering
    from .sampling import Crops
    from .volumes import Volumes

#: crops named in full in an error message
NAMED_CROPS = 4


class BatchReader:
    """Reads batches of crops of ``volumes`` on the loader's ordering (device and stream)."""

    def __init__(
        self,
        volumes: Volumes,
        crop_shape: tuple[int, ...],
        ordering: HostOrdering,
        assembler: ChunkAssembler | None = None,
    ) -> None:
        self.volumes = volumes
        self.crop_shape = crop_shape
        self.ordering = ordering
        self.assembler = assembler

    def new_buffers(self, batch_size: int) -> dict[str, Any]:
        """One output buffer per field for ``batch_size`` crops, on the loader's device."""
        return {
            name: self.ordering.empty((batch_size, *self.crop_shape), dtype)
            for name, dtype in self.volumes.dtypes.items()
        }

    def decode_ahead(self, batches: Sequence[Crops], budget: int) -> int:
        """Decode the chunks of the first of ``batches`` together, up to ``budget`` bytes (see
        ``ChunkAssembler.decode_ahead``); how many of them that deals with. 0 where this reader
        has no assembler. A failure here is left for the batch that meets it: all of
        ``batches`` are then read one by one (not ahead again, which would repeat the failing
        read for each of them), and its error names its crops."""
        if self.assembler is None:
            return 0
        try:
            return self.assembler.decode_ahead(batches, budget)
        except GpuZarrError:
            self.assembler.drop_ahead()
            return len(batches)

    def decode_window(
        self, batches: Sequence[Crops], budget: int, lane: HostOrdering | None = None
    ) -> DecodedWindow | None:
        """:meth:`decode_ahead`'s reads, for :meth:`use_window` to hand over later (see
        ``ChunkAssembler.decode_window``: it may run on another thread meanwhile, on ``lane``'s
        stream); None where this reader has no assembler. A failure gives a window of no chunks
        for all of ``batches``, which are then read one by one, as :meth:`decode_ahead` says."""
        if self.assembler is None:
            return None
        try:
            return self.assembler.decode_window(batches, budget, lane)
        except GpuZarrError:
            return DecodedWindow(len(batches), {}, {})

    def drop_ahead(self) -> None:
        """Let go of the chunks decoded ahead (at the end of a pass: see ``ChunkAssembler.drop_ahead``)."""
        if self.assembler is not None:
            self.assembler.drop_ahead()

    def use_window(self, window: DecodedWindow | None) -> int:
        """Take crops from ``window`` from now on; how many batches it holds (0: none)."""
        if self.assembler is None or window is None:
            return 0
        return self.assembler.use_window(window)

    def read(self, crops: Crops, out: dict[str, Any]) -> None:
        """Read ``crops`` (grouped by volume) into ``out[field][i]`` for crop i."""
        for name in self.volumes.fields:
            for volume, start, stop in volume_runs(crops.volumes):
                origins = crops.origins[start:stop]
                self.volumes.check_unchanged(name, volume)
                try:
                    self._read_run(name, volume, origins, out[name][start:stop])
                except CorruptChunkError as exc:
                    raise CorruptChunkError(exc.key, f"{exc.reason} ({self._context(name, volume, origins)})") from exc
                except GpuZarrError as exc:
                    # A missing chunk, a bounds or device error: the type stays, the note says where.
                    exc.add_note(self._context(name, volume, origins))
                    raise

    def _read_run(self, name: str, volume: int, origins: np.ndarray[Any, Any], out: Any) -> None:
        if self.assembler is not None:
            self.assembler.read(name, volume, origins, out)
            return
        array = self.volumes.arrays[name][volume]
        boxes = [tuple(slice(int(o), int(o) + c) for o, c in zip(origin, self.crop_shape)) for origin in origins]
        array.read_batch(boxes, out=out, stream=self.ordering.stream)

    def _context(self, name: str, volume: int, origins: np.ndarray[Any, Any]) -> str:
        """'while reading <volume>: <crops>', the first few crops named in full."""
        named = [crop_name(volume, o, self.crop_shape) for o in origins[:NAMED_CROPS]]
        more = f" and {len(origins) - NAMED_CROPS} more" if len(origins) > NAMED_CROPS else ""
        return f"while reading {self.volumes.describe(name, volume)}: {', '.join(named)}{more}"
