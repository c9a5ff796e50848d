"""Where the time of a GPU read goes: cProfile of a full read, crops one by one (with the
small-read rule and, again, all on the device path) and a batch of crops on a small generated
volume, with the device synchronised around every timed call.

    python -m benchmarks.gpu_profile [--dir /tmp/gpuzarr-profile] [--codec zstd] [--side 256] [--top 25]
                                     [--host-reads] [--phases]
    python -m benchmarks.gpu_profile --loader [--data-dir DIR] [--size-mib 64] [--crops 256]

``--loader`` profiles the loader workload instead (the datasets of ``benchmarks.loader_sweep``):
every chunk of the volume in one ``read_batch`` (what decoding ahead asks for), then one pass of
a GPU ``CropLoader`` with decoding ahead on and off, and with a device cache that holds the whole
volume (after the warm-up pass, no decoding: the cost of putting crops together). On Python 3.12
and later cProfile sees the loader's background threads too (it runs on ``sys.monitoring``), so
the profile of a pass covers the reads it overlaps.

``--phases`` prints, instead of profiles, where the wall time of one whole read and of one batch of
crops goes (``gpuzarr.backends.cuda.phases``: fetch, bind, the device's file reads, the wait for
the device, the assemble launch, ... with their threads' overlap), after a warm-up call.

``--host-reads`` sets ``gpuzarr.config`` ``gpu_direct_reads=False`` for the whole run: chunks are
read on the host and uploaded from pinned staging instead of read by kvikio, for the two routes'
profiles side by side.

Prints wall times per call and the top functions by total and cumulative time. Needs a usable
GPU: it asks for ``device="gpu"`` (``GPUZARR_DEVICE`` has no effect here).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import itertools
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


def _phases(label: str, call: Any) -> None:
    """Where the wall time of one call of ``call`` goes, after a warm-up call."""
    from gpuzarr.backends.cuda import phases

    call()
    _sync()
    with phases.recording() as log:
        start = time.perf_counter()
        call()
        _sync()
        wall = time.perf_counter() - start
    print(f"\n=== {label}: {wall * 1e3:.1f} ms")
    print(phases.format_summary(log.summary(), wall))


def _phases_of_reads(root: Path, codec: str, side: int, n_crops: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    array = _volume(root, codec, side)
    boxes = random_boxes(array.shape, (64, 64, 64), (64, 64, 64), n_crops, seed=1)
    _phases(f"{codec} full read {side}^3, phases", lambda: array[...])
    _phases(f"{codec} {n_crops} crops 64^3 read_batch, phases", lambda: array.read_batch(boxes))


def _chunk_boxes(shape: tuple[int, ...], chunks: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """Every chunk of a regular grid as a box (edge chunks clipped), in C order."""
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    return [
        tuple(slice(k * c, min((k + 1) * c, n)) for k, c, n in zip(coords, chunks, shape, strict=True))
        for coords in itertools.product(*(range(g) for g in grid))
    ]


def _profile_loader(data_dir: Path, size_mib: float, n_crops: int, top: int, output: str = "cupy") -> None:
    """The loader workload's datasets: all chunks in one read_batch, then loader passes."""
    import sys

    import gpuzarr
    from gpuzarr.loader import CropLoader

    from .datasets import DATASETS, DataDir, chunks_for
    from .loader_workload import LOADER_BATCH, LOADER_DATASETS

    data = DataDir(data_dir, size_mib, log=lambda message: print(message, file=sys.stderr))
    for spec in (s for s in DATASETS if s.name in LOADER_DATASETS):
        path = data.dataset(spec)
        truth = data.truth(spec.kind)
        array = gpuzarr.open(str(path), device="gpu")
        chunks = tuple(int(c) for c in array.chunks)
        every = _chunk_boxes(array.shape, chunks)
        # One read_batch per chunk shape (edge chunks are smaller), as decoding ahead does.
        by_shape: dict[tuple[int, ...], list[tuple[slice, ...]]] = {}
        for box in every:
            by_shape.setdefault(tuple(b.stop - b.start for b in box), []).append(box)
        groups = list(by_shape.values())
        _profile(
            f"{spec.name}: all {len(every)} chunks, one read_batch per chunk shape ({len(groups)})",
            lambda a=array, g=groups: [a.read_batch(boxes) for boxes in g],
            top,
        )
        sels = random_boxes(truth.shape, (64,) * truth.ndim, chunks_for(spec), n_crops, seed=3)
        crops = [(0, tuple(s.start for s in sel)) for sel in sels]
        rows: list[tuple[str, dict[str, Any]]] = [
            ("ahead default", {}),
            ("ahead off", {"decode_ahead_bytes": 0}),
            ("device cache of the whole volume", {"device_cache_bytes": 2 * truth.nbytes}),
        ]
        for label, options in rows:
            loader = CropLoader(
                array, (64,) * truth.ndim, LOADER_BATCH, sampler=crops, shuffle=False, device="gpu",
                output=output, prefetch=2, **options,
            )  # fmt: skip

            def one_pass(loader: Any = loader) -> None:
                for _batch in loader:
                    pass

            _profile(f"{spec.name}: loader pass of {n_crops} crops 64^3, {label}", one_pass, top)
            loader.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gpuzarr-profile"))
    parser.add_argument("--codec", choices=sorted(_CODECS), default="zstd")
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--crops", type=int, default=32)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--loader", action="store_true", help="profile the loader workload instead")
    parser.add_argument("--host-reads", action="store_true", help="gpu_direct_reads=False: no kvikio reads")
    parser.add_argument("--phases", action="store_true", help="where a read's wall time goes, not profiles")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parent / "data")
    parser.add_argument("--size-mib", type=float, default=64)
    args = parser.parse_args(argv)
    import gpuzarr

    with gpuzarr.config.set(gpu_direct_reads=False) if args.host_reads else contextlib.nullcontext():
        if args.phases:
            _phases_of_reads(args.dir, args.codec, args.side, args.crops)
        elif args.loader:
            _profile_loader(args.data_dir, args.size_mib, args.crops, args.top)
        else:
            _profile_reads(args.dir, args.codec, args.side, args.crops, args.top)
    return 0


def _profile_reads(root: Path, codec: str, side: int, n_crops: int, top: int) -> None:
    import gpuzarr

    root.mkdir(parents=True, exist_ok=True)
    array = _volume(root, codec, side)
    boxes = random_boxes(array.shape, (64, 64, 64), (64, 64, 64), n_crops, seed=1)
    _profile(f"{codec} full read {side}^3", lambda: array[...], top)
    _profile(f"{codec} {n_crops} crops 64^3 one by one", lambda: [array[b] for b in boxes], top)
    with gpuzarr.config.set(gpu_small_read_chunks=0):  # every crop through the device path
        _profile(f"{codec} {n_crops} crops 64^3 one by one, device path", lambda: [array[b] for b in boxes], top)
    _profile(f"{codec} {n_crops} crops 64^3 read_batch", lambda: array.read_batch(boxes), top)


if __name__ == "__main__":
    raise SystemExit(main())
