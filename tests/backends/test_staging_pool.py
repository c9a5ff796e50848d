"""The host staging pool of a device (``device.StagingPool``): bounded, reused, thread-safe."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from gpuzarr.backends.cuda.device import StagingPool, StagingPools

if TYPE_CHECKING:
    import pytest


def _pool(max_blocks: int = 2) -> tuple[StagingPool, list[int]]:
    made: list[int] = []

    def allocate(n: int) -> np.ndarray:
        made.append(n)
        return np.zeros(n, dtype=np.uint8)

    return StagingPool(allocate, max_blocks=max_blocks), made


def test_buffers_are_views_of_the_requested_size_and_are_reused() -> None:
    pool, made = _pool()
    a = pool.acquire(100)
    assert a.size == 100
    pool.release(a)
    b = pool.acquire(60)
    assert b.size == 60
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert made == [100]


def test_blocks_grow_geometrically_up_to_the_cap() -> None:
    pool, made = _pool()
    for n in (100, 101, 300, 301, 5000):
        pool.release(pool.acquire(n, cap=1000))
    # 100; doubled to 200 for 101; 400 for 300; 301 fits; 5000 is beyond the cap: exactly 5000
    assert made == [100, 200, 400, 5000]
    assert pool.nblocks == 1
    assert pool.nbytes == 5000


def test_two_buffers_in_flight_then_unpooled_ones() -> None:
    pool, made = _pool()
    a, b = pool.acquire(10), pool.acquire(20)
    c = pool.acquire(30)  # both blocks are in use: an ordinary buffer, not a third block
    assert pool.nblocks == 2 and pool.unpooled == 1 and len(made) == 2
    for buffer in (a, b, c):
        pool.release(buffer)  # c is not the pool's and is ignored
    assert pool.nblocks == 2
    pool.release(a)  # a second release changes nothing
    x, y = pool.acquire(10), pool.acquire(10)
    assert {x.__array_interface__["data"][0], y.__array_interface__["data"][0]} == {
        a.__array_interface__["data"][0],
        b.__array_interface__["data"][0],
    }


def test_empty_requests_need_no_block() -> None:
    pool, made = _pool()
    pool.release(pool.acquire(0))
    assert made == [] and pool.nblocks == 0


def test_threads_never_share_a_block() -> None:
    pool, _ = _pool()
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            buffer = pool.acquire(int(rng.integers(1, 5000)), cap=4096)
            buffer[:] = seed
            if not (buffer == seed).all():
                errors.append("a buffer was written by two threads")
            pool.release(buffer)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert pool.nblocks <= 2


def test_one_pool_per_device_index() -> None:
    pools = StagingPools(lambda n: np.zeros(n, dtype=np.uint8))
    assert pools.pool(0) is pools.pool(0)
    assert pools.pool(0) is not pools.pool(1)


class _Event:
    """A copy's event: complete once waited on."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name, self.done = log, name, False

    def synchronize(self) -> None:
        self.done = True
        self.log.append(self.name)


def test_a_block_serves_again_only_after_its_copy_has_finished() -> None:
    pool, made = _pool()
    log: list[str] = []
    a, b = pool.acquire(100), pool.acquire(100)
    event_a, event_b = _Event(log, "a"), _Event(log, "b")
    pool.release(a, event_a)
    assert not event_a.done  # releasing waits for nothing
    again = pool.acquire(100)
    assert again.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert event_a.done and log == ["a"]
    pool.release(b, event_b)
    pool.release(again)  # released without a copy: nothing to wait for next time
    pool.acquire(50)
    pool.acquire(50)
    assert log == ["a", "b"] and made == [100, 100]


def test_a_block_is_dropped_only_after_its_copy_has_finished() -> None:
    pool, made = _pool(max_blocks=1)
    log: list[str] = []
    pool.release(pool.acquire(100), _Event(log, "grown"))
    pool.release(pool.acquire(500))  # replaces the 100-byte block
    assert log == ["grown"] and made == [100, 500]
    pool.clear()
    buffer = pool.acquire(10)
    pool.release(buffer, _Event(log, "cleared"))
    pool.clear()
    assert log == ["grown", "cleared"]


def test_clearing_every_pool_drops_free_blocks_and_keeps_those_in_use() -> None:
    pools = StagingPools(lambda n: np.zeros(n, dtype=np.uint8))
    first, second = pools.pool(0), pools.pool(1)
    first.release(first.acquire(100))
    held = second.acquire(200)
    second.release(second.acquire(300))
    pools.clear()
    assert first.nblocks == 0 and second.nblocks == 1 and second.nin_use == 1
    second.release(held)
    assert second.nblocks == 1  # back in the pool, free until the next clear


def test_release_gpu_buffers_empties_the_read_paths_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuzarr
    from gpuzarr.backends.cuda import cupy_device

    # Host blocks stand in for pinned and device memory, which need a GPU.
    staging = StagingPools(lambda n: np.zeros(n, dtype=np.uint8))
    buffers = StagingPools(lambda n: np.zeros(n, dtype=np.uint8), max_blocks=4)
    monkeypatch.setattr(cupy_device, "PINNED_STAGING", staging)
    monkeypatch.setattr(cupy_device, "DEVICE_BUFFERS", buffers)
    for pools in (staging, buffers):
        pools.pool(0).release(pools.pool(0).acquire(1 << 20))
    assert staging.pool(0).nbytes and buffers.pool(0).nbytes
    gpuzarr.release_gpu_buffers()
    assert staging.pool(0).nbytes == buffers.pool(0).nbytes == 0
