"""The kvikio side of the direct read route, with a stand-in ``kvikio`` module: the I/O thread
count it is given and the size of the file-handle cache."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gpuzarr import config
from gpuzarr.backends.cuda import cupy_device
from gpuzarr.backends.cuda.launches import FileSpan
from gpuzarr.store.local import FileVersion


class FakeDefaults(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("kvikio.defaults")
        self.sets: list[tuple[str, Any]] = []

    def set(self, name: str, value: Any) -> None:
        self.sets.append((name, value))


@pytest.fixture
def fake_kvikio(monkeypatch: pytest.MonkeyPatch) -> FakeDefaults:
    kvikio = types.ModuleType("kvikio")
    defaults = FakeDefaults()
    kvikio.defaults = defaults  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kvikio", kvikio)
    monkeypatch.setitem(sys.modules, "kvikio.defaults", defaults)
    monkeypatch.setattr(cupy_device, "_kvikio_threads", None)
    monkeypatch.delenv("KVIKIO_NTHREADS", raising=False)
    return defaults


def test_io_threads_default_is_applied_once(fake_kvikio: FakeDefaults, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_default_concurrency", lambda: 64)
    assert config.default_io_threads() == 16
    assert cupy_device._kvikio() is sys.modules["kvikio"]
    cupy_device._kvikio()
    assert fake_kvikio.sets == [("num_threads", 16)]


def test_io_threads_default_follows_the_cpus(fake_kvikio: FakeDefaults, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_default_concurrency", lambda: 3)
    cupy_device._kvikio()
    assert fake_kvikio.sets == [("num_threads", 3)]


def test_io_threads_setting_is_applied_when_it_changes(
    fake_kvikio: FakeDefaults, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config, "_default_concurrency", lambda: 32)
    with config.set(io_threads=4):
        cupy_device._kvikio()
        cupy_device._kvikio()
    with config.set(io_threads=2):
        cupy_device._kvikio()
    cupy_device._kvikio()  # back to None: the default again
    assert fake_kvikio.sets == [("num_threads", 4), ("num_threads", 2), ("num_threads", 16)]


def test_kvikio_environment_thread_count_is_left_alone(
    fake_kvikio: FakeDefaults, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVIKIO_NTHREADS", "5")
    cupy_device._kvikio()
    assert fake_kvikio.sets == []
    with config.set(io_threads=6):  # an explicit setting still wins
        cupy_device._kvikio()
    assert fake_kvikio.sets == [("num_threads", 6)]


def test_no_kvikio_means_no_file_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kvikio", None)
    assert cupy_device._kvikio() is None


@pytest.mark.parametrize(
    ("soft", "expected"),
    [(1024, 256), (20000, 5000), (40, 16), (10**9, 65536), (-1, 65536)],
)
def test_file_handle_default_follows_the_open_file_limit(
    monkeypatch: pytest.MonkeyPatch, soft: int, expected: int
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (soft, max(soft, 10**9)))
    assert config.default_file_handles() == expected


def test_file_handle_cache_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache without a fixed capacity holds ``file_handles`` handles (default: from the open-file
    limit), so that 512 chunk files are opened once, not on every read."""
    opened: list[str] = []

    class FakeKvikio:
        @staticmethod
        def CuFile(path: str, mode: str) -> str:
            opened.append(path)
            return path

    monkeypatch.setattr(config, "default_file_handles", lambda: 600)
    cache = cupy_device.FileHandleCache()
    spans = [FileSpan(f"c/{i}", 0, 1) for i in range(512)]
    for _ in range(3):
        for span in spans:
            cache.handle(FakeKvikio, span)
    assert len(opened) == 512
    opened.clear()
    with config.set(file_handles=100):  # fewer handles than files: every read reopens them all
        small = cupy_device.FileHandleCache()
        assert small.capacity == 100
        for _ in range(2):
            for span in spans:
                small.handle(FakeKvikio, span)
    assert len(opened) == 2 * 512
    assert cupy_device.FileHandleCache(capacity=2).capacity == 2


def test_file_handles_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive integer"):
        config.set(file_handles=0)


@pytest.mark.parametrize(("preferred", "gds"), [(True, False), (False, True), (None, False)])
def test_gds_is_what_kvikio_reports(preferred: bool | None, gds: bool) -> None:
    """GPUDirect Storage when kvikio does not prefer its compatibility mode; a kvikio without
    ``is_compat_mode_preferred`` counts as compatibility mode."""
    defaults = types.SimpleNamespace()
    if preferred is not None:
        defaults.is_compat_mode_preferred = lambda: preferred
    assert cupy_device._gds_available(types.SimpleNamespace(defaults=defaults)) is gds


def test_coalesce_keeps_runs_of_one_file_close_and_in_order() -> None:
    from gpuzarr.backends.cuda.bind import _coalesce
    from gpuzarr.store.sharding import COALESCE_GAP_BYTES

    a = [FileSpan("a", 100, 10), FileSpan("a", 0, 100), FileSpan("a", 110 + COALESCE_GAP_BYTES, 5)]
    far = FileSpan("a", 200 + 2 * COALESCE_GAP_BYTES, 5)
    overlapping = FileSpan("a", 105 + COALESCE_GAP_BYTES, 10)
    other_version = FileSpan("a", 10, 10, FileVersion(1, 10, 2, 2, 1, 0))
    b = FileSpan("b", 0, 10)
    spans = [(0, a[0]), (1, b), (2, a[1]), (3, a[2]), (4, far), (5, overlapping), (6, other_version)]
    runs = [[t for t, _ in run] for run in _coalesce(spans)]
    # file a in offset order: 0-100, 100-110, then overlapping (at 105+gap) joins, a[2] overlaps it
    assert runs == [[2, 0, 5], [3], [4], [1], [6]]
