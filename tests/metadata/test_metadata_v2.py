"""Malformed .zarray members are MetadataErrors naming the field, never NumPy's or Python's own
exceptions, nor a silently changed value."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.v2 import ArrayMetadataV2

if TYPE_CHECKING:
    from pathlib import Path


def zarray(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f4", "compressor": None,
        "fill_value": 0.0, "order": "C", "filters": None,
    }
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("dtype", "fill_value"),
    [("<f4", 1e300), ("<f4", 10**39), ("<f2", 70000), ("<f8", 10**400), ("<c8", 1e300), ("<c8", 10**39)],
)
def test_float_fill_value_too_large_for_its_type_is_refused(dtype: str, fill_value: Any) -> None:
    # zarr-python reads these as inf (with a RuntimeWarning); the value was not inf.
    with pytest.raises(MetadataError, match=r"fill_value: .* is out of range"):
        ArrayMetadataV2.from_json(zarray(dtype=dtype, fill_value=fill_value))


@pytest.mark.parametrize(
    ("fill_value", "expected"),
    [("Infinity", np.inf), ("-Infinity", -np.inf), (3, 3.0), (3.4e38, np.float32(3.4e38))],
)
def test_float_fill_values_that_fit_are_read(fill_value: Any, expected: float) -> None:
    assert ArrayMetadataV2.from_json(zarray(fill_value=fill_value)).fill_value == expected
    assert np.isnan(ArrayMetadataV2.from_json(zarray(fill_value="NaN")).fill_value)


def test_complex_fill_value_is_its_real_part() -> None:
    assert ArrayMetadataV2.from_json(zarray(dtype="<c8", fill_value=2)).fill_value == np.complex64(2)


@pytest.mark.parametrize("shuffle", [{}, [1], "1", 1.0, True, None])
def test_blosc_shuffle_of_the_wrong_json_type_is_refused(shuffle: Any) -> None:
    compressor = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": shuffle}
    with pytest.raises(MetadataError, match=r"compressor\.shuffle: expected -1, 0, 1 or 2"):
        ArrayMetadataV2.from_json(zarray(compressor=compressor))


@pytest.mark.parametrize("dtype", ["\ud800", [], [["a", "|O"]]])
def test_dtype_numpy_cannot_read_raw_bytes_into_is_refused(dtype: Any) -> None:
    # found by benchmarks/fuzz.py: UnicodeEncodeError from np.dtype, and a zero-size
    # element that failed on read with NumPy's ValueError
    with pytest.raises(MetadataError, match="dtype: "):
        ArrayMetadataV2.from_json(zarray(dtype=dtype))


#: dtype strings NumPy's parser of comma strings refuses with SyntaxError (it hands the repeat
#: counts to ``ast.literal_eval``) or ValueError
FORGED_DTYPES = [",i4", "(,)<u2", "<u2,(1e9,)i", "(1,2<u2", "(9999999999999999999,)<u2"]


@pytest.mark.parametrize("dtype", FORGED_DTYPES)
def test_a_dtype_numpy_cannot_parse_is_refused(dtype: str) -> None:
    # found by benchmarks/fuzz.py (seed 2512): a flipped byte made '<i4' into ',i4', and
    # NumPy raised SyntaxError
    with pytest.raises(MetadataError, match=r"^dtype: .* is not a valid dtype string"):
        ArrayMetadataV2.from_json(zarray(dtype=dtype))
    with pytest.raises(MetadataError, match=r"^dtype: invalid structured dtype"):
        ArrayMetadataV2.from_json(zarray(dtype=[["a", dtype]], fill_value=None))


@pytest.mark.parametrize("dtype", FORGED_DTYPES)
@pytest.mark.parametrize("member", ["encode_dtype", "dtype", "astype"])
def test_a_filter_dtype_numpy_cannot_parse_is_refused(tmp_path: Path, dtype: str, member: str) -> None:
    filters = {
        "encode_dtype": {"id": "astype", "encode_dtype": dtype, "decode_dtype": "<f4"},
        "dtype": {"id": "delta", "dtype": dtype},
        "astype": {"id": "fixedscaleoffset", "offset": 0, "scale": 1, "dtype": "<f4", "astype": dtype},
    }
    (tmp_path / ".zarray").write_text(json.dumps(zarray(filters=[filters[member]])))
    with pytest.raises(MetadataError, match="invalid configuration"):
        gpuzarr.open(tmp_path, mode="r")
