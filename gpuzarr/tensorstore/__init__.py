"""TensorStore compatibility: ``zarr3``/``zarr2`` JSON specs, chunk layouts, ``Array.spec()``."""
