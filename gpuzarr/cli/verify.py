"""``gpuzarr verify PATH``: decode every stored chunk of every array; list what is corrupt.

Each array is read region by region (:mod:`.regions`; only regions holding stored objects), on
the CPU or, with ``--device gpu``, with the GPU reader. A region that fails is read again object
by object, and a failing shard inner chunk by inner chunk, so that every bad key is listed, not
just the first: a checksum mismatch (crc32c), bytes a codec cannot decode, a chunk of the wrong
size, a shard index that is malformed or points past the end of its shard. A region whose read
failed although each of its objects reads well is listed with the region's own error. Metadata
documents that cannot be read are listed too, and the walk goes on; so are nodes that a group's
consolidated metadata records but whose own documents are missing or differ
(:mod:`.consolidated_check`).

Missing chunks (absent keys, empty shard index entries) read as the fill value, which is normal
Zarr; they are counted, not reported (``--list-missing`` lists their keys). What the store
refuses to this process (a chunk it may not read, a folder of chunks it may not list, a node's
folder) is listed as unreadable, not taken for missing, and the rest is verified. The exit
status is 1 when anything is corrupt or unreadable.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..copying.nodes import node_name, open_path, walk
from ..copying.progress import Progress, run_parallel
from ..copying.regions import Box, Region, RegionPlan, chunks_in, object_box, slices, stored_chunks
from ..core.array import Array
from ..core.info import stored_chunk_coords
from ..errors import CorruptChunkError, StoreError, StorePermissionError, UnsupportedOperationError
from ..hierarchy import node_prefix
from ..store import innermost
from ..store.local import LocalStore
from ..store.sharding import EMPTY, read_shard_index
from .consolidated_check import consolidated_problems
from .options import add_jobs_option, add_progress_option, add_storage_options

if TYPE_CHECKING:
    import argparse

    from ..errors import GpuZarrError

#: what a store raises where it refuses a read (permission, an I/O error): not corruption
REFUSALS = (StoreError, StorePermissionError)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="decode every chunk, report corrupt ones",
        description="Decode every stored chunk of the array, or of every array below the group, at "
        "PATH, checking checksums. Each corrupt key is listed; missing chunks (which read as the fill "
        "value) are counted. Exit status 1 when anything is corrupt.",
    )
    parser.add_argument("path", metavar="PATH", help="an array or group (a path or store URL)")
    parser.add_argument(
        "--device", default="cpu", help="where chunks are decoded: cpu (default), gpu, cuda:N or auto"
    )
    add_jobs_option(parser, "regions decoded")
    add_progress_option(parser)
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")
    parser.add_argument(
        "--list-missing", action="store_true",
        help="list the keys of missing chunks too (they read as the fill value; counted either way)",
    )
    add_storage_options(parser)
    parser.set_defaults(run=run)


@dataclass
class ArrayReport:
    """What verifying one array found."""

    name: str
    #: chunks in the grid (inner chunks when sharded)
    chunks: int
    #: chunks absent from the store (keys, or empty shard index entries): they read as the fill value
    missing: int = 0
    #: (store key, what is wrong), in key order
    corrupt: list[tuple[str, str]] = field(default_factory=list)
    #: (store key or folder, why), in order: what the store refused, so it was not checked
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: the missing chunks' keys (a shard's key and the inner chunk), in key order; None when
    #: not asked for (``--list-missing``)
    missing_keys: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        doc = {
            "name": self.name,
            "chunks": self.chunks,
            "stored": self.chunks - self.missing,
            "missing": self.missing,
            "corrupt": [{"key": key, "reason": reason} for key, reason in self.corrupt],
            "unreadable": [{"key": key, "reason": reason} for key, reason in self.unreadable],
        }
        if self.missing_keys is not None:
            doc["missing_keys"] = self.missing_keys
        return doc


@dataclass
class RegionResult:
    missing: int = 0
    corrupt: dict[tuple[str, str], None] = field(default_factory=dict)  # an ordered set
    unreadable: dict[tuple[str, str], None] = field(default_factory=dict)
    missing_keys: list[str] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    from ..backends.select import resolve_device

    # Checked before any work: "--device gpu" without a usable GPU fails with the reason.
    device = resolve_device(args.device)
    unreadable: list[tuple[str, GpuZarrError]] = []
    with open_path(args.path, args.storage_options, device=args.device) as root:
        arrays = [
            (node_name(relative), node)
            for relative, node in walk(root, on_error=lambda path, exc: unreadable.append((node_name(path), exc)))
            if isinstance(node, Array)
        ]
        # Refused, or not listable (a group's members on HTTP without consolidated metadata):
        # unreadable, not corrupt.
        refusals = (StorePermissionError, UnsupportedOperationError)
        metadata = [(name, str(exc), isinstance(exc, refusals)) for name, exc in unreadable]
        metadata += consolidated_problems(root)
        with Progress(sum(a.nbytes for _, a in arrays), "verify", args.progress) as progress:
            reports = [
                verify_array(name, array, args.jobs, progress, gpu=device != "cpu", list_missing=args.list_missing)
                for name, array in arrays
            ]
    problems = len(metadata) + sum(len(r.corrupt) + len(r.unreadable) for r in reports)
    if args.json:
        doc = {
            "ok": problems == 0,
            "device": device,
            "arrays": [r.as_json() for r in reports],
            "unreadable_metadata": [
                {"node": name, "reason": f"unreadable: {reason}" if refused else reason}
                for name, reason, refused in metadata
            ],
        }
        print(json.dumps(doc, indent=2))
    else:
        _print_report(reports, metadata, progress, device)
    return 1 if problems else 0


def _print_report(
    reports: list[ArrayReport], metadata: list[tuple[str, str, bool]], progress: Progress, device: str
) -> None:
    """``metadata``: (node, what is wrong, whether this process was refused it) of every node
    whose metadata could not be read or checked."""
    for name, reason, refused in metadata:
        print(f"{'UNREADABLE' if refused else 'CORRUPT'} metadata of {name}: {reason}")
    for report in reports:
        for key, reason in report.corrupt:
            print(f"CORRUPT {key}: {reason}")
        for key, reason in report.unreadable:
            print(f"UNREADABLE {key}: {reason}")
    for report in reports:
        for key in report.missing_keys or ():
            print(f"MISSING {key}")
    for r in reports:
        print(
            f"{r.name}: {r.chunks} chunks, {r.chunks - r.missing} stored, {r.missing} missing "
            f"(read as the fill value), {len(r.corrupt)} corrupt"
            + (f", {len(r.unreadable)} unreadable" if r.unreadable else "")
        )
    refused_metadata = sum(was_refused for _, _, was_refused in metadata)
    corrupt = len(metadata) - refused_metadata + sum(len(r.corrupt) for r in reports)
    unreadable = refused_metadata + sum(len(r.unreadable) for r in reports)
    found = [f"{n} {what}" for n, what in ((corrupt, "corrupt"), (unreadable, "unreadable")) if n]
    verdict = f"{' and '.join(found)} key(s) or document(s)" if found else "OK"
    checked = sum(r.chunks - r.missing for r in reports)
    seconds = progress.elapsed
    print(f"verify: {verdict}; {len(reports)} array(s), {checked} chunk(s) checked on {device} in {seconds:.2f} s")


def verify_array(
    name: str, array: Array, jobs: int, progress: Progress, *, gpu: bool = False, list_missing: bool = False
) -> ArrayReport:
    """Decode every stored chunk of ``array`` (``jobs`` regions at once); with ``list_missing``
    the report lists the missing chunks' keys too."""
    plan = RegionPlan(array)
    report = ArrayReport(name, math.prod(d.nchunks for d in array.layout.dimensions()))
    # A store that cannot list is asked for every object's key instead.
    stored = set(stored_chunk_coords(array)) if array.store.supports_listing else None
    if stored is None:
        regions = plan.regions
    else:
        regions = plan.touching(object_box(plan.dims, c) for c in stored)
        # Regions with nothing stored hold only missing chunks: all the array's chunks less those
        # of the regions visited, counted without walking them (an array declaring 10**12
        # chunks, a few stored, never ended). Regions are aligned to the objects, so the chunks
        # a box touches are those of its objects that lie in the array.
        everything = tuple(slice(0, n) for n in array.shape)
        report.missing += chunks_in(array, everything) - sum(chunks_in(array, r.selection) for r in regions)
        progress.update((array.size - sum(r.size for r in regions)) * array.dtype.itemsize, 0)
    # Folders of chunks the store would not list: their chunks were not seen, not missing.
    store = innermost(array.store)
    if isinstance(store, LocalStore) and stored is not None:
        prefix = node_prefix(array.path)
        report.unreadable += [
            (folder, "this process may not list the folder: its chunks were not checked")
            for folder in store.unlisted_folders(prefix)
        ]
    checker = _RegionChecker(array, plan, stored, gpu, list_missing)
    found: dict[tuple[str, str], None] = {}
    refused: dict[tuple[str, str], None] = {}
    missing_keys: list[str] = []
    if list_missing and stored is not None:
        visited = {r.object_ranges for r in regions}
        missing_keys += (
            array.layout.key(c) for r in plan.regions if r.object_ranges not in visited for c in r.objects()
        )

    def done(region: Region, result: RegionResult) -> None:
        report.missing += result.missing
        found.update(result.corrupt)
        refused.update(result.unreadable)
        missing_keys.extend(result.missing_keys)
        progress.update(region.size * array.dtype.itemsize, sum(stored_chunks(array, c) for c in region.objects()))

    run_parallel(checker.check, regions, jobs, done)
    report.corrupt = sorted(found)
    report.unreadable += sorted(refused)
    if list_missing:
        report.missing_keys = sorted(missing_keys)
    return report


class _RegionChecker:
    """Reads one region and, when it fails, finds every corrupt key in it."""

    def __init__(
        self, array: Array, plan: RegionPlan, stored: set[tuple[int, ...]] | None, gpu: bool, list_missing: bool
    ) -> None:
        self.array = array
        self.plan = plan
        self.stored = stored
        self.gpu = gpu
        self.list_missing = list_missing

    def _present(self, coords: tuple[int, ...]) -> bool:
        if self.stored is not None:
            return coords in self.stored
        return self.array.store.exists(self.array.layout.key(coords))

    def _read(self, selection: tuple[slice, ...]) -> None:
        self.array.read(selection)
        if self.gpu:
            from ..backends.cuda.runtime import synchronize

            synchronize()  # errors found on the device surface here, inside the caller's try

    def check(self, region: Region) -> RegionResult:
        result = RegionResult()
        present = []
        for coords in region.objects():
            if not self._present(coords):
                self._missing(coords, result)
            elif self.array.layout.sharding is None or self._check_index(coords, result):
                present.append(coords)
        try:
            self._read(region.selection)
        except (CorruptChunkError, *REFUSALS) as exc:
            before = len(result.corrupt) + len(result.unreadable)
            for coords in present:
                self._pinpoint(coords, result)
            found = [*result.corrupt, *result.unreadable]
            explained = len(found) > before or any(key == exc.key for key, _ in found)
            if isinstance(exc, REFUSALS) and not explained:
                result.unreadable[str(exc.key), exc.reason] = None
            elif not explained:
                # Each object read well alone (a store that returned other bytes the second
                # time?): the region's own error is what there is to report.
                reason = f"{exc.reason} (reading a region failed; reading its objects again one by one did not)"
                result.corrupt[str(exc.key), reason] = None
        return result

    def _missing(self, coords: tuple[int, ...], result: RegionResult) -> None:
        result.missing += stored_chunks(self.array, coords)
        if self.list_missing:
            result.missing_keys.append(self.array.layout.key(coords))

    def _check_index(self, coords: tuple[int, ...], result: RegionResult) -> bool:
        """Count the empty entries of a shard's index; False (and recorded) when it is corrupt."""
        layout = self.array.layout
        key = layout.key(coords)
        try:
            index = read_shard_index(self.array.store, key, layout.sharding_at(coords).layout)
        except CorruptChunkError as exc:
            result.corrupt[exc.key, exc.reason] = None
            return False
        except REFUSALS as exc:
            result.unreadable[key, exc.reason] = None
            return False
        if index is None:  # erased since it was listed
            self._missing(coords, result)
            return False
        positions = _inner_positions(self.array, coords)
        empty = positions[index.offsets[positions] == EMPTY]
        result.missing += len(empty)
        if self.list_missing:
            result.missing_keys += (f"{key}: inner chunk {int(p)}" for p in empty)
        return True

    def _pinpoint(self, coords: tuple[int, ...], result: RegionResult) -> None:
        box = object_box(self.plan.dims, coords)
        try:
            self._read(slices(box))
        except REFUSALS as exc:  # the whole object: its inner chunks come from the same file
            result.unreadable[self.array.layout.key(coords), exc.reason] = None
            return
        except CorruptChunkError as exc:
            if self.array.layout.sharding is None:
                result.corrupt[exc.key, exc.reason] = None
                return
        else:
            return
        for inner in _inner_boxes(self.array, box):
            try:
                self._read(slices(inner))
            except CorruptChunkError as exc:
                result.corrupt[exc.key, exc.reason] = None


def _inner_positions(array: Array, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """C-order positions, in the shard at ``coords``, of the inner chunks that lie in the array."""
    codec = array.layout.sharding_at(coords)
    dims = array.metadata.chunk_grid.dimensions(array.shape)
    valid = [
        max(0, min(per, -(-(dim.size - int(dim.chunk_start(c))) // inner)))
        for dim, c, inner, per in zip(dims, coords, codec.chunk_shape, codec.chunks_per_shard, strict=True)
    ]
    if not valid:
        return np.zeros(1, dtype=np.int64)
    grid = np.indices(valid).reshape(len(valid), -1)
    return np.asarray(np.ravel_multi_index(tuple(grid), codec.chunks_per_shard))


def _inner_boxes(array: Array, box: Box) -> list[Box]:
    """The boxes of the inner chunks (planning chunks) within a shard's box."""
    dims = array.layout.dimensions()
    ranges = [
        range(int(d.chunk_of(start)), int(d.chunk_of(stop - 1)) + 1) for (start, stop), d in zip(box, dims, strict=True)
    ]
    return [object_box(dims, coords) for coords in itertools.product(*ranges)]
