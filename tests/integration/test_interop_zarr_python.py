"""gpuzarr and zarr-python read each other's arrays identically (both directions).

The matrix (every core data type, codec chains including blosc and sharding, fill values,
layouts, chunk key encodings) is in interop_cases.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import gpuzarr

from .interop_cases import (
    CASES,
    Case,
    assert_fill,
    assert_same,
    codec_names,
    numpy_select,
    select,
    stored_keys,
    stored_metadata,
    write_gpuzarr,
    write_zarr_python,
)

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")

# zarr-python warns that bytes->bytes codecs around sharding_indexed disable partial reads.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Combining a `sharding_indexed` codec disables partial reads:zarr.errors.ZarrUserWarning"
)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gpuzarr_reads_zarr_python(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "zp.zarr"
    write_zarr_python(case, path)
    expected = case.expected()
    a = gpuzarr.open(str(path), mode="r")
    assert isinstance(a, gpuzarr.Array)
    assert a.shape == case.shape
    assert a.dtype == case.np_dtype
    assert (a.chunks, a.shards) == case.chunks_and_shards()
    assert_fill(a.fill_value, case.fill_scalar(), nan_bits=False)
    assert dict(a.attrs) == case.attributes
    if case.dimension_names is not None:
        assert a.dimension_names == tuple(case.dimension_names)
    assert_same(a[...], expected)
    for kind, sel in case.selections():
        assert_same(select(a, kind, sel), numpy_select(expected, kind, sel))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_zarr_python_reads_gpuzarr(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "gz.zarr"
    write_gpuzarr(case, path)
    expected = case.expected()
    z = zarr.open_array(str(path), mode="r")
    assert z.shape == case.shape
    assert z.dtype == case.np_dtype
    assert z.metadata.zarr_format == 3
    assert dict(z.attrs) == case.attributes
    assert z.metadata.dimension_names == (
        None if case.dimension_names is None else tuple(case.dimension_names)
    )
    assert_fill(z.fill_value, case.fill_scalar(), nan_bits=False)
    assert_same(z[...], expected)
    for kind, sel in case.selections(negative_steps=False):
        assert_same(select(z, kind, sel), numpy_select(expected, kind, sel))
    # Both writers skip the same fill-valued chunks: the stored objects are the same keys.
    reference = tmp_path / "zp.zarr"
    write_zarr_python(case, reference)
    assert stored_keys(path) == stored_keys(reference)
    assert codec_names(stored_metadata(path)["codecs"]) == codec_names(case.full_codecs)
