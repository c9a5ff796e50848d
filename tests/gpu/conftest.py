"""Every test of tests/gpu reads through the device path, however few chunks a read has: the
small-read rule (``gpu_small_read_chunks``) would send most of their reads to the CPU engine.
Its own GPU test turns it back on."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpuzarr import config

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(autouse=True)
def device_path_for_every_read() -> Iterator[None]:
    with config.set(gpu_small_read_chunks=0):
        yield
