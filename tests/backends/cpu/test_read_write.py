"""The read/write engine through the Array facade: writes of every kind, read-modify-write,
fill-valued chunks and shards, resize, reads into caller buffers, batches and bounds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuzarr
from gpuzarr.errors import ChunkNotFoundError
from gpuzarr.store.sharding import EMPTY
from tests.backends.cpu.resize_model import check_random_resizes

if TYPE_CHECKING:
    from pathlib import Path

ZSTD = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": 1}},
]


def make(store: Any, sharded: bool, shape: tuple[int, ...] = (10, 9), **kwargs: Any) -> gpuzarr.Array:
    kwargs.setdefault("dtype", "int32")
    kwargs.setdefault("codecs", ZSTD)
    if sharded:
        return gpuzarr.create(store, shape=shape, chunks=(2, 3), shards=(4, 6), **kwargs)
    return gpuzarr.create(store, shape=shape, chunks=(4, 3), **kwargs)


def chunk_keys(store: gpuzarr.Store) -> set[str]:
    return {k for k in store.list_prefix("") if not k.endswith("zarr.json")}


def shard_index(a: gpuzarr.Array, key: str) -> Any:
    layout = a.layout.sharding.layout  # type: ignore[union-attr]
    return layout.index_from_shard(a.store.get(key), key)


@pytest.fixture(params=[False, True], ids=["chunked", "sharded"])
def sharded(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


# -- writes ------------------------------------------------------------------------------------------


def test_full_write_then_read(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded)
    x = np.arange(90, dtype="int32").reshape(10, 9)
    a[...] = x
    np.testing.assert_array_equal(a[...], x)
    np.testing.assert_array_equal(gpuzarr.open(store, mode="r")[...], x)


def test_shards_replaced_whole_are_written_a_batch_at_a_time(
    store: gpuzarr.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuzarr.backends.cpu import write as write_engine

    # Shards of (4, 6) int32 hold 96 bytes decoded: a budget of two shards' bytes.
    monkeypatch.setattr(write_engine, "WRITE_BATCH_BYTES", 2 * 96)
    batches: list[list[tuple[int, ...]]] = []
    write_shards = write_engine._write_shards

    def spy(layout: Any, store: Any, items: Any, value: Any, *, read_old: bool) -> set[str]:
        batches.append([shard for shard, _ in items])
        return write_shards(layout, store, items, value, read_old=read_old)

    monkeypatch.setattr(write_engine, "_write_shards", spy)
    a = make(store, sharded=True, shape=(16, 18))  # 4 x 3 shards, all whole
    x = np.arange(16 * 18, dtype="int32").reshape(16, 18) - 100
    a[...] = x
    assert [len(b) for b in batches] == [2] * 6
    assert sorted(s for b in batches for s in b) == [(i, j) for i in range(4) for j in range(3)]
    np.testing.assert_array_equal(gpuzarr.open(store, mode="r")[...], x)


def test_partial_writes_read_modify_write(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded)
    model = np.zeros((10, 9), dtype="int32")
    x = np.arange(90, dtype="int32").reshape(10, 9) + 1
    a[...] = x
    model[...] = x
    # Touches parts of several chunks (and parts of shards): the rest must survive.
    for sel, value in [
        ((slice(1, 3), slice(2, 7)), -1),
        ((5, slice(None)), np.arange(9)),
        ((slice(3, 10), 8), 77),
        ((slice(0, 1), slice(0, 1)), 5),
    ]:
        a[sel] = value
        model[sel] = value
        np.testing.assert_array_equal(a[...], model)


def test_partial_write_into_missing_chunks_uses_fill(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded, fill_value=-5)
    a[1:3, 4:5] = 9
    model = np.full((10, 9), -5, dtype="int32")
    model[1:3, 4:5] = 9
    np.testing.assert_array_equal(a[...], model)


@pytest.mark.parametrize(
    "sel",
    [
        (slice(None, None, 2), slice(1, None, 3)),
        (slice(None, None, -1), slice(None)),
        (slice(8, 1, -3), slice(None, None, -2)),
        (slice(-1, -11, -4), 3),
        (-1, slice(None, None, -1)),
    ],
)
def test_strided_and_negative_step_writes(store: gpuzarr.Store, sharded: bool, sel: Any) -> None:
    a = make(store, sharded)
    model = np.zeros((10, 9), dtype="int32")
    value = np.arange(model[sel].size, dtype="int32").reshape(model[sel].shape) + 1
    a[sel] = value
    model[sel] = value
    np.testing.assert_array_equal(a[...], model)
    np.testing.assert_array_equal(a[sel], model[sel])


def test_oindex_and_vindex_writes(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded)
    model = np.zeros((10, 9), dtype="int32")
    rows, cols = [0, 4, 9], np.array([True, False] * 4 + [True])
    value = np.arange(3 * 5, dtype="int32").reshape(3, 5) + 100
    a.oindex[rows, cols] = value
    model[np.ix_(rows, np.flatnonzero(cols))] = value
    np.testing.assert_array_equal(a[...], model)
    np.testing.assert_array_equal(a.oindex[rows, cols], value)
    pts = (np.array([0, 3, 9, 9]), np.array([8, 0, 4, 8]))
    a.vindex[pts] = np.array([-1, -2, -3, -4])
    model[pts] = [-1, -2, -3, -4]
    np.testing.assert_array_equal(a[...], model)
    np.testing.assert_array_equal(a.vindex[pts], model[pts])
    mask = model % 7 == 0
    a.vindex[mask] = 1234
    model[mask] = 1234
    np.testing.assert_array_equal(a[...], model)
    mask = model % 5 == 1
    a[mask] = -5  # a boolean mask through plain indexing
    model[mask] = -5
    np.testing.assert_array_equal(a[...], model)
    np.testing.assert_array_equal(a[mask], model[mask])


def test_scalar_broadcast_and_row_broadcast(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded)
    a[...] = 3
    np.testing.assert_array_equal(a[...], np.full((10, 9), 3))
    a[2:6] = np.arange(9)
    model = np.full((10, 9), 3)
    model[2:6] = np.arange(9)
    np.testing.assert_array_equal(a[...], model)
    with pytest.raises(ValueError, match="broadcast"):
        a[0:2, 0:2] = np.arange(3)


def test_values_from_lists_and_array_like_objects(store: gpuzarr.Store, sharded: bool) -> None:
    class ArrayLike:
        def __init__(self, data: np.ndarray[Any, Any]) -> None:
            self.data = data

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
            return self.data if dtype is None else self.data.astype(dtype)

    a = make(store, sharded, dtype="float64")
    a[0] = list(range(9))
    a[1:3] = ArrayLike(np.full((2, 9), 2.5))
    a[3:5, 0:2] = [[1, 2], [3, 4]]
    model = np.zeros((10, 9))
    model[0] = range(9)
    model[1:3] = 2.5
    model[3:5, 0:2] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(a[...], model)


def test_write_of_a_whole_array_reading_from_another(store: gpuzarr.Store) -> None:
    src = gpuzarr.create(gpuzarr.MemoryStore(), shape=(10, 9), dtype="int32", chunks=(3, 3))
    src[...] = np.arange(90).reshape(10, 9)
    a = make(store, False)
    a[...] = src  # an Array has __array__
    np.testing.assert_array_equal(a[...], src[...])


# -- fill-valued chunks and shards -------------------------------------------------------------------


def test_fill_valued_chunks_are_not_stored_and_are_erased() -> None:
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(store, shape=(8, 8), dtype="int16", chunks=(4, 4), fill_value=7)
    a[...] = 7
    assert chunk_keys(store) == set()
    a[0, 0] = 1
    a[5, 5] = 2
    assert chunk_keys(store) == {"c/0/0", "c/1/1"}
    a[0, 0] = 7  # the chunk is all fill again: erased
    assert chunk_keys(store) == {"c/1/1"}
    a[4:8, 4:8] = np.full((4, 4), 7)  # a complete overwrite with fill erases too
    assert chunk_keys(store) == set()
    np.testing.assert_array_equal(a[...], np.full((8, 8), 7))


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_nan_fill_compares_nan_equal(dtype: str) -> None:
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(
        store,
        shape=(4, 4),
        dtype=dtype,
        chunks=(2, 2),
        fill_value="NaN" if dtype == "float32" else ["NaN", 0.0],
    )
    a[0:2, 0:2] = 1
    assert chunk_keys(store) == {"c/0/0"}
    a[0:2, 0:2] = np.nan if dtype == "float32" else complex(np.nan, 0)
    assert chunk_keys(store) == set()
    a[...] = np.full((4, 4), np.nan)  # complex: NaN+0j, which is the fill value too
    assert chunk_keys(store) == set()
    if dtype == "complex64":
        a[...] = np.full((4, 4), complex(np.nan, 1.0))  # only the real part matches
        assert chunk_keys(store) == {"c/0/0", "c/0/1", "c/1/0", "c/1/1"}


def test_fill_valued_shards_and_inner_chunks() -> None:
    store = gpuzarr.MemoryStore()
    a = gpuzarr.create(store, shape=(8, 8), dtype="uint8", chunks=(2, 2), shards=(4, 4), codecs=ZSTD)
    a[0:2, 0:2] = 1
    a[2:4, 2:4] = 2
    a[4, 4] = 3
    assert chunk_keys(store) == {"c/0/0", "c/1/1"}
    index = shard_index(a, "c/0/0")
    assert [index.is_empty(i) for i in range(4)] == [False, True, True, False]
    a[2:4, 2:4] = 0  # one inner chunk back to fill: dropped from the shard
    index = shard_index(a, "c/0/0")
    assert [index.is_empty(i) for i in range(4)] == [False, True, True, True]
    a[0:2, 0] = 0
    a[0:2, 1] = 0  # partial writes that leave the last inner chunk all fill: shard erased
    assert chunk_keys(store) == {"c/1/1"}
    a[4:8, 4:8] = np.zeros((4, 4), "uint8")
    assert chunk_keys(store) == set()
    assert not a[...].any()
    assert np.uint64(2**64 - 1) == EMPTY


# -- resize ------------------------------------------------------------------------------------------


def test_resize_grow_reads_fill(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded, fill_value=-1)
    a[...] = np.arange(90).reshape(10, 9)
    a.resize((13, 20))
    assert a.shape == (13, 20)
    model = np.full((13, 20), -1)
    model[:10, :9] = np.arange(90).reshape(10, 9)
    np.testing.assert_array_equal(a[...], model)
    assert gpuzarr.open(store).shape == (13, 20)


@pytest.mark.parametrize("new_shape", [(4, 6), (5, 7), (1, 1), (0, 9), (10, 2)])
def test_resize_shrink_then_grow_never_resurrects_data(
    store: gpuzarr.Store, sharded: bool, new_shape: tuple[int, int]
) -> None:
    a = make(store, sharded, fill_value=-1)
    x = np.arange(90).reshape(10, 9)
    a[...] = x
    a.resize(new_shape)
    assert a.shape == new_shape
    np.testing.assert_array_equal(a[...], x[: new_shape[0], : new_shape[1]])
    grid = a.shards or a.chunks
    for key in chunk_keys(store):
        coords = [int(c) for c in key.split("/")[1:]]
        assert all(c * g < n for c, g, n in zip(coords, grid, new_shape)), key
    a.resize(10, 9)
    model = np.full((10, 9), -1)
    model[: new_shape[0], : new_shape[1]] = x[: new_shape[0], : new_shape[1]]
    np.testing.assert_array_equal(a[...], model)
    np.testing.assert_array_equal(gpuzarr.open(store, mode="r")[...], model)


def test_resize_rejects_bad_shapes(store: gpuzarr.Store) -> None:
    a = make(store, False)
    with pytest.raises(ValueError):
        a.resize((3,))
    with pytest.raises(ValueError):
        a.resize((-1, 3))


# -- reads ---------------------------------------------------------------------------------------------


def test_read_into_caller_buffer(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded)
    x = np.arange(90, dtype="int32").reshape(10, 9)
    a[...] = x
    buf = np.full((3, 4), -99, dtype="int32")
    result = a.read((slice(2, 8, 2), slice(1, 5)), out=buf)
    assert result is buf
    np.testing.assert_array_equal(buf, x[2:8:2, 1:5])
    full = np.empty((10, 9), dtype="int32")
    a.read(out=full)
    np.testing.assert_array_equal(full, x)
    view = np.zeros((10, 18), dtype="int32")[:, ::2]  # a strided caller buffer
    a.read(..., out=view)
    np.testing.assert_array_equal(view, x)
    with pytest.raises(ValueError):
        a.read((slice(0, 3), slice(0, 3)), out=np.empty((3, 4), dtype="int32"))
    with pytest.raises(ValueError):
        a.read((slice(0, 3), slice(0, 3)), out=np.empty((3, 3), dtype="int64"))


def test_read_batch(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded)
    x = np.arange(90, dtype="int32").reshape(10, 9)
    a[...] = x
    sels = [(slice(0, 3), slice(0, 4)), (slice(7, 10), slice(5, 9)), (slice(2, 5), slice(3, 7))]
    batch = a.read_batch(sels)
    assert batch.shape == (3, 3, 4)
    for i, sel in enumerate(sels):
        np.testing.assert_array_equal(batch[i], x[sel])
    out = np.empty((3, 3, 4), dtype="int32")
    assert a.read_batch(sels, out=out) is out
    np.testing.assert_array_equal(out, batch)
    with pytest.raises(ValueError):
        a.read_batch([(slice(0, 3), slice(0, 4)), (slice(0, 2), slice(0, 4))])
    with pytest.raises(ValueError):
        a.read_batch([])


@pytest.mark.parametrize(
    "sel",
    [(10, 0), (0, -10), (slice(None), 9), ([0, 10], slice(None))],
)
def test_out_of_range_selections_raise_index_error(store: gpuzarr.Store, sel: Any) -> None:
    a = make(store, False)
    with pytest.raises(IndexError):
        a[sel]
    with pytest.raises(IndexError):
        a[sel] = 1
    with pytest.raises(IndexError):
        a.vindex[np.array([0, 10]), np.array([0, 0])]
    with pytest.raises(IndexError):
        a.oindex[[11], :]


def test_missing_chunks_read_as_fill(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, sharded, dtype="float32", fill_value="NaN")
    assert np.isnan(a[...]).all()
    a[9, 8] = 1.0
    result = a[...]
    assert result[9, 8] == 1 and np.isnan(result).sum() == 89


def test_zero_d_array(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(), dtype="float64", fill_value=1.5)
    assert a[()] == 1.5
    a[()] = 3.0
    assert a[()] == 3.0
    buf = np.full((), -7.0)  # poisoned: the decoded value must land in the caller's buffer
    assert a.read(..., out=buf) is buf and buf[()] == 3.0
    assert a[...].shape == ()
    a[...] = 1.5
    assert chunk_keys(store) == set()


# -- property test -------------------------------------------------------------------------------------


def _slices(n: int) -> st.SearchStrategy[slice]:
    return st.builds(
        slice,
        st.none() | st.integers(-n - 2, n + 2),
        st.none() | st.integers(-n - 2, n + 2),
        st.none() | st.integers(1, 4) | st.integers(-4, -1),
    )


SHAPE = (11, 7)


@st.composite
def _operations(draw: Any) -> list[tuple[str, Any, Any]]:
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["basic", "int", "oindex", "vindex"]))
        if kind == "basic":
            sel = (draw(_slices(SHAPE[0])), draw(_slices(SHAPE[1])))
        elif kind == "int":
            sel = (draw(st.integers(-SHAPE[0], SHAPE[0] - 1)), draw(_slices(SHAPE[1])))
        elif kind == "oindex":
            sel = (
                draw(st.lists(st.integers(0, SHAPE[0] - 1), min_size=1, max_size=4, unique=True)),
                draw(_slices(SHAPE[1])),
            )
        else:
            n = draw(st.integers(1, 6))
            pts = draw(
                st.lists(
                    st.tuples(st.integers(0, SHAPE[0] - 1), st.integers(0, SHAPE[1] - 1)),
                    min_size=n,
                    max_size=n,
                    unique=True,
                )
            )
            sel = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
        scalar = draw(st.booleans())
        ops.append((kind, sel, draw(st.integers(-3, 3)) if scalar else draw(st.integers(0, 2**31))))
    return ops


def _apply_model(model: np.ndarray[Any, Any], kind: str, sel: Any, value: Any) -> None:
    if kind == "oindex":
        rows = np.asarray(sel[0])
        cols = np.arange(model.shape[1])[sel[1]]
        model[np.ix_(rows, cols)] = value
    else:
        model[sel] = value


def _target_shape(model: np.ndarray[Any, Any], kind: str, sel: Any) -> tuple[int, ...]:
    if kind == "oindex":
        return (len(sel[0]), len(np.arange(model.shape[1])[sel[1]]))
    return np.shape(model[sel])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_operations(), sharded=st.booleans(), fill=st.sampled_from([0, -2]))
def test_random_writes_and_reads_match_numpy(
    ops: list[tuple[str, Any, Any]], sharded: bool, fill: int
) -> None:
    store = gpuzarr.MemoryStore()
    if sharded:
        a = gpuzarr.create(
            store, shape=SHAPE, dtype="int16", chunks=(2, 3), shards=(4, 6), fill_value=fill, codecs=ZSTD
        )
    else:
        a = gpuzarr.create(store, shape=SHAPE, dtype="int16", chunks=(3, 2), fill_value=fill)
    model = np.full(SHAPE, fill, dtype="int16")
    for kind, sel, seed in ops:
        shape = _target_shape(model, kind, sel)
        if -3 <= seed <= 3:
            value: Any = np.int16(seed)
        else:
            value = np.random.default_rng(seed).integers(-4, 5, size=shape).astype("int16")
        _apply_model(model, kind, sel, value)
        if kind == "oindex":
            a.oindex[sel] = value
        elif kind == "vindex":
            a.vindex[sel] = value
        else:
            a[sel] = value
        np.testing.assert_array_equal(a[...], model)
        if kind == "oindex":
            np.testing.assert_array_equal(
                a.oindex[sel], model[np.ix_(np.asarray(sel[0]), np.arange(SHAPE[1])[sel[1]])]
            )
        else:
            np.testing.assert_array_equal(a.vindex[sel] if kind == "vindex" else a[sel], model[sel])
    # No stored chunk is entirely fill.
    reopened = gpuzarr.open(store, mode="r")
    np.testing.assert_array_equal(reopened[...], model)
    grid = reopened.shards or reopened.chunks
    for key in chunk_keys(store):
        i, j = (int(c) for c in key.split("/")[1:])
        block = model[i * grid[0] : (i + 1) * grid[0], j * grid[1] : (j + 1) * grid[1]]
        assert (block != fill).any(), key


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 13), st.integers(0, 10), st.integers(0, 2**31)), min_size=1, max_size=5
    ),
    sharded=st.booleans(),
)
def test_random_resizes_and_writes_match_numpy(steps: list[tuple[int, int, int]], sharded: bool) -> None:
    store = gpuzarr.MemoryStore()
    a = make(store, sharded, shape=SHAPE, dtype="int16", fill_value=-1)
    check_random_resizes(a, store, steps, -1)


class _ErasesCounted(gpuzarr.MemoryStore):
    """A memory store counting its erases, listing or not."""

    def __init__(self, lists: bool) -> None:
        super().__init__()
        self.supports_listing = lists
        self.erased: list[str] = []

    def erase(self, key: str) -> None:
        self.erased.append(key)
        super().erase(key)


@pytest.mark.parametrize("lists", [True, False])
def test_a_shrink_erases_what_is_stored_outside_the_new_shape(lists: bool) -> None:
    store = _ErasesCounted(lists)
    a = gpuzarr.create(store, shape=(10, 9), chunks=(4, 3), dtype="int32", fill_value=-1)
    a[...] = np.arange(90).reshape(10, 9)
    a.resize(5, 4)
    assert a[...].tolist() == np.arange(90).reshape(10, 9)[:5, :4].tolist()
    assert sorted(k for k in store.data if k.startswith("c/")) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    a.resize(10, 9)
    assert int((a[...] == -1).sum()) == 90 - 20


def test_a_shrink_of_a_huge_sparse_grid_visits_only_what_is_stored() -> None:
    store = _ErasesCounted(lists=True)
    a = gpuzarr.create(store, shape=(10**7,), chunks=(1,), dtype="int8")
    a[[3, 5 * 10**6]] = 1
    a.resize(4)  # 10**7 grid positions, two stored: one erase
    assert store.erased == ["c/5000000"]
    assert a[...].tolist() == [0, 0, 0, 1]


@pytest.mark.parametrize(
    "selection",
    [np.s_[...], np.s_[3:29, 1:30], np.s_[::3, 5], np.s_[[0, 17, 31], 2:9], np.s_[31:0:-2, ::-1]],
)
def test_reads_over_shards_never_written_give_the_fill_value(tmp_path: Path, selection: Any) -> None:
    """A shard that is not there fills its part of the output at once where that part is a box
    (it was filled inner chunk by inner chunk); steps and index arrays still fill exactly."""
    path = str(tmp_path / "a.zarr")
    array = gpuzarr.create(path, shape=(32, 32), dtype="i2", chunks=(4, 4), shards=(16, 16), fill_value=-5)
    array[0:16, 16:32] = np.arange(256, dtype="i2").reshape(16, 16)  # one shard of four
    model = np.full((32, 32), -5, dtype="i2")
    model[0:16, 16:32] = np.arange(256, dtype="i2").reshape(16, 16)
    np.testing.assert_array_equal(gpuzarr.open(path, mode="r", device="cpu")[selection], model[selection])
    strict = gpuzarr.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path + "/"},
                           "fill_missing_data_reads": False})  # fmt: skip
    with pytest.raises(ChunkNotFoundError, match="c/1/0"):
        strict[20:24, 0:4]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_booleans_are_stored_as_the_bytes_0_and_1(zarr_format: int) -> None:
    """A NumPy bool array viewed from other bytes holds them as they are; Zarr stores true as 1
    (TensorStore refuses a chunk holding another byte)."""
    store = gpuzarr.MemoryStore()
    codecs = {"compressor": None} if zarr_format == 2 else {"codecs": [{"name": "bytes"}]}
    a = gpuzarr.create(store, shape=(8,), chunks=(4,), dtype=bool, zarr_format=zarr_format, **codecs)
    raw = np.array([0, 2, 1, 255, 7, 0, 128, 1], dtype="u1")
    a[...] = raw.view(bool)
    a[5:7] = np.frombuffer(b"\x09\x00", dtype=bool)  # a partial write too
    expected = np.array([0, 1, 1, 1, 1, 1, 0, 1], dtype="u1")
    np.testing.assert_array_equal(a[...].view("u1"), expected)
    stored = b"".join(bytes(store.get(a.layout.key((i,)))) for i in range(2))
    assert stored == expected.tobytes()
    a[...] = np.bool_(True)  # canonical values are taken as they are
    np.testing.assert_array_equal(a[...].view("u1"), np.ones(8, "u1"))
