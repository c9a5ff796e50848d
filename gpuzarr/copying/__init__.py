"""``gpuzarr.convert``: copy an array or a whole hierarchy between stores, in the same encoding
or another one (Zarr version, chunk and shard shapes, compression), resuming where an earlier
run stopped. The command line's ``gpuzarr copy`` and ``gpuzarr convert`` run the same engine
(:mod:`.engine`)."""

from __future__ import annotations

import contextlib
import numbers
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.array import Array
from ..core.group import Group
from ..errors import InvalidArgumentError
from ..metadata.codec_args import codec_json
from ..store import make_store
from .destination import KEEP, FormatOptions
from .engine import copy_nodes
from .nodes import open_path
from .places import refuse_overlapping_nodes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..store import StoreLike


@dataclass(frozen=True)
class ConvertReport:
    """What :func:`convert` did."""

    arrays: int  #: arrays copied
    groups: int  #: groups copied
    #: chunks (inner chunks when sharded) written; where the data is encoded again, those equal
    #: to the fill value, which the writer leaves out, count too
    written: int
    skipped: int  #: chunks the destination already held, equal (a resumed copy)
    nbytes: int  #: decoded bytes of the arrays copied
    seconds: float  #: how long it took


def convert(
    source: StoreLike | Array | Group,
    destination: StoreLike,
    *,
    zarr_format: int | None = None,
    chunks: int | tuple[int, ...] | None = None,
    shards: Any = KEEP,
    compressors: Any = KEEP,
    overwrite: bool = False,
    jobs: int = 1,
    progress: bool | None = False,
    storage_options: dict[str, Any] | None = None,
    destination_storage_options: dict[str, Any] | None = None,
) -> ConvertReport:
    """Copy the array or hierarchy at ``source`` to ``destination``, encoded as the options say.

    With no format option the copy is encoded as the source: stored chunks and shards are
    copied byte for byte, without decoding. Any option decodes the data and encodes it again.
    A second call into a destination that holds an earlier copy goes on where it stopped:
    what the destination already holds, equal, is skipped, and a chunk that differs or cannot
    be decoded is written again. The command line's ``gpuzarr copy`` and ``gpuzarr convert``.

    Parameters
    ----------
    source
        A path, URL, Store or kvstore dict (as :func:`gpuzarr.open` takes them), or an open
        gpuzarr Array or Group.
    destination
        Where the copy goes: a path, URL, Store or kvstore dict. It must not overlap the source.
    zarr_format
        2 or 3 (None: the source's). Codecs are translated between the formats, and xarray's
        conventions kept (dimension names, ``_FillValue``); a v3 codec with no v2 equivalent
        (crc32c, a serializer other than ``bytes``) is an error that asks for ``compressors``.
    chunks
        The chunk shape (the inner chunks when sharded); one number for every axis (None: the
        source's).
    shards
        The shard shape (a multiple of the chunks), or None for no sharding (Zarr v3 only).
        Left out: the source's.
    compressors
        The bytes -> bytes codecs (v2: the compressor): a codec or a list of them (numcodecs or
        zarr-python codec objects, or their JSON), or None for no compression. Left out: the
        source's. The filters and the serializer stay the source's.
    overwrite
        Replace the Zarr node at the destination and everything below it first (default: copy
        into it, resuming). A destination holding other data is refused.
    jobs
        Threads copying regions (or stored objects) at once; each read and write also spreads
        its chunks over gpuzarr's pool.
    progress
        Draw a progress bar on stderr (tqdm); None: only when stderr is a terminal.
    storage_options, destination_storage_options
        Options of object-store URLs (see :func:`gpuzarr.open`); the destination's default to
        the source's.

    Returns
    -------
    ConvertReport
    """
    if zarr_format not in (None, 2, 3):
        raise InvalidArgumentError(f"zarr_format: expected None, 2 or 3, got {zarr_format!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgumentError(f"jobs: expected an integer >= 1, got {jobs!r}")
    if not isinstance(overwrite, bool):
        raise InvalidArgumentError(f"overwrite: expected True or False, got {overwrite!r}")
    options = FormatOptions(zarr_format, _shape(chunks, "chunks"), _shards(shards), _compressors(compressors))
    dst_options = storage_options if destination_storage_options is None else destination_storage_options
    with _opened(source, storage_options) as node:
        store, base = make_store(destination, storage_options=dst_options)
        base = base.strip("/")  # a kvstore's "path" ends in "/"
        try:
            refuse_overlapping_nodes((node.store, node.path), (store, base))
            tally, shown = copy_nodes(
                node, store, base, options, overwrite=overwrite, jobs=jobs, progress=progress, description="convert"
            )
        finally:
            if store is not destination:  # made here: closed here (a zip archive's file)
                store.close()
    return ConvertReport(tally.arrays, tally.groups, tally.written, tally.skipped, shown.nbytes, shown.elapsed)


@contextlib.contextmanager
def _opened(source: Any, storage_options: dict[str, Any] | None) -> Iterator[Array | Group]:
    """The source node, read on the CPU: opened here from a path or store (a path's store is
    closed after), or an open Array or Group, opened again for CPU reads."""
    from ..api import open as open_node

    if isinstance(source, (Array, Group)):
        # Read on the CPU whatever device the caller opened it for: the copy writes host data.
        yield open_node(source.store, path=source.path, mode="r", device="cpu")
        return
    if isinstance(source, (str, os.PathLike)):
        with open_path(os.fspath(source), storage_options) as node:
            yield node
        return
    yield open_node(source, mode="r", device="cpu", storage_options=storage_options)


def _shape(value: Any, field: str) -> tuple[int, ...] | None:
    """``value`` (one integer for every axis, or one per axis; NumPy's integers too) as a
    tuple of integers >= 1; None stays None."""
    if value is None:
        return None
    items = [value] if isinstance(value, numbers.Integral) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise InvalidArgumentError(f"{field}: expected an integer or a sequence of integers, got {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in items):
        raise InvalidArgumentError(f"{field}: expected integers >= 1, got {value!r}")
    return tuple(int(v) for v in items)


def _shards(value: Any) -> Any:
    return value if value is KEEP or value is None else _shape(value, "shards")


def _compressors(value: Any) -> list[dict[str, Any]] | None:
    if value is KEEP:
        return None
    codecs = [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]
    return [codec_json(codec, "compressors") for codec in codecs]


__all__ = ["KEEP", "ConvertReport", "convert"]
