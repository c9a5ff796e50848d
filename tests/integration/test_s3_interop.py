"""gpuzarr and zarr-python (through its obstore store) and TensorStore (its s3 kvstore) read
each other's arrays on a real S3-compatible server on 127.0.0.1 (moto)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr
from zarr.storage import ObjectStore as ZarrObjectStore

import gpuzarr

if TYPE_CHECKING:
    from tests.servers import S3Bucket

DATA = np.arange(40 * 50, dtype="<i4").reshape(40, 50)

LAYOUTS = {
    "v3-sharded": {"zarr_format": 3, "chunks": (5, 5), "shards": (20, 25)},
    "v3": {"zarr_format": 3, "chunks": (8, 16)},
    "v2": {"zarr_format": 2, "chunks": (8, 16)},
}


@pytest.fixture(params=list(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> dict[str, Any]:
    return LAYOUTS[request.param]


def test_gpuzarr_reads_what_zarr_python_wrote(s3_bucket: S3Bucket, layout: dict[str, Any]) -> None:
    store = ZarrObjectStore(s3_bucket.obstore_store("from-zarr.zarr"))
    z = zarr.create_array(store, shape=DATA.shape, dtype=DATA.dtype, fill_value=-1, **layout)
    z[:, :40] = DATA[:, :40]
    expected = DATA.copy()
    expected[:, 40:] = -1
    a = gpuzarr.open(f"{s3_bucket.url}/from-zarr.zarr", mode="r", storage_options=s3_bucket.storage_options())
    assert a.zarr_format == layout["zarr_format"]
    np.testing.assert_array_equal(a[...], expected)
    np.testing.assert_array_equal(a[3:33, 7:45], expected[3:33, 7:45])


def test_zarr_python_reads_what_gpuzarr_wrote(s3_bucket: S3Bucket, layout: dict[str, Any]) -> None:
    a = gpuzarr.create(
        f"{s3_bucket.url}/from-gpuzarr.zarr",
        shape=DATA.shape,
        dtype=DATA.dtype,
        storage_options=s3_bucket.storage_options(),
        **layout,
    )
    a[...] = DATA
    a[10:20, 10:20] = 0
    expected = DATA.copy()
    expected[10:20, 10:20] = 0
    store = ZarrObjectStore(s3_bucket.obstore_store("from-gpuzarr.zarr"), read_only=True)
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], expected)


def test_groups_and_consolidated_metadata(s3_bucket: S3Bucket) -> None:
    store = ZarrObjectStore(s3_bucket.obstore_store("g.zarr"))
    group = zarr.open_group(store, mode="w")
    group.create_array("x", shape=(10,), dtype="u1")[...] = 3
    group.create_group("sub").create_array("y", shape=(4,), dtype="f4")[...] = 1.5
    with pytest.warns(UserWarning, match="Consolidated metadata"):
        zarr.consolidate_metadata(store)
    g = gpuzarr.open_group(f"{s3_bucket.url}/g.zarr", mode="r", storage_options=s3_bucket.storage_options())
    assert sorted(g) == ["sub", "x"]
    np.testing.assert_array_equal(g["sub/y"][...], np.full(4, 1.5, "f4"))
    # Without the consolidated document, by listing the bucket.
    plain = gpuzarr.open_group(
        f"{s3_bucket.url}/g.zarr", mode="r", use_consolidated=False, storage_options=s3_bucket.storage_options()
    )
    assert sorted(plain) == ["sub", "x"]


def test_tensorstore_s3_kvstore(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    ts = pytest.importorskip("tensorstore")
    # TensorStore takes credentials from the environment only.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    a = gpuzarr.create(
        f"{s3_bucket.url}/ts.zarr", shape=DATA.shape, dtype=DATA.dtype, chunks=(5, 5), shards=(20, 25),
        storage_options=s3_bucket.storage_options(),
    )
    a[...] = DATA
    spec = a.spec()
    assert spec["kvstore"] == s3_bucket.kvstore("ts.zarr/")
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), DATA)
    # TensorStore writes, gpuzarr reads.
    written = ts.open(
        {"driver": "zarr3", "kvstore": s3_bucket.kvstore("by-ts.zarr/")},
        create=True, dtype="int32", shape=list(DATA.shape),
    ).result()
    written.write(DATA).result()
    got = gpuzarr.open({"driver": "zarr3", "kvstore": s3_bucket.kvstore("by-ts.zarr/")})[...]
    np.testing.assert_array_equal(got, DATA)
