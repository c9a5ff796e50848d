"""Every subcommand through the installed ``gpuzarr`` console script, as users run it: its
``--help`` and one real call each. Skipped only where no script is installed; an installed
script that is broken (a wrong entry point, an import error) fails."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from .conftest import child_env

if TYPE_CHECKING:
    from pathlib import Path

#: subcommand -> (its arguments, given the hierarchy and a scratch directory; text its output holds)
CALLS = {
    "info": (lambda h, t: [h / "raw", "--json"], '"shard_shape": [\n    16,'),
    "tree": (lambda h, t: [h], "raw"),
    "copy": (lambda h, t: [h, t / "copy.zarr"], "copy: 2 array(s), 2 group(s)"),
    "convert": (
        lambda h, t: [h, t / "v2.zarr", "--zarr-format", "2", "--compressor", "zstd:1"],
        "convert: 2 array(s), 2 group(s)",
    ),
    "verify": (lambda h, t: [h], "verify: OK; 2 array(s), 66 chunk(s) checked on cpu"),
    "bench": (
        lambda h, t: [h / "raw", "--device", "cpu", "--crops", "2", "--crop-shape", "4", "--repeats", "1"],
        "crops/s",
    ),
    "demo": (lambda h, t: ["--size", "8", "--device", "cpu"], "verify  full read and a 8x8x8 crop at (0, 0, 0)"),
}


def _script() -> str:
    script = shutil.which("gpuzarr")
    if script is None:
        pytest.skip("the gpuzarr console script is not installed")
    return script


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # child_env puts this checkout first on PYTHONPATH: the script imports the gpuzarr under test.
    return subprocess.run(
        [_script(), *map(str, args)], capture_output=True, text=True, env=child_env(), timeout=120, check=False
    )


@pytest.mark.parametrize("command", sorted(CALLS))
def test_every_subcommand_through_the_console_script(hierarchy: Path, tmp_path: Path, command: str) -> None:
    helped = _run(command, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: gpuzarr {command} ")
    arguments, expected = CALLS[command]
    done = _run(command, *arguments(hierarchy, tmp_path))
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout, done.stdout
    if command == "info":
        assert json.loads(done.stdout)["shape"] == [40, 30, 20]


def test_the_console_script_version_and_bare_call() -> None:
    from gpuzarr import __version__

    version = _run("--version")
    assert (version.returncode, version.stdout) == (0, f"gpuzarr {__version__}\n")
    bare = _run()
    assert bare.returncode == 2 and bare.stderr.startswith("usage: gpuzarr ")
