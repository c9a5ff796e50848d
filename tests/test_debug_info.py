"""``gpuzarr.print_debug_info`` and ``gpuzarr debug-info``: what a bug report needs, from the
installed packages' metadata (nothing imported for it), the GPU probe's verdict and the
settings."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from importlib import metadata
from typing import TYPE_CHECKING

import numpy as np

import gpuzarr
from gpuzarr import debug_info as module
from gpuzarr.backends import select

from .cli.conftest import child_env

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_the_report_names_versions_the_gpu_path_and_the_settings() -> None:
    info = module.debug_info()
    assert info["gpuzarr"] == gpuzarr.__version__ and info["python"] == platform.python_version()
    assert info["required"]["numpy"] == np.__version__
    assert info["required"]["numcodecs"] == metadata.version("numcodecs")
    assert set(info["gpu_packages"]) == set(module.GPU)
    assert info["gpu"] == select.gpu_unavailable_reason()
    with gpuzarr.config.set(concurrency=3, strict=True):
        settings = module.debug_info()["settings"]
    assert (settings["concurrency"], settings["strict"]) == (3, True)
    # every setting, those added later too (file_handles, max_chunk_bytes, ... were once left out)
    assert list(settings) == gpuzarr.config.names()
    assert {"file_handles", "max_chunk_bytes", "host_output_pool_bytes"} <= set(settings)
    json.dumps(info)  # a JSON document, for --json


def test_a_package_not_installed_says_so() -> None:
    text = module.format_debug_info({**module.debug_info(), "optional": {"absent-package": None}})
    assert "  absent-package: not installed" in text.splitlines()


def test_a_gpu_probe_that_fails_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str | None:
        raise RuntimeError("cudaErrorInsufficientDriver")

    monkeypatch.setattr(select, "gpu_unavailable_reason", broken)
    info = module.debug_info()
    assert info["gpu"] == "the GPU probe failed: RuntimeError: cudaErrorInsufficientDriver"
    assert "GPU path: cannot run (the GPU probe failed" in module.format_debug_info(info)


def test_print_debug_info_and_the_command_print_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    gpuzarr.print_debug_info()
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == f"gpuzarr: {gpuzarr.__version__}"
    done = subprocess.run(
        [sys.executable, "-m", "gpuzarr", "debug-info", "--json"],
        capture_output=True, text=True, env=child_env(), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["required"] == module.debug_info()["required"]
    # Versions come from metadata: the report imports no GPU library, nor zarr-python.
    probe = "import sys, gpuzarr.debug_info as d; d.debug_info(); print(sorted({'zarr', 'torch'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env(), check=False)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_package_whose_metadata_cannot_be_read_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "brokenpkg-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: brokenpkg\nVersion: \xff\xfe\n")
    unversioned = tmp_path / "noversion-1.0.dist-info"
    unversioned.mkdir()
    (unversioned / "METADATA").write_text("Metadata-Version: 2.1\nName: noversion\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = module._versions(("brokenpkg", "noversion", "surely-not-installed-pkg"))
    assert found["brokenpkg"] == "unknown (its metadata cannot be read: UnicodeDecodeError)"
    # importlib.metadata gives None for a missing version, or raises KeyError, by release
    assert found["noversion"] in (
        "unknown (its metadata has no version)",
        "unknown (its metadata cannot be read: KeyError)",
    )
    assert found["surely-not-installed-pkg"] is None


def test_the_device_environment_variable_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUZARR_DEVICE", "cpu")
    info = module.debug_info()
    assert info["GPUZARR_DEVICE"] == "cpu" and "GPUZARR_DEVICE: cpu" in module.format_debug_info(info)
