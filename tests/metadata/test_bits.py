"""An array's metadata read as its elements' bits (gpuzarr.metadata.bits.as_bits_of)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.select import bits_carrier
from gpuzarr.errors import UnsupportedOperationError
from gpuzarr.metadata.bits import as_bits_of


def test_the_bits_metadata_reads_the_same_chunks_as_their_bits() -> None:
    data = np.linspace(-3, 3, 64, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(8, 8)
    a = gpuzarr.create("memory://bits-a", shape=(12, 8), chunks=(4, 4), shards=(8, 8), dtype=data.dtype,
                       fill_value=-2.5, codecs=[{"name": "transpose", "configuration": {"order": [1, 0]}},
                                                {"name": "bytes", "configuration": {"endian": "big"}},
                                                {"name": "zstd"}])  # fmt: skip
    a[:8] = data
    carrier = bits_carrier(a.dtype)
    assert carrier == np.dtype("int16")
    bits = as_bits_of(a.metadata, carrier)
    assert bits.dtype == np.dtype("int16") and bits.codecs == a.metadata.codecs
    assert bits.fill_value == np.asarray(-2.5, dtype=ml_dtypes.bfloat16).view(np.int16)
    twin = a._twin_on("cpu", carrier)
    np.testing.assert_array_equal(twin[...].view(ml_dtypes.bfloat16), a[...])  # the fill rows too


def test_types_with_a_carrier() -> None:
    assert bits_carrier(np.dtype(ml_dtypes.float8_e5m2)) == np.dtype("uint8")
    assert bits_carrier(np.dtype("float16")) is None  # CuPy holds it
    assert bits_carrier(np.dtype("f4")) is None


def test_codecs_that_compute_with_values_and_v2_are_refused() -> None:
    x = np.ones((4, 4), ml_dtypes.bfloat16)
    codecs = [{"name": "numcodecs.delta", "configuration": {"dtype": "bfloat16"}}, {"name": "bytes"}]
    delta = gpuzarr.create("memory://bits-d", shape=x.shape, dtype=x.dtype, chunks=(2, 2), codecs=codecs)
    with pytest.raises(UnsupportedOperationError, match=r"'numcodecs.delta' computes with the bfloat16 values"):
        as_bits_of(delta.metadata, np.dtype("int16"))
    v2 = gpuzarr.create("memory://bits-v2", shape=(4,), dtype="<u2", chunks=(2,), zarr_format=2)
    with pytest.raises(UnsupportedOperationError, match=r"Zarr v3 arrays only"):
        as_bits_of(v2.metadata, np.dtype("int16"))
    with pytest.raises(ValueError, match=r"cannot carry"):
        as_bits_of(delta.metadata, np.dtype("int32"))
