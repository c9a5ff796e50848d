"""The ``xarray_engine`` fixture: ``engine="gpuzarr"`` resolves through the entry point that
pyproject.toml declares.

An installed gpuzarr (``pip install -e .``) registers it already and the fixture changes nothing.
A checkout that is only on ``sys.path`` has no such metadata; the fixture then installs the
declared entry point, read from pyproject.toml, as a one-file distribution in a temporary
directory, so that xarray finds the engine through ``importlib.metadata`` as it would after
``pip install``.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared_entry_point() -> str:
    """The ``xarray.backends`` entry point ``gpuzarr`` as pyproject.toml declares it."""
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    return str(project["entry-points"]["xarray.backends"]["gpuzarr"])


@pytest.fixture(scope="session")
def xarray_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """None when gpuzarr is installed with its entry point; else the directory put on sys.path
    that holds the declared entry point (a subprocess needs it on its PYTHONPATH)."""
    pytest.importorskip("xarray")
    from xarray.backends import plugins

    plugins.refresh_engines()
    if "gpuzarr" in plugins.list_engines():
        yield None
        return
    site = tmp_path_factory.mktemp("site")
    info = site / "gpuzarr_xarray_engine-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuzarr-xarray-engine\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[xarray.backends]\ngpuzarr = {declared_entry_point()}\n")
    sys.path.append(str(site))
    plugins.refresh_engines()
    yield site
    sys.path.remove(str(site))
    plugins.refresh_engines()
