"""Parsing and validation of TensorStore-style JSON specs: driver, kvstore, open flags, members,
metadata constraints and schema (gpuzarr.tensorstore.spec, .kvstore, .schema)."""

from __future__ import annotations

import pytest

from gpuzarr.errors import MetadataError
from gpuzarr.tensorstore.kvstore import KvStoreSpec
from gpuzarr.tensorstore.schema import Schema, normalize_unit
from gpuzarr.tensorstore.spec import TensorStoreSpec

from .helpers import FILE, parse

# -- driver, kvstore, path ------------------------------------------------------------------------


@pytest.mark.parametrize(("driver", "expected"), [("zarr3", "zarr3"), ("zarr2", "zarr2"), ("zarr", "zarr2")])
def test_driver_names(driver: str, expected: str) -> None:
    spec = TensorStoreSpec.from_json({"driver": driver, "kvstore": FILE})
    assert spec.driver == expected
    assert spec.zarr_format == (3 if expected == "zarr3" else 2)


def test_unknown_driver_and_missing_kvstore() -> None:
    with pytest.raises(MetadataError, match=r"driver"):
        TensorStoreSpec.from_json({"driver": "n5", "kvstore": FILE})
    with pytest.raises(MetadataError, match=r"kvstore"):
        TensorStoreSpec.from_json({"driver": "zarr3"})


def test_kvstore_forms_and_path_join() -> None:
    assert parse(path="a/b").kvstore == KvStoreSpec("file", "/tmp/x.zarr/a/b")
    url = TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": "file:///tmp/y%20z.zarr/", "path": "raw"})
    assert url.kvstore == KvStoreSpec("file", "/tmp/y z.zarr/raw")
    mem = TensorStoreSpec.from_json(
        {"driver": "zarr3", "kvstore": {"driver": "memory", "path": "p/"}, "path": "q"}
    )
    assert mem.kvstore == KvStoreSpec("memory", "p/q")
    assert mem.kvstore.to_json() == {"driver": "memory", "path": "p/q/"}
    named = TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": "memory://name", "path": "q"})
    assert (named.kvstore.url, named.kvstore.path) == ("memory://name", "q")


@pytest.mark.parametrize(
    ("kvstore", "match"),
    [
        ({"driver": "gcs"}, "kvstore.bucket"),
        ({"driver": "s3", "bucket": "b", "bogus": 1}, "kvstore.bogus"),
        ({"driver": "s3", "bucket": "b", "aws_credentials": {"type": "profile"}}, "kvstore.aws_credentials"),
        ({"driver": "http", "base_url": "ftp://host/x"}, "kvstore.base_url"),
        # A fragment is refused; the message does not repeat a query, which may be a credential.
        ({"driver": "http", "base_url": "http://host/x.zarr?sig=abc#f"}, r"base_url: .*'http://host/x.zarr\?…'"),
        ({"driver": "s3", "bucket": "b", "path": "a/../b"}, "kvstore.path"),
        ({"driver": "nosuch"}, "kvstore.driver"),
        ({"driver": "file"}, "kvstore.path"),
        ({"driver": "file", "path": "/x", "bogus": 1}, "kvstore.bogus"),
        ("nosuch://bucket/x", "kvstore"),
        ("file:///x|zarr3:", "kvstore"),
    ],
)
def test_bad_kvstores(kvstore: object, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": kvstore})


def test_kvstore_resource_members_are_ignored() -> None:
    kv = {**FILE, "file_io_sync": True, "file_io_concurrency": {}, "context": {}}
    assert TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": kv}).kvstore.path == "/tmp/x.zarr"


# -- open flags -----------------------------------------------------------------------------------


def test_open_defaults_to_true_without_open_or_create() -> None:
    spec = parse()
    assert (spec.open, spec.create, spec.delete_existing) == (True, False, False)
    spec = parse(create=True)
    assert (spec.open, spec.create) == (False, True)
    spec = parse(open=True, create=True)
    assert (spec.open, spec.create) == (True, True)


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        ({"delete_existing": True}, "delete_existing"),
        ({"delete_existing": True, "create": True, "open": True}, "delete_existing"),
        ({"assume_metadata": True, "create": True}, "assume_metadata"),
        ({"assume_cached_metadata": True, "create": True}, "assume_cached_metadata"),
        ({"open": False}, "open"),
        ({"create": "yes"}, "create"),
    ],
)
def test_contradictory_open_flags(flags: dict[str, object], name: str) -> None:
    with pytest.raises(MetadataError, match=rf"^{name}:"):
        parse(**flags)


def test_valid_flag_combinations() -> None:
    assert parse(create=True, delete_existing=True).delete_existing
    assert parse(assume_metadata=True).assume_metadata
    assert parse(open=True, assume_cached_metadata=True).assume_cached_metadata


def test_mode_is_merged_into_the_flags() -> None:
    spec = TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE}, mode="w")
    assert (spec.open, spec.create, spec.delete_existing) == (False, True, True)
    spec = TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE}, mode="r")
    assert spec.read_only and spec.open and not spec.create
    spec = TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE, "open": True}, mode="a")
    assert spec.open and spec.create
    with pytest.raises(MetadataError, match=r"^create: .*mode='r'"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE, "create": True}, mode="r")
    with pytest.raises(MetadataError, match=r"^open:"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE, "open": True}, mode="w")
    with pytest.raises(ValueError, match=r"mode"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE}, mode="x")


def test_keyword_options_are_merged() -> None:
    spec = TensorStoreSpec.from_json(
        {"driver": "zarr3", "kvstore": FILE},
        create=True,
        shape=[4, 5],
        dtype="uint16",
        fill_value=3,
        dimension_units=["nm", "nm"],
        path="sub",
    )
    assert spec.create and spec.schema.shape == (4, 5) and spec.schema.dtype == "uint16"
    assert spec.schema.fill_value == 3 and spec.kvstore.path == "/tmp/x.zarr/sub"
    with pytest.raises(MetadataError, match=r"^dtype:"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE, "dtype": "int8"}, dtype="uint8")
    with pytest.raises(TypeError, match=r"chunks"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE}, chunks=[1])


# -- members --------------------------------------------------------------------------------------


def test_ignored_and_unknown_members() -> None:
    spec = parse(
        context={"cache_pool": {"total_bytes_limit": 1}},
        cache_pool="cache_pool",
        recheck_cached_data=False,
        recheck_cached_metadata="open",
        data_copy_concurrency={},
    )
    assert spec.open
    with pytest.raises(MetadataError, match=r"^creat: unknown"):
        parse(creat=True)
    # Used by TensorStore alone, but refused where it refuses them (they were taken whatever
    # they held): a spec gpuzarr opens is one TensorStore opens.
    fine = parse(context={"cache_pool#a": {"total_bytes_limit": 5}, "other_resource": {"x": 1}},
                 cache_pool="cache_pool#a", file_io_concurrency={"limit": "shared"},
                 recheck_cached_data=-5, recheck_cached_metadata=1.5)  # fmt: skip
    assert fine.open
    # Nulls (the kind's default resource) and whole floats (1e9 from Python), as TensorStore takes them.
    assert parse(context={"cache_pool": None, "file_io_concurrency": None}).open
    assert parse(context={"cache_pool": {"total_bytes_limit": 1e9}}).open
    for bad, message in (
        ({"recheck_cached_data": "bogus"}, r"^recheck_cached_data: expected"),
        ({"recheck_cached_metadata": [1]}, r"^recheck_cached_metadata: expected"),
        ({"cache_pool": "nonsense"}, r"^cache_pool: a reference to a 'cache_pool' resource"),
        ({"context": {"cache_pool": {"total_bytes_limit": "lots"}}}, r"^context\.cache_pool\.total_bytes_limit"),
        ({"context": {"data_copy_concurrency": {"limit": 0}}}, r"^context\.data_copy_concurrency\.limit"),
        ({"context": {"cache_pool": {"size": 1}}}, r"^context\.cache_pool\.size: unknown member"),
        ({"context": [1]}, r"^context: expected an object"),
    ):
        with pytest.raises(MetadataError, match=message):
            parse(**bad)


def test_fill_missing_and_store_equal_flags() -> None:
    spec = parse()
    assert spec.fill_missing_data_reads and not spec.store_data_equal_to_fill_value
    spec = parse(fill_missing_data_reads=False, store_data_equal_to_fill_value=True)
    assert not spec.fill_missing_data_reads and spec.store_data_equal_to_fill_value
    with pytest.raises(MetadataError, match=r"fill_missing_data_reads"):
        parse(fill_missing_data_reads="no")


def test_transforms_other_than_identity_are_refused() -> None:
    identity = {"input_inclusive_min": [0, 0], "input_exclusive_max": [[10], [20]]}
    assert parse(transform=identity).schema.rank == 2
    # Explicit bounds are kept, to be checked against the array's extents once it is opened
    # (tests/tensorstore/test_open.py): TensorStore's spec() of a field with a subarray has them.
    bounded = parse(transform={"input_inclusive_min": [0, 0], "input_exclusive_max": [[10], 2]}).schema
    assert (bounded.view_bounds, bounded.view_bounds_member) == ((None, 2), "transform.input_exclusive_max")
    assert parse(transform={"input_shape": [4]}).schema.view_bounds == (4,)
    assert parse(transform=identity).schema.view_bounds is None
    for bad in (
        {"input_inclusive_min": [2], "input_exclusive_max": [[5]]},
        {"input_rank": 1, "output": [{"offset": 3}]},
    ):
        with pytest.raises(MetadataError, match=r"^transform.*not supported"):
            parse(transform=bad)


def test_field_only_for_zarr2() -> None:
    with pytest.raises(MetadataError, match=r"^field:"):
        parse(field="x")
    spec = TensorStoreSpec.from_json({"driver": "zarr2", "kvstore": FILE, "field": "x"})
    assert spec.field == "x"


def test_zarr2_key_encoding_and_metadata_key() -> None:
    spec = TensorStoreSpec.from_json({"driver": "zarr2", "kvstore": FILE, "key_encoding": "/"})
    assert spec.metadata["dimension_separator"] == "/"
    with pytest.raises(MetadataError, match=r"^key_encoding"):
        TensorStoreSpec.from_json(
            {
                "driver": "zarr2",
                "kvstore": FILE,
                "key_encoding": "/",
                "metadata": {"dimension_separator": "."},
            }
        )
    with pytest.raises(MetadataError, match=r"^metadata_key"):
        TensorStoreSpec.from_json({"driver": "zarr2", "kvstore": FILE, "metadata_key": "zarray"})


# -- metadata constraints -------------------------------------------------------------------------


def test_v3_metadata_constraints_are_validated() -> None:
    spec = parse(
        metadata={
            "shape": [3],
            "data_type": "uint8",
            "codecs": ["zstd"],
            "chunk_key_encoding": {"name": "v2"},
        }
    )
    assert spec.metadata["codecs"] == [{"name": "zstd", "configuration": {}}]
    for bad, field in (
        ({"data_type": "uint7"}, "metadata.data_type"),
        ({"shape": [-1]}, "metadata.shape"),
        ({"zarr_format": 2}, "metadata.zarr_format"),
        ({"chunk_grid": {"name": 3}}, "metadata.chunk_grid.name"),
        ({"chunk_grid": {"configuration": {"chunk_shape": [0]}}}, "metadata.chunk_grid"),
        ({"shape": [3], "dimension_names": ["a", "b"]}, "metadata.dimension_names"),
        ({"codecs": "zstd"}, "metadata.codecs"),
        ({"chunks": [3]}, "metadata.chunks"),
    ):
        with pytest.raises(MetadataError, match=rf"^{field}"):
            parse(metadata=bad)


def test_v2_metadata_constraints_are_validated() -> None:
    spec = TensorStoreSpec.from_json(
        {"driver": "zarr2", "kvstore": FILE, "metadata": {"dtype": "<f4", "fill_value": "NaN", "order": "F"}}
    )
    assert spec.metadata == {"dtype": "<f4", "fill_value": "NaN", "order": "F"}
    for bad, field in (
        ({"dtype": "f4"}, "metadata.dtype"),
        ({"order": "K"}, "metadata.order"),
        ({"chunks": [0]}, "metadata.chunks"),
        ({"data_type": "uint8"}, "metadata.data_type"),
        ({"compressor": {"level": 1}}, "metadata.compressor.id"),
    ):
        with pytest.raises(MetadataError, match=rf"^{field}"):
            TensorStoreSpec.from_json({"driver": "zarr2", "kvstore": FILE, "metadata": bad})


# -- schema ---------------------------------------------------------------------------------------


def test_schema_domain_forms() -> None:
    assert Schema.from_json({"domain": {"shape": [3, 4]}}, "zarr3").shape == (3, 4)
    s = Schema.from_json(
        {"domain": {"inclusive_min": [0, 0], "exclusive_max": [[3], [4]], "labels": ["y", "x"]}}, "zarr3"
    )
    assert (s.shape, s.labels, s.rank) == ((3, 4), ("y", "x"), 2)
    assert Schema.from_json({"domain": {"inclusive_max": [2, 3]}}, "zarr3").shape == (3, 4)
    with pytest.raises(MetadataError, match=r"inclusive_min: zarr arrays have a zero origin"):
        Schema.from_json({"domain": {"inclusive_min": [1], "exclusive_max": [4]}}, "zarr3")
    with pytest.raises(MetadataError, match=r"labels.*rank"):
        Schema.from_json({"domain": {"shape": [3], "labels": ["a", "b"]}}, "zarr3")
    with pytest.raises(MetadataError, match=r"schema.codec.driver"):
        Schema.from_json({"codec": {"driver": "zarr"}}, "zarr3")
    with pytest.raises(MetadataError, match=r"schema.dtype"):
        Schema.from_json({"dtype": "string"}, "zarr3")


def test_dtype_and_rank_must_agree() -> None:
    assert parse(dtype="uint16", schema={"dtype": "uint16"}).schema.dtype == "uint16"
    with pytest.raises(MetadataError, match=r"^dtype:"):
        parse(dtype="uint16", schema={"dtype": "float32"})
    with pytest.raises(MetadataError, match=r"^rank:"):
        parse(rank=3, schema={"domain": {"shape": [1, 2]}})


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("nm", "nm"),
        ("1nm", "nm"),
        ("4.0nm", "4 nm"),
        ("1.5 um", "1.5 um"),
        ("", "1"),
        ("2", "2"),
        ("1e3 nm", "1000 nm"),
        (None, None),
        ([4, "nm"], "4 nm"),
    ],
)
def test_normalize_unit(unit: object, expected: str | None) -> None:
    assert normalize_unit(unit) == expected


def test_tensorstore_unit_objects_and_tuples_are_units() -> None:
    """``tensorstore.open(..., dimension_units=["nm", ts.Unit("4nm")])`` takes Unit objects; a
    spec of gpuzarr's refused them ("expected a unit string or null")."""
    ts = pytest.importorskip("tensorstore")
    assert normalize_unit(ts.Unit("4nm")) == "4 nm"
    assert normalize_unit(ts.Unit("nm")) == "nm"
    assert normalize_unit((0.5, "um")) == "0.5 um"
    import gpuzarr

    metadata = {"shape": [4, 4], "data_type": "uint8"}
    spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True, "metadata": metadata}
    array = gpuzarr.open(spec, dimension_units=["nm", ts.Unit("4nm")])
    assert array.attrs["dimension_units"] == ["nm", "4 nm"]


def test_a_domain_option_is_a_schema_constraint() -> None:
    """``tensorstore.open(spec, create=True, domain=ts.IndexDomain(...))`` (or its JSON): the
    shape and labels of the array created, as TensorStore creates it; a TypeError before."""
    ts = pytest.importorskip("tensorstore")
    import gpuzarr

    spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}}
    domain = ts.IndexDomain(shape=[4, 5], labels=["x", "y"])
    ours = gpuzarr.open(spec, create=True, dtype=ts.uint16, domain=domain)
    theirs = ts.open(spec, create=True, dtype=ts.uint16, domain=domain).result()
    assert ours.shape == theirs.shape == (4, 5)
    assert ours.spec()["metadata"]["dimension_names"] == theirs.spec().to_json()["metadata"]["dimension_names"]
    # Implicit (resizable) bounds, as IndexDomain writes them ([[4], 5]); JSON as given.
    implicit = ts.IndexDomain(shape=[4, 5], implicit_upper_bounds=[True, False])
    assert gpuzarr.open(spec, create=True, dtype="uint8", domain=implicit).shape == (4, 5)
    assert gpuzarr.open(spec, create=True, dtype="uint8", domain={"shape": [3], "labels": ["t"]}).shape == (3,)
    with pytest.raises(MetadataError, match=r"zero origin"):
        gpuzarr.open(spec, create=True, dtype="uint8", domain=ts.IndexDomain(inclusive_min=[1, 0], shape=[4, 5]))
    with pytest.raises(MetadataError, match=r"\[4, 5\], but the domain also gives \[4, 6\]"):
        gpuzarr.open(spec, create=True, dtype="uint8", domain=domain, shape=[4, 6])
    with pytest.raises(MetadataError, match=r"^domain: labels"):
        gpuzarr.open({**spec, "schema": {"domain": {"labels": ["a", "b"]}}}, create=True, dtype="uint8", domain=domain)
    # Merged as TensorStore merges domains: an empty label is no label, an implicit bound the
    # same bound, and schema= and domain= in either order.
    cases = [
        ({**spec, "schema": {"domain": {"labels": ["x", ""]}}}, {"domain": domain}),
        ({**spec, "schema": {"domain": {"exclusive_max": [4, 5]}}}, {"domain": implicit}),
        (spec, {"domain": ts.IndexDomain(shape=[4, 5]), "schema": ts.Schema(domain=domain)}),
        (spec, {"schema": ts.Schema(domain=domain), "domain": ts.IndexDomain(shape=[4, 5])}),
    ]
    for given, options in cases:
        ours = gpuzarr.open(given, create=True, dtype="uint8", **options)
        theirs = ts.open(given, create=True, dtype=ts.uint8, **options).result()
        assert ours.shape == theirs.shape == (4, 5)
        names = theirs.spec().to_json()["metadata"].get("dimension_names")
        assert ours.spec()["metadata"].get("dimension_names") == names, (given, options)
