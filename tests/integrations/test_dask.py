"""gpuzarr.to_dask, store_dask and from_dask, and Dask's own from_array / store on gpuzarr arrays:
values against NumPy for every chunk layout, graph sizes, the alignment rule for writes, the
emulated GPU path, and a real dask.distributed cluster of worker processes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GpuZarrError, InvalidArgumentError, ReadOnlyError, UnalignedChunksError

dask = pytest.importorskip("dask")  # the dask extra
da = pytest.importorskip("dask.array")
tokenize = pytest.importorskip("dask.base").tokenize

if TYPE_CHECKING:
    from collections.abc import Iterator

    from distributed import Client

    from ..backends.emulated_gpu import EmulatedGpu

VALUES = np.arange(37 * 29, dtype="<i4").reshape(37, 29)

#: name -> (create arguments, the blocks to_dask makes by default)
LAYOUTS: dict[str, tuple[dict[str, Any], tuple[tuple[int, ...], ...]]] = {
    "v3": ({"chunks": (8, 10)}, ((8, 8, 8, 8, 5), (10, 10, 9))),
    "sharded": ({"chunks": (4, 5), "shards": (16, 10)}, ((16, 16, 5), (10, 10, 9))),
    "rectilinear": ({"chunks": [[5, 12, 20], [3, 26]]}, ((5, 12, 20), (3, 26))),
    # Axis 0 lists 47 elements for an extent of 37: the last chunk reaches past the edge.
    "rectilinear-past-edge": ({"chunks": [[5, 12, 30], 10]}, ((5, 12, 20), (10, 10, 9))),
    "v2": (
        {"chunks": (8, 10), "zarr_format": 2, "compressor": {"id": "zlib", "level": 1}, "order": "F"},
        ((8, 8, 8, 8, 5), (10, 10, 9)),
    ),
}


def _make(store: Any, layout: str = "v3", values: np.ndarray[Any, Any] = VALUES, **kwargs: Any) -> gpuzarr.Array:
    arguments = {**LAYOUTS[layout][0], **kwargs}
    a = gpuzarr.create(store, shape=values.shape, dtype=values.dtype, fill_value=-1, device="cpu", **arguments)
    a[...] = values
    return a


def _empty_like_values(store: Any, **kwargs: Any) -> gpuzarr.Array:
    return gpuzarr.create(store, shape=VALUES.shape, dtype=VALUES.dtype, fill_value=-1, device="cpu", **kwargs)


# -- reading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_to_dask_reads_every_layout_one_block_per_stored_chunk_or_shard(store: gpuzarr.Store, layout: str) -> None:
    a = _make(store, layout)
    x = gpuzarr.to_dask(a)
    assert x.chunks == LAYOUTS[layout][1]
    assert x.dtype == VALUES.dtype
    assert type(x._meta) is np.ndarray and x._meta.shape == (0, 0)
    result = x.compute()
    assert type(result) is np.ndarray
    np.testing.assert_array_equal(result, VALUES)
    np.testing.assert_array_equal(x[5:30:3, 7].compute(), VALUES[5:30:3, 7])
    np.testing.assert_array_equal((x.T * 2).sum(axis=0).compute(), (VALUES.T * 2).sum(axis=0))


def test_to_dask_reads_zarr_python_data(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "z.zarr"
    z = zarr.create_array(str(path), shape=VALUES.shape, dtype=VALUES.dtype, chunks=(4, 5), shards=(8, 10))
    z[...] = VALUES
    a = gpuzarr.open(path, device="cpu")
    assert isinstance(a, gpuzarr.Array)
    x = gpuzarr.to_dask(a)
    assert x.chunks == ((8, 8, 8, 8, 5), (10, 10, 9))
    np.testing.assert_array_equal(x.compute(), VALUES)


def test_explicit_chunks_are_dask_chunks(store: gpuzarr.Store) -> None:
    a = _make(store, "v3")
    assert gpuzarr.to_dask(a, (16, 20)).chunks == ((16, 16, 5), (20, 9))
    assert gpuzarr.to_dask(a, -1).chunks == ((37,), (29,))
    assert gpuzarr.to_dask(a, {0: 24}).chunks == ((24, 13), (29,))
    assert gpuzarr.to_dask(a, ((8, 29), (10, 19))).chunks == ((8, 29), (10, 19))
    np.testing.assert_array_equal(gpuzarr.to_dask(a, (24, -1)).compute(), VALUES)


def test_blocks_that_cut_decoded_chunks_are_read_right_and_warned_about(store: gpuzarr.Store) -> None:
    a = _make(store, "v3")
    with pytest.warns(
        da.PerformanceWarning, match=r"axis 0: Dask blocks 0 and 1 meet at index 12, inside chunk 1 \(indices 8 to 16\)"
    ):
        x = gpuzarr.to_dask(a, (12, 10))
    np.testing.assert_array_equal(x.compute(), VALUES)
    # Blocks that cut a shard on an inner chunk boundary decode every chunk once: no warning
    # (pytest turns warnings into errors).
    sharded = _make(store, "sharded", path="s")
    np.testing.assert_array_equal(gpuzarr.to_dask(sharded, (8, 5)).compute(), VALUES)
    with pytest.warns(da.PerformanceWarning, match=r"axis 1: .* inside inner chunk 1 \(indices 5 to 10\)"):
        gpuzarr.to_dask(sharded, (8, 7))


def test_chunks_dask_cannot_lay_over_the_shape_are_refused(store: gpuzarr.Store) -> None:
    a = _make(store, "v3")
    with pytest.raises(InvalidArgumentError, match=r"to_dask: chunks=\(\(10, 10\), 29\) for shape \(37, 29\)"):
        gpuzarr.to_dask(a, ((10, 10), 29))
    # Blocks of no elements: Dask divides by them (a bare ZeroDivisionError before).
    for zero in (0, (0, 10), {0: 0}):
        with pytest.raises(InvalidArgumentError, match=r"^to_dask: chunks="):
            gpuzarr.to_dask(a, zero)


def test_to_dask_takes_gpuzarr_arrays_and_says_so_of_anything_else(store: gpuzarr.Store, tmp_path: Path) -> None:
    group = gpuzarr.open_group(tmp_path / "g.zarr", mode="w")
    field_array = gpuzarr.create(tmp_path / "f.zarr", shape=(4,), chunks=(2,), dtype=[("a", "<i2"), ("b", "<f4")],
                                 zarr_format=2, device="cpu")  # fmt: skip
    field = gpuzarr.open(str(tmp_path / "f.zarr"), field="b")
    for thing, name in ((group, "Group"), (np.zeros(3), "ndarray"), (field, "FieldArray")):
        with pytest.raises(InvalidArgumentError, match=rf"^to_dask: expected a gpuzarr\.Array, got {name}"):
            gpuzarr.to_dask(thing)  # type: ignore[arg-type]
    assert field_array.shape == (4,)


def test_auto_chunks_are_whole_shards_or_whole_inner_chunks() -> None:
    # Nothing is written: only the chunking is looked at.
    a = gpuzarr.create(
        gpuzarr.MemoryStore(), shape=(1024, 512), dtype="u1", chunks=(32, 64), shards=(256, 512), device="cpu"
    )
    with dask.config.set({"array.chunk-size": "256KiB"}):
        x = gpuzarr.to_dask(a, "auto")
    assert x.numblocks[0] > 1 and all(n % 256 == 0 for n in x.chunks[0])  # 128 KiB shards fit
    with dask.config.set({"array.chunk-size": "64KiB"}):
        y = gpuzarr.to_dask(a, "auto")  # one shard is larger than the target: inner chunks
    assert y.numblocks[0] > 4
    assert all(n % 32 == 0 for n in y.chunks[0]) and all(n % 64 == 0 for n in y.chunks[1])


def test_zero_dimensional_and_empty_arrays(store: gpuzarr.Store) -> None:
    scalar = gpuzarr.create(store, path="s", shape=(), dtype="f8", fill_value=2.5, device="cpu")
    x = gpuzarr.to_dask(scalar)
    assert x.shape == () and x.compute() == 2.5
    # Its meta is made, not read: a damaged chunk is for compute() to find, as for other shapes.
    scalar[...] = 1.0
    damaged = list(store.list_prefix("s/c"))
    assert damaged
    store.set(damaged[0], b"not a chunk")
    y = gpuzarr.to_dask(gpuzarr.open(store, path="s", mode="r", device="cpu"))
    assert y.dtype == np.float64
    with pytest.raises(GpuZarrError, match=r"s/c"):
        y.compute()
    empty = gpuzarr.create(store, path="e", shape=(0, 5), dtype="i2", chunks=(4, 2), device="cpu")
    y = gpuzarr.to_dask(empty)
    assert y.chunks == ((0,), (2, 2, 1))
    assert y.compute().shape == (0, 5)
    assert da.from_array(empty).compute().shape == (0, 5)


def test_the_graph_of_a_million_blocks_is_one_task_per_block_and_small(tmp_path: Path) -> None:
    # 1000**3 bytes in 10**6 chunks, none written: building the graph reads nothing.
    a = gpuzarr.create(tmp_path / "big.zarr", shape=(1000,) * 3, dtype="u1", chunks=(10,) * 3, device="cpu")
    x = gpuzarr.to_dask(a)
    assert x.numblocks == (100, 100, 100)
    assert len(x.dask) == 10**6 + 1  # one task per block, and the key holding the Array
    assert len(pickle.dumps(x.dask)) < 16_384  # the layers, not 10**6 tasks
    # (Computing any part of it is Dask's business: its optimiser lists all 10**6 keys, seconds.)


def test_tasks_refer_to_one_copy_of_the_array() -> None:
    a = _make(gpuzarr.MemoryStore(), "v3", chunks=(2, 2))  # the data travels inside the Array
    x = gpuzarr.to_dask(a)
    tasks = dict(x.dask)
    assert len(tasks) == 19 * 15 + 1
    array_bytes = len(pickle.dumps(a))
    assert len(pickle.dumps(tasks)) < array_bytes + 200 * len(tasks)
    assert sum(isinstance(v, gpuzarr.Array) for v in tasks.values()) == 1
    assert x.name.startswith("gpuzarr-")
    inlined = gpuzarr.to_dask(a, inline_array=True)
    assert len(dict(inlined.dask)) == 19 * 15
    np.testing.assert_array_equal(inlined.compute(), VALUES)
    assert gpuzarr.to_dask(a, name="mine").name == "mine"


def test_tokens_name_the_array_not_its_data() -> None:
    a = _make(gpuzarr.MemoryStore(), "v3")
    assert tokenize(a) == tokenize(a)
    # Two anonymous memory stores with the same metadata are different arrays.
    b = _make(gpuzarr.MemoryStore(), "v3")
    assert tokenize(a) != tokenize(b)
    assert gpuzarr.to_dask(a).name != gpuzarr.to_dask(b).name
    assert gpuzarr.to_dask(a).name == gpuzarr.to_dask(a).name
    assert gpuzarr.to_dask(a).name != gpuzarr.to_dask(a, (16, 10)).name


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_da_from_array_reads_gpuzarr_arrays(store: gpuzarr.Store, layout: str) -> None:
    a = _make(store, layout)
    x = da.from_array(a)
    assert type(x._meta) is np.ndarray
    np.testing.assert_array_equal(x.compute(), VALUES)
    np.testing.assert_array_equal(da.from_array(a, chunks=(10, 7)).compute(), VALUES)


@pytest.mark.parametrize("layout", ["v3", "sharded", "rectilinear-past-edge"])
def test_da_from_array_follows_the_stored_chunks_of_large_arrays(layout: str) -> None:
    # Nothing written: Dask's "auto" blocks start from Array.chunks (Array.shards when sharded).
    arguments = {
        "v3": {"chunks": (64, 128)},
        "sharded": {"chunks": (64, 128), "shards": (256, 512)},
        "rectilinear-past-edge": {"chunks": [[256] * 3 + [600], 128]},  # 1368 listed for 1024
    }[layout]
    a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(1024, 512), dtype="u2", device="cpu", **arguments)
    with dask.config.set({"array.chunk-size": "512KiB"}):
        x = da.from_array(a)
    assert x.numblocks[0] > 1
    assert sum(x.chunks[0]) == 1024 and all(n % 64 == 0 for n in x.chunks[0][:-1])
    np.testing.assert_array_equal(x[1000:, 500:].compute(), np.zeros((24, 12), "u2"))


# -- writing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "blocks"),
    [
        ({"chunks": (8, 10)}, (16, 20)),
        ({"chunks": (4, 5), "shards": (16, 10)}, (16, 10)),
        ({"chunks": [[5, 12, 20], [3, 26]]}, ((17, 20), 29)),
        ({"chunks": (8, 10), "zarr_format": 2}, (8, 10)),
    ],
    ids=["v3", "sharded", "rectilinear", "v2"],
)
def test_store_dask_writes_aligned_blocks(store: gpuzarr.Store, arguments: dict[str, Any], blocks: Any) -> None:
    target = _empty_like_values(store, **arguments)
    source = da.from_array(VALUES, chunks=blocks)
    assert gpuzarr.store_dask(source, target) is None
    np.testing.assert_array_equal(target[...], VALUES)


def test_unaligned_blocks_are_refused_naming_the_axis_blocks_and_chunk(store: gpuzarr.Store) -> None:
    target = _empty_like_values(store, chunks=(8, 10))
    with pytest.raises(
        UnalignedChunksError,
        match=r"store_dask: axis 0: Dask blocks 0 and 1 meet at index 12, inside stored chunk 1 \(indices 8 to 16\) "
        r"of the target: .* source\.rechunk\(\{0: 8\}\).* safe_chunks=False",
    ) as caught:
        gpuzarr.store_dask(da.from_array(VALUES, chunks=(12, 10)), target)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, GpuZarrError)
    assert target.nchunks_initialized == 0


def test_blocks_sharing_a_shard_are_refused_even_on_inner_chunk_boundaries(store: gpuzarr.Store) -> None:
    target = _empty_like_values(store, chunks=(4, 5), shards=(16, 10))
    with pytest.raises(UnalignedChunksError, match=r"axis 1: Dask blocks 0 and 1 meet at index 5, inside shard 0 "):
        gpuzarr.store_dask(da.from_array(VALUES, chunks=(16, 5)), target)
    assert target.nchunks_initialized == 0


def test_safe_chunks_false_writes_unaligned_blocks_under_the_store_locks(tmp_path: Path) -> None:
    target = _empty_like_values(gpuzarr.LocalStore(tmp_path / "t.zarr"), chunks=(4, 5), shards=(16, 10))
    source = da.from_array(VALUES, chunks=(3, 7))  # every shard is written by several tasks
    gpuzarr.store_dask(source, target, safe_chunks=False, scheduler="threads", num_workers=4)
    np.testing.assert_array_equal(target[...], VALUES)


def test_region_writes_part_of_the_target(store: gpuzarr.Store) -> None:
    target = _empty_like_values(store, chunks=(8, 10))
    part = VALUES[16:32]
    gpuzarr.store_dask(da.from_array(part, chunks=(8, 10)), target, region=(slice(16, 32), slice(None)))
    expected = np.full(VALUES.shape, -1, VALUES.dtype)
    expected[16:32] = part
    np.testing.assert_array_equal(target[...], expected)
    # Blocks of 8 from index 4 meet at 12, inside chunk 1.
    with pytest.raises(UnalignedChunksError, match=r"axis 0: Dask blocks 0 and 1 meet at index 12"):
        gpuzarr.store_dask(da.from_array(VALUES[4:20], chunks=(8, 10)), target, region=(slice(4, 20), slice(None)))
    # One block from an unaligned start shares no chunk with another block.
    gpuzarr.store_dask(da.from_array(VALUES[4:7], chunks=(3, 29)), target, region=(slice(4, 7), slice(0, 29)))
    expected[4:7] = VALUES[4:7]
    np.testing.assert_array_equal(target[...], expected)


@pytest.mark.parametrize(
    ("region", "message"),
    [
        (None, r"the Dask array's shape \(16, 29\) is not the target's \(37, 29\)"),
        ((slice(0, 16),), r"region must be a tuple of 2 slices"),
        ((slice(0, 15), slice(None)), r"region\[0\] slice\(0, 15, None\) covers 15 elements"),
        ((slice(0, 32, 2), slice(None)), r"region\[0\] must have step 1"),
        ((3, slice(None)), r"region\[0\] must be a slice"),
    ],
)
def test_region_and_shape_mistakes_are_named(store: gpuzarr.Store, region: Any, message: str) -> None:
    target = _empty_like_values(store, chunks=(8, 10))
    with pytest.raises(InvalidArgumentError, match=message):
        gpuzarr.store_dask(da.from_array(VALUES[:16], chunks=8), target, region=region)


def test_compute_false_returns_a_dask_array_that_writes_when_computed(store: gpuzarr.Store) -> None:
    target = _empty_like_values(store, chunks=(8, 10))
    pending = gpuzarr.store_dask(da.from_array(VALUES, chunks=(8, 10)), target, compute=False)
    assert isinstance(pending, da.Array)
    assert target.nchunks_initialized == 0
    dask.compute(pending)
    np.testing.assert_array_equal(target[...], VALUES)


def test_read_only_targets_and_non_dask_sources_are_refused(tmp_path: Path) -> None:
    _empty_like_values(tmp_path / "t.zarr", chunks=(8, 10))
    read_only = gpuzarr.open(tmp_path / "t.zarr", mode="r")
    assert isinstance(read_only, gpuzarr.Array)
    with pytest.raises(ReadOnlyError, match="read-only"):
        gpuzarr.store_dask(da.from_array(VALUES, chunks=8), read_only)
    with pytest.raises(InvalidArgumentError, match=r"source must be a dask\.array\.Array, got ndarray"):
        gpuzarr.store_dask(VALUES, read_only)  # type: ignore[arg-type]


def test_from_dask_makes_chunks_of_the_blocks(store: gpuzarr.Store) -> None:
    a = gpuzarr.from_dask(da.from_array(VALUES, chunks=(16, 10)), store, fill_value=-1, dimension_names=["y", "x"])
    assert (a.chunks, a.shards, a.dimension_names, a.fill_value) == ((16, 10), None, ("y", "x"), -1)
    np.testing.assert_array_equal(a[...], VALUES)
    reopened = gpuzarr.open(store, device="cpu")
    assert isinstance(reopened, gpuzarr.Array)
    np.testing.assert_array_equal(reopened[...], VALUES)


def test_from_dask_options(store: gpuzarr.Store) -> None:
    source = da.from_array(VALUES, chunks=(16, 10))
    sharded = gpuzarr.from_dask(source, store, path="s", chunks=(4, 5), shards=source.chunksize)
    assert (sharded.chunks, sharded.shards) == ((4, 5), (16, 10))
    np.testing.assert_array_equal(sharded[...], VALUES)
    # Shards and no chunks: the guessed inner chunks fit the shards (docs/dask.md).
    picked = gpuzarr.from_dask(source, store, path="p", shards=source.chunksize)
    assert picked.shards == (16, 10) and all(s % c == 0 for s, c in zip(picked.shards, picked.chunks))
    np.testing.assert_array_equal(picked[...], VALUES)
    v2 = gpuzarr.from_dask(source, store, path="v2", zarr_format=2, dtype="<f8")
    assert v2.zarr_format == 2 and v2.dtype == np.dtype("<f8")
    np.testing.assert_array_equal(v2[...], VALUES.astype("<f8"))
    coarser = gpuzarr.from_dask(source, store, path="c", chunks=(8, 5))  # blocks end on chunk edges
    np.testing.assert_array_equal(coarser[...], VALUES)
    irregular = source.rechunk(((10, 27), (29,)))
    with pytest.raises(InvalidArgumentError, match=r"from_dask: the Dask array's blocks along axis 0 \(10, 27\)"):
        gpuzarr.from_dask(irregular, store, path="i")
    rectilinear = gpuzarr.from_dask(irregular, store, path="r", chunks=irregular.chunks)
    assert rectilinear.chunks == ((10, 27), (29,))
    np.testing.assert_array_equal(rectilinear[...], VALUES)


def test_from_dask_refuses_before_creating_anything(store: gpuzarr.Store) -> None:
    source = da.from_array(VALUES, chunks=(8, 10))
    with pytest.raises(
        UnalignedChunksError, match=r"from_dask: axis 0: Dask blocks 0 and 1 meet at index 8, inside shard 0 "
    ):
        gpuzarr.from_dask(source, store, chunks=(4, 5), shards=(16, 10))
    with pytest.raises(UnalignedChunksError, match=r"inside stored chunk 0 \(indices 0 to 12\)"):
        gpuzarr.from_dask(source, store, chunks=(12, 10))
    assert list(store.list_prefix("")) == []
    with pytest.raises(InvalidArgumentError, match=r"from_dask: shape= is not accepted"):
        gpuzarr.from_dask(source, store, shape=(37, 29))
    unsafe = gpuzarr.from_dask(source, store, chunks=(12, 10), safe_chunks=False)
    np.testing.assert_array_equal(unsafe[...], VALUES)


def test_from_dask_compute_false(store: gpuzarr.Store) -> None:
    pending = gpuzarr.from_dask(da.from_array(VALUES, chunks=(16, 10)), store, fill_value=-1, compute=False)
    assert isinstance(pending, da.Array)
    created = gpuzarr.open(store, device="cpu")
    assert isinstance(created, gpuzarr.Array)
    np.testing.assert_array_equal(created[...], np.full(VALUES.shape, -1))
    pending.compute()
    np.testing.assert_array_equal(created[...], VALUES)


def test_plain_da_store_works_and_to_zarr_fails_clearly(store: gpuzarr.Store) -> None:
    target = _empty_like_values(store, chunks=(8, 10))
    da.store(da.from_array(VALUES, chunks=(12, 7)), target)  # Dask's lock serialises the writes
    np.testing.assert_array_equal(target[...], VALUES)
    pytest.importorskip("zarr")
    with pytest.raises(TypeError, match="Unsupported type for store_like: 'Array'"):
        da.from_array(VALUES).to_zarr(target)


# -- imports ----------------------------------------------------------------------------------------


def _python(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_dask_is_imported_on_first_use_only_and_cupy_never_for_cpu_arrays() -> None:
    _python(
        "import sys, gpuzarr\n"
        "assert 'dask' not in sys.modules\n"
        "assert {'to_dask', 'from_dask', 'store_dask'} <= set(dir(gpuzarr))\n"
        "assert not hasattr(gpuzarr, 'to_dusk')\n"
        "a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(4, 4), dtype='f4', chunks=(2, 2), device='cpu')\n"
        "x = gpuzarr.to_dask(a)\n"
        "assert 'dask.array' in sys.modules\n"
        "assert x.sum().compute() == 0\n"
        "assert 'cupy' not in sys.modules, 'cupy imported'\n"
    )


def test_without_dask_the_error_names_the_extra() -> None:
    _python(
        "import sys\n"
        "sys.modules['dask'] = None\n"
        "import gpuzarr\n"
        "try:\n"
        "    gpuzarr.to_dask\n"
        "except ImportError as e:\n"
        "    assert \"pip install 'gpuzarr[dask]'\" in str(e), e\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )


# -- the GPU path on the emulated device -----------------------------------------------------------


def _graph_array(x: da.Array) -> gpuzarr.Array:
    (array,) = [v for v in dict(x.dask).values() if isinstance(v, gpuzarr.Array)]
    return array


def test_gpu_arrays_are_read_on_the_emulated_device(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    _make(gpuzarr.LocalStore(tmp_path / "a.zarr"), "sharded")
    gpu = gpuzarr.open(tmp_path / "a.zarr", device="gpu")
    assert isinstance(gpu, gpuzarr.Array) and gpu.device == "cuda:0"
    x = gpuzarr.to_dask(gpu)
    # The meta is what the device's reader gives for a zero-size read: NumPy on the emulated
    # device (CuPy on a GPU, tests/gpu/test_dask_cuda.py).
    assert type(x._meta) is np.ndarray and x._meta.shape == (0, 0)
    np.testing.assert_array_equal(x.compute(scheduler="threads"), VALUES)
    assert emulated_gpu.names().count("assemble_chunks") >= 3  # one read per block at least
    assert _graph_array(x).__getstate__()["device"] == "gpu"


def test_auto_is_pinned_to_the_kind_of_device_it_resolved_to(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    _make(gpuzarr.LocalStore(tmp_path / "a.zarr"), "v3")
    auto = gpuzarr.open(tmp_path / "a.zarr")  # "auto": the emulated GPU here
    assert isinstance(auto, gpuzarr.Array) and auto.device == "cuda:0"
    assert _graph_array(gpuzarr.to_dask(auto)).__getstate__()["device"] == "gpu"
    cpu = gpuzarr.open(tmp_path / "a.zarr", device="cpu")
    assert isinstance(cpu, gpuzarr.Array)
    assert _graph_array(gpuzarr.to_dask(cpu)).__getstate__()["device"] == "cpu"


# -- a dask.distributed cluster of worker processes ------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_worker_processes_read_blocks(client: Client, tmp_path: Path) -> None:
    a = _make(gpuzarr.LocalStore(tmp_path / "a.zarr"), "sharded")
    x = gpuzarr.to_dask(a)
    np.testing.assert_array_equal(client.compute(x).result(), VALUES)
    # A lambda travels by value: a module-level function would make the workers import this module.
    with_pids = x.map_blocks(lambda block: np.full(block.shape, os.getpid(), dtype="i8"), dtype="i8")
    pids = set(np.unique(client.compute(with_pids).result()).tolist())
    workers = set(client.run(os.getpid).values())
    assert pids <= workers and os.getpid() not in pids


def test_worker_processes_write_blocks(client: Client, tmp_path: Path) -> None:
    source = gpuzarr.to_dask(_make(gpuzarr.LocalStore(tmp_path / "a.zarr"), "sharded")) + 1  # blocks (16, 10)
    created = gpuzarr.from_dask(source, tmp_path / "b.zarr", shards=(16, 10), chunks=(8, 5))
    np.testing.assert_array_equal(created[...], VALUES + 1)
    # Unaligned blocks across processes: every shard is rewritten by several workers under the
    # store's file locks, and nothing is lost.
    target = _empty_like_values(gpuzarr.LocalStore(tmp_path / "c.zarr"), chunks=(4, 5), shards=(16, 10))
    gpuzarr.store_dask(source.rechunk((3, 7)), target, safe_chunks=False)
    np.testing.assert_array_equal(target[...], VALUES + 1)


def test_zip_archive_targets_refuse_writes_from_other_processes(client: Client, tmp_path: Path) -> None:
    # Not dask.distributed's "Could not serialize object" (a TypeError), but what is wrong.
    source = da.from_array(VALUES, chunks=(8, 10))
    with gpuzarr.store.ZipStore(tmp_path / "p.zip", mode="w") as store:
        target = _empty_like_values(store, chunks=(8, 10))
        with pytest.raises(InvalidArgumentError, match=r"the target's ZipStore lives in process \d+: the write would"):
            gpuzarr.store_dask(source, target)


def test_memory_store_targets_refuse_writes_from_other_processes(client: Client) -> None:
    target = _empty_like_values(gpuzarr.MemoryStore(), chunks=(8, 10))
    with pytest.raises(InvalidArgumentError, match=r"the target's MemoryStore lives in process \d+: the write would"):
        gpuzarr.store_dask(da.from_array(VALUES, chunks=(8, 10)), target)


def test_blocks_of_unknown_size_ask_for_compute_chunk_sizes(store: gpuzarr.Store) -> None:
    values = da.from_array(np.arange(40), chunks=10)
    unknown = values[values % 3 == 0]  # boolean indexing: block sizes are NaN until computed
    target = gpuzarr.create(store, shape=(14,), dtype="int64", chunks=(5,))
    expected = r"axis 0 are unknown \(NaN; its shape is \(nan,\)\).*call source\.compute_chunk_sizes\(\) first"
    with pytest.raises(InvalidArgumentError, match=r"store_dask: the Dask array's block sizes along " + expected):
        gpuzarr.store_dask(unknown, target)
    with pytest.raises(InvalidArgumentError, match=r"from_dask: the Dask array's block sizes along " + expected):
        gpuzarr.from_dask(unknown, gpuzarr.MemoryStore())
    known = unknown.compute_chunk_sizes()  # type: ignore[no-untyped-call]
    threads = {"scheduler": "threads"}  # a MemoryStore target lives in this process
    written = gpuzarr.from_dask(known, gpuzarr.MemoryStore(), chunks=known.chunks, compute_kwargs=threads)
    np.testing.assert_array_equal(written[...], np.arange(0, 40, 3))


def test_from_dask_passes_compute_kwargs_to_dask(store: gpuzarr.Store) -> None:
    calls: list[int] = []

    def scheduler(graph: Any, keys: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return dask.get(graph, keys, **kwargs)  # type: ignore[no-untyped-call]

    source = da.from_array(VALUES, chunks=(8, 10))
    array = gpuzarr.from_dask(source, store, compute_kwargs={"scheduler": scheduler})
    assert len(calls) == 1  # the write ran on the scheduler given
    np.testing.assert_array_equal(array[...], VALUES)


# -- a dask.distributed cluster whose workers share this process ----------------------------------


@pytest.fixture(scope="module")
def threads_client() -> Iterator[Client]:
    distributed = pytest.importorskip("distributed")
    with (
        # In-process comms (inproc://); the scheduler's HTTP server on a free loopback port (with
        # no address it takes 8787, which the cluster of worker processes may hold).
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_in_process_workers_write_into_a_memory_store(threads_client: Client) -> None:
    """dask.distributed pickles tasks for workers in this process too: each block was written
    into a copy of the MemoryStore of its own, and the target stayed empty, without an error."""
    source = da.from_array(VALUES, chunks=(8, 10))
    target = _empty_like_values(gpuzarr.MemoryStore(), chunks=(8, 10))
    gpuzarr.store_dask(source, target)
    np.testing.assert_array_equal(target[...], VALUES)
    np.testing.assert_array_equal(gpuzarr.from_dask(source)[...], VALUES)


def test_in_process_workers_write_into_a_zip_archive(threads_client: Client, tmp_path: Path) -> None:
    """A zip archive being written could not be pickled, and every task failed with dask's
    "Could not serialize object" (a TypeError): the writer travels by reference."""
    source = da.from_array(VALUES, chunks=(8, 10))
    with gpuzarr.store.ZipStore(tmp_path / "w.zip", mode="w") as store:
        target = _empty_like_values(store, chunks=(8, 10))
        gpuzarr.store_dask(source, target)
        np.testing.assert_array_equal(target[...], VALUES)
    np.testing.assert_array_equal(gpuzarr.open(str(tmp_path / "w.zip"), mode="r", device="cpu")[...], VALUES)


def test_an_archive_opened_with_the_default_mode_is_read_on_a_cluster(threads_client: Client, tmp_path: Path) -> None:
    """``open("x.zip")`` opens the archive with mode "a": such a store could not be pickled,
    and a cluster's tasks failed with dask's "Could not serialize object". Not written to, it
    travels as a read-only copy; written to, pickling it says why it cannot."""
    path = tmp_path / "a.zip"
    with gpuzarr.store.ZipStore(path, mode="w") as store:
        _make(store)
    array = gpuzarr.open(str(path), device="cpu")
    assert array.store.mode == "a"
    np.testing.assert_array_equal(threads_client.compute(gpuzarr.to_dask(array)).result(), VALUES)
    array[0, 0] = 7
    with pytest.raises(InvalidArgumentError, match="a zip store written to cannot be pickled"):
        pickle.dumps(array.store)
    array.store.close()


def test_from_dask_takes_chunk_shape_for_chunks() -> None:
    """``chunk_shape`` is create's other name for ``chunks``: refused as "give one of them",
    as if the chunks from_dask takes from the blocks had been given."""
    array = gpuzarr.from_dask(da.ones((40, 30), chunks=(10, 10)), gpuzarr.MemoryStore(), chunk_shape=(5, 5),
                              compute_kwargs={"scheduler": "threads"})  # fmt: skip
    assert array.chunks == (5, 5) and float(array[...].sum()) == 1200.0
    with pytest.raises(InvalidArgumentError, match="chunks and chunk_shape: give one of them"):
        gpuzarr.from_dask(da.ones((4,), chunks=2), gpuzarr.MemoryStore(), chunks=(2,), chunk_shape=(2,))
