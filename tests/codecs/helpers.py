"""Shared helpers for codec tests: round trips, configuration round trips, stored fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from gpuzarr.codecs.base import ChunkSpec, Codec
from gpuzarr.codecs.pipeline import CodecPipeline
from gpuzarr.codecs.registry import codec_from_json

FIXTURES = Path(__file__).parent / "fixtures"
LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}
#: 64 KiB that compress about 3x (a ramp with noise), like sensor data rather than zeros
RAMP_U2 = (np.arange(32768) // 7 + np.random.default_rng(5).integers(0, 4, 32768)).astype("<u2")


def sample(shape: tuple[int, ...] = (6, 10), dtype: str = "<u2", seed: int = 0) -> np.ndarray[Any, Any]:
    """Random but compressible test data (few distinct values, runs)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        values = rng.normal(size=shape).round(1)
    elif dt.kind == "b":
        values = rng.integers(0, 2, size=shape)
    else:
        values = rng.integers(0, 50, size=shape)
    return values.astype(dt)


def pipeline(codecs: list[Any], shape: tuple[int, ...], dtype: Any, fill_value: Any = 0) -> CodecPipeline:
    return CodecPipeline.from_codecs(codecs, ChunkSpec(tuple(shape), np.dtype(dtype), fill_value))


def assert_roundtrip(codecs: list[Any], data: np.ndarray[Any, Any], fill_value: Any = 0) -> bytes:
    """Encode ``data`` through the chain and decode it back, by both decode paths; return the bytes."""
    p = pipeline(codecs, data.shape, data.dtype.newbyteorder("="), fill_value)
    encoded = bytes(memoryview(p.encode(data)).cast("B"))
    decoded = p.decode(encoded, "k")
    assert decoded.shape == data.shape
    np.testing.assert_array_equal(decoded, data)
    full = tuple(slice(None) for _ in data.shape)
    for direct in (False, True):
        out = np.full(data.shape, 7, dtype=p.spec.dtype)
        p.decode_into(encoded, "k", out, full, full, direct)
        np.testing.assert_array_equal(out, data)
    # Encoding is deterministic: a second encode gives the same bytes.
    assert bytes(memoryview(p.encode(data)).cast("B")) == encoded
    return encoded


def assert_config_roundtrip(codec_json: dict[str, Any]) -> Codec:
    """``from_config(to_json()['configuration'])`` rebuilds an equal codec; returns it."""
    codec = codec_from_json(codec_json)
    doc = codec.to_json()
    json.dumps(doc)  # plain JSON
    assert doc["name"] == codec_json["name"]
    rebuilt = type(codec).from_config(doc.get("configuration", {}))
    assert rebuilt.to_json() == doc
    if type(codec).__eq__ is not object.__eq__:
        assert rebuilt == codec
    assert codec_from_json(doc).to_json() == doc
    return codec


def load_manifest() -> dict[str, Any]:
    return json.loads((FIXTURES / "manifest.json").read_text())  # type: ignore[no-any-return]
