"""The GPU read path's host-side logic, run on the CPU.

The plan (batches, streams, staging layout, alignment, kernel arguments) and the executor run
unchanged with CpuEmulatedDevice: CPU decoders of nvCOMP's raw bitstreams and the NumPy models of
the kernels stand in for the device calls. Every result must equal the CPU engine's, bit for bit.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cuda.bind import bind_batch
from gpuzarr.backends.cuda.gpu_plan import ALIGNMENT, GpuPlanError, align, build_gpu_read_plan, task_cost
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice
from gpuzarr.backends.cuda.routes import ROUTES, ZSTD_SCRATCH_PER_BYTE, decode_route
from gpuzarr.backends.cuda.streams import SPLITTERS
from gpuzarr.errors import ChunkNotFoundError, CorruptChunkError, DeviceError, InvalidArgumentError
from gpuzarr.plan.selection import plan_selection
from gpuzarr.store.local import FileVersion

from .cuda_matrix import ARRAYS, SELECTIONS, assert_bitwise_equal, cpu_result, make_array, read_gpu_plan


def emulated_read(array: gpuzarr.Array, selection: Any, budget: int = 1 << 28) -> tuple[Any, CpuEmulatedDevice]:
    layout = array.layout
    plan = plan_selection(selection, layout.dimensions())
    device = CpuEmulatedDevice()
    out = read_gpu_plan(layout, array.store, plan, device, budget=budget)
    return out.reshape(plan.shape), device


@pytest.fixture(scope="module", params=sorted(ARRAYS))
def array(request: pytest.FixtureRequest) -> gpuzarr.Array:
    return make_array(request.param)


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_matches_cpu_engine(array: gpuzarr.Array, selection: str) -> None:
    sel = SELECTIONS[selection]
    got, _ = emulated_read(array, sel)
    assert_bitwise_equal(got, cpu_result(array, sel))


def test_small_budget_gives_many_batches(array: gpuzarr.Array) -> None:
    plan = build_gpu_read_plan(array.layout, plan_selection(Ellipsis, array.layout.dimensions()), budget=1)
    assert len(plan.batches) == len(plan.tasks)
    got, _ = emulated_read(array, Ellipsis, budget=1)
    assert_bitwise_equal(got, cpu_result(array, Ellipsis))


EXPECTED_ROUTES = {
    "v3-zstd-f4": "zstd",
    "v3-gzip-i2": "gzip",
    "v3-raw-u1": "raw",
    "v3-blosc-zlib-shuffle-i4": "blosc",
    "v3-blosc-blosclz-cpu": "cpu",
    "v3-transpose-outside-sharding-cpu": "cpu",
    "v2-zlib-bigendian-i4": "numcodecs.zlib",
    "v2-lz4-f8": "numcodecs.lz4",
    "v2-delta-filter-cpu": "cpu",
    "v3-numcodecs-lz4-f4": "numcodecs.lz4",
    "v3-numcodecs-zstd-f4": "zstd",
    "v3-numcodecs-gzip-i2": "gzip",
    "v3-numcodecs-blosc-lz4-shuffle-i4": "blosc",
    "v3-numcodecs-blosc-blosclz-cpu": "cpu",
    "v3-numcodecs-delta-filter-cpu": "cpu",
    "v3-sharded-zstd-crc32c": "zstd",
}


@pytest.mark.parametrize(("name", "route"), sorted(EXPECTED_ROUTES.items()))
def test_routes(name: str, route: str) -> None:
    layout = make_array(name).layout
    got = decode_route(layout.chunk_pipeline)
    assert got.name == route
    assert (got.reason is not None) == (route == "cpu")


#: where ``gpu_trust_payloads=False`` sends each array's chunks: every compressed chunk to the
#: CPU (a crc32c is no defence against crafted data: its writer writes the checksum too);
#: uncompressed chunks stay on the GPU
UNTRUSTED_ROUTES = {
    "v3-zstd-f4": "cpu",
    "v3-gzip-i2": "cpu",
    "v3-gzip-crc32c-f8": "cpu",
    "v3-raw-u1": "raw",
    "v3-raw-bigendian-u4-crc32c": "raw",
    "v3-sharded-raw-u2": "raw",
    "v3-blosc-lz4-shuffle-u2": "cpu",
    "v3-blosc-lz4hc-noshuffle-i4": "cpu",
    "v3-blosc-zstd-bitshuffle-f8": "cpu",
    "v3-blosc-zlib-shuffle-i4": "cpu",
    "v2-zlib-bigendian-i4": "cpu",
    "v2-lz4-f8": "cpu",
    "v3-numcodecs-lz4-f4": "cpu",
    "v3-sharded-zstd-crc32c": "cpu",
}


@pytest.mark.parametrize(("name", "route"), sorted(UNTRUSTED_ROUTES.items()))
def test_untrusted_payloads_go_to_the_cpu(name: str, route: str) -> None:
    layout = make_array(name).layout
    with gpuzarr.config.set(gpu_trust_payloads=False):
        got = decode_route(layout.chunk_pipeline)
        sel = SELECTIONS["crop"]
        out, device = emulated_read(make_array(name), sel)
    assert got.name == route
    if route == "cpu":
        assert got.reason is not None and "gpu_trust_payloads=False" in got.reason
        assert not [n for n, _ in device.calls if n in ("zstd", "deflate", "lz4")]  # nothing for nvCOMP
    else:
        assert [n for n, _ in device.calls if n == "assemble_chunks"]  # still put together on the device
    assert_bitwise_equal(out, cpu_result(make_array(name), sel))
    assert decode_route(layout.chunk_pipeline).name != "cpu"  # trusted (the default): all on the GPU


def test_untrusted_payloads_under_strict_raise_naming_the_setting(emulated_gpu: Any) -> None:
    from .cuda_matrix import open_on_gpu

    gpu = open_on_gpu(make_array("v3-zstd-f4"))
    untrusted = gpuzarr.config.set(gpu_trust_payloads=False, strict=True)
    with untrusted, pytest.raises(DeviceError, match="gpu_trust_payloads"):
        gpu.read((slice(0, 40), slice(0, 50)))
    with pytest.raises(InvalidArgumentError, match="gpu_trust_payloads must be True or False"):
        gpuzarr.config.set(gpu_trust_payloads="no")


def test_device_calls_are_batched() -> None:
    """One nvCOMP call per algorithm and one assemble launch per batch, chunks of many shards mixed."""
    array = make_array("v3-sharded-zstd-crc32c")
    _, device = emulated_read(array, Ellipsis)
    names = [name for name, _ in device.calls]
    assert names.count("zstd") == 1 and names.count("assemble_chunks") == 1
    blosc = make_array("v3-blosc-zstd-bitshuffle-f8")
    _, device = emulated_read(blosc, Ellipsis)
    assert [n for n, _ in device.calls if n != "copy"] == [
        "upload",
        "wait_for",
        "zstd",
        "synchronize",
        "bit_unshuffle",
        "assemble_chunks",
    ]


def test_one_host_wait_per_batch_after_every_decode_and_checksum_is_queued() -> None:
    """nvCOMP's sizes and the CRC-32 of gzip streams are read after one synchronisation per
    batch, queued before it (the emulated device refuses results read before a
    synchronisation); un-shuffles and the assemble come after it."""
    gzip = make_array("v3-gzip-i2")
    _, device = emulated_read(gzip, Ellipsis)
    names = [n for n, _ in device.calls if n != "copy"]
    assert names == ["upload", "wait_for", "deflate", "crc32", "synchronize", "assemble_chunks"]
    got, device = emulated_read(gzip, Ellipsis, budget=1)
    assert_bitwise_equal(got, cpu_result(gzip, Ellipsis))
    names = [n for n, _ in device.calls]
    assert names.count("synchronize") == names.count("assemble_chunks") > 1
    raw = make_array("v3-raw-u1")
    _, device = emulated_read(raw, Ellipsis)
    assert "synchronize" not in [n for n, _ in device.calls]  # nothing to wait for


def test_staging_and_work_offsets_are_aligned() -> None:
    array = make_array("v3-blosc-lz4-shuffle-u2")
    layout = array.layout
    plan = build_gpu_read_plan(layout, plan_selection(Ellipsis, layout.dimensions()))
    encoded = [array.store.get(plan.tasks[t].key) for t in plan.batches[0]]
    bound = bind_batch(layout, plan, 0, encoded)
    for group in bound.groups.values():
        assert all(o % ALIGNMENT == 0 for o in group.src_offsets)
    assert all(o % ALIGNMENT == 0 for o in bound.assemble.source_offsets.tolist() if o >= 0)
    for launch in bound.unshuffles:
        assert launch.kernel == "byte_unshuffle"
        assert all(t == 2 for t in launch.typesizes)
    assert bound.staging.size % ALIGNMENT == 0


def test_assemble_arguments_layout() -> None:
    """The assemble tables follow kernels/assemble.cu: 8 columns, a dropped axis has out stride 0,
    a transpose shows as permuted source strides, big-endian data as swap_width."""
    array = make_array("v3-transpose-zstd")
    layout = array.layout
    plan = build_gpu_read_plan(layout, plan_selection((slice(None), 30), layout.dimensions()))
    assert plan.out_strides.tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    route = plan.tasks[0].route
    # chunk (16, 24) stored transposed as (24, 16): decoded axis 0 has stride 1, axis 1 stride 16
    assert route.source_strides == (1, 16)
    assert plan.src_offsets.shape[1] == 8 and plan.extents[:, 1].tolist() == [1] * len(plan.tasks)
    be = make_array("v3-zstd-bigendian-c8")
    be_plan = build_gpu_read_plan(be.layout, plan_selection(Ellipsis, be.layout.dimensions()))
    assert be_plan.swap_width == 4 and be_plan.dtype.itemsize == 8


@pytest.mark.parametrize(
    "selection", [([1, 2, 3], slice(None)), (slice(None, None, -1), slice(None))], ids=["index-array", "negative-step"]
)
def test_unsupported_selections_raise(selection: Any) -> None:
    array = make_array("v3-zstd-f4")
    with pytest.raises(GpuPlanError):
        build_gpu_read_plan(array.layout, plan_selection(selection, array.layout.dimensions()))


def test_missing_chunks_raise_when_not_filled() -> None:
    filled = make_array("v3-missing-chunks-gzip")
    array = gpuzarr.Array(filled.store, filled.path, filled.metadata, device="cpu", fill_missing_data_reads=False)
    with pytest.raises(ChunkNotFoundError):
        emulated_read(array, Ellipsis)


def test_cpu_fallback_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    array = make_array("v2-delta-filter-cpu")
    with caplog.at_level(logging.INFO, logger="gpuzarr"):
        emulated_read(array, Ellipsis)
    messages = [r.getMessage() for r in caplog.records if "on the CPU" in r.getMessage()]
    assert len(messages) == 1 and "numcodecs.delta" in messages[0]


# --- malformed chunks ---------------------------------------------------------------------------


def _corrupt(array: gpuzarr.Array, key: str, how: str) -> None:
    raw = bytes(array.store.get(key))  # type: ignore[arg-type]
    if how == "truncate":
        array.store.set(key, raw[: len(raw) // 2])
    elif how == "truncate-tail":
        array.store.set(key, raw[:-3])
    else:  # flip bytes in the middle
        mid = len(raw) // 2
        array.store.set(key, raw[:mid] + bytes(b ^ 0x5A for b in raw[mid : mid + 8]) + raw[mid + 8 :])


MALFORMED = [
    ("v3-blosc-lz4-shuffle-u2", "truncate"),
    ("v3-blosc-zstd-bitshuffle-f8", "truncate-tail"),
    ("v3-blosc-zlib-shuffle-i4", "truncate"),
    ("v3-gzip-i2", "truncate"),
    ("v3-gzip-i2", "truncate-tail"),
    ("v3-gzip-i2", "flip"),
    ("v2-zlib-bigendian-i4", "truncate"),
    ("v2-zlib-bigendian-i4", "flip"),
    ("v2-lz4-f8", "truncate"),
    ("v2-lz4-f8", "truncate-tail"),
    ("v3-zstd-f4", "truncate"),
    ("v3-gzip-crc32c-f8", "flip"),
    ("v3-raw-u1", "truncate"),
]


@pytest.mark.parametrize(("name", "how"), MALFORMED)
def test_malformed_chunk_raises_naming_key(name: str, how: str) -> None:
    array = make_array(name)
    key = array.layout.key((1, 1))
    _corrupt(array, key, how)
    with pytest.raises(CorruptChunkError) as info:
        emulated_read(array, Ellipsis)
    assert info.value.key == key
    # The CPU engine agrees that the chunk is corrupt.
    with pytest.raises(CorruptChunkError):
        cpu_result(array, Ellipsis)


@pytest.mark.parametrize(
    ("name", "position", "kind"),
    [
        ("v3-gzip-i2", -8, "crc32"),
        ("v2-zlib-bigendian-i4", -1, "adler32"),
        ("v3-blosc-zlib-shuffle-i4", -1, "adler32"),  # the last zlib stream of the Blosc frame
    ],
)
def test_wrong_checksum_trailer_is_caught_on_the_device(name: str, position: int, kind: str) -> None:
    """The stream still inflates to the right size; only the device checksum kernel can tell."""
    array = make_array(name)
    key = array.layout.key((1, 1))
    raw = bytearray(bytes(array.store.get(key)))  # type: ignore[arg-type]
    raw[position] ^= 0x01
    array.store.set(key, bytes(raw))
    with pytest.raises(CorruptChunkError, match=f"{kind} mismatch") as info:
        emulated_read(array, Ellipsis)
    assert info.value.key == key
    with pytest.raises(CorruptChunkError):
        cpu_result(array, Ellipsis)


def test_every_zlib_stream_of_a_blosc_frame_is_checked() -> None:
    array = make_array("v3-blosc-zlib-shuffle-i4")
    got, device = emulated_read(array, Ellipsis)
    assert_bitwise_equal(got, cpu_result(array, Ellipsis))
    calls = dict(device.calls)
    assert calls["adler32"] == calls["deflate"] > 0  # one Adler-32 per zlib stream


def test_malformed_inner_chunk_names_shard_key() -> None:
    array = make_array("v3-sharded-zstd-crc32c")
    layout = array.layout
    key = layout.key((0, 0))
    raw = bytearray(bytes(array.store.get(key)))  # type: ignore[arg-type]
    raw[20] ^= 0xFF  # inside the first inner chunk: its crc32c no longer matches
    array.store.set(key, bytes(raw))
    with pytest.raises(CorruptChunkError, match="inner chunk") as info:
        emulated_read(array, Ellipsis)
    assert info.value.key == key


def test_result_is_fully_written() -> None:
    """Nothing of the poisoned output survives a read (every element assembled or filled)."""
    array = make_array("v3-sharded-blosc-transpose")
    got, _ = emulated_read(array, Ellipsis)
    expected = cpu_result(array, Ellipsis)
    assert_bitwise_equal(got, expected)
    assert np.count_nonzero(got == np.frombuffer(b"\xab" * 4, "<f4")[0]) == 0


def test_every_gpu_codec_has_a_stream_splitter() -> None:
    """Every codec of routes.ROUTES decodes through a stream splitter (its own, or that of the
    route it decodes as: numcodecs' names for the same streams), and every splitter serves one."""
    routes = {route.decodes_as or name for name, route in ROUTES.items()}
    assert routes == set(SPLITTERS)
    assert {name for name, route in ROUTES.items() if route.decodes_as is None} == set(SPLITTERS)


def test_file_handle_cache_reopens_replaced_files_and_keeps_the_latest() -> None:
    """Handles are keyed by path and file version; beyond its capacity the least recently used
    handle is dropped. (No kvikio: a stand-in records what is opened.)"""
    from gpuzarr.backends.cuda.cupy_device import FileHandleCache
    from gpuzarr.backends.cuda.launches import FileSpan

    opened: list[str] = []

    class FakeKvikio:
        @staticmethod
        def CuFile(path: str, mode: str) -> str:
            opened.append(path)
            return f"{path}#{len(opened)}"

    cache = FileHandleCache(capacity=2)
    a = FileSpan("a", 0, 1, FileVersion(1, 1, 1, 1, 1, 0))
    a_replaced = FileSpan("a", 0, 1, FileVersion(1, 1, 2, 2, 1, 0))
    b, c = FileSpan("b", 0, 1), FileSpan("c", 0, 1)
    assert cache.handle(FakeKvikio, a) == cache.handle(FakeKvikio, a) == "a#1"
    assert cache.handle(FakeKvikio, a_replaced) == "a#2"
    cache.handle(FakeKvikio, b)  # drops (a, version 1)
    cache.handle(FakeKvikio, a_replaced)
    cache.handle(FakeKvikio, c)  # drops b, the least recently used
    assert cache.handle(FakeKvikio, a_replaced) == "a#2"
    assert cache.handle(FakeKvikio, a) == "a#5"
    assert opened == ["a", "a", "b", "c", "a"]


def test_a_file_kvikio_cannot_open_raises_the_systems_refusal_where_there_is_one(tmp_path: Any) -> None:
    """kvikio's failed open does not say why; the system's own error does, and the executor
    makes the store's error (or a new read of the batch) of it. (A stand-in for kvikio.)"""
    from gpuzarr.backends.cuda.cupy_device import FileHandleCache
    from gpuzarr.backends.cuda.launches import FileSpan

    class RefusingKvikio:
        @staticmethod
        def CuFile(path: str, mode: str) -> str:
            raise RuntimeError("cuFile: cannot open")

    cache = FileHandleCache(capacity=2)
    missing = str(tmp_path / "gone")
    with pytest.raises(FileNotFoundError) as caught:
        cache.handle(RefusingKvikio, FileSpan(missing, 0, 1))
    assert caught.value.filename == missing
    present = tmp_path / "present"
    present.write_bytes(b"x")
    with pytest.raises(RuntimeError, match="cuFile: cannot open"):  # opens here: kvikio's own error
        cache.handle(RefusingKvikio, FileSpan(str(present), 0, 1))


@pytest.mark.parametrize(
    ("name", "factor"),
    [
        ("v3-zstd-f4", 2 + ZSTD_SCRATCH_PER_BYTE),  # encoded, decoded, nvCOMP's zstd scratch
        ("v3-gzip-i2", 2),
        ("v3-raw-u1", 2),
    ],
)
def test_batch_cost_counts_nvcomp_scratch(name: str, factor: float) -> None:
    array = make_array(name)
    route = decode_route(array.layout.chunk_pipeline)
    decoded = array.layout.chunk_pipeline.spec.nbytes
    assert task_cost(route, decoded) == pytest.approx(factor * align(decoded), abs=1)
    # A budget of one zstd chunk's decoded + encoded bytes no longer holds one with its scratch.
    plan = plan_selection((slice(0, 32), slice(0, 48)), array.layout.dimensions())
    gpu = build_gpu_read_plan(array.layout, plan, budget=4 * task_cost(route, decoded))
    assert all(len(b) <= 4 for b in gpu.batches)


def test_blosc_zstd_is_charged_nvcomps_scratch() -> None:
    zstd = decode_route(make_array("v3-blosc-zstd-bitshuffle-f8").layout.chunk_pipeline)
    lz4 = decode_route(make_array("v3-blosc-lz4-shuffle-u2").layout.chunk_pipeline)
    assert (zstd.scratch, lz4.scratch) == (ZSTD_SCRATCH_PER_BYTE, 0)
    assert task_cost(zstd, 1000) == 3 * 1000 + math.ceil(ZSTD_SCRATCH_PER_BYTE * 1000)
