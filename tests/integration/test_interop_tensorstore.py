"""gpuzarr and TensorStore (zarr3 driver) read each other's arrays identically (both directions).

The matrix is in interop_cases.py; TensorStore refuses bytes->bytes codecs after
sharding_indexed, so the one case that has them is left out here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

from .interop_cases import (
    TENSORSTORE_CASES,
    Case,
    assert_fill,
    assert_same,
    codec_names,
    numpy_select,
    select,
    stored_keys,
    stored_metadata,
    write_gpuzarr,
    write_tensorstore,
)

if TYPE_CHECKING:
    from pathlib import Path

ts = pytest.importorskip("tensorstore")


def _open_tensorstore(path: Path) -> Any:
    return ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path) + "/"}}, open=True
    ).result()


def _read(t: Any, kind: str, sel: Any) -> np.ndarray[Any, Any]:
    if kind == "basic":
        return np.asarray(t[sel].read().result())
    if kind == "oindex":
        return np.asarray(t.oindex[sel].read().result())
    return np.asarray(t.vindex[sel].read().result())


@pytest.mark.parametrize("case", TENSORSTORE_CASES, ids=lambda c: c.id)
def test_gpuzarr_reads_tensorstore(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "ts.zarr"
    write_tensorstore(case, path)
    expected = case.expected()
    a = gpuzarr.open(str(path), mode="r")
    assert isinstance(a, gpuzarr.Array)
    assert a.shape == case.shape
    assert a.dtype == case.np_dtype
    assert (a.chunks, a.shards) == case.chunks_and_shards()
    assert_fill(a.fill_value, case.fill_scalar())
    assert dict(a.attrs) == case.attributes
    if case.dimension_names is not None and any(case.dimension_names):
        assert a.dimension_names == tuple(case.dimension_names)
    else:  # TensorStore leaves out dimension_names that are all null
        assert a.dimension_names in (None, (None,) * len(case.shape))
    assert_same(a[...], expected, bits=True)
    for kind, sel in case.selections():
        assert_same(select(a, kind, sel), numpy_select(expected, kind, sel), bits=True)


@pytest.mark.parametrize("case", TENSORSTORE_CASES, ids=lambda c: c.id)
def test_tensorstore_reads_gpuzarr(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "gz.zarr"
    write_gpuzarr(case, path)
    expected = case.expected()
    t = _open_tensorstore(path)
    assert tuple(t.shape) == case.shape
    assert t.dtype.numpy_dtype == case.np_dtype
    if case.dimension_names is not None:
        assert list(t.domain.labels) == [n or "" for n in case.dimension_names]
    metadata = t.spec().to_json()["metadata"]
    assert metadata.get("attributes", {}) == case.attributes
    assert codec_names(metadata["codecs"]) == codec_names(case.full_codecs)
    assert_fill(np.asarray(t.fill_value), case.fill_scalar())
    assert_same(t.read().result(), expected, bits=True)
    for kind, sel in case.selections():
        assert_same(_read(t, kind, sel), numpy_select(expected, kind, sel), bits=True)
    # Both writers skip fill-valued chunks: the same objects are stored.
    reference = tmp_path / "ts.zarr"
    write_tensorstore(case, reference)
    assert stored_keys(path) == stored_keys(reference)
    assert stored_metadata(path)["fill_value"] == stored_metadata(reference)["fill_value"] or (
        case.np_dtype.kind in "fc"
    )


def test_tensorstore_opens_gpuzarr_spec(tmp_path: Path) -> None:
    """A gpuzarr array opened through a TensorStore-style spec dict is the same array."""
    case = TENSORSTORE_CASES[0]
    path = tmp_path / "gz.zarr"
    write_gpuzarr(case, path)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path) + "/"}}
    t = ts.open(spec, open=True).result()
    a = gpuzarr.open(spec["kvstore"], mode="r")
    assert_same(a[...], np.asarray(t.read().result()))


# Codecs given in part (a name alone, a configuration with members left out) are written out
# whole, with the members gpuzarr resolved: TensorStore refuses a zstd codec without its level
# and a Blosc codec without cname, clevel and shuffle.
SHORTHAND_COMPRESSORS = [
    "zstd",
    "gzip",
    "blosc",
    {"name": "zstd"},
    {"name": "zstd", "configuration": {"checksum": True}},
    {"name": "blosc", "configuration": {"cname": "zstd"}},
    ["crc32c"],
]


@pytest.mark.parametrize("shards", [None, (8, 16)], ids=["chunked", "sharded"])
@pytest.mark.parametrize("compressors", SHORTHAND_COMPRESSORS, ids=repr)
def test_tensorstore_reads_an_array_created_with_codecs_given_in_part(
    compressors: Any, shards: tuple[int, int] | None, tmp_path: Path
) -> None:
    data = np.arange(16 * 16, dtype=np.uint16).reshape(16, 16)
    a = gpuzarr.create_array(
        str(tmp_path / "a"), shape=data.shape, dtype=data.dtype, chunks=(4, 8), shards=shards, compressors=compressors
    )
    a[...] = data
    np.testing.assert_array_equal(np.asarray(_open_tensorstore(tmp_path / "a").read().result()), data)
    chain = stored_metadata(tmp_path / "a")["codecs"]
    if shards is not None:
        chain = chain[0]["configuration"]["codecs"]
    required = {
        "zstd": {"level", "checksum"},
        "gzip": {"level"},
        "blosc": {"cname", "clevel", "shuffle", "typesize", "blocksize"},
    }
    for codec in chain:
        assert required.get(codec["name"], set()) <= set(codec.get("configuration", {})), codec


@pytest.mark.parametrize(("dtype", "shuffle"), [("uint8", "bitshuffle"), ("uint16", "shuffle"), ("float64", "shuffle")])
def test_blosc_without_a_shuffle_shuffles_by_the_data_type_as_zarr_python_and_tensorstore(
    dtype: str, shuffle: str, tmp_path: Path
) -> None:
    zarr = pytest.importorskip("zarr")
    from zarr.codecs import BloscCodec

    ours = gpuzarr.create_array(str(tmp_path / "g"), shape=(8,), dtype=dtype, compressors={"name": "blosc"})
    theirs = zarr.create_array(str(tmp_path / "z"), shape=(8,), dtype=dtype, compressors=BloscCodec())
    chain = [{"name": "bytes"}, {"name": "blosc"}]
    spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True,
            "metadata": {"shape": [8], "data_type": dtype, "codecs": chain}}  # fmt: skip
    by_tensorstore = ts.open(spec).result().spec().to_json()["metadata"]["codecs"][1]["configuration"]
    by_zarr_python = theirs.metadata.to_dict()["codecs"][1]["configuration"]
    config = stored_metadata(tmp_path / "g")["codecs"][1]["configuration"]
    assert config["shuffle"] == by_tensorstore["shuffle"] == by_zarr_python["shuffle"] == shuffle
    assert config["typesize"] == np.dtype(dtype).itemsize
    data = np.arange(8).astype(dtype)
    ours[...] = data
    np.testing.assert_array_equal(ours[...], data)


def test_a_codec_marked_must_understand_is_kept_as_given(tmp_path: Path) -> None:
    blosc = {"name": "blosc", "configuration": {"cname": "lz4"}, "must_understand": False}
    gpuzarr.create_array(str(tmp_path / "a"), shape=(8,), dtype="uint16", compressors=blosc)
    assert stored_metadata(tmp_path / "a")["codecs"][1] == blosc


def test_codecs_beside_one_marked_must_understand_are_written_whole(tmp_path: Path) -> None:
    crc = {"name": "crc32c", "must_understand": False}
    gpuzarr.create_array(str(tmp_path / "a"), shape=(8,), dtype="uint16", chunks=(2,), shards=(4,),
                         compressors=[{"name": "zstd"}, crc])  # fmt: skip
    inner = stored_metadata(tmp_path / "a")["codecs"][0]["configuration"]["codecs"]
    assert inner[1] == {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
    assert inner[2]["name"] == "crc32c" and inner[2]["must_understand"] is False
