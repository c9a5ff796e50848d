"""Stored bytes written by zarr-python and numcodecs (fixtures/generate.py) decode to the input."""

from __future__ import annotations

import numpy as np
import pytest

from .fixtures.generate import expected_for
from .helpers import FIXTURES, load_manifest, pipeline

MANIFEST = load_manifest()


def test_fixtures_are_small_and_complete() -> None:
    total = sum(p.stat().st_size for p in FIXTURES.iterdir() if p.is_file())
    assert total < 200_000
    names = set(MANIFEST["fixtures"])
    for codec in ("gzip", "zstd", "crc32c", "transpose", "sharding"):
        assert any(codec in n for n in names), codec
    for cname in ("lz4", "lz4hc", "blosclz", "zstd", "zlib"):
        for shuffle in ("noshuffle", "shuffle", "bitshuffle"):
            assert f"numcodecs_blosc_{cname}_{shuffle}" in names


@pytest.mark.parametrize("name", sorted(MANIFEST["fixtures"]))
def test_decode_fixture(name: str) -> None:
    entry = MANIFEST["fixtures"][name]
    raw = (FIXTURES / entry["file"]).read_bytes()
    p = pipeline(entry["codecs"], tuple(MANIFEST["shape"]), np.dtype(MANIFEST["dtype"]).newbyteorder("="))
    expected = expected_for(name)
    np.testing.assert_array_equal(p.decode(raw, name), expected)
    full = (slice(None), slice(None))
    out = np.zeros(expected.shape, p.spec.dtype)
    p.decode_into(raw, name, out, full, full, direct=True)
    np.testing.assert_array_equal(out, expected)


# Gzip headers carry a timestamp and an OS byte, and the order of inner chunks in a shard is the
# writer's choice; every other fixture's encoding is fully determined by its configuration.
DETERMINISTIC = [n for n in sorted(MANIFEST["fixtures"]) if "gzip" not in n and "sharding" not in n]


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_encode_matches_fixture_bytes(name: str) -> None:
    """gpuzarr writes the very bytes the reference encoder wrote."""
    entry = MANIFEST["fixtures"][name]
    raw = (FIXTURES / entry["file"]).read_bytes()
    p = pipeline(entry["codecs"], tuple(MANIFEST["shape"]), np.dtype(MANIFEST["dtype"]).newbyteorder("="))
    assert bytes(memoryview(p.encode(expected_for(name))).cast("B")) == raw
