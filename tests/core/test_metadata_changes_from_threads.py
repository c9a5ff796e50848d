"""Metadata changes (attributes, resize, append) made through one Array or Group handle from
several threads keep each other: each is read, changed and written under the handle's lock."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import gpuzarr


class _RacingStore(gpuzarr.MemoryStore):
    """Runs ``race`` on another thread at the first write of a metadata document after
    ``arm``, and waits up to 0.3 s for it before that write goes on: with the handle's lock
    held across the change, the other thread waits for it instead."""

    def __init__(self) -> None:
        super().__init__()
        self.race: Any = None
        self.done = threading.Event()

    def arm(self, race: Any) -> None:
        self.race, self.done = race, threading.Event()

    def set(self, key: str, value: Any) -> None:
        race = self.race
        if race is not None and key.rsplit("/", 1)[-1] in ("zarr.json", ".zattrs", ".zarray"):
            self.race = None
            threading.Thread(target=lambda: (race(), self.done.set())).start()
            self.done.wait(0.3)
        super().set(key, value)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("node", ["array", "group"])
def test_attributes_set_from_two_threads_are_both_kept(zarr_format: int, node: str) -> None:
    """Each thread read the attributes, added its own and wrote them: the later write dropped
    the earlier one's (8 threads setting 10 each kept 11-18 of the 80)."""
    store = _RacingStore()
    target: Any = gpuzarr.create_group(store, zarr_format=zarr_format)
    if node == "array":
        target = target.create_array("x", shape=(4,), dtype="i4", chunks=(2,))
    store.arm(lambda: target.attrs.__setitem__("other", 2))
    target.attrs["mine"] = 1
    assert store.done.wait(5)
    assert dict(target.attrs) == {"mine": 1, "other": 2}
    reopened = gpuzarr.open(store, path="x" if node == "array" else "", mode="r")
    assert dict(reopened.attrs) == {"mine": 1, "other": 2}


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_resize_is_not_undone_by_an_attribute_change_meanwhile(zarr_format: int) -> None:
    """The attribute change evolved the metadata the handle held before the resize, and wrote
    the old shape back: rows written past it were lost."""
    store = _RacingStore()
    array = gpuzarr.create_array(store, name="x", shape=(4, 2), dtype="i4", chunks=(2, 2), zarr_format=zarr_format)
    store.arm(lambda: array.attrs.__setitem__("tag", 1))
    array.resize((8, 2))
    assert store.done.wait(5)
    array[4:] = 7
    reopened = gpuzarr.open_array(store, path="x", mode="r")
    assert reopened.shape == (8, 2) and dict(reopened.attrs) == {"tag": 1}
    assert (reopened[4:] == 7).all()


def test_appends_from_several_threads_each_get_rows_of_their_own() -> None:
    array = gpuzarr.create_array(gpuzarr.MemoryStore(), shape=(0, 3), dtype="i4", chunks=(4, 3))
    barrier = threading.Barrier(6)

    def append(k: int) -> None:
        barrier.wait()
        for _ in range(5):
            array.append(np.full((2, 3), k, dtype="i4"))

    threads = [threading.Thread(target=append, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = gpuzarr.open_array(array.store, mode="r")[...]
    assert data.shape == (60, 3)
    assert sorted(np.bincount(data[:, 0]).tolist()) == [10] * 6
