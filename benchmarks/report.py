"""The benchmark report: gpuzarr's fractions of the raw ceilings, the markdown tables (throughput
with gpuzarr ÷ peer ratios, ceilings, detail), the header describing the run, and the
results.json / results.md files (``write_outputs``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .environment import loadavg, machine_slug
from .impls import ALL_IMPL_NAMES
from .measure import log, process_peak_rss

if TYPE_CHECKING:
    import argparse


# -- fractions of the ceilings ---------------------------------------------------------------------


def add_fractions(results: list[dict[str, Any]], ceilings: list[dict[str, Any]]) -> None:
    """Mark gpuzarr's full reads with the fraction of their ceiling reached: gpuzarr-cpu against the
    host read, gpuzarr-gpu against the slower of host read and nvCOMP decode (both bound it)."""
    ok = {(c["dataset"], c["ceiling"]): c["array_gbps_median"] for c in ceilings if c["status"] == "ok"}
    bounded_by = {"gpuzarr-cpu": ["host-read"], "gpuzarr-gpu": ["host-read", "nvcomp-decode"]}
    for r in results:
        if r["workload"] != "full-read" or r["impl"] not in bounded_by or r.get("gbps_median") is None:
            continue
        bounds = [ok[k] for k in ((r["dataset"], c) for c in bounded_by[r["impl"]]) if k in ok]
        if bounds:
            r["ceiling_gbps"] = min(bounds)
            r["fraction_of_ceiling"] = r["gbps_median"] / min(bounds)


# -- markdown --------------------------------------------------------------------------------------


def _fmt_cell(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return ""
    if rec.get("gbps_median") is None:
        return {"skipped": "skip", "error": "ERROR"}.get(rec["status"], rec["status"])
    cell = f"{rec['gbps_median']:.3f}"
    return cell if rec["status"] == "ok" else f"{cell} **{rec['status']}**"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if not a or not b or a.get("gbps_median") is None or b.get("gbps_median") is None:
        return ""
    return f"{a['gbps_median'] / b['gbps_median']:.2f}"


CEILING_COLUMNS = [  # (header, ceiling, value)
    ("host read", "host-read", "array_gbps_median"),
    ("host read, stored bytes", "host-read", "gbps_median"),
    ("host→device", "host-to-device", "gbps_median"),
    ("nvCOMP decode", "nvcomp-decode", "array_gbps_median"),
]


def render_ceilings(ceilings: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[str]:
    """One row per dataset: the ceilings, then the fraction of them gpuzarr's full reads reach."""
    by_key = {(c["dataset"], c["ceiling"]): c for c in ceilings}
    columns = [col for col in CEILING_COLUMNS if any(c["ceiling"] == col[1] for c in ceilings)]
    fractions = {(r["dataset"], r["impl"]): r["fraction_of_ceiling"] for r in results if "fraction_of_ceiling" in r}
    fraction_headers = {"gpuzarr-cpu": "gpuzarr-cpu ÷ host read", "gpuzarr-gpu": "gpuzarr-gpu ÷ min(host read, decode)"}
    frac_impls = [n for n in fraction_headers if any(k[1] == n for k in fractions)]
    lines = [
        "### Raw ceilings (GB/s, median: each step of a full read alone; GB/s of the decoded array "
        "unless marked, so comparable with full-read)",
        "",
    ]
    header = ["dataset", *(h for h, _, _ in columns), *(fraction_headers[n] for n in frac_impls)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for ds in dict.fromkeys(c["dataset"] for c in ceilings):
        cells = [ds]
        for _, name, value in columns:
            c = by_key.get((ds, name))
            cells.append(f"{c[value]:.3f}" if c is not None and c["status"] == "ok" else _fmt_cell(c))
        cells += [f"{fractions[ds, n]:.1%}" if (ds, n) in fractions else "" for n in frac_impls]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"{c['dataset']} {c['ceiling']}: {c['status']} ({c['note']})" for c in ceilings if c["status"] != "ok"]
    if notes:
        lines += ["", "Ceilings not measured: " + "; ".join(notes) + "."]
    return lines


def render(
    results: list[dict[str, Any]],
    env: dict[str, Any],
    args: argparse.Namespace,
    ceilings: list[dict[str, Any]] | None = None,
) -> str:
    impl_names = [n for n in ALL_IMPL_NAMES if any(r["impl"] == n for r in results)]
    gz = [n for n in impl_names if n.startswith("gpuzarr")]
    peers = [n for n in impl_names if not n.startswith("gpuzarr")]
    by_key: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in results:
        by_key.setdefault((r["workload"], r["dataset"]), {})[r["impl"]] = r

    lines = ["### Throughput (GB/s of decoded data, median; higher is better)", ""]
    ratio_cols = [(g, p) for g in gz for p in peers if (g.endswith("gpu")) == (p.endswith("gpu") or p.endswith("cupy"))]
    header = ["workload", "dataset", *impl_names, *(f"{g} ÷ {p}" for g, p in ratio_cols)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (wl, ds), row in by_key.items():
        cells = [
            wl,
            ds,
            *(_fmt_cell(row.get(n)) for n in impl_names),
            *(_ratio(row.get(g), row.get(p)) for g, p in ratio_cols),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if ceilings:
        lines += ["", *render_ceilings(ceilings, results)]

    lines += [
        "",
        "### Detail (median [min-max] over repeats; CPU s = process CPU time per call, all "
        "threads; RSS Δ = peak resident memory above the level before the call)",
        "",
    ]
    header = ["workload", "dataset", "impl", "GB/s", "items/s", "CPU s", "RSS Δ MiB", "check"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (wl, ds), row in by_key.items():
        for n in impl_names:
            r = row.get(n)
            if r is None:
                continue
            if r.get("gbps_median") is not None:
                gbps = f"{r['gbps_median']:.3f} [{r['gbps_min']:.3f}-{r['gbps_max']:.3f}]"
                items = f"{r['items_per_s_median']:.1f}" if r["items"] > 1 else ""
                rss = f"{r['rss_delta_peak_bytes'] / 2**20:.0f}" if "rss_delta_peak_bytes" in r else ""
                cpu = f"{r['cpu_s_median']:.2f}" if "cpu_s_median" in r else ""
            else:
                gbps = items = rss = cpu = ""
            check = r["status"] if not r["note"] else f"{r['status']}: {r['note']}"
            check = check.replace("|", "/").replace("\n", " ")
            if len(check) > 160:
                check = check[:157] + "..."
            lines.append("| " + " | ".join([wl, ds, n, gbps, items, cpu, rss, check]) + " |")
    lines += ["", f"Process peak RSS: {process_peak_rss() / 2**30:.2f} GiB."]
    return "\n".join(lines)


def render_header(env: dict[str, Any], args: argparse.Namespace, datasets: dict[str, Any], argv: list[str]) -> str:
    v = env["versions"]
    lines = [
        f"# gpuzarr benchmarks — {env['date']}, {machine_slug(env)}",
        "",
        f"Command: `python -m benchmarks.run {' '.join(argv)}`".rstrip(),
        "",
        f"- CPU: {env['cpu_model']}, {env['cpu_count']} cores ({env['cpus_usable']} usable), "
        f"{env['memory_gib']} GiB RAM" + (f"; GPU: {env['gpu']}" if env.get("gpu") else "; no GPU"),
        f"- {env['platform']}",
        f"- Load average (1/5/15 min) at start: {env.get('loadavg_start')}, at end: {env.get('loadavg_end')} "
        "(other processes compete for the cores when these exceed the core count)",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val is not None),
        f"- {args.repeats} timed repeats after one warm-up per implementation, in rotating order; "
        f"{args.crops} crops per crop run, {args.boxes} boxes per shard-partial run. Reads are from the "
        "OS page cache (data written once, read many times); writes go to the page cache (no fsync).",
        "",
        "| dataset | shape | dtype | layout | stored MiB | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in datasets.items():
        lines.append(
            f"| {name} | {tuple(d['shape'])} | {d['dtype']} | {d['description']} | "
            f"{d['stored_bytes'] / 2**20:.0f} | {d['nbytes'] / max(d['stored_bytes'], 1):.2f} |"
        )
    return "\n".join(lines)


# -- results.json and results.md -------------------------------------------------------------------


def write_outputs(
    args: argparse.Namespace,
    argv: list[str],
    env: dict[str, Any],
    ds_info: dict[str, Any],
    unavailable: dict[str, str],
    results: list[dict[str, Any]],
    ceilings: list[dict[str, Any]],
    elapsed: float,
    final: bool,
) -> str:
    """Render the report; write results.json/.md (and the --save-results file). Returns the report."""
    env["loadavg_end"] = loadavg()
    header = render_header(env, args, ds_info, argv)
    table = render(results, env, args, ceilings)
    notes = ""
    if unavailable:
        notes = "\n\nSkipped implementations: " + "; ".join(f"{k} ({v})" for k, v in unavailable.items()) + "."
    status = "" if final else "\n\n**Partial results: the run has not finished.**"
    report = f"{header}\n\n{table}{notes}\n\nTotal benchmark time: {elapsed:.0f} s.{status}\n"
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "environment": env,
        "argv": argv,
        "args": {k: str(v) for k, v in vars(args).items()},
        "datasets": ds_info,
        "unavailable": unavailable,
        "results": results,
        "ceilings": ceilings,
        "elapsed_s": elapsed,
        "complete": final,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=1, default=str))
    (args.out / "results.md").write_text(report)
    if args.save_results:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        dest = args.results_dir / f"{env['date']}-{args.machine or machine_slug(env)}.md"
        dest.write_text(report)
    if final:
        log(
            f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}"
            + (f" and {dest}" if args.save_results else "")
        )
    return report
