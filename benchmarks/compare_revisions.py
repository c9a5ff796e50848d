"""Two revisions of gpuzarr (and TensorStore) on the same reads or writes, in fresh processes, interleaved.

    python -m benchmarks.compare_revisions --before REV [--after PATH] [--rounds 3] [--calls 3]
        [--size-mib 128] [--data-dir DIR]
        [--workloads crops-each crops-batch full-read shard-partial full-write]
        [--datasets zstd raw ...] [--no-tensorstore]

On a shared machine whose speed drifts by tens of percent within minutes, one run of
``python -m benchmarks.run`` cannot tell a 10 % change from the drift. This tool measures each
(dataset, workload) cell as rounds: in every round, one fresh process per implementation (the
``--before`` revision, the working tree or ``--after``, TensorStore), one after the other, each
warming up once and timing ``--calls`` calls. The table gives the median over all calls of the
wall time per call, the process CPU time per call, and TensorStore's time divided by each
revision's (above 1: gpuzarr is faster). Compare within a row.

The workloads are ``benchmarks.run``'s: ``full-write`` writes the dataset whole into a fresh
array with the dataset's metadata, made in the system's temporary directory before each timed
call (the setup is not timed).

``--before`` is a git revision, checked out into a temporary worktree for the run (or a path to a
source tree). The datasets are the benchmark's own (``benchmarks.datasets``), generated into
``--data-dir`` when missing; the selections are ``benchmarks.workloads.random_boxes``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .datasets import DATASETS, OPTIONAL_DATASETS, DataDir

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("crops-each", "crops-batch", "full-read", "shard-partial", "full-write")

#: What each fresh process runs: argv = [source tree, dataset path, workload, impl, calls, crops].
_CHILD = r"""
import json, os, shutil, sys, tempfile, time
tree, path, workload, impl, calls, ncrops = sys.argv[1:7]
sys.path.insert(0, tree)
sys.path.insert(1, os.environ["BENCHMARKS_ROOT"])
from benchmarks.workloads import random_boxes
import gpuzarr
a = gpuzarr.open(path, mode="r")
box = (64, 64, 64) if a.chunks[0] > 1 else (8, 128, 128)
sels = random_boxes(a.shape, box, a.chunks, int(ncrops), 1)
# benchmarks.run's shard-partial boxes: 16 of 128^3 (on the sharded dataset there)
boxes = random_boxes(a.shape, tuple(min(128, max(d - 16, 1)) for d in a.shape), a.chunks, 16, 2)
driver = "zarr" if os.path.exists(os.path.join(path, ".zarray")) else "zarr3"
setup = lambda: None
if workload == "full-write":
    # The dataset written whole into a fresh array with its metadata, made before each call.
    data = a[...]
    target = os.path.join(tempfile.mkdtemp(prefix="gpuzarr-write-"), "w.zarr")
    handle = []
    def setup():
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        for name in ("zarr.json", ".zarray", ".zattrs"):
            if os.path.exists(os.path.join(path, name)):
                shutil.copy(os.path.join(path, name), target)
        if impl == "tensorstore":
            import tensorstore as ts
            spec = {"driver": driver, "kvstore": {"driver": "file", "path": target}}
            handle[:] = [ts.open(spec, open=True, write=True).result()]
        else:
            handle[:] = [gpuzarr.open(target, mode="r+")]
if impl == "tensorstore":
    import tensorstore as ts
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": path}}, open=True, read=True).result()
    calls_of = {
        "crops-each": lambda: [t[s].read().result() for s in sels],
        "crops-batch": lambda: [f.result() for f in [t[s].read() for s in sels]],
        "full-read": lambda: t.read().result(),
        "shard-partial": lambda: [t[s].read().result() for s in boxes],
        "full-write": lambda: handle[0].write(data).result(),
    }
else:
    def write():
        handle[0][...] = data
    calls_of = {
        "crops-each": lambda: [a[s] for s in sels],
        "crops-batch": lambda: a.read_batch(sels),
        "full-read": lambda: a[...],
        "shard-partial": lambda: [a[s] for s in boxes],
        "full-write": write,
    }
call = calls_of[workload]
setup()
call()
times = []
for _ in range(int(calls)):
    setup()
    w, c = time.perf_counter(), time.process_time()
    result = call()
    times.append((time.perf_counter() - w, time.process_time() - c))
    del result
if workload == "full-write":
    shutil.rmtree(os.path.dirname(target), ignore_errors=True)
print(json.dumps({"times": times, "gpuzarr": gpuzarr.__file__}))
"""


@contextlib.contextmanager
def source_tree(rev_or_path: str) -> Iterator[Path]:
    """A directory holding the ``gpuzarr`` package of ``rev_or_path``: the path itself, or a
    temporary git worktree of the revision (removed afterwards)."""
    path = Path(rev_or_path)
    if (path / "gpuzarr" / "__init__.py").exists():
        yield path.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="gpuzarr-rev-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", "-q", str(tree), rev_or_path], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=False)


def run_child(tree: Path, dataset: Path, workload: str, impl: str, calls: int, crops: int) -> list[tuple[float, float]]:
    """The (wall, CPU) seconds of each timed call, from a fresh process."""
    # The tree's package first on the path; an inherited PYTHONPATH could put another in front.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"BENCHMARKS_ROOT": str(ROOT)}
    args = [sys.executable, "-c", _CHILD, str(tree), str(dataset), workload, impl, str(calls), str(crops)]
    done = subprocess.run(args, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"{impl} {workload} {dataset.name} failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if impl != "tensorstore" and not Path(report["gpuzarr"]).is_relative_to(tree):
        raise RuntimeError(f"the {impl} process imported gpuzarr from {report['gpuzarr']}, not from {tree}")
    return [(float(w), float(c)) for w, c in report["times"]]


def compare(
    trees: dict[str, Path], datasets: dict[str, Path], workloads: list[str], rounds: int, calls: int, crops: int,
    tensorstore: bool, log: object = print,
) -> list[dict[str, object]]:  # fmt: skip
    """One row per (dataset, workload): median wall and CPU seconds per call of each
    implementation, and TensorStore's wall time divided by each revision's."""
    impls = [*trees, *(["tensorstore"] if tensorstore else [])]
    rows = []
    for name, path in datasets.items():
        for workload in workloads:
            times: dict[str, list[tuple[float, float]]] = {impl: [] for impl in impls}
            for _ in range(rounds):
                for impl in impls:
                    tree = trees.get(impl, next(iter(trees.values())))
                    times[impl] += run_child(tree, path, workload, impl, calls, crops)
            row: dict[str, object] = {"dataset": name, "workload": workload}
            for impl in impls:
                row[impl] = (statistics.median(w for w, _ in times[impl]), statistics.median(c for _, c in times[impl]))
            if tensorstore:
                ts_wall = statistics.median(w for w, _ in times["tensorstore"])
                for rev in trees:
                    row[f"tensorstore ÷ {rev}"] = ts_wall / statistics.median(w for w, _ in times[rev])
            rows.append(row)
            if callable(log):
                log(format_row(row, impls, list(trees) if tensorstore else []))
    return rows


def format_row(row: dict[str, object], impls: list[str], ratios_for: list[str]) -> str:
    cells = [str(row["dataset"]), str(row["workload"])]
    for impl in impls:
        wall, cpu = row[impl]  # type: ignore[misc]
        cells.append(f"{wall:.3f} s (CPU {cpu:.2f})")
    cells += [f"{row[f'tensorstore ÷ {rev}']:.2f}" for rev in ratios_for]
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare_revisions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--before", required=True, help="git revision (or source tree) to compare against")
    p.add_argument("--after", default=str(ROOT), help="source tree (default: this working tree)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=3, help="timed calls per process")
    p.add_argument("--crops", type=int, default=256)
    p.add_argument("--size-mib", type=float, default=128)
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "gpuzarr-bench")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=["crops-each", "crops-batch"])
    p.add_argument(
        "--datasets",
        nargs="+",
        choices=[d.name for d in DATASETS + OPTIONAL_DATASETS],
        default=[d.name for d in DATASETS],
    )
    p.add_argument("--no-tensorstore", action="store_true")
    args = p.parse_args(argv)
    data = DataDir(args.data_dir, args.size_mib)
    datasets = {spec.name: data.dataset(spec) for spec in DATASETS + OPTIONAL_DATASETS if spec.name in args.datasets}
    with source_tree(args.before) as before, source_tree(args.after) as after:
        trees = {"before": before, "after": after}
        impls = [*trees, *([] if args.no_tensorstore else ["tensorstore"])]
        ratios = [] if args.no_tensorstore else [f"TensorStore ÷ {rev}" for rev in trees]
        print(f"before: {args.before} ({before}); after: {after}; {args.rounds} rounds x {args.calls} calls")
        print("| dataset | workload | " + " | ".join(impls + ratios) + " |")
        print("|" + "---|" * (2 + len(impls) + len(ratios)))
        compare(trees, datasets, args.workloads, args.rounds, args.calls, args.crops, not args.no_tensorstore)


if __name__ == "__main__":
    main()
