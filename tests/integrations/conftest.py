"""Fixtures of the integration tests: ``xarray_engine`` makes ``engine="gpuzarr"`` resolve;
``emulated_gpu`` runs the GPU read path on the CPU (tests/backends/emulated_gpu.py)."""

from ..backends.emulated_gpu import emulated_gpu  # noqa: F401 - re-exported as a fixture
from .xarray_engine import xarray_engine  # noqa: F401 - re-exported as a fixture
