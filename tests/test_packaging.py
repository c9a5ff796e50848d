"""The wheel's contents as pyproject.toml declares them: every subpackage ships, with the CUDA
kernels and the ``py.typed`` marker that lets type checkers read gpuzarr's annotations."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import gpuzarr

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path(gpuzarr.__file__).resolve().parent


def _declared() -> dict[str, object]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_every_subpackage_is_in_the_packages_list() -> None:
    # An explicit list (needed for the kernels/ mapping) silently drops a new subpackage from
    # non-editable installs; editable installs and this repository's tests would not notice.
    on_disk = {
        ".".join(("gpuzarr", *init.parent.relative_to(PACKAGE).parts)).rstrip(".")
        for init in PACKAGE.rglob("__init__.py")
    }
    setuptools = _declared()["tool"]["setuptools"]  # type: ignore[index]
    declared = set(setuptools["packages"])
    assert on_disk - declared == set()
    assert declared - on_disk == {"gpuzarr.kernels"}
    assert setuptools["package-dir"] == {"gpuzarr.kernels": "kernels"}


def test_the_kernels_ship_as_package_data() -> None:
    sources = sorted(p.name for p in (REPO / "kernels").glob("*.cu"))
    assert sources, "kernels/ holds the CUDA sources"
    package_data = _declared()["tool"]["setuptools"]["package-data"]  # type: ignore[index]
    assert package_data == {"gpuzarr": ["py.typed"], "gpuzarr.kernels": ["*.cu"]}


def test_the_wheel_holds_every_module_the_kernels_and_the_typed_marker(tmp_path: Path) -> None:
    # Built from a copy of the tracked files: a build in the checkout would pack what an earlier
    # build left in build/, and pass with a packages list that has lost a subpackage.
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    source = tmp_path / "source"
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    built = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "No module named" in built.stderr:
        pytest.skip(f"cannot build here: {built.stderr.strip().splitlines()[-1]}")
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("gpuzarr-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {f"gpuzarr/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    assert modules - names == set()
    assert "gpuzarr/py.typed" in names
    kernels = {f"gpuzarr/kernels/{p.name}" for p in (REPO / "kernels").glob("*.cu")}
    assert kernels and kernels <= names
