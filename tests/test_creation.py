"""zarr-python's constructors: zeros, ones, full, empty, array, the ``*_like`` family,
``create(data=...)`` and ``group()``. Interop of what they write is in
tests/integration/test_interop_conveniences.py."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GroupNotFoundError, InvalidArgumentError, MetadataError

zarr = pytest.importorskip("zarr")


def test_the_public_names_are_functions() -> None:
    # They were submodules once: calling them raised "'module' object is not callable".
    for name in ("array", "group", "zeros", "ones", "full", "empty", "open_like", "zeros_like"):
        assert callable(getattr(gpuzarr, name)), name
        assert name in gpuzarr.__all__
    assert gpuzarr.Array.__name__ == "Array" and gpuzarr.Group.__name__ == "Group"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda **kw: gpuzarr.zeros((5, 4), **kw), 0),
        (lambda **kw: gpuzarr.ones((5, 4), **kw), 1),
        (lambda **kw: gpuzarr.full((5, 4), 7.5, **kw), 7.5),
        (lambda **kw: gpuzarr.empty((5, 4), **kw), 0),
    ],
    ids=["zeros", "ones", "full", "empty"],
)
def test_filled_constructors(store: gpuzarr.Store, make: Any, expected: float) -> None:
    a = make(store=store, chunks=(2, 3))
    assert (a.shape, a.dtype, a.chunks) == ((5, 4), np.float64, (2, 3))
    np.testing.assert_array_equal(a[...], np.full((5, 4), expected))
    a[1, 1] = -1
    assert gpuzarr.open_array(store)[1, 1] == -1
    assert a.nchunks_initialized == 1  # nothing but the written chunk was stored


def test_defaults_match_zarr_python() -> None:
    for ours, theirs in [
        (gpuzarr.zeros(6), zarr.zeros(6)),
        (gpuzarr.ones((3, 2), dtype="i2"), zarr.ones((3, 2), dtype="i2")),
        (gpuzarr.full((4,), 5), zarr.full((4,), 5)),
        (gpuzarr.empty((2, 2)), zarr.empty((2, 2))),
    ]:
        assert (ours.shape, ours.dtype, ours.chunks, ours.zarr_format) == (
            theirs.shape,
            theirs.dtype,
            theirs.chunks,
            theirs.metadata.zarr_format,
        )
        assert ours.fill_value == theirs.fill_value
        # No store: each array lives in its own new memory store, as in zarr-python.
        assert isinstance(ours.store, gpuzarr.MemoryStore)
    assert gpuzarr.zeros(3).store is not gpuzarr.zeros(3).store


def test_array_from_numpy_list_and_scalar() -> None:
    x = np.arange(24, dtype="int16").reshape(4, 6)
    a = gpuzarr.array(x, chunks=(2, 3))
    assert (a.dtype, a.chunks) == (np.int16, (2, 3))
    np.testing.assert_array_equal(a[...], x)
    b = gpuzarr.array([[1.5, 2], [3, 4]])
    assert b.dtype == np.float64 and b[1, 0] == 3
    c = gpuzarr.array(x, dtype="float32")  # dtype converts the values
    assert c.dtype == np.float32
    np.testing.assert_array_equal(c[...], x.astype("float32"))
    s = gpuzarr.array(np.float32(2.5))
    assert s.shape == () and s[()] == np.float32(2.5)


def test_array_from_an_array_keeps_its_layout(tmp_path: Any) -> None:
    src = gpuzarr.create(
        tmp_path / "src.zarr", shape=(50, 30), dtype="uint16", chunks=(5, 10), shards=(10, 30), fill_value=9
    )
    x = np.arange(1500, dtype="uint16").reshape(50, 30)
    src[...] = x
    copy = gpuzarr.array(src, store=tmp_path / "copy.zarr")
    assert (copy.chunks, copy.shards, copy.fill_value) == ((5, 10), (10, 30), 9)
    assert copy.codecs == src.codecs
    np.testing.assert_array_equal(copy[...], x)
    # Keyword arguments override what the source gives.
    other = gpuzarr.array(src, chunks=(25, 15), fill_value=0, codecs=None)
    assert (other.chunks, other.shards, other.fill_value) == ((25, 15), None, 0)
    np.testing.assert_array_equal(other[...], x)


def test_create_with_data_infers_shape_and_dtype(store: gpuzarr.Store) -> None:
    x = np.linspace(0, 1, 60, dtype="float32").reshape(3, 20)
    a = gpuzarr.create(store, data=x, chunks=(2, 8))
    assert (a.shape, a.dtype) == ((3, 20), np.float32)
    np.testing.assert_array_equal(gpuzarr.open_array(store)[...], x)
    b = gpuzarr.create(shape=(3, 20), data=x)  # a matching shape is fine
    np.testing.assert_array_equal(b[...], x)
    with pytest.raises(InvalidArgumentError, match=r"shape: \(4, 20\) given, but data has shape \(3, 20\)"):
        gpuzarr.create(shape=(4, 20), data=x)
    with pytest.raises(InvalidArgumentError, match="shape: required"):
        gpuzarr.create(dtype="int8")


def test_create_without_dtype_is_float64_as_zarr_create() -> None:
    assert gpuzarr.create(shape=(3,)).dtype == zarr.create((3,)).dtype == np.float64


def test_open_array_with_data_creates(tmp_path: Any) -> None:
    x = np.arange(10, dtype="int8")
    a = gpuzarr.open_array(tmp_path / "a.zarr", mode="w", data=x)
    np.testing.assert_array_equal(a[...], x)
    # mode "a" creates only when nothing is there: the array is opened as it is.
    b = gpuzarr.open_array(tmp_path / "a.zarr", mode="a", data=np.zeros(3))
    np.testing.assert_array_equal(b[...], x)


def test_like_functions_from_a_gpuzarr_array(store: gpuzarr.Store, tmp_path: Any) -> None:
    a = gpuzarr.create(store, shape=(12, 8), dtype="int32", chunks=(4, 4), fill_value=-5, order="F")
    a[...] = 1
    for fn, fill in [
        (gpuzarr.zeros_like, 0),
        (gpuzarr.ones_like, 1),
        (gpuzarr.empty_like, -5),  # zarr-python: empty_like keeps the fill value
        (gpuzarr.full_like, -5),
    ]:
        b = fn(a, store=tmp_path / f"{fn.__name__}.zarr")
        assert (b.shape, b.dtype, b.chunks, b.codecs, b.zarr_format) == (a.shape, a.dtype, a.chunks, a.codecs, 3)
        assert b.fill_value == fill, fn.__name__
        np.testing.assert_array_equal(b[...], np.full((12, 8), fill))
    c = gpuzarr.full_like(a, fill_value=3, dtype="float32", chunks=(6, 8))
    assert (c.dtype, c.chunks, c.fill_value) == (np.float32, (6, 8), 3)


def test_like_functions_keep_shards_and_v2_settings() -> None:
    sharded = gpuzarr.create(shape=(40, 40), dtype="uint8", chunks=(5, 5), shards=(20, 40))
    copy = gpuzarr.zeros_like(sharded)
    assert (copy.chunks, copy.shards) == ((5, 5), (20, 40))
    v2 = gpuzarr.create(
        shape=(9, 9), dtype=">i4", chunks=(3, 3), zarr_format=2, order="F", compressor={"id": "zlib", "level": 3}
    )
    like = gpuzarr.ones_like(v2)
    assert like.zarr_format == 2
    assert like.metadata.to_dict() | {"fill_value": 0} == v2.metadata.to_dict() | {"fill_value": 0}
    assert like.fill_value == 1


def test_like_functions_from_numpy() -> None:
    x = np.zeros((300, 200), dtype="float16")
    z = gpuzarr.zeros_like(x)
    assert (z.shape, z.dtype, z.zarr_format) == (x.shape, np.float16, 3)
    assert z.chunks == zarr.zeros_like(x).chunks  # guessed, as zarr-python does
    f = gpuzarr.full_like(x, fill_value=2)
    assert f.fill_value == 2 and f[0, 0] == 2
    with pytest.raises(TypeError, match="fill_value"):
        gpuzarr.full_like(x)


def test_open_like(tmp_path: Any) -> None:
    a = gpuzarr.create(shape=(6, 6), dtype="uint8", chunks=(3, 3), fill_value=4)
    b = gpuzarr.open_like(a, "sub/b", store=tmp_path / "s.zarr")
    assert (b.path, b.shape, b.chunks, b.fill_value) == ("sub/b", (6, 6), (3, 3), 4)
    b[0, 0] = 1
    # The second call opens what the first created.
    again = gpuzarr.open_like(a, "sub/b", store=tmp_path / "s.zarr", fill_value=0)
    assert again[0, 0] == 1 and again.fill_value == 4


def test_group_opens_or_creates(tmp_path: Any) -> None:
    path = tmp_path / "g.zarr"
    g = gpuzarr.group(path, attributes={"made": 1})
    g.create_group("child")
    assert dict(gpuzarr.group(path).attrs) == {"made": 1}  # opened, not replaced
    assert list(gpuzarr.group(path, attributes={"made": 2})) == ["child"]
    fresh = gpuzarr.group(path, overwrite=True)
    assert list(fresh) == [] and dict(fresh.attrs) == {}
    v2 = gpuzarr.group(tmp_path / "v2.zarr", zarr_format=2, path="a/b")
    assert v2.zarr_format == 2 and v2.path == "a/b"
    assert gpuzarr.group(tmp_path / "v2.zarr", path="a/b").zarr_format == 2
    assert isinstance(gpuzarr.group().store, gpuzarr.MemoryStore)
    gpuzarr.create(tmp_path / "arr.zarr", shape=(2,), dtype="i1")
    with pytest.raises(GroupNotFoundError):
        gpuzarr.group(tmp_path / "arr.zarr")


def test_constructors_reject_bad_arguments() -> None:
    with pytest.raises(TypeError):
        gpuzarr.zeros((2,), fill_value=3)  # zeros sets it: a duplicate, as in zarr-python
    with pytest.raises(MetadataError, match="chunks"):
        gpuzarr.ones((4, 4), chunks=(2, 2, 2))
    with pytest.raises(TypeError, match="nonsense"):
        gpuzarr.zeros((4,), nonsense=1)


def test_from_array_keeps_the_nan_attributes_its_source_held(tmp_path: Path) -> None:
    """xarray's ``valid_max: inf`` (written by zarr-python) stopped from_array, where copy and
    convert keep it; attributes given with NaN are still refused."""
    import json

    source = gpuzarr.create(str(tmp_path / "s.zarr"), data=np.ones(4, "f4"), chunks=(2,))
    document = tmp_path / "s.zarr" / "zarr.json"
    doc = json.loads(document.read_text())
    doc["attributes"] = {"valid_max": float("inf")}
    document.write_text(json.dumps(doc))  # Infinity, as zarr-python writes it
    copy = gpuzarr.from_array(str(tmp_path / "c.zarr"), data=gpuzarr.open(str(tmp_path / "s.zarr")))
    assert dict(copy.attrs) == {"valid_max": float("inf")}
    np.testing.assert_array_equal(copy[...], source[...])
    with pytest.raises(MetadataError, match="not JSON"):
        gpuzarr.from_array(str(tmp_path / "d.zarr"), data=source, attributes={"x": float("nan")})


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_pythons_data_type_objects(zarr_format: int) -> None:
    """zarr-python 3.1's data type objects (its guide: ``dtype=zarr.dtype.Int8()``) raised
    'is not a data type'."""
    zdtype = pytest.importorskip("zarr.core.dtype")
    cases = [
        (zdtype.Int16(endianness="big"), np.dtype(">i2")),
        (zdtype.DateTime64(unit="s"), np.dtype("M8[s]")),
        (zdtype.Bool(), np.dtype("?")),
        (zdtype.FixedLengthUTF32(length=4), np.dtype("<U4")),
    ]
    for given, expected in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr-python's unstable-specification warnings
            array = gpuzarr.create_array(gpuzarr.MemoryStore(), shape=(3,), dtype=given, zarr_format=zarr_format)
        assert array.dtype == expected.newbyteorder("=")
    store = gpuzarr.MemoryStore()
    strings = gpuzarr.create_array(store, name="s", shape=(2,), dtype=zdtype.VariableLengthUTF8(),
                                   zarr_format=zarr_format)
    strings[...] = ["a", "bc"]
    assert strings[...].tolist() == ["a", "bc"]
    raw = gpuzarr.create_array(store, name="b", shape=(2,), dtype=zdtype.VariableLengthBytes(), zarr_format=zarr_format)
    raw[...] = np.array([b"a", b"bc"], dtype=object)
    assert raw[...].tolist() == [b"a", b"bc"]


@pytest.mark.parametrize(
    "compressor",
    [{"id": "packbits"}, {"id": "astype", "encode_dtype": "f4", "decode_dtype": "f8"}, {"id": "delta", "dtype": "f8"}],
)
def test_a_filter_given_as_a_v2_compressor_is_refused(compressor: dict[str, Any]) -> None:
    """A filter reads the chunk's bytes as other values: ``packbits`` as the compressor of
    float64 data stored 7.7e-304 for every value (zarr-python takes it too)."""
    with pytest.raises(InvalidArgumentError, match=f"'{compressor['id']}' is a filter"):
        gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype="f8", zarr_format=2, compressor=compressor)


@pytest.mark.parametrize("dtype", ["string", "variable_length_bytes"])
def test_variable_length_data_with_a_filter_keeps_its_serializer(dtype: str) -> None:
    """A filter (a transpose) with variable-length strings or bytes: the serializer became
    ``bytes``, which refuses them ('bytes cannot encode the variable-length data type');
    zarr-python writes transpose, vlen-utf8 (or vlen-bytes), zstd."""
    transpose = {"name": "transpose", "configuration": {"order": [1, 0]}}
    array = gpuzarr.create_array(gpuzarr.MemoryStore(), shape=(2, 3), dtype=dtype, filters=[transpose])
    assert [c["name"] for c in array.metadata.to_json()["codecs"]][:2] == [
        "transpose",
        "vlen-utf8" if dtype == "string" else "vlen-bytes",
    ]
    values = np.array([["a", "bc", ""], ["d", "e", "fgh"]], dtype=object)
    if dtype != "string":
        values = np.array([[v.encode() for v in row] for row in values], dtype=object)
    array[...] = values
    assert array[...].tolist() == values.tolist()


@pytest.mark.parametrize(("source_format", "target_format"), [(3, 2), (2, 3)])
@pytest.mark.parametrize("shards", [None, (4,)])
def test_array_of_an_array_into_the_other_format(
    tmp_path: Path, source_format: int, target_format: int, shards: tuple[int] | None
) -> None:
    """Chunks and fill value come along; the codecs, of the source's format, do not (they
    failed: "codecs: not available for zarr_format=2")."""
    if shards is not None and source_format == 2:
        pytest.skip("v2 has no shards")
    source = gpuzarr.create_array(str(tmp_path / "s"), shape=(6,), dtype="i4", chunks=(2,), shards=shards,
                                  fill_value=7, zarr_format=source_format)  # fmt: skip
    source[:3] = [1, 2, 3]
    copied = gpuzarr.array(source, store=str(tmp_path / "d"), zarr_format=target_format)
    assert copied.metadata.zarr_format == target_format
    assert copied.fill_value == 7
    np.testing.assert_array_equal(copied[...], [1, 2, 3, 7, 7, 7])
    zarr = pytest.importorskip("zarr")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "d"), mode="r")[...], [1, 2, 3, 7, 7, 7])


@pytest.mark.parametrize(
    "arguments",
    [
        {"serializer": {"name": "bytes"}},
        {"serializer": "bytes"},
        {"codecs": [{"name": "bytes"}, {"name": "zstd"}]},
        {"codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 2]}}]},
        {"codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 2], "codecs": ["bytes"]}}]},
    ],
    ids=["serializer-dict", "serializer-name", "codecs", "sharding-alone", "sharding-inner-bytes"],
)
def test_codecs_given_in_part_get_what_zarr_python_fills_in(tmp_path: Path, arguments: dict[str, Any]) -> None:
    """``bytes`` without ``endian`` for a type with a byte order is little endian (it was refused:
    "configuration.endian: required"); a sharding codec without its chains gets ``bytes``
    inside and ``bytes`` + ``crc32c`` for the index, at the end (refused: "configuration.codecs:
    required"). zarr-python and TensorStore read the array."""
    data = np.arange(35, dtype="i4").reshape(7, 5)
    path = str(tmp_path / "a")
    a = gpuzarr.create(store=path, shape=data.shape, chunks=(6, 4), dtype=data.dtype, **arguments)
    a[...] = data
    chain = json.loads(Path(path, "zarr.json").read_text())["codecs"]
    if chain[0]["name"] == "sharding_indexed":
        config = chain[0]["configuration"]
        assert config["index_codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
        assert config["index_location"] == "end"
        chain = config["codecs"]
    assert chain[0] == {"name": "bytes", "configuration": {"endian": "little"}}
    zarr = pytest.importorskip("zarr")
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data)
    ts = pytest.importorskip("tensorstore")
    opened = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
    np.testing.assert_array_equal(opened.read().result(), data)


@pytest.mark.parametrize("make", ["zeros", "ones"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zeros_and_ones_of_fixed_length_bytes_as_zarr_python(make: str, zarr_format: int) -> None:
    """Their digit as bytes, as zarr-python (and as text types take "0" and "1"); refused before
    ("fill_value: expected bytes")."""
    ours = getattr(gpuzarr, make)((3,), dtype="S5", zarr_format=zarr_format)
    with warnings.catch_warnings():  # zarr-python's: no v3 specification of the type yet
        warnings.simplefilter("ignore")
        theirs = getattr(zarr, make)((3,), dtype="S5", zarr_format=zarr_format)
    assert ours.fill_value == theirs.fill_value
    np.testing.assert_array_equal(ours[...], theirs[...])
    like = getattr(gpuzarr, f"{make}_like")(ours)
    assert like.fill_value == theirs.fill_value


def test_a_shard_index_bytes_codec_given_without_endian_is_little_endian(tmp_path: Path) -> None:
    """The index is a table of uint64 (refused before: "configuration.endian: required")."""
    path = str(tmp_path / "a")
    sharding = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "index_codecs": [{"name": "bytes"}]}}
    a = gpuzarr.create(store=path, shape=(8,), dtype="i4", chunks=(4,), codecs=[sharding])
    a[...] = np.arange(8)
    config = json.loads(Path(path, "zarr.json").read_text())["codecs"][0]["configuration"]
    assert config["index_codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], np.arange(8))


def test_bytes_after_a_filter_that_widens_the_type_gets_a_byte_order(tmp_path: Path) -> None:
    """The serializer sees the filter's type (uint16 from uint8), as the default serializer
    already did: given without ``endian``, it was refused."""
    path = str(tmp_path / "a")
    widen = {"name": "numcodecs.fixedscaleoffset",
             "configuration": {"offset": 0, "scale": 1, "dtype": "|u1", "astype": "<u2"}}  # fmt: skip
    a = gpuzarr.create(store=path, shape=(8,), dtype="u1", chunks=(4,), filters=[widen], serializer={"name": "bytes"})
    a[...] = np.arange(8)
    assert json.loads(Path(path, "zarr.json").read_text())["codecs"][1] == {
        "name": "bytes", "configuration": {"endian": "little"}}  # fmt: skip
    np.testing.assert_array_equal(gpuzarr.open(path, mode="r")[...], np.arange(8))


def test_zarr_format_none_is_the_default_or_the_sources() -> None:
    """As zarr-python takes it: the default format (3), or the source's for ``array``."""
    assert gpuzarr.create(shape=(2,), zarr_format=None).metadata.zarr_format == 3
    assert gpuzarr.create_array(None, shape=(2,), dtype="i4", zarr_format=None).metadata.zarr_format == 3
    assert gpuzarr.zeros((2,), zarr_format=None).metadata.zarr_format == 3
    assert gpuzarr.create_group(None, zarr_format=None).zarr_format == 3
    source = gpuzarr.create(shape=(2,), zarr_format=2)
    assert gpuzarr.array(source, zarr_format=None).metadata.zarr_format == 2


@pytest.mark.parametrize(("dtype", "encoded", "endian"), [("u1", "float64", "little"), ("f8", "uint8", None)])
def test_a_sharding_codec_after_a_filter_takes_the_filters_type(
    tmp_path: Path, dtype: str, encoded: str, endian: str | None
) -> None:
    """Its inner chunks are what the filter gives: a byte order where that type has one."""
    path = str(tmp_path / "a")
    astype = {"name": "numcodecs.astype", "configuration": {"encode_dtype": encoded, "decode_dtype": dtype}}
    sharding = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2]}}
    a = gpuzarr.create(store=path, shape=(4,), chunks=(4,), dtype=dtype, codecs=[astype, sharding])
    a[...] = np.arange(4)
    inner = json.loads(Path(path, "zarr.json").read_text())["codecs"][1]["configuration"]["codecs"]
    assert inner[0]["name"] == "bytes" and inner[0].get("configuration", {}).get("endian") == endian
    np.testing.assert_array_equal(gpuzarr.open(path, mode="r")[...], np.arange(4))


@pytest.mark.parametrize("entry", [{"id": "crc32c"}, {"configuration": {}}, 7])
def test_a_shard_index_codec_without_a_name_is_refused_naming_the_field(entry: Any) -> None:
    sharding = {"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "index_codecs": [entry]}}
    with pytest.raises(MetadataError, match="index_codecs"):
        gpuzarr.create(shape=(4,), chunks=(4,), dtype="i4", codecs=[sharding])


@pytest.mark.parametrize("fill_value", [np.array([1.5]), 1 + 2j, "not a number"])
def test_a_fill_value_the_type_cannot_hold_is_a_metadata_error(fill_value: Any) -> None:
    with pytest.raises(gpuzarr.errors.MetadataError, match="fill_value"):
        gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), chunks=(2,), dtype="f4", fill_value=fill_value)


def test_a_shape_of_non_integers_is_refused_not_truncated() -> None:
    with pytest.raises(gpuzarr.errors.MetadataError, match="shape"):
        gpuzarr.create(gpuzarr.MemoryStore(), shape=(4.5,), chunks=(2,), dtype="f4")
