"""Integrations of gpuzarr with other libraries, imported only by name (never by ``import gpuzarr``).

* :mod:`gpuzarr.integrations.xarray_backend`: the xarray engine ``"gpuzarr"``.
"""
