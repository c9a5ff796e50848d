"""Bridges from gpuzarr arrays to other libraries, each in its own module, each importing its
library only when that module is imported (never by ``import gpuzarr``).

* :mod:`gpuzarr.integrations.dask`: ``to_dask``, ``store_dask``, ``from_dask``.
* :mod:`gpuzarr.integrations.xarray_backend`: the xarray engine ``"gpuzarr"``.
"""
