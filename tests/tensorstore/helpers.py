"""Shared by the spec and constraint tests: a file kvstore and a zarr3 spec parser."""

from __future__ import annotations

from gpuzarr.tensorstore.spec import TensorStoreSpec

FILE = {"driver": "file", "path": "/tmp/x.zarr/"}


def parse(**members: object) -> TensorStoreSpec:
    """A zarr3 spec on ``FILE`` with ``members``."""
    return TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": FILE, **members})
