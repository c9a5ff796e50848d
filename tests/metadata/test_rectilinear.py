"""Rectilinear chunk grids (ZEP 3, the zarr-extensions ``rectilinear`` grid): metadata forms,
reads and writes against a NumPy model, fill values, chunk keys, sharding inside a rectilinear
outer grid, resize and invalid grids."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.metadata.rectilinear import RectilinearChunkGrid
from tests.backends.cpu.resize_model import check_random_resizes

ZEP3_CHUNKS = [[5, 5, 5, 15, 15, 20, 35], 10]
BOUNDS_AXIS0 = [0, 5, 10, 15, 30, 45, 65, 100]


def chunk_keys(store: gpuzarr.Store) -> set[str]:
    return {k for k in store.list_prefix("") if not k.endswith("zarr.json")}


def zarr_json(store: gpuzarr.Store) -> dict[str, Any]:
    raw = store.get("zarr.json")
    assert raw is not None
    return json.loads(bytes(raw))  # type: ignore[no-any-return]


def grid_json(chunk_shapes: list[Any]) -> dict[str, Any]:
    return {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": chunk_shapes}}


def v3_document(shape: list[int], chunk_shapes: list[Any], **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": "int32",
        "chunk_grid": grid_json(chunk_shapes),
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": -1,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    }
    doc.update(changes)
    return doc


def put_document(store: gpuzarr.Store, doc: dict[str, Any]) -> None:
    store.set("zarr.json", json.dumps(doc).encode())


# -- metadata -------------------------------------------------------------------------------------


def test_zep3_example_grid(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 100), dtype="int32", chunks=ZEP3_CHUNKS, fill_value=0, device="cpu")
    assert a.chunks == ((5, 5, 5, 15, 15, 20, 35), 10)
    assert a.shards is None
    # Runs of equal sizes are written as [size, count].
    assert zarr_json(store)["chunk_grid"] == grid_json([[[5, 3], [15, 2], 20, 35], 10])
    dims = a.layout.dimensions()
    np.testing.assert_array_equal(dims[0].boundaries, BOUNDS_AXIS0)
    assert [dims[0].nchunks, dims[1].nchunks] == [7, 10]
    # "An array index of (17, 17) would be found in key c3/1, index (2, 2)."
    a[17, 17] = 42
    assert chunk_keys(store) == {"c/3/1"}
    chunk = np.frombuffer(_decoded(store, "c/3/1"), dtype="int32").reshape(15, 10)
    assert chunk[2, 7] == 42
    assert np.count_nonzero(chunk) == 1


def _decoded(store: gpuzarr.Store, key: str) -> bytes:
    import numcodecs

    raw = store.get(key)
    assert raw is not None
    return bytes(numcodecs.Zstd().decode(bytes(raw)))


@pytest.mark.parametrize(
    ("chunk_shapes", "expanded"),
    [
        ([[[10, 4], 3], [[2, 50]]], ((10, 10, 10, 10, 3), (2,) * 50)),
        ([[1, [2, 3], 4], 7], ((1, 2, 2, 2, 4), 7)),
        ([[[5, 0], 100], 100], ((100,), 100)),
        ([[3] * 33 + [4], 100],
         ((3,) * 33 + (4,), 100)),
    ],
)  # fmt: skip
def test_run_length_forms_in_zarr_json(store: gpuzarr.Store, chunk_shapes: list[Any], expanded: Any) -> None:
    shape = [sum(expanded[0]), 100]
    put_document(store, v3_document(shape, chunk_shapes))
    a = gpuzarr.open(store, mode="r+", device="cpu")
    assert isinstance(a, gpuzarr.Array)
    assert a.chunks == expanded
    model = np.arange(shape[0] * shape[1], dtype="int32").reshape(shape)
    a[...] = model
    np.testing.assert_array_equal(a[...], model)
    # Writing the metadata back keeps the meaning (and compresses runs).
    grid = RectilinearChunkGrid.from_json(a.metadata.to_json()["chunk_grid"], tuple(shape))
    assert grid.chunk_shapes == expanded


def test_grid_json_round_trip() -> None:
    for shapes in ([[[5, 3], [15, 2], 20, 35], 10], [7, [1, 2, 3]], [[[4, 2]]]):
        extents = (100,) * len(shapes)
        grid = RectilinearChunkGrid.from_json(grid_json(shapes), extents)
        assert grid.to_json() == grid_json(shapes)
        assert RectilinearChunkGrid.from_json(grid.to_json(), extents) == grid


@pytest.mark.parametrize(
    ("shape", "chunks", "field"),
    [
        ((100, 95), [[5, 5], 10], r"chunk_shapes\[0\].*add up to 10.*100"),
        ((100, 95), [[5, 95], [10]], r"chunk_shapes\[1\].*add up to 10.*95"),
        ((100, 95), [[5, 5, 0, 95], 10], r"chunks.*chunk_shapes\[0\]\[2\].*positive"),
        ((100, 95), [[5, -5, 100], 10], r"chunk_shapes\[0\]\[1\]"),
        ((100, 95), [[95, 5], 0], r"chunk_shapes\[1\].*positive"),
        ((100, 95), [[5, 95], 10, 3], r"chunk_shapes.*2 entries, got 3"),
        ((100, 95), [[], 10], r"chunk_shapes\[0\].*at least one"),
        ((100, 95), [[[5, 20, 1]], 10], r"chunk_shapes\[0\]\[0\]"),
        ((100, 95), [["5", 95], 10], r"chunk_shapes\[0\]\[0\]"),
    ],
)
def test_invalid_grids_on_create(shape: Any, chunks: Any, field: str, store: gpuzarr.Store) -> None:
    with pytest.raises(MetadataError, match=field):
        gpuzarr.create(store, shape=shape, dtype="int32", chunks=chunks)
    assert not store.exists("zarr.json")


@pytest.mark.parametrize(
    ("shape", "chunk_grid", "field"),
    [
        ([10, 4], grid_json([[3, 3], 4]), r"chunk_shapes\[0\].*add up to 6"),
        ([10, 4], grid_json([[[5, -1]], 4]), r"chunk_shapes\[0\]\[0\]"),
        ([10, 4], grid_json([[10], 4, 4]), r"chunk_shapes.*2 entries"),
        ([10, 4], grid_json("nope"), r"chunk_shapes.*expected a list"),
        (
            [10, 4],
            {"name": "rectilinear", "configuration": {"kind": "file", "chunk_shapes": [10, 4]}},
            "kind",
        ),
        ([10, 4], grid_json([True, 4]), r"chunk_shapes\[0\]"),
        ([10, 4], grid_json([[2.5, 7.5], 4]), r"chunk_shapes\[0\]\[0\]"),
    ],
)
def test_invalid_grids_in_zarr_json(shape: Any, chunk_grid: Any, field: str, store: gpuzarr.Store) -> None:
    put_document(store, v3_document(shape, [], chunk_grid=chunk_grid))
    with pytest.raises(MetadataError, match=field):
        gpuzarr.open(store, mode="r")


# -- reads and writes -----------------------------------------------------------------------------


def test_full_and_partial_reads(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 95), dtype="int32", chunks=ZEP3_CHUNKS, fill_value=-1, device="cpu")
    x = np.arange(9500, dtype="int32").reshape(100, 95)
    a[...] = x
    np.testing.assert_array_equal(a[...], x)
    for sel in [(slice(3, 97, 7), slice(None, None, -3)), (14, slice(None)), (slice(29, 31), 94),
                (slice(64, 66), slice(9, 11)), (99, 94), (slice(100, 100), slice(None))]:  # fmt: skip
        np.testing.assert_array_equal(a[sel], x[sel])
    rows, cols = [0, 4, 5, 29, 30, 99, 45, 44], [94, 0, 10, 9]
    np.testing.assert_array_equal(a.oindex[rows, cols], x[np.ix_(rows, cols)])
    pts = ([0, 99, 45, 5, 64], [94, 0, 10, 9, 10])
    np.testing.assert_array_equal(a.vindex[pts], x[pts])
    # The edge chunk (35 rows, 5 of 10 columns inside) covers rows 65..99.
    keys = chunk_keys(store)
    assert len(keys) == 7 * 10
    assert "c/6/9" in keys and "c/7/0" not in keys


def test_missing_chunks_read_fill(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 30), dtype="float32", chunks=ZEP3_CHUNKS, fill_value=float("nan"))
    a[12:31, 11:19] = 3.5
    model = np.full((100, 30), np.nan, dtype="float32")
    model[12:31, 11:19] = 3.5
    np.testing.assert_array_equal(np.asarray(a[...]), model)
    # Rows 12..30 touch chunks 2 (10-15), 3 (15-30) and 4 (30-45); columns 11..18 chunk 1.
    assert chunk_keys(store) == {"c/2/1", "c/3/1", "c/4/1"}
    # Writing the fill value back removes the chunks.
    a[...] = np.float32("nan")
    assert chunk_keys(store) == set()
    assert np.isnan(np.asarray(a[...])).all()


@pytest.mark.parametrize("separator", [".", "/"])
def test_chunk_keys_follow_the_encoding(store: gpuzarr.Store, separator: str) -> None:
    a = gpuzarr.create(store, shape=(20, 9), dtype="uint8", chunks=[[1, 19], [2, 3, 4]], fill_value=0,
                       chunk_key_encoding="default", dimension_separator=separator)  # fmt: skip
    a[0, 8] = 1
    a[19, 0] = 2
    assert chunk_keys(store) == {f"c{separator}0{separator}2", f"c{separator}1{separator}0"}
    b = gpuzarr.create(store, path="v2keys", shape=(20, 9), dtype="uint8", chunks=[[1, 19], 9],
                       chunk_key_encoding="v2", dimension_separator=separator)  # fmt: skip
    b[5, 5] = 1
    assert f"v2keys/1{separator}0" in set(store.list_prefix("v2keys/"))


def test_last_chunk_past_the_array_edge(store: gpuzarr.Store) -> None:
    # The sizes may add up to more than the extent: the last chunk reaches past the edge.
    a = gpuzarr.create(store, shape=(11,), dtype="int16", chunks=[[4, 4, 8]], fill_value=7, device="cpu")
    a[...] = np.arange(11, dtype="int16")
    np.testing.assert_array_equal(a[...], np.arange(11))
    assert chunk_keys(store) == {"c/0", "c/1", "c/2"}
    stored = np.frombuffer(_decoded(store, "c/2"), dtype="<i2")
    np.testing.assert_array_equal(stored, [8, 9, 10, 7, 7, 7, 7, 7])


def test_three_d_and_fortran_order(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(7, 6, 5), dtype="int64", chunks=[[1, 6], 4, [2, 2, 1]], order="F",
                       fill_value=0, device="cpu")  # fmt: skip
    x = np.arange(210, dtype="int64").reshape(7, 6, 5)
    a[...] = x
    np.testing.assert_array_equal(gpuzarr.open(store, mode="r", device="cpu")[...], x)
    np.testing.assert_array_equal(a[1:6, ::2, 4], x[1:6, ::2, 4])


# -- sharding inside a rectilinear grid -----------------------------------------------------------


def test_sharding_in_rectilinear_grid(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 40), dtype="int32", shards=[[10, 20, 30, 40], 40], chunks=(5, 10),
                       fill_value=0, device="cpu")  # fmt: skip
    assert a.chunks == (5, 10)
    doc = zarr_json(store)
    assert doc["chunk_grid"] == grid_json([[10, 20, 30, 40], 40])
    assert doc["codecs"][0]["name"] == "sharding_indexed"
    assert doc["codecs"][0]["configuration"]["chunk_shape"] == [5, 10]
    x = np.arange(4000, dtype="int32").reshape(100, 40)
    a[...] = x
    assert chunk_keys(store) == {"c/0/0", "c/1/0", "c/2/0", "c/3/0"}
    np.testing.assert_array_equal(a[...], x)
    np.testing.assert_array_equal(a[13:57, 3:33], x[13:57, 3:33])
    np.testing.assert_array_equal(
        a.oindex[[0, 9, 10, 29, 30, 59, 60, 99], [39, 0]], x[np.ix_([0, 9, 10, 29, 30, 59, 60, 99], [39, 0])]
    )
    # A partial write into one shard keeps the rest of it.
    a[31:34, 5:25] = -7
    x[31:34, 5:25] = -7
    np.testing.assert_array_equal(gpuzarr.open(store, mode="r", device="cpu")[...], x)
    # Each shard holds (its extent / 5) x 4 inner chunks.
    layout = a.layout
    assert layout.shard_of((6, 0)) == ((2, 0), 0)
    assert layout.shard_of((11, 3)) == ((2, 0), 23)
    assert layout.shard_of((12, 1)) == ((3, 0), 1)


@pytest.mark.parametrize(
    ("shards", "chunks", "field"),
    [
        ([[10, 20, 30, 40], 40], (3, 10), r"shards.*axis 0.*multiples of the chunk size 3"),
        ([[10, 20, 30, 40], 30], (5, 20), r"shards.*axis 1.*multiples of the chunk size 20"),
        ([[10, 20, 30], 40], (5, 10), r"chunk_shapes\[0\].*add up to 60"),
    ],
)
def test_invalid_sharded_grids(shards: Any, chunks: Any, field: str, store: gpuzarr.Store) -> None:
    with pytest.raises(MetadataError, match=field):
        gpuzarr.create(store, shape=(100, 40), dtype="int32", shards=shards, chunks=chunks)
    assert not store.exists("zarr.json")


def test_invalid_sharded_grid_in_zarr_json(store: gpuzarr.Store) -> None:
    inner = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [5, 10],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end",
        },
    }
    put_document(store, v3_document([100, 40], [[10, 22, 28, 40], 40], codecs=[inner]))
    with pytest.raises(MetadataError, match=r"chunk_shapes\[0\].*22.*multiple of the inner chunk size 5"):
        gpuzarr.open(store, mode="r")


# -- resize ---------------------------------------------------------------------------------------


def test_resize_within_and_beyond_the_grid(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(100, 95), dtype="int32", chunks=ZEP3_CHUNKS, fill_value=-1, device="cpu")
    x = np.arange(9500, dtype="int32").reshape(100, 95)
    a[...] = x
    a.resize((60, 95))
    assert a.shape == (60, 95)
    np.testing.assert_array_equal(a[...], x[:60])
    # Chunks wholly outside the new extent are gone; growing again shows fill there.
    assert not any(k.startswith("c/6/") for k in chunk_keys(store))
    a.resize((100, 95))
    model = np.full((100, 95), -1, dtype="int32")
    model[:60] = x[:60]
    np.testing.assert_array_equal(a[...], model)
    # A regular axis grows without limit; a rectilinear one past its sizes' sum gets one chunk
    # more, of the growth, as zarr-python's rectilinear grids grow (it was refused).
    a.resize((100, 200))
    assert a.shape == (100, 200)
    a.resize((101, 200))
    assert a.shape == (101, 200)
    assert zarr_json(store)["chunk_grid"]["configuration"]["chunk_shapes"][0] == [[5, 3], [15, 2], 20, 35, 1]
    a[100] = 7
    reopened = gpuzarr.open(store, mode="r", device="cpu")
    assert reopened.shape == (101, 200)
    np.testing.assert_array_equal(reopened[:100, :95], model)
    np.testing.assert_array_equal(reopened[100], np.full(200, 7))
    assert reopened.chunks[0] == (5, 5, 5, 15, 15, 20, 35, 1)


# -- property tests against a NumPy model ---------------------------------------------------------


@st.composite
def _axis(draw: st.DrawFn, sharded: bool) -> tuple[int, Any, int]:
    """(extent, chunk sizes of the grid for the axis, inner chunk size)."""
    n = draw(st.integers(0, 14))
    inner = draw(st.integers(1, 3)) if sharded else 1
    if draw(st.booleans()):
        return n, inner * draw(st.integers(1, 5)), inner
    sizes: list[int] = []
    while sum(sizes) < n or not sizes:
        sizes.append(inner * draw(st.integers(1, 4)))
    if draw(st.booleans()):
        sizes.append(inner * draw(st.integers(1, 3)))  # beyond the extent: room to grow
    return n, sizes, inner


@st.composite
def _selection(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["basic", "oindex", "vindex"]))
    if kind == "basic" or 0 in shape:
        sel: list[Any] = []
        for n in shape:
            if n and draw(st.booleans()):
                sel.append(draw(st.integers(-n, n - 1)))
            else:
                start = draw(st.integers(0, n))
                stop = draw(st.integers(start, n))
                sel.append(slice(start, stop, draw(st.integers(1, 3))))
        return "basic", tuple(sel)
    if kind == "oindex":
        return kind, tuple(
            np.array(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True)))
            for n in shape
        )
    k = draw(st.integers(1, 5))
    points = draw(
        st.lists(st.tuples(*(st.integers(0, n - 1) for n in shape)), min_size=k, max_size=k, unique=True)
    )
    return kind, tuple(np.array([p[i] for p in points]) for i in range(len(shape)))


def _read(a: gpuzarr.Array, kind: str, sel: Any) -> np.ndarray[Any, Any]:
    if kind == "oindex":
        return np.asarray(a.oindex[sel])
    if kind == "vindex":
        return np.asarray(a.vindex[sel])
    return np.asarray(a[sel])


def _model_sel(kind: str, sel: Any) -> Any:
    return np.ix_(*sel) if kind == "oindex" else sel


@st.composite
def _case(draw: st.DrawFn) -> tuple[Any, ...]:
    sharded = draw(st.booleans())
    axes = draw(st.lists(_axis(sharded), min_size=1, max_size=3))
    if not any(isinstance(sizes, list) for _, sizes, _ in axes):
        n, _, inner = axes[0]
        axes[0] = (n, [inner] * max(1, -(-n // inner)), inner)
    shape = tuple(n for n, _, _ in axes)
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        kind, sel = draw(_selection(shape))
        ops.append((kind, sel, draw(st.integers(0, 2**31))))
    reads = [draw(_selection(shape)) for _ in range(3)]
    return sharded, axes, ops, reads


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), fill=st.sampled_from([0, -3]))
def test_random_grids_selections_and_writes_match_numpy(case: tuple[Any, ...], fill: int) -> None:
    sharded, axes, ops, reads = case
    shape = tuple(n for n, _, _ in axes)
    grid = [sizes for _, sizes, _ in axes]
    store = gpuzarr.MemoryStore()
    if sharded:
        inner = tuple(c for _, _, c in axes)
        a = gpuzarr.create(store, shape=shape, dtype="int16", shards=grid, chunks=inner,
                           fill_value=fill, device="cpu")  # fmt: skip
    else:
        a = gpuzarr.create(store, shape=shape, dtype="int16", chunks=grid, fill_value=fill, device="cpu")
    model = np.full(shape, fill, dtype="int16")
    for kind, sel, seed in ops:
        target = model[_model_sel(kind, sel)]
        value = np.random.default_rng(seed).integers(-5, 6, size=target.shape).astype("int16")
        if kind == "oindex":
            a.oindex[sel] = value
        elif kind == "vindex":
            a.vindex[sel] = value
        else:
            a[sel] = value
        model[_model_sel(kind, sel)] = value
        np.testing.assert_array_equal(np.asarray(a[...]), model)
    reopened = gpuzarr.open(store, mode="r", device="cpu")
    assert isinstance(reopened, gpuzarr.Array)
    for kind, sel in reads:
        np.testing.assert_array_equal(_read(reopened, kind, sel), model[_model_sel(kind, sel)])
    # Exactly the chunks (shards) that hold something other than the fill value are stored.
    dims = reopened.layout.metadata.chunk_grid.dimensions(shape)
    expected_keys = set()
    for coords in np.ndindex(*(d.nchunks for d in dims)):
        box = tuple(
            slice(d.chunk_start(c), d.chunk_start(c) + d.chunk_extent(c)) for d, c in zip(dims, coords)
        )
        if (model[box] != fill).any():
            expected_keys.add("/".join(["c", *map(str, coords)]))
    assert chunk_keys(store) == expected_keys


# -- interop --------------------------------------------------------------------------------------


def test_zarr_python_reads_rectilinear(tmp_path: Any) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "rect.zarr"
    a = gpuzarr.create(
        str(path), shape=(100, 30), dtype="int32", chunks=ZEP3_CHUNKS, fill_value=0, device="cpu"
    )
    x = np.arange(3000, dtype="int32").reshape(100, 30)
    a[...] = x
    try:
        z = zarr.open_array(str(path), mode="r")
    except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
        pytest.skip(f"zarr {zarr.__version__} has no rectilinear chunk grid ({type(exc).__name__}: {exc})")
    np.testing.assert_array_equal(np.asarray(z[...]), x)
    np.testing.assert_array_equal(np.asarray(z[13:71, 4:29]), x[13:71, 4:29])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 13), st.integers(0, 2**31)), min_size=1, max_size=4
    ),
    sharded=st.booleans(),
)
def test_random_resizes_within_the_grid_match_numpy(steps: list[tuple[int, int, int]], sharded: bool) -> None:
    store = gpuzarr.MemoryStore()
    if sharded:
        a = gpuzarr.create(store, shape=(30, 13), dtype="int16", shards=[[4, 2, 8, 16], 6], chunks=(2, 3),
                           fill_value=-1, device="cpu")  # fmt: skip
    else:
        a = gpuzarr.create(store, shape=(30, 13), dtype="int16", chunks=[[1, 4, 7, 18], 4], fill_value=-1,
                           device="cpu")  # fmt: skip
    check_random_resizes(a, store, steps, -1, check_after_write=False, device="cpu")


def test_rectilinear_chunks_are_v3_only(store: gpuzarr.Store) -> None:
    with pytest.raises(MetadataError, match="chunks"):
        gpuzarr.create(store, shape=(10, 4), dtype="int32", chunks=[[5, 5], 4], zarr_format=2)


def test_tuple_forms_and_single_chunk(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(
        store, shape=(100, 7), dtype="uint8", chunks=((50, 50), (7,)), fill_value=0, device="cpu"
    )
    assert a.chunks == ((50, 50), (7,))
    a[...] = 1
    assert chunk_keys(store) == {"c/0/0", "c/1/0"}
    b = gpuzarr.create(store, path="one", shape=(9,), dtype="uint8", chunks=[[9]], device="cpu")
    b[...] = np.arange(9)
    np.testing.assert_array_equal(b[...], np.arange(9))
    assert set(store.list_prefix("one/c/")) == {"one/c/0"}


def test_chunks_add_up_to_the_extent_after_a_shrink(store: gpuzarr.Store) -> None:
    # Dask's from_array takes Array.chunks as its previous chunks, which must add up to the shape.
    a = gpuzarr.create(store, shape=(37, 29), dtype="int16", chunks=[[5, 12, 20], 10], fill_value=0, device="cpu")
    assert a.chunks == ((5, 12, 20), 10)
    a.resize(30, 29)  # the listed sizes now reach 7 past the edge
    assert a.metadata.chunk_grid.chunk_shapes == ((5, 12, 20), 10)
    assert a.chunks == ((5, 12, 13), 10)
    a.resize(5, 29)
    assert a.chunks == ((5,), 10)
    a.resize(0, 29)
    assert a.chunks == ((0,), 10)


@pytest.mark.parametrize("count", [2**40, 2**70, 2**23])
def test_a_run_longer_than_the_budget_is_refused_before_it_is_expanded(store: gpuzarr.Store, count: int) -> None:
    """A few bytes of JSON must not ask for terabytes of chunk sizes: a run is checked against
    config max_rectilinear_chunks before it is expanded."""
    put_document(store, v3_document([4], [[[1, count]]]))
    refused = r"chunk_shapes\[0\]\[0\]: lists \d+ chunks or more, past config max_rectilinear_chunks"
    with pytest.raises(MetadataError, match=refused):
        gpuzarr.open(store, mode="r", device="cpu")


def test_chunks_a_shrink_left_past_the_extent_still_open(store: gpuzarr.Store) -> None:
    """More than 2**20 chunks past the extent were refused at open, so an ordinary shrink of an
    array of many chunks wrote metadata that could not be opened again (the spec allows them:
    "Overflowing L by multiple chunks is permitted")."""
    a = gpuzarr.create(store, shape=(2**20 + 10,), dtype="int16", chunks=[[[1, 2**20 + 10]]], fill_value=-1,
                       device="cpu")  # fmt: skip
    a[:4] = [1, 2, 3, 4]
    a.resize(4)
    a = gpuzarr.open(store, mode="r+", device="cpu")
    a.resize(10)
    np.testing.assert_array_equal(a[...], [1, 2, 3, 4, -1, -1, -1, -1, -1, -1])  # the fill value


def test_sizes_adding_up_past_int64_are_refused(store: gpuzarr.Store) -> None:
    """The grid's boundaries wrapped around: 65 chunks for one, and a bare IndexError on reads."""
    put_document(store, v3_document([10], [[[2**58, 64]]]))
    with pytest.raises(MetadataError, match=r"chunk_shapes\[0\]: chunk sizes add up to 18446744073709551616"):
        gpuzarr.open(store, mode="r", device="cpu")


def test_an_empty_list_suits_an_axis_of_extent_zero_only(store: gpuzarr.Store) -> None:
    put_document(store, v3_document([0, 3], [[], 3]))
    assert gpuzarr.open(store, mode="r", device="cpu")[...].shape == (0, 3)
    put_document(store, v3_document([1, 3], [[], 3]))
    with pytest.raises(MetadataError, match="needs at least one chunk size"):
        gpuzarr.open(store, mode="r", device="cpu")
    # Under sharding too: the empty axis's shard was taken to be 1, which no inner chunk divides.
    sharded = v3_document([0, 4], [[], [4]])
    sharded["codecs"] = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2], "codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}}]}}]  # fmt: skip
    put_document(store, sharded)
    assert gpuzarr.open(store, mode="r", device="cpu")[...].shape == (0, 4)


@pytest.mark.parametrize("where", ["one-run", "two-axes"])
def test_an_extent_as_large_as_a_run_does_not_let_it_expand(store: gpuzarr.Store, where: str) -> None:
    """The extent comes from the same document: a 330-byte zarr.json of shape [10**8] and one
    [1, 10**8] run took 1.5 GB; the sizes listed are bounded by config max_rectilinear_chunks."""
    n = 10**8
    shape, grid = ([n], [[[1, n]]]) if where == "one-run" else ([3000, 3000], [[[1, 3000]], [[1, 3000]]])
    put_document(store, v3_document(shape, grid))
    refused = r"chunk_shapes\[\d\]\[0\]: lists \d+ chunks or more, past config max_rectilinear_chunks"
    limit = 5000 if where == "two-axes" else 2**22
    with gpuzarr.config.set(max_rectilinear_chunks=limit), pytest.raises(MetadataError, match=refused):
        gpuzarr.open(store, mode="r", device="cpu")
    if where == "two-axes":  # both axes fit together under a larger setting
        with gpuzarr.config.set(max_rectilinear_chunks=6000):
            assert gpuzarr.open(store, mode="r", device="cpu").shape == (3000, 3000)


def test_append_past_the_listed_sizes_adds_a_chunk(tmp_path: Any) -> None:
    """Sharded: the new shard is a whole number of inner chunks; a shrink's leftover sizes are
    used before another is added."""
    a = gpuzarr.create(str(tmp_path / "a.zarr"), shape=(10, 4), dtype="i4", shards=[[4, 6], 4], chunks=(2, 2),
                       fill_value=-1)  # fmt: skip
    model = np.arange(40, dtype="i4").reshape(10, 4)
    a[...] = model
    a.append(np.full((5, 4), 2, "i4"))
    model = np.concatenate([model, np.full((5, 4), 2, "i4")])
    assert a.shards == ((4, 6, 6), 4)  # whole shards, as create takes them back
    assert a.metadata.chunk_grid.chunk_shapes[0] == (4, 6, 6)
    np.testing.assert_array_equal(a[...], model)
    a.resize(12, 4)
    a.resize(16, 4)  # within the sizes listed: no chunk added
    assert a.metadata.chunk_grid.chunk_shapes[0] == (4, 6, 6)
    expected = np.full((16, 4), -1, "i4")
    expected[:12] = model[:12]
    np.testing.assert_array_equal(gpuzarr.open(str(tmp_path / "a.zarr"), mode="r")[...], expected)


def test_shards_of_a_rectilinear_grid_give_their_sizes(tmp_path: Any) -> None:
    """``Array.shards`` gave the largest shard: ``create(..., shards=a.shards)`` then made a
    regular grid. It gives the sizes per axis, as ``chunks`` does unsharded."""
    a = gpuzarr.create(str(tmp_path / "a.zarr"), shape=(12, 9), dtype="i4", shards=[[4, 8], 6], chunks=(2, 3))
    assert a.shards == ((4, 8), 6)
    copy = gpuzarr.create(str(tmp_path / "b.zarr"), shape=a.shape, dtype=a.dtype, chunks=a.chunks, shards=a.shards)
    assert copy.metadata.chunk_grid == a.metadata.chunk_grid
    a.resize(10, 9)
    # Whole shards: cut at the edge ((4, 6)), the sizes were no multiples of the inner chunk
    # and create(..., shards=a.shards) refused them.
    assert a.shards == ((4, 8), 6)
    again = gpuzarr.create(str(tmp_path / "d.zarr"), shape=a.shape, dtype=a.dtype, chunks=a.chunks, shards=a.shards)
    assert again.metadata.chunk_grid == a.metadata.chunk_grid
    regular = gpuzarr.create(str(tmp_path / "c.zarr"), shape=(12, 9), dtype="i4", shards=(4, 9), chunks=(2, 3))
    assert regular.shards == (4, 9)
