"""Run gpuzarr beside zarr-python (default and zarrs pipelines) and TensorStore on the same data.

    python -m benchmarks.run [--size-mib 512] [--repeats 5] [--out benchmarks/out]
                             [--device cpu|gpu] [--only NAME ...] [--save-results]

See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from .datasets import DATASET_NAMES, DATASETS, OPTIONAL_DATASET_NAMES, OPTIONAL_DATASETS, DataDir, stored_bytes
from .environment import environment
from .impls import ALL_IMPL_NAMES, implementations
from .measure import log
from .report import add_fractions, write_outputs
from .workloads import OPTIONAL_WORKLOADS, WORKLOADS, bench_ceilings, bench_dataset

HERE = Path(__file__).resolve().parent


# -- main ----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--size-mib", type=float, default=512, help="size of each dataset (default 512)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per implementation (default 5)")
    p.add_argument("--crops", type=int, default=256, help="random crops per crop run (default 256)")
    p.add_argument("--boxes", type=int, default=16, help="128^3 boxes per shard-partial run (default 16)")
    p.add_argument("--out", type=Path, default=HERE / "out", help="where results.json/.md go")
    p.add_argument("--data-dir", type=Path, default=HERE / "data", help="generated datasets (reused)")
    p.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        default="cpu",
        help="gpu adds the GPU implementations (skipped, with a note, without a usable GPU)",
    )
    p.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="NAME",
        help="restrict to these implementations / datasets / workloads (any mix): "
        + ", ".join(ALL_IMPL_NAMES + DATASET_NAMES + OPTIONAL_DATASET_NAMES + WORKLOADS + OPTIONAL_WORKLOADS)
        + " (" + ", ".join([*OPTIONAL_DATASET_NAMES, *OPTIONAL_WORKLOADS]) + " run only when named)",
    )
    p.add_argument("--save-results", action="store_true", help="also write benchmarks/results/<date>-<machine>.md")
    p.add_argument("--results-dir", type=Path, default=HERE / "results", help=argparse.SUPPRESS)
    p.add_argument("--machine", default=None, help="machine name for --save-results (default: CPU model + cores)")
    args = p.parse_args(argv)
    names = ALL_IMPL_NAMES + DATASET_NAMES + OPTIONAL_DATASET_NAMES + WORKLOADS + OPTIONAL_WORKLOADS
    unknown = [o for o in args.only if o not in names]
    if unknown:
        p.error(f"--only: unknown name(s) {unknown}; choose from {names}")
    if args.repeats < 1 or args.crops < 1 or args.boxes < 1:
        p.error("--repeats, --crops and --boxes must be >= 1")
    return args


def _select(names: list[str], only: list[str]) -> list[str]:
    chosen = [n for n in names if n in only]
    return chosen or list(names)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if "s3" in args.only:  # its own server, datasets and table
        from .s3_workload import run_s3

        return run_s3(args, argv)
    env = environment(args.device)

    impls = implementations(args.device)
    impl_names = _select([i.name for i in impls], args.only)
    impls = [i for i in impls if i.name in impl_names]
    unavailable: dict[str, str] = {}
    for impl in list(impls):
        note = impl.unavailable()
        if note is not None:
            unavailable[impl.name] = note
            log(f"skipping {impl.name}: {note}")
    usable = [i for i in impls if i.name not in unavailable]
    named = [d for d in DATASETS + OPTIONAL_DATASETS if d.name in args.only]
    datasets = named or list(DATASETS)
    workloads = [w for w in WORKLOADS + OPTIONAL_WORKLOADS if w in args.only] or list(WORKLOADS)

    data = DataDir(args.data_dir, args.size_mib, log=log)
    t_start = time.perf_counter()
    results: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []
    ds_info: dict[str, Any] = {}
    for spec in datasets:
        log(f"dataset {spec.name}: {spec.description}")
        results += bench_dataset(spec, data, usable, workloads, args)
        truth = data.truth(spec.kind)
        # After the workloads: the data is as warm in the page cache as for their reads, and the
        # GPU ceilings' buffers cannot disturb their timings.
        if "full-read" in workloads:
            ceilings += bench_ceilings(spec, data.root / f"{spec.name}.zarr", truth.nbytes, args)
            add_fractions(results, ceilings)
        ds_info[spec.name] = {
            "description": spec.description,
            "shape": list(truth.shape),
            "dtype": str(truth.dtype),
            "nbytes": truth.nbytes,
            "stored_bytes": stored_bytes(data.root / f"{spec.name}.zarr"),
        }
        for name, note in unavailable.items():
            for wl in workloads:
                if wl == "shard-partial" and not spec.sharded:
                    continue
                if wl == "loader":
                    continue  # its records are per crop size, and only for the loader datasets
                results.append(
                    {
                        "dataset": spec.name,
                        "workload": wl,
                        "impl": name,
                        "status": "skipped",
                        "note": note,
                        "items": 1,
                    }
                )
        # Written after every dataset, so an interrupted run still leaves its results.
        write_outputs(
            args, argv, env, ds_info, unavailable, results, ceilings, time.perf_counter() - t_start, final=False
        )
    elapsed = time.perf_counter() - t_start
    report = write_outputs(args, argv, env, ds_info, unavailable, results, ceilings, elapsed, final=True)
    print(report)
    bad = [r for r in results if r["status"] == "MISMATCH"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
