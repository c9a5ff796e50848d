"""``Array.read_async``, ``Array.write_async`` and ``gpuzarr.open_async``: the same results and
errors as the blocking calls, argument errors raised at the call, many in flight at once, and
awaited in asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr import config, futures
from gpuzarr.core.array import _own_copy
from gpuzarr.errors import (
    BoundsCheckError,
    CorruptChunkError,
    InvalidArgumentError,
    InvalidSelectionError,
    NodeNotFoundError,
    ReadOnlyError,
    UnwritableValueError,
)
from gpuzarr.futures import Future

if TYPE_CHECKING:
    from pathlib import Path

TIMEOUT = 60
SHAPE = (70, 90)


def _data() -> np.ndarray[Any, Any]:
    return np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE) % 1009


@pytest.fixture(params=["v3", "v3-sharded", "v2"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> gpuzarr.Array:
    kwargs: dict[str, Any] = {"zarr_format": 3, "chunks": (16, 16)}
    if request.param == "v3-sharded":
        kwargs["shards"] = (32, 48)
    elif request.param == "v2":
        kwargs = {"zarr_format": 2, "chunks": (16, 16), "compressor": {"id": "zlib", "level": 1}}
    array = gpuzarr.create(str(tmp_path / "a.zarr"), shape=SHAPE, dtype="<i4", fill_value=0, **kwargs)
    array[...] = _data()
    return array


SELECTIONS: list[Any] = [
    Ellipsis,
    (slice(3, 40), slice(10, 77)),
    (slice(None, None, -3), 5),
    (69, slice(None)),
    (np.array([4, 1, 60]), slice(2, 9)),
    (slice(5, 5), slice(None)),
]


def test_read_async_gives_what_read_gives(stored: gpuzarr.Array) -> None:
    truth = _data()
    started = [stored.read_async(sel) for sel in SELECTIONS]
    assert all(isinstance(f, Future) for f in started)
    for sel, future in zip(SELECTIONS, started, strict=True):
        got = future.result(TIMEOUT)
        np.testing.assert_array_equal(got, truth[sel])
        np.testing.assert_array_equal(got, stored.read(sel))


ORTHOGONAL: list[Any] = [
    (np.array([4, 1, 60, 1]), slice(2, 9)),
    (np.array([69, 0]), np.array([89, 3, 3])),
    (slice(None, None, -7), np.array([True] * 45 + [False] * 45)),
]
POINTS: list[Any] = [
    (np.array([4, 1, 60, 69]), np.array([0, 89, 7, 7])),
    (np.array([[0, 1], [2, 3]]), np.array([[5, 5], [6, 80]])),
]


def test_orthogonal_and_point_selections_read_async_as_they_read(stored: gpuzarr.Array) -> None:
    """``get_orthogonal_selection_async`` and ``get_coordinate_selection_async``: what
    ``oindex`` and ``vindex`` read, through the same futures as ``read_async``."""
    outer = [stored.get_orthogonal_selection_async(sel) for sel in ORTHOGONAL]
    points = [stored.get_coordinate_selection_async(sel) for sel in POINTS]
    assert all(isinstance(f, Future) for f in outer + points)
    for sel, future in zip(ORTHOGONAL, outer, strict=True):
        np.testing.assert_array_equal(future.result(TIMEOUT), stored.oindex[sel])
    for sel, future in zip(POINTS, points, strict=True):
        np.testing.assert_array_equal(future.result(TIMEOUT), stored.vindex[sel])
        np.testing.assert_array_equal(future.result(TIMEOUT), _data()[sel])
    with pytest.raises(BoundsCheckError):  # checked at the call
        stored.get_orthogonal_selection_async((np.array([70]), slice(None)))
    with pytest.raises(BoundsCheckError):
        stored.get_coordinate_selection_async((np.array([0]), np.array([90])))


def test_many_reads_in_flight_at_once(stored: gpuzarr.Array) -> None:
    truth = _data()
    rng = np.random.default_rng(5)
    boxes = []
    for _ in range(64):
        y, x = int(rng.integers(0, 60)), int(rng.integers(0, 80))
        boxes.append((slice(y, y + 10), slice(x, x + 10)))
    with config.set(async_concurrency=4, concurrency=2):
        started = [stored.read_async(box) for box in boxes]
        done, _ = concurrent.futures.wait(started, timeout=TIMEOUT)
    assert len(done) == len(started)
    for box, future in zip(boxes, started, strict=True):
        np.testing.assert_array_equal(future.result(), truth[box])


def test_read_async_into_out(stored: gpuzarr.Array) -> None:
    out = np.full((20, 30), -1, dtype="<i4")
    assert stored.read_async((slice(10, 30), slice(50, 80)), out=out).result(TIMEOUT) is out
    np.testing.assert_array_equal(out, _data()[10:30, 50:80])


def test_selection_errors_raise_at_the_call(stored: gpuzarr.Array) -> None:
    with pytest.raises(BoundsCheckError):
        stored.read_async((70, 0))
    with pytest.raises(IndexError):
        stored.read_async((0, 0, 0))
    with pytest.raises(BoundsCheckError):
        stored.write_async((slice(None), 95), 1)


def test_a_corrupt_chunk_is_raised_by_result_naming_its_key(tmp_path: Path) -> None:
    array = gpuzarr.create(
        str(tmp_path / "c.zarr"), shape=(8, 8), chunks=(4, 4), dtype="<u2", codecs=[{"name": "bytes"}, {"name": "zstd"}]
    )
    array[...] = 3
    (tmp_path / "c.zarr" / "c" / "1" / "0").write_bytes(b"\x28\xb5\x2f\xfd not a frame")
    future = array.read_async(Ellipsis)
    with pytest.raises(CorruptChunkError, match="c/1/0"):
        future.result(TIMEOUT)
    # The rest of the array still reads.
    np.testing.assert_array_equal(array.read_async((slice(0, 4), slice(None))).result(TIMEOUT), 3)


def test_write_async_writes_what_write_writes(stored: gpuzarr.Array) -> None:
    model = _data()
    rng = np.random.default_rng(9)
    writes = []
    # Disjoint rows: the writes may run in any order and still give the model.
    for row in range(0, 70, 7):
        value = rng.integers(-5000, 5000, size=(7, 90)).astype("<i4")
        model[row : row + 7] = value
        writes.append(stored.write_async((slice(row, row + 7), slice(None)), value))
    generation = stored.data_generation
    assert all(f.result(TIMEOUT) is None for f in writes)
    np.testing.assert_array_equal(stored[...], model)
    assert stored.data_generation > generation  # the loader's caches see writes made this way


def test_write_async_broadcasts_and_converts_at_the_call(stored: gpuzarr.Array) -> None:
    stored.write_async((slice(0, 2), slice(None)), 7).result(TIMEOUT)
    value = np.arange(90, dtype="<i8")  # another type: converted, so changing it later is safe
    future = stored.write_async((slice(2, 4), slice(None)), value)
    value[:] = -1
    future.result(TIMEOUT)
    expected = _data()
    expected[0:2] = 7
    expected[2:4] = np.arange(90)
    np.testing.assert_array_equal(stored[...], expected)


def test_write_async_checks_value_and_store_at_the_call(stored: gpuzarr.Array, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="broadcast"):
        stored.write_async((slice(0, 2), slice(None)), np.zeros((3, 90)))
    with pytest.raises(UnwritableValueError):
        stored.write_async((0, 0), "not a number")
    read_only = gpuzarr.open_array(stored.store.with_options(read_only=True), path=stored.path, mode="r")
    with pytest.raises(ReadOnlyError):
        read_only.write_async((0, 0), 1)
    np.testing.assert_array_equal(stored[...], _data())


def test_awaited_in_asyncio(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")

    async def main() -> np.ndarray[Any, Any]:
        group = await gpuzarr.open_async(path, mode="w")
        assert isinstance(group, gpuzarr.Group)
        array = group.create_array("x", shape=(30, 30), chunks=(8, 8), dtype="f4")
        await asyncio.gather(*(array.write_async((slice(i, i + 1), slice(None)), float(i)) for i in range(30)))
        reopened = await gpuzarr.open_async(path, path="x", mode="r")
        assert isinstance(reopened, gpuzarr.Array)
        halves = await asyncio.gather(reopened.read_async(np.s_[:15]), reopened.read_async(np.s_[15:]))
        return np.concatenate(halves)

    result = asyncio.run(main())
    np.testing.assert_array_equal(result, np.repeat(np.arange(30, dtype="f4")[:, None], 30, axis=1))


def test_open_async_errors_are_raised_by_result(tmp_path: Path) -> None:
    future = gpuzarr.open_async(str(tmp_path / "missing.zarr"), mode="r")
    with pytest.raises(NodeNotFoundError):
        future.result(TIMEOUT)
    with pytest.raises(TypeError, match="unexpected keyword"):
        gpuzarr.open_async(str(tmp_path / "x.zarr"), mode="a", shape=(2,), colour="red").result(TIMEOUT)


def test_open_async_gives_the_node_open_gives(stored: gpuzarr.Array) -> None:
    opened = gpuzarr.open_async(stored.store, path=stored.path, mode="r").result(TIMEOUT)
    assert isinstance(opened, gpuzarr.Array)
    assert opened.metadata.documents() == stored.metadata.documents()
    np.testing.assert_array_equal(opened[...], _data())


def _shared_views() -> list[tuple[str, Any, Any]]:
    """(name, a value that NumPy would view rather than copy, how to change it afterwards)."""
    import array as std_array

    values: list[tuple[str, Any, Any]] = []
    ints = std_array.array("i", [1, 2, 3, 4])
    values.append(("array.array", ints, lambda: ints.__setitem__(slice(None), std_array.array("i", [9] * 4))))
    raw = bytearray(np.array([1, 2, 3, 4], "<i4").tobytes())
    view = memoryview(raw).cast("i")
    values.append(("memoryview", view, lambda: raw.__setitem__(slice(None), bytes(16))))
    try:
        import torch
    except ImportError:
        pass
    else:
        tensor = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
        values.append(("torch CPU tensor", tensor, lambda: tensor.fill_(9)))

    class Sub(np.ndarray):  # type: ignore[type-arg]
        pass

    sub = np.array([1, 2, 3, 4], "<i4").view(Sub)
    values.append(("ndarray subclass", sub, lambda: sub.fill(9)))

    class Holder:  # hands out the array it holds, which owns its data
        def __init__(self) -> None:
            self.data = np.array([1, 2, 3, 4], "<i4")

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
            return self.data

    holder = Holder()
    values.append(("__array__ of an owning array", holder, lambda: holder.data.fill(9)))
    return values


def test_write_async_copies_values_it_would_share_at_the_call() -> None:
    """Only a plain NumPy array is read while the write runs; anything else is taken at the call."""
    for name, value, change in _shared_views():
        array = gpuzarr.zeros(shape=(4,), chunks=(2,), dtype="<i4", store=gpuzarr.MemoryStore())
        gate = threading.Event()
        with config.set(async_concurrency=1):
            blocker = futures.submit(gate.wait, TIMEOUT)
            written = array.write_async(slice(None), value)
            change()  # while the write waits its turn
            gate.set()
            blocker.result(TIMEOUT)
            written.result(TIMEOUT)
        np.testing.assert_array_equal(array[...], [1, 2, 3, 4], err_msg=name)


def test_read_batch_async_gives_what_read_batch_gives(stored: gpuzarr.Array) -> None:
    truth = _data()
    crops = [(slice(y, y + 12), slice(x, x + 20)) for y, x in [(0, 0), (30, 41), (58, 70), (7, 3)]]
    index_rows = [(np.array([1, 5, 9]), slice(10, 14)), (np.array([60, 2, 33]), slice(0, 4))]
    for selections in (crops, index_rows):
        future = stored.read_batch_async(selections)
        expected = np.stack([truth[sel] for sel in selections])
        np.testing.assert_array_equal(future.result(TIMEOUT), expected)
        np.testing.assert_array_equal(stored.read_batch(selections), expected)
    out = np.empty((4, 12, 20), "<i4")
    assert stored.read_batch_async(crops, out=out).result(TIMEOUT) is out
    with pytest.raises(InvalidArgumentError, match="shape"):
        stored.read_batch_async([np.s_[0:2, 0:2], np.s_[0:3, 0:2]])
    with pytest.raises(InvalidArgumentError, match="no selections"):
        stored.read_batch_async([])


def test_a_broadcast_value_is_copied_no_larger_than_its_distinct_elements() -> None:
    wide = np.broadcast_to(np.arange(3, dtype="<i4"), (100_000, 3))
    copied = _own_copy(wide)
    assert not np.shares_memory(copied, wide)
    np.testing.assert_array_equal(copied, wide)
    assert copied.base is not None and copied.base.nbytes == 12
    torch = pytest.importorskip("torch")
    array = gpuzarr.zeros(shape=(100_000, 3), chunks=(50_000, 3), dtype="<i4", store=gpuzarr.MemoryStore())
    array.write_async(Ellipsis, torch.arange(3, dtype=torch.int32).expand(100_000, 3)).result(TIMEOUT)
    np.testing.assert_array_equal(array[-2:], [[0, 1, 2], [0, 1, 2]])


def test_field_read_async_gives_what_read_gives(tmp_path: Path) -> None:
    dtype = np.dtype([("x", "<i4"), ("y", "<f8")])
    records = np.zeros((6, 5), dtype)
    records["x"] = np.arange(30).reshape(6, 5)
    records["y"] = records["x"] / 4
    gpuzarr.array(records, store=str(tmp_path / "s.zarr"), zarr_format=2, chunks=(4, 4))
    field = gpuzarr.open_async(str(tmp_path / "s.zarr"), mode="r", field="y").result(TIMEOUT)
    assert not isinstance(field, gpuzarr.Array | gpuzarr.Group)
    np.testing.assert_array_equal(field.read_async(np.s_[1:5, ::2]).result(TIMEOUT), records["y"][1:5, ::2])
    with pytest.raises(InvalidSelectionError):
        field.read_async((0, 0.5))


def test_open_async_refuses_a_mode_or_device_that_names_nothing_at_the_call(tmp_path: Path) -> None:
    from gpuzarr.errors import DeviceError

    with pytest.raises(InvalidArgumentError, match="mode"):
        gpuzarr.open_async(str(tmp_path / "x.zarr"), mode="rw")
    with pytest.raises(DeviceError, match="device"):
        gpuzarr.open_async(str(tmp_path / "x.zarr"), device="tpu")
    with pytest.raises(DeviceError, match="device"):
        gpuzarr.open_async(str(tmp_path / "x.zarr"), device=0)  # type: ignore[arg-type]


def test_write_async_does_not_copy_a_device_value_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device value comes to the host as a new array already: no second copy of it."""
    from gpuzarr.backends.cuda import host
    from gpuzarr.core import array as array_module

    class DeviceValue:  # what the write path sees of a CuPy array
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            return {"shape": (4,), "typestr": "<i4", "data": (0, False), "version": 3}

    monkeypatch.setattr(host, "device_to_host", lambda value: np.array([5, 6, 7, 8], "<i4"))
    copies: list[int] = []

    def counted_copy(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        copies.append(values.size)
        return _own_copy(values)

    monkeypatch.setattr(array_module, "_own_copy", counted_copy)
    array = gpuzarr.zeros(shape=(4,), chunks=(2,), dtype="<i4", store=gpuzarr.MemoryStore())
    array.write_async(slice(None), DeviceValue()).result(TIMEOUT)
    np.testing.assert_array_equal(array[...], [5, 6, 7, 8])
    assert copies == []
    array.write_async(slice(None), memoryview(np.array([1, 2, 3, 4], "<i4"))).result(TIMEOUT)
    assert copies == [4]  # a host value that is not NumPy's is copied
