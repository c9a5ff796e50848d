"""``gpuzarr copy SRC DST`` and ``gpuzarr convert SRC DST``: one implementation, two names, over
the engine of :func:`gpuzarr.convert` (:mod:`gpuzarr.copying.engine`, whose docstring says how
data moves and how a rerun resumes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..copying.destination import KEEP, FormatOptions
from ..copying.engine import copy_nodes
from ..copying.nodes import open_path
from ..copying.places import refuse_overlapping_nodes
from ..metadata.limits import format_bytes
from ..store import make_store, takes_storage_options
from ..store.shown import shown_url
from .codec_options import compressor_chain, shards_option
from .options import add_jobs_option, add_progress_option, add_storage_options, json_object, shape

if TYPE_CHECKING:
    import argparse

DESCRIPTIONS = {
    "copy": "Copy an array or a whole hierarchy (groups, arrays, attributes) from SRC to DST. "
    "Without format options the stored bytes are copied as they are; with them, the data is "
    "decoded and encoded again. A rerun resumes: what DST already holds equal to SRC is skipped.",
    "convert": "Copy SRC to DST in another format: Zarr version, chunk and shard shapes, "
    "compression (the same command as copy; options left out keep what SRC has).",
}


def add_parser(subparsers: Any) -> None:
    for name, summary in (("copy", "copy arrays and groups between stores"), ("convert", "copy into another format")):
        parser = subparsers.add_parser(name, help=summary, description=DESCRIPTIONS[name])
        parser.add_argument("source", metavar="SRC", help="the array or group to copy (a path or store URL)")
        parser.add_argument("destination", metavar="DST", help="where the copy goes (a path or store URL)")
        fmt = parser.add_argument_group("format of the copy (left out: as SRC has it)")
        fmt.add_argument("--zarr-format", type=int, choices=(2, 3), help="the Zarr format version")
        fmt.add_argument(
            "--chunks", type=shape, metavar="SHAPE",
            help="chunk shape, e.g. 64,64,64 (the inner chunks when sharded; one number for every axis)",
        )
        fmt.add_argument(
            "--shards", type=shards_option, default=KEEP, metavar="SHAPE|none",
            help="shard shape, e.g. 256,256,256 (a multiple of the chunks), or none (Zarr v3 only)",
        )
        fmt.add_argument(
            "--compressor", type=compressor_chain, metavar="SPEC",
            help="compression: none, zstd[:LEVEL], gzip[:LEVEL], blosc[:CNAME[:CLEVEL[:SHUFFLE]]], "
            "crc32c (v3), several joined by '+' (zstd:5+crc32c), or a codec as JSON",
        )
        parser.add_argument(
            "--overwrite", action="store_true",
            help="replace the Zarr node at DST and everything below it (default: resume into it); a DST "
            "holding other data is refused",
        )
        add_jobs_option(parser, "regions copied")
        add_progress_option(parser)
        add_storage_options(parser, "SRC (and DST, unless --dst-storage-options)")
        parser.add_argument(
            "--dst-storage-options", type=json_object, metavar="JSON", help="options of the store DST names"
        )
        parser.set_defaults(run=run)


def _options_of_each_end(args: argparse.Namespace) -> tuple[Any, Any]:
    """The storage options of SRC and of DST: ``--storage-options`` go to each end whose URL
    takes them (an object store, HTTP, fsspec), and to SRC where neither does (which refuses
    them, naming it); ``--dst-storage-options`` go to DST."""
    shared = args.storage_options
    takes = [takes_storage_options(end) for end in (args.source, args.destination)]
    src = shared if takes[0] or not takes[1] else None
    if args.dst_storage_options is not None:
        return src, args.dst_storage_options
    return src, shared if takes[1] else None


def run(args: argparse.Namespace) -> int:
    options = FormatOptions(args.zarr_format, args.chunks, args.shards, args.compressor)
    src_options, dst_options = _options_of_each_end(args)
    with open_path(args.source, src_options) as source:
        store, base = make_store(args.destination, storage_options=dst_options)
        try:
            refuse_overlapping_nodes((source.store, source.path), (store, base.strip("/")))
            tally, progress = copy_nodes(
                source, store, base, options, overwrite=args.overwrite, jobs=args.jobs, progress=args.progress,
                description=args.command,
            )
        finally:
            store.close()
    elapsed = progress.elapsed
    rate = f" ({format_bytes(int(progress.nbytes / elapsed))}/s)" if elapsed > 0 else ""
    print(
        f"{args.command}: {tally.arrays} array(s), {tally.groups} group(s) from {shown_url(args.source)} "
        f"to {shown_url(args.destination)}: "
        f"{tally.written} chunks written, {tally.skipped} already equal (skipped); "
        # The arrays' decoded size, missing chunks (the fill value) included: what was gone over.
        f"{format_bytes(progress.nbytes)} of array data in {elapsed:.2f} s{rate}"
    )
    return 0
