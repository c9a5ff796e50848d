"""``blosc`` — bytes -> bytes, Blosc1 frames (through numcodecs).

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/blosc/index.html
v3 name ``blosc`` (v2 id ``blosc``). Configuration::

    {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                         "typesize": 2, "blocksize": 0}}

``typesize`` may be omitted; it is resolved from the data type. The 16-byte frame header is
checked on the host before decompressing, so a truncated or forged frame becomes an error rather
than an out-of-bounds read, and its ``nbytes`` (which c-blosc allocates) and ``blocksize`` (its
per-thread scratch) are compared with the chunk's size first.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import MetadataError
from ..metadata.dtypes import is_variable_length
from .base import BytesToBytesCodec, ChunkSpec, as_uint8
from .bounded import check_decoded_size, compressed_size_bound
from .registry import register_codec

if TYPE_CHECKING:
    import numpy as np

    from ..store.base import Buffer

CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "zlib", "snappy")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
BLOSC_HEADER_NBYTES = 16


class BloscHeader(NamedTuple):
    version: int
    version_lz: int
    flags: int
    typesize: int
    nbytes: int
    blocksize: int
    cbytes: int

    @property
    def memcpyed(self) -> bool:
        return bool(self.flags & 0x2)


def parse_blosc_header(data: Buffer) -> BloscHeader:
    """Parse and sanity-check a Blosc1 frame header against the frame's length."""
    raw = as_uint8(data)
    if raw.size < BLOSC_HEADER_NBYTES:
        raise ValueError(f"blosc frame of {raw.size} bytes is shorter than its 16-byte header")
    header = BloscHeader(*struct.unpack_from("<BBBBIII", raw[:BLOSC_HEADER_NBYTES].tobytes()))
    if header.cbytes != raw.size:
        raise ValueError(f"blosc header says {header.cbytes} compressed bytes, frame has {raw.size}")
    if header.typesize == 0 or (header.nbytes and header.blocksize == 0):
        raise ValueError(f"blosc header is invalid: {header}")
    # c-blosc never writes a block larger than the data (it shrinks the block to fit), and
    # allocates scratch of the block's size to decode: a larger one is forged.
    if header.blocksize > header.nbytes:
        raise ValueError(f"blosc header's blocksize {header.blocksize} exceeds its nbytes {header.nbytes}")
    return header


@register_codec
@dataclass(frozen=True)
class BloscCodec(BytesToBytesCodec):
    name = "blosc"
    cname: str = "lz4"
    clevel: int = 5
    shuffle: str = "noshuffle"
    typesize: int | None = None
    blocksize: int = 0
    _impl: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        from numcodecs import Blosc

        impl = Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle],
            blocksize=self.blocksize,
            typesize=self.typesize,
        )
        object.__setattr__(self, "_impl", impl)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BloscCodec:
        extra = set(config) - {"cname", "clevel", "shuffle", "typesize", "blocksize"}
        if extra:
            raise MetadataError(f"configuration: unexpected members {sorted(extra)}")
        cname = config.get("cname", "lz4")
        if not isinstance(cname, str) or cname not in CNAMES:
            raise MetadataError(f"configuration.cname: expected one of {list(CNAMES)}, got {cname!r}")
        clevel = config.get("clevel", 5)
        if isinstance(clevel, bool) or not isinstance(clevel, int) or not 0 <= clevel <= 9:
            raise MetadataError(f"configuration.clevel: expected an integer 0-9, got {clevel!r}")
        shuffle = config.get("shuffle", "noshuffle")
        if not isinstance(shuffle, str) or shuffle not in SHUFFLES:
            raise MetadataError(
                f"configuration.shuffle: expected one of {list(SHUFFLES)}, got {shuffle!r}"
            )
        typesize = config.get("typesize")
        if typesize is not None and (
            isinstance(typesize, bool) or not isinstance(typesize, int) or not 1 <= typesize <= 255
        ):
            raise MetadataError(f"configuration.typesize: expected an integer 1-255, got {typesize!r}")
        blocksize = config.get("blocksize", 0)
        if isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 0:
            raise MetadataError(f"configuration.blocksize: expected an integer >= 0, got {blocksize!r}")
        return cls(cname, clevel, shuffle, typesize, blocksize)

    def configuration(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "cname": self.cname,
            "clevel": self.clevel,
            "shuffle": self.shuffle,
            "blocksize": self.blocksize,
        }
        if self.typesize is not None:
            config["typesize"] = self.typesize
        return config

    def resolve(self, spec: ChunkSpec) -> BloscCodec:
        if self.typesize is not None:
            return self
        # After vlen-utf8/vlen-bytes the stream is plain bytes (zarr-python's typesize 1 too).
        typesize = 1 if is_variable_length(spec.dtype) else spec.dtype.itemsize
        return BloscCodec(self.cname, self.clevel, self.shuffle, typesize, self.blocksize)

    def max_encoded_size(self, input_nbytes: int) -> int:
        return compressed_size_bound(input_nbytes)

    def decode(
        self, data: Buffer, out: np.ndarray[Any, Any] | None = None, max_nbytes: int | None = None
    ) -> Buffer:
        return decode_blosc(self._impl, data, out, max_nbytes)

    def encode(self, data: Buffer) -> Buffer:
        return self._impl.encode(as_uint8(data))

    def starts_own_threads_here(self) -> bool:
        return numcodecs_blosc_threads_here()


def numcodecs_blosc_threads_here() -> bool:
    """Whether numcodecs' Blosc, called from this thread, runs c-blosc's global context with
    its own threads: by numcodecs' documented rule, when ``numcodecs.blosc.use_threads`` is
    True, or None (its default) on the main thread; and only with more than one thread set.
    Elsewhere it decodes in a context of its own on the calling thread alone."""
    from numcodecs import blosc

    setting = blosc.use_threads
    if setting is None:
        setting = threading.current_thread() is threading.main_thread()
    return bool(setting) and blosc.get_nthreads() > 1


def decode_blosc(impl: Any, data: Buffer, out: np.ndarray[Any, Any] | None, max_nbytes: int | None) -> Buffer:
    """Decode a Blosc1 frame with numcodecs' ``impl`` once its header fits the bound: exactly
    ``out``'s size when given, else at most ``max_nbytes``."""
    header = parse_blosc_header(data)
    if out is not None and out.nbytes != header.nbytes:
        raise ValueError(f"blosc: header says {header.nbytes} decoded bytes, expected {out.nbytes}")
    check_decoded_size("blosc", header.nbytes, max_nbytes)
    return impl.decode(data, out)
