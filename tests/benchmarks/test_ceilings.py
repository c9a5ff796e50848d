"""The raw ceilings (benchmarks/ceilings.py) on tiny generated datasets: what they count, how the
decode inputs are cut out of chunks and shards, and that the GPU ones skip cleanly without a GPU."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from benchmarks.ceilings import SkipCeiling, chunk_files, decode_inputs, host_read, measure_ceilings
from benchmarks.datasets import DATASETS, VOLUME_CHUNKS, DataDir

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    pytest.importorskip("tensorstore")  # the datasets are written with TensorStore
    return DataDir(tmp_path_factory.mktemp("data"), size_mib=1, log=lambda *a: None)


def dataset(data: DataDir, name: str) -> tuple[Path, np.ndarray[Any, Any]]:
    spec = next(d for d in DATASETS if d.name == name)
    return data.dataset(spec), data.truth(spec.kind)


def test_host_read_counts_every_chunk_file(data: DataDir) -> None:
    path, truth = dataset(data, "zstd")
    files = [p for p in path.rglob("*") if p.is_file() and p.name != "zarr.json"]
    assert len(files) == 8  # 80^3 in 64^3 chunks
    rec = host_read(path, truth.nbytes, repeats=2, workers=3)
    assert rec["status"] == "ok"
    assert rec["nbytes"] == sum(p.stat().st_size for p in files)
    assert rec["items"] == len(files) and len(rec["times_s"]) == 2
    assert rec["array_gbps_median"] == pytest.approx(truth.nbytes / rec["time_median_s"] / 1e9)


@pytest.mark.parametrize(("name", "decode"), [("sharded-zstd", "zstd"), ("gzip", "deflate")])
def test_decode_inputs_are_whole_raw_streams(data: DataDir, name: str, decode: str) -> None:
    # The nvCOMP ceiling runs only on a GPU; what it feeds nvCOMP is checked here, on the CPU.
    path, truth = dataset(data, name)
    inputs = decode_inputs(path)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(truth.shape, VOLUME_CHUNKS)]))
    chunk_nbytes = int(np.prod(VOLUME_CHUNKS)) * truth.itemsize
    assert len(inputs.streams) == n_chunks  # the shard's empty inner chunks are left out
    assert inputs.decoded_nbytes == n_chunks * chunk_nbytes
    if decode == "zstd":
        numcodecs = pytest.importorskip("numcodecs")
        decoded = [numcodecs.Zstd().decode(s.tobytes()) for s in inputs.streams]
    else:
        decoded = [zlib.decompress(s.tobytes(), wbits=-15) for s in inputs.streams]  # raw deflate
    assert all(len(d) == chunk_nbytes for d in decoded)
    assert inputs.algorithm == {"zstd": "Zstd", "deflate": "Deflate"}[decode]
    if name == "sharded-zstd":
        assert len(chunk_files(path)) == 1  # one shard holds the whole 80^3 array


def test_no_decode_ceiling_for_uncompressed_chunks(data: DataDir) -> None:
    with pytest.raises(SkipCeiling, match="not one compressor"):
        decode_inputs(dataset(data, "raw")[0])


def test_gpu_ceilings_skip_without_gpu(data: DataDir, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuzarr.backends.select

    monkeypatch.setattr(gpuzarr.backends.select, "gpu_available", lambda: False)
    path, truth = dataset(data, "zstd")
    records = {r["ceiling"]: r for r in measure_ceilings(path, truth.nbytes, repeats=1, gpu=True)}
    assert records["host-read"]["status"] == "ok"
    for name in ("host-to-device", "nvcomp-decode"):
        assert records[name]["status"] == "skipped"
        assert "GPU" in records[name]["note"]
    assert set(r["ceiling"] for r in measure_ceilings(path, truth.nbytes, repeats=1, gpu=False)) == {"host-read"}


def test_nvcomp_ceiling_makes_the_librarys_call(data: DataDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvCOMP 6's ``decode`` takes a BatchArray, not a list: the ceiling carves the batch and its
    outputs out of one buffer each with ``as_arrays`` and passes the decompression config of the
    known sizes, as gpuzarr does (fake modules here)."""
    import sys
    import types

    from benchmarks.ceilings import nvcomp_decode

    calls: list[tuple[Any, ...]] = []

    class Batch:
        def __init__(self, buffer: np.ndarray[Any, Any], offsets: list[int], sizes: list[int]) -> None:
            self.buffer, self.offsets, self.buffer_sizes = buffer, offsets, sizes

    class Codec:
        def __init__(self, **kwargs: Any) -> None:
            calls.append(("Codec", kwargs["algorithm"]))

        def compression_config(self, sizes: list[int]) -> tuple[str, int]:
            return ("compression", sum(sizes))

        def decompression_config(self, config: tuple[str, int]) -> tuple[str, int]:
            return ("decompression", config[1])

        def decode(self, srcs: Any, out: Any = None, decompression_config: Any = None) -> Any:
            assert isinstance(srcs, Batch) and isinstance(out, Batch)
            calls.append(("decode", len(srcs.offsets), decompression_config))
            return out

    nvcomp = types.ModuleType("nvidia.nvcomp")
    nvcomp.as_arrays = Batch  # type: ignore[attr-defined]
    nvcomp.Codec = Codec  # type: ignore[attr-defined]
    nvcomp.BitstreamKind = types.SimpleNamespace(RAW="RAW")  # type: ignore[attr-defined]
    nvidia = types.ModuleType("nvidia")
    nvidia.nvcomp = nvcomp  # type: ignore[attr-defined]
    cupy = types.ModuleType("cupy")
    cupy.asarray = np.asarray  # type: ignore[attr-defined]
    cupy.empty = np.empty  # type: ignore[attr-defined]
    cupy.uint8 = np.uint8  # type: ignore[attr-defined]
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))  # type: ignore[attr-defined]
    for name, module in (("nvidia", nvidia), ("nvidia.nvcomp", nvcomp), ("cupy", cupy)):
        monkeypatch.setitem(sys.modules, name, module)
    path, truth = dataset(data, "zstd")
    inputs = decode_inputs(path)
    rec = nvcomp_decode(path, truth.nbytes, repeats=2)
    assert rec["nbytes"] == inputs.decoded_nbytes == sum(inputs.stream_decoded)
    assert calls[0] == ("Codec", "Zstd")
    # Warm-up and timed runs, each given the config of the known decoded sizes, as the library's.
    assert calls[1:] and set(calls[1:]) == {("decode", len(inputs.streams), ("decompression", inputs.decoded_nbytes))}
