"""How the GPU decodes the chunks of one codec pipeline: its :class:`DecodeRoute`.

The GPU decodes chunks whose chain is ``[transpose...] bytes [compressor] [crc32c]``. Which
compressors it decodes is the table :data:`ROUTES`, keyed by the codec's Zarr name ("zstd",
"gzip", "blosc", "numcodecs.zlib", "numcodecs.lz4") like ``streams.SPLITTERS``, which takes
each one's chunks apart into nvCOMP streams. A codec whose streams nvCOMP already decodes is one
entry in each table; the codec modules themselves know nothing of the GPU. A route is decided once per chunk shape while
the GPU read plan is built (``gpu_plan``); any other chain is decoded on the CPU ("cpu", with
the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import config
from ...codecs.blosc import BloscCodec
from ...codecs.bytes import has_byte_order
from ...codecs.transpose import TransposeCodec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from ...codecs.base import BytesToBytesCodec, Codec
    from ...codecs.pipeline import CodecPipeline


@dataclass(frozen=True)
class DecodeRoute:
    """How the chunks of one pipeline are decoded.

    ``name`` is "raw" (stored bytes), the Zarr name of the chunks' compressor (a key of
    :data:`ROUTES` and of ``streams.SPLITTERS``), or "cpu" (decode with the CPU pipeline and
    copy, ``reason`` says why); ``crc32c`` means a trailing crc32c is verified and
    stripped on the host first; ``source_strides`` are the element strides of a decoded chunk
    along each (decoded) chunk axis, which is where the transpose codecs go.
    """

    name: str
    crc32c: bool = False
    reason: str | None = None
    source_strides: tuple[int, ...] = ()
    #: Blosc routes: whether the chunks need an un-shuffle scratch buffer.
    shuffled: bool = False
    #: device scratch nvCOMP's decoder needs per decoded byte (zstd: about 3)
    scratch: float = 0.0
    #: rounds of the CPU pool that decode as fast as one nvCOMP batch of these chunks: a GPU
    #: read of at most this many times ``concurrency`` chunks goes to the CPU engine (see
    #: ``reader.small_read_chunks``)
    small_read_rounds: int = 2


#: rounds of the CPU pool of a small read (``gpuzarr.config.default_small_read_chunks``): nvCOMP
#: took about 10 ms for any small zstd batch on an H100, the CPU engine 3 ms for a 64^3 crop
SMALL_READ_ROUNDS = 2
#: the same for deflate streams (gzip, zlib, Blosc-zlib). nvCOMP decodes each stream in order at
#: about 14 MB/s: 37 ms for one 512 KiB stream and 40 ms for 512 of them on an H200
#: (benchmarks/results/2026-11-28-h200-lease3.md), where one CPU core inflates such a stream
#: in 1-2 ms (ISA-L, zlib). A pool of n threads inflates 16 n of them in less than one batch
#: takes on the device.
DEFLATE_SMALL_READ_ROUNDS = 16


def c_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-ordered array of ``shape``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * int(shape[d + 1])
    return strides


def _cpu(reason: str, shape: tuple[int, ...]) -> DecodeRoute:
    return DecodeRoute("cpu", reason=reason, source_strides=tuple(c_strides(shape)))


def codec_name(codec: Codec) -> str:
    """The codec's name in Zarr metadata (``numcodecs.<id>`` for a numcodecs codec)."""
    return str(codec.to_json()["name"])


def _always_decodable(codec: BytesToBytesCodec) -> str | None:
    return None


def _never_shuffled(codec: BytesToBytesCodec) -> bool:
    return False


#: Blosc compressors whose streams nvCOMP decodes (lz4hc writes LZ4 blocks)
BLOSC_GPU_CNAMES = ("lz4", "lz4hc", "zstd", "zlib")


def _blosc_cname(codec: BytesToBytesCodec) -> str:
    """The compressor inside Blosc frames: of the ``blosc`` codec, or of ``numcodecs.blosc``
    (numcodecs' own configuration, as zarr-python 3 writes it)."""
    if isinstance(codec, BloscCodec):
        return codec.cname
    config: dict[str, Any] = getattr(codec, "config", {})
    return str(config.get("cname", "lz4"))


def _blosc_undecodable(codec: BytesToBytesCodec) -> str | None:
    cname = _blosc_cname(codec)
    return None if cname in BLOSC_GPU_CNAMES else f"blosc compressor {cname!r} has no nvCOMP decoder"


def _blosc_shuffled(codec: BytesToBytesCodec) -> bool:
    if isinstance(codec, BloscCodec):
        return codec.shuffle != "noshuffle"
    # numcodecs' shuffle: 0 none, 1 byte, 2 bit, -1 chosen by the element size (shuffled too).
    config: dict[str, Any] = getattr(codec, "config", {})
    return bool(config.get("shuffle", 1) != 0)


#: device scratch of nvCOMP's batched zstd decoder per decoded byte:
#: ``nvcompBatchedZstdDecompressGetTempSize`` of libnvcomp 6.0 (which answers without a GPU)
#: gives 3.05x the batch's decoded bytes; the Deflate and LZ4 decoders ask for none
ZSTD_SCRATCH_PER_BYTE = 3.1


def _no_scratch(codec: BytesToBytesCodec) -> float:
    return 0.0


def _zstd_scratch(codec: BytesToBytesCodec) -> float:
    return ZSTD_SCRATCH_PER_BYTE


def _blosc_scratch(codec: BytesToBytesCodec) -> float:
    return ZSTD_SCRATCH_PER_BYTE if _blosc_cname(codec) == "zstd" else 0.0


def _deflate_rounds(codec: BytesToBytesCodec) -> int:
    return DEFLATE_SMALL_READ_ROUNDS


def _blosc_rounds(codec: BytesToBytesCodec) -> int:
    return DEFLATE_SMALL_READ_ROUNDS if _blosc_cname(codec) == "zlib" else SMALL_READ_ROUNDS


@dataclass(frozen=True)
class CodecRoute:
    """What the GPU path needs to know of one bytes->bytes codec it decodes."""

    #: why this configuration of the codec has no GPU decoder (None: it has one)
    undecodable: Callable[[BytesToBytesCodec], str | None] = _always_decodable
    #: whether its chunks need an un-shuffle scratch buffer (Blosc)
    shuffled: Callable[[BytesToBytesCodec], bool] = _never_shuffled
    #: nvCOMP's decoder scratch per decoded byte
    scratch: Callable[[BytesToBytesCodec], float] = _no_scratch
    #: :attr:`DecodeRoute.small_read_rounds` of its chunks
    small_read_rounds: Callable[[BytesToBytesCodec], int] = lambda codec: SMALL_READ_ROUNDS
    #: the route its streams take (a key of ``streams.SPLITTERS``), where that is another
    #: codec's: numcodecs' names for the same streams (zarr-python 3 writes ``numcodecs.zstd``)
    decodes_as: str | None = None


#: Zarr codec name -> its GPU route. The keys are the keys of ``streams.SPLITTERS`` (the stream
#: splitter of each codec): a codec with a GPU decoder is one entry in each table.
ROUTES: dict[str, CodecRoute] = {
    "zstd": CodecRoute(scratch=_zstd_scratch),
    "gzip": CodecRoute(small_read_rounds=_deflate_rounds),
    "blosc": CodecRoute(_blosc_undecodable, _blosc_shuffled, _blosc_scratch, _blosc_rounds),
    "numcodecs.zlib": CodecRoute(small_read_rounds=_deflate_rounds),
    "numcodecs.lz4": CodecRoute(),
    "numcodecs.zstd": CodecRoute(scratch=_zstd_scratch, decodes_as="zstd"),
    "numcodecs.gzip": CodecRoute(small_read_rounds=_deflate_rounds, decodes_as="gzip"),
    "numcodecs.blosc": CodecRoute(
        _blosc_undecodable, _blosc_shuffled, _blosc_scratch, _blosc_rounds, decodes_as="blosc"
    ),
}


def _source_strides(pipeline: CodecPipeline) -> list[int] | str:
    """The element strides of a decoded chunk along each chunk axis (the transposes folded in),
    or why the array->array and array->bytes codecs have no GPU path."""
    a2b, a2b_spec = pipeline.array_to_bytes
    if codec_name(a2b) != "bytes":
        return f"array->bytes codec {codec_name(a2b)!r} (e.g. transpose before sharding) has no GPU path"
    strides = c_strides(a2b_spec.shape)
    for codec, _ in reversed(pipeline.array_to_array):
        if codec_name(codec) != "transpose":
            return f"array->array codec {codec_name(codec)!r} has no GPU path"
        assert isinstance(codec, TransposeCodec)  # narrows the type
        inverse = codec.inverse
        strides = [strides[inverse[d]] for d in range(len(inverse))]
    return strides


def decode_route(pipeline: CodecPipeline) -> DecodeRoute:
    """The GPU route of a chunk pipeline, or a CPU fallback naming what the GPU cannot do."""
    shape = pipeline.spec.shape
    strides = _source_strides(pipeline)
    if isinstance(strides, str):
        return _cpu(strides, shape)
    b2b = list(pipeline.bytes_to_bytes)
    has_crc = bool(b2b) and codec_name(b2b[-1]) == "crc32c"
    if has_crc:
        b2b.pop()
    names = [codec_name(c) for c in b2b]
    if "crc32c" in names:
        return _cpu(f"crc32c inside the chain {names} (only a final crc32c is checked on the host)", shape)
    if len(b2b) > 1:
        return _cpu(f"more than one bytes->bytes codec {names} (filters run on the CPU)", shape)
    if not b2b:
        return DecodeRoute("raw", has_crc, None, tuple(strides))
    compressor, name = b2b[0], names[0]
    if not config.get("gpu_trust_payloads"):
        # Whoever crafts a stream writes its checksum too, and nvCOMP decodes streams before any
        # check of gpuzarr's reads its verdict: no compressed payload goes to it.
        return _cpu(f"{name} chunks of untrusted data (gpu_trust_payloads=False)", shape)
    route = ROUTES.get(name)
    if route is None:
        return _cpu(f"codec {name!r} has no GPU decoder", shape)
    reason = route.undecodable(compressor)
    if reason is not None:
        return _cpu(reason, shape)
    return DecodeRoute(
        route.decodes_as or name,
        has_crc,
        None,
        tuple(strides),
        route.shuffled(compressor),
        route.scratch(compressor),
        route.small_read_rounds(compressor),
    )


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


__all__ = [
    "DEFLATE_SMALL_READ_ROUNDS",
    "DIRECT_ROUTES",
    "SMALL_READ_ROUNDS",
    "ROUTES",
    "ZSTD_SCRATCH_PER_BYTE",
    "CodecRoute",
    "DecodeRoute",
    "c_strides",
    "codec_name",
    "decode_route",
    "reads_directly",
    "swap_width",
]
