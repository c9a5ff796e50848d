"""Shared fixtures: a local and a memory store per test.

On a GPU host ``device="auto"`` would give CuPy arrays; the suite compares with NumPy, so it pins
"auto" to the CPU through GPUZARR_DEVICE. GPU tests ask for ``device="gpu"`` explicitly.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("GPUZARR_DEVICE", "cpu")

import gpuzarr

# The loopback S3 and HTTP servers' fixtures (tests/servers), for every test directory.
pytest_plugins = ["tests.servers"]


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "local":
        return gpuzarr.LocalStore(tmp_path / "data.zarr")
    return gpuzarr.MemoryStore()


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    from gpuzarr.backends.select import gpu_available

    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no usable CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=[3, 2], ids=["v3", "v2"])
def zarr_format(request: pytest.FixtureRequest) -> int:
    """Both Zarr formats, for tests of what v2 and v3 hierarchies share."""
    return int(request.param)


#: Optional test dependencies: a test that needs one that is missing is skipped, not failed.
OPTIONAL_TEST_MODULES = frozenset({"obstore", "moto", "fsspec", "s3fs", "aiohttp", "requests", "zarrs"})


def _missing_optional_module(exc: BaseException | None) -> str | None:
    """The optional module whose absence ``exc`` reports: a ModuleNotFoundError naming it (an
    optional module itself, not one of its submodules or names), or an ImportError raised from
    one (gpuzarr's "install obstore" errors); and one that really cannot be found."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name in OPTIONAL_TEST_MODULES:
            return exc.name if importlib.util.find_spec(exc.name) is None else None
        exc = exc.__cause__  # raised from it, not while handling it
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):  # type: ignore[no-untyped-def]
    try:
        return (yield)
    except ImportError as exc:
        missing = _missing_optional_module(exc)
        if missing is None:
            raise
        pytest.skip(f"{missing} is not installed (an optional test dependency)")
