"""Fixtures of the backend tests: ``emulated_gpu`` runs Array's GPU read path on the CPU."""

from .emulated_gpu import emulated_gpu  # noqa: F401 - re-exported as a fixture
