"""Without xarray: gpuzarr imports, and its xarray engine module names the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_xarray_engine_without_xarray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # What `import xarray` (and `from xarray.backends import ...`) meet when xarray is absent.
    for name in [m for m in sys.modules if m == "xarray" or m.startswith("xarray.")] or ["xarray"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "gpuzarr.integrations.xarray_backend", raising=False)
    import gpuzarr  # noqa: F401 - imports without xarray

    with pytest.raises(ImportError, match=r"the xarray engine needs xarray: pip install 'gpuzarr\[xarray\]'"):
        importlib.import_module("gpuzarr.integrations.xarray_backend")
