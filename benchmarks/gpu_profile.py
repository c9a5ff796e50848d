"""Where the time of a GPU read goes: cProfile of a full read, crops one by one (with the
small-read rule and, again, all on the device path) and a batch of crops on a small generated
volume, with the device synchronised around every timed call.

    python -m benchmarks.gpu_profile [--dir /tmp/gpuzarr-profile] [--codec zstd] [--top 25]

Prints wall times per call and the top functions by total and cumulative time. Needs a usable
GPU: it asks for ``device="gpu"`` (``GPUZARR_DEVICE`` has no effect here).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path
from typing import Any

import numpy as np

from .workloads import random_boxes

_CODECS: dict[str, list[dict[str, Any]]] = {
    "zstd": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3}}],
    "blosc-lz4": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2}},
    ],
    "raw": [{"name": "bytes", "configuration": {"endian": "little"}}],
}


def _volume(root: Path, codec: str, side: int) -> Any:
    import gpuzarr

    path = root / f"{codec}-{side}.zarr"
    if not (path / "zarr.json").exists():
        array = gpuzarr.create(
            gpuzarr.LocalStore(path), shape=(side,) * 3, dtype="<u2", chunks=(64,) * 3, codecs=_CODECS[codec]
        )
        rng = np.random.default_rng(0)
        array[...] = (rng.normal(size=(side,) * 3).cumsum(axis=2) * 50).astype("<u2")
    return gpuzarr.open(str(path), device="gpu")


def _sync() -> None:
    from gpuzarr.backends.cuda import runtime

    runtime.synchronize()


def _profile(label: str, call: Any, top: int, repeats: int = 3) -> None:
    call()
    _sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        _sync()
        times.append(time.perf_counter() - start)
    profile = cProfile.Profile()
    profile.enable()
    call()
    _sync()
    profile.disable()
    print(f"\n=== {label}: {min(times) * 1e3:.1f} ms best of {repeats} ({', '.join(f'{t * 1e3:.1f}' for t in times)})")
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(top)
        lines = text.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
        print(f"--- by {order}")
        print("\n".join(line[:160] for line in lines[start : start + top + 1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gpuzarr-profile"))
    parser.add_argument("--codec", choices=sorted(_CODECS), default="zstd")
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--crops", type=int, default=32)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    import gpuzarr

    args.dir.mkdir(parents=True, exist_ok=True)
    array = _volume(args.dir, args.codec, args.side)
    boxes = random_boxes(array.shape, (64, 64, 64), (64, 64, 64), args.crops, seed=1)
    _profile(f"{args.codec} full read {args.side}^3", lambda: array[...], args.top)
    _profile(f"{args.codec} {args.crops} crops 64^3 one by one", lambda: [array[b] for b in boxes], args.top)
    with gpuzarr.config.set(gpu_small_read_chunks=0):  # every crop through the device path
        _profile(
            f"{args.codec} {args.crops} crops 64^3 one by one, device path", lambda: [array[b] for b in boxes], args.top
        )
    _profile(f"{args.codec} {args.crops} crops 64^3 read_batch", lambda: array.read_batch(boxes), args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
