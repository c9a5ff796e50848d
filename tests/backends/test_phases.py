"""``backends.cuda.phases``: the steps of a GPU read timed on the host while a caller records,
here through the emulated device."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr.backends.cuda import phases

from .emulated_gpu import emulated_gpu  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from pathlib import Path

    from .emulated_gpu import EmulatedGpu


def _volume(root: Path) -> tuple[gpuzarr.Array, np.ndarray]:
    data = (np.arange(32 * 32 * 32, dtype="<u2") * 7 % 4093).reshape(32, 32, 32)
    array = gpuzarr.create(
        gpuzarr.LocalStore(root / "v.zarr"), shape=data.shape, dtype="<u2", chunks=(8, 8, 8),
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
    )  # fmt: skip
    array[...] = data
    return gpuzarr.open(str(root / "v.zarr"), device="gpu"), data


def test_outside_a_recording_phases_keep_nothing() -> None:
    with phases.recording() as log, phases.phase("inside"):
        pass
    with phases.phase("after"):  # the recording has ended: nothing keeps this one
        pass
    assert [p.name for p in log.phases] == ["inside"]


def test_a_whole_read_in_several_batches(tmp_path: Path, emulated_gpu: EmulatedGpu) -> None:  # noqa: F811
    array, data = _volume(tmp_path)
    # 64 chunks of 1 KiB decoded (5 KiB with nvCOMP's zstd scratch): four batches.
    with gpuzarr.config.set(gpu_batch_bytes=16 * 1024), phases.recording() as log:
        start = time.perf_counter()
        got = array[...]
        wall = time.perf_counter() - start
    np.testing.assert_array_equal(np.asarray(got), data)
    totals = {t.name: t for t in log.summary()}
    batches = totals["fetch"].count
    assert batches >= 2
    for name in ("bind", "buffers", "queue-decode", "device-wait", "assemble", "unshuffle"):
        assert totals[name].count == batches, name
    assert totals["plan"].count == totals["output"].count == 1
    assert totals["batch-wait"].count == batches
    # The plan comes first, the helper thread fetches, the caller's thread waits for the device.
    assert totals["plan"].first_start <= totals["fetch"].first_start <= totals["device-wait"].first_start
    caller = threading.get_ident()
    assert {p.thread for p in log.phases if p.name == "fetch"} != {caller}
    assert {p.thread for p in log.phases if p.name == "device-wait"} == {caller}
    assert all(0 <= t.first_start <= t.last_end <= wall + 0.5 for t in totals.values())
    assert all(p.start <= p.end for p in log.phases)


def test_a_phase_that_raises_is_kept() -> None:
    with phases.recording() as log, pytest.raises(ValueError, match="boom"), phases.phase("failing"):
        raise ValueError("boom")
    assert [p.name for p in log.phases] == ["failing"]


def test_one_recording_at_a_time() -> None:
    with phases.recording(), pytest.raises(RuntimeError, match="already being recorded"), phases.recording():
        pass
    with phases.recording() as log, phases.phase("again"):  # the first one ended: a new one may start
        pass
    assert [p.name for p in log.phases] == ["again"]


def test_the_summary_adds_up_each_name_and_prints_a_table() -> None:
    log = phases.PhaseLog()
    t0 = log.started
    for name, start, end in [("b", 0.003, 0.004), ("a", 0.001, 0.002), ("b", 0.005, 0.009)]:
        log.add(phases.Phase(name, 1, t0 + start, t0 + end))
    totals = log.summary()
    assert [(t.name, t.count) for t in totals] == [("a", 1), ("b", 2)]
    b = totals[1]
    assert b.seconds == pytest.approx(0.005) and b.first_start == pytest.approx(0.003)
    assert b.last_end == pytest.approx(0.009)
    table = phases.format_summary(totals, wall=0.01).splitlines()
    assert table[0].startswith("| phase | count | total ms")
    assert table[3] == "| b | 2 | 5.00 | 3.00 | 9.00 |"
    assert table[-1] == "| (wall) | 1 | 10.00 | 0.00 | 10.00 |"
