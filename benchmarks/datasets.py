"""Benchmark datasets: generated once (with TensorStore / zarr-python, never gpuzarr) and reused.

Every uint16 volume dataset holds the same data (one ground truth, several codec chains), so
their numbers compare codecs, not contents. The data is a smooth field plus Gaussian noise,
quantised: it compresses like real microscopy / simulation output (neither zeros nor random).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Bumped whenever the generated values or layouts change, so stale data dirs are rebuilt.
GENERATOR_VERSION = 2
SEED = 20240611

_BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
_ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
_GZIP = {"name": "gzip", "configuration": {"level": 5}}
_BLOSC_LZ4 = {
    "name": "blosc",
    "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2, "blocksize": 0},
}


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # "volume" (uint16, 3-D) or "stack" (float32 image stack)
    zarr_format: int
    codecs: list[dict[str, Any]] = field(default_factory=list)  # v3 chain (without sharding)
    shard_shape: tuple[int, ...] | None = None  # v3 sharded: shard shape; codecs = inner chain
    description: str = ""
    #: the (inner) chunk shape, where not the kind's default (VOLUME_CHUNKS, STACK_CHUNKS)
    chunk_shape: tuple[int, ...] | None = None

    @property
    def sharded(self) -> bool:
        return self.shard_shape is not None


DATASETS: list[DatasetSpec] = [
    DatasetSpec("zstd", "volume", 3, [_BYTES_LE, _ZSTD], description="v3 uint16, chunks 64^3, zstd(3)"),
    DatasetSpec("gzip", "volume", 3, [_BYTES_LE, _GZIP], description="v3 uint16, chunks 64^3, gzip(5)"),
    DatasetSpec(
        "blosc-lz4",
        "volume",
        3,
        [_BYTES_LE, _BLOSC_LZ4],
        description="v3 uint16, chunks 64^3, blosc lz4 shuffle",
    ),
    DatasetSpec("raw", "volume", 3, [_BYTES_LE], description="v3 uint16, chunks 64^3, uncompressed"),
    DatasetSpec(
        "sharded-zstd",
        "volume",
        3,
        [_BYTES_LE, _ZSTD],
        shard_shape=(256, 256, 256),
        description="v3 uint16, shards 256^3 of inner chunks 64^3, zstd(3)",
    ),
    DatasetSpec("v2-blosc-lz4", "volume", 2, description="v2 uint16, chunks 64^3, blosc lz4 shuffle"),
    DatasetSpec(
        "stack-f32-zstd",
        "stack",
        3,
        [_BYTES_LE, _ZSTD],
        description="v3 float32 (N,256,256), chunks (1,256,256), zstd(3)",
    ),
]
#: Datasets run only when named (``--only``/``--datasets``): not cells of the standing table.
OPTIONAL_DATASETS: list[DatasetSpec] = [
    DatasetSpec(
        "sharded-zstd-32",
        "volume",
        3,
        [_BYTES_LE, _ZSTD],
        shard_shape=(128, 128, 128),
        chunk_shape=(32, 32, 32),
        description="v3 uint16, shards 128^3 of inner chunks 32^3 (64 KiB), zstd(3)",
    ),
]
DATASET_NAMES = [d.name for d in DATASETS]
OPTIONAL_DATASET_NAMES = [d.name for d in OPTIONAL_DATASETS]

VOLUME_CHUNKS = (64, 64, 64)
STACK_CHUNKS = (1, 256, 256)


def volume_shape(size_mib: float) -> tuple[int, int, int]:
    """A cube of uint16 of about ``size_mib`` MiB, its side a multiple of 32 (not of 64 or 256, in
    general, so edge chunks and shards are partial as in real data); at least 80."""
    side = (size_mib * 2**20 / 2) ** (1 / 3)
    side = max(80, round(side / 32) * 32)
    return (side, side, side)


def stack_shape(size_mib: float) -> tuple[int, int, int]:
    n = max(4, round(size_mib * 2**20 / (256 * 256 * 4)))
    return (n, 256, 256)


def shape_for(spec: DatasetSpec, size_mib: float) -> tuple[int, ...]:
    return volume_shape(size_mib) if spec.kind == "volume" else stack_shape(size_mib)


def chunks_for(spec: DatasetSpec) -> tuple[int, ...]:
    if spec.chunk_shape is not None:
        return spec.chunk_shape
    return VOLUME_CHUNKS if spec.kind == "volume" else STACK_CHUNKS


def dtype_for(spec: DatasetSpec) -> np.dtype[Any]:
    return np.dtype("uint16") if spec.kind == "volume" else np.dtype("float32")


# -- ground truth ----------------------------------------------------------------------------------


def make_volume(shape: tuple[int, ...], seed: int = SEED) -> np.ndarray[Any, Any]:
    """uint16, like a 12-bit sensor: a smooth, non-separable field (~0.4k..2.8k) plus noise
    (sigma 6), rounded. Compresses about 1.7x with zstd, as such data does."""
    nz, ny, nx = shape
    out = np.empty(shape, dtype=np.uint16)
    z = np.arange(nz, dtype=np.float32)[:, None, None]
    y = np.arange(ny, dtype=np.float32)[None, :, None]
    x = np.arange(nx, dtype=np.float32)[None, None, :]
    slab = 32
    for z0 in range(0, nz, slab):
        rng = np.random.default_rng([seed, z0])
        zz = z[z0 : z0 + slab]
        f = (
            1200.0
            + 600.0 * np.sin(zz / 53.0) * np.cos(y / 41.0)
            + 500.0 * np.sin((x + 0.5 * y) / 67.0)
            + 300.0 * np.cos(zz / 29.0 + x / 83.0)
            + 200.0 * np.sin((x - y + zz) / 17.0)
        )
        f = f + rng.standard_normal(f.shape, dtype=np.float32) * 6.0
        np.clip(np.rint(f, out=f), 0, 65535, out=f)
        out[z0 : z0 + slab] = f
    return out


def make_stack(shape: tuple[int, ...], seed: int = SEED) -> np.ndarray[Any, Any]:
    """float32 images: smooth blobs drifting through the stack plus noise, quantised to 1/64."""
    n, ny, nx = shape
    out = np.empty(shape, dtype=np.float32)
    y = np.arange(ny, dtype=np.float32)[:, None]
    x = np.arange(nx, dtype=np.float32)[None, :]
    for i in range(n):
        rng = np.random.default_rng([seed, 1, i])
        t = np.float32(i)
        f = (
            100.0
            + 40.0 * np.sin((x + 3.0 * t) / 23.0) * np.cos((y - 2.0 * t) / 31.0)
            + 25.0 * np.exp(-(((x - 128.0 - 60.0 * np.sin(t / 50.0)) ** 2 + (y - 128.0) ** 2) / 2000.0))
        ).astype(np.float32)
        f += rng.standard_normal(f.shape, dtype=np.float32) * np.float32(0.5)
        out[i] = np.rint(f * 64.0) / np.float32(64.0)
    return out


# -- writing datasets -------------------------------------------------------------------------------


def v3_metadata(spec: DatasetSpec, shape: tuple[int, ...]) -> dict[str, Any]:
    """The zarr.json document of a v3 dataset (the same one TensorStore writes)."""
    dtype = dtype_for(spec)
    chunks = chunks_for(spec)
    codecs = spec.codecs
    grid = chunks
    if spec.shard_shape is not None:
        grid = spec.shard_shape
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(chunks),
                    "codecs": spec.codecs,
                    "index_codecs": [_BYTES_LE, {"name": "crc32c"}],
                    "index_location": "end",
                },
            }
        ]
    if dtype == np.float32:
        codecs = [
            {**c, "configuration": {**c["configuration"], "typesize": 4}} if c["name"] == "blosc" else c for c in codecs
        ]
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": str(dtype),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(grid)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs,
        "attributes": {},
    }


def _write_v3_tensorstore(path: Path, spec: DatasetSpec, data: np.ndarray[Any, Any]) -> None:
    import tensorstore as ts

    meta = v3_metadata(spec, data.shape)
    meta = {k: v for k, v in meta.items() if k not in ("zarr_format", "node_type", "attributes")}
    arr = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "metadata": meta},
        create=True,
        delete_existing=True,
    ).result()
    # Whole shards per transaction keep TensorStore's memory bounded on big volumes.
    step = spec.shard_shape[0] if spec.shard_shape else 256
    for z0 in range(0, data.shape[0], step):
        z1 = min(z0 + step, data.shape[0])
        arr[z0:z1].write(data[z0:z1]).result()


def _write_v2_zarr_python(path: Path, spec: DatasetSpec, data: np.ndarray[Any, Any]) -> None:
    import numcodecs
    import zarr

    arr = zarr.create_array(
        store=str(path),
        shape=data.shape,
        chunks=chunks_for(spec),
        dtype=data.dtype,
        zarr_format=2,
        compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
        fill_value=0,
        overwrite=True,
    )
    arr[...] = data


def write_dataset(path: Path, spec: DatasetSpec, data: np.ndarray[Any, Any]) -> None:
    if path.exists():
        shutil.rmtree(path)
    if spec.zarr_format == 2:
        _write_v2_zarr_python(path, spec, data)
    else:
        _write_v3_tensorstore(path, spec, data)


def metadata_files(path: Path) -> list[Path]:
    return [p for p in (path / "zarr.json", path / ".zarray", path / ".zattrs") if p.exists()]


def fresh_copy_of_metadata(src: Path, dst: Path) -> None:
    """An empty array at ``dst`` with ``src``'s metadata (same shape, chunks and codecs)."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in metadata_files(src):
        shutil.copy2(f, dst / f.name)


def stored_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- the data directory ------------------------------------------------------------------------------


class DataDir:
    """``root/<dataset>.zarr``, ``root/truth-<kind>.npy`` and a manifest of what was generated."""

    def __init__(self, root: Path, size_mib: float, log: Any = print) -> None:
        self.root = Path(root)
        self.size_mib = float(size_mib)
        self.log = log
        self.root.mkdir(parents=True, exist_ok=True)
        self._manifest_path = self.root / "manifest.json"
        try:
            self.manifest: dict[str, Any] = json.loads(self._manifest_path.read_text())
        except (OSError, ValueError):
            self.manifest = {}
        self._truth: dict[str, np.ndarray[Any, Any]] = {}

    def _params(self, what: str, shape: tuple[int, ...]) -> dict[str, Any]:
        return {"what": what, "shape": list(shape), "version": GENERATOR_VERSION, "seed": SEED}

    def _save_manifest(self) -> None:
        self._manifest_path.write_text(json.dumps(self.manifest, indent=1, sort_keys=True))

    def truth(self, kind: str) -> np.ndarray[Any, Any]:
        if kind in self._truth:
            return self._truth[kind]
        shape = volume_shape(self.size_mib) if kind == "volume" else stack_shape(self.size_mib)
        path = self.root / f"truth-{kind}.npy"
        params = self._params(kind, shape)
        if self.manifest.get(path.name) == params and path.exists():
            data = np.load(path)
        else:
            t0 = time.perf_counter()
            data = make_volume(shape) if kind == "volume" else make_stack(shape)
            np.save(path, data)
            self.manifest[path.name] = params
            # Datasets built from an older truth are stale.
            for spec in DATASETS + OPTIONAL_DATASETS:
                if spec.kind == kind:
                    self.manifest.pop(f"{spec.name}.zarr", None)
            self._save_manifest()
            self.log(f"  generated ground truth {kind} {shape} {data.dtype} in {time.perf_counter() - t0:.1f} s")
        self._truth = {kind: data}  # keep one truth in memory at a time
        return data

    def dataset(self, spec: DatasetSpec) -> Path:
        path = self.root / f"{spec.name}.zarr"
        shape = shape_for(spec, self.size_mib)
        params = {
            **self._params(spec.name, shape),
            "zarr_format": spec.zarr_format,
            "codecs": spec.codecs,
            "shards": spec.shard_shape,
        }
        if spec.chunk_shape is not None:  # absent for the default, so older data dirs stay valid
            params["chunks"] = spec.chunk_shape
        params = json.loads(json.dumps(params))
        truth = self.truth(spec.kind)
        if self.manifest.get(path.name) == params and metadata_files(path):
            return path
        t0 = time.perf_counter()
        write_dataset(path, spec, truth)
        self.manifest[path.name] = params
        self._save_manifest()
        stored = stored_bytes(path)
        self.log(
            f"  wrote dataset {spec.name} {shape} in {time.perf_counter() - t0:.1f} s "
            f"({stored / 2**20:.0f} MiB stored, ratio {truth.nbytes / max(stored, 1):.2f})"
        )
        return path
