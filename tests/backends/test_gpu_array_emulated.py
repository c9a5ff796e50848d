"""``Array`` reads on device="gpu", run end to end with an emulated device (see emulated_gpu.py):
device resolution, the reader's fallbacks and strict mode, ``out=``, ``read_batch``, direct file
reads (the kvikio route), batches prepared ahead, and corrupt input, all against the CPU engine."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import pytest

import gpuzarr
from gpuzarr import config
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice
from gpuzarr.errors import ChunkNotFoundError, CorruptChunkError, DeviceError

from .cuda_matrix import (
    ARRAYS,
    SELECTIONS,
    assert_bitwise_equal,
    cpu_result,
    make_array,
    make_local_array,
    open_on_gpu,
)

if TYPE_CHECKING:
    from .emulated_gpu import EmulatedGpu

# -- device resolution ---------------------------------------------------------------------------


def test_device_strings_resolve(emulated_gpu: EmulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    store = gpuzarr.MemoryStore()
    gpuzarr.create(store, shape=(4,), dtype="u1", chunks=(2,))
    assert gpuzarr.open(store, device="gpu").device == "cuda:0"
    assert gpuzarr.open(store, device="cuda").device == "cuda:0"
    assert gpuzarr.open(store, device="cuda:1").device == "cuda:1"
    assert gpuzarr.open(store, device="auto").device == "cuda:0"
    assert gpuzarr.open(store).device == "cuda:0"
    assert gpuzarr.open(store, device="cpu").device == "cpu"
    with pytest.raises(DeviceError, match="2 CUDA device"):
        gpuzarr.open(store, device="cuda:2")
    with pytest.raises(DeviceError, match="cuda:N"):
        gpuzarr.open(store, device="cuda:x")
    monkeypatch.setenv("GPUZARR_DEVICE", "cpu")
    assert gpuzarr.open(store).device == "cpu"
    assert gpuzarr.open(store, device="gpu").device == "cuda:0"  # explicit beats the variable
    monkeypatch.setenv("GPUZARR_DEVICE", "cuda:1")
    assert gpuzarr.open(store).device == "cuda:1"
    monkeypatch.setenv("GPUZARR_DEVICE", "tpu")
    with pytest.raises(DeviceError, match="GPUZARR_DEVICE"):
        gpuzarr.open(store)


def test_without_a_gpu_auto_is_cpu_and_gpu_names_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuzarr.backends import select as device

    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: "CuPy is not installed; install the gpu extra")
    monkeypatch.delenv("GPUZARR_DEVICE", raising=False)
    store = gpuzarr.MemoryStore()
    gpuzarr.create(store, shape=(4,), dtype="u1", chunks=(2,))
    assert gpuzarr.open(store).device == "cpu"
    with pytest.raises(DeviceError, match="gpu extra"):
        gpuzarr.open(store, device="gpu")


# -- the matrix, through Array ------------------------------------------------------------------------


@pytest.fixture(scope="module", params=sorted(ARRAYS))
def local_array(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> gpuzarr.Array:
    root = tmp_path_factory.mktemp("matrix") / f"{request.param}.zarr"
    return make_array(request.param, gpuzarr.LocalStore(root))


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_gpu_array_reads_match_cpu(emulated_gpu: EmulatedGpu, local_array: gpuzarr.Array, selection: str) -> None:
    gpu = open_on_gpu(local_array)
    sel = SELECTIONS[selection]
    got = gpu.read(sel)
    assert_bitwise_equal(np.asarray(got), cpu_result(local_array, sel))
    item = gpu[sel]
    assert_bitwise_equal(np.asarray(item), np.asarray(cpu_result(local_array, sel)))


def test_direct_file_reads_for_zstd_and_raw(emulated_gpu: EmulatedGpu, local_array: gpuzarr.Array) -> None:
    name = Path(str(local_array.store.root)).name
    open_on_gpu(local_array)[...]
    assert ("read_files" in emulated_gpu.names()) == (name in DIRECT), emulated_gpu.calls()


@pytest.mark.parametrize(
    ("setting", "gds", "direct"),
    [("auto", True, True), ("auto", False, True), (True, False, True), (False, True, False), (False, False, False)],
)
def test_direct_route_switch(
    emulated_gpu: EmulatedGpu, tmp_path: Path, setting: object, gds: bool, direct: bool
) -> None:
    """``gpu_direct_reads``: "auto" (as True) reads files on the device with or without
    GPUDirect Storage; False reads them on the host. Both routes give the CPU's result."""
    emulated_gpu.gds = gds
    for name in ("v3-zstd-f4", "v3-raw-u1"):
        array = make_array(name, gpuzarr.LocalStore(tmp_path / f"{name}.zarr"))
        with config.set(gpu_direct_reads=setting):
            got = open_on_gpu(array)[...]
        assert_bitwise_equal(np.asarray(got), cpu_result(array, Ellipsis))
    assert ("read_files" in emulated_gpu.names()) == direct, emulated_gpu.calls()


def test_direct_route_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="'auto', True or False"):
        config.set(gpu_direct_reads="yes")


#: the arrays whose chunks the device reads from their files (zstd or uncompressed, no crc32c)
DIRECT = {
    "v3-zstd-f4.zarr",
    "v3-numcodecs-zstd-f4.zarr",
    "v3-zstd-bigendian-i8.zarr",
    "v3-zstd-bigendian-c8.zarr",
    "v3-raw-u1.zarr",
    "v3-sharded-raw-u2.zarr",
    "v3-transpose-zstd.zarr",
}


def test_memory_store_reads_through_the_host(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-zstd-f4")
    assert_bitwise_equal(open_on_gpu(array)[...], cpu_result(array, Ellipsis))
    assert "read_files" not in emulated_gpu.names()
    assert ("zstd", 9) in emulated_gpu.calls()  # 45 x 61 in 16 x 24 chunks: 3 x 3 streams, one call


@pytest.mark.parametrize("budget", [1, 5000])
def test_many_batches_prepared_ahead(emulated_gpu: EmulatedGpu, local_array: gpuzarr.Array, budget: int) -> None:
    with config.set(gpu_batch_bytes=budget):
        got = open_on_gpu(local_array)[...]
    assert_bitwise_equal(got, cpu_result(local_array, Ellipsis))
    assert emulated_gpu.names().count("assemble_chunks") > 1


# -- read_batch, out=, stream= -----------------------------------------------------------------------


def test_read_batch_is_one_assemble_launch(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-sharded-zstd-crc32c")
    gpu = open_on_gpu(array)
    boxes = [(slice(3, 20), slice(7, 30)), (slice(20, 37), slice(30, 53)), (slice(0, 17), slice(0, 23))]
    got = gpu.read_batch(boxes)
    expected = np.stack([cpu_result(array, b) for b in boxes])
    assert_bitwise_equal(got, expected)
    assert emulated_gpu.names().count("assemble_chunks") == 1
    out = np.empty_like(expected)
    assert gpu.read_batch(boxes, out=out) is out
    assert_bitwise_equal(out, expected)


def test_read_batch_of_rows_and_of_points(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-gzip-i2")
    gpu = open_on_gpu(array)
    rows = [(3, slice(5, 50)), (40, slice(5, 50))]
    assert_bitwise_equal(gpu.read_batch(rows), np.stack([cpu_result(array, r) for r in rows]))
    points = [(1, 2), (44, 60)]  # no axis to carry the batch index: read on the CPU, copied once
    assert_bitwise_equal(gpu.read_batch(points), np.stack([cpu_result(array, p) for p in points]))


def test_out_is_filled_in_place(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-blosc-lz4-shuffle-u2")
    gpu = open_on_gpu(array)
    sel = (slice(2, 40), slice(3, 50))
    expected = cpu_result(array, sel)
    out = np.zeros(expected.shape, expected.dtype)
    assert gpu.read(sel, out=out, stream=object()) is out
    assert_bitwise_equal(out, expected)
    big = np.zeros((expected.shape[0], expected.shape[1] * 2), expected.dtype)
    strided = big[:, ::2]
    assert gpu.read(sel, out=strided) is strided
    assert_bitwise_equal(strided, expected)
    assert not big[:, 1::2].any()
    with pytest.raises(ValueError, match="shape"):
        gpu.read(sel, out=np.zeros((2, 2), expected.dtype))
    with pytest.raises(TypeError, match="cupy"):
        gpu.read(sel, out=[[0]])


def test_device_array_converts_to_numpy(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-raw-u1")
    assert_bitwise_equal(np.asarray(open_on_gpu(array)), cpu_result(array, Ellipsis))


# -- fallbacks and strict ----------------------------------------------------------------------------


def test_selections_that_are_not_boxes_are_read_on_the_device(
    emulated_gpu: EmulatedGpu, caplog: pytest.LogCaptureFixture
) -> None:
    array = make_array("v3-sharded-blosc-transpose")
    gpu = open_on_gpu(array)
    cpu = gpuzarr.open(array.store, device="cpu")
    rows = np.array([40, 3, 9, 3])
    mask = np.zeros(61, dtype=bool)
    mask[[0, 7, 60]] = True
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert_bitwise_equal(gpu.oindex[rows, 5:20], cpu.oindex[rows, 5:20])
        assert_bitwise_equal(gpu.oindex[rows, mask], cpu.oindex[rows, mask])
        assert_bitwise_equal(gpu.vindex[rows, rows + 1], cpu.vindex[rows, rows + 1])
        assert_bitwise_equal(gpu[::-1, 3], cpu[::-1, 3])
        assert_bitwise_equal(gpu[rows], cpu[rows])
        assert_bitwise_equal(gpu[5, [9, 2]], cpu[5, [9, 2]])
        assert_bitwise_equal(gpu[40:2:-7, ::-3], cpu[40:2:-7, ::-3])
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    # the two negative steps are read ascending and reversed, without a gather
    assert emulated_gpu.names().count("gather") == 5
    strict = open_on_gpu(array)
    strict.strict = True
    assert_bitwise_equal(strict.vindex[rows, rows], cpu.vindex[rows, rows])


def test_sparse_points_fall_back_to_the_cpu_once(emulated_gpu: EmulatedGpu, caplog: pytest.LogCaptureFixture) -> None:
    store = gpuzarr.MemoryStore()
    array = gpuzarr.create(store, shape=(20000, 20000), dtype="u1", chunks=(1000, 1000), fill_value=3)
    array[0:2, 0:2] = np.array([[1, 2], [4, 5]], dtype="u1")
    gpu = open_on_gpu(array)
    points = (np.array([0, 19999, 1]), np.array([1, 19999, 0]))
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert gpu.vindex[points].tolist() == [2, 3, 4]
        assert gpu.vindex[points].tolist() == [2, 3, 4]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "bounding box" in messages[0], messages
    assert "from_host" in emulated_gpu.names()
    strict = open_on_gpu(array)
    strict.strict = True
    with pytest.raises(DeviceError, match="strict"):
        strict.vindex[points]
    with config.set(strict=True), pytest.raises(DeviceError, match="strict"):
        open_on_gpu(array).vindex[points]


def test_rows_far_apart_in_small_chunks_are_not_read_as_a_box_of_every_chunk_between(
    emulated_gpu: EmulatedGpu, caplog: pytest.LogCaptureFixture
) -> None:
    """A box of a few MiB can still hold a million chunks: rows far apart of an array of small
    chunks are read by the CPU engine (the chunks they touch), not gathered from the box
    (every chunk between them, missing ones filled)."""
    store = gpuzarr.MemoryStore()
    array = gpuzarr.create(store, shape=(60000, 4), dtype="<i4", chunks=(3, 2), fill_value=7, device="cpu")
    array[0:3, :] = np.arange(12, dtype="<i4").reshape(3, 4)
    array[59997:, :] = -np.arange(12, dtype="<i4").reshape(3, 4)
    gpu = open_on_gpu(array)
    rows = np.array([0, 30000, 59999])
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert_bitwise_equal(gpu.oindex[rows, :], gpuzarr.open(store, device="cpu").oindex[rows, :])
    assert "gather" not in emulated_gpu.names()
    assert any("bounding box is much larger" in r.getMessage() for r in caplog.records)
    # Rows close together (a box of few chunks) are still gathered on the device.
    near = np.array([4, 0, 11])
    assert_bitwise_equal(gpu.oindex[near, 1:3], gpuzarr.open(store, device="cpu").oindex[near, 1:3])
    assert "gather" in emulated_gpu.names()


@pytest.mark.parametrize(
    "dtype", [np.dtype([("a", "<i4"), ("b", "<f8", (2,))]), np.dtype(ml_dtypes.bfloat16), np.dtype("V3")]
)
def test_types_cupy_cannot_hold_stay_on_the_cpu(emulated_gpu: EmulatedGpu, dtype: np.dtype[Any]) -> None:
    store = gpuzarr.MemoryStore()
    fmt = 2 if dtype.fields else 3
    gpuzarr.create(store, zarr_format=fmt, shape=(9,), dtype=dtype, chunks=(4,), device="cpu")
    assert gpuzarr.open(store).device == "cpu"
    assert isinstance(gpuzarr.open(store)[...], np.ndarray)
    with pytest.raises(DeviceError, match="cannot hold the data type"):
        gpuzarr.open(store, device="gpu")


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(
    ("dtype", "why"),
    [
        ("string", "variable-length strings and bytes are Python objects"),
        ("variable_length_bytes", "variable-length strings and bytes are Python objects"),
        ("M8[s]", "datetime64"),
        ("m8[ns]", "timedelta64"),
        ("S4", "S4"),
        ("U3", "U3"),
    ],
)
def test_strings_bytes_and_times_stay_on_the_cpu(
    emulated_gpu: EmulatedGpu, zarr_format: int, dtype: str, why: str
) -> None:
    store = gpuzarr.MemoryStore()
    gpuzarr.create(store, zarr_format=zarr_format, shape=(9,), dtype=dtype, chunks=(4,), device="cpu")
    a = gpuzarr.open(store)
    assert a.device == "cpu"
    assert isinstance(a[...], np.ndarray) and a[...].dtype == a.dtype
    assert emulated_gpu.devices == []
    with pytest.raises(DeviceError, match=f"device='gpu': CuPy arrays cannot hold the data type .*{why}.*'cpu'"):
        gpuzarr.open(store, device="gpu")
    with pytest.raises(DeviceError, match="cannot hold the data type"):
        gpuzarr.open(store, device="cuda:1")


@pytest.mark.parametrize(
    "name",
    [
        "v2-delta-filter-cpu",
        "v3-blosc-blosclz-cpu",
        "v3-transpose-outside-sharding-cpu",
        "v3-numcodecs-delta-filter-cpu",
    ],
)
def test_codecs_without_a_gpu_decoder(
    emulated_gpu: EmulatedGpu, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    array = make_array(name)
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert_bitwise_equal(open_on_gpu(array)[...], cpu_result(array, Ellipsis))
    assert any("runs on the CPU" in r.getMessage() for r in caplog.records)
    strict = open_on_gpu(array)
    strict.strict = True
    with pytest.raises(DeviceError, match="strict"):
        strict[...]


# -- bad input -----------------------------------------------------------------------------------------


def _chunk_files(array: gpuzarr.Array) -> list[str]:
    root = Path(str(array.store.root))
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith(("zarr.json", ".z")))


def test_truncated_raw_chunk_names_its_key(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    array = make_local_array(tmp_path, "v3-raw-u1")
    victim = _chunk_files(array)[0]
    os.truncate(victim, 10)
    with pytest.raises(CorruptChunkError, match=r"c/0/0.*10 bytes"):
        open_on_gpu(array)[...]


def test_corrupt_zstd_chunk_read_from_the_file(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    array = make_local_array(tmp_path, "v3-zstd-f4")
    victim = _chunk_files(array)[1]
    data = bytearray(Path(victim).read_bytes())
    data[len(data) // 2 :] = b"\x00" * (len(data) - len(data) // 2)
    Path(victim).write_bytes(bytes(data))
    key = Path(victim).relative_to(tmp_path / "a.zarr").as_posix()
    with pytest.raises(CorruptChunkError, match=key):
        open_on_gpu(array)[...]
    Path(victim).write_bytes(b"\x28\xb5")
    with pytest.raises(CorruptChunkError, match=key):
        open_on_gpu(array)[...]


def test_shard_whose_index_points_past_its_end(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]
    kwargs = {"shards": (32, 48), "codecs": codecs}
    array = gpuzarr.create(
        gpuzarr.LocalStore(tmp_path / "s.zarr"), shape=(64, 96), dtype="u2", chunks=(16, 24), **kwargs
    )
    array[...] = np.arange(64 * 96, dtype="u2").reshape(64, 96)
    shard = tmp_path / "s.zarr" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    index = np.frombuffer(bytes(data[-(16 * 4 + 4) : -4]), dtype="<u8").reshape(4, 2).copy()
    index[0, 0] = len(data) - 10  # inner chunk 0 now runs past the shard's end
    data[-(16 * 4 + 4) : -4] = index.tobytes()
    from gpuzarr.codecs.crc32c import crc32c

    data[-4:] = int(crc32c(np.frombuffer(bytes(data[-(16 * 4 + 4) : -4]), np.uint8))).to_bytes(4, "little")
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptChunkError, match="c/0/0"):
        open_on_gpu(array)[0:16, 0:24]


def test_missing_chunks_raise_when_asked(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-missing-chunks-gzip")
    gpu = gpuzarr.Array(array.store, array.path, array.metadata, device="gpu", fill_missing_data_reads=False)
    with pytest.raises(ChunkNotFoundError):
        gpu[...]


class _FlakyDevice(CpuEmulatedDevice):
    """Fails the first stream of every batched decode and reports wrong checksums: the device
    saying no must not turn valid chunks into errors."""

    def decompress_batch(self, algorithm: str, *args: Any) -> Any:
        pending = super().decompress_batch(algorithm, *args)

        def sizes() -> Any:
            got = pending().copy()
            got[0] = -1
            return got

        return sizes

    def checksums(self, kind: Any, buffer: Any, offsets: Any, nbytes: Any) -> Any:
        pending = super().checksums(kind, buffer, offsets, nbytes)
        return lambda: [v ^ 1 for v in pending()]


@pytest.mark.parametrize("name", ["v3-zstd-f4", "v3-gzip-i2", "v2-zlib-bigendian-i4", "v3-blosc-zstd-bitshuffle-f8"])
def test_streams_the_device_fails_are_decoded_on_the_cpu(
    emulated_gpu: EmulatedGpu,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    name: str,
) -> None:
    emulated_gpu.device_class = _FlakyDevice
    array = make_array(name, gpuzarr.LocalStore(tmp_path / "a.zarr"))
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert_bitwise_equal(open_on_gpu(array)[...], cpu_result(array, Ellipsis))
    assert any("could not decode" in r.getMessage() for r in caplog.records)
    strict = open_on_gpu(array)
    strict.strict = True
    with pytest.raises(DeviceError, match="strict"):
        strict[...]


class _LenientLz4Device(CpuEmulatedDevice):
    """LZ4 decoded as nvCOMP 6.0 does on an H100: a truncated or corrupt block raises nothing and
    reports its full expected size (the output is whatever the decoder wrote)."""

    def decompress_batch(self, algorithm: str, src: Any, *spans: Any) -> Any:
        pending = super().decompress_batch(algorithm, src, *spans)
        dst_nbytes = spans[-1]
        if algorithm != "lz4":
            return pending
        return lambda: [n if n >= 0 else int(expected) for n, expected in zip(pending(), dst_nbytes, strict=True)]


def _spoil_first_lz4_block(path: Path, blosc: bool) -> None:
    """Overwrite the first LZ4 block of a chunk with 0xff bytes (a literal length that runs past
    the block), leaving every size the host checks (numcodecs' prefix, Blosc's header, block
    table and stream sizes) as it was."""
    data = bytearray(path.read_bytes())
    start, size = 4, len(data) - 4  # numcodecs LZ4: the decoded size, then the block
    if blosc:
        first = int.from_bytes(data[16:20], "little")  # block table: the first block's offset
        start, size = first + 4, int.from_bytes(data[first : first + 4], "little")
    data[start : start + size] = b"\xff" * size
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["v2-lz4-f8", "v3-blosc-lz4-shuffle-u2"])
def test_corrupt_lz4_blocks_are_caught_although_the_decoder_reports_none(
    emulated_gpu: EmulatedGpu, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    from gpuzarr.backends.cuda import executor

    emulated_gpu.device_class = _LenientLz4Device
    kwargs, dtype, _ = ARRAYS[name]
    store = gpuzarr.LocalStore(tmp_path / "a.zarr")
    array = gpuzarr.create(store, shape=(64, 96), dtype=dtype, chunks=(32, 48), **kwargs)
    array[...] = (np.arange(64 * 96) // 5 % 300).astype(dtype).reshape(64, 96)  # every block compresses
    assert_bitwise_equal(open_on_gpu(array)[...], cpu_result(array, Ellipsis))
    assert "lz4_check" in emulated_gpu.names()
    key = array.layout.key((1, 1))
    _spoil_first_lz4_block(tmp_path / "a.zarr" / key, blosc=name.startswith("v3-blosc"))
    with pytest.raises(CorruptChunkError, match=key.replace(".", r"\.")):
        open_on_gpu(array)[...]
    # The walk is what catches it: without it the read succeeds with whatever nvCOMP wrote.
    monkeypatch.setattr(executor, "_queue_lz4_checks", lambda *args: [])
    open_on_gpu(array)[...]


def _raw_block_frame(payload: bytes) -> bytes:
    """A valid Zstandard frame that declares no content size: one raw block, 2 MiB window."""
    block_header = (1 | (len(payload) << 3)).to_bytes(3, "little")  # last block, raw
    return bytes.fromhex("28b52ffd") + bytes([0x00, 0x58]) + block_header + payload


def test_zstd_frames_without_a_content_size_decode_on_the_cpu(
    emulated_gpu: EmulatedGpu, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    array = make_local_array(tmp_path, "v3-zstd-f4")
    chunk = tmp_path / "a.zarr" / "c" / "0" / "0"
    expected = cpu_result(array, Ellipsis)
    chunk.write_bytes(_raw_block_frame(np.ascontiguousarray(expected[:16, :24]).tobytes()))
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    assert any("declares no content size" in r.getMessage() for r in caplog.records)
    chunk.write_bytes(_raw_block_frame(np.ascontiguousarray(expected[:16, :20]).tobytes()))
    with pytest.raises(CorruptChunkError, match="c/0/0"):
        open_on_gpu(array)[...]


def test_strict_still_calls_corrupt_chunks_corrupt(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    array = make_local_array(tmp_path, "v3-zstd-f4")
    victim = tmp_path / "a.zarr" / "c" / "1" / "1"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)
    victim.write_bytes(bytes(data))
    strict = open_on_gpu(array)
    strict.strict = True
    with pytest.raises(CorruptChunkError, match="c/1/1"):
        strict[...]


def test_arrays_beyond_the_kernel_read_on_the_cpu(emulated_gpu: EmulatedGpu, caplog: pytest.LogCaptureFixture) -> None:
    store = gpuzarr.MemoryStore()
    shape = (2,) * 9
    array = gpuzarr.create(store, shape=shape, dtype="<u2", chunks=shape, device="cpu")
    array[...] = np.arange(512, dtype="<u2").reshape(shape)
    with caplog.at_level(logging.WARNING, logger="gpuzarr"):
        assert_bitwise_equal(open_on_gpu(array)[1], np.arange(256, 512, dtype="<u2").reshape(shape[1:]))
    assert "gather" not in emulated_gpu.names()
    assert any("9-d arrays" in r.getMessage() for r in caplog.records)


def test_concurrent_readers_share_an_array(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    """Data-loader workers read one array from several threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    array = make_local_array(tmp_path, "v3-sharded-zstd-crc32c")
    gpu = open_on_gpu(array)
    boxes = [(slice(i % 20, i % 20 + 17), slice(i % 30, i % 30 + 23)) for i in range(40)]
    expected = [cpu_result(array, b) for b in boxes]
    # A small batch budget gives several batches per read, so the prefetch threads run too.
    with config.set(gpu_batch_bytes=4096), ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: gpu.read(b), boxes))
    for g, e in zip(got, expected, strict=True):
        assert_bitwise_equal(g, e)


# -- host staging memory -------------------------------------------------------------------------


def test_random_crops_keep_staging_memory_bounded(emulated_gpu: EmulatedGpu) -> None:
    """500 reads of random crops (every one a different staging size) reuse at most two staging
    blocks per device, grown a few times, never one new block per read."""
    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    rng = np.random.default_rng(7)
    budget = 3000  # several batches per read: batch k+1 is bound while batch k runs
    sizes = set()
    with config.set(gpu_batch_bytes=budget):
        for i in range(500):
            r0, c0 = int(rng.integers(0, 40)), int(rng.integers(0, 55))
            box = (slice(r0, r0 + int(rng.integers(1, 46 - r0))), slice(c0, c0 + int(rng.integers(1, 62 - c0))))
            got = gpu[box]
            sizes.add(got.shape)
            if i % 50 == 0:
                assert_bitwise_equal(got, cpu_result(array, box))
    pool = emulated_gpu.staging.pool(0)
    assert len(sizes) > 100
    assert pool.nblocks <= 2
    assert pool.allocations <= 8  # geometric growth, not one block per read or per batch
    assert pool.allocations >= 1 and pool.unpooled == 0  # one read at a time never needs a third buffer
    largest_chunk = 16 * 24 * 4 + 64  # a zstd frame of one 16 x 24 float32 chunk, at most
    assert pool.nbytes <= 2 * max(budget, 4 * largest_chunk)


def test_staging_copies_are_asynchronous_and_blocks_wait_for_them(emulated_gpu: EmulatedGpu) -> None:
    """Each batch's host-to-device copy records an event that nobody waits for in the batch; the
    pool hands its staging block out again only once that event has completed."""
    from gpuzarr.backends.cuda.numpy_device import EmulatedEvent

    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    pool = emulated_gpu.staging.pool(0)
    acquire, release = pool.acquire, pool.release
    pending_at_release: list[bool] = []

    def copies() -> list[EmulatedEvent]:
        return [event for device in emulated_gpu.devices for event in device.copies]

    def checked_acquire(nbytes: int, cap: int | None = None) -> np.ndarray:
        buffer = acquire(nbytes, cap)
        for event in copies():  # no copy still reads the block handed out
            assert event.done or not np.shares_memory(event.host, buffer)
        return buffer

    def recorded_release(buffer: np.ndarray, ready: Any = None) -> None:
        pending_at_release.append(ready is not None and not ready.done)
        release(buffer, ready)

    pool.acquire = checked_acquire  # type: ignore[method-assign]
    pool.release = recorded_release  # type: ignore[method-assign]
    with config.set(gpu_batch_bytes=3000):  # several batches sharing the two blocks
        for box in [(slice(None), slice(None)), (slice(3, 40), slice(5, 60)), (slice(0, 20), slice(None))]:
            assert_bitwise_equal(gpu[box], cpu_result(array, box))
    assert len(copies()) > 4
    assert any(pending_at_release)  # the copies were still in flight when their batch ended
    for event in copies():  # no host buffer changed while its copy was in flight
        event.synchronize()


def test_uploads_and_file_reads_run_on_the_prefetch_thread(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    """With several batches, every batch is read, bound, uploaded and (direct reads) read from
    its files on a helper thread, so that none of it sits between two batches' device work;
    the device buffers come from a pool of at most four blocks and all go back."""
    array = make_array("v3-zstd-f4", gpuzarr.LocalStore(tmp_path / "a.zarr"))
    expected = cpu_result(array, Ellipsis)
    with config.set(gpu_batch_bytes=3000):
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    threads = [(call, name) for device in emulated_gpu.devices for call, name in device.threads]
    assert {call for call, _ in threads} == {"read_files"}  # zstd frames: read by the device itself
    assert len(threads) > 2 and all(name.startswith("gpuzarr-prefetch") for _, name in threads)
    buffers = emulated_gpu.buffers.pool(0)
    assert 2 <= buffers.nblocks <= 4 and buffers.nin_use == 0
    # The host route (no direct reads): uploads on the helper thread, waited for on the device.
    with config.set(gpu_batch_bytes=3000, gpu_direct_reads=False):
        assert_bitwise_equal(open_on_gpu(array)[...], expected)
    device = emulated_gpu.devices[-1]
    assert {call for call, _ in device.threads} == {"upload"}
    assert all(name.startswith("gpuzarr-prefetch") for _, name in device.threads)
    names = [n for n, _ in device.calls]
    assert names.count("upload") == names.count("wait_for") == names.count("assemble_chunks") > 2


def test_a_read_that_fails_gives_its_device_buffers_back(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-zstd-f4")
    key = array.layout.key((2, 1))
    array.store.set(key, b"\x28\xb5\x2f\xfd" + b"\0" * 5)  # a zstd magic number, then nothing
    with config.set(gpu_batch_bytes=3000), pytest.raises(CorruptChunkError) as caught:
        open_on_gpu(array)[...]
    assert caught.value.key == key
    assert emulated_gpu.buffers.pool(0).nin_use == 0
    assert emulated_gpu.staging.pool(0).nin_use == 0


def test_random_crops_keep_device_buffers_bounded(emulated_gpu: EmulatedGpu) -> None:
    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    rng = np.random.default_rng(11)
    with config.set(gpu_batch_bytes=3000):
        for i in range(200):
            r0, c0 = int(rng.integers(0, 40)), int(rng.integers(0, 55))
            box = (slice(r0, r0 + int(rng.integers(1, 46 - r0))), slice(c0, c0 + int(rng.integers(1, 62 - c0))))
            got = gpu[box]
            if i % 40 == 0:
                assert_bitwise_equal(got, cpu_result(array, box))
    pool = emulated_gpu.buffers.pool(0)
    assert pool.nblocks <= 4 and pool.nin_use == 0 and pool.unpooled == 0
    assert pool.allocations <= 16  # geometric growth, not blocks per read or per batch


def test_the_emulated_event_catches_a_buffer_refilled_too_soon() -> None:
    from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice

    device = CpuEmulatedDevice()
    host = np.arange(8, dtype=np.uint8)
    dst = device.alloc(8)
    event = device.copy_host_to_device(host, dst)
    assert not event.done and dst.tolist() == list(range(8))
    host[0] = 99
    with pytest.raises(RuntimeError, match="changed before"):
        event.synchronize()


def test_concurrent_readers_fall_back_to_unpooled_staging(emulated_gpu: EmulatedGpu) -> None:
    """Four readers on one device: at most two pooled blocks, the rest of the staging buffers are
    ordinary host memory, and every read is right."""
    from concurrent.futures import ThreadPoolExecutor

    array = make_array("v3-zstd-f4")
    gpu = open_on_gpu(array)
    boxes = [(slice(i % 20, i % 20 + 17 + i % 5), slice(i % 30, i % 30 + 23)) for i in range(40)]
    with config.set(gpu_batch_bytes=4096), ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: gpu[b], boxes))
    for g, b in zip(got, boxes, strict=True):
        assert_bitwise_equal(g, cpu_result(array, b))
    staging = emulated_gpu.staging.pool(0)
    assert staging.nblocks <= 2
    assert staging.allocations >= 1


def _sharded_u2(tmp_path: Path, shape: tuple[int, int], compressed: bool) -> gpuzarr.Array:
    """A local sharded uint16 array of ``shape`` (inner chunks 16 x 24, shards 32 x 48), its
    inner chunks zstd or uncompressed, holding 0, 1, 2, ..."""
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, *([{"name": "zstd"}] if compressed else [])]
    store = gpuzarr.LocalStore(tmp_path / "s.zarr")
    array = gpuzarr.create(store, shape=shape, dtype="u2", chunks=(16, 24), shards=(32, 48), codecs=codecs)
    array[...] = np.arange(shape[0] * shape[1], dtype="u2").reshape(shape)
    return array


@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "uncompressed"])
def test_inner_chunks_of_a_shard_are_read_at_once(emulated_gpu: EmulatedGpu, tmp_path: Path, compressed: bool) -> None:
    """The zstd or uncompressed inner chunks of one shard file lie side by side: the device
    reads each shard's wanted chunks in one read (4 shards, 4 inner chunks each), with the CPU's
    result."""
    array = _sharded_u2(tmp_path, (64, 96), compressed)
    cases: list[tuple[Any, int]] = [
        (Ellipsis, 4),
        ((slice(0, 32), slice(0, 48)), 1),
        ((slice(20, 50), slice(10, 90)), 4),  # 2 of shard (0, 0)'s 4 inner chunks, side by side
    ]
    for selection, shards in cases:
        emulated_gpu.devices.clear()
        got = open_on_gpu(array)[selection]
        assert_bitwise_equal(np.asarray(got), cpu_result(array, selection))
        reads = [n for name, n in emulated_gpu.calls() if name == "read_files"]
        assert sum(reads) == shards, emulated_gpu.calls()


def test_uncompressed_chunks_of_odd_sizes_are_read_one_by_one(emulated_gpu: EmulatedGpu, tmp_path: Path) -> None:
    """Inner chunks of 5 x 7 bytes: each one's place in the work buffer is followed by padding,
    so one read of two of them would misplace the second. Each is read alone."""
    array = gpuzarr.create(
        gpuzarr.LocalStore(tmp_path / "s.zarr"),
        shape=(10, 14),
        dtype="u1",
        chunks=(5, 7),
        shards=(10, 14),
        codecs=[{"name": "bytes"}],
    )
    array[...] = np.arange(140, dtype="u1").reshape(10, 14)
    got = open_on_gpu(array)[...]
    assert_bitwise_equal(np.asarray(got), cpu_result(array, Ellipsis))
    assert [n for name, n in emulated_gpu.calls() if name == "read_files"] == [4]


@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "uncompressed"])
def test_short_read_of_a_coalesced_shard_names_the_inner_chunk(
    emulated_gpu: EmulatedGpu, tmp_path: Path, compressed: bool
) -> None:
    """A shard file cut short after its index was read: the error names the shard and the inner
    chunk whose bytes the one read of the shard did not get."""

    class ShortReads(CpuEmulatedDevice):
        def read_files(self, reads: Any, staging: Any, work: Any) -> list[int]:
            done = super().read_files(reads, staging, work)
            return [n - 1 for n in done]

    array = _sharded_u2(tmp_path, (32, 48), compressed)
    emulated_gpu.device_class = ShortReads
    with pytest.raises(CorruptChunkError, match=r"c/0/0.*inner chunk.*ended after"):
        open_on_gpu(array)[...]


@pytest.mark.parametrize("name", ["v3-raw-u1", "v3-zstd-f4"])
def test_direct_reads_refuse_a_chunk_linked_out_of_the_store(
    emulated_gpu: EmulatedGpu, tmp_path: Path, name: str
) -> None:
    from gpuzarr.errors import SymlinkEscapeError

    array = make_local_array(tmp_path, name)
    victim = Path(_chunk_files(array)[0])
    outside = tmp_path / "outside"
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(outside)
    key = victim.relative_to(tmp_path / "a.zarr").as_posix()
    with config.set(gpu_direct_reads=True), pytest.raises(SymlinkEscapeError, match=key):
        open_on_gpu(array)[...]
    assert "read_files" not in emulated_gpu.names()


def test_a_bfloat16_array_refused_on_the_gpu_points_to_the_loader(emulated_gpu: EmulatedGpu) -> None:
    """CuPy holds no bfloat16: ``device="gpu"`` refuses the array and says the loader reads it
    on the GPU (as its bits); a type without such a carrier gets no such pointer."""
    import ml_dtypes

    store = gpuzarr.MemoryStore()
    gpuzarr.create(store, shape=(4,), dtype=ml_dtypes.bfloat16, chunks=(2,), device="cpu")
    with pytest.raises(DeviceError, match=r"cannot hold the data type bfloat16.*CropLoader\(\.\.\., device='gpu'\)"):
        gpuzarr.open(store, device="gpu")
    times = gpuzarr.MemoryStore()
    gpuzarr.create(times, shape=(4,), dtype="M8[s]", chunks=(2,), device="cpu")
    with pytest.raises(DeviceError) as refused:
        gpuzarr.open(times, device="gpu")
    assert "CropLoader" not in str(refused.value)
