"""The wheel's contents as pyproject.toml declares them: every subpackage ships."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
    assert _declared()["tool"]["setuptools"]["package-data"] == {"gpuzarr.kernels": ["*.cu"]}  # type: ignore[index]
