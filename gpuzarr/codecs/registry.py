"""The codec registry: Zarr v3 codec name -> codec class."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MetadataError, UnknownCodecError

if TYPE_CHECKING:
    from ..metadata.json_types import CodecJSON
    from .base import Codec

_REGISTRY: dict[str, type[Codec]] = {}
_builtins_loaded = False


def register_codec(cls: type[Codec]) -> type[Codec]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    _REGISTRY[cls.name] = cls
    return cls


def registered_codecs() -> list[str]:
    _load_builtin_codecs()
    return sorted(_REGISTRY)


def codec_from_json(
    spec: CodecJSON | dict[str, Any], field: str = "codecs", *, after_array_to_bytes: bool = False
) -> Codec:
    """Build a codec from ``{"name": ..., "configuration": {...}}``.

    ``after_array_to_bytes``: the codec follows the chain's array->bytes codec. A numcodecs
    filter there runs on the chunk's bytes, as Zarr v2 chains place filters
    (:mod:`.numcodecs_codec`).
    """
    _load_builtin_codecs()
    name = spec.get("name")
    if isinstance(name, str) and name.startswith("numcodecs."):
        config = spec.get("configuration") or {}
        if not isinstance(config, dict):
            raise MetadataError(f"{field}.configuration: expected an object, got {config!r}")
        try:
            return _numcodecs_codec(name[len("numcodecs.") :], dict(config), after_array_to_bytes)
        except MetadataError as exc:
            raise type(exc)(f"{field} ({name}): {exc}") from exc
    cls = _REGISTRY.get(name)  # type: ignore[arg-type]
    if cls is None:
        raise UnknownCodecError(
            f"{field}: unknown codec {name!r} (known: {', '.join(sorted(_REGISTRY))})"
        )
    config = spec.get("configuration") or {}
    if not isinstance(config, dict):
        raise MetadataError(f"{field}.configuration: expected an object, got {config!r}")
    try:
        return cls.from_config(config)
    except MetadataError as exc:
        raise type(exc)(f"{field} ({name}): {exc}") from exc


def _numcodecs_codec(codec_id: str, config: dict[str, Any], after_array_to_bytes: bool) -> Codec:
    from ..metadata.numcodecs_v3 import ARRAY_TO_ARRAY_IDS, ARRAY_TO_BYTES_IDS, BYTES_TO_BYTES_IDS
    from .numcodecs_codec import NumcodecsCodec
    from .numcodecs_filters import NumcodecsFilter, NumcodecsSerializer

    if after_array_to_bytes:
        # Compressors and checksums receive bytes; anything else there is a v2-placed filter.
        return NumcodecsCodec.from_id(codec_id, config, typed=codec_id not in BYTES_TO_BYTES_IDS)
    if codec_id in ARRAY_TO_ARRAY_IDS:
        return NumcodecsFilter.from_id(codec_id, config)
    if codec_id in ARRAY_TO_BYTES_IDS:
        return NumcodecsSerializer.from_id(codec_id, config)
    return NumcodecsCodec.from_id(codec_id, config)


def _load_builtin_codecs() -> None:
    # Imported on first use, not at package import, so `import gpuzarr` stays cheap.
    global _builtins_loaded
    if _builtins_loaded:
        return
    from . import blosc, bytes, crc32c, gzip, sharding, transpose, vlen, zstd  # noqa: F401

    _builtins_loaded = True
