"""One obstore store per URL, options and environment, shared by the ObjectStores of a process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuzarr.store import ObjectStore
from gpuzarr.store.object_clients import MAX_SHARED_STORES, forget_shared_stores, shared_store

from .conformance import VALUE, as_bytes

if TYPE_CHECKING:
    import pytest

    from tests.servers import S3Bucket


def _from_url(bucket: S3Bucket, path: str = "x.zarr", **options: Any) -> ObjectStore:
    return ObjectStore.from_url(f"{bucket.url}/{path}", bucket.storage_options(**options))


def test_the_same_url_and_options_share_one_client(s3_bucket: S3Bucket) -> None:
    writer = _from_url(s3_bucket)
    reader = _from_url(s3_bucket)
    assert reader.store is writer.store
    writer.set("k", VALUE)
    assert as_bytes(reader.get("k")) == VALUE
    # A store made after forgetting builds its own client, and reads the same objects.
    forget_shared_stores()
    fresh = _from_url(s3_bucket)
    assert fresh.store is not writer.store
    assert as_bytes(fresh.get("k")) == VALUE


def test_other_urls_options_or_environment_get_their_own_client(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _from_url(s3_bucket).store
    assert _from_url(s3_bucket, "y.zarr").store is not first
    assert _from_url(s3_bucket, timeout=7).store is not first
    assert _from_url(s3_bucket, max_retries=1).store is not first
    # obstore reads credentials and settings from the environment when it builds the client.
    monkeypatch.setenv("AWS_SESSION_TOKEN", "another-session")
    changed = _from_url(s3_bucket).store
    assert changed is not first
    assert _from_url(s3_bucket).store is changed
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    assert _from_url(s3_bucket).store is first


def test_options_that_cannot_be_compared_are_never_shared() -> None:
    built: list[object] = []

    def build() -> object:
        built.append(object())
        return built[-1]

    options = {"config": {"credential_provider": lambda: None}}
    assert shared_store("s3://b/x", options, build) is not shared_store("s3://b/x", options, build)
    assert len(built) == 2


def test_least_recently_used_clients_are_dropped_beyond_the_bound() -> None:
    forget_shared_stores()
    stores = [shared_store(f"s3://b/{i}", {}, object) for i in range(MAX_SHARED_STORES)]
    assert shared_store("s3://b/0", {}, object) is stores[0]  # now the most recently used
    shared_store("s3://b/new", {}, object)  # pushes out s3://b/1, the least recently used
    assert shared_store("s3://b/0", {}, object) is stores[0]
    assert shared_store("s3://b/1", {}, object) is not stores[1]
    forget_shared_stores()  # (the placeholders are no stores)
