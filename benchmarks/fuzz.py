"""Fuzz gpuzarr's readers with mutated stores.

Run ``python -m benchmarks.fuzz --seconds 60 [--seed S] [--jobs J] [--out DIR] [--local | --emulated-gpu]``,
or replay one case with ``python -m benchmarks.fuzz --replay SEED_NAME:CASE [--local | --emulated-gpu]``.
With ``--local`` each case is written to files and read through a LocalStore on two threads (the
readers of local chunks: fetched ahead, Blosc frames read in part), not from memory on one. With
``--emulated-gpu`` each case is read from files twice: by the CPU engine and by the GPU read path
on the emulated device (:mod:`gpuzarr.backends.cuda.numpy_device`: the host side of a GPU read as
it runs on a GPU, splitting streams, walking zstd frames in the files, checking every launch, and
NumPy models of nvCOMP and the kernels).

Seeds are small arrays written by gpuzarr and, when it is installed, zarr-python (v2 and v3;
bytes, gzip, zstd, blosc, crc32c, sharding with a crc32c index, transpose, vlen-utf8, numcodecs
zlib/lz4/bz2/lzma, a group with consolidated metadata). Each case takes one seed and one
mutation, chosen by ``random.Random(f"{seed_name}:{case}")`` so that a case number alone
reproduces it: the metadata JSON (a value replaced by another JSON type, a huge or negative
number, deep nesting, a member removed or added, unicode, a flipped byte of the text), a chunk
(bit flips, truncation, extension, splicing), a shard index (offsets and sizes edited, one half
EMPTY, its crc32c recomputed so that the edit reaches the reader), a codec header (zstd frame
content size, blosc header fields, the lz4 size prefix, gzip flags and trailer), or a chunk
replaced by a decompression bomb of the seed's compressor (:mod:`benchmarks.bombs`: 3 GiB of
zeros, more than the worker's address space, or a size field declaring it).

The oracle: opening the store and reading every array either succeeds or raises a
:class:`~gpuzarr.errors.GpuZarrError`. From memory, each case then also writes values into every
array of a copy of the store, through its (mutated) metadata and codecs, and reads them back:
the write succeeds and reads back the same values, or raises a GpuZarrError. Where a crc32c
covers every stored byte of a chunk that a mutation touched (the ``checksummed`` seeds,
mutations that do not repair the checksum), a read that succeeds must give the seed's data.
Anything else fails the case: another exception type,
a crash of the worker (each case runs in a worker subprocess), more than ``--case-seconds``
(10 s), or more memory than ``--memory-mib`` (RLIMIT_AS of the worker, 2 GiB; a MemoryError is
a failure too). Workers read with ``max_chunk_bytes`` at 64 MiB, so that metadata asking for
more is refused before the memory limit is near.

With ``--emulated-gpu`` the two readers must also agree: the same bytes where both read, and a
GpuZarrError from both or from neither (the CPU engine is the reference the GPU path falls back
to, so a chunk one of them refuses the other must refuse too).

A failure writes the mutated store and the traceback under ``--out`` (``fuzz-failures``) and
prints a one-line reproducer.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks import bombs

if TYPE_CHECKING:
    from collections.abc import Iterator

SHAPE = (6, 4)
CHUNKS = (3, 2)
METADATA_NAMES = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")
EMPTY = 2**64 - 1

# -- seeds ------------------------------------------------------------------------------------


def _data(dtype: str, shape: tuple[int, ...] = SHAPE) -> np.ndarray[Any, Any]:
    if dtype == "str":
        return np.array([f"s{i}" * (i % 3) for i in range(24)], dtype=object).reshape(SHAPE)
    if shape == SHAPE:
        return np.arange(24, dtype=dtype).reshape(SHAPE)
    # A ramp that compressors shrink, with no run long enough for a Blosc block to be stored.
    return (np.arange(int(np.prod(shape))) % 1021).astype(dtype).reshape(shape)


@dataclass(frozen=True)
class Seed:
    """A small store to mutate. ``checksummed``: a crc32c covers every stored byte of its chunks."""

    name: str
    dtype: str
    kwargs: dict[str, Any]
    writer: str = "gpuzarr"
    checksummed: bool = False
    shape: tuple[int, ...] = SHAPE
    chunks: tuple[int, ...] = CHUNKS


CRC = {"name": "crc32c"}
#: Blosc-LZ4 at level 1: c-blosc cuts a 128 KiB chunk into two 64 KiB blocks of one stream per
#: byte of the type (it keeps smaller chunks in one block, whatever blocksize asks)
BLOSC_LZ4_BLOCKS = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle"}}
SEEDS = (
    Seed("v3-bytes", "<i4", {"compressors": None}),
    Seed("v3-crc32c", "<i4", {"compressors": [CRC]}, checksummed=True),
    Seed("v3-gzip", "<f8", {"compressors": [{"name": "gzip", "configuration": {"level": 5}}]}),
    Seed("v3-zstd", "<u2", {"compressors": [{"name": "zstd", "configuration": {"checksum": False}}]}),
    Seed("v3-zstd-checksum", "<u2", {"compressors": [{"name": "zstd", "configuration": {"checksum": True}}]}),
    Seed("v3-blosc", "<i8", {"compressors": [{"name": "blosc", "configuration": {"shuffle": "shuffle"}}]}),
    Seed("v3-shard", "<i4", {"shards": (6, 4), "compressors": [CRC]}, checksummed=True),
    Seed("v3-shard-zstd", "<f4", {"shards": (6, 4), "compressors": [{"name": "zstd", "configuration": {"level": 1}}]}),
    Seed("v3-transpose", "<i2", {"order": "F", "compressors": [{"name": "gzip", "configuration": {"level": 1}}]}),
    Seed("v3-vlen-utf8", "str", {"compressors": [{"name": "zstd", "configuration": {"level": 1}}]}),
    Seed("v2-zlib", "<i4", {"zarr_format": 2, "compressor": {"id": "zlib", "level": 1}}),
    Seed("v2-lz4", "<f4", {"zarr_format": 2, "compressor": {"id": "lz4", "acceleration": 1}}),
    Seed("v2-bz2", "<i4", {"zarr_format": 2, "compressor": {"id": "bz2", "level": 1}}),
    Seed("v2-lzma", "<i4", {"zarr_format": 2, "compressor": {"id": "lzma", "preset": 1}}),
    Seed("v2-blosc-F", ">i4", {"zarr_format": 2, "order": "F", "compressor": {"id": "blosc", "shuffle": 2}}),
    Seed("v2-group-consolidated", "<i4", {"zarr_format": 2}, writer="gpuzarr-group"),
    Seed("v3-group-consolidated", "<i4", {}, writer="gpuzarr-group"),
    Seed("zarr-v3-shard", "<i4", {"shards": (6, 4)}, writer="zarr"),
    Seed("zarr-v3-blosc", "<u1", {}, writer="zarr"),
    Seed("zarr-v2-blosc", "<i4", {"zarr_format": 2}, writer="zarr"),
    Seed("zarr-v3-vlen-utf8", "str", {}, writer="zarr"),
    # Chunks of several blocks: Blosc frames split into one stream per block and byte (LZ4 at
    # level 1 cuts 128 KiB into 64 KiB blocks), bit-shuffled Blosc-zstd blocks and a leftover
    # block, sharded Blosc (4 inner chunks a shard, as the shard mutations assume), and a zstd
    # frame of two blocks.
    Seed("v3-blosc-blocks", "<i4", {"compressors": [BLOSC_LZ4_BLOCKS]}, shape=(128, 512), chunks=(128, 256)),
    Seed(
        "v2-blosc-zstd-bitshuffle-blocks",
        "<u2",
        {
            "zarr_format": 2,
            "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 2048},
        },
        shape=(64, 96),
        chunks=(32, 48),
    ),
    Seed(
        "v3-shard-blosc-blocks",
        "<f4",
        {"shards": (256, 512), "compressors": [BLOSC_LZ4_BLOCKS]},
        shape=(256, 512),
        chunks=(128, 256),
    ),
    Seed(
        "v3-zstd-blocks",
        "<i8",
        {"compressors": [{"name": "zstd", "configuration": {"level": 1}}]},
        shape=(128, 160),
        chunks=(128, 160),
    ),
)


def write_seed(seed: Seed, root: Path) -> bool:
    """Write ``seed`` under ``root``; False when its writer is not installed."""
    data = _data(seed.dtype, seed.shape)
    dtype = str if seed.dtype == "str" else seed.dtype
    if seed.writer == "zarr":
        try:
            import zarr
        except ImportError:
            return False
        kwargs = dict(seed.kwargs)
        a = zarr.create_array(str(root), shape=SHAPE, chunks=CHUNKS, dtype=dtype, **kwargs)
        a[...] = data
        return True
    import gpuzarr

    if seed.writer == "gpuzarr-group":
        group = gpuzarr.group(store=str(root), zarr_format=seed.kwargs.get("zarr_format", 3), attributes={"a": 1})
        group.create_array("x", shape=SHAPE, chunks=CHUNKS, dtype=dtype)[...] = data
        group.create_group("sub").create_array("y", shape=SHAPE, chunks=CHUNKS, dtype=dtype)[...] = data
        gpuzarr.consolidate_metadata(str(root))
        return True
    kwargs = dict(seed.kwargs)
    if kwargs.pop("order", "C") == "F" and kwargs.get("zarr_format", 3) == 3:
        kwargs["codecs"] = [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "little"}},
            *kwargs.pop("compressors"),
        ]
    elif "order" in seed.kwargs:
        kwargs["order"] = seed.kwargs["order"]
    gpuzarr.create(store=str(root), shape=seed.shape, chunks=seed.chunks, dtype=dtype, **kwargs)[...] = data
    return True


def read_store(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def build_seeds(root: Path) -> dict[str, dict[str, bytes]]:
    """Every seed's files (key -> bytes), written once under ``root``."""
    out: dict[str, dict[str, bytes]] = {}
    for seed in SEEDS:
        path = root / seed.name
        if not path.exists():
            tmp = root / f".{seed.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            if not write_seed(seed, tmp):
                continue
            tmp.rename(path)
        out[seed.name] = read_store(path)
    return out


# -- mutations --------------------------------------------------------------------------------

HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**40, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63),
    10**400, 1e308, -1e308, 0.5, "", "x", "\u00e9\u4e2d\U0001f600", "\ud800", "r17179869184", "NaN", "Infinity",
    "../escape", "a" * 5000, [], {}, [0], [1] * 65, [2**40], [2**63], [-1], ["a"], [[1]], {"name": "x"},
    {"id": "blosc", "shuffle": {}}, {"name": "bytes"},
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path of a JSON value, itself included."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def mutate_json_value(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    doc = json.loads(raw)
    path = rng.choice(_paths(doc))
    what = rng.choice(["replace", "replace", "replace", "delete", "add", "deep", "number"])
    if not path and what in ("replace", "delete", "number"):
        what = "add"
    parent = _get(doc, path[:-1]) if path else None
    if what == "replace":
        parent[path[-1]] = rng.choice(HOSTILE_VALUES)
    elif what == "number":
        old = parent[path[-1]]
        if isinstance(old, int) and not isinstance(old, bool):
            parent[path[-1]] = rng.choice([old * 2**rng.randint(8, 70), -old - 1, old + 1, 0])
        else:
            parent[path[-1]] = rng.choice(HOSTILE_VALUES)
    elif what == "delete":
        del parent[path[-1]]
    elif what == "deep":
        depth = rng.choice([100, 129, 500, 990, 5000, 100_000])
        target = _get(doc, path)
        if isinstance(target, dict):
            target["deep"] = "@DEEP@"
        elif path:
            parent[path[-1]] = "@DEEP@"
        text = json.dumps(doc).replace('"@DEEP@"', "[" * depth + "]" * depth, 1)
        return text.encode(), f"json deep {depth} at {list(path)}"
    else:
        target = _get(doc, path)
        if isinstance(target, dict):
            target[rng.choice(["extra", "must_understand", "attributes", "configuration", "name"])] = rng.choice(
                HOSTILE_VALUES
            )
        elif isinstance(target, list):
            target.append(rng.choice(HOSTILE_VALUES))
    return json.dumps(doc).encode(), f"json {what} at {list(path)}"


def mutate_bytes(rng: random.Random, raw: bytes, other: bytes) -> tuple[bytes, str]:
    """Flip, cut, extend, zero or splice bytes (a splice may put in a whole other valid chunk)."""
    data = bytearray(raw)
    what = rng.choice(["flip", "flip", "truncate", "extend", "splice", "zero"])
    if what == "flip" and data:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif what == "truncate":
        del data[rng.randrange(len(data) + 1) :]
    elif what == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 100, 5000])))
    elif what == "splice" and other:
        cut = rng.randrange(len(data) + 1)
        data = data[:cut] + other[rng.randrange(len(other)) :]
    elif what == "zero" and data:
        start = rng.randrange(len(data))
        data[start : start + rng.randint(1, 32)] = bytes(min(32, len(data) - start))
    return bytes(data), f"bytes {what}"


def _crc32c(data: bytes) -> bytes:
    from gpuzarr.codecs.crc32c import crc32c

    return struct.pack("<I", crc32c(data))


def mutate_shard_index(rng: random.Random, raw: bytes, n_inner: int) -> tuple[bytes, str]:
    """Edit the index at the end of a shard (bytes + crc32c), repairing its checksum."""
    size = 16 * n_inner + 4
    if len(raw) < size:
        return raw, "shard index absent"
    body, index = raw[:-size], bytearray(raw[-size:-4])
    i = rng.randrange(n_inner)
    offset, nbytes = struct.unpack_from("<QQ", index, 16 * i)
    what = rng.choice(["offset", "nbytes", "half-empty", "huge", "overlap", "past-end"])
    if what == "offset":
        offset = rng.choice([0, offset + 1, offset - 1, len(body) - 1]) % 2**64
    elif what == "nbytes":
        nbytes = rng.choice([0, 1, nbytes + 1, nbytes - 1, len(body)]) % 2**64
    elif what == "half-empty":
        if rng.random() < 0.5:
            offset = EMPTY
        else:
            nbytes = EMPTY
    elif what == "huge":
        offset, nbytes = rng.choice([(2**63, 16), (0, 2**63), (2**64 - 2, 4), (0, 2**40)])
    elif what == "overlap":
        offset, nbytes = struct.unpack_from("<QQ", index, 16 * rng.randrange(n_inner))
    else:
        offset = len(body) + rng.randint(0, 100)
    struct.pack_into("<QQ", index, 16 * i, offset, nbytes)
    return body + bytes(index) + _crc32c(bytes(index)), f"shard index {what} of entry {i}"


def mutate_codec_header(rng: random.Random, raw: bytes, seed_name: str) -> tuple[bytes, str]:
    """Forge a size or flag field of the compressor's header (what decoders size buffers from)."""
    data = bytearray(raw)
    huge = rng.choice([2**31 - 1, 2**32 - 1, 2**40, 2**30])
    if data[:4] == b"\x28\xb5\x2f\xfd" and len(data) > 6:
        # zstd frame header: make the frame content size 8 bytes and set it.
        data[4] = (data[4] & 0x3F) | 0xC0 | 0x20  # FCS flag 3, single segment
        data[5:5] = struct.pack("<Q", huge)
        return bytes(data), f"zstd frame content size {huge}"
    if data[:2] == b"\x1f\x8b" and len(data) > 18:
        if rng.random() < 0.5:
            data[-4:] = struct.pack("<I", huge % 2**32)
            return bytes(data), "gzip ISIZE"
        data[3] = rng.randrange(256)
        return bytes(data), "gzip FLG"
    if "blosc" in seed_name and len(data) >= 16:
        field = rng.choice([("nbytes", 4), ("blocksize", 8), ("typesize", 3), ("flags", 2)])
        if field[0] in ("nbytes", "blocksize"):
            struct.pack_into("<I", data, field[1], huge % 2**32)
        else:
            data[field[1]] = rng.randrange(256)
        return bytes(data), f"blosc {field[0]}"
    if "lz4" in seed_name and len(data) >= 4:
        struct.pack_into("<i", data, 0, rng.choice([2**31 - 1, -1, 2**30]))
        return bytes(data), "lz4 size prefix"
    return mutate_bytes(rng, raw, b"")


#: what a bomb decodes to: more than the worker's address space (``--memory-mib``, 2 GiB), so
#: that a decoder inflating it in full fails the case
BOMB_BYTES = 3 << 30


def _xz_compress(data: bytes) -> bytes:
    import lzma

    return lzma.compress(data, preset=0)


def _bz2_compress(data: bytes) -> bytes:
    import bz2

    return bz2.compress(data)


def bomb_for(rng: random.Random, seed_name: str, raw: bytes) -> tuple[bytes, str] | None:
    """A stream of the seed's compressor that decodes to (or declares) :data:`BOMB_BYTES`, or
    None when the seed has no compressor to bomb."""
    if "gzip" in seed_name or seed_name == "v3-transpose":
        return bombs.gzip_members(BOMB_BYTES), "gzip bomb"
    if "zstd" in seed_name or "vlen" in seed_name:
        if rng.random() < 0.5:
            return bombs.zstd_rle_frame(64, BOMB_BYTES), "zstd frame declaring 3 GiB"
        return bombs.zstd_rle_frame(BOMB_BYTES), "zstd bomb without a declared size"
    if seed_name == "v2-zlib":
        return bombs.zlib_stream(BOMB_BYTES), "zlib bomb"
    if seed_name == "v2-bz2":
        return bombs.members(_bz2_compress, BOMB_BYTES, 1 << 20), "bz2 bomb"
    if seed_name == "v2-lzma":
        return bombs.members(_xz_compress, BOMB_BYTES), "xz bomb"
    if seed_name == "v2-lz4" and len(raw) >= 4:
        return bombs.forge_u32(raw, 0, 2**31 - 1), "lz4 size prefix 2**31-1"
    if "blosc" in seed_name and len(raw) >= 16:
        return bombs.forge_u32(raw, 4, 2**31 - 1), "blosc nbytes 2**31-1"
    return None


def _shard_holding(inner: bytes, n_inner: int) -> bytes:
    """A shard (index bytes + crc32c at the end) whose first inner chunk is ``inner``."""
    entries = [(0, len(inner))] + [(EMPTY, EMPTY)] * (n_inner - 1)
    index = b"".join(struct.pack("<QQ", o, n) for o, n in entries)
    return inner + index + _crc32c(index)


def _is_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in METADATA_NAMES


def mutate(seed_name: str, files: dict[str, bytes], case: int) -> tuple[dict[str, bytes], str, bool]:
    """The store of ``case``: (files, description, whether the data must still be the seed's)."""
    rng = random.Random(f"{seed_name}:{case}")
    files = dict(files)
    meta = sorted(k for k in files if _is_metadata(k))
    chunks = sorted(k for k in files if not _is_metadata(k))
    kind = rng.choice(["json", "json", "json-bytes", "chunk", "chunk", "header", "shard", "bomb"])
    if not chunks:
        kind = "json"
    if kind == "shard" and "shard" not in seed_name:
        kind = "chunk"
    if kind in ("json", "json-bytes"):
        key = rng.choice(meta)
        if kind == "json":
            files[key], what = mutate_json_value(rng, files[key])
        else:
            files[key], what = mutate_bytes(rng, files[key], b"")
        return files, f"{key}: {what}", False
    key = rng.choice(chunks)
    if kind == "bomb":
        bomb = bomb_for(rng, seed_name, files[key])
        if bomb is not None:
            stream, what = bomb
            # the seeds' shards hold 4 inner chunks (see below): the bomb is the first
            files[key] = _shard_holding(stream, 4) if "shard" in seed_name else stream
            return files, f"{key}: {what}", False
        kind = "chunk"
    if kind == "chunk":
        other = files[rng.choice(chunks)]
        files[key], what = mutate_bytes(rng, files[key], other)
        # A splice may swap in another chunk whole, checksum included: no checksum sees that.
        return files, f"{key}: {what}", what != "bytes splice"
    if kind == "shard":
        # the seeds' shards hold (6, 4) / (3, 2) = 4 inner chunks
        files[key], what = mutate_shard_index(rng, files[key], 4)
        # The index's checksum is repaired: an entry may now point at another valid chunk.
        return files, f"{key}: {what}", False
    raw = files[key]
    crc = seed_name == "v3-crc32c"  # a crc32c after the compressor: repaired, so the edit reaches it
    body = raw[:-4] if crc else raw
    body, what = mutate_codec_header(rng, body, seed_name)
    files[key] = body + _crc32c(body) if crc else body
    return files, f"{key}: {what}", False


# -- the worker: one case at a time, under limits --------------------------------------------


def _bounded(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """What a case reads of an array: every seed whole (a part of a chunk would let the CPU's
    partial decoders skip what the GPU decodes), at most 256 along each of two axes (16 along
    each of more) of a shape a mutation made huge."""
    cap = 512 if len(shape) <= 2 else 16
    return tuple(slice(0, min(n, cap)) for n in shape)


def _middle(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A box in the middle of an array, across chunk boundaries: what the CPU engine reads in
    part (Blosc blocks, a zstd frame's first blocks, byte spans of uncompressed chunks)."""
    return tuple(slice(n // 3, n // 3 + min(max(n // 2, 1), 256)) for n in shape)


def _write_files(files: dict[str, bytes], local_dir: Path) -> None:
    """The store's files under ``local_dir``, emptied first."""
    shutil.rmtree(local_dir, ignore_errors=True)
    for key, value in files.items():
        path = local_dir / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
    local_dir.mkdir(parents=True, exist_ok=True)


def _read_arrays(store: Any, device: str) -> dict[str, np.ndarray[Any, Any]]:
    """Open ``store`` on ``device`` and read (the first 16 of each axis of) every array in it; on
    a GPU, every array a GPU can hold (not variable-length strings, which it refuses by design)."""
    import gpuzarr

    node = gpuzarr.open(store, mode="r", device="cpu")
    if device != "cpu":
        if isinstance(node, gpuzarr.Array) and not _on_gpu(node):
            return {}
        node = gpuzarr.open(store, mode="r", device=device)
    got = {}
    for name, member in _arrays_in(node):
        if not (device == "cpu" or _on_gpu(member)):
            continue
        bounds = _bounded(member.shape)
        whole = got[name] = np.asarray(member[bounds])
        boxes = _chunk_boxes(member)
        if not boxes:
            continue
        batch = got[f"{name}{BATCH_SUFFIX}"] = np.asarray(member.read_batch(boxes))
        crops = got[f"{name}{LOADER_SUFFIX}"] = _load_crops(member, boxes, device)
        if all(b.stop <= bound.stop for box in boxes for b, bound in zip(box, bounds, strict=True)):
            want = np.stack([whole[box] for box in boxes])
            where = f"{name or '/'} on {device}"
            if not _same(want, batch):
                raise ReadersDisagree(f"{where}: read_batch of whole chunks differs from a read of the same chunks")
            if not _same(want, crops):
                raise ReadersDisagree(f"{where}: the CropLoader's crops of whole chunks differ from a read of them")
    return got


#: what names a case's read_batch of an array, and its loader's crops, among what it read
BATCH_SUFFIX = " read_batch"
LOADER_SUFFIX = " CropLoader"


def _load_crops(array: Any, boxes: list[tuple[slice, ...]], device: str) -> np.ndarray[Any, Any]:
    """The crops at ``boxes`` (whole chunks, the first twice) through a CropLoader with a chunk
    cache, batches of 4 read on the calling thread: on the CPU through its host cache, on a GPU
    through its device cache, so that both read every chunk whole."""
    from gpuzarr.loader import CropLoader

    shape = tuple(b.stop - b.start for b in boxes[0])
    cache = {"cache_bytes": 1 << 24} if device == "cpu" else {"device_cache_bytes": 1 << 24}
    loader = CropLoader(
        array, shape, 4, sampler=[(0, tuple(b.start for b in box)) for box in boxes], shuffle=False,
        device=device, output="numpy", prefetch=0, **cache,
    )  # fmt: skip
    try:
        return np.concatenate([np.asarray(batch.data) for batch in loader])
    finally:
        loader.close()



#: the most boxes a case's read_batch takes
BATCH_BOXES = 16


def _chunk_boxes(array: Any) -> list[tuple[slice, ...]]:
    """Boxes of whole chunks of a regular grid (the first repeated, so that a chunk two boxes
    share is decoded once), at most :data:`BATCH_BOXES`: a batch of crops that every reader
    decodes whole, so that the CPU engine and the GPU path see the same bytes."""
    chunks, shape = array.chunks, array.shape
    if not all(isinstance(c, int) and c > 0 for c in chunks) or not shape:
        return []
    # At most BATCH_BOXES chunks along each axis: the shape may be a mutation's 2**63.
    counts = [min(n // c, BATCH_BOXES) for n, c in zip(shape, chunks, strict=True)]
    if 0 in counts:
        return []
    boxes: list[tuple[slice, ...]] = []
    for index in itertools.product(*(range(n) for n in counts)):
        boxes.append(tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks, strict=True)))
        if len(boxes) >= BATCH_BOXES - 1:
            break
    return [boxes[0], *boxes]


def _arrays_in(node: Any) -> list[tuple[str, Any]]:
    """(path, Array) of every array of an opened node: itself, or a group's members at any depth."""
    import gpuzarr

    members = [("", node)] if isinstance(node, gpuzarr.Array) else list(node.members(max_depth=None))
    return [(name, member) for name, member in members if isinstance(member, gpuzarr.Array)]


def _on_gpu(array: Any) -> bool:
    """Whether a GPU holds ``array``'s data type (not Python objects: variable-length strings)."""
    return not (array.dtype.hasobject or array.dtype.kind in "OTSU")


class ReadersDisagree(AssertionError):
    """The CPU engine and the GPU path read a store differently."""


def run_case(
    files: dict[str, bytes],
    expected: dict[str, np.ndarray[Any, Any]] | None,
    local_dir: Path | None = None,
    *,
    gpu: bool = False,
    written: dict[str, np.ndarray[Any, Any]] | None = None,
) -> None:
    """Open and read every array of the store; raise what gpuzarr raised. With ``local_dir``
    the store's files are written there (emptied first) and read through a LocalStore.

    With ``gpu`` (and ``local_dir``), read on the CPU and then on the GPU (``cuda:0``: the
    emulated device of :func:`emulated_gpu`), and raise AssertionError where the two
    disagree: different bytes, or one of them refusing the store. One disagreement is allowed:
    the GPU path may read what the CPU engine refuses, where it cannot see what is wrong, if it
    then gives the seed's data (``written``). nvCOMP does not say where a deflate stream ended,
    so bytes spliced in between the end of a gzip or zlib stream and its trailer go unseen on a
    GPU; the CRC-32 or Adler-32 of the trailer, checked on the device, still vouches for the
    data.
    """
    import gpuzarr

    if local_dir is None:
        store: Any = gpuzarr.MemoryStore(dict(files))
    else:
        _write_files(files, local_dir)
        store = gpuzarr.LocalStore(local_dir)
    if not gpu:
        try:
            _check_expected(_read_arrays(store, "cpu"), expected)
            _check_middles(store, expected)
        except gpuzarr.errors.GpuZarrError:
            # Writes over chunks that do not read (a write in part reads them first) must
            # fail as cleanly: they are tried all the same, and the read's error stands.
            if local_dir is None:
                with contextlib.suppress(gpuzarr.errors.GpuZarrError):
                    _write_and_read_back(files)
            raise
        if local_dir is None:
            _write_and_read_back(files)
        return
    refused = gpuzarr.errors.GpuZarrError
    cpu = _outcome(lambda: _read_arrays(store, "cpu"))
    device = _outcome(lambda: _read_arrays(store, "cuda:0"))
    if isinstance(cpu, refused) and isinstance(device, refused):
        raise device
    if isinstance(device, refused):
        raise ReadersDisagree(f"the CPU engine read the store, the GPU path refused it: {_describe(device)}")
    assert isinstance(device, dict)
    if isinstance(cpu, refused):
        if written is None or any(
            name not in written or got.shape != written[name].shape or not np.array_equal(got, written[name])
            for name, got in device.items()
            if not name.endswith((BATCH_SUFFIX, LOADER_SUFFIX))  # each agrees with its array's whole read
        ):
            raise ReadersDisagree(f"the CPU engine refused the store ({_describe(cpu)}), the GPU path read {device!r}")
        return
    assert isinstance(cpu, dict)
    for name, got in device.items():
        if not _same(cpu[name], got):
            raise ReadersDisagree(f"{name or '/'}: the CPU engine read {cpu[name]!r}, the GPU path {got!r}")
    _check_expected(device, expected)
    _compare_selections(store, written)


def _selections(shape: tuple[int, ...]) -> list[tuple[str, Any]]:
    """Selections of the GPU path's other routes, for an array of ``shape``: a box across
    chunks, every other element, points gathered on the device, and (on a small array) every
    axis reversed."""
    if not shape or 0 in shape:
        return []
    picks = [("middle box", _middle(shape)), ("every other element", tuple(slice(0, min(n, 512), 2) for n in shape))]
    points = tuple(np.array(sorted({0, n // 2, n - 1}), dtype=np.int64) for n in shape)
    if all(n <= 2**31 for n in shape):
        picks.append(("oindex points", points))
    if all(n <= 512 for n in shape):
        picks.append(("reversed", tuple(slice(None, None, -1) for _ in shape)))
    return picks


def _read_selection(array: Any, what: str, selection: Any) -> dict[str, np.ndarray[Any, Any]]:
    """``array`` (a gpuzarr Array, or NumPy's for the seed's data) at ``selection``, by name."""
    if what == "oindex points":
        got = array.oindex[selection] if hasattr(array, "oindex") else array[np.ix_(*selection)]
    else:
        got = array[selection]
    return {"": np.asarray(got)}


def _compare_selections(store: Any, written: dict[str, np.ndarray[Any, Any]] | None) -> None:
    """Each of :func:`_selections` of every array the GPU can hold, read by both readers.
    Where both read, the same bytes. The GPU path decodes every chunk a selection touches
    whole, where the CPU engine may decode part of it: it may refuse what the CPU engine reads,
    and may read what the CPU engine refuses only as the whole reads allow (the seed's data)."""
    import gpuzarr

    refused = gpuzarr.errors.GpuZarrError
    # Both readers find their arrays the same way (a group's through its consolidated metadata,
    # which may say other than the array's own document).
    cpu_node = gpuzarr.open(store, mode="r", device="cpu")
    if isinstance(cpu_node, gpuzarr.Array) and not _on_gpu(cpu_node):
        return
    nodes = [cpu_node, gpuzarr.open(store, mode="r", device="cuda:0")]
    found = [dict(_arrays_in(node)) for node in nodes]
    for name, cpu_array in found[0].items():
        gpu_array = found[1].get(name)
        if not _on_gpu(cpu_array):
            continue
        assert isinstance(gpu_array, gpuzarr.Array) and gpu_array.shape == cpu_array.shape
        for what, selection in _selections(cpu_array.shape):
            cpu = _outcome(functools.partial(_read_selection, cpu_array, what, selection))
            device = _outcome(functools.partial(_read_selection, gpu_array, what, selection))
            if isinstance(device, refused):
                continue
            assert isinstance(device, dict)
            where = f"{name or '/'} {what}"
            if isinstance(cpu, refused):
                seed = None if written is None or name not in written else written[name]
                if seed is None or seed.shape != cpu_array.shape:
                    want = None
                else:
                    want = _read_selection(seed, what, selection)[""]
                if want is None or not np.array_equal(want, device[""]):
                    raise ReadersDisagree(f"{where}: the CPU engine refused it ({_describe(cpu)}), the GPU read it")
                continue
            assert isinstance(cpu, dict)
            if not _same(cpu[""], device[""]):
                raise ReadersDisagree(f"{where}: the CPU engine read {cpu['']!r}, the GPU path {device['']!r}")


def _outcome(read: Any) -> dict[str, np.ndarray[Any, Any]] | Exception:
    """What ``read()`` returned, or the GpuZarrError it raised (any other exception propagates)."""
    import gpuzarr

    try:
        result: dict[str, np.ndarray[Any, Any]] = read()
    except gpuzarr.errors.GpuZarrError as exc:
        return exc
    return result


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Bit-identical (NaN payloads and signed zeros included), or equal objects (strings)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.hasobject:
        return bool(np.array_equal(a, b))
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _values(dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """Values of ``dtype`` to write: a ramp where the type holds numbers, else its zeros."""
    n = math.prod(shape)
    if dtype.kind in "iuf":
        return (np.arange(n) % 100).astype(dtype).reshape(shape)
    if dtype.kind == "b":
        return (np.arange(n) % 2 == 1).reshape(shape)
    if dtype.kind in "OT":
        return np.array([f"w{i % 7}" for i in range(n)], dtype=object).reshape(shape)
    return np.zeros(shape, dtype=dtype)


def _write_and_read_back(files: dict[str, bytes]) -> None:
    """Write values into (the first 512 along each of two axes of) every array of a copy of the
    store, through its own metadata and codecs, and read them back: the same values, or a
    GpuZarrError from the write."""
    import gpuzarr

    store = gpuzarr.MemoryStore(dict(files))
    for name, member in _arrays_in(gpuzarr.open(store, mode="r+", device="cpu")):
        box = _bounded(member.shape)
        data = _values(member.dtype, tuple(s.stop - s.start for s in box))
        if data.size > 1 << 20:
            continue
        member[box] = data
        got = np.asarray(member[box])
        same = np.array_equal(got, data) if data.dtype.hasobject else _same(got, data.astype(got.dtype, copy=False))
        if not same:
            raise AssertionError(f"{name or '/'}: wrote {data!r}, read back {got!r}")


def _check_middles(store: Any, expected: dict[str, np.ndarray[Any, Any]] | None) -> None:
    """Read the middle box (:func:`_middle`) of every array on the CPU; where the seed's data is
    expected, it must be that part of it."""
    import gpuzarr

    for name, member in _arrays_in(gpuzarr.open(store, mode="r", device="cpu")):
        box = _middle(member.shape)
        got = np.asarray(member[box])
        if expected is not None and name in expected:
            want = expected[name][box] if expected[name].shape == member.shape else None
            if want is None or got.shape != want.shape or not np.array_equal(got, want):
                raise AssertionError(f"{name or '/'}{box}: read {got!r}, the seed holds {want!r}")


def _check_expected(got: dict[str, np.ndarray[Any, Any]], expected: dict[str, np.ndarray[Any, Any]] | None) -> None:
    for name, value in got.items():
        if expected is not None and name in expected:
            want = expected[name]
            if value.shape != want.shape or not np.array_equal(value, want):
                raise AssertionError(f"{name or '/'}: read {value!r}, the seed holds {want!r}")


@contextlib.contextmanager
def emulated_gpu() -> Iterator[None]:
    """Within the block, ``cuda:0`` is the emulated device (NumPy buffers, CPU decoders of
    nvCOMP's formats, the NumPy kernel models), as the tests' ``emulated_gpu`` fixture arranges,
    and every GPU read takes the device path however few chunks it has."""
    import gpuzarr
    from gpuzarr import backends
    from gpuzarr.backends import select
    from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice

    reader_for = backends.reader_for

    def emulated_reader(device: str, **_: Any) -> Any:
        return reader_for(device, device_factory=lambda index, stream: CpuEmulatedDevice(index, stream))

    replaced: list[tuple[Any, str, Any]] = [
        (select, "gpu_unavailable_reason", lambda: None),
        (select, "device_count", lambda: 1),
        (select, "_current_device", lambda: 0),
        (backends, "reader_for", emulated_reader),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in replaced]
    for module, name, value in replaced:
        setattr(module, name, value)
    try:
        with gpuzarr.config.set(gpu_small_read_chunks=0):
            yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


#: what a worker or a replay keeps entered for the rest of the process (the emulated device)
_process_contexts = contextlib.ExitStack()


def written_data(seed_name: str) -> dict[str, np.ndarray[Any, Any]]:
    """What the seed's writer wrote, by array path."""
    seed = next(s for s in SEEDS if s.name == seed_name)
    data = _data(seed.dtype, seed.shape)
    return {"": data} if "group" not in seed_name else {"x": data, "sub/y": data}


def _configure(local: bool, gpu: bool) -> Path | None:
    """Set this process up for the cases; the directory each case's files go to (None: read
    from memory)."""
    import gpuzarr

    # From files, two threads: the local readers (chunks fetched on one thread and decoded on
    # another, Blosc frames read in part) see every mutation too.
    local = local or gpu
    gpuzarr.config.set(concurrency=2 if local else 1, max_chunk_bytes=64 * 2**20)
    if gpu:
        _process_contexts.enter_context(emulated_gpu())
    return Path(tempfile.mkdtemp(prefix="gpuzarr-fuzz-case-")) / "store" if local else None


def _worker(seed_dir: Path, memory_mib: int, local: bool, gpu: bool = False) -> None:
    import resource

    limit = memory_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import gpuzarr

    local_dir = _configure(local, gpu)
    seeds = build_seeds(seed_dir)
    expected = {name: written_data(name) for name in seeds}
    for line in sys.stdin:
        seed_name, case = line.split()
        files, what, data_kept = mutate(seed_name, seeds[seed_name], int(case))
        check = expected[seed_name] if data_kept and next(s for s in SEEDS if s.name == seed_name).checksummed else None
        try:
            run_case(files, check, local_dir, gpu=gpu, written=expected[seed_name])
            result = {"ok": True, "error": None}
        except gpuzarr.errors.GpuZarrError as exc:
            result = {"ok": True, "error": type(exc).__name__}
        except BaseException as exc:
            result = {"ok": False, "error": type(exc).__name__, "traceback": traceback.format_exc(), "what": what}
        print(json.dumps(result), flush=True)
    if local_dir is not None:
        shutil.rmtree(local_dir.parent, ignore_errors=True)


# -- the driver ---------------------------------------------------------------------------------


@dataclass
class Failure:
    seed_name: str
    case: int
    kind: str
    what: str
    traceback: str

    #: the reader option the case ran with ("", "--local" or "--emulated-gpu")
    option: str = ""

    @property
    def reproducer(self) -> str:
        option = f" {self.option}" if self.option else ""
        return f"python -m benchmarks.fuzz --replay {self.seed_name}:{self.case}{option}"


class Worker:
    """A worker subprocess, restarted after a crash or a case that ran out of time."""

    def __init__(self, seed_dir: Path, memory_mib: int, local: bool = False, gpu: bool = False) -> None:
        self.seed_dir, self.memory_mib, self.option = seed_dir, memory_mib, _option(local, gpu)
        self.proc: subprocess.Popen[str] | None = None
        self.warm = False
        # stderr goes to a file: a pipe nobody reads could fill and stall the worker
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()

    def _start(self) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "benchmarks.fuzz", "--worker", "--seed-dir", str(self.seed_dir),
               "--memory-mib", str(self.memory_mib), *([self.option] if self.option else [])]  # fmt: skip
        env = {**os.environ, "GPUZARR_DEVICE": "cpu"}
        root = Path(__file__).resolve().parents[1]
        self.stderr.seek(0)
        self.stderr.truncate()
        return subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, cwd=root, env=env
        )

    def run(self, seed_name: str, case: int, timeout: float) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{seed_name} {case}\n")
        self.proc.stdin.flush()
        answer: list[str] = []
        reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        # the first case also pays for the worker's start and imports
        reader.join(timeout if self.warm else timeout + 30)
        self.warm = True
        if reader.is_alive():
            self.kill()
            return {"ok": False, "error": "timeout", "traceback": f"no answer within {timeout} s"}
        if not answer or not answer[0]:
            code = self.proc.wait()
            self.kill()
            self.stderr.seek(0)
            stderr = self.stderr.read()
            return {"ok": False, "error": f"crash (exit status {code})", "traceback": stderr[-4000:]}
        result: dict[str, Any] = json.loads(answer[0])
        return result

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None
        self.warm = False

    def close(self) -> None:
        self.kill()
        self.stderr.close()


def _option(local: bool, gpu: bool) -> str:
    """The command line's reader option for these settings."""
    return "--emulated-gpu" if gpu else "--local" if local else ""


def save_failure(out: Path, failure: Failure, files: dict[str, bytes]) -> Path:
    where = out / f"{failure.seed_name}-{failure.case}"
    shutil.rmtree(where, ignore_errors=True)
    for key, value in files.items():
        path = where / "store" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
    (where / "traceback.txt").write_text(f"{failure.kind}: {failure.what}\n{failure.reproducer}\n\n{failure.traceback}")
    return where


def fuzz(
    *,
    seconds: float | None = None,
    cases: int | None = None,
    seed: int = 0,
    jobs: int = 1,
    out: Path | None = None,
    seed_dir: Path | None = None,
    case_seconds: float = 10.0,
    memory_mib: int = 2048,
    seed_names: list[str] | None = None,
    quiet: bool = False,
    local: bool = False,
    gpu: bool = False,
) -> tuple[int, list[Failure], dict[str, int]]:
    """Run cases until ``seconds`` pass or ``cases`` ran; (cases run, failures, how many cases
    ended how: "read", or the name of the exception raised)."""
    seed_dir = seed_dir or Path(tempfile.gettempdir()) / "gpuzarr-fuzz-seeds"
    seed_dir.mkdir(parents=True, exist_ok=True)
    seeds = build_seeds(seed_dir)
    names = sorted(n for n in seeds if seed_names is None or n in seed_names)
    deadline = time.monotonic() + seconds if seconds is not None else None
    lock = threading.Lock()
    failures: list[Failure] = []
    outcomes: dict[str, int] = {}
    counter = [0]

    def next_case() -> tuple[str, int] | None:
        with lock:
            n = counter[0]
            if (cases is not None and n >= cases) or (deadline is not None and time.monotonic() > deadline):
                return None
            counter[0] += 1
        number = seed * 1_000_000 + n
        return names[n % len(names)], number

    def loop() -> None:
        worker = Worker(seed_dir, memory_mib, local, gpu)
        try:
            while (item := next_case()) is not None:
                seed_name, case = item
                result = worker.run(seed_name, case, case_seconds)
                with lock:
                    outcome = result["error"] or "read"
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if result["ok"]:
                    continue
                files, what, _ = mutate(seed_name, seeds[seed_name], case)
                failure = Failure(
                    seed_name, case, result["error"], result.get("what", what), result["traceback"], worker.option
                )
                with lock:
                    failures.append(failure)
                if out is not None:
                    save_failure(out, failure, files)
                if not quiet:
                    print(f"FAIL {failure.kind}: {failure.what}  --  {failure.reproducer}", flush=True)
        finally:
            worker.close()

    threads = [threading.Thread(target=loop) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counter[0], failures, outcomes


def replay(spec: str, seed_dir: Path | None, local: bool = False, gpu: bool = False) -> int:
    """Run one case in this process and show what happens."""
    import gpuzarr

    seed_name, case = spec.rsplit(":", 1)
    seed_dir = seed_dir or Path(tempfile.gettempdir()) / "gpuzarr-fuzz-seeds"
    seed_dir.mkdir(parents=True, exist_ok=True)
    files, what, _ = mutate(seed_name, build_seeds(seed_dir)[seed_name], int(case))
    print(f"{seed_name}:{case}: {what}")
    local_dir = _configure(local, gpu)
    try:
        run_case(files, None, local_dir, gpu=gpu, written=written_data(seed_name))
    except gpuzarr.errors.GpuZarrError as exc:
        print(f"ok: {type(exc).__name__}: {exc}")
        return 0
    finally:
        if local_dir is not None:
            shutil.rmtree(local_dir.parent, ignore_errors=True)
    print("ok: read")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--seed", type=int, default=0, help="which series of cases (default 0)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="where failing stores go")
    parser.add_argument("--seed-dir", type=Path, default=None, help="where the seed stores are written")
    parser.add_argument("--case-seconds", type=float, default=10.0)
    parser.add_argument("--memory-mib", type=int, default=2048)
    parser.add_argument("--replay", metavar="SEED_NAME:CASE", help="run one case in this process")
    reader = parser.add_mutually_exclusive_group()
    reader.add_argument(
        "--local", action="store_true", help="read each case from files (LocalStore, 2 threads), not from memory"
    )
    reader.add_argument(
        "--emulated-gpu",
        action="store_true",
        help="read each case from files on the CPU and through the GPU path on the emulated device; they must agree",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.seed_dir, args.memory_mib, args.local, args.emulated_gpu)
        return 0
    if args.replay:
        return replay(args.replay, args.seed_dir, args.local, args.emulated_gpu)
    started = time.monotonic()
    n, failures, outcomes = fuzz(
        seconds=args.seconds, cases=args.cases, seed=args.seed, jobs=args.jobs, out=args.out,
        seed_dir=args.seed_dir, case_seconds=args.case_seconds, memory_mib=args.memory_mib, local=args.local,
        gpu=args.emulated_gpu,
    )  # fmt: skip
    kinds: dict[str, int] = {}
    for f in failures:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    print(f"{n} cases in {time.monotonic() - started:.0f} s, {len(failures)} failures {kinds or ''}")
    print("outcomes:", dict(sorted(outcomes.items(), key=lambda kv: -kv[1])))
    if failures:
        print(f"failing stores and tracebacks: {args.out.resolve()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
