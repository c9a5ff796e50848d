"""``benchmarks.batch_sweep`` reads every dataset at every budget through the emulated device,
checks each read against the ground truth and counts the executor's batches (no timing is
looked at)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks import batch_sweep

from ..backends.emulated_gpu import emulated_gpu  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from ..backends.emulated_gpu import EmulatedGpu


def _rows(output: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in output.splitlines() if line.startswith("| ")]


def test_rows_on_the_emulated_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], emulated_gpu: EmulatedGpu  # noqa: F811
) -> None:
    # 4 MiB volumes of 64^3 chunks (512 KiB decoded): a 1 MiB budget holds no zstd chunk with
    # its scratch (one per batch), a 16 MiB one several.
    assert batch_sweep.main(["--data-dir", str(tmp_path), "--size-mib", "4", "--crops", "6", "--repeats", "1",
                             "--budgets-mib", "1", "16", "--datasets", "zstd", "raw"]) == 0  # fmt: skip
    rows = _rows(capsys.readouterr().out)[1:]
    assert [(r[0], r[1]) for r in rows] == [("zstd", "1"), ("zstd", "16"), ("raw", "1"), ("raw", "16")]
    assert all(not r[2].startswith("error") for r in rows), rows
    batches = {(r[0], r[1]): int(r[2]) for r in rows}
    assert batches["zstd", "1"] > batches["zstd", "16"] >= 1
    assert batches["raw", "1"] > batches["raw", "16"] >= 1
    assert all(float(r[6]) > 0 and float(r[8].replace(",", "")) > 0 for r in rows), rows
    assert {r[9] for r in rows} == {"default"}


def test_rows_at_several_io_thread_counts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    emulated_gpu: EmulatedGpu,  # noqa: F811
) -> None:
    import gpuzarr

    seen: list[object] = []
    read = gpuzarr.Array.__getitem__

    def noting(self: gpuzarr.Array, selection: object) -> object:
        seen.append(gpuzarr.config.get("io_threads"))
        return read(self, selection)

    monkeypatch.setattr(gpuzarr.Array, "__getitem__", noting)
    args = ["--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "2", "--repeats", "1", "--budgets-mib", "16"]
    assert batch_sweep.main([*args, "--datasets", "raw", "--io-threads", "1", "3"]) == 0
    rows = _rows(capsys.readouterr().out)[1:]
    assert [(r[1], r[9]) for r in rows] == [("16", "1"), ("16", "3")]
    assert set(seen) == {1, 3}


def test_a_wrong_read_is_reported_in_its_row(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    emulated_gpu: EmulatedGpu,  # noqa: F811
) -> None:
    import gpuzarr

    read = gpuzarr.Array.__getitem__

    def off_by_one(self: gpuzarr.Array, selection: object) -> object:
        return read(self, selection) + 1

    monkeypatch.setattr(gpuzarr.Array, "__getitem__", off_by_one)
    assert batch_sweep.main(["--data-dir", str(tmp_path), "--size-mib", "1", "--crops", "2", "--repeats", "1",
                             "--budgets-mib", "16", "--datasets", "raw"]) == 0  # fmt: skip
    rows = _rows(capsys.readouterr().out)[1:]
    assert rows[0][2] == "error: AssertionError: the whole read differs from the ground truth"
