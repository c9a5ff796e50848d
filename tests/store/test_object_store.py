"""ObjectStore on a real S3-compatible server (moto on 127.0.0.1): the conformance suite, URLs
and options, snapshots against a writer, conditional writes, errors and pickling."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError, InvalidArgumentError, StoreError, StorePermissionError
from gpuzarr.store import ObjectStore, make_store
from gpuzarr.store.base import ByteRange
from gpuzarr.store.object_options import ObjectStoreOptions
from gpuzarr.store.sharding import SHARD_READ_ATTEMPTS

from .conformance import VALUE, StoreConformance, as_bytes

if TYPE_CHECKING:
    from pathlib import Path

    from gpuzarr.store.base import Store
    from tests.servers import S3Bucket


def _store(bucket: S3Bucket, path: str = "root.zarr", **options: Any) -> ObjectStore:
    return ObjectStore.from_url(f"{bucket.url}/{path}", bucket.storage_options(**options))


class TestObjectStore(StoreConformance):
    @pytest.fixture
    def make_store(self, s3_bucket: S3Bucket) -> Store:
        return _store(s3_bucket)

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, ObjectStore)
        return store.with_options(read_only=True)


def test_url_and_storage_options_through_make_store(s3_bucket: S3Bucket) -> None:
    store, path = make_store(f"{s3_bucket.url}/x.zarr", storage_options=s3_bucket.storage_options())
    assert isinstance(store, ObjectStore) and path == ""
    store.set("zarr.json", b"{}")
    # The same object through the bucket's root: the URL's path is the store's prefix.
    root = _store(s3_bucket, "")
    assert root.get("x.zarr/zarr.json") == b"{}"
    assert repr(store) == f"ObjectStore('{s3_bucket.url}/x.zarr')"


def test_kvstore_spec_opens_the_same_store(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    # TensorStore's spec has no credentials: they come from the environment, as for TensorStore.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store, _ = make_store(s3_bucket.kvstore("a/b.zarr/"))
    assert isinstance(store, ObjectStore)
    store.set("k", VALUE)
    assert _store(s3_bucket, "a/b.zarr").get("k") == VALUE
    assert store.kvstore_json() == {
        "driver": "s3",
        "bucket": s3_bucket.name,
        "path": "a/b.zarr/",
        "endpoint": s3_bucket.endpoint,
        "aws_region": "us-east-1",
    }


def test_array_round_trip_and_spec(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.arange(60 * 70, dtype="<u2").reshape(60, 70)
    url = f"{s3_bucket.url}/arr.zarr"
    a = gpuzarr.create(url, shape=data.shape, dtype=data.dtype, chunks=(8, 8), shards=(32, 32),
                       storage_options=s3_bucket.storage_options())
    a[...] = data
    b = gpuzarr.open(url, mode="r", storage_options=s3_bucket.storage_options())
    np.testing.assert_array_equal(b[5:50, 3:61], data[5:50, 3:61])
    # Pickled by URL and options: the copy makes its own client.
    c = pickle.loads(pickle.dumps(b))
    np.testing.assert_array_equal(c[...], data)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    np.testing.assert_array_equal(gpuzarr.open(b.spec())[...], data)


def test_missing_chunks_read_as_fill_value(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/fill.zarr"
    a = gpuzarr.create(url, shape=(10,), dtype="i4", chunks=(5,), fill_value=7,
                       storage_options=s3_bucket.storage_options())
    a[:5] = np.arange(5)
    np.testing.assert_array_equal(a[...], [0, 1, 2, 3, 4, 7, 7, 7, 7, 7])


def test_snapshot_reads_one_version_or_fails(s3_bucket: S3Bucket) -> None:
    store = _store(s3_bucket)
    store.set("k", VALUE)
    with store.snapshot("k") as snap:
        assert as_bytes(snap.get("k", ByteRange(0, 4))) == VALUE[:4]
        first = snap.version
        assert first is not None
        store.set("k", b"replaced by another writer")
        # If-Match: the new version is never mixed with the old one.
        with pytest.raises(CorruptChunkError, match="replaced"):
            snap.get_ranges("k", [ByteRange(4, 4), ByteRange(8, 4)])
        assert snap.changed()
    with store.snapshot("k") as again:
        assert as_bytes(again.get("k")) == b"replaced by another writer"
        assert again.version != first


def test_snapshot_hands_out_views_of_whole_values(s3_bucket: S3Bucket) -> None:
    # The shard reader cuts inner chunks out of a whole shard: no copy of it into bytes.
    store = _store(s3_bucket)
    store.set("k", VALUE)
    with store.snapshot("k") as snap:
        whole = snap.get("k")
        assert isinstance(whole, memoryview) and whole.tobytes() == VALUE
    assert store.get("k") == VALUE and isinstance(store.get("k"), bytes)  # (a metadata document)


def test_snapshot_assumes_a_version_and_fails_when_it_is_gone(s3_bucket: S3Bucket) -> None:
    store = _store(s3_bucket)
    store.set("k", VALUE)
    with store.snapshot("k") as snap:
        assert as_bytes(snap.get("k", ByteRange(0, 4))) == VALUE[:4]
        version = snap.version
        assert not snap.assume_version(version)  # a read fixed the version already
    with store.snapshot("k") as snap:
        assert snap.assume_version(version)
        assert snap.version == version
        assert [as_bytes(b) for b in snap.get_ranges("k", [ByteRange(0, 2), ByteRange(4, 2)])] == [
            VALUE[:2], VALUE[4:6]
        ]
        assert not snap.changed()
    store.set("k", b"replaced by another writer")
    with store.snapshot("k") as snap:
        assert snap.assume_version(version)
        with pytest.raises(CorruptChunkError, match="replaced"):
            snap.get("k", ByteRange(0, 4))
        assert snap.changed()
    store.erase("k")
    with store.snapshot("k") as snap:
        assert snap.assume_version(version)
        with pytest.raises(CorruptChunkError, match="replaced"):
            snap.get_ranges("k", [ByteRange(0, 2), ByteRange(4, 2)])
        assert snap.changed()


def test_shard_rewritten_between_index_and_chunks_is_read_again(s3_bucket: S3Bucket) -> None:
    data = np.arange(64 * 64, dtype="<i4").reshape(64, 64)
    url = f"{s3_bucket.url}/race.zarr"
    opts = s3_bucket.storage_options()
    a = gpuzarr.create(url, shape=data.shape, dtype=data.dtype, chunks=(8, 8), shards=(64, 64), storage_options=opts)
    a[...] = data
    store = _store(s3_bucket, "race.zarr")
    writes = 0
    real_read = ObjectStore._read

    def read_then_write(
        self: ObjectStore, key: str, byte_range: Any, if_match: Any = None, buffer_for: Any = None
    ) -> Any:
        # The first ranged read after the index (If-Match set) finds the shard replaced once.
        nonlocal writes
        if if_match is not None and writes == 0:
            writes += 1
            a[...] = data + 1
        return real_read(self, key, byte_range, if_match, buffer_for)

    b = gpuzarr.open(store, mode="r")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ObjectStore, "_read", read_then_write)
        got = b[0:8, 0:16]
    assert writes == 1
    np.testing.assert_array_equal(got, data[0:8, 0:16] + 1)
    assert SHARD_READ_ATTEMPTS > 1


def test_conditional_writes(s3_bucket: S3Bucket) -> None:
    store = _store(s3_bucket)
    assert store.set_if("k", b"first", None)  # create-only
    assert not store.set_if("k", b"second", None)
    with store.snapshot("k") as snap:
        assert snap.get("k") == b"first"
        version = snap.version
    assert isinstance(version, str)
    store.set("k", b"other writer")
    assert not store.set_if("k", b"lost update", version)
    assert store.get("k") == b"other writer"
    with store.snapshot("k") as snap:
        snap.get("k", ByteRange(0, 1))
        assert store.set_if("k", b"mine", snap.version)
    assert store.get("k") == b"mine"


def test_a_missing_bucket_is_an_error_not_a_fill_value(s3_bucket: S3Bucket) -> None:
    store = ObjectStore.from_url("s3://no-such-bucket-here/x", s3_bucket.storage_options())
    # (A HEAD's 404 has no body to tell a bucket from a key: exists() says False.)
    for read in (lambda: store.get("c/0"), lambda: store.get("c/0", ByteRange(0, 4))):
        with pytest.raises(StoreError, match=r"s3://no-such-bucket-here/x: c/0: the bucket does not exist"):
            read()


def test_unknown_option_is_named(s3_bucket: S3Bucket) -> None:
    with pytest.raises(InvalidArgumentError, match="not_an_option"):
        ObjectStore.from_url(s3_bucket.url, s3_bucket.storage_options(not_an_option=1))
    with pytest.raises(InvalidArgumentError, match="max_retries"):
        ObjectStore.from_url(s3_bucket.url, s3_bucket.storage_options(max_retries=-1))


def test_storage_options_defaults_and_overrides() -> None:
    default = ObjectStoreOptions.from_storage_options(None)
    assert default.retry_config["max_retries"] == 5
    assert default.client_options["timeout"].total_seconds() == 30
    opts = ObjectStoreOptions.from_storage_options(
        {"endpoint": "http://127.0.0.1:1", "timeout": 2, "io_concurrency": 4, "cache_bytes": 1 << 20, "region": "x"}
    )
    assert opts.client_options["allow_http"] is True
    assert opts.client_options["timeout"].total_seconds() == 2
    assert (opts.io_concurrency, opts.cache_bytes) == (4, 1 << 20)
    assert opts.config == {"endpoint": "http://127.0.0.1:1", "region": "x"}
    with pytest.raises(InvalidArgumentError, match="io_concurrency"):
        ObjectStoreOptions.from_storage_options({"io_concurrency": 0})


def test_io_concurrency(s3_bucket: S3Bucket) -> None:
    assert _store(s3_bucket).io_concurrency == gpuzarr.config.get("remote_concurrency") == 32
    with gpuzarr.config.set(remote_concurrency=5):
        assert _store(s3_bucket).io_concurrency == 5
    assert _store(s3_bucket, io_concurrency=3).io_concurrency == 3
    assert gpuzarr.LocalStore(".").io_concurrency is None


def test_errors_are_store_errors_naming_url_and_key() -> None:
    # Nothing listens on port 9 of 127.0.0.1: the connection is refused, retried, then reported.
    store = ObjectStore.from_url(
        "s3://bucket/x.zarr",
        {"endpoint": "http://127.0.0.1:9", "region": "us-east-1", "access_key_id": "a",
         "secret_access_key": "b", "max_retries": 1, "init_backoff": 0.01, "max_backoff": 0.01},
    )
    with pytest.raises(StoreError, match=r"s3://bucket/x\.zarr: c/0") as info:
        store.get("c/0")
    assert isinstance(info.value, OSError) and not isinstance(info.value, StorePermissionError)
    with pytest.raises(StoreError):
        store.get("c/0", ByteRange(0, 4))


def test_missing_obstore_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # gpuzarr itself imports without obstore; asking for an object store says what to install.
    monkeypatch.setitem(sys.modules, "obstore", None)
    with pytest.raises(ImportError, match=r"gpuzarr\[remote\]"):
        ObjectStore.from_url("s3://bucket/x.zarr")
    with pytest.raises(ImportError, match=r"gpuzarr\[remote\]"):
        gpuzarr.open("https://example.invalid/x.zarr", mode="r")


def test_gpuzarr_imports_without_obstore() -> None:
    code = "import sys; sys.modules['obstore'] = None; import gpuzarr; gpuzarr.open_group('memory://x', mode='a')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_partial_write_refuses_an_oversized_old_chunk_from_its_headers(s3_bucket: S3Bucket) -> None:
    """A read-modify-write on an object store reads the old chunk with its ETag: one larger
    than its codecs ever write is refused before it is downloaded, naming the key."""
    opts = s3_bucket.storage_options()
    url = f"{s3_bucket.url}/rmw.zarr"
    gpuzarr.create(url, data=np.arange(16, dtype="<i2"), chunks=(8,), codecs=[{"name": "zstd"}], storage_options=opts)
    store = _store(s3_bucket, "rmw.zarr")
    store.set("c/0", bytes(64 << 20))
    downloaded: list[int] = []
    real_read = ObjectStore._read

    def counting(self: ObjectStore, key: str, *args: Any, **kwargs: Any) -> Any:
        got = real_read(self, key, *args, **kwargs)
        if got is not None:
            downloaded.append(memoryview(got.data).nbytes)
        return got

    array = gpuzarr.open(url, mode="r+", storage_options=opts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ObjectStore, "_read", counting)
        with pytest.raises(CorruptChunkError, match=r"c/0: stored chunk of 67108864 bytes is larger than its codecs"):
            array[0:2] = 7
    assert all(n < 1 << 20 for n in downloaded), downloaded
    array[8:10] = 7  # the other chunk is written as before
    np.testing.assert_array_equal(array[8:], [7, 7, *range(10, 16)])


def _with_dead_space(shard: bytes, index_nbytes: int, dead: int) -> bytes:
    return shard[:-index_nbytes] + bytes(dead) + shard[-index_nbytes:]


def test_a_partial_write_reads_a_shard_with_dead_space_by_ranges(s3_bucket: S3Bucket) -> None:
    """A conditional read-modify-write of a shard larger than its index and inner chunks at
    their largest reads its index and chunks by ranges, all of one version, and writes on
    that version: the old inner chunks kept, the dead space gone, nothing downloaded whole."""
    opts = s3_bucket.storage_options()
    url = f"{s3_bucket.url}/deadw.zarr"
    data = np.arange(64, dtype="<i4")
    gpuzarr.create(url, data=data, chunks=(8,), shards=(64,), codecs=[{"name": "zstd"}], storage_options=opts)
    store = _store(s3_bucket, "deadw.zarr")
    shard = bytes(store.get("c/0"))
    store.set("c/0", _with_dead_space(shard, 8 * 16 + 4, 64 << 20))
    downloaded: list[int] = []
    real_read = ObjectStore._read

    def counting(self: ObjectStore, key: str, *args: Any, **kwargs: Any) -> Any:
        got = real_read(self, key, *args, **kwargs)
        if got is not None:
            downloaded.append(memoryview(got.data).nbytes)
        return got

    array = gpuzarr.open(url, mode="r+", storage_options=opts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ObjectStore, "_read", counting)
        array[3:5] = -1
    assert all(n < 1 << 20 for n in downloaded), downloaded
    expected = data.copy()
    expected[3:5] = -1
    np.testing.assert_array_equal(array[...], expected)
    assert len(bytes(store.get("c/0"))) < 4096  # rewritten without the dead space


def test_a_shard_with_dead_space_replaced_during_a_partial_write_is_written_again(s3_bucket: S3Bucket) -> None:
    """Another writer replaces the shard between the ranged reads of a conditional write: the
    reads' If-Match fails, the write loses, and it is done again from the fresh shard."""
    opts = s3_bucket.storage_options()
    url = f"{s3_bucket.url}/deadr.zarr"
    data = np.arange(64, dtype="<i4")
    gpuzarr.create(url, data=data, chunks=(8,), shards=(64,), codecs=[{"name": "zstd"}], storage_options=opts)
    store = _store(s3_bucket, "deadr.zarr")
    shard = bytes(store.get("c/0"))
    store.set("c/0", _with_dead_space(shard, 8 * 16 + 4, 4 << 20))
    replaced = 0
    real_read = ObjectStore._read
    # A new version with other contents (a new ETag): the value 7 everywhere, with dead space.
    gpuzarr.create(f"{s3_bucket.url}/other.zarr", data=np.full(64, 7, "<i4"), chunks=(8,), shards=(64,),
                   codecs=[{"name": "zstd"}], storage_options=opts)  # fmt: skip
    other_shard = _with_dead_space(bytes(_store(s3_bucket, "other.zarr").get("c/0")), 8 * 16 + 4, 4 << 20)

    def replace_with_other(
        self: ObjectStore, key: str, byte_range: Any, if_match: Any = None, buffer_for: Any = None
    ) -> Any:
        nonlocal replaced
        if key == "c/0" and if_match is not None and replaced == 0:
            replaced += 1
            store.set("c/0", other_shard)
        return real_read(self, key, byte_range, if_match, buffer_for)

    array = gpuzarr.open(url, mode="r+", storage_options=opts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ObjectStore, "_read", replace_with_other)
        array[3:5] = -1
    assert replaced == 1
    expected = np.full(64, 7, "<i4")
    expected[3:5] = -1
    np.testing.assert_array_equal(array[...], expected)


@pytest.mark.parametrize("url_path", ["run#1.zarr", "exp?v=2.zarr"])
def test_a_fragment_or_query_in_a_store_url_is_refused(s3_bucket: S3Bucket, url_path: str) -> None:
    """The URL parser dropped what followed: run#1.zarr and run#2.zarr were both "run", the
    second create overwriting the first (TensorStore refuses such URLs too)."""
    options = s3_bucket.storage_options()
    with pytest.raises(InvalidArgumentError, match=r"a '#' or '\?' in a store URL ends its path"):
        gpuzarr.create(f"{s3_bucket.url}/{url_path}", shape=(4,), dtype="i4", storage_options=options)
    assert list(_store(s3_bucket, "").list_prefix("")) == []


@pytest.mark.parametrize("name", ["my data.zarr", "exp#3.zarr", "pct%41.zarr", "q?.zarr"])
def test_kvstore_paths_are_keys_and_url_escapes_are_decoded(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A TensorStore spec's path is the keys' prefix as it is ("%41" stays "%41"); a URL's
    escapes are decoded, and the spec of what a URL opened names the keys it wrote."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    spec = {"driver": "zarr3", "kvstore": s3_bucket.kvstore(name + "/"), "create": True, "dtype": "int32",
            "schema": {"domain": {"shape": [4]}}}  # fmt: skip
    gpuzarr.open(spec)[...] = [1, 2, 3, 4]
    root = _store(s3_bucket, "")
    assert f"{name}/zarr.json" in list(root.list_prefix(""))
    reopened = gpuzarr.open({k: v for k, v in spec.items() if k != "create"}, mode="r")
    np.testing.assert_array_equal(reopened[...], [1, 2, 3, 4])
    if "#" not in name and "?" not in name:
        from urllib.parse import quote

        by_url = gpuzarr.open(f"{s3_bucket.url}/{quote(name)}", mode="r", storage_options=s3_bucket.storage_options())
        np.testing.assert_array_equal(by_url[...], [1, 2, 3, 4])
        assert by_url.spec()["kvstore"]["path"] == name + "/"


def test_writes_to_a_missing_bucket_are_store_errors(s3_bucket: S3Bucket) -> None:
    """A write raised obstore's bare FileNotFoundError with its debug dump; an erase said nothing."""
    store = ObjectStore.from_url("s3://no-such-bucket-here/x", s3_bucket.storage_options())
    missing = r"s3://no-such-bucket-here/x: zarr.json: the bucket does not exist"
    with pytest.raises(StoreError, match=missing):
        gpuzarr.create(store, shape=(3,), dtype="i4")
    with pytest.raises(StoreError, match=missing):
        store.erase("zarr.json")


def test_a_cache_asks_no_version_before_a_first_read(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``cache_bytes``, each shard's first read was preceded by a HEAD asking its version
    (and a single range read asked for "no more ranges" with another): a first epoch through
    the cache cost 1.5-2 times the requests of an uncached read."""
    import obstore

    url = f"{s3_bucket.url}/c.zarr"
    data = np.arange(256 * 256, dtype="u2").reshape(256, 256)
    gpuzarr.create(url, data=data, chunks=(32, 32), shards=(128, 128), storage_options=s3_bucket.storage_options())
    calls: list[str] = []
    for name in ("get", "head"):
        real = getattr(obstore, name)
        monkeypatch.setattr(obstore, name, lambda *a, _f=real, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])
    cached = s3_bucket.storage_options(cache_bytes=10**7)
    crop = gpuzarr.open(url, mode="r", storage_options=cached)
    calls.clear()
    np.testing.assert_array_equal(crop[10:50, 10:50], data[10:50, 10:50])
    assert calls == ["get", "get"]  # the shard's index, then its chunk's range
    whole = gpuzarr.open(url, mode="r", storage_options=cached)
    calls.clear()
    np.testing.assert_array_equal(whole[...], data)
    assert calls == ["get"] * 4
    calls.clear()
    np.testing.assert_array_equal(whole[...], data)  # again: each cached version checked, not read
    assert "get" not in calls


def _page_of_keys_forever() -> Any:
    """A handler of an S3 listing server answering every page with the same 1,000 keys and
    the same continuation token (a server in a loop)."""
    from http.server import BaseHTTPRequestHandler

    contents = "".join(
        f"<Contents><Key>r/k{i:04d}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
        f'<ETag>"x"</ETag><Size>1</Size></Contents>'
        for i in range(1000)
    )
    page = (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bk</Name><Prefix>r/</Prefix>'
        "<KeyCount>1000</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
        f"<NextContinuationToken>SAME</NextContinuationToken>{contents}</ListBucketResult>"
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        requests = 0

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            type(self).requests += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    return Handler


def test_a_listing_that_repeats_its_pages_stops_with_an_error() -> None:
    """It listed forever (and held every page); botocore stops so too."""
    import threading
    from http.server import ThreadingHTTPServer

    handler = _page_of_keys_forever()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        options = {"endpoint": f"http://127.0.0.1:{server.server_address[1]}", "region": "us-east-1",
                   "access_key_id": "k", "secret_access_key": "s", "max_retries": 0}  # fmt: skip
        store = ObjectStore.from_url("s3://bk/r", options)
        with pytest.raises(StoreError, match="the listing repeats keys"):
            list(store.list_prefix(""))
        assert handler.requests <= 3
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "message",
    ["ContainerNotFound: The specified container does not exist", "The specified bucket does not exist"],
    ids=["azure", "gcs-json"],
)
def test_a_missing_azure_container_or_gcs_bucket_is_an_error_not_a_fill_value(message: str) -> None:
    # Only S3's NoSuchBucket was told from a missing key: the 404 read as the fill value.
    store = ObjectStore.from_url("s3://bk/r", {"endpoint": "http://127.0.0.1:9", "region": "us-east-1"})
    with pytest.raises(StoreError, match="the bucket does not exist"):
        store._check_bucket(RuntimeError(f"Not found: {message}"), "c/0")


@pytest.mark.parametrize(
    ("options", "seconds"),
    [({"retry_timeout": "30s"}, 30), ({"init_backoff": "500ms"}, 0.5), ({"max_backoff": "2m"}, 120),
     ({"retry_timeout": "1m 30s"}, 90), ({"retry_timeout": "2 minutes"}, 120), ({"retry_timeout": "1h30m"}, 5400)],
)  # fmt: skip
def test_durations_given_as_strings_reach_the_retry_settings(options: dict[str, Any], seconds: float) -> None:
    # Passed through as strings, which obstore's retry settings refuse (a bare TypeError).
    retry = ObjectStoreOptions.from_storage_options(options).retry_config
    assert seconds in (retry["retry_timeout"].total_seconds(), retry["backoff"]["init_backoff"].total_seconds(),
                       retry["backoff"]["max_backoff"].total_seconds())  # fmt: skip


@pytest.mark.parametrize("timeout", ["1m 30s", "2 minutes", "1d", "90sec", "1h30m"])
def test_client_durations_obstore_reads_pass_as_they_are(timeout: str) -> None:
    # obstore's client options read humantime's forms; a narrower check of ours refused them.
    assert ObjectStoreOptions.from_storage_options({"timeout": timeout}).client_options["timeout"] == timeout
    ObjectStore.from_url("s3://bucket/x.zarr", {"region": "us-east-1", "timeout": timeout})


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": 1e20}, "timeout"),
        ({"retry_timeout": "soon"}, "retry_timeout"),
        ({"endpoint": "not a url"}, "endpoint"),
        ({"endpoint": "ftp://127.0.0.1"}, "endpoint"),
        ({"region": 5}, "storage_options"),
        ({"default_headers": 5}, "storage_options"),
    ],
)
def test_storage_options_of_the_wrong_kind_are_named(options: dict[str, Any], named: str) -> None:
    """They escaped as TypeError or OverflowError, and a bad endpoint as obstore's panic at the
    first request (a BaseException that ``except Exception`` misses)."""
    with pytest.raises(InvalidArgumentError, match=named):
        ObjectStore.from_url("s3://bucket/x.zarr", {"region": "us-east-1", **options})


def test_credentials_in_an_http_url_are_sent_and_never_shown(tmp_path: Path) -> None:
    """obstore ignored them (401), and the password was in the store's url, repr and messages."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    gpuzarr.create(str(tmp_path / "a.zarr"), data=np.arange(3, dtype="i4"), chunks=(3,))
    files = {f"/a.zarr/{p.relative_to(tmp_path / 'a.zarr')}": p.read_bytes() for p in (tmp_path / "a.zarr").rglob("*")
             if p.is_file()}  # fmt: skip
    expected = "Basic " + __import__("base64").b64encode(b"user:p@ss").decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://user:p%40ss@127.0.0.1:{server.server_address[1]}/a.zarr"
        array = gpuzarr.open(url, mode="r", storage_options={"max_retries": 0})
        np.testing.assert_array_equal(array[...], [0, 1, 2])
        store = ObjectStore.from_url(url)
        assert "p%40ss" not in store.url and "p%40ss" not in repr(store) and "user" not in store.url
        np.testing.assert_array_equal(gpuzarr.open(pickle.loads(pickle.dumps(store)), mode="r")[...], [0, 1, 2])
    finally:
        server.shutdown()
        server.server_close()


def test_an_answer_sent_encoded_is_refused_naming_the_encoding() -> None:
    """A server that sends an object gzip-encoded unasked (S3 and GCS objects stored with that
    header): obstore hands the encoded bytes on, which read as "not valid JSON"."""
    import gzip
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = gzip.compress(b'{"zarr_format": 3, "node_type": "group"}')

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = ObjectStore.from_url(f"http://127.0.0.1:{server.server_address[1]}/g.zarr", {"max_retries": 0})
        encoded = r"zarr.json: the server sent the object encoded \(Content-Encoding: gzip\)"
        with pytest.raises(StoreError, match=encoded):
            store.get("zarr.json")
    finally:
        server.shutdown()
        server.server_close()


def test_an_obstore_local_store(tmp_path: Path) -> None:
    """obstore's LocalStore names its root with a path object: naming the store raised
    AttributeError ('PosixPath' object has no attribute 'strip')."""
    obstore = pytest.importorskip("obstore")
    store = ObjectStore(obstore.store.LocalStore(str(tmp_path)))
    assert str(tmp_path).strip("/") in repr(store)
    array = gpuzarr.create_array(store, shape=(4, 4), dtype="i4", chunks=(2, 2))
    array[...] = np.arange(16).reshape(4, 4)
    np.testing.assert_array_equal(gpuzarr.open_array(str(tmp_path), mode="r")[...], np.arange(16).reshape(4, 4))


def test_a_store_whose_configuration_obstore_cannot_give(s3_bucket: S3Bucket) -> None:
    """obstore panics reading the configuration of an S3Store given a client option among its
    configuration keys (``allow_http=True``): the store still reads and writes, its URL names the
    bucket as unknown, and a spec or a pickle of it is refused with a GpuZarrError (the panic
    is a BaseException, which escaped every ``except Exception``)."""
    from obstore.store import S3Store

    from tests.servers.s3 import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

    raw = S3Store(
        s3_bucket.name, prefix="panicky.zarr", endpoint=s3_bucket.endpoint, region=REGION,
        access_key_id=ACCESS_KEY_ID, secret_access_key=SECRET_ACCESS_KEY, allow_http=True,
    )  # fmt: skip
    store = ObjectStore(raw)
    assert store.url == "s3://(bucket unknown)/panicky.zarr"
    array = gpuzarr.create(store, shape=(4,), chunks=(2,), dtype="i2")
    array[...] = np.arange(4)
    np.testing.assert_array_equal(gpuzarr.open_array(store, mode="r")[...], np.arange(4))
    with pytest.raises(gpuzarr.errors.MetadataError, match="configuration"):
        store.kvstore_json()
    with pytest.raises(InvalidArgumentError, match="cannot be pickled"):
        pickle.dumps(store)


def test_an_obstore_local_store_takes_partial_and_consolidated_writes(tmp_path: Path) -> None:
    """obstore's local file system has no conditional PUT: read-modify-writes raised its
    NotImplementedError half-way (a new node's zarr.json written, the consolidated record not)."""
    obstore = pytest.importorskip("obstore")
    store = ObjectStore(obstore.store.LocalStore(str(tmp_path)))
    assert not store.supports_conditional_writes
    group = gpuzarr.open_group(store, mode="w")
    array = group.create_array("a", shape=(4, 4), dtype="i4", chunks=(2, 2), shards=(4, 4))
    array[...] = np.arange(16).reshape(4, 4)
    array[1, 1] = -1  # a partial write of a shard
    gpuzarr.consolidate_metadata(store)
    gpuzarr.open_group(store, mode="r+").create_array("b", shape=(2,), dtype="u1")  # updates the record
    reopened = gpuzarr.open_consolidated(store)
    assert sorted(reopened.array_keys()) == ["a", "b"]
    expected = np.arange(16).reshape(4, 4)
    expected[1, 1] = -1
    np.testing.assert_array_equal(reopened["a"][...], expected)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"access_key_id": "key-read-from-a-file\n"}, "access_key_id"),
        ({"region": "eu-west-1\r"}, "region"),
        ({"endpoint_url": "not a url"}, "endpoint_url"),
        ({"aws_endpoint_url": "ftp://host"}, "aws_endpoint_url"),
    ],
)
def test_storage_options_obstore_would_panic_on_are_refused(options: dict[str, Any], key: str) -> None:
    with pytest.raises(InvalidArgumentError, match=key):
        ObjectStore.from_url("s3://bucket/x.zarr", options)


def test_a_wrapped_store_whose_requests_obstore_panics_on_raises_store_errors(s3_bucket: S3Bucket) -> None:
    from obstore.store import S3Store

    raw = S3Store(
        s3_bucket.name, endpoint=s3_bucket.endpoint, region="us-east-1", access_key_id="key\n",
        secret_access_key="secret", client_options={"allow_http": True},
    )  # fmt: skip
    store = ObjectStore(raw)
    with pytest.raises(StoreError, match="obstore failed"):
        store.get("zarr.json")
    with pytest.raises(StoreError, match="obstore failed"):
        store.set("zarr.json", b"{}")
    with pytest.raises(StoreError, match="obstore failed"):
        list(store.list_prefix(""))


def test_stores_of_one_url_on_two_endpoints_are_not_the_same_store() -> None:
    one = ObjectStore.from_url("s3://bucket/x.zarr", {"endpoint": "http://127.0.0.1:1", "region": "r"})
    other = ObjectStore.from_url("s3://bucket/x.zarr", {"endpoint": "http://127.0.0.1:2", "region": "r"})
    again = ObjectStore.from_url("s3://bucket/x.zarr", {"endpoint": "http://127.0.0.1:1", "region": "r"})
    assert one != other and one == again and hash(one) == hash(again)
    assert one.with_options(read_only=True) != one
    from obstore.store import MemoryStore

    assert ObjectStore(MemoryStore()) != ObjectStore(MemoryStore())  # both 'MemoryStore://'
    raw = MemoryStore()
    assert ObjectStore(raw) == ObjectStore(raw)


def test_a_wrapped_prefix_with_url_characters_keeps_its_place_in_the_spec() -> None:
    from obstore.store import S3Store

    store = ObjectStore(S3Store("bucket", prefix="run#1 a%20b?.zarr", region="us-east-1"))
    assert store.kvstore_json()["path"] == "run#1 a%20b?.zarr/"


def test_a_gcs_store_whose_configuration_obstore_cannot_give_has_no_spec() -> None:
    from obstore.store import GCSStore

    store = ObjectStore(GCSStore("real-bucket", allow_http=True))
    with pytest.raises(gpuzarr.errors.MetadataError, match="configuration"):
        store.kvstore_json()


def test_object_store_takes_obstore_stores_only() -> None:
    with pytest.raises(InvalidArgumentError, match="from_url"):
        ObjectStore("s3://bucket/x")
    zarr_storage = pytest.importorskip("zarr.storage")
    from obstore.store import MemoryStore

    with pytest.raises(InvalidArgumentError, match=r"pass its \.store"):
        ObjectStore(zarr_storage.ObjectStore(MemoryStore()))


def test_a_wrapped_store_reads_its_configuration_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from obstore.store import S3Store

    from gpuzarr.store import object_store

    reads: list[str] = []
    real = object_store._store_config
    monkeypatch.setattr(object_store, "_store_config", lambda store: reads.append("read") or real(store))
    store = ObjectStore(S3Store("bucket", region="us-east-1"))
    store.with_options(read_only=True).with_options(read_only=False)
    assert reads == ["read"]


def test_an_http_stores_password_stays_out_of_names_and_specs() -> None:
    from obstore.store import HTTPStore

    store = ObjectStore(HTTPStore.from_url("https://user:secret-pw@example.com/data"))
    assert "secret-pw" not in repr(store) and "secret-pw" not in str(store.kvstore_json())
    assert store.url == "https://example.com/data"


def test_client_settings_of_the_environment_are_read(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS_ALLOW_HTTP (with the endpoint and credentials in the environment too) is what obstore
    reads where no client options are passed; gpuzarr passes its timeouts, which replaced them
    ("builder error")."""
    options = s3_bucket.storage_options()
    gpuzarr.create(f"{s3_bucket.url}/env.zarr", storage_options=options, data=np.arange(4), chunks=(2,))
    for name, value in {
        "AWS_ALLOW_HTTP": "true",
        "AWS_ENDPOINT_URL": s3_bucket.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    np.testing.assert_array_equal(gpuzarr.open(f"{s3_bucket.url}/env.zarr", mode="r")[...], np.arange(4))
    options = ObjectStoreOptions.from_storage_options({"timeout": 7}, "AWS_")
    assert options.client_options["allow_http"] == "true"  # from the environment
    assert options.client_options["timeout"].total_seconds() == 7  # given: before the environment
    monkeypatch.setenv("AWS_TIMEOUT", "3s")
    assert ObjectStoreOptions.from_storage_options({}, "AWS_").client_options["timeout"] == "3s"  # before the default
    assert "allow_http" not in ObjectStoreOptions.from_storage_options({}, "GOOGLE_").client_options


def test_credentials_in_an_object_store_url_or_endpoint_are_refused_unshown(s3_bucket: S3Bucket) -> None:
    """obstore ignores them; kept, the secret reached reprs, messages and the spec's bucket."""
    with pytest.raises(InvalidArgumentError, match="credentials in an object store URL are not read") as refused:
        ObjectStore.from_url(f"s3://AKIAX:SUPERSECRET@{s3_bucket.name}/a.zarr", s3_bucket.storage_options())
    assert "SUPERSECRET" not in str(refused.value) and s3_bucket.name in str(refused.value)
    with pytest.raises(InvalidArgumentError, match="credentials in an object store URL"):
        ObjectStore.from_url("gs://key:secret@bucket/a.zarr")
    # Azure's form names its account after an "@": no credentials there.
    azure = ObjectStore.from_url("abfs://container@acct.dfs.core.windows.net/a.zarr", {"account_name": "acct"})
    assert azure.url.startswith("abfs://container@acct")
    endpoint = s3_bucket.endpoint.replace("http://", "http://u:EPSECRET@")
    with pytest.raises(InvalidArgumentError, match=r"storage_options\['endpoint'\]: credentials") as refused:
        ObjectStore.from_url(f"{s3_bucket.url}/a.zarr", s3_bucket.storage_options(endpoint=endpoint))
    assert "EPSECRET" not in str(refused.value)


@pytest.mark.parametrize("path", ["zzz/../a.zarr", "./a.zarr", "x/%2E%2E/a.zarr", "a.zarr/%2e"])
def test_dot_segments_in_a_store_url_are_refused(s3_bucket: S3Bucket, path: str) -> None:
    """The URL parser resolved them: the keys went elsewhere than the URL reads, and the spec
    named a path no store opens."""
    with pytest.raises(InvalidArgumentError, match=r"'\.' and '\.\.' path segments are refused"):
        ObjectStore.from_url(f"{s3_bucket.url}/{path}", s3_bucket.storage_options())
    with pytest.raises(InvalidArgumentError, match=r"'\.' and '\.\.' path segments are refused"):
        ObjectStore.from_url(f"http://127.0.0.1:9/{path}")
    ObjectStore.from_url(f"{s3_bucket.url}/a..b/.c/...", s3_bucket.storage_options())  # names, not segments


def test_the_spec_of_an_anonymous_store_reopens_it_anonymously(s3_bucket: S3Bucket) -> None:
    store = ObjectStore.from_url(f"{s3_bucket.url}/pub.zarr", s3_bucket.storage_options(skip_signature=True))
    kvstore = store.kvstore_json()
    assert isinstance(kvstore, dict) and kvstore["aws_credentials"] == {"type": "anonymous"}
    signed = ObjectStore.from_url(f"{s3_bucket.url}/pub.zarr", s3_bucket.storage_options()).kvstore_json()
    assert isinstance(signed, dict) and "aws_credentials" not in signed


def test_a_user_without_a_password_is_sent_as_rfc_7617_says() -> None:
    """``http://token@host``: "token:" base64-encoded, as curl sends it (it was "token")."""
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = ObjectStore.from_url(f"http://tok%21@127.0.0.1:{server.server_address[1]}/x.zarr")
        assert store.get("zarr.json") is None
    finally:
        server.shutdown()
        server.server_close()
    assert seen and seen[0] == "Basic " + base64.b64encode(b"tok!:").decode()


def test_a_wrapped_obstore_memory_store_refuses_pickling_by_name() -> None:
    from obstore.store import MemoryStore

    with pytest.raises(InvalidArgumentError, match="obstore's MemoryStore lives in this process's memory"):
        pickle.dumps(ObjectStore(MemoryStore()))


def test_no_credentials_anywhere_is_said_so() -> None:
    """With no credentials in the options or the environment, AWS's chain last asks an EC2
    instance's metadata service, and obstore reports that request's failure: the error said
    "permission denied" quoting it."""
    store = ObjectStore.from_url("s3://bucket/x.zarr", {"endpoint": "http://127.0.0.1:9", "region": "us-east-1"})
    imds = RuntimeError(
        "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in 1.3ms - "
        "Server returned non-2xx status code: 403 Forbidden"
    )
    error = store.error(imds, "zarr.json")
    assert isinstance(error, StorePermissionError)
    assert "no credentials found" in str(error) and "skip_signature=True for a public bucket" in str(error)
    assert "zarr.json" in str(error) and "169.254.169.254" in str(error)
