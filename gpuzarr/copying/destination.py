"""The metadata of an array's copy: the source's, with the format options of ``copy``/``convert``.

Every option left out keeps what the source has. With none given (or only ``--zarr-format``
equal to the source's) the copy's metadata *is* the source's, document for document, and the
copy can move stored bytes without decoding them (:mod:`.copy`). Otherwise the metadata is
built again through ``build_metadata`` (the builder ``gpuzarr.create`` uses) from the source's
shape, data type, fill value, attributes, dimension names and codecs:

* ``--chunks`` sets the chunk shape (the inner chunks when sharded); ``--shards`` the shard
  shape, "none" removing sharding; a sharded source keeps its shards unless told otherwise
  (a v2 copy has none: Zarr v2 cannot shard).
* ``--compressor`` replaces the bytes->bytes codecs (v2: the compressor); the source's filters
  and serializer stay. A re-sharded array gets gpuzarr's default shard index codecs.
* Across formats the codecs are translated: numcodecs JSON of a v2 array becomes the Zarr v3
  codec of that name (as zarr-python's v2 -> v3 migration maps it), and zstd, gzip, blosc and
  ``numcodecs.*`` codecs of a v3 array become numcodecs JSON; a v3 codec with no v2 equivalent
  (crc32c, a transpose other than Fortran order, a serializer other than ``bytes``) is an error
  that asks for ``--compressor``.
* Across formats xarray's conventions are kept (:mod:`.xarray_conventions`), so that xarray
  reads the same dataset from the copy: v3 ``dimension_names`` become the ``_ARRAY_DIMENSIONS``
  attribute of a v2 copy, and back; a v3 ``_FillValue`` attribute becomes the ``fill_value`` of
  a v2 copy (null without one), and a v2 ``fill_value`` becomes both the ``fill_value`` and the
  xarray-encoded ``_FillValue`` attribute of a v3 copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, MetadataError
from ..layout import ArrayLayout, with_complete_codecs
from ..metadata.build import build_metadata
from ..metadata.codec_args import codec_json_v2
from ..metadata.dtypes import DataType
from ..metadata.json_util import keeping_attributes
from ..metadata.named_dtypes import NAMES
from ..metadata.rectilinear import RectilinearChunkGrid
from ..metadata.v2 import ArrayMetadataV2
from .xarray_conventions import (
    DIMENSIONS_ATTRIBUTE,
    FILL_VALUE_ATTRIBUTE,
    decode_fill_attribute,
    encode_fill_attribute,
    xarray_decodes_fill_attribute,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..core.array import Array
    from ..metadata.v3 import ArrayMetadata

#: Blosc's shuffle names (Zarr v3) and numbers (numcodecs)
BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def for_rank(values: tuple[int, ...], ndim: int, option: str, where: str) -> tuple[int, ...]:
    """A shape option for an array of ``ndim`` axes: one number widened to every axis.

    Raises InvalidArgumentError naming the option and the array when the ranks differ.
    """
    if len(values) == 1:
        return values * ndim
    if len(values) != ndim:
        raise InvalidArgumentError(
            f"{option} {','.join(map(str, values))}: {where} has {ndim} dimensions, got {len(values)} "
            "sizes (one size applies to every axis)"
        )
    return values


class _Keep:
    """``--shards`` not given: the source's shards stay (not a string: argparse would parse a
    string default as an option value)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()

@dataclass(frozen=True)
class FormatOptions:
    """What ``copy``/``convert`` change; None (``KEEP`` for shards) keeps the source's."""

    zarr_format: int | None = None
    chunks: tuple[int, ...] | None = None
    shards: Any = KEEP  # a shape, None (no sharding) or KEEP
    compressors: list[dict[str, Any]] | None = None

    def keeps_encoding_of(self, array: Array) -> bool:
        """Whether the copy of ``array`` is encoded exactly as ``array`` is."""
        return (
            self.zarr_format in (None, array.zarr_format)
            and self.chunks is None
            and self.shards is KEEP
            and self.compressors is None
        )


def _kept_chunks(source: Array) -> Any:
    """``source``'s chunks as ``create`` takes them: an unsharded rectilinear grid as its listed
    sizes per axis (``Array.chunks`` cuts them at the array's edge, ``(0,)`` on an empty axis,
    which lost the sizes a shrink left listed, or was refused)."""
    grid = source.metadata.chunk_grid
    if source.shards is None and isinstance(grid, RectilinearChunkGrid):
        return tuple(grid.chunk_shapes)
    return source.chunks


def _kept_shards(source: Array) -> Any:
    """``source``'s shards as ``create`` takes them: a rectilinear grid of shards as its sizes
    per axis (``Array.shards`` gives the largest shard, which would make the copy regular)."""
    grid = source.metadata.chunk_grid
    if source.shards is not None and isinstance(grid, RectilinearChunkGrid):
        return [list(sizes) if isinstance(sizes, tuple) else sizes for sizes in grid.chunk_shapes]
    return source.shards


def target_metadata(source: Array, options: FormatOptions, where: str) -> ArrayMetadata | ArrayMetadataV2:
    """The metadata of the copy of ``source`` (named ``where`` in errors)."""
    if options.keeps_encoding_of(source):
        return source.metadata
    zarr_format = options.zarr_format or source.zarr_format
    chunks: Any = (
        _kept_chunks(source) if options.chunks is None else for_rank(options.chunks, source.ndim, "chunks", where)
    )
    if options.shards is KEEP:
        shards = _kept_shards(source) if zarr_format == 3 else None
    elif options.shards is None:
        shards = None
    elif zarr_format == 2:
        raise InvalidArgumentError(f"shards: {where}: Zarr v2 arrays cannot be sharded")
    else:
        shards = for_rank(options.shards, source.ndim, "shards", where)
    if shards is not None and any(isinstance(c, tuple) for c in chunks):
        raise InvalidArgumentError(
            f"chunks: {where}: the array's chunk grid is rectilinear, and the inner chunks of shards "
            "are of one size; give them (the command line's --chunks, e.g. --chunks 64)"
        )
    if zarr_format == 2 and any(isinstance(c, tuple) for c in chunks):
        raise InvalidArgumentError(
            f"chunks: {where}: Zarr v2 has no rectilinear (variable) chunk grids; give regular "
            "chunks (the command line's --chunks, e.g. --chunks 64)"
        )
    arguments = {"fill_value": source.fill_value}
    if zarr_format == 3:
        arguments.update(_v3_arguments(source))
    else:
        arguments.update(_v2_arguments(source, where, options.compressors))
    if options.compressors is not None:
        arguments["compressors"] = options.compressors
    try:
        # The source's attributes keep the NaN and infinite numbers its document held.
        with keeping_attributes(dict(source.attrs)):
            metadata = build_metadata(
                shape=source.shape,
                chunks=[list(c) if isinstance(c, tuple) else c for c in chunks],
                shards=shards,
                zarr_format=zarr_format,
                **arguments,
            )
        # The codec chain resolved too (the array's is, when the copy creates it): a chain that
        # does not fit (inner chunks that do not divide a shard the source's serializer names)
        # stopped the copy half-written, naming a key of DST instead of the array. Codecs given
        # in part are written whole, as creation writes them (TensorStore refuses some).
        if not isinstance(metadata, ArrayMetadataV2):
            metadata = with_complete_codecs(metadata)
        ArrayLayout.from_metadata(metadata)
    except MetadataError as exc:
        raise type(exc)(f"{where}: {exc}") from exc
    return metadata


def _v3_arguments(source: Array) -> dict[str, Any]:
    """``build_metadata`` arguments of a v3 copy (v2 codecs as numcodecs JSON, which the
    builder maps to v3)."""
    info = source.info
    attributes = dict(source.attrs)
    metadata = source.metadata
    if isinstance(metadata, ArrayMetadataV2):
        names = attributes.get(DIMENSIONS_ATTRIBUTE)
        if _valid_names(names, source.ndim):
            del attributes[DIMENSIONS_ATTRIBUTE]  # v3 says it as dimension_names
        else:
            names = None  # kept as the attribute it is (it was dropped)
        object_codec = metadata.data_type.object_codec_id
        if source.fill_value is not None and xarray_decodes_fill_attribute(source.dtype):
            # xarray reads a v2 fill value as _FillValue; in v3 it reads the attribute instead,
            # and only for the kinds it decodes (one it cannot failed the whole dataset's open).
            attributes[FILL_VALUE_ATTRIBUTE] = encode_fill_attribute(source.fill_value, source.dtype)
        data_type = metadata.data_type
        if data_type.fill_kind == "r" and data_type.numpy_dtype.fields is None:
            # v2's |V<n> as gpuzarr writes a V<n> array itself (raw_bytes), which zarr-python
            # opens; the r<bits> the v2 parser names it was refused there.
            data_type = DataType.from_numpy(data_type.numpy_dtype)
        return {
            "dtype": data_type,
            # The object codec of a string array is the v3 serializer, which the builder picks.
            "filters": [f for f in info.filters if f.get("id") != object_codec],
            "compressors": list(info.compressors),
            "order": metadata.order,
            "attributes": attributes,
            "dimension_names": names if _valid_names(names, source.ndim) else None,
        }
    return {
        "dtype": metadata.data_type,
        "filters": list(info.filters),
        "serializer": info.serializer,
        "compressors": list(info.compressors),
        "attributes": attributes,
        "dimension_names": source.dimension_names,
        "chunk_key_encoding": metadata.chunk_key_encoding.to_json(),
    }


def _valid_names(names: Any, ndim: int) -> bool:
    return isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names)


def _fill_said_by_no_attribute(dtype: Any, fill: Any) -> bool:
    kind = dtype.kind
    return kind in "mMV" or (kind in "SU" and fill is not None and bool(fill))


def _v2_arguments(source: Array, where: str, compressors: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``build_metadata`` arguments of a v2 copy (the source's compressors translated unless
    ``compressors`` replace them)."""
    info = source.info
    attributes = dict(source.attrs)
    metadata = source.metadata
    if isinstance(metadata, ArrayMetadataV2):
        return {
            "dtype": _v2_dtype(source, metadata.endian == "big"),
            "filters": list(info.filters),
            "compressors": list(info.compressors),
            "order": metadata.order,
            "attributes": attributes,
            "dimension_separator": metadata.dimension_separator,
        }
    order = "C"
    filters = list(info.filters)
    if filters and filters[0]["name"] == "transpose":
        # The reversed order is v2's "F"; any other order is a layout v2 cannot store, and the
        # copy decodes and encodes every chunk anyway: stored in C order, the values the same.
        if list(filters[0]["configuration"]["order"]) == list(range(source.ndim))[::-1]:
            order = "F"
        filters = filters[1:]
    names = source.dimension_names
    if names is None and source.ndim == 0:
        names = ()  # xarray writes no dimension_names for a scalar, but needs [] in v2
    if names is not None and all(isinstance(n, str) for n in names):
        attributes.setdefault(DIMENSIONS_ATTRIBUTE, list(names))
    # In v2 xarray's _FillValue is the array's fill_value (xarray writes null without one).
    fill = attributes.pop(FILL_VALUE_ATTRIBUTE, None)
    fill_value = None if fill is None else decode_fill_attribute(fill, source.dtype, where)
    if fill is None and _fill_said_by_no_attribute(source.dtype, source.fill_value):
        # No attribute can say it for dates, durations, opaque bytes and non-empty text (xarray
        # decodes none, and the v2 -> v3 copy writes none): the array's own fill value goes, so
        # that a v2 -> v3 -> v2 round trip keeps it. Empty text (xarray's own string arrays) stays
        # null, which is what xarray writes in v2.
        fill_value = source.fill_value
    serializer: Mapping[str, Any] = info.serializer or {}
    if serializer.get("name") not in ("bytes", "vlen-utf8", "vlen-bytes"):
        raise _no_v2_equivalent(where, serializer, "its serializer has none")
    big = (serializer.get("configuration") or {}).get("endian") == "big"
    return {
        "dtype": _v2_dtype(source, big),
        "filters": [_v2_codec(f, where) for f in filters],
        "compressors": compressors if compressors is not None else [_v2_codec(c, where) for c in info.compressors],
        "order": order,
        "attributes": attributes,
        "fill_value": fill_value,
    }


def _v2_dtype(source: Array, big_endian: bool) -> Any:
    data_type = source.metadata.data_type
    if data_type.name in NAMES:
        return data_type  # strings, bytes, times: the builder writes their v2 spelling
    dtype = source.dtype
    return dtype.newbyteorder(">") if big_endian and dtype.itemsize > 1 else dtype


def _v2_codec(codec: dict[str, Any], where: str) -> dict[str, Any]:
    """A v3 codec as numcodecs JSON, for a v2 array."""
    name = codec["name"]
    config = dict(codec.get("configuration") or {})
    if name == "zstd":
        out = {"id": "zstd", "level": config.get("level", 0)}
        return {**out, "checksum": True} if config.get("checksum") else out
    if name == "gzip":
        return {"id": "gzip", "level": config.get("level", 6)}
    if name == "blosc":
        return {
            "id": "blosc",
            "cname": config.get("cname", "lz4"),
            "clevel": config.get("clevel", 5),
            "shuffle": BLOSC_SHUFFLES.get(config.get("shuffle", "noshuffle"), 0),
            "blocksize": config.get("blocksize", 0),
        }
    if name.startswith("numcodecs."):
        return codec_json_v2(codec, where)
    raise _no_v2_equivalent(where, codec, "Zarr v2 has no such codec")


def _no_v2_equivalent(where: str, codec: Mapping[str, Any], why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{where}: the codec {codec.get('name')!r} cannot be written in Zarr v2 ({why}); "
        "choose v2 codecs with compressors (the command line's --compressor, e.g. zstd:3)"
    )
