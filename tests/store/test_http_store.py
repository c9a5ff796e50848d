"""The HTTP store against a real threaded server on 127.0.0.1 (tests/servers/http.py): reading a
hierarchy zarr-python wrote, the exact requests of a partial shard read, concurrency, and faults
(500s, dropped bodies, slow answers, 403s, 404s)."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import zarr

import gpuzarr
from gpuzarr.errors import (
    CorruptChunkError,
    MetadataError,
    ReadOnlyError,
    StoreError,
    StorePermissionError,
    UnsupportedOperationError,
)
from gpuzarr.store import ObjectStore
from gpuzarr.store.base import BoundedBufferFor, ByteRange

if TYPE_CHECKING:
    from tests.servers import HttpServer

#: Short retries and timeouts, so that the fault tests take a fraction of a second each.
FAST = {"max_retries": 2, "init_backoff": 0.01, "max_backoff": 0.02, "timeout": 1.0}
DATA = np.arange(512 * 512, dtype="<u2").reshape(512, 512)


def _write(server: HttpServer, **kwargs: Any) -> str:
    """A group with array "a" (zarr-python, uncompressed 128x128 inner chunks of 512x512 shards),
    consolidated; the group's URL."""
    root = server.directory / "d.zarr"
    group = zarr.open_group(str(root), mode="w")
    array = group.create_array(
        "a", shape=DATA.shape, dtype=DATA.dtype, chunks=(128, 128), shards=(512, 512), compressors=None, **kwargs
    )
    array[...] = DATA
    with pytest.warns(UserWarning, match="Consolidated metadata"):
        zarr.consolidate_metadata(str(root))
    return f"{server.url}/d.zarr"


def test_reads_a_consolidated_hierarchy_without_listing(http_server: HttpServer) -> None:
    url = _write(http_server)
    group = gpuzarr.open_group(url, mode="r", storage_options=FAST)
    assert list(group) == ["a"]
    array = group["a"]
    np.testing.assert_array_equal(array[100:300, 17:400], DATA[100:300, 17:400])
    # The group's zarr.json, with every member's metadata: no other metadata request, no listing.
    assert [p for p, _ in http_server.gets() if p.endswith("zarr.json")] == ["/d.zarr/zarr.json"]
    assert all(method in ("GET", "HEAD") for method, _, _ in http_server.requests)


def test_full_read_fetches_each_shard_whole_in_one_request(http_server: HttpServer) -> None:
    """Every inner chunk of a shard that lies in the array is wanted, edge shards included:
    one request per shard, index and chunks together, no separate index request."""
    data = np.arange(320 * 200, dtype="<i4").reshape(320, 200)
    gpuzarr.create(str(http_server.directory / "e.zarr"), data=data, chunks=(64, 64), shards=(256, 128))
    array = gpuzarr.open(f"{http_server.url}/e.zarr", mode="r", storage_options=FAST)
    http_server.reset()
    np.testing.assert_array_equal(array[...], data)
    gets = sorted(http_server.gets())
    assert gets == [(f"/e.zarr/c/{i}/{j}", None) for i in (0, 1) for j in (0, 1)], gets
    # The open array kept the indexes it read from those shards: a partial read needs no index.
    http_server.reset()
    np.testing.assert_array_equal(array[0:64, 0:64], data[0:64, 0:64])
    assert [path for path, _ in http_server.gets()] == ["/e.zarr/c/0/0"]


def test_open_array_by_url(http_server: HttpServer) -> None:
    url = _write(http_server)
    np.testing.assert_array_equal(gpuzarr.open(url + "/a", mode="r")[...], DATA)


def test_partial_shard_read_requests_index_once_then_coalesced_ranges(http_server: HttpServer) -> None:
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    http_server.reset()
    # Inner chunks (0, 0) and (2, 2) of shard (0, 0): 32 KiB each, which zarr-python writes in
    # Morton order (positions 0 and 12), far more than the 64 KiB that is merged apart: two
    # ranges after the 260-byte index (16 entries + crc32c).
    got = array.vindex[[0, 300], [0, 300]]
    np.testing.assert_array_equal(got, DATA[[0, 300], [0, 300]])
    gets = http_server.gets()
    assert gets[0] == ("/d.zarr/a/c/0/0", "bytes=-260")
    assert sorted(gets[1:]) == [("/d.zarr/a/c/0/0", "bytes=0-32767"), ("/d.zarr/a/c/0/0", "bytes=393216-425983")]
    # Inner chunks (0, 0) and (0, 1), at Morton positions 0 and 2: the 32 KiB between them is
    # less than 64 KiB, so one request covers both. The open array kept the shard's index, and
    # the request carries its ETag (If-Match), so the index is not fetched again.
    http_server.reset()
    np.testing.assert_array_equal(array[0:128, 0:256], DATA[0:128, 0:256])
    assert http_server.gets() == [("/d.zarr/a/c/0/0", "bytes=0-98303")]
    # A freshly opened array reads the index again.
    http_server.reset()
    reopened = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    np.testing.assert_array_equal(reopened[0:128, 0:256], DATA[0:128, 0:256])
    assert [g for g in http_server.gets() if "zarr.json" not in g[0]] == [
        ("/d.zarr/a/c/0/0", "bytes=-260"),
        ("/d.zarr/a/c/0/0", "bytes=0-98303"),
    ]


def test_a_kept_shard_index_is_used_without_asking_for_the_version(http_server: HttpServer) -> None:
    """The open array kept the shard's index with its ETag: the next read sends only its
    ranges, each with If-Match, and no HEAD asking for the current ETag first."""
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    np.testing.assert_array_equal(array[0:128, 0:128], DATA[0:128, 0:128])
    http_server.reset()
    for _ in range(2):
        np.testing.assert_array_equal(array[0:128, 0:256], DATA[0:128, 0:256])
    assert http_server.requests == [("GET", "/d.zarr/a/c/0/0", "bytes=0-98303")] * 2


def test_a_shard_replaced_after_its_index_was_kept_is_read_again(http_server: HttpServer) -> None:
    """Another writer replaces the shard: the ranges sent with the kept index's ETag fail (412),
    and the read starts over from a fresh index instead of mixing versions."""
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    np.testing.assert_array_equal(array[0:128, 0:128], DATA[0:128, 0:128])
    zarr.open_array(str(http_server.directory / "d.zarr" / "a"), mode="r+")[...] = DATA + 1
    http_server.reset()
    np.testing.assert_array_equal(array[0:128, 0:256], DATA[0:128, 0:256] + 1)
    assert http_server.gets() == [
        ("/d.zarr/a/c/0/0", "bytes=0-98303"),  # If-Match the old ETag: 412
        ("/d.zarr/a/c/0/0", "bytes=-260"),
        ("/d.zarr/a/c/0/0", "bytes=0-98303"),
    ]
    # The index of the new version is kept in turn.
    http_server.reset()
    np.testing.assert_array_equal(array[0:128, 0:256], DATA[0:128, 0:256] + 1)
    assert http_server.gets() == [("/d.zarr/a/c/0/0", "bytes=0-98303")]


def test_host_cache_serves_a_kept_shard_without_any_request(http_server: HttpServer) -> None:
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options={**FAST, "cache_bytes": 1 << 20})
    np.testing.assert_array_equal(array[0:128, 0:256], DATA[0:128, 0:256])
    http_server.reset()
    np.testing.assert_array_equal(array[0:128, 0:256], DATA[0:128, 0:256])
    assert http_server.requests == []


def test_requests_in_flight_exceed_cpu_concurrency(http_server: HttpServer) -> None:
    # 16 unsharded chunks, each answered after 0.2 s: with 2 CPU workers, more than 2 requests
    # in flight shows the reader's I/O pool (remote_concurrency) and obstore releasing the GIL.
    root = http_server.directory / "u.zarr"
    zarr.create_array(str(root), shape=(64, 64), chunks=(16, 16), dtype="u1")[...] = 1
    array = gpuzarr.open(f"{http_server.url}/u.zarr", mode="r")
    http_server.delay_next(16, 0.2)
    with gpuzarr.config.set(concurrency=2, remote_concurrency=8):
        assert array[...].sum() == 64 * 64
    assert http_server.max_in_flight > 2


def test_server_errors_are_retried(http_server: HttpServer) -> None:
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    http_server.reset()
    http_server.fail_next(2, 500)
    np.testing.assert_array_equal(array[0:10, 0:10], DATA[0:10, 0:10])
    # Two 500s, then the index; then the chunk.
    assert [r for _, r in http_server.gets()] == ["bytes=-260"] * 3 + ["bytes=0-32767"]


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_that_persist_name_the_key(http_server: HttpServer, status: int) -> None:
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    http_server.fail_next(100, status)
    with pytest.raises(StoreError, match=rf"{url}/a: c/0/0: .*{status}") as info:
        array[0:10, 0:10]
    assert isinstance(info.value, OSError)
    assert len([p for p, _ in http_server.gets() if p.endswith("c/0/0")]) == 1 + FAST["max_retries"]


def test_a_body_cut_short_is_never_wrong_data(http_server: HttpServer) -> None:
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    for drops in (1, 100):
        http_server.drop_next(drops)
        try:
            got = array[0:300, 0:300]
        except StoreError as exc:
            assert "c/0/0" in str(exc)  # retries ran out: an error naming the key
        else:
            np.testing.assert_array_equal(got, DATA[0:300, 0:300])  # a retry read it whole
    http_server.drop_next(0)
    np.testing.assert_array_equal(array[...], DATA)


def test_a_body_cut_short_is_retried(http_server: HttpServer) -> None:
    url = _write(http_server)
    store = ObjectStore.from_url(url, FAST)
    http_server.drop_next(1)
    assert store.get("a/zarr.json") == (http_server.directory / "d.zarr/a/zarr.json").read_bytes()
    assert len(http_server.gets()) == 2


def test_slow_answers_time_out(http_server: HttpServer) -> None:
    url = _write(http_server)
    store = ObjectStore.from_url(url, {**FAST, "timeout": 0.2, "max_retries": 0})
    http_server.delay_next(1, 1.0)
    with pytest.raises(StoreError, match=r"a/zarr\.json"):
        store.get("a/zarr.json")


def test_forbidden_is_a_permission_error(http_server: HttpServer) -> None:
    url = _write(http_server)
    array = gpuzarr.open(url + "/a", mode="r", storage_options=FAST)
    http_server.forbid("/d.zarr/a/c/")
    with pytest.raises(StorePermissionError, match=rf"{url}/a: c/0/0: permission denied") as info:
        array[0:10, 0:10]
    assert isinstance(info.value, PermissionError)


def test_missing_chunk_reads_as_fill_value(http_server: HttpServer) -> None:
    root = http_server.directory / "f.zarr"
    z = zarr.create_array(str(root), shape=(20,), chunks=(10,), dtype="i4", fill_value=-1)
    z[:10] = np.arange(10)
    got = gpuzarr.open(f"{http_server.url}/f.zarr", mode="r", storage_options=FAST)[...]
    np.testing.assert_array_equal(got, [*range(10), *[-1] * 10])


def test_http_is_read_only_and_cannot_list(http_server: HttpServer) -> None:
    store = ObjectStore.from_url(http_server.url + "/x", FAST)
    assert store.read_only
    with pytest.raises(ReadOnlyError):
        store.set("k", b"v")
    with pytest.raises(UnsupportedOperationError, match="cannot list"):
        list(store.list_prefix(""))
    assert store.kvstore_json() == {"driver": "http", "base_url": http_server.url, "path": "x/"}


def test_http_kvstore_spec(http_server: HttpServer) -> None:
    url = _write(http_server)
    spec = {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": http_server.url, "path": "d.zarr/a/"}}
    np.testing.assert_array_equal(gpuzarr.open(spec)[0:5, 0:5], DATA[0:5, 0:5])
    assert gpuzarr.open(url + "/a", mode="r").spec()["kvstore"] == spec["kvstore"]


# -- sizes from the headers: a hostile server's oversized values are refused, not downloaded ------

#: An oversized value's bytes on the server; a client that refuses it from the headers reads at
#: most what the sockets' buffers take before it closes the connection.
OVERSIZED = 64 << 20


def _bytes_sent_once_answered(server: HttpServer, path: str) -> int:
    """The body bytes the server wrote for ``path``, once no answer is in flight any more."""
    deadline = time.monotonic() + 10
    while server.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.in_flight == 0, "the server still writes a refused answer: its connection was kept open"
    return server.bytes_sent.get(path, 0)


def _zstd_array(server: HttpServer, name: str) -> str:
    data = np.arange(16, dtype="<i2")
    gpuzarr.create(str(server.directory / name), data=data, chunks=(8,), codecs=[{"name": "zstd"}])
    return f"{server.url}/{name}"


def test_a_chunk_larger_than_its_codecs_write_is_refused_from_the_headers(http_server: HttpServer) -> None:
    url = _zstd_array(http_server, "big.zarr")
    (http_server.directory / "big.zarr/c/0").write_bytes(bytes(OVERSIZED))
    array = gpuzarr.open(url, mode="r", storage_options=FAST)
    http_server.reset()
    try:
        array[...]
    except CorruptChunkError as exc:
        # Held, as a user's handler may: its traceback holds the frames that refused the answer.
        held = exc
    assert re.search(rf"c/0: stored chunk of {OVERSIZED} bytes is larger than its codecs ever write", str(held))
    assert _bytes_sent_once_answered(http_server, "/big.zarr/c/0") < OVERSIZED // 4
    np.testing.assert_array_equal(array[8:], np.arange(8, 16))  # the other chunk is fine


def test_a_metadata_document_larger_than_the_setting_is_refused_from_the_headers(http_server: HttpServer) -> None:
    _zstd_array(http_server, "doc.zarr")
    document = http_server.directory / "doc.zarr/zarr.json"
    document.write_bytes(document.read_bytes() + b" " * OVERSIZED)  # valid JSON, 64 MiB of it
    refused = r"zarr\.json: a metadata document of \d+ bytes is larger than config max_metadata_bytes"
    with gpuzarr.config.set(max_metadata_bytes=1 << 20), pytest.raises(MetadataError, match=refused):
        gpuzarr.open(f"{http_server.url}/doc.zarr", mode="r", storage_options=FAST)
    assert _bytes_sent_once_answered(http_server, "/doc.zarr/zarr.json") < OVERSIZED // 4


@pytest.mark.parametrize("cache_bytes", [None, 1 << 20], ids=["uncached", "host-cache"])
def test_a_shard_with_dead_space_is_read_by_ranges_not_whole(http_server: HttpServer, cache_bytes: int | None) -> None:
    """A shard larger than its index and inner chunks at their largest is never downloaded
    whole, even by a read that wants every inner chunk: its index, then its chunks' ranges;
    through the host cache too."""
    data = np.arange(64, dtype="<i4")
    root = http_server.directory / "dead.zarr"
    gpuzarr.create(str(root), data=data, chunks=(8,), shards=(64,), codecs=[{"name": "zstd"}])
    shard = (root / "c/0").read_bytes()
    index_nbytes = 8 * 16 + 4
    (root / "c/0").write_bytes(shard[:-index_nbytes] + bytes(OVERSIZED) + shard[-index_nbytes:])
    options = FAST if cache_bytes is None else {**FAST, "cache_bytes": cache_bytes}
    array = gpuzarr.open(f"{http_server.url}/dead.zarr", mode="r", storage_options=options)
    http_server.reset()
    np.testing.assert_array_equal(array[...], data)
    assert _bytes_sent_once_answered(http_server, "/dead.zarr/c/0") < OVERSIZED // 4
    ranged = [rng for path, rng in http_server.gets() if path == "/dead.zarr/c/0"]
    assert ranged[-1] is not None and f"bytes=-{index_nbytes}" in ranged


def test_values_read_into_the_callers_memory_are_the_bytes_stored(http_server: HttpServer) -> None:
    """get_into asks for its memory once the headers say the size, and copies the body there,
    whole or a range."""
    url = _write(http_server)
    store = ObjectStore.from_url(url, FAST)
    stored = (http_server.directory / "d.zarr/a/c/0/0").read_bytes()
    asked: list[int] = []

    def buffer_for(n: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        asked.append(n)
        return np.empty(n, np.uint8)

    got = store.get_into("a/c/0/0", buffer_for)
    assert got is not None and bytes(got[0]) == stored and got[1] == len(stored)
    part = store.get_into("a/c/0/0", buffer_for, 100, 50)
    assert part is not None and bytes(part[0]) == stored[100:150] and part[1] == len(stored)
    assert asked == [len(stored), 50]
    assert store.get_into("a/c/9/9", buffer_for) is None
    with store.snapshot("a/c/0/0") as snapshot:
        got = snapshot.get_into("a/c/0/0", buffer_for, 10, 5)
        assert got is not None and bytes(got[0]) == stored[10:15]


def test_a_bounded_caller_gets_the_answers_own_memory(http_server: HttpServer) -> None:
    """A BoundedBufferFor only bounds the size: the bytes stay in obstore's buffer, no copy."""
    url = _write(http_server)
    store = ObjectStore.from_url(url, FAST)
    stored = (http_server.directory / "d.zarr/a/c/0/0").read_bytes()

    def no_memory(n: int) -> Any:
        raise AssertionError("asked for memory")

    got = store.get_into("a/c/0/0", BoundedBufferFor(len(stored), ValueError, no_memory))
    assert got is not None and bytes(got[0]) == stored
    with pytest.raises(ValueError, match=str(len(stored))):
        store.get_into("a/c/0/0", BoundedBufferFor(len(stored) - 1, lambda n: ValueError(n), no_memory))


def test_a_body_running_past_its_content_length_is_not_buffered_whole(http_server: HttpServer) -> None:
    """A lying server says a small Content-Length and sends a chunked body that goes on (HTTP/1.1
    clients follow the chunking): the read stops one piece past the size the headers gave."""
    url = _zstd_array(http_server, "lie.zarr")
    array = gpuzarr.open(url, mode="r", storage_options=FAST)
    http_server.reset()
    http_server.overrun_next(1, OVERSIZED)
    with pytest.raises(StoreError, match=r"c/0: expected bytes 0-\d+ of \d+, got \d+ bytes"):
        array[0:8]
    assert _bytes_sent_once_answered(http_server, "/lie.zarr/c/0") < OVERSIZED // 4
    np.testing.assert_array_equal(array[...], np.arange(16))  # honest answers read as before


def test_ranges_of_an_empty_object_read_as_empty(http_server: HttpServer) -> None:
    """Every range of an empty object is unsatisfiable (416): it reads as empty, as on a disk."""
    (http_server.directory / "empty").write_bytes(b"")
    store = ObjectStore.from_url(http_server.url, FAST)
    assert bytes(store.get("empty", ByteRange(0, 10))) == b""
    assert bytes(store.get("empty", ByteRange.suffix(4))) == b""
    got = store.get_into("empty", bytearray, 0, 10)
    assert got is not None and bytes(got[0]) == b"" and got[1] == 0
    with store.snapshot("empty") as snapshot:
        got = snapshot.get_into("empty", bytearray, 0, 10)
        assert got is not None and bytes(got[0]) == b"" and got[1] == 0
    assert store.get("absent", ByteRange(0, 10)) is None


@pytest.mark.parametrize("cache_bytes", [None, 1 << 20], ids=["uncached", "host-cache"])
def test_a_server_with_weak_etags_serves_partial_shard_reads(http_server: HttpServer, cache_bytes: int | None) -> None:
    """A weak ETag was sent back as If-Match, which never matches one (nginx answers 412): every
    crop of a shard failed as "rewritten in place during each of 4 reads of it". It is compared
    with the answer's own ETag instead; a shard that does change is still read again."""
    data = np.arange(256 * 256, dtype="<u2").reshape(256, 256)
    gpuzarr.create(str(http_server.directory / "s.zarr"), data=data, chunks=(32, 32), shards=(128, 128))
    http_server.weak_etags()
    options = FAST if cache_bytes is None else {**FAST, "cache_bytes": cache_bytes}
    array = gpuzarr.open(f"{http_server.url}/s.zarr", mode="r", storage_options=options)
    np.testing.assert_array_equal(array[10:50, 10:50], data[10:50, 10:50])
    np.testing.assert_array_equal(array[...], data)


def test_a_412_to_an_unconditional_read_is_a_store_error_naming_the_key(http_server: HttpServer) -> None:
    """It came out as gpuzarr's private "replaced" signal, naming no store."""
    url = _write(http_server)
    http_server.fail_next(100, 412)
    with pytest.raises(StoreError, match=rf"{url}/a: zarr.json: .*412"):
        gpuzarr.open(url + "/a", mode="r", storage_options=FAST)


def test_a_missing_node_over_http_is_not_found(http_server: HttpServer) -> None:
    """Looking for an implicit group lists the store, which an HTTP server cannot: that is no
    group, not an error about listing."""
    import gpuzarr
    from gpuzarr.errors import GroupNotFoundError, NodeNotFoundError

    with pytest.raises(NodeNotFoundError):
        gpuzarr.open(f"{http_server.url}/nothing", mode="r", storage_options=FAST)
    with pytest.raises(GroupNotFoundError):
        gpuzarr.open_group(f"{http_server.url}/nothing", mode="r", storage_options=FAST)


# -- a query sent with every request (a shared access signature, a token) -----------------------

#: a query as a signing service writes it: escapes, "+" and "/" in the signature
SIGNED = "sv=2024-11-04&se=2030-01-01T00%3A00%3A00Z&sp=rl&sig=c2VjcmV0%2Bs%2Fig%3D"


def test_a_bar_in_a_query_is_no_pipeline_step(http_server: HttpServer) -> None:
    """A "|" in the query is the query's (a URL pipeline's steps follow the path)."""
    url = _write(http_server)
    http_server.require_query("filter=a|b")
    np.testing.assert_array_equal(gpuzarr.open(f"{url}/a?filter=a|b", mode="r", storage_options=FAST)[...], DATA)
    assert set(http_server.queries) == {"filter=a|b"}


@pytest.mark.parametrize("trailing", ["", "/"])
def test_a_query_goes_with_every_request(http_server: HttpServer, trailing: str) -> None:
    """TensorStore sends a base_url's query with every key; gpuzarr refused such URLs. The
    query goes after the key, as sent; without it the server refuses (a 403 names the key)."""
    url = _write(http_server)
    http_server.reset()
    http_server.require_query(SIGNED)
    group = gpuzarr.open_group(f"{url}{trailing}?{SIGNED}", mode="r", storage_options=FAST)
    np.testing.assert_array_equal(group["a"][100:300, 17:400], DATA[100:300, 17:400])
    array = gpuzarr.open(f"{url}/a{trailing}?{SIGNED}", mode="r", storage_options=FAST)
    np.testing.assert_array_equal(array[...], DATA)
    assert http_server.requests and set(http_server.queries) == {SIGNED}
    # No empty segment where the URL's path ended in "/" ("d.zarr//a/zarr.json").
    assert all("//" not in path for _, path, _ in http_server.requests)
    with pytest.raises(StorePermissionError, match=r"zarr\.json: permission denied"):
        gpuzarr.open(f"{url}/a", mode="r", storage_options=FAST)


def test_a_query_is_kept_out_of_messages_and_reprs(http_server: HttpServer) -> None:
    """It is often a credential: repr and messages show ``?…``, obstore's own URLs included."""
    url = _write(http_server)
    http_server.require_query(SIGNED)
    store = ObjectStore.from_url(f"{url}?{SIGNED}", FAST)
    assert repr(store) == f"ObjectStore('{url}?…', read_only=True)"
    assert store.url == url
    secret = "c2VjcmV0"
    http_server.fail_next(100, 500)
    with pytest.raises(StoreError) as failed:
        store.get("a/zarr.json")
    assert "500" in str(failed.value) and secret not in str(failed.value)
    http_server.fail_next(0)
    http_server.forbid("/d.zarr/a/c/")
    array = gpuzarr.open_array(store, path="a", mode="r")
    with pytest.raises(StorePermissionError, match=rf"{url}: a/c/0/0: permission denied") as denied:
        array[0:10, 0:10]
    assert secret not in str(denied.value) and "?…" in str(denied.value)
    with pytest.raises(gpuzarr.errors.InvalidArgumentError, match=r"a '#' in a store URL") as refused:
        ObjectStore.from_url(f"{url}/x#frag?{SIGNED}")
    assert secret not in str(refused.value)
    # Nor a password, nor a query of a TensorStore URL refused (its fragment) or naming no host.
    host = http_server.url.partition("://")[2]
    with pytest.raises(gpuzarr.errors.InvalidArgumentError, match=r"'#' in a store URL") as refused:
        ObjectStore.from_url(f"http://user:PASSWORD@{host}/x#frag")
    assert "PASSWORD" not in str(refused.value)
    for bad in (f"{url}?{SIGNED}#frag", f"http:///d.zarr?{SIGNED}"):
        with pytest.raises(MetadataError) as refused_spec:
            gpuzarr.open({"driver": "zarr3", "kvstore": bad})
        assert secret not in str(refused_spec.value)
    # "http:///d.zarr" names no host: it was read from the host "d.zarr".
    with pytest.raises(gpuzarr.errors.InvalidArgumentError, match=r"names no host"):
        ObjectStore.from_url(f"http:///d.zarr?{SIGNED}")


def test_a_query_is_kept_by_specs_and_pickles(http_server: HttpServer) -> None:
    """A spec and a pickled store open the data again: they keep the query, and TensorStore
    reads gpuzarr's spec (and gpuzarr TensorStore's) from the same server."""
    import pickle

    import tensorstore as ts

    url = _write(http_server)
    http_server.require_query(SIGNED)
    array = gpuzarr.open(f"{url}/a?{SIGNED}", mode="r", storage_options=FAST)
    kvstore = array.spec()["kvstore"]
    assert kvstore == {"driver": "http", "base_url": f"{http_server.url}/?{SIGNED}", "path": "d.zarr/a/"}
    np.testing.assert_array_equal(gpuzarr.open({"driver": "zarr3", "kvstore": kvstore})[...], DATA)
    theirs = ts.open({"driver": "zarr3", "kvstore": kvstore}, read=True).result()
    np.testing.assert_array_equal(theirs.read().result(), DATA)
    given = {"driver": "http", "base_url": f"{http_server.url}/d.zarr?{SIGNED}", "path": "a"}
    np.testing.assert_array_equal(gpuzarr.open({"driver": "zarr3", "kvstore": given})[7:9, :3], DATA[7:9, :3])
    theirs = ts.open({"driver": "zarr3", "kvstore": given}).result()
    np.testing.assert_array_equal(theirs[7:9, :3].read().result(), DATA[7:9, :3])
    # TensorStore's URL forms: the query ends the kvstore's URL, before a driver step.
    by_url = gpuzarr.open({"driver": "zarr3", "kvstore": f"{url}/a?{SIGNED}"})
    np.testing.assert_array_equal(by_url[...], DATA)
    np.testing.assert_array_equal(gpuzarr.open(f"{url}/a?{SIGNED}|zarr3:")[...], DATA)
    np.testing.assert_array_equal(ts.open(f"{url}/a?{SIGNED}|zarr3:").result().read().result(), DATA)
    copied = pickle.loads(pickle.dumps(array))
    np.testing.assert_array_equal(copied[...], DATA)
    assert set(http_server.queries) == {SIGNED}
