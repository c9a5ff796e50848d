"""The TypedDicts of gpuzarr.metadata.json_types describe the documents gpuzarr writes: every
key written is declared, every required key is written, for arrays of each kind."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Required, TypedDict, get_args, get_origin, get_type_hints

import pytest

import gpuzarr
from gpuzarr.metadata.json_types import (
    ArrayMetadataV2JSON,
    ArrayMetadataV3JSON,
    CodecJSON,
    KvStoreJSON,
    TensorStoreSpecJSON,
)
from gpuzarr.store.zip import ZipStore
from gpuzarr.tensorstore.kvstore import KvStoreSpec

if TYPE_CHECKING:
    from pathlib import Path

ARRAYS: list[tuple[str, dict[str, Any]]] = [
    ("v3", {"shape": (10, 12), "dtype": "uint16", "chunks": (5, 6)}),
    (
        "v3-sharded-named",
        {"shape": (8, 8), "dtype": "f4", "chunks": (2, 2), "shards": (4, 4), "dimension_names": ["y", "x"]},
    ),
    ("v3-rectilinear-F", {"shape": (10, 7), "dtype": "i2", "chunks": [[4, 6], 7], "order": "F"}),
    ("v3-strings", {"shape": (3,), "dtype": str, "chunks": (2,)}),
    ("v2", {"shape": (9,), "dtype": "<f8", "chunks": (4,), "zarr_format": 2}),
    (
        "v2-F-filters",
        {"shape": (4, 4), "dtype": "i4", "chunks": (2, 2), "zarr_format": 2, "order": "F",
         "filters": [{"id": "delta", "dtype": "<i4"}]},
    ),
]


def _check(document: dict[str, Any], shape: type) -> None:
    declared = set(shape.__annotations__)
    assert set(document) <= declared, f"written but not declared: {set(document) - declared}"
    required: frozenset[str] = shape.__required_keys__  # type: ignore[attr-defined]
    assert required <= set(document), f"declared required but not written: {required - set(document)}"


def _check_codec(codec: dict[str, Any]) -> None:
    _check(codec, CodecJSON)
    assert isinstance(codec["name"], str)
    if "configuration" in codec:
        assert isinstance(codec["configuration"], dict)
        for inner in ("codecs", "index_codecs"):
            for c in codec["configuration"].get(inner, []):
                _check_codec(c)


@pytest.mark.parametrize(("name", "options"), ARRAYS, ids=[n for n, _ in ARRAYS])
def test_written_documents_have_their_declared_shapes(tmp_path: Path, name: str, options: dict[str, Any]) -> None:
    array = gpuzarr.create(gpuzarr.LocalStore(tmp_path / f"{name}.zarr"), device="cpu", **options)
    document = dict(array.metadata.to_json())
    if array.zarr_format == 3:
        _check(document, ArrayMetadataV3JSON)
        for key in ("chunk_grid", "chunk_key_encoding"):
            _check(document[key], CodecJSON)
    else:
        _check(document, ArrayMetadataV2JSON)
    for codec in array.codecs:  # the v3 chain, also the one a v2 array maps to
        _check_codec(dict(codec))
    serializer = array.serializer
    if serializer is not None:
        _check_codec(dict(serializer))


KVSTORES: list[tuple[str, Any]] = [
    ("file", {"driver": "file", "path": "/data/volume.zarr"}),
    ("memory", {"driver": "memory", "path": "a/b"}),
    ("memory-url", "memory://named/a"),
    ("zip", {"driver": "zip", "base": {"driver": "file", "path": "/data/v.zip"}, "path": "inner"}),
    (
        "s3",
        {"driver": "s3", "bucket": "b", "path": "p", "endpoint": "http://127.0.0.1:9000", "aws_region": "eu-west-1",
         "requester_pays": True, "aws_credentials": {"type": "anonymous"}, "host_header": "h"},
    ),
    ("gcs", {"driver": "gcs", "bucket": "b", "user_project": "u"}),
    ("http", {"driver": "http", "base_url": "https://example.org/data", "path": "v.zarr", "headers": ["X-A: 1"]}),
    ("s3-url", "s3://bucket/some/path"),
]


def _check_kvstore(kvstore: Any) -> None:
    if isinstance(kvstore, str):  # a URL: memory://name
        return
    _check(kvstore, KvStoreJSON)
    hints = get_type_hints(KvStoreJSON)
    for key, value in kvstore.items():
        if key == "base":
            _check_kvstore(value)
            continue
        # Required[...] / Literal[...] / a plain class: the value is of the declared type
        declared = get_args(hints[key])[0] if get_origin(hints[key]) is Required else hints[key]
        if get_origin(declared) is Literal:
            assert value in get_args(declared), (key, value)
        else:
            assert isinstance(value, get_origin(declared) or declared), (key, value)


@pytest.mark.parametrize(("name", "kvstore"), KVSTORES, ids=[n for n, _ in KVSTORES])
def test_written_kvstores_have_their_declared_shape(name: str, kvstore: Any) -> None:
    _check_kvstore(KvStoreSpec.from_json(kvstore).to_json())


@pytest.mark.parametrize("where", ["local", "local-subpath", "memory", "named-memory", "zip"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_array_specs_have_their_declared_shape(tmp_path: Path, where: str, zarr_format: int) -> None:
    options: dict[str, Any] = {"shape": (6,), "dtype": "u1", "chunks": (3,), "zarr_format": zarr_format}
    if where == "local":
        array = gpuzarr.create(gpuzarr.LocalStore(tmp_path / "a.zarr"), **options)
    elif where == "local-subpath":
        array = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=zarr_format).create_array(
            "raw", **{k: v for k, v in options.items() if k != "zarr_format"}
        )
    elif where == "memory":
        array = gpuzarr.create(gpuzarr.MemoryStore(), **options)
    elif where == "named-memory":
        array = gpuzarr.open(
            {"driver": f"zarr{zarr_format}", "kvstore": f"memory://json-types-{zarr_format}", "path": "a",
             "create": True, "delete_existing": True, "metadata": {"shape": [6], "chunks" if zarr_format == 2 else
             "chunk_grid": [3] if zarr_format == 2 else {"name": "regular", "configuration": {"chunk_shape": [3]}},
             "dtype" if zarr_format == 2 else "data_type": "|u1" if zarr_format == 2 else "uint8"}}
        )
    else:
        array = gpuzarr.create(ZipStore(tmp_path / "a.zip", mode="a"), **options)
    spec = array.spec()
    array.store.close()
    _check(dict(spec), TensorStoreSpecJSON)
    assert spec["driver"] == f"zarr{zarr_format}"
    assert "attributes" not in spec["metadata"]
    _check_kvstore(spec["kvstore"])
    if where == "named-memory":
        assert (spec["kvstore"], spec.get("path")) == (f"memory://json-types-{zarr_format}", "a")
    else:
        assert "path" not in spec


def test_a_removed_declaration_is_caught() -> None:
    """The checks above fail where a key written is not declared (so they can fail)."""
    written = KvStoreSpec.from_json({"driver": "gcs", "bucket": "b", "user_project": "u"}).to_json()
    assert isinstance(written, dict)
    with pytest.raises(AssertionError, match="user_project"):
        _check({k: v for k, v in written.items()}, _KvStoreWithoutUserProject)


class _KvStoreWithoutUserProject(TypedDict, total=False):
    driver: str
    bucket: str
