"""``python -m benchmarks.compare_revisions`` on tiny datasets: a row per dataset and workload,
each revision timed in processes that import gpuzarr from that revision's tree."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from benchmarks.compare_revisions import ROOT, compare, run_child, source_tree
from benchmarks.datasets import DATASETS, DataDir

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip("tensorstore")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    data = DataDir(tmp_path_factory.mktemp("data"), 1, log=lambda *_: None)
    return {spec.name: data.dataset(spec) for spec in DATASETS if spec.name in ("raw", "v2-blosc-lz4")}


def test_a_row_per_dataset_and_workload_with_tensorstore_ratios(datasets: dict[str, Path]) -> None:
    lines: list[str] = []
    workloads = ["crops-each", "full-read", "shard-partial", "full-write"]
    rows = compare({"before": ROOT, "after": ROOT}, datasets, workloads, 1, 2, 4, True, lines.append)
    assert [(r["dataset"], r["workload"]) for r in rows] == [(name, w) for name in datasets for w in workloads]
    for row in rows:
        for impl in ("before", "after", "tensorstore"):
            wall, cpu = row[impl]  # type: ignore[misc]
            assert wall > 0 and cpu >= 0
        assert row["tensorstore ÷ before"] > 0  # type: ignore[operator]
    assert len(lines) == 8 and all(line.startswith("| ") and line.count("|") == 8 for line in lines)


def test_a_revision_is_read_from_its_own_worktree(datasets: dict[str, Path]) -> None:
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, check=False).returncode:
        pytest.skip("not a git checkout")
    with source_tree("HEAD") as tree:
        assert tree != ROOT and (tree / "gpuzarr" / "__init__.py").exists()
        times = run_child(tree, datasets["raw"], "crops-batch", "gpuzarr", 1, 2)  # checks where gpuzarr came from
        assert len(times) == 1
    assert not tree.exists()


def test_the_command_prints_a_table(datasets: dict[str, Path]) -> None:
    data_dir = next(iter(datasets.values())).parent
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.compare_revisions", "--before", str(ROOT), "--rounds", "1",
         "--calls", "1", "--crops", "2", "--size-mib", "1", "--data-dir", str(data_dir), "--datasets", "raw",
         "--workloads", "crops-batch"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    header = "| dataset | workload | before | after | tensorstore | TensorStore ÷ before | TensorStore ÷ after |"
    assert lines[1] == header
    assert lines[3].startswith("| raw | crops-batch | ")
