"""Box copies between separate device arrays in one assemble launch (``box_copies`` and
``Device.assemble_boxes``): what the loader's chunk caches use to put a batch together. Here on
the emulated device, and through ``kernels.launch_box_copies`` with a stand-in for CuPy that
hands the kernel's arguments to its NumPy model. The same launch on a GPU:
tests/gpu/test_kernels_gpu.py."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from gpuzarr.backends.cuda import kernel_reference, kernels
from gpuzarr.backends.cuda.box_copies import FILL_NBYTES, TABLES, BoxCopies, box_copies
from gpuzarr.backends.cuda.launch_checks import MAX_NDIM, check_assemble
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice


def _random_boxes(
    rng: np.random.Generator, ndim: int, rows: int, nboxes: int, nsources: int
) -> tuple[tuple[int, ...], list[np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
    """Sources of random shapes and ``nboxes`` boxes of them (a source may serve several or
    none), each copied to a random place in a row of the output of its own (``nboxes <= rows``),
    so that no two boxes overlap there."""
    row_shape = tuple(int(n) for n in rng.integers(3, 9, size=ndim))
    shapes = rng.integers(1, 7, size=(nsources, ndim))
    source = rng.integers(0, nsources, size=nboxes)
    extent = np.minimum(rng.integers(1, 7, size=(nboxes, ndim)), np.minimum(shapes[source], row_shape))
    src_start = rng.integers(0, shapes[source] - extent + 1)
    dst_start = rng.integers(0, np.asarray(row_shape) - extent + 1)
    sources = [rng.integers(0, 1 << 30, size=tuple(s), dtype=np.int32) for s in shapes.tolist()]
    boxes = {
        "shapes": shapes,
        "source": source,
        "row": rng.permutation(rows)[:nboxes],
        "src_start": src_start,
        "dst_start": dst_start,
        "extent": extent,
    }
    return (rows, *row_shape), sources, boxes


def _expected(out_shape: tuple[int, ...], sources: list[np.ndarray[Any, Any]], b: dict[str, Any]) -> Any:
    out = np.full(out_shape, -1, dtype=np.int32)
    for i, k in enumerate(b["source"].tolist()):
        src = tuple(slice(s, s + e) for s, e in zip(b["src_start"][i], b["extent"][i], strict=True))
        dst = tuple(slice(d, d + e) for d, e in zip(b["dst_start"][i], b["extent"][i], strict=True))
        out[(int(b["row"][i]), *dst)] = sources[k][src]
    return out


def _copies(out_shape: tuple[int, ...], b: dict[str, Any], itemsize: int = 4) -> BoxCopies:
    return box_copies(
        out_shape, itemsize, b["shapes"], b["source"], b["row"], b["src_start"], b["dst_start"], b["extent"]
    )


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_box_copies_equal_numpy_slicing(ndim: int) -> None:
    rng = np.random.default_rng(ndim)
    for _ in range(5):
        out_shape, sources, boxes = _random_boxes(rng, ndim, rows=12, nboxes=10, nsources=6)
        out = np.full(out_shape, -1, dtype=np.int32)
        device = CpuEmulatedDevice()
        device.assemble_boxes(out, sources, _copies(out_shape, boxes))
        np.testing.assert_array_equal(out, _expected(out_shape, sources, boxes))
        assert device.calls == [("assemble_chunks", 10)]  # one launch for every box


def test_one_source_serves_several_boxes() -> None:
    source = np.arange(16, dtype=np.uint16).reshape(4, 4)
    out = np.zeros((2, 2, 2), dtype=np.uint16)
    copies = box_copies((2, 2, 2), 2, [(4, 4)], [0, 0], [0, 1], [(0, 0), (2, 2)], [(0, 0), (0, 0)], [(2, 2)] * 2)
    CpuEmulatedDevice().assemble_boxes(out, [source], copies)
    np.testing.assert_array_equal(out, [source[:2, :2], source[2:, 2:]])


def _old_layout_tables(out_shape: tuple[int, ...], b: dict[str, Any]) -> tuple[Any, ...]:
    """The (nboxes, ndim) tables of the same boxes as the general assemble launch takes them,
    written out independently: strides of each box's source, the row axis first."""
    n, nd = len(b["source"]), len(out_shape) - 1
    shapes = b["shapes"][b["source"]]
    strides = np.ones((n, nd), np.int64)
    for axis in range(nd - 2, -1, -1):
        strides[:, axis] = strides[:, axis + 1] * shapes[:, axis + 1]
    zeros, ones = np.zeros((n, 1), np.int64), np.ones((n, 1), np.int64)
    return (
        np.hstack([zeros, strides]),
        np.hstack([zeros, b["src_start"]]),
        np.ones((n, nd + 1), np.int64),
        np.hstack([b["row"].reshape(n, 1), b["dst_start"]]),
        np.hstack([ones, b["extent"]]),
    )


@pytest.mark.parametrize("ndim", [1, 3, 7])
def test_the_block_holds_the_kernels_tables_in_its_layout(ndim: int) -> None:
    """The tables in the block are those ``check_assemble`` pads for the general launcher, in
    the kernel's order, then one pointer per box, then the fill value's bytes."""
    rng = np.random.default_rng(10 + ndim)
    out_shape, sources, boxes = _random_boxes(rng, ndim, rows=9, nboxes=9, nsources=4)
    copies = _copies(out_shape, boxes)
    itemsize = 4
    padded = check_assemble(
        int(np.prod(out_shape)) * itemsize,
        np.cumprod((*out_shape[1:], 1)[::-1])[::-1].tolist(),
        [sources[k].nbytes for k in boxes["source"].tolist()],
        *_old_layout_tables(out_shape, boxes),
        itemsize,
        0,
    )
    np.testing.assert_array_equal(copies.out_strides, padded[0])
    for name, table in zip(TABLES, padded[1:], strict=True):
        assert copies.table(name).shape == (9, MAX_NDIM)
        np.testing.assert_array_equal(copies.table(name), table, err_msg=name)
    n = copies.nboxes
    assert copies.block.size == MAX_NDIM + len(TABLES) * n * MAX_NDIM + n + FILL_NBYTES // 8
    assert not copies.block[-(FILL_NBYTES // 8) :].any()
    copies.set_pointers([0x1000 * (k + 1) for k in range(len(sources))])
    np.testing.assert_array_equal(copies.pointers, 0x1000 * (boxes["source"] + 1))
    np.testing.assert_array_equal(copies.source_nbytes, [s.nbytes for s in sources])


def test_boxes_the_checks_accept_never_leave_their_buffers() -> None:
    """Random boxes, many out of bounds: whatever ``box_copies`` accepts, the general check of
    the kernel's geometry accepts too; and it refuses some (the boxes are not all good)."""
    rng = np.random.default_rng(5)
    accepted = refused = 0
    for _ in range(1000):
        nd = int(rng.integers(1, 4))
        rows, nsources, n = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
        out_shape = (rows, *(int(x) for x in rng.integers(1, 6, size=nd)))
        b = {
            "shapes": rng.integers(0, 6, size=(nsources, nd)),
            "source": rng.integers(0, nsources + 1, size=n),
            "row": rng.integers(0, rows + 1, size=n),
            "src_start": rng.integers(0, 4, size=(n, nd)),
            "dst_start": rng.integers(0, 4, size=(n, nd)),
            "extent": rng.integers(0, 4, size=(n, nd)),
        }
        for values in b.values():
            if rng.random() < 0.05:  # now and then a negative entry
                values.reshape(-1)[rng.integers(values.size)] = -1
        try:
            copies = _copies(out_shape, b, itemsize=2)
        except ValueError:
            refused += 1
            continue
        accepted += 1
        launch = copies.launch()
        check_assemble(
            int(np.prod(out_shape)) * 2,
            launch.out_strides[: nd + 1].tolist(),
            (copies.source_nbytes[copies.source]).tolist(),
            *(copies.table(name)[:, : nd + 1] for name in TABLES),
            2,
            0,
        )
    assert accepted > 30 and refused > 300  # a fixed seed: 42 and 958


def test_a_box_past_its_source_or_the_output_is_refused() -> None:
    shapes, one = [(4, 4)], [0]
    reads_out = r"box 0 \(\[3, 4\] from \[2, 0\]\) reads outside its source 0 of shape \(4, 4\)"
    with pytest.raises(ValueError, match=reads_out):
        box_copies((1, 4, 4), 2, shapes, one, [0], [(2, 0)], [(0, 0)], [(3, 4)])
    with pytest.raises(ValueError, match="box 0 writes outside the output: row 1 of 1"):
        box_copies((1, 4, 4), 2, shapes, one, [1], [(0, 0)], [(0, 0)], [(2, 2)])
    with pytest.raises(ValueError, match=r"\[2, 2\] to \[3, 0\] of row 0\) writes outside the output of shape"):
        box_copies((1, 4, 4), 2, shapes, one, [0], [(0, 0)], [(3, 0)], [(2, 2)])
    with pytest.raises(ValueError, match="names a source outside the 1 given"):
        box_copies((1, 4, 4), 2, shapes, [1], [0], [(0, 0)], [(0, 0)], [(2, 2)])
    with pytest.raises(ValueError, match="src_start must not be negative"):
        box_copies((1, 4, 4), 2, shapes, one, [0], [(-1, 0)], [(0, 0)], [(2, 2)])
    with pytest.raises(ValueError, match=r"extent must have shape \(1, 2\)"):
        box_copies((1, 4, 4), 2, shapes, one, [0], [(0, 0)], [(0, 0)], [(2, 2, 2)])
    with pytest.raises(ValueError, match="itemsize"):
        box_copies((1, 4, 4), 3, shapes, one, [0], [(0, 0)], [(0, 0)], [(2, 2)])
    # An empty box copies nothing, wherever it says it starts.
    assert box_copies((1, 4, 4), 2, shapes, one, [0], [(9, 0)], [(0, 9)], [(0, 2)]).nboxes == 1


def test_starts_extents_and_shapes_that_would_wrap_int64_are_refused() -> None:
    """start + extent, and a shape's byte size, wrap in int64: no such box may pass for a small
    one (a wrapped sum is negative, a wrapped size small)."""
    huge = 2**63 - 1
    with pytest.raises(ValueError, match="writes outside the output"):
        box_copies((2, 4, 4), 1, [(4, 4)], [0], [0], [(0, 0)], [(huge, 0)], [(1, 4)])
    with pytest.raises(ValueError, match="reads outside its source"):
        box_copies((2, 4, 4), 1, [(4, 4)], [0], [0], [(huge, 0)], [(0, 0)], [(1, 4)])
    with pytest.raises(ValueError, match="too large"):  # its byte size would wrap to 4
        box_copies((2, 4, 4), 1, [(2**62 + 1, 4)], [0], [0], [(1, 0)], [(0, 0)], [(1, 4)])
    with pytest.raises(ValueError, match="too large"):
        box_copies((2**40, 2**20, 4), 8, [(4, 4)], [0], [0], [(0, 0)], [(0, 0)], [(1, 4)])


def test_sources_or_an_output_that_do_not_match_the_boxes_are_refused() -> None:
    copies = box_copies((1, 4, 4), 2, [(4, 4)], [0], [0], [(0, 0)], [(0, 0)], [(2, 2)])
    out = np.zeros((1, 4, 4), dtype=np.uint16)
    device = CpuEmulatedDevice()
    with pytest.raises(ValueError, match="source 0 holds 18 bytes, its shape needs 32"):
        device.assemble_boxes(out, [np.zeros(9, dtype=np.uint16)], copies)
    with pytest.raises(ValueError, match="2 sources for boxes of 1"):
        device.assemble_boxes(out, [np.zeros((4, 4), np.uint16)] * 2, copies)
    with pytest.raises(ValueError, match="C-contiguous"):
        device.assemble_boxes(out, [np.zeros((4, 8), np.uint16)[:, ::2]], copies)
    with pytest.raises(ValueError, match="C-contiguous"):
        device.assemble_boxes(np.zeros((1, 4, 8), np.uint16)[..., ::2], [np.zeros((4, 4), np.uint16)], copies)
    with pytest.raises(ValueError, match=r"an output of shape \(2, 4, 4\)"):
        device.assemble_boxes(np.zeros((2, 4, 4), np.uint16), [np.zeros((4, 4), np.uint16)], copies)
    with pytest.raises(ValueError, match="4-byte items"):
        device.assemble_boxes(np.zeros((1, 4, 4), np.uint32), [np.zeros((4, 4), np.uint16)], copies)


class _DeviceArray:
    """A stand-in for a CuPy array: NumPy memory and a made-up device pointer."""

    def __init__(self, host: np.ndarray[Any, Any], ptr: int) -> None:
        self.host = host
        self.data = types.SimpleNamespace(ptr=ptr)
        self.flags = host.flags
        self.nbytes = host.nbytes
        self.shape = host.shape
        self.dtype = host.dtype
        self.size = host.size


def test_the_cuda_launch_hands_the_kernel_its_arguments_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CudaDevice.assemble_boxes`` through ``kernels.launch_box_copies`` with CuPy standing in:
    the arguments the kernel receives, run through its NumPy model (each pointer mapped back to
    its source), give NumPy slicing; the block goes up in one copy."""
    from gpuzarr.backends.cuda.cupy_device import CudaDevice

    uploads: list[np.ndarray[Any, Any]] = []

    def asarray(host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        uploads.append(host)
        return host.copy()

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(asarray=asarray))
    launched: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(kernels, "get_kernel", lambda name: lambda grid, block, args: launched.append((name, args)))
    rng = np.random.default_rng(3)
    out_shape, sources, boxes = _random_boxes(rng, 3, rows=10, nboxes=10, nsources=5)
    device_sources = [_DeviceArray(s, 0x10000 * (k + 1)) for k, s in enumerate(sources)]
    out = _DeviceArray(np.full(out_shape, -1, dtype=np.int32), 0x100)
    copies = _copies(out_shape, boxes)
    CudaDevice.__new__(CudaDevice).assemble_boxes(out, device_sources, copies)
    assert len(uploads) == 1
    ((name, args),) = launched
    assert name in ("assemble_rows", "assemble_chunks")
    by_pointer = {0x10000 * (k + 1): s.reshape(-1).view(np.uint8) for k, s in enumerate(sources)}
    pointers = args[2].view(np.uint64)
    assert args[0] is out
    model = kernel_reference.assemble_rows if name == "assemble_rows" else kernel_reference.assemble_chunks
    result = out.host.reshape(-1).view(np.uint8)
    tables = [a.reshape(-1, MAX_NDIM) for a in args[3:8]]
    model(
        result, args[1], [by_pointer[int(p)] for p in pointers], *tables, args[8].view(np.uint8)[:4],
        int(args[9]), int(args[10]), int(args[11]), int(args[12]),
    )  # fmt: skip
    np.testing.assert_array_equal(out.host, _expected(out_shape, sources, boxes))


def test_no_boxes_launch_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[str] = []
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(asarray=lambda host: host))
    monkeypatch.setattr(kernels, "get_kernel", lambda name: lambda *args: launched.append(name))
    copies = box_copies((2, 4), 2, np.zeros((0, 1)), [], [], np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 1)))
    assert copies.nboxes == 0
    kernels.launch_box_copies(_DeviceArray(np.zeros((2, 4), np.uint16), 0x100), copies)
    assert launched == []


def test_runs_checked_together_give_each_run_its_own_launch() -> None:
    """``box_copies_of_runs``: each run's block equal to its own ``box_copies``; an error names
    the run and the box by the run's numbering."""
    from gpuzarr.backends.cuda.box_copies import BoxRun, box_copies_of_runs

    rng = np.random.default_rng(21)
    row_shape = (5, 6, 7)
    runs = []
    for rows in (4, 1, 6, 3):
        nsources = int(rng.integers(1, 5))
        shapes = rng.integers(1, 9, size=(nsources, 3))
        n = int(rng.integers(0, 7))  # a run may have no box
        source = rng.integers(0, nsources, size=n)
        extent = np.minimum(rng.integers(1, 7, size=(n, 3)), np.minimum(shapes[source], row_shape))
        runs.append(BoxRun(
            rows, shapes, source, rng.integers(0, rows, size=n), rng.integers(0, shapes[source] - extent + 1),
            rng.integers(0, np.asarray(row_shape) - extent + 1), extent,
        ))  # fmt: skip
    together = box_copies_of_runs(row_shape, 2, runs)
    assert [c.out_shape for c in together] == [(r.rows, *row_shape) for r in runs]
    for run, got in zip(runs, together, strict=True):
        alone = box_copies((run.rows, *row_shape), 2, *run[1:])
        np.testing.assert_array_equal(got.block, alone.block)
        np.testing.assert_array_equal(got.source, alone.source)
        np.testing.assert_array_equal(got.source_nbytes, alone.source_nbytes)
    bad = runs[2]._replace(out_row=np.full(len(np.asarray(runs[2].source)), 6))
    with pytest.raises(ValueError, match="run 2: box 0 writes outside the output: row 6 of 6"):
        box_copies_of_runs(row_shape, 2, [*runs[:2], bad, runs[3]])
    assert box_copies_of_runs(row_shape, 2, []) == []
