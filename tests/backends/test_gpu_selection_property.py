"""Random selections through the GPU read path (emulated device) against the CPU engine:
basic selections (negative steps included), orthogonal ones, points, and batches of crops, over
random shapes, chunkings and shardings.

The GPU arrays are strict, so no part of a read may fall back to the CPU, and every read with a
result must have launched the assemble kernel on the device: a read the CPU answered fails."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import gpuzarr
from gpuzarr.errors import DeviceError

from ..plan.test_selection import basic_selections, orthogonal_selections, shapes_and_chunks

if TYPE_CHECKING:
    from .emulated_gpu import EmulatedGpu

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _pair(shape: tuple[int, ...], chunks: tuple[int, ...], sharded: bool) -> tuple[Any, Any, np.ndarray[Any, Any]]:
    store = gpuzarr.MemoryStore()
    kwargs: dict[str, Any] = {"codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd"}]}
    if sharded and shape:
        kwargs["shards"] = tuple(2 * c for c in chunks)
    array = gpuzarr.create(store, shape=shape, dtype="<i4", chunks=chunks, fill_value=-1, **kwargs)
    values = np.arange(int(np.prod(shape)), dtype="<i4").reshape(shape) * 3 + 1
    if values.size:
        array[...] = values
    gpu = gpuzarr.open(store, device="gpu")
    assert isinstance(gpu, gpuzarr.Array)
    gpu.strict = True  # a CPU step raises DeviceError instead of passing silently
    return gpu, gpuzarr.open(store, device="cpu"), values


def _same(gpu_read: Any, expected: Any, emulated_gpu: EmulatedGpu) -> None:
    """``gpu_read()`` equals ``expected``, and ran on the (emulated) device."""
    launches = emulated_gpu.names().count("assemble_chunks")
    got = np.asarray(gpu_read())
    expected = np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    if expected.size:
        assert emulated_gpu.names().count("assemble_chunks") > launches, "the read did not run on the device"


@SETTINGS
@given(data=st.data(), sharded=st.booleans())
def test_basic_and_orthogonal(emulated_gpu: EmulatedGpu, data: st.DataObject, sharded: bool) -> None:
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1))
    gpu, cpu, _ = _pair(shape, chunks, sharded)
    sel = data.draw(basic_selections(shape))
    _same(lambda: gpu[sel], cpu[sel], emulated_gpu)
    osel = data.draw(orthogonal_selections(shape))
    _same(lambda: gpu.oindex[osel], cpu.oindex[osel], emulated_gpu)


@SETTINGS
@given(data=st.data(), sharded=st.booleans())
def test_points(emulated_gpu: EmulatedGpu, data: st.DataObject, sharded: bool) -> None:
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1, min_size=1))
    gpu, cpu, _ = _pair(shape, chunks, sharded)
    n = data.draw(st.integers(0, 6))
    points = tuple(
        np.asarray(data.draw(st.lists(st.integers(-size, size - 1), min_size=n, max_size=n)), dtype=np.intp)
        for size in shape
    )
    try:
        _same(lambda: gpu.vindex[points], cpu.vindex[points], emulated_gpu)
    except DeviceError as exc:
        # Points far apart over small chunks (two corners of a grid of 1-element chunks): their
        # bounding box reads far more chunks than they touch, which the device path declines
        # (strict says so) and the CPU engine reads.
        assert "its bounding box is much larger than the result" in str(exc), exc
        gpu.strict = False
        np.testing.assert_array_equal(np.asarray(gpu.vindex[points]), cpu.vindex[points])


@SETTINGS
@given(data=st.data(), sharded=st.booleans())
def test_batches_of_crops(emulated_gpu: EmulatedGpu, data: st.DataObject, sharded: bool) -> None:
    shape, chunks = data.draw(shapes_and_chunks(min_ndim=1, min_size=2))
    gpu, cpu, _ = _pair(shape, chunks, sharded)
    crop = tuple(data.draw(st.integers(1, size)) for size in shape)
    corner = st.tuples(*(st.integers(0, size - c) for size, c in zip(shape, crop, strict=True)))
    starts = data.draw(st.lists(corner, min_size=1, max_size=4))
    boxes = [tuple(slice(s, s + c) for s, c in zip(start, crop, strict=True)) for start in starts]
    _same(lambda: gpu.read_batch(boxes), cpu.read_batch(boxes), emulated_gpu)


@pytest.mark.parametrize("selection", [(slice(None, None, -1),), ([2, 0, 2],), (np.array([True, False, True]),)])
def test_one_dimensional_examples(emulated_gpu: EmulatedGpu, selection: tuple[Any, ...]) -> None:
    gpu, cpu, _ = _pair((3,), (2,), False)
    _same(lambda: gpu[selection], cpu[selection], emulated_gpu)


def test_points_far_apart_over_small_chunks(emulated_gpu: EmulatedGpu) -> None:
    """The example hypothesis found: two opposite corners of a grid of 1-element chunks."""
    gpu, cpu, _ = _pair((3, 4, 6), (1, 1, 1), False)
    points = (np.array([0, -1]),) * 3
    with pytest.raises(DeviceError, match="its bounding box is much larger than the result"):
        gpu.vindex[points]
    gpu.strict = False
    np.testing.assert_array_equal(np.asarray(gpu.vindex[points]), cpu.vindex[points])
