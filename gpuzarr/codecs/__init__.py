"""Codecs: a registry keyed by Zarr v3 name and one small immutable class per codec.

The lifecycle (spec -> resolve -> prepare -> run) is written down in :mod:`.base`; the prepared
chain of one chunk shape is a :class:`CodecPipeline`. Codec modules register themselves and are
imported on first use (:func:`codec_from_json`), not at package import, so that importing gpuzarr
sets up no compressor library. Users add codecs with :func:`register_codec`.
"""

from __future__ import annotations

from .base import ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec, ChunkSpec, Codec
from .pipeline import CodecPipeline
from .registry import codec_from_json, register_codec, registered_codecs

__all__ = [
    "ArrayToArrayCodec",
    "ArrayToBytesCodec",
    "BytesToBytesCodec",
    "ChunkSpec",
    "Codec",
    "CodecPipeline",
    "codec_from_json",
    "register_codec",
    "registered_codecs",
]
