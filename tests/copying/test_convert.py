"""``gpuzarr.convert``: copies of arrays and hierarchies from Python, their encoding kept (stored
bytes moved as they are) or changed (Zarr version, chunks, shards, compression), each read back
by zarr-python, resumed where an earlier copy stopped, and refused where they cannot be made."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest

import gpuzarr
from gpuzarr.copying import KEEP, ConvertReport
from gpuzarr.errors import ContainsNodeError, InvalidArgumentError
from tests.cli.conftest import RAW_SHAPE, make_hierarchy, mask_data, raw_data

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")


def _stored(path: Path) -> dict[str, bytes]:
    """Every file below ``path`` by its relative name (a store's keys and their bytes)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_copy_without_options_moves_the_stored_bytes_and_resumes(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    report = gpuzarr.convert(source, tmp_path / "copy.zarr")
    assert isinstance(report, ConvertReport)
    assert (report.arrays, report.groups, report.skipped) == (2, 2, 0)
    # the sharded array's inner chunks, and the mask's chunks stored (its last row of chunks is
    # all fill value: not stored, not visited)
    assert report.written == 5 * 4 * 3 + 6
    assert report.nbytes == int(np.prod(RAW_SHAPE)) * 2 + 30 * 30 * 4
    assert _stored(tmp_path / "copy.zarr") == _stored(source)  # byte for byte, metadata included
    again = gpuzarr.convert(source, tmp_path / "copy.zarr")
    assert (again.written, again.skipped) == (0, report.written)  # all there already: skipped


def test_a_v3_hierarchy_converted_to_v2_reads_the_same_in_zarr_python(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    report = gpuzarr.convert(
        source, tmp_path / "v2.zarr", zarr_format=2, chunks=10, compressors=numcodecs.Zstd(level=5)
    )
    assert report.arrays == 2 and report.written > 0
    theirs = zarr.open_group(str(tmp_path / "v2.zarr"), mode="r", zarr_format=2)
    raw, mask = theirs["raw"], theirs["labels/mask"]
    np.testing.assert_array_equal(raw[...], raw_data())
    np.testing.assert_array_equal(mask[...], mask_data())  # NaNs where nothing was written
    assert (raw.chunks, raw.metadata.compressor.get_config()["level"]) == ((10, 10, 10), 5)
    assert raw.attrs["_ARRAY_DIMENSIONS"] == ["z", "y", "x"]  # xarray's names, kept across formats
    assert dict(theirs.attrs) == {"title": "cli test"}


def test_a_v2_array_converted_to_sharded_v3(tmp_path: Path) -> None:
    data = np.random.default_rng(3).integers(0, 1000, (64, 48), dtype=np.int32)
    zarr.create_array(str(tmp_path / "v2.zarr"), data=data, chunks=(16, 16), zarr_format=2)
    report = gpuzarr.convert(
        str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr"), zarr_format=3, chunks=(8, 8), shards=(32, 16),
        compressors=[zarr.codecs.ZstdCodec(level=2), {"name": "crc32c"}],
    )  # fmt: skip
    assert report.written == 8 * 6
    theirs = zarr.open_array(str(tmp_path / "v3.zarr"), mode="r")
    np.testing.assert_array_equal(theirs[...], data)
    assert (theirs.chunks, theirs.shards) == ((8, 8), (32, 16))
    assert [type(c).__name__ for c in theirs.compressors] == ["ZstdCodec", "Crc32cCodec"]


def test_sharding_and_compression_removed(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    gpuzarr.convert(f"{source}/raw", tmp_path / "plain.zarr", shards=None, compressors=None)
    theirs = zarr.open_array(str(tmp_path / "plain.zarr"), mode="r")
    np.testing.assert_array_equal(theirs[...], raw_data())
    assert (theirs.shards, theirs.chunks, list(theirs.compressors)) == (None, (8, 8, 8), [])


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_an_open_array_or_group_is_a_source(tmp_path: Path, device: str) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    group = gpuzarr.open_group(source, mode="r", device=device)
    gpuzarr.convert(group["raw"], tmp_path / "raw.zarr", chunks=(20, 15, 10), shards=None)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "raw.zarr"), mode="r")[...], raw_data())
    memory = gpuzarr.MemoryStore()
    report = gpuzarr.convert(group, memory, zarr_format=2, compressors=numcodecs.Blosc())
    assert report.groups == 2
    np.testing.assert_array_equal(gpuzarr.open(memory, path="labels/mask")[...], mask_data())


def test_a_resumed_conversion_writes_only_what_is_missing_or_different(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    first = gpuzarr.convert(source / "raw", tmp_path / "c.zarr", chunks=(10, 10, 10), shards=None)
    assert first.written == 4 * 3 * 2
    (tmp_path / "c.zarr" / "c" / "0" / "0" / "0").unlink()  # an interrupted run never wrote it
    (tmp_path / "c.zarr" / "c" / "1" / "1" / "1").write_bytes(b"torn")  # nor finished this one
    again = gpuzarr.convert(source / "raw", tmp_path / "c.zarr", chunks=(10, 10, 10), shards=None)
    assert (again.written, again.skipped) == (2, first.written - 2)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "c.zarr"), mode="r")[...], raw_data())


def test_other_metadata_at_the_destination_needs_overwrite(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    gpuzarr.convert(source / "raw", tmp_path / "c.zarr")
    with pytest.raises(ContainsNodeError):
        gpuzarr.convert(source / "raw", tmp_path / "c.zarr", chunks=4)
    report = gpuzarr.convert(source / "raw", tmp_path / "c.zarr", chunks=4, overwrite=True)
    assert report.skipped == 0
    assert zarr.open_array(str(tmp_path / "c.zarr"), mode="r").chunks == (4, 4, 4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"zarr_format": 4}, "zarr_format"),
        ({"chunks": (0, 4, 4)}, "chunks"),
        ({"chunks": (True,)}, "chunks"),
        ({"shards": "big"}, "shards"),
        ({"jobs": 0}, "jobs"),
        ({"compressors": "zstd"}, "compressors"),
        ({"chunks": (4, 4)}, "3 dimensions"),
    ],
)
def test_options_that_cannot_be_met_are_refused_before_anything_is_written(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    with pytest.raises(InvalidArgumentError, match=match):
        gpuzarr.convert(source / "raw", tmp_path / "c.zarr", **kwargs)
    assert not (tmp_path / "c.zarr").exists()


def test_a_v3_codec_with_no_v2_form_asks_for_compressors(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    with pytest.raises(InvalidArgumentError, match="crc32c"):
        gpuzarr.convert(source, tmp_path / "v2.zarr", zarr_format=2)  # the mask's crc32c
    gpuzarr.convert(source, tmp_path / "v2.zarr", zarr_format=2, compressors=numcodecs.GZip(level=1))
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "v2.zarr/labels/mask"), mode="r")[...], mask_data())


@pytest.mark.parametrize(("order", "v2_order"), [((2, 0, 1), "C"), ((2, 1, 0), "F")])
def test_a_transposed_v3_array_converts_to_v2(tmp_path: Path, order: tuple[int, ...], v2_order: str) -> None:
    """v2 stores only C or F order: the reversed transpose becomes "F", any other is dropped
    (every chunk is decoded and encoded again: the values stay the same)."""
    data = np.arange(120, dtype="i4").reshape(4, 5, 6)
    source = zarr.create_array(str(tmp_path / "t.zarr"), shape=data.shape, dtype=data.dtype, chunks=(2, 5, 3),
                               filters=[zarr.codecs.TransposeCodec(order=order)])  # fmt: skip
    source[...] = data
    gpuzarr.convert(str(tmp_path / "t.zarr"), tmp_path / "v2.zarr", zarr_format=2, compressors=numcodecs.Zstd(level=1))
    copy = zarr.open_array(str(tmp_path / "v2.zarr"), mode="r")
    assert copy.metadata.order == v2_order
    np.testing.assert_array_equal(copy[...], data)


def test_a_rectilinear_array_to_v2_asks_for_regular_chunks(tmp_path: Path) -> None:
    gpuzarr.create(str(tmp_path / "r.zarr"), shape=(20,), chunks=[[5, 15]], dtype="i2")
    with pytest.raises(InvalidArgumentError, match=r"no rectilinear .*--chunks"):
        gpuzarr.convert(str(tmp_path / "r.zarr"), tmp_path / "v2.zarr", zarr_format=2)
    gpuzarr.convert(str(tmp_path / "r.zarr"), tmp_path / "v2.zarr", zarr_format=2, chunks=10)
    assert zarr.open_array(str(tmp_path / "v2.zarr"), mode="r").chunks == (10,)


def test_overlapping_places_are_refused_however_they_are_named(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    before = _stored(source)
    as_kvstore = {"driver": "file", "path": str(source)}
    for destination in (source, source / "copy", tmp_path, f"file://{source}/", as_kvstore, source / "in.zip"):
        with pytest.raises(InvalidArgumentError, match="overlap"):
            gpuzarr.convert(source, destination, overwrite=True)
    raw = gpuzarr.open_array(source / "raw", mode="r")
    for destination in (source / "raw", gpuzarr.LocalStore(source), {"driver": "file", "path": str(source / "raw/x")}):
        with pytest.raises(InvalidArgumentError, match="overlap"):
            gpuzarr.convert(raw, destination, overwrite=True)  # an open node: its store is where it lies
    with pytest.raises(InvalidArgumentError, match="overlap"):
        gpuzarr.convert(gpuzarr.LocalStore(tmp_path), source / "labels", overwrite=True)
    assert _stored(source) == before  # nothing erased or written
    memory = gpuzarr.MemoryStore()
    gpuzarr.convert(source, memory)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        gpuzarr.convert(memory, memory, overwrite=True)
    np.testing.assert_array_equal(gpuzarr.open(memory, path="raw")[...], raw_data())


def test_a_kvstore_destination_with_a_path(tmp_path: Path) -> None:
    # A kvstore's path ends in "/": the node below the store's root, as for gpuzarr.open.
    source = make_hierarchy(tmp_path / "h.zarr")
    zipped = {"driver": "zip", "path": "inner/", "base": {"driver": "file", "path": str(tmp_path / "k.zip")}}
    memory = {"driver": "memory", "path": "inner/"}
    for destination in (zipped, memory):
        report = gpuzarr.convert(source / "raw", destination)
        assert report.arrays == 1
    archive = zarr.storage.ZipStore(tmp_path / "k.zip", mode="r")
    np.testing.assert_array_equal(zarr.open_array(archive, path="inner", mode="r")[...], raw_data())


def test_numpy_integers_are_shapes_and_other_scalars_are_refused(tmp_path: Path) -> None:
    source = make_hierarchy(tmp_path / "h.zarr")
    report = gpuzarr.convert(source / "raw", tmp_path / "a.zarr", chunks=np.int64(10), shards=None)
    assert report.arrays == 1 and zarr.open_array(str(tmp_path / "a.zarr"), mode="r").chunks == (10, 10, 10)
    gpuzarr.convert(source / "raw", tmp_path / "b.zarr", chunks=(np.int32(20), 15, 10), shards=None)
    assert zarr.open_array(str(tmp_path / "b.zarr"), mode="r").chunks == (20, 15, 10)
    for bad in ({"chunks": 4.0}, {"shards": 4.0}, {"overwrite": "yes"}):
        with pytest.raises(InvalidArgumentError):
            gpuzarr.convert(source / "raw", tmp_path / "c.zarr", **bad)


def test_keep_is_the_default_of_shards_and_compressors() -> None:
    import inspect

    parameters = inspect.signature(gpuzarr.convert).parameters
    assert parameters["shards"].default is KEEP and parameters["compressors"].default is KEEP


@pytest.mark.parametrize("shape", [(30, 6), (0, 6)], ids=["shrunk", "empty"])
def test_a_re_encoded_rectilinear_array_keeps_its_listed_sizes(tmp_path: Path, shape: tuple[int, int]) -> None:
    """The copy's chunks were the source's ``Array.chunks``, cut at the array's edge: the sizes
    a shrink left listed were lost, and an empty axis's (0,) was refused."""
    source = gpuzarr.create(str(tmp_path / "s.zarr"), shape=(37, 6), dtype="i2", chunks=[[5, 12, 20], 3])
    source[...] = np.arange(37 * 6, dtype="i2").reshape(37, 6)
    source.resize(shape)
    gpuzarr.convert(str(tmp_path / "s.zarr"), str(tmp_path / "d.zarr"), compressors=None)
    copy = gpuzarr.open(str(tmp_path / "d.zarr"), mode="r")
    assert copy.metadata.chunk_grid == source.metadata.chunk_grid
    np.testing.assert_array_equal(copy[...], source[...])


def test_a_filter_as_the_v2_compressor_of_a_copy_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """The copy exited 0 and every value read back as 7.7e-304."""
    import gpuzarr

    source = gpuzarr.create(str(tmp_path / "src.zarr"), shape=(4,), dtype="f8", chunks=(2,), zarr_format=2)
    source[...] = [2.5, 1.0, -3.0, 7.0]
    with pytest.raises(InvalidArgumentError, match="'packbits' is a filter"):
        gpuzarr.convert(str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"), compressors=[{"id": "packbits"}])
    assert not (tmp_path / "dst.zarr").exists()


def test_a_copy_refused_over_an_other_dst_array_changes_nothing_in_dst(tmp_path: Path) -> None:
    """DST's array z has other chunks: the refusal came after DST's root attributes were
    replaced and the other nodes made."""
    import gpuzarr

    source = gpuzarr.open_group(str(tmp_path / "src.zarr"), mode="w", attributes={"v": 2})
    source.create_array("a", shape=(4,), chunks=(2,), dtype="i1")[...] = 1
    source.create_array("z", shape=(4,), chunks=(2,), dtype="i1")[...] = 2
    dst = gpuzarr.open_group(str(tmp_path / "dst.zarr"), mode="w", attributes={"v": 1})
    dst.create_array("z", shape=(4,), chunks=(4,), dtype="i1")[...] = 9
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "dst.zarr").rglob("*"))
    with pytest.raises(ContainsNodeError, match="DST /z: an array with other metadata"):
        gpuzarr.convert(str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"))
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "dst.zarr").rglob("*")) == before
    assert dict(gpuzarr.open_group(str(tmp_path / "dst.zarr"), mode="r").attrs) == {"v": 1}


def test_a_target_whose_codecs_do_not_fit_is_refused_by_name_before_anything_is_written(tmp_path: Path) -> None:
    """A source whose serializer is a sharding codec (zarr-python's ``serializer=ShardingCodec``)
    copied with other chunks: the chain was first resolved as DST's nodes were made, and the
    copy stopped half-written naming a key of DST."""
    import warnings

    import zarr
    from zarr.codecs import ShardingCodec

    import gpuzarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(tmp_path / "src.zarr"), mode="w")
        group.create_array("a_ok", shape=(4,), chunks=(2,), dtype="i2")[:] = 1
        sharding = ShardingCodec(chunk_shape=(2, 5))
        group.create_array("w", shape=(12, 10), chunks=(6, 10), dtype="i2", serializer=sharding)
    with pytest.raises(gpuzarr.errors.MetadataError, match=r"^/w: "):
        gpuzarr.convert(str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"), chunks=2)
    assert not (tmp_path / "dst.zarr").exists()


@pytest.mark.parametrize(
    "options",
    [
        {"compressors": [{"name": "zstd"}]},
        {"compressors": [{"name": "gzip"}]},
        {"shards": (16, 16), "chunks": (8, 8), "compressors": [{"name": "blosc"}]},
    ],
    ids=["zstd", "gzip", "sharded-blosc"],
)
def test_codecs_given_in_part_are_written_whole(tmp_path: Path, options: dict[str, Any]) -> None:
    """As creation writes them: TensorStore refused the copy ("Error parsing object member
    codecs": a zstd without level, a Blosc without cname, clevel, shuffle)."""
    ts = pytest.importorskip("tensorstore")
    source = gpuzarr.create_array(str(tmp_path / "src"), shape=(16, 16), chunks=(8, 8), dtype="f8", compressors=None)
    source[...] = np.arange(256.0).reshape(16, 16)
    gpuzarr.convert(str(tmp_path / "src"), str(tmp_path / "dst"), **options)
    chain = json.loads((tmp_path / "dst" / "zarr.json").read_text())["codecs"]
    if chain[0]["name"] == "sharding_indexed":
        chain = chain[0]["configuration"]["codecs"]
    assert chain[-1]["configuration"] == {
        "zstd": {"level": 0, "checksum": False},
        "gzip": {"level": 5},
        "blosc": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0, "typesize": 8},
    }[chain[-1]["name"]]
    opened = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "dst")}}).result()
    np.testing.assert_array_equal(opened.read().result(), source[...])
