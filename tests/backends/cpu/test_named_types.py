"""The read/write engine on strings, bytes and times: object and StringDType output buffers,
read-modify-write, missing chunks, fill-valued chunks and shards left unstored, ``out=``,
batches, resize, and a NumPy model under random writes (chunked and sharded)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuzarr
from gpuzarr.errors import InvalidArgumentError

STRING = np.dtypes.StringDType()


def make(store: Any, dtype: Any, sharded: bool, **kwargs: Any) -> gpuzarr.Array:
    if sharded:
        return gpuzarr.create(store, shape=(10, 9), chunks=(2, 3), shards=(4, 6), dtype=dtype, **kwargs)
    return gpuzarr.create(store, shape=(10, 9), chunks=(4, 3), dtype=dtype, **kwargs)


def chunk_keys(store: gpuzarr.Store) -> set[str]:
    return {k for k in store.list_prefix("") if not k.endswith(("zarr.json", ".zarray", ".zattrs"))}


def objects(values: list[Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


@pytest.fixture(params=[False, True], ids=["chunked", "sharded"])
def sharded(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_strings_read_modify_write(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, "string", sharded, fill_value="·")
    model = np.full((10, 9), "·", dtype=STRING)
    block = np.array([[f"{i}-{j}" * (i % 3) for j in range(5)] for i in range(4)], dtype=STRING)
    a[1:5, 2:7] = block
    model[1:5, 2:7] = block
    a[3, :] = "ünï"  # a scalar, broadcast across chunks
    model[3, :] = "ünï"
    a.vindex[[0, 9], [0, 8]] = ["first", "last"]
    model[[0, 9], [0, 8]] = ["first", "last"]
    got = gpuzarr.open(store)[...]
    assert got.dtype == STRING
    np.testing.assert_array_equal(got, model)
    np.testing.assert_array_equal(a[8:, ::-2], model[8:, ::-2])
    np.testing.assert_array_equal(a.oindex[[9, 0, 3], [1, 8]], model[np.ix_([9, 0, 3], [1, 8])])
    assert a[3, 4] == "ünï" and a[6, 6] == "·"


def test_bytes_keep_every_byte_of_values_and_fill(store: gpuzarr.Store, sharded: bool) -> None:
    # NumPy's S type (and np.full) would drop the trailing NULs.
    a = make(store, "variable_length_bytes", sharded, fill_value=b"f\x00")
    a[2:4, 1:5] = objects([bytes([i]) * i + b"\x00" for i in range(8)], (2, 4))
    got = gpuzarr.open(store)[...]
    assert got.dtype == np.dtype(object)
    assert got[2, 1:5].tolist() == [b"\x00", b"\x01\x00", b"\x02\x02\x00", b"\x03\x03\x03\x00"]
    assert got[0, 0] == b"f\x00" and got[3, 5] == b"f\x00" and got[9, 8] == b"f\x00"
    assert {type(v) for v in got.ravel()} == {bytes}


@pytest.mark.parametrize(
    ("dtype", "fill", "value"),
    [
        ("string", "", "x"),
        ("variable_length_bytes", b"", b"x"),
        ("M8[s]", None, np.datetime64(5, "s")),
        ("S3", b"", b"ab"),
        ("U2", "", "é"),
    ],
)
def test_chunks_equal_to_the_fill_value_are_not_stored(
    store: gpuzarr.Store, sharded: bool, dtype: str, fill: Any, value: Any
) -> None:
    a = make(store, dtype, sharded, fill_value=fill)
    a[0, 0] = value
    assert len(chunk_keys(store)) == 1
    # Writing the fill value back erases the chunk (or shard); NaT counts as equal to NaT.
    a[0, 0] = a.metadata.fill_value
    assert chunk_keys(store) == set()
    assert a[0, 0] == a.metadata.fill_value or np.isnat(a[0, 0])


def test_times_read_modify_write(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, "M8[ms]", sharded)
    model = np.full((10, 9), np.datetime64("NaT", "ms"), dtype="M8[ms]")
    stamps = np.arange("2024-01-01", "2024-01-13", dtype="M8[D]").astype("M8[ms]").reshape(3, 4)
    a[5:8, 4:8] = stamps
    model[5:8, 4:8] = stamps
    a[6, 0:6] = "2000-01-01T00:00:00.001"
    model[6, 0:6] = np.datetime64("2000-01-01T00:00:00.001")
    np.testing.assert_array_equal(gpuzarr.open(store)[...], model)
    assert np.isnat(a[0, 0]) and a.dtype == np.dtype("M8[ms]")


def test_reads_into_out_and_batches(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, "string", sharded)
    model = np.array([[f"{i},{j}" for j in range(9)] for i in range(10)], dtype=STRING)
    a[...] = model
    out = np.empty((3, 4), dtype=STRING)
    assert a.read((slice(2, 5), slice(3, 7)), out=out) is out
    np.testing.assert_array_equal(out, model[2:5, 3:7])
    batch = a.read_batch([(slice(0, 2), slice(0, 3)), (slice(7, 9), slice(5, 8))])
    np.testing.assert_array_equal(batch, np.stack([model[0:2, 0:3], model[7:9, 5:8]]))
    with pytest.raises(InvalidArgumentError, match="dtype StringDType"):
        a.read((slice(0, 1), slice(0, 1)), out=np.empty((1, 1), dtype=object))


def test_resize_keeps_strings_and_clears_the_rest(store: gpuzarr.Store, sharded: bool) -> None:
    a = make(store, "string", sharded, fill_value="-")
    a[...] = np.array([[str(i * 9 + j) for j in range(9)] for i in range(10)], dtype=STRING)
    a.resize((5, 4))
    a.resize((10, 9))
    got = a[...]
    assert got[4, 3] == "39" and got[5, 0] == "-" and got[0, 4] == "-"


def test_writing_values_the_type_cannot_hold(store: gpuzarr.Store) -> None:
    a = gpuzarr.create(store, shape=(4,), chunks=(2,), dtype="variable_length_bytes")
    with pytest.raises(InvalidArgumentError, match="vlen-bytes: element 0 of the chunk is 'text', expected bytes"):
        a[0:2] = np.array(["text", b"x"], dtype=object)
    s = gpuzarr.create(store, shape=(4,), chunks=(2,), dtype="string", overwrite=True)
    s[...] = [1, 2.5, "x", None]  # StringDType turns values into their str, as NumPy does
    assert s[...].tolist() == ["1", "2.5", "x", "None"]


KINDS = ["string", "variable_length_bytes"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(KINDS),
    sharded=st.booleans(),
    writes=st.lists(
        st.tuples(st.integers(0, 10), st.integers(0, 10), st.integers(0, 9), st.integers(0, 9), st.integers(0, 99)),
        min_size=1,
        max_size=5,
    ),
)
def test_random_writes_match_numpy(kind: str, sharded: bool, writes: list[tuple[int, ...]]) -> None:
    store = gpuzarr.MemoryStore()
    fill: Any = "" if kind == "string" else b""
    a = make(store, kind, sharded, fill_value=fill)
    model = np.full((10, 9), fill, dtype=a.dtype) if kind == "string" else objects([fill] * 90, (10, 9))
    for r0, r1, c0, c1, seed in writes:
        rows, cols = slice(min(r0, r1), max(r0, r1)), slice(min(c0, c1), max(c0, c1))
        shape = model[rows, cols].shape
        n = int(np.prod(shape))
        words = [("" if (seed + i) % 4 == 0 else f"{seed}:{i}" * ((seed + i) % 3)) for i in range(n)]
        block = (np.array(words, dtype=STRING).reshape(shape) if kind == "string"
                 else objects([w.encode() for w in words], shape))  # fmt: skip
        a[rows, cols] = block
        model[rows, cols] = block
    got = gpuzarr.open(store)[...]
    assert got.ravel().tolist() == model.ravel().tolist()
