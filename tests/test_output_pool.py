"""gpuzarr.output_pool: a host output is handed out again only once nothing refers to it, the
pool stays within its byte bound, and reads into reused buffers give the same data as fresh
ones (stale bytes never show through)."""

from __future__ import annotations

import gc
import sys
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr import config
from gpuzarr.output_pool import MIN_POOLED_BYTES, HostOutputPool, size_class
from gpuzarr.output_pool import pool as process_pool

if TYPE_CHECKING:
    from collections.abc import Iterator

U16 = np.dtype(np.uint16)
SHAPE = (64, 64, 16)  # 128 KiB of uint16: above MIN_POOLED_BYTES
NBYTES = 64 * 64 * 16 * 2

pytestmark = pytest.mark.skipif(not HostOutputPool().enabled, reason="no reference counts here")


@pytest.fixture
def pool() -> Iterator[HostOutputPool]:
    yield HostOutputPool()


def _address(array: np.ndarray[Any, Any]) -> int:
    return int(array.ctypes.data)


def test_an_unreferenced_output_is_handed_out_again(pool: HostOutputPool) -> None:
    first = pool.empty(SHAPE, U16)
    address = _address(first)
    del first
    again = pool.empty(SHAPE, U16)
    assert _address(again) == address
    assert again.shape == SHAPE and again.dtype == U16 and again.flags.c_contiguous
    assert address % 4096 == 0


@pytest.mark.parametrize(
    "keep",
    [
        lambda a: a,
        lambda a: a[3:5],
        lambda a: a.view(np.int16).reshape(-1),
        lambda a: memoryview(a),
        lambda a: np.frombuffer(memoryview(a), dtype=np.uint8),
        lambda a: np.lib.stride_tricks.as_strided(a, shape=(2,), strides=(2,)),
        lambda a: np.ctypeslib.as_ctypes(a),
        lambda a: [a.T],
    ],
    ids=["array", "slice", "view", "memoryview", "frombuffer", "as_strided", "ctypes", "in-list"],
)
def test_an_output_something_still_refers_to_is_never_handed_out(pool: HostOutputPool, keep: Any) -> None:
    first = pool.empty(SHAPE, U16)
    first[...] = 0x0707  # every byte 7, whatever view reads it
    address = _address(first)
    kept = keep(first)
    del first
    second = pool.empty(SHAPE, U16)
    assert _address(second) != address
    second[...] = 0x0909  # writing the new output leaves the kept one alone
    del second
    held = kept[0] if isinstance(kept, list) else kept
    np.testing.assert_array_equal(np.ascontiguousarray(np.asarray(held)).view(np.uint8), 7)
    del kept, held
    gc.collect()
    assert _address(pool.empty(SHAPE, U16)) == address  # free again once the last view went


def test_a_torch_tensor_sharing_the_memory_keeps_it_busy(pool: HostOutputPool) -> None:
    torch = pytest.importorskip("torch")
    first = pool.empty(SHAPE, U16)
    first[...] = 5
    address = _address(first)
    tensor = torch.from_numpy(first.view(np.int16))
    del first
    second = pool.empty(SHAPE, U16)
    second[...] = 1
    assert _address(second) != address
    assert int(tensor.sum()) == 5 * int(np.prod(SHAPE))
    del tensor, second
    assert _address(pool.empty(SHAPE, U16)) == address


def test_the_same_bytes_in_another_shape_or_dtype_reuse_the_buffer(pool: HostOutputPool) -> None:
    address = _address(pool.empty(SHAPE, U16))
    other = pool.empty((NBYTES // 4,), np.dtype(np.float32))
    assert _address(other) == address and other.shape == (NBYTES // 4,)


def test_other_sizes_get_their_own_buffers(pool: HostOutputPool) -> None:
    a = pool.empty(SHAPE, U16)
    b = pool.empty((64, 64, 17), U16)
    assert _address(a) != _address(b)
    assert pool.held_bytes() == size_class(NBYTES) + size_class(64 * 64 * 17 * 2)


def test_sizes_a_little_apart_share_a_buffer(pool: HostOutputPool) -> None:
    """Outputs of many shapes (random crops) each got a buffer of exactly their size, and the
    pool filled with idle buffers no later output fitted."""
    a = pool.empty((64, 64, 64), U16)
    address = _address(a)
    del a
    b = pool.empty((64, 64, 60), U16)  # within the same size class
    assert _address(b) == address and b.shape == (64, 64, 60)
    assert pool.held_bytes() == size_class(64 * 64 * 64 * 2)


def test_buffers_not_asked_for_again_go(pool: HostOutputPool) -> None:
    odd = pool.empty((64, 64, 33), U16)
    del odd
    for _ in range(1100):  # other outputs: the odd size's buffer is idle all along
        pool.empty(SHAPE, U16)
    assert pool.held_bytes() == size_class(NBYTES)


def test_small_outputs_are_not_pooled(pool: HostOutputPool) -> None:
    small = pool.empty((MIN_POOLED_BYTES // 2 - 1,), U16)
    assert small.nbytes < MIN_POOLED_BYTES
    assert pool.held_bytes() == 0


def test_the_byte_bound_holds_and_the_oldest_goes_first(pool: HostOutputPool) -> None:
    with config.set(host_output_pool_bytes=3 * NBYTES):
        a, b, c = (pool.empty(SHAPE, U16) for _ in range(3))
        assert pool.held_bytes() == 3 * NBYTES
        addresses = [_address(x) for x in (a, b, c)]
        d = pool.empty(SHAPE, U16)  # all three in use: the oldest (a) leaves the pool
        assert pool.held_bytes() == 3 * NBYTES
        del a, b
        reused = {_address(pool.empty(SHAPE, U16)) for _ in range(2)}
        assert addresses[0] not in reused  # a was let go, never handed out again
        assert addresses[1] in reused
        del c, d


def test_an_output_larger_than_the_bound_is_not_pooled(pool: HostOutputPool) -> None:
    with config.set(host_output_pool_bytes=NBYTES - 1):
        pool.empty(SHAPE, U16)
        assert pool.held_bytes() == 0


def test_zero_turns_the_pool_off(pool: HostOutputPool) -> None:
    with config.set(host_output_pool_bytes=0):
        first = pool.empty(SHAPE, U16)
        address = _address(first)
        del first
        assert pool.held_bytes() == 0
        kept = [pool.empty(SHAPE, U16) for _ in range(3)]
        assert all(x.ctypes.data % 4096 == 0 for x in kept)
    assert address  # a fresh allocation each time; nothing to compare but alignment


def test_a_lowered_bound_lets_go_of_what_the_pool_held_beyond_it(pool: HostOutputPool) -> None:
    # The pool shrank only when a buffer was added: after set(host_output_pool_bytes=0), or a
    # bound below the reads' size, what it held stayed until release().
    for _ in range(4):
        pool.empty((NBYTES // 2 + 1,), U16)  # four sizes, each kept
        pool.empty(SHAPE, U16)
    held = pool.held_bytes()
    assert held >= 2 * NBYTES
    with config.set(host_output_pool_bytes=NBYTES):
        kept = pool.empty(SHAPE, U16)
        assert pool.held_bytes() <= NBYTES
        del kept
    with config.set(host_output_pool_bytes=0):
        pool.empty((8,), U16)  # any read, even one too small to pool
        assert pool.held_bytes() == 0


@pytest.mark.parametrize("value", [-1, 1.5, True, "256M", None])
def test_a_bad_bound_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="host_output_pool_bytes"):
        config.set(host_output_pool_bytes=value)


def test_release_frees_idle_buffers_only(pool: HostOutputPool) -> None:
    busy = pool.empty(SHAPE, U16)
    idle = pool.empty(SHAPE, U16)
    del idle
    assert pool.idle_bytes() == NBYTES
    assert pool.release() == NBYTES
    assert pool.held_bytes() == NBYTES and pool.idle_bytes() == 0
    assert _address(pool.empty(SHAPE, U16)) != _address(busy)


def test_threads_never_share_an_output(pool: HostOutputPool) -> None:
    """Each thread stamps its output and checks it after the others ran: a buffer handed to two
    threads at once would show another thread's stamp."""
    errors: list[str] = []
    start = threading.Barrier(8)

    def work(stamp: int) -> None:
        start.wait()
        for _ in range(200):
            out = pool.empty(SHAPE, U16)
            out[...] = stamp
            out[0, 0, 0] = stamp  # a little more time holding it
            if not (out == stamp).all():
                errors.append(f"thread {stamp} saw another's bytes")
            del out

    threads = [threading.Thread(target=work, args=(i + 1,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert pool.held_bytes() <= config.get("host_output_pool_bytes")


# reads through the process's pool


@pytest.fixture
def sparse_array(tmp_path: Any) -> gpuzarr.Array:
    """Chunks written only in the first half; the rest read as the fill value."""
    a = gpuzarr.create(
        store=str(tmp_path / "a.zarr"),
        shape=(128, 128, 32),
        chunks=(32, 32, 16),
        dtype="uint16",
        fill_value=3,
    )
    a[:64] = np.arange(64 * 128 * 32, dtype=np.uint16).reshape(64, 128, 32)
    return a


def test_reads_into_reused_outputs_show_no_stale_bytes(sparse_array: gpuzarr.Array) -> None:
    expected = np.full((128, 128, 32), 3, np.uint16)
    expected[:64] = np.arange(64 * 128 * 32, dtype=np.uint16).reshape(64, 128, 32)
    process_pool().release()
    for origin in [(0, 0), (64, 0), (10, 50), (70, 3), (0, 64), (64, 64)] * 2:
        z, y = origin
        got = sparse_array[z : z + 64, y : y + 64, 0:16]
        np.testing.assert_array_equal(got, expected[z : z + 64, y : y + 64, 0:16])
        del got


def test_batches_into_reused_outputs_show_no_stale_bytes(sparse_array: gpuzarr.Array) -> None:
    expected = np.full((128, 128, 32), 3, np.uint16)
    expected[:64] = np.arange(64 * 128 * 32, dtype=np.uint16).reshape(64, 128, 32)
    rng = np.random.default_rng(0)
    for _ in range(6):
        origins = rng.integers(0, 64, size=(4, 3))
        origins[:, 2] %= 16
        selections = [(slice(z, z + 64), slice(y, y + 64), slice(x, x + 16)) for z, y, x in origins]
        batch = sparse_array.read_batch(selections)
        for got, selection in zip(batch, selections, strict=True):
            np.testing.assert_array_equal(got, expected[selection])
        del batch


def test_a_held_read_keeps_its_values_while_later_reads_run(sparse_array: gpuzarr.Array) -> None:
    first = sparse_array[0:64, 0:64, 0:16]
    snapshot = first.copy()
    for _ in range(4):
        sparse_array[64:128, 64:128, 16:32]  # same size: would reuse ``first`` if it were idle
    np.testing.assert_array_equal(first, snapshot)


def test_an_output_past_the_bound_keeps_its_reference_count_while_in_use(pool: HostOutputPool) -> None:
    """Code holding an output may take a baseline reference count and treat the buffer as free
    when the count is back there (the loader's buffer sets do): the pool must not let go of its
    own reference while the buffer is in use, or a holder's count would drop to the baseline."""
    with config.set(host_output_pool_bytes=2 * NBYTES):
        first = pool.empty(SHAPE, U16)
        owner = first.base
        before = sys.getrefcount(owner)
        others = [pool.empty(SHAPE, U16) for _ in range(3)]  # ``first`` leaves the pool
        assert sys.getrefcount(owner) == before
        assert pool.held_bytes() <= 2 * NBYTES
        del first, owner, others
        pool.release()
        assert pool.held_bytes() == 0


def test_a_loader_that_keeps_its_batches_past_the_bound_keeps_them_intact(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    from gpuzarr.loader import CropLoader

    a = gpuzarr.create(store=str(tmp_path / "v.zarr"), shape=(64, 64, 64), chunks=(16, 16, 16), dtype="uint16")
    volume = np.arange(64**3, dtype=np.uint16).reshape(64, 64, 64)
    a[...] = volume
    rng = np.random.default_rng(0)
    crops = [(0, tuple(int(x) for x in rng.integers(0, 32, 3))) for _ in range(12)]
    batch_bytes = 2 * 32**3 * 2
    with config.set(host_output_pool_bytes=2 * batch_bytes):  # batches leave the pool while held
        loader = CropLoader(a, (32, 32, 32), 2, sampler=crops, shuffle=False, output="torch", prefetch=2)
        kept = [batch.data for batch in loader]
        assert all(isinstance(t, torch.Tensor) for t in kept)
        got = np.concatenate([t.numpy() for t in kept])
    for crop, (_, origin) in zip(got, crops, strict=True):
        np.testing.assert_array_equal(crop, volume[tuple(slice(o, o + 32) for o in origin)])


def test_size_classes_round_up_by_at_most_a_quarter() -> None:
    from gpuzarr.output_pool import size_class

    assert size_class(1000) == 1000 and size_class(MIN_POOLED_BYTES) == MIN_POOLED_BYTES
    for n in [MIN_POOLED_BYTES + 1, 300_000, 624_640, 2**20, 2**20 + 1, 10**7]:
        assert n <= size_class(n) <= n * 1.25
    assert {size_class(n) for n in range(2**19 + 1, 2**20 + 1, 4096)} == {5 << 17, 6 << 17, 7 << 17, 8 << 17}


def test_byte_buffers_of_nearby_lengths_share_memory_once_let_go(pool: HostOutputPool) -> None:
    first = pool.bytes_buffer(300_000)
    assert first.size == 300_000 and first.dtype == np.uint8
    held = first.data.cast("B")[10:20]  # what a store hands out: a memoryview of part of it
    address = _address(first)
    del first
    assert _address(pool.bytes_buffer(310_000)) != address  # the slice still refers to it
    del held
    gc.collect()
    assert _address(pool.bytes_buffer(310_000)) == address  # same size class, free again
