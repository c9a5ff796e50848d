"""How the GPU decodes the chunks of one codec pipeline: its :class:`DecodeRoute`.

A route names the stream splitter of ``streams`` that takes a chunk apart into nvCOMP streams,
or "cpu" (decode with the CPU pipeline and copy) with the reason. Decided once per chunk shape
while the GPU read plan is built (``gpu_plan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...codecs.blosc import BloscCodec
from ...codecs.bytes import BytesCodec, has_byte_order
from ...codecs.crc32c import Crc32cCodec
from ...codecs.gzip import GzipCodec
from ...codecs.numcodecs_codec import NumcodecsCodec
from ...codecs.pipeline import CodecPipeline
from ...codecs.transpose import TransposeCodec
from ...codecs.zstd import ZstdCodec

RouteName = Literal["raw", "zstd", "gzip", "zlib", "lz4", "blosc", "cpu"]


@dataclass(frozen=True)
class DecodeRoute:
    """How the chunks of one pipeline are decoded.

    ``name`` is the stream splitter (``streams.split_chunk``) or "cpu" (decode with the CPU
    pipeline and copy, ``reason`` says why); ``crc32c`` means a trailing crc32c is verified and
    stripped on the host first; ``source_strides`` are the element strides of a decoded chunk
    along each (decoded) chunk axis, which is where the transpose codecs go.
    """

    name: RouteName
    crc32c: bool = False
    reason: str | None = None
    source_strides: tuple[int, ...] = ()
    #: Blosc routes: whether the chunks need an un-shuffle scratch buffer.
    shuffled: bool = False


def c_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-ordered array of ``shape``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * int(shape[d + 1])
    return strides


def _cpu(reason: str, shape: tuple[int, ...]) -> DecodeRoute:
    return DecodeRoute("cpu", reason=reason, source_strides=tuple(c_strides(shape)))


def decode_route(pipeline: CodecPipeline) -> DecodeRoute:
    """The GPU route of a chunk pipeline, or a CPU fallback naming what the GPU cannot do."""
    shape = pipeline.spec.shape
    a2b, a2b_spec = pipeline.array_to_bytes
    if not isinstance(a2b, BytesCodec):
        return _cpu(f"array->bytes codec {a2b.name!r} (e.g. transpose before sharding) has no GPU path", shape)
    strides = c_strides(a2b_spec.shape)
    for codec, _ in reversed(pipeline.array_to_array):
        if not isinstance(codec, TransposeCodec):
            return _cpu(f"array->array codec {codec.name!r} has no GPU path", shape)
        inverse = codec.inverse
        strides = [strides[inverse[d]] for d in range(len(inverse))]
    b2b = list(pipeline.bytes_to_bytes)
    has_crc = bool(b2b) and isinstance(b2b[-1], Crc32cCodec)
    if has_crc:
        b2b.pop()
    names = [c.name if not isinstance(c, NumcodecsCodec) else f"numcodecs.{c.codec_id}" for c in b2b]
    if any(isinstance(c, Crc32cCodec) for c in b2b):
        return _cpu(f"crc32c inside the chain {names} (only a final crc32c is checked on the host)", shape)
    if len(b2b) > 1:
        return _cpu(f"more than one bytes->bytes codec {names} (filters run on the CPU)", shape)
    route: RouteName = "raw"
    shuffled = False
    if b2b:
        compressor = b2b[0]
        if isinstance(compressor, ZstdCodec):
            route = "zstd"
        elif isinstance(compressor, GzipCodec):
            route = "gzip"
        elif isinstance(compressor, BloscCodec):
            if compressor.cname not in ("lz4", "lz4hc", "zstd", "zlib"):
                return _cpu(f"blosc compressor {compressor.cname!r} has no nvCOMP decoder", shape)
            route = "blosc"
            shuffled = compressor.shuffle != "noshuffle"
        elif isinstance(compressor, NumcodecsCodec) and compressor.codec_id in ("zlib", "lz4"):
            route = "zlib" if compressor.codec_id == "zlib" else "lz4"
        else:
            return _cpu(f"codec {names[0]!r} has no GPU decoder", shape)
    return DecodeRoute(route, has_crc, None, tuple(strides), shuffled)


def swap_width(pipeline: CodecPipeline, dtype: np.dtype[Any]) -> int:
    """assemble.cu's ``swap_width`` for the chain's ``bytes`` codec (0: no swap)."""
    bc = pipeline.bytes_codec
    # Raw bytes and structured types have no byte order of their own to swap.
    if bc is None or bc.is_native or not has_byte_order(dtype):
        return 0
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


#: routes whose stored bytes are their own nvCOMP stream (or the decoded chunk), so the device
#: can read them from the file without the host looking at them
DIRECT_ROUTES = ("raw", "zstd")


def reads_directly(route: DecodeRoute) -> bool:
    """Whether chunks of ``route`` may go from a file straight to the device."""
    return route.name in DIRECT_ROUTES and not route.crc32c


__all__ = ["DIRECT_ROUTES", "DecodeRoute", "RouteName", "c_strides", "decode_route", "reads_directly", "swap_width"]
