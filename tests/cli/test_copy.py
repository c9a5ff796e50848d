"""``gpuzarr copy`` and ``gpuzarr convert``: exact data, metadata carried over, format changes,
resuming, parallel regions, and the stores at both ends."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.copying import regions

from .conftest import mask_data, raw_data, run_module

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.servers import S3Bucket

    Cli = Callable[..., tuple[int, str, str]]


def _counts(summary: str) -> tuple[int, int]:
    """(chunks written, chunks skipped) from a copy's summary line."""
    tail = summary.split(": ", 2)[2]
    written = int(tail.split(" chunks written")[0])
    skipped = int(tail.split(", ")[1].split(" already equal")[0])
    return written, skipped


def _stored(path: Path) -> dict[str, bytes]:
    """Every chunk file under ``path`` (metadata documents left out), by relative key."""
    out = {}
    for directory, _, files in os.walk(path):
        for name in files:
            if name not in ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"):
                full = Path(directory, name)
                out[str(full.relative_to(path))] = full.read_bytes()
    return out


def _check_hierarchy(
    path: Path | str, zarr_format: int, fill_values: tuple[Any, Any] = (7, np.nan), **open_options: Any
) -> gpuzarr.Group:
    """The copy holds the hierarchy's data, attributes, dimension names and ``fill_values`` (of
    raw and mask: a v2 copy of a v3 array without a ``_FillValue`` attribute has a null fill
    value, as xarray writes it)."""
    g = gpuzarr.open_group(path, mode="r", **open_options)
    assert g.zarr_format == zarr_format and dict(g.attrs) == {"title": "cli test"}
    assert dict(g["labels"].attrs) == {"kind": "labels"}
    raw, mask = g["raw"], g["labels/mask"]
    np.testing.assert_array_equal(raw[...], raw_data())
    np.testing.assert_array_equal(mask[...], mask_data())  # NaN where the source has NaN
    assert [raw.fill_value, mask.fill_value] == pytest.approx(list(fill_values), nan_ok=True)
    if zarr_format == 3:
        assert raw.dimension_names == ("z", "y", "x") and dict(raw.attrs) == {"um": 0.5}
    else:  # xarray's attribute carries them in Zarr v2
        assert dict(raw.attrs) == {"um": 0.5, "_ARRAY_DIMENSIONS": ["z", "y", "x"]}
    return g


def test_copy_moves_stored_bytes_unchanged(hierarchy: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.zarr"
    done = run_module("copy", hierarchy, out, "-v")
    assert done.returncode == 0, done.stderr
    assert "copying /raw (stored bytes)" in done.stderr
    assert _counts(done.stdout) == (5 * 4 * 3 + 6, 0)  # raw's inner chunks, the mask's stored chunks
    _check_hierarchy(out, 3)
    assert _stored(out) == _stored(hierarchy)
    assert (out / "raw" / "zarr.json").read_bytes() == (hierarchy / "raw" / "zarr.json").read_bytes()


def test_copy_resumes_and_repairs_what_differs(hierarchy: Path, tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "copy.zarr"
    assert cli("copy", hierarchy, out)[0] == 0
    status, summary, _ = cli("copy", hierarchy, out)
    assert status == 0 and _counts(summary) == (0, 66)
    # A shard with other values, a missing shard, and a chunk where SRC stores nothing.
    copied = gpuzarr.open_group(out)
    copied["raw"][0:16, 0:16, 0:16] = 1
    (out / "raw" / "c" / "2" / "1" / "1").unlink()  # the edge shard: 1 x 2 x 1 inner chunks in the array
    copied["labels/mask"][25, 25] = 3.0
    status, summary, _ = cli("copy", hierarchy, out)
    assert status == 0
    assert _counts(summary) == (8 + 2 + 1, 66 - 8 - 2)
    assert _stored(out) == _stored(hierarchy)
    _check_hierarchy(out, 3)


@pytest.mark.parametrize(
    ("options", "zarr_format", "expect"),
    [
        (["--zarr-format", "2"], 2, {"raw": (8, 8, 8, None), "compressor": {"id": "zstd", "level": 0}}),
        (
            ["--chunks", "4", "--shards", "none", "--compressor", "gzip:6"],
            3,
            {"raw": (4, 4, 4, None), "codecs": [{"name": "gzip", "configuration": {"level": 6}}]},
        ),
        (
            ["--chunks", "4", "--shards", "8", "--compressor", "blosc:zstd:3:bitshuffle+crc32c"],
            3,
            {
                "raw": (4, 4, 4, (8, 8, 8)),
                "codecs": [
                    {"name": "blosc", "configuration": {
                        "cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "typesize": 2, "blocksize": 0}},
                    {"name": "crc32c"},
                ],
            },
        ),
    ],
    ids=["v2", "gzip-unsharded", "blosc-crc32c-resharded"],
)
def test_convert_changes_the_format_and_keeps_the_data(
    hierarchy: Path, tmp_path: Path, cli: Cli, options: list[str], zarr_format: int, expect: dict[str, Any]
) -> None:
    out = tmp_path / "converted.zarr"
    if zarr_format == 2:
        # crc32c has no Zarr v2 equivalent: the mask's compressors cannot be carried over.
        status, _, err = cli("convert", hierarchy, out, *options)
        assert status == 1
        assert "/labels/mask: the codec 'crc32c' cannot be written in Zarr v2" in err
        assert not out.exists()  # checked before anything was written
        options = [*options, "--compressor", "zstd:0"]
    status, summary, _ = cli("convert", hierarchy, out, *options)
    assert status == 0
    g = _check_hierarchy(out, zarr_format, (7, np.nan) if zarr_format == 3 else (None, None))
    raw = g["raw"]
    assert (*raw.chunks, raw.shards) == expect["raw"]
    if zarr_format == 2:
        assert raw.metadata.compressor == expect["compressor"]
    else:
        inner = raw.codecs[0]["configuration"]["codecs"] if raw.shards else raw.codecs
        assert inner[1:] == expect["codecs"]
    # A second run finds everything equal.
    written, skipped = _counts(cli("convert", hierarchy, out, *options)[1])
    assert written == 0 and skipped == _counts(summary)[0]


def test_convert_round_trip_through_v2(hierarchy: Path, tmp_path: Path, cli: Cli) -> None:
    v2, back = tmp_path / "v2.zarr", tmp_path / "back.zarr"
    assert cli("convert", hierarchy, v2, "--zarr-format", "2", "--compressor", "blosc")[0] == 0
    to_v3 = ["--zarr-format", "3", "--chunks", "8", "--shards", "16", "--compressor", "zstd"]
    assert cli("convert", v2, back, *to_v3)[0] == 0
    assert gpuzarr.open_array(v2 / "raw").fill_value is None  # no _FillValue attribute: null
    g = _check_hierarchy(back, 3, (0, 0.0))  # the data type's zero, which a null fill value reads as
    assert g["raw"].shards == (16, 16, 16)
    assert gpuzarr.open_array(v2 / "raw").metadata.compressor == {
        "id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0
    }


def test_resumed_convert_never_skips_a_region_that_differs(tmp_path: Path, cli: Cli) -> None:
    src = gpuzarr.create(tmp_path / "src.zarr", shape=(20, 20), dtype="float64", chunks=(5, 5), fill_value=1.0)
    values = np.zeros((20, 20))
    values[0, 0] = np.nan
    src[...] = values
    out = tmp_path / "out.zarr"
    assert cli("convert", tmp_path / "src.zarr", out, "--chunks", "10")[0] == 0
    copied = gpuzarr.open_array(out)
    copied[19, 19] = -0.0  # equal to 0.0 as a number, not as bits
    copied[0, 0] = np.float64(np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), np.float64)[0])  # another NaN
    status, summary, _ = cli("convert", tmp_path / "src.zarr", out, "--chunks", "10")
    assert status == 0 and _counts(summary) == (2, 2)
    back = gpuzarr.open_array(out)[...]
    assert back.tobytes() == values.tobytes()


class WriterRecordingStore(gpuzarr.MemoryStore):
    """Records which thread wrote each key; each write takes a moment, so that the pool's other
    threads pick up the regions waiting meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: dict[str, set[int]] = {}

    def set(self, key: str, value: Any) -> None:
        time.sleep(0.002)
        self.writers.setdefault(key, set()).add(threading.get_ident())
        super().set(key, value)


def test_parallel_regions_are_written_by_several_threads_each_owning_its_shards(
    hierarchy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuzarr.copying.destination import FormatOptions
    from gpuzarr.copying.destination_nodes import Tally, prepare_nodes
    from gpuzarr.copying.engine import copy_array
    from gpuzarr.copying.progress import Progress

    # Small regions: many of them, one shard each, written by four threads.
    monkeypatch.setattr(regions, "TARGET_BYTES", 16 * 16 * 16 * 2)
    store = WriterRecordingStore()
    tally = Tally()
    source = gpuzarr.open_group(hierarchy, mode="r", device="cpu")
    copies = prepare_nodes(source, store, "", FormatOptions(chunks=(4,), shards=(16,)), overwrite=False, tally=tally)
    # gpuzarr's own pool off (concurrency 1: chunk tasks run inline), so that each write runs
    # on the thread of the region it belongs to.
    with gpuzarr.config.set(concurrency=1), Progress(sum(c.source.nbytes for c in copies), "convert", False) as bar:
        for item in copies:
            copy_array(item, 4, bar, tally)
    chunk_writers = {k: w for k, w in store.writers.items() if not k.endswith("zarr.json")}
    assert len(set().union(*chunk_writers.values())) > 1  # more than one region thread wrote
    assert all(len(w) == 1 for w in chunk_writers.values())  # no stored object has two writers
    assert tally.skipped == 0 and tally.written == 10 * 8 * 5 + 8 * 8  # inner chunks of 4^3 and 4^2
    copied = gpuzarr.open_group(store, mode="r", device="cpu")
    np.testing.assert_array_equal(copied["raw"][...], raw_data())
    np.testing.assert_array_equal(copied["labels/mask"][...], mask_data())


def test_progress_bar_when_asked(hierarchy: Path, tmp_path: Path, cli: Cli) -> None:
    status, _, err = cli("convert", hierarchy, tmp_path / "out.zarr", "--chunks", "8", "--progress")
    assert status == 0
    assert "convert: 100%" in err and "chunks/s" in err
    # Not a terminal, not asked: no bar.
    assert cli("copy", hierarchy, tmp_path / "again.zarr")[2] == ""


def test_existing_destination_with_other_metadata(hierarchy: Path, tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "out.zarr"
    assert cli("copy", hierarchy, out)[0] == 0
    before = _stored(out)
    status, _, err = cli("convert", hierarchy, out, "--chunks", "4")
    assert status == 1
    assert "DST /labels/mask: an array with other metadata is there (chunk_grid" in err
    assert err.rstrip().endswith("differ); pass overwrite=True, or --overwrite, to replace DST")
    assert _stored(out) == before
    status, _, _ = cli("convert", hierarchy, out, "--chunks", "4", "--overwrite")
    assert status == 0
    assert gpuzarr.open_array(out / "raw").chunks == (4, 4, 4)
    _check_hierarchy(out, 3)


def test_refuses_overlapping_source_and_destination(hierarchy: Path, cli: Cli) -> None:
    status, _, err = cli("copy", hierarchy, hierarchy / "inside")
    assert status == 1 and "overlap" in err
    assert cli("copy", hierarchy / "raw", hierarchy, "--overwrite")[0] == 1
    _check_hierarchy(hierarchy, 3)


def test_one_array_into_a_zip_archive_and_back(hierarchy: Path, tmp_path: Path, cli: Cli) -> None:
    archive = tmp_path / "raw.zip"
    assert cli("copy", hierarchy / "raw", archive)[0] == 0
    a = gpuzarr.open_array(archive, mode="r")
    np.testing.assert_array_equal(a[...], raw_data())
    assert cli("convert", archive, tmp_path / "back.zarr", "--zarr-format", "2")[0] == 0
    np.testing.assert_array_equal(gpuzarr.open_array(tmp_path / "back.zarr")[...], raw_data())


def test_strings_big_endian_and_zero_dimensional_arrays_across_formats(tmp_path: Path, cli: Cli) -> None:
    g = gpuzarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    words = np.array(["a", "bb", "", "dddd", "é"], dtype=object)
    g.create_array("words", shape=(5,), dtype=str, chunks=(2,))[...] = words
    big = g.create_array("big", shape=(7, 9), dtype=">f8", chunks=(3, 4), order="F", dimension_separator="/")
    big[...] = np.arange(63.0).reshape(7, 9)
    g.create_array("scalar", shape=(), dtype="int64", chunks=())[...] = 42
    gpuzarr.consolidate_metadata(tmp_path / "v2.zarr")
    runs = [("v2.zarr", "same.zarr", []), ("v2.zarr", "v3.zarr", ["--zarr-format", "3"]),
            ("v3.zarr", "v2again.zarr", ["--zarr-format", "2"])]
    for source_name, target, options in runs:
        source = tmp_path / source_name
        assert cli("convert", source, tmp_path / target, *options)[0] == 0
        copied = gpuzarr.open_group(tmp_path / target, mode="r")
        assert copied.consolidated  # SRC's consolidated metadata is written again
        assert list(copied["words"][...]) == list(words)
        np.testing.assert_array_equal(copied["big"][...], np.arange(63.0).reshape(7, 9))
        assert copied["scalar"][()] == 42
    assert gpuzarr.open_array(tmp_path / "same.zarr" / "big").metadata.to_json() == big.metadata.to_json()


def test_to_and_from_an_object_store(hierarchy: Path, tmp_path: Path, s3_bucket: S3Bucket, cli: Cli) -> None:
    options = json.dumps(s3_bucket.storage_options())
    url = f"{s3_bucket.url}/h.zarr"
    status, summary, _ = cli("copy", hierarchy, url, "--dst-storage-options", options, "--jobs", "3")
    assert status == 0 and _counts(summary) == (66, 0)
    _check_hierarchy(url, 3, storage_options=s3_bucket.storage_options())
    status, summary, _ = cli("copy", hierarchy, url, "--dst-storage-options", options)
    assert _counts(summary) == (0, 66)
    back = tmp_path / "back.zarr"
    assert cli("convert", url, back, "--storage-options", options, "--chunks", "8", "--shards", "none")[0] == 0
    _check_hierarchy(back, 3)


@pytest.mark.parametrize("shards", ["none", "10"])
def test_resumed_convert_rewrites_a_damaged_destination_object(tmp_path: Path, cli: Cli, shards: str) -> None:
    src = gpuzarr.create(tmp_path / "src.zarr", shape=(20, 20), dtype="int32", chunks=(5, 5))
    values = np.arange(400, dtype="int32").reshape(20, 20)
    src[...] = values
    out = tmp_path / "out.zarr"
    options = ["--chunks", "5", "--shards", shards, "--compressor", "zstd:1"]
    assert cli("convert", tmp_path / "src.zarr", out, *options)[0] == 0
    damaged = out / "c" / "1" / "0"  # a chunk, or the shard holding four chunks
    damaged.write_bytes(damaged.read_bytes()[:-7])  # truncated, as by an interrupted write
    status, summary, err = cli("convert", tmp_path / "src.zarr", out, *options, "-v")
    assert status == 0, err
    assert "c/1/0" in err and "writing it again" in err
    written, skipped = _counts(summary)
    assert written == (1 if shards == "none" else 4) and written + skipped == 16
    np.testing.assert_array_equal(gpuzarr.open_array(out)[...], values)


def test_overwrite_refuses_a_destination_that_holds_no_zarr_node(hierarchy: Path, tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "thesis"
    (out / "chapters").mkdir(parents=True)
    (out / "notes.txt").write_text("not Zarr")
    (out / "chapters" / "one.tex").write_text("not Zarr either")
    status, _, err = cli("copy", hierarchy, out, "--overwrite")
    assert status == 1
    assert "DST holds data that is not a Zarr array or group ('chapters/one.tex', 'notes.txt')" in err
    assert (out / "notes.txt").read_text() == "not Zarr" and (out / "chapters" / "one.tex").exists()
    assert not (out / "zarr.json").exists()
    # An empty directory, or a Zarr node, may be replaced.
    (out / "notes.txt").unlink()
    (out / "chapters" / "one.tex").unlink()
    assert cli("copy", hierarchy, out, "--overwrite")[0] == 0
    assert cli("convert", hierarchy, out, "--chunks", "4", "--overwrite")[0] == 0
    _check_hierarchy(out, 3)


def test_a_copy_of_an_array_with_no_chunks_says_what_it_went_over(tmp_path: Path, cli: Cli) -> None:
    """Nothing stored, nothing written: the size given is the array's data (its fill value), and
    says so."""
    gpuzarr.create(str(tmp_path / "empty.zarr"), shape=(100, 100), dtype="f4", chunks=(10, 10))
    status, summary, _ = cli("convert", tmp_path / "empty.zarr", tmp_path / "out.zarr", "--compressor", "zstd:3")
    assert status == 0
    assert _counts(summary) == (0, 0)
    assert "; 39.1 KiB of array data in " in summary
    assert not _stored(tmp_path / "out.zarr")


# -- what cannot be converted or written is refused before DST is touched ---------------------------


def test_a_structured_array_converted_to_v3_is_refused_before_anything_is_written(tmp_path: Path, cli: Cli) -> None:
    """Zarr v2's structured types have no v3 form gpuzarr (or zarr-python, stably) reads: the
    copy wrote an array of data type "structured" no one could open, and exited 0."""
    source = tmp_path / "s2.zarr"
    dtype = np.dtype([("a", "<i4"), ("b", "<f8")])
    group = gpuzarr.open_group(str(source), mode="w", zarr_format=2)
    group.create_array("rec", shape=(4,), chunks=(2,), dtype=dtype)[...] = np.array([(1, 1.5)] * 4, dtype=dtype)
    status, _, err = cli("convert", source, tmp_path / "s3.zarr", "--zarr-format", "3")
    assert status == 1
    assert "/rec: data_type: the structured type" in err and "has no Zarr v3 form" in err
    assert not (tmp_path / "s3.zarr").exists()


def test_an_opaque_fill_value_survives_v2_to_v3_and_back(tmp_path: Path, cli: Cli) -> None:
    """An opaque (``|V8``) v2 fill value survives a v3 copy and back (Python's repr of it was
    written, which the way back refused); in v3 it is the array's fill value alone, since
    xarray decodes no ``_FillValue`` attribute of bytes (one failed the dataset's open)."""
    source = tmp_path / "v8.zarr"
    fill = np.void(b"12345678")
    a = gpuzarr.create(str(source), zarr_format=2, shape=(4,), chunks=(2,), dtype="|V8", fill_value=fill)
    a[0:2] = np.array([b"abcdefgh"] * 2, dtype="V8")
    assert cli("convert", source, tmp_path / "v3.zarr", "--zarr-format", "3")[0] == 0
    document = json.loads((tmp_path / "v3.zarr" / "zarr.json").read_text())
    assert "_FillValue" not in document["attributes"]
    assert cli("convert", tmp_path / "v3.zarr", tmp_path / "back.zarr", "--zarr-format", "2")[0] == 0
    back = gpuzarr.open(str(tmp_path / "back.zarr"), device="cpu")
    assert back.fill_value == fill
    assert back[...].tobytes() == b"abcdefgh" * 2 + b"12345678" * 2


@pytest.mark.parametrize("command", ["copy", "convert"])
def test_attributes_with_nan_are_copied_as_the_source_holds_them(tmp_path: Path, cli: Cli, command: str) -> None:
    """zarr-python writes NaN and infinite numbers into attributes (no JSON; xarray's
    ``valid_max: inf``); the copy stopped before anything was written. It now writes them as
    the source's document holds them (convert: into the other format's documents)."""
    source = tmp_path / "nan.zarr"
    group = gpuzarr.open_group(str(source), mode="w")
    group.create_array("x", shape=(3,), dtype="f4")
    for document in (source / "zarr.json", source / "x" / "zarr.json"):
        doc = json.loads(document.read_text())
        doc["attributes"] = {"scale_factor": float("nan"), "valid": [0.0, float("-inf")]}
        document.write_text(json.dumps(doc))  # as zarr-python writes them: NaN, -Infinity
    options = ["--zarr-format", "2"] if command == "convert" else []
    status, _, err = cli(command, source, tmp_path / "copy.zarr", *options)
    assert status == 0, err
    for node in (gpuzarr.open_group(str(tmp_path / "copy.zarr")), gpuzarr.open(str(tmp_path / "copy.zarr/x"))):
        attrs = dict(node.attrs)
        assert math.isnan(attrs.pop("scale_factor")) and attrs == {"valid": [0.0, float("-inf")]}


@pytest.mark.parametrize("option", [["--compressor", "gzip"], ["--chunks", "5"]], ids=["compressor", "chunks"])
def test_a_rectilinear_grid_of_shards_is_kept_where_no_option_changes_it(
    tmp_path: Path, cli: Cli, option: list[str]
) -> None:
    """Options left out keep what SRC has: shards of several sizes stay so (they became regular
    shards of the largest size)."""
    data = np.arange(4000, dtype="int32").reshape(100, 40)
    source = tmp_path / "rs.zarr"
    gpuzarr.create(str(source), data=data, shards=[[20, 40, 40], 20], chunks=(10, 10))
    assert cli("convert", source, tmp_path / "out.zarr", *option)[0] == 0
    copy = gpuzarr.open(str(tmp_path / "out.zarr"), device="cpu")
    assert copy.metadata.chunk_grid == gpuzarr.open(str(source), device="cpu").metadata.chunk_grid
    np.testing.assert_array_equal(copy[...], data)


def test_shards_for_a_rectilinear_array_ask_for_inner_chunks(tmp_path: Path, cli: Cli) -> None:
    source = tmp_path / "rect.zarr"
    gpuzarr.create(str(source), data=np.arange(4000).reshape(100, 40), chunks=[[5] * 20, 20])
    status, _, err = cli("convert", source, tmp_path / "x.zarr", "--shards", "50,20")
    assert status == 1
    assert "chunks: /: the array's chunk grid is rectilinear" in err and "--chunks" in err
    assert cli("convert", source, tmp_path / "x.zarr", "--shards", "50,20", "--chunks", "10,20")[0] == 0
    np.testing.assert_array_equal(gpuzarr.open(str(tmp_path / "x.zarr"))[...], np.arange(4000).reshape(100, 40))


def test_a_copy_into_a_folder_of_other_files_is_refused_so_that_overwrite_never_erases_them(
    tmp_path: Path, cli: Any
) -> None:
    """A plain copy into a folder of the user's files made it a Zarr node, and the next
    ``--overwrite`` then erased the folder with the user's files."""
    src = tmp_path / "src.zarr"
    gpuzarr.create_array(str(src), shape=(4,), chunks=(2,), dtype="u1")[...] = 1
    project = tmp_path / "project"
    (project / "photos").mkdir(parents=True)
    (project / "notes.txt").write_text("keep")
    (project / "photos" / "cat.jpg").write_text("keep")
    for extra in ([], ["--overwrite"]):
        status, _, err = cli("copy", src, project, *extra)
        assert status == 1 and "DST holds data that is not a Zarr array or group" in err
    assert (project / "notes.txt").read_text() == "keep" and (project / "photos" / "cat.jpg").exists()
    assert not (project / "zarr.json").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("copy", src, empty)[0] == 0  # an empty folder takes a copy


def test_chunks_in_a_folder_this_process_may_not_list_stop_a_copy_and_a_count(tmp_path: Path, cli: Any) -> None:
    """Copies, conversions and chunk counts found chunks by listing, which skips a folder it may
    not list: they copied nothing and said so with exit 0."""

    from gpuzarr.errors import StorePermissionError
    from tests.permissions import open_to_all, reachable_directory, without_permission

    with reachable_directory() as base:
        src = base / "s.zarr"
        array = gpuzarr.create_array(str(src), shape=(8, 8), chunks=(4, 4), dtype="u2")
        array[...] = np.arange(64).reshape(8, 8)
        open_to_all(src)
        (base / "out").mkdir(mode=0o777)
        (base / "out").chmod(0o777)
        assert cli("info", src)[0] == 0  # imports what it needs, as root
        (src / "c").chmod(0o711)  # searchable, not listable
        with without_permission(src / "c"):
            copied = cli("copy", src, base / "out" / "d.zarr")
            converted = cli("convert", src, base / "out" / "e.zarr", "--compressor", "gzip")
            opened = gpuzarr.open_array(str(src), mode="r")
            with pytest.raises(StorePermissionError, match="may not list"):
                _ = opened.nchunks_initialized
        for status, _, err in (copied, converted):
            assert status == 1 and "may not list" in err
