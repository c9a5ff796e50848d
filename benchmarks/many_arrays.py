"""Reads from many arrays behind a slow server, one after the other and all at once.

    python -m benchmarks.many_arrays [--arrays 16] [--latency-ms 20] [--repeats 5] [--out DIR]

A threaded HTTP server on 127.0.0.1 (``tests/servers/http.py``, in a process of its own) serves
a group of ``--arrays`` arrays (256x256 float32 in 64x64 zstd chunks) and answers every request ``--latency-ms`` late,
as an object store's first byte is. Each timed call opens every array afresh and reads the same
70x70 box of each (4 chunks), checked against the values written:

* one after the other: gpuzarr (``open`` and ``a[box]``), zarr-python (``zarr.open_array`` over
  obstore's ``HTTPStore``), TensorStore (``ts.open(...).result()``, ``read().result()``);
* all at once: gpuzarr's futures (``open_async``, ``read_async``), zarr-python's asyncio API
  (``zarr.api.asynchronous.open_array`` and ``AsyncArray.getitem`` under ``asyncio.gather``),
  TensorStore's futures (every ``ts.open`` started, then every ``read``).

Rounds rotate the order of the implementations. The table gives the median and best of each,
and each row's median over gpuzarr's of the same kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .measure import log

if TYPE_CHECKING:
    from collections.abc import Callable

SHAPE = (256, 256)
CHUNKS = (64, 64)
BOX = (slice(30, 100), slice(30, 100))


def _values(i: int) -> np.ndarray[Any, Any]:
    return (np.arange(SHAPE[0] * SHAPE[1], dtype="<f4").reshape(SHAPE) + 1000 * i).astype("<f4")


def _write(root: Path, n: int) -> None:
    import gpuzarr

    group = gpuzarr.open_group(str(root / "many.zarr"), mode="w")
    for i in range(n):
        group.create_array(f"a{i}", shape=SHAPE, chunks=CHUNKS, dtype="<f4")[...] = _values(i)


def _implementations(base: str, n: int) -> dict[str, tuple[str, Callable[[], list[Any]]]]:
    """name -> (kind, call) of every implementation this machine can run."""
    import gpuzarr

    urls = [f"{base}/many.zarr/a{i}" for i in range(n)]
    impls: dict[str, tuple[str, Callable[[], list[Any]]]] = {
        "gpuzarr": ("one by one", lambda: [gpuzarr.open(u, mode="r", device="cpu")[BOX] for u in urls]),
    }

    def gpuzarr_futures() -> list[Any]:
        opened = [gpuzarr.open_async(u, mode="r", device="cpu") for u in urls]
        reads = [f.result().read_async(BOX) for f in opened]
        return [r.result() for r in reads]

    impls["gpuzarr futures"] = ("all at once", gpuzarr_futures)
    try:
        import zarr
        from obstore.store import HTTPStore
        from zarr.storage import ObjectStore
    except ImportError as exc:
        log(f"zarr-python rows skipped: {exc}")
    else:

        def zarr_store(url: str) -> Any:
            return ObjectStore(HTTPStore.from_url(url, client_options={"allow_http": True}), read_only=True)

        impls["zarr-python"] = ("one by one", lambda: [zarr.open_array(zarr_store(u), mode="r")[BOX] for u in urls])

        async def zarr_gather() -> list[Any]:
            from zarr.api import asynchronous

            arrays = await asyncio.gather(*(asynchronous.open_array(store=zarr_store(u), mode="r") for u in urls))
            return list(await asyncio.gather(*(a.getitem(BOX) for a in arrays)))

        impls["zarr-python asyncio"] = ("all at once", lambda: asyncio.run(zarr_gather()))
    try:
        import tensorstore as ts
    except ImportError as exc:
        log(f"TensorStore rows skipped: {exc}")
    else:

        def spec(url: str) -> dict[str, Any]:
            return {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": url + "/"}}

        def ts_each() -> list[Any]:
            context = ts.Context()
            return [ts.open(spec(u), read=True, context=context).result()[BOX].read().result() for u in urls]

        def ts_futures() -> list[Any]:
            context = ts.Context()
            opened = [ts.open(spec(u), read=True, context=context) for u in urls]
            reads = [o.result()[BOX].read() for o in opened]
            return [r.result() for r in reads]

        impls["tensorstore"] = ("one by one", ts_each)
        impls["tensorstore futures"] = ("all at once", ts_futures)
    return impls


def _check(name: str, results: list[Any]) -> None:
    for i, got in enumerate(results):
        if not np.array_equal(np.asarray(got), _values(i)[BOX]):
            raise AssertionError(f"{name}: array a{i} read wrong values")


_SERVE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.servers.http import HttpServer
with HttpServer(sys.argv[2]) as server:
    latency = float(sys.argv[3])
    if latency:
        server.delay_next(10**9, latency)
    print(server.url, flush=True)
    sys.stdin.read()  # until the benchmark closes it
"""


def _serve(root: Path, latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    """The HTTP server in a process of its own (in the clients' process its Python threads would
    take the GIL from the Python clients, not from TensorStore's), and its URL."""
    repo = str(Path(__file__).resolve().parent.parent)
    command = [sys.executable, "-c", _SERVE, repo, str(root), str(latency_ms / 1000)]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    if not url.startswith("http://"):
        server.kill()
        raise RuntimeError("the HTTP server did not start")
    return server, url


def run(n: int, latency_ms: float, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuzarr-many-") as tmp:
        root = Path(tmp)
        _write(root, n)
        server, url = _serve(root, latency_ms)
        try:
            impls = _implementations(url, n)
            times: dict[str, list[float]] = {name: [] for name in impls}
            for name, (_, call) in impls.items():  # warm-up: imports, connections, checks
                _check(name, call())
            for r in range(repeats):
                names = list(impls)
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    start = time.perf_counter()
                    results = impls[name][1]()
                    times[name].append(time.perf_counter() - start)
                    _check(name, results)
        finally:
            server.communicate(timeout=30)
    rows = []
    for name, (kind, _) in impls.items():
        ref = "gpuzarr" if kind == "one by one" else "gpuzarr futures"
        median = statistics.median(times[name])
        rows.append(
            {
                "impl": name,
                "kind": kind,
                "median_ms": 1e3 * median,
                "best_ms": 1e3 * min(times[name]),
                "vs_gpuzarr": median / statistics.median(times[ref]),
            }
        )
    import gpuzarr

    return {
        "arrays": n,
        "latency_ms": latency_ms,
        "repeats": repeats,
        "async_concurrency": gpuzarr.config.get("async_concurrency"),
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['arrays']} arrays, a 70x70 box of each, {result['latency_ms']:g} ms per request, "
        f"{result['repeats']} rounds, gpuzarr's async_concurrency {result['async_concurrency']}",
        "",
        "| implementation | kind | median ms | best ms | median / gpuzarr's |",
        "|---|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['impl']} | {row['kind']} | {row['median_ms']:.0f} | {row['best_ms']:.0f} | "
            f"{row['vs_gpuzarr']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arrays", type=int, default=16)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="a directory for results.json")
    args = p.parse_args(argv)
    if args.arrays < 1 or args.repeats < 1 or args.latency_ms < 0:
        p.error("--arrays and --repeats must be >= 1, --latency-ms >= 0")
    result = run(args.arrays, args.latency_ms, args.repeats)
    print(table(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
