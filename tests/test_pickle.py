"""An Array pickles (store, path, metadata, options) and reads the same in another process:
what PyTorch DataLoader workers under spawn/forkserver and Dask's process schedulers need."""

from __future__ import annotations

import multiprocessing
import pickle
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr

from .backends.emulated_gpu import emulated_gpu  # noqa: F401 - a fixture, used by name below

if TYPE_CHECKING:
    from pathlib import Path

VALUES = np.arange(24 * 20, dtype="<u2").reshape(24, 20)
CROPS = [(slice(0, 8), slice(0, 8)), (slice(5, 21), slice(3, 19)), (slice(16, 24), slice(12, 20))]


def _make(store: Any, **kwargs: Any) -> gpuzarr.Array:
    a = gpuzarr.create(store, shape=VALUES.shape, dtype="<u2", chunks=(8, 8), fill_value=7, **kwargs)
    a[...] = VALUES
    return a


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"shards": (16, 16)}, {"zarr_format": 2, "compressor": {"id": "zlib", "level": 1}}, {"order": "F"}],
    ids=["v3", "sharded", "v2", "transpose"],
)
def test_round_trip_reads_and_writes_the_same(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    a = _make(gpuzarr.LocalStore(tmp_path / "a.zarr"), **kwargs)
    b = pickle.loads(pickle.dumps(a))
    described = ("shape", "dtype", "chunks", "shards", "path", "device", "fill_value")
    assert [getattr(b, name) for name in described] == [getattr(a, name) for name in described]
    np.testing.assert_array_equal(b[...], VALUES)
    b[0, 0] = 99  # the copy writes to the same files
    assert a[0, 0] == 99


def test_memory_store_travels_by_value() -> None:
    a = _make(gpuzarr.MemoryStore())
    b = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(b.read_batch(CROPS[:1]), VALUES[None, 0:8, 0:8])
    b[...] = 0
    np.testing.assert_array_equal(a[...], VALUES)  # a copy: the original's keys are untouched


def test_options_travel(tmp_path: Path) -> None:
    a = _make(gpuzarr.LocalStore(tmp_path / "a.zarr"))
    strict = gpuzarr.Array(a.store, a.path, a.metadata, "cpu", fill_missing_data_reads=False, strict=True)
    b = pickle.loads(pickle.dumps(strict))
    assert b.strict is True and b.fill_missing_data_reads is False
    ro = pickle.loads(pickle.dumps(gpuzarr.open(tmp_path / "a.zarr", mode="r")))
    assert ro.read_only
    with pytest.raises(gpuzarr.errors.ReadOnlyError):
        ro[0, 0] = 1


def _read_crops(array: gpuzarr.Array) -> tuple[str, list[Any]]:
    results = [array[sel] for sel in CROPS]
    return array.device, [np.asarray(r.get() if hasattr(r, "get") else r) for r in results]


def test_spawned_workers_read_crops(tmp_path: Path) -> None:
    a = _make(gpuzarr.LocalStore(tmp_path / "a.zarr"), shards=(16, 16))
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        outcomes = pool.map(_read_crops, [a, a])
    for _, crops in outcomes:
        for got, sel in zip(crops, CROPS, strict=True):
            np.testing.assert_array_equal(got, VALUES[sel])


@pytest.mark.usefixtures("emulated_gpu")
def test_the_device_is_resolved_again_in_the_child(tmp_path: Path) -> None:
    # "auto" picked the (emulated) GPU here; a spawned process has no GPU and reads on the CPU.
    a = gpuzarr.open(_make(gpuzarr.LocalStore(tmp_path / "a.zarr")).store)
    assert isinstance(a, gpuzarr.Array) and a.device == "cuda:0"
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        device, crops = pool.apply(_read_crops, (a,))
    assert device == "cpu"
    np.testing.assert_array_equal(crops[1], VALUES[CROPS[1]])


def test_every_error_survives_pickling_with_its_message_and_fields() -> None:
    """Errors raised in worker processes (DataLoader workers, Dask) reach the parent pickled."""
    import inspect

    from gpuzarr import errors

    made = {
        errors.CorruptChunkError: errors.CorruptChunkError("c/0", "bad stream"),
        errors.ChunkNotFoundError: errors.ChunkNotFoundError("c/1"),
        errors.SymlinkEscapeError: errors.SymlinkEscapeError("c/2", "/etc/passwd"),
        errors.StoreError: errors.StoreError("s3://b/x.zarr", "c/3", "timed out"),
        errors.StorePermissionError: errors.StorePermissionError("s3://b/x.zarr", None, "403"),
    }
    classes = [
        c for name, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, errors.GpuZarrError) and not name.startswith("_")
    ]
    for cls in classes:
        error = made.get(cls) or cls("a message naming a field")
        error.add_note("while reading volume 1")  # loader errors say where, in a note
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is cls and str(again) == str(error)
        assert vars(again) == vars(error)
        assert again.__notes__ == ["while reading volume 1"]


def test_every_error_is_raised_again_with_its_type_across_dataloader_workers() -> None:
    """PyTorch's DataLoader raises a worker's error again as ``type(error)(text)``: the errors
    whose constructors took several arguments came back as RuntimeError, which
    ``except CorruptChunkError`` does not catch."""
    import inspect

    pytest.importorskip("torch")
    from torch._utils import ExceptionWrapper

    from gpuzarr import errors

    classes = [
        c for name, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, errors.GpuZarrError) and not name.startswith("_")
    ]  # fmt: skip
    made = {
        errors.CorruptChunkError: errors.CorruptChunkError("c/0", "bad stream"),
        errors.SymlinkEscapeError: errors.SymlinkEscapeError("c/2", "/etc/passwd"),
        errors.StoreError: errors.StoreError("s3://b/x.zarr", "c/3", "timed out"),
        errors.StorePermissionError: errors.StorePermissionError("s3://b/x.zarr", None, "403"),
    }
    for cls in classes:
        try:
            raise made.get(cls) or cls("a message naming a field")
        except errors.GpuZarrError:
            wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
        with pytest.raises(cls) as raised:
            wrapped.reraise()
        assert "Caught" in str(raised.value) and cls.__name__ in str(raised.value)


@pytest.mark.parametrize("key", ["c/1/0", "0.3.1", "scan:2/c/0/0"])
def test_the_key_of_a_chunk_error_crosses_dataloader_workers(key: str) -> None:
    """The README promises ``CorruptChunkError.key`` (and ``ChunkNotFoundError.key``): raised
    again from its worker's traceback text, the error takes them back from the text's last line
    of its type (notes printed after it, and other errors before it, are passed over)."""
    pytest.importorskip("torch")
    from torch._utils import ExceptionWrapper

    from gpuzarr import errors

    def fail() -> None:
        raise errors.CorruptChunkError("other", "an earlier error")

    def raise_after_another(made: errors.GpuZarrError) -> None:
        try:
            fail()
        except errors.CorruptChunkError as earlier:
            raise made from earlier

    for made in (errors.CorruptChunkError(key, "zstd: bad frame: 3 bytes"), errors.ChunkNotFoundError(key)):
        try:
            raise_after_another(made)
        except errors.GpuZarrError as exc:
            exc.add_note("volume 0, crops [(8, 0)]")
            wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
        with pytest.raises(type(made)) as raised:
            wrapped.reraise()
        assert raised.value.key == key
        if isinstance(made, errors.CorruptChunkError):
            assert isinstance(raised.value, errors.CorruptChunkError)
            assert raised.value.reason == "zstd: bad frame: 3 bytes"


@pytest.mark.parametrize("consolidated", [False, True])
def test_a_group_pickles_and_changes_its_attributes_after(tmp_path: Path, consolidated: bool) -> None:
    """A Group holds a lock of its metadata: the copy makes its own."""
    root = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    root.create_array("x", shape=(4,), dtype="i4", chunks=(2,))
    if consolidated:
        gpuzarr.consolidate_metadata(str(tmp_path / "g.zarr"))
    group = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="r+")
    copy = pickle.loads(pickle.dumps(group))
    copy.attrs["title"] = "t"
    assert dict(gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="r").attrs) == {"title": "t"}
    assert list(copy) == ["x"]
