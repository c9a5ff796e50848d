"""Fixtures of the command-line tests: a small hierarchy on disk, and the command run as users
run it (``python -m gpuzarr``, in a child process) or in-process (``main``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from collections.abc import Callable

#: The repository root: the child processes import this checkout's gpuzarr.
ROOT = Path(__file__).resolve().parents[2]

RAW_SHAPE = (40, 30, 20)


def raw_data() -> np.ndarray:  # type: ignore[type-arg]
    """The values of the hierarchy's sharded array: every element different."""
    return np.arange(np.prod(RAW_SHAPE), dtype=np.uint16).reshape(RAW_SHAPE)


def mask_data() -> np.ndarray:  # type: ignore[type-arg]
    """The values of the checksummed array: half written, the rest the (NaN) fill value."""
    data = np.full((30, 30), np.nan, dtype=np.float32)
    data[:15] = np.linspace(-1, 1, 450, dtype=np.float32).reshape(15, 30)
    return data


def make_hierarchy(path: Path) -> Path:
    """A v3 group with attributes, a sharded array with dimension names, attributes and a fill
    value, and a sub-group holding a crc32c-checked float array with a NaN fill value."""
    root = gpuzarr.open_group(path, mode="w")
    root.attrs["title"] = "cli test"
    raw = root.create_array(
        "raw", shape=RAW_SHAPE, dtype="uint16", chunks=(8, 8, 8), shards=(16, 16, 16),
        dimension_names=["z", "y", "x"], attributes={"um": 0.5}, fill_value=7,
    )
    raw[...] = raw_data()
    mask = root.create_group("labels", attributes={"kind": "labels"}).create_array(
        "mask", shape=(30, 30), dtype="float32", chunks=(10, 10), fill_value=float("nan"),
        compressors=[{"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}],
    )
    mask[...] = mask_data()
    return path


@pytest.fixture
def hierarchy(tmp_path: Path) -> Path:
    return make_hierarchy(tmp_path / "h.zarr")


def child_env() -> dict[str, str]:
    """The environment of a child process: this checkout first on the path, CPU reads."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "GPUZARR_DEVICE": "cpu"}


def run_module(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m gpuzarr ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "gpuzarr", *map(str, args)],
        capture_output=True, text=True, env=child_env(), timeout=120, check=False,
    )


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``main(ARGS)`` in this process: (exit status, stdout, stderr)."""
    from gpuzarr.cli.main import main

    def call(*args: str | Path) -> tuple[int, str, str]:
        status = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return status, out, err

    return call
