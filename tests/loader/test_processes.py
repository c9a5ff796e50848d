"""The loader and processes: without torch it never imports torch; on the CPU it is an
IterableDataset for DataLoader workers started with spawn (each worker its share of the
batches, in the loader's order); a GPU loader in a forked DataLoader worker raises."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import gpuzarr
from gpuzarr.errors import DeviceError
from gpuzarr.loader import CropLoader

from .helpers import assert_batch_matches, crop_list, make_volume, needs_torch, values

if TYPE_CHECKING:
    import numpy as np

    from ..backends.emulated_gpu import EmulatedGpu

ROOT = Path(__file__).resolve().parents[2]
CROP = (4, 6, 5)


def test_numpy_output_never_imports_torch(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import gpuzarr
        import gpuzarr.loader
        from gpuzarr.loader import CropLoader

        assert "torch" not in sys.modules, "import gpuzarr.loader imported torch"
        data = np.arange(16 * 12 * 10, dtype="u2").reshape(16, 12, 10)
        a = gpuzarr.create({str(tmp_path / "a.zarr")!r}, shape=data.shape, dtype="u2", chunks=(8, 8, 8))
        a[...] = data
        loader = CropLoader(a, (4, 6, 5), 3, output="numpy", cache_bytes=1 << 20)
        n = 0
        for batch in loader:
            for crop, o in zip(batch.data, batch.origins):
                assert (crop == data[o[0]:o[0] + 4, o[1]:o[1] + 6, o[2]:o[2] + 5]).all()
            n += 1
        loader.load_state_dict(loader.state_dict())
        assert n == len(loader) > 0
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUZARR_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.fixture
def volumes(tmp_path: Path) -> tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]]:
    sources = [values((14, 15, 11), salt=20), values((9, 18, 12), salt=21)]
    arrays = [make_volume(gpuzarr.LocalStore(tmp_path / f"{i}.zarr"), s) for i, s in enumerate(sources)]
    return arrays, sources


@needs_torch
@pytest.mark.slow
def test_spawn_workers_share_the_batches_in_the_loaders_order(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]],
) -> None:
    import torch
    from torch.utils.data import DataLoader

    arrays, sources = volumes
    loader = CropLoader(arrays, CROP, 4, crops_per_epoch=30, seed=3, output="torch", device="cpu")
    loader.set_epoch(2)
    expected = crop_list(list(loader))
    dataset = loader.as_dataset()
    assert len(dataset) == len(loader) == 8
    workers = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    got = list(workers)
    assert crop_list(got) == expected
    for batch in got:
        assert isinstance(batch.data, torch.Tensor)
        assert_batch_matches(batch, sources, CROP)


@needs_torch
def test_the_dataset_in_this_process_reads_every_batch(
    volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]],
) -> None:
    from gpuzarr.loader import CropDataset

    arrays, sources = volumes
    loader = CropLoader(arrays, CROP, 4, crops_per_epoch=10, output="numpy")
    dataset = CropDataset(loader)
    got = list(dataset)
    assert crop_list(got) == crop_list(list(loader))
    for batch in got:
        assert_batch_matches(batch, sources, CROP)


class _IterateInWorker:
    """A dataset that iterates a GPU loader inside a DataLoader worker (what must fail)."""

    def __init__(self, loader: CropLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return (len(batch) for batch in self.loader)


@needs_torch
def test_a_gpu_loader_in_a_forked_dataloader_worker_says_what_to_do(
    emulated_gpu: EmulatedGpu, volumes: tuple[list[gpuzarr.Array], list[np.ndarray[Any, Any]]]
) -> None:
    import warnings

    from torch.utils.data import DataLoader, IterableDataset

    class Dataset(_IterateInWorker, IterableDataset[int]):
        pass

    arrays, _ = volumes
    loader = CropLoader(arrays, CROP, 2, crops_per_epoch=4, device="gpu", output="numpy")
    workers = DataLoader(Dataset(loader), batch_size=None, num_workers=1, multiprocessing_context="fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a process with threads
        with pytest.raises(DeviceError, match=r"forked process.*needs no workers.*spawn"):
            list(workers)


def test_torch_output_without_torch_is_refused_at_the_first_batch(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # as if it were not installed
        import numpy as np
        import gpuzarr
        from gpuzarr.errors import InvalidArgumentError
        from gpuzarr.loader import CropLoader

        a = gpuzarr.create({str(tmp_path / "a.zarr")!r}, shape=(16, 12, 10), dtype="u2", chunks=(8, 8, 8))
        loader = CropLoader(a, (4, 6, 5), 3)  # made, measured and resumed without PyTorch
        assert len(loader) > 0 and loader.state_dict()
        try:
            next(iter(loader))
        except InvalidArgumentError as exc:
            print(exc)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUZARR_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "output='torch' needs PyTorch" in done.stdout and "output='numpy'" in done.stdout
