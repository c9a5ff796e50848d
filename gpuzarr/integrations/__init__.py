"""Bridges from gpuzarr arrays to other libraries (Dask, xarray), each in its own module, each
importing its library only when that module is imported."""
