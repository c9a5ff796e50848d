"""The facade: :class:`~gpuzarr.core.array.Array`, :class:`~gpuzarr.core.group.Group`, and one
field of a structured array (:mod:`gpuzarr.core.field_array`), as zarr-python's ``zarr.core``."""
