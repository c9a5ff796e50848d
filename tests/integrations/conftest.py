"""Fixtures of the integration tests: ``emulated_gpu`` runs the GPU read path on the CPU."""

from ..backends.emulated_gpu import emulated_gpu  # noqa: F401 - re-exported as a fixture
