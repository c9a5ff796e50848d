"""The fuzz harness (benchmarks/fuzz.py) in CI: a fixed series of mutated stores, each opened and
read in a worker subprocess under a time and memory limit, must end in a read or a GpuZarrError.

``python -m benchmarks.fuzz --seconds N`` runs the same harness for longer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import fuzz

ROOT = Path(__file__).resolve().parents[2]
#: about 15 s on two cores
CI_CASES = 4000


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-seeds")


def _run_clean(cases: int, seed: int, seed_dir: Path, out: Path, **reader: bool) -> None:
    """``cases`` cases of series ``seed`` with the reader options ``reader``: none may fail."""
    n, failures, outcomes = fuzz.fuzz(cases=cases, seed=seed, jobs=2, out=out, seed_dir=seed_dir, quiet=True, **reader)
    assert n == cases
    report = "\n".join(f"{f.kind}: {f.what} -- {f.reproducer}\n{f.traceback[-1500:]}" for f in failures[:5])
    assert not failures, f"{len(failures)} failing cases, e.g.\n{report}"
    # the mutations reach past the metadata: some cases read, some chunks are refused as corrupt
    assert outcomes.get("read", 0) > 0 and outcomes.get("CorruptChunkError", 0) > 0


def _must_disagree(
    files: dict[str, bytes],
    tmp_path: Path,
    seed: str,
    owner: type,
    name: str,
    wrong: object,
    match: str,
    gpu: bool = True,
) -> None:
    """Seed ``seed``'s case (its ``files``), read with ``owner.name`` replaced by ``wrong`` (a
    reader made to go wrong) on the emulated device, must fail the oracle with ``match``."""
    with pytest.MonkeyPatch.context() as patch, fuzz.emulated_gpu():
        patch.setattr(owner, name, wrong)
        with pytest.raises(fuzz.ReadersDisagree, match=match):
            fuzz.run_case(files, None, tmp_path / "store", gpu=gpu, written=fuzz.written_data(seed))


def test_every_mutated_store_reads_or_raises_a_gpuzarr_error(seed_dir: Path, tmp_path: Path) -> None:
    _run_clean(CI_CASES, 0, seed_dir, tmp_path)


def test_mutated_stores_read_from_files_on_two_threads_read_or_raise_a_gpuzarr_error(
    seed_dir: Path, tmp_path: Path
) -> None:
    """The same oracle through a LocalStore with two threads (``--local``): the readers of
    local chunks (fetched on one thread and decoded on another, Blosc frames read in part)."""
    _run_clean(CI_CASES // 4, 1, seed_dir, tmp_path, local=True)


def test_mutated_stores_read_the_same_on_the_emulated_gpu_as_on_the_cpu(seed_dir: Path, tmp_path: Path) -> None:
    """``--emulated-gpu``: each case read by the CPU engine and by the GPU path on the emulated
    device must read the same bytes, or both be refused (the one exception, a GPU read of the
    seed's data where it cannot see what the CPU refused, is in ``fuzz.run_case``)."""
    _run_clean(CI_CASES // 2, 2, seed_dir, tmp_path, gpu=True)


def test_the_readers_must_agree_on_the_emulated_gpu(seed_dir: Path, tmp_path: Path) -> None:
    """The oracle itself: a store the GPU path reads differently from the CPU engine fails the
    case (here a GPU path made to flip one byte of every read)."""
    files = fuzz.build_seeds(seed_dir)["v3-zstd"]
    store = tmp_path / "store"
    with fuzz.emulated_gpu():
        fuzz.run_case(files, None, store, gpu=True, written=fuzz.written_data("v3-zstd"))

    from gpuzarr.core.array import Array

    read = Array.__getitem__

    def flipped(self: Array, selection: object) -> object:
        got = read(self, selection)
        if self.device != "cpu":
            got = np.array(got)
            got.reshape(-1)[0] ^= 1
        return got

    # Caught by the comparison with the CPU engine, or first by the GPU's own read_batch.
    match = r"the CPU engine read|read_batch of whole chunks differs"
    _must_disagree(files, tmp_path, "v3-zstd", Array, "__getitem__", flipped, match)
    from gpuzarr.backends import select

    assert select.gpu_unavailable_reason() is not None  # the emulation ended with the block


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "emulated-gpu"])
def test_a_batch_of_whole_chunks_must_match_a_read_of_them(seed_dir: Path, tmp_path: Path, gpu: bool) -> None:
    """Each reader's read_batch of whole chunks is compared with its own read of the array (here
    a read_batch made to flip one byte fails the case, on either reader)."""
    files = fuzz.build_seeds(seed_dir)["v3-blosc"]

    from gpuzarr.core.array import Array

    read_batch = Array.read_batch

    def flipped(self: Array, selections: object, **kwargs: object) -> object:
        got = np.array(read_batch(self, selections, **kwargs))  # type: ignore[arg-type]
        if (self.device != "cpu") == gpu:
            got.reshape(-1).view(np.uint8)[5] ^= 1
        return got

    _must_disagree(files, tmp_path, "v3-blosc", Array, "read_batch", flipped, "read_batch of whole chunks differs", gpu)


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "emulated-gpu"])
def test_a_loaders_crops_of_whole_chunks_must_match_a_read_of_them(seed_dir: Path, tmp_path: Path, gpu: bool) -> None:
    """Each reader's CropLoader (with its chunk cache) over whole chunks is compared with its
    own read of the array (here crops assembled with one byte flipped fail the case)."""
    files = fuzz.build_seeds(seed_dir)["v3-zstd"]

    from gpuzarr.loader.chunked import ChunkAssembler

    read = ChunkAssembler.read

    def flipped(self: ChunkAssembler, field: str, volume: int, origins: object, out: object) -> None:
        read(self, field, volume, origins, out)  # type: ignore[arg-type]
        if self.ordering.on_device == gpu:
            np.asarray(out).reshape(-1).view(np.uint8)[3] ^= 1

    match = "the CropLoader's crops of whole chunks differ"
    _must_disagree(files, tmp_path, "v3-zstd", ChunkAssembler, "read", flipped, match, gpu)


def test_the_gpus_strided_reads_must_match_the_cpus(seed_dir: Path, tmp_path: Path) -> None:
    """The selections of the GPU path's other routes are compared too (here a GPU path whose
    strided reads flip one byte)."""
    files = fuzz.build_seeds(seed_dir)["v3-gzip"]

    from gpuzarr.core.array import Array

    read = Array.__getitem__

    def flipped(self: Array, selection: object) -> object:
        got = read(self, selection)
        strided = isinstance(selection, tuple) and any(isinstance(s, slice) and s.step == 2 for s in selection)
        if self.device != "cpu" and strided:
            got = np.array(got)
            got.reshape(-1).view(np.uint8)[0] ^= 1
        return got

    match = "every other element: the CPU engine read"
    _must_disagree(files, tmp_path, "v3-gzip", Array, "__getitem__", flipped, match)


def test_a_write_must_read_back_what_it_wrote(seed_dir: Path) -> None:
    """From memory, each case also writes into a copy of the store and reads it back (here a
    write made to store other values fails the case)."""
    files = fuzz.build_seeds(seed_dir)["v3-zstd"]
    fuzz.run_case(files, None)

    from gpuzarr.core.array import Array

    write = Array.__setitem__

    def off_by_one(self: Array, selection: object, value: object) -> None:
        write(self, selection, np.asarray(value) + 1)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Array, "__setitem__", off_by_one)
        with pytest.raises(AssertionError, match="read back"):
            fuzz.run_case(files, None)
    assert files == fuzz.build_seeds(seed_dir)["v3-zstd"]  # the writes went to a copy of the store


def test_seeds_cover_both_writers_and_formats(seed_dir: Path) -> None:
    seeds = fuzz.build_seeds(seed_dir)
    assert {"v3-shard", "v2-lzma", "v3-group-consolidated"} <= set(seeds)
    assert any(".zmetadata" in files for files in seeds.values())
    pytest.importorskip("zarr")
    assert {"zarr-v3-shard", "zarr-v2-blosc"} <= set(seeds)


def test_a_case_number_reproduces_its_store(seed_dir: Path) -> None:
    files = fuzz.build_seeds(seed_dir)["v3-zstd"]
    assert fuzz.mutate("v3-zstd", files, 17) == fuzz.mutate("v3-zstd", files, 17)
    assert any(fuzz.mutate("v3-zstd", files, n)[0] != files for n in range(5))


def test_failures_are_saved_with_a_reproducer(seed_dir: Path, tmp_path: Path) -> None:
    files, what, _ = fuzz.mutate("v3-bytes", fuzz.build_seeds(seed_dir)["v3-bytes"], 3)
    failure = fuzz.Failure("v3-bytes", 3, "ValueError", what, "Traceback ...")
    where = fuzz.save_failure(tmp_path, failure, files)
    assert (where / "store" / "zarr.json").exists()
    assert "python -m benchmarks.fuzz --replay v3-bytes:3" in (where / "traceback.txt").read_text()


def test_replay_runs_one_case(seed_dir: Path) -> None:
    cmd = [sys.executable, "-m", "benchmarks.fuzz", "--replay", "v3-gzip:5", "--seed-dir", str(seed_dir)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("v3-gzip:5: ")
    assert "ok: " in proc.stdout
