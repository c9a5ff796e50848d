"""gpuzarr.config: settings are checked, and ``set`` doubles as a context manager."""

from __future__ import annotations

import pytest

from gpuzarr import config


def test_set_lasts_until_the_next_set() -> None:
    before = config.get("strict")
    config.set(strict=not before)
    try:
        assert config.get("strict") is (not before)
    finally:
        config.set(strict=before)
    assert config.get("strict") is before


def test_set_as_a_context_manager_restores_the_old_values() -> None:
    with config.set(concurrency=3, gpu_batch_bytes=4096):
        assert config.get("concurrency") == 3
        assert config.get("gpu_batch_bytes") == 4096
    assert config.get("gpu_batch_bytes") is None
    assert config.get("concurrency") >= 1  # None again: the CPUs this process may use


def test_restored_even_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), config.set(io_threads=2):
        raise RuntimeError("boom")
    assert config.get("io_threads") is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"concurrency": 0}, "positive integer"),
        ({"strict": "yes"}, "True or False"),
        ({"colour": 1}, "unknown"),
        ({"max_chunk_bytes": None}, "positive integer"),
        ({"max_chunk_bytes": 0}, "positive integer"),
        ({"gpu_small_read_chunks": -1}, "non-negative integer or None"),
        ({"gpu_small_read_chunks": True}, "non-negative integer or None"),
        ({"gpu_small_read_chunks": 2.5}, "non-negative integer or None"),
    ],
)
def test_bad_settings_change_nothing(settings: dict[str, object], message: str) -> None:
    from gpuzarr.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=message) as raised:
        config.set(io_threads=7, **settings)
    # Still the builtin errors they were: a ValueError, and a KeyError for an unknown name.
    assert isinstance(raised.value, KeyError if message == "unknown" else ValueError)
    assert config.get("io_threads") is None


def test_small_gpu_reads_default_to_twice_the_concurrency() -> None:
    with config.set(concurrency=3):
        assert config.default_small_read_chunks() == 6
    with config.set(gpu_small_read_chunks=0):  # 0 is a value: every GPU read on the device
        assert config.get("gpu_small_read_chunks") == 0
    assert config.get("gpu_small_read_chunks") is None


def test_io_pools_of_different_sizes_live_side_by_side() -> None:
    """A read of a store with another ``io_concurrency`` must not shut down the pool that a
    concurrent read is submitting to."""
    first = config.io_thread_pool(5)
    second = config.io_thread_pool(9)
    assert first is not second
    assert first.submit(lambda: 1).result() == 1
    assert config.io_thread_pool(5) is first


def test_a_pool_taken_before_concurrency_changes_still_takes_work() -> None:
    # A read on another thread that took the pool just before ``config.set(concurrency=...)``
    # submits to it afterwards: it was shut down, and the read raised "cannot schedule new
    # futures after shutdown" (a bare RuntimeError).
    import gc
    import time

    from gpuzarr import config, parallel

    with config.set(concurrency=3):
        taken = config.thread_pool()
        with config.set(concurrency=2):
            assert config.thread_pool() is not taken
            assert taken.submit(lambda: 7).result() == 7
            assert parallel.run_tasks(lambda x: x * 2, list(range(20))) == [x * 2 for x in range(20)]
        threads = list(taken._threads)
    assert threads
    del taken
    gc.collect()
    # Its threads end once nothing refers to it.
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.is_alive() for t in threads)
