"""``--compressor`` values: short codec specs -> codec JSON that ``gpuzarr.create`` takes.

::

    none                      no compression
    zstd[:LEVEL]              zstd, level 3 by default
    gzip[:LEVEL]              gzip, level 6 by default
    blosc[:CNAME[:CLEVEL[:SHUFFLE]]]
                              blosc, lz4:5:shuffle by default; SHUFFLE is noshuffle, shuffle
                              or bitshuffle
    crc32c                    a CRC-32C checksum (Zarr v3 only)
    {"id": "lz4", ...}        any codec as JSON: numcodecs (v2 style) or {"name": ...} (v3)

Several codecs, applied in turn, are separated by "+": ``zstd:5+crc32c``. The short forms give
numcodecs JSON (``{"id": "zstd", "level": 5}``), which ``create`` maps to the Zarr v3 codec of
that name for a v3 array and keeps for a v2 one, so one spelling serves both formats.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..copying.destination import BLOSC_SHUFFLES

DEFAULT_LEVELS = {"zstd": 3, "gzip": 6}
BLOSC_DEFAULT = ("lz4", 5, "shuffle")
BLOSC_CNAMES = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")


def compressor_chain(text: str) -> list[dict[str, Any]]:
    """The codecs an ``--compressor`` value names ([] for "none"); an argparse type."""
    text = text.strip()
    if text.startswith("{"):
        return [_json_codec(text)]
    if text.lower() == "none":
        return []
    return [_short_codec(part.strip()) for part in text.split("+")]


def _json_codec(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict) or not ("id" in value or "name" in value):
        raise argparse.ArgumentTypeError(f"expected a codec object with an 'id' or a 'name', got {text}")
    _check_codec(value)
    return value


def _check_codec(value: dict[str, Any]) -> None:
    """Refuse a codec that cannot be built, before any store is touched: an unknown codec or a
    configuration member its codec does not take would otherwise be written into metadata
    that no reader (zarr-python included) can open."""
    from ..errors import GpuZarrError

    if "name" in value:  # Zarr v3 JSON: gpuzarr's codec registry builds it
        from ..codecs.registry import codec_from_json

        try:
            codec_from_json(value, "codec")
        except GpuZarrError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return
    import numcodecs  # numcodecs JSON (v2 style): numcodecs itself is the judge

    try:
        numcodecs.get_codec(dict(value))
    except (TypeError, ValueError, KeyError) as exc:
        raise argparse.ArgumentTypeError(f"numcodecs cannot build the codec {json.dumps(value)}: {exc}") from None


def _level(name: str, text: str, low: int, high: int) -> int:
    try:
        level = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected an integer level, got {text!r}") from None
    if not low <= level <= high:
        raise argparse.ArgumentTypeError(f"{name}: level must be in {low}..{high}, got {level}")
    return level


def _short_codec(part: str) -> dict[str, Any]:
    name, *params = part.split(":")
    name = name.lower()
    if name in ("zstd", "gzip"):
        if len(params) > 1:
            raise argparse.ArgumentTypeError(f"{part!r}: {name} takes one parameter, its level")
        low, high = (-131072, 22) if name == "zstd" else (0, 9)
        level = _level(name, params[0], low, high) if params else DEFAULT_LEVELS[name]
        return {"id": name, "level": level}
    if name == "blosc":
        return _blosc(part, params)
    if name == "crc32c":
        if params:
            raise argparse.ArgumentTypeError(f"{part!r}: crc32c takes no parameters")
        return {"name": "crc32c"}
    raise argparse.ArgumentTypeError(
        f"unknown codec {name!r} in {part!r}: expected none, zstd[:LEVEL], gzip[:LEVEL], "
        "blosc[:CNAME[:CLEVEL[:SHUFFLE]]], crc32c, or a codec as JSON"
    )


def _blosc(part: str, params: list[str]) -> dict[str, Any]:
    if len(params) > 3:
        raise argparse.ArgumentTypeError(f"{part!r}: blosc takes at most CNAME:CLEVEL:SHUFFLE")
    cname, clevel, shuffle = BLOSC_DEFAULT
    if params and params[0]:
        cname = params[0].lower()
        if cname not in BLOSC_CNAMES:
            raise argparse.ArgumentTypeError(f"{part!r}: blosc compressor must be one of {list(BLOSC_CNAMES)}")
    if len(params) > 1 and params[1]:
        clevel = _level("blosc", params[1], 0, 9)
    if len(params) > 2 and params[2]:
        shuffle = params[2].lower()
        if shuffle not in BLOSC_SHUFFLES:
            raise argparse.ArgumentTypeError(f"{part!r}: blosc shuffle must be one of {list(BLOSC_SHUFFLES)}")
    return {"id": "blosc", "cname": cname, "clevel": clevel, "shuffle": BLOSC_SHUFFLES[shuffle], "blocksize": 0}


def shards_option(text: str) -> tuple[int, ...] | None:
    """``--shards``: a shape, or "none" for no sharding (None); an argparse type."""
    from .options import shape

    return None if text.strip().lower() == "none" else shape(text)
