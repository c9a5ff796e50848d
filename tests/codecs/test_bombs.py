"""Decompression bombs and forged size fields: every decoder stops at the chunk's size.

Each case writes a small valid array (one 1 MiB chunk), replaces its chunk with a stream that
decodes to 1 GiB or declares a huge size, and reads it in a child process whose address space
is limited to 768 MiB above what it uses before reading. The read must raise a
CorruptChunkError naming the chunk's key, with no MemoryError behind it, and the process's peak
resident memory during the read must stay within a few times the chunk's size. All cases run in
one child (a fresh interpreter costs more than the reads); the peak is reset before each.
"""

from __future__ import annotations

import bz2
import json
import lzma
import os
import struct
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from numcodecs import LZ4, Blosc, Zstd

import gpuzarr
import gpuzarr.codecs.inflate
from benchmarks import bombs
from gpuzarr.codecs.crc32c import crc32c
from gpuzarr.errors import CorruptChunkError, MetadataError

if TYPE_CHECKING:
    from pathlib import Path

CHUNK = 1 << 20
BOMB = 1 << 30
#: ``max_chunk_bytes`` in the child: the bound where the metadata fixes no size (vlen)
CEILING = 16 << 20
#: most a read may add to the child's peak resident memory (the chunk, copies, the ceiling)
PEAK_LIMIT = 48 << 20
#: address space the child may add while reading: a bomb inflated in full exceeds it
ADDRESS_SPACE_ROOM = 768 << 20

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
ZEROS_MIB = bytes(CHUNK)


# -- bombs (benchmarks/bombs.py builds them cheaply) ---------------------------------------------


def zlib_bomb() -> bytes:
    return bombs.zlib_stream(BOMB)


def gzip_bomb() -> bytes:
    return bombs.gzip_members(BOMB)


def xz_compress(data: bytes) -> bytes:
    return lzma.compress(data, preset=0)


def bz2_bomb() -> bytes:
    return bombs.members(bz2.compress, BOMB, CHUNK)


def xz_bomb() -> bytes:
    return bombs.members(xz_compress, BOMB)


def blosc_forged(field: str, value: int) -> bytes:
    frame = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE).encode(ZEROS_MIB)
    return bombs.forge_u32(frame, {"nbytes": 4, "blocksize": 8}[field], value)


def lz4_forged_prefix() -> bytes:
    return bombs.forge_u32(LZ4().encode(ZEROS_MIB), 0, 2**31 - 1)


def shard_of(inner: bytes) -> bytes:
    """A shard holding one inner chunk, with the default index (bytes + crc32c) at the end."""
    index = np.array([0, len(inner)], "<u8").tobytes()
    return inner + index + crc32c(index).to_bytes(4, "little")


def vlen_count(count: int) -> bytes:
    return struct.pack("<I", count)


# -- cases: (array creation arguments, stored bytes of its chunk) -------------------------------

V3 = {"zarr_format": 3}
NC = "numcodecs."
CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "gzip": ({**V3, "codecs": [BYTES, {"name": "gzip"}]}, gzip_bomb),
    "zstd-no-size": ({**V3, "codecs": [BYTES, {"name": "zstd"}]}, lambda: bombs.zstd_rle_frame(BOMB)),
    "zstd-declares-1TiB": ({**V3, "codecs": [BYTES, {"name": "zstd"}]}, lambda: bombs.zstd_rle_frame(CHUNK, 1 << 40)),
    "zstd-declares-1GiB": ({**V3, "codecs": [BYTES, {"name": "zstd"}]}, lambda: bombs.zstd_rle_frame(BOMB, BOMB)),
    "blosc-nbytes": ({**V3, "codecs": [BYTES, {"name": "blosc"}]}, lambda: blosc_forged("nbytes", 2**31 - 1)),
    "numcodecs.zlib": ({**V3, "codecs": [BYTES, {"name": NC + "zlib"}]}, zlib_bomb),
    "numcodecs.gzip": ({**V3, "codecs": [BYTES, {"name": NC + "gzip"}]}, gzip_bomb),
    "numcodecs.bz2": ({**V3, "codecs": [BYTES, {"name": NC + "bz2"}]}, bz2_bomb),
    "numcodecs.lzma": ({**V3, "codecs": [BYTES, {"name": NC + "lzma"}]}, xz_bomb),
    "numcodecs.lz4": ({**V3, "codecs": [BYTES, {"name": NC + "lz4"}]}, lz4_forged_prefix),
    "numcodecs.zstd": ({**V3, "codecs": [BYTES, {"name": NC + "zstd"}]}, lambda: bombs.zstd_rle_frame(BOMB)),
    "numcodecs.blosc": ({**V3, "codecs": [BYTES, {"name": NC + "blosc"}]}, lambda: blosc_forged("nbytes", 2**31 - 1)),
    "v2-zlib": ({"zarr_format": 2, "compressor": {"id": "zlib"}}, zlib_bomb),
    "v2-gzip": ({"zarr_format": 2, "compressor": {"id": "gzip"}}, gzip_bomb),
    "v2-bz2": ({"zarr_format": 2, "compressor": {"id": "bz2"}}, bz2_bomb),
    "v2-lzma": ({"zarr_format": 2, "compressor": {"id": "lzma"}}, xz_bomb),
    "v2-lz4": ({"zarr_format": 2, "compressor": {"id": "lz4"}}, lz4_forged_prefix),
    "v2-zstd": ({"zarr_format": 2, "compressor": {"id": "zstd"}}, lambda: bombs.zstd_rle_frame(BOMB)),
    "v2-blosc": ({"zarr_format": 2, "compressor": {"id": "blosc"}}, lambda: blosc_forged("nbytes", 2**31 - 1)),
    "vlen-utf8-count": ({**V3, "dtype": "string", "codecs": [{"name": "vlen-utf8"}]}, lambda: vlen_count(2**32 - 1)),
    "vlen-utf8-gzip": ({**V3, "dtype": "string", "codecs": [{"name": "vlen-utf8"}, {"name": "gzip"}]}, gzip_bomb),
    "vlen-bytes-zstd": (
        {**V3, "dtype": "bytes", "codecs": [{"name": "vlen-bytes"}, {"name": "zstd"}]},
        lambda: bombs.zstd_rle_frame(BOMB),
    ),
    "sharded-gzip": (
        {**V3, "shards": (CHUNK,), "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [CHUNK], "codecs": [BYTES, {"name": "gzip"}]}}]},
        lambda: shard_of(gzip_bomb()),
    ),
    "sharded-zstd-1TiB": (
        {**V3, "shards": (CHUNK,), "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [CHUNK], "codecs": [BYTES, {"name": "zstd"}]}}]},
        lambda: shard_of(bombs.zstd_rle_frame(CHUNK, 1 << 40)),
    ),
}


def _write_case(root: Path, name: str) -> str:
    """Create the case's array under ``root`` and replace its one chunk: the chunk's key."""
    kwargs, bomb = CASES[name]
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", "uint8")
    shards = kwargs.pop("shards", None)
    path = root / name
    if shards is not None:
        # A chain given in full: its sharding codec makes the array sharded.
        kwargs["chunks"] = shards
    a = gpuzarr.create(str(path), shape=(CHUNK,), dtype=dtype, chunks=kwargs.pop("chunks", (CHUNK,)),
                       fill_value=None if dtype in ("string", "bytes") else 0, device="cpu", **kwargs)
    values: Any = np.full(CHUNK, "x", dtype=object) if dtype in ("string", "bytes") else np.ones(CHUNK, "u1")
    if dtype == "bytes":
        values = np.full(CHUNK, b"x", dtype=object)
    a[:16] = values[:16]
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".z", "zarr.json"))]
    assert len(files) == 1, files
    files[0].write_bytes(bomb())
    return files[0].relative_to(path).as_posix()


CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import gpuzarr
    import gpuzarr.codecs.inflate

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    gpuzarr.config.set(concurrency=1, max_chunk_bytes=int(sys.argv[2]))
    # "zlib": inflate gzip and zlib with the standard library, as without python-isal
    gpuzarr.codecs.inflate.use_isal = sys.argv[4] != "zlib"
    cases = json.loads(sys.argv[1])
    arrays = {name: gpuzarr.open_array(path, mode="r", device="cpu") for name, path in cases.items()}
    room = int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (status("VmSize") + room, resource.RLIM_INFINITY))
    results = {}
    for name, a in arrays.items():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        before = status("VmRSS")
        error = causes = None
        try:
            a[...]
        except BaseException as exc:  # noqa: BLE001 - every outcome is reported
            error = [type(exc).__name__, getattr(exc, "key", None), str(exc)[:300]]
            causes, e = [], exc
            while e is not None:
                causes.append(type(e).__name__)
                e = e.__cause__ or e.__context__
        results[name] = {"error": error, "causes": causes, "peak": status("VmHWM") - before}
    print(json.dumps({"inflate": gpuzarr.codecs.inflate.library(), "results": results}))
    """
)


def _read_in_child(root: Path, names: list[str], inflate_library: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """Write the cases ``names`` under ``root`` and read each in one child process: the library
    that inflated gzip and zlib there, and each case's outcome."""
    keys = {name: _write_case(root, name) for name in names}
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    arrays = {name: str(root / name) for name in names}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(arrays), str(CEILING), str(ADDRESS_SPACE_ROOM), inflate_library],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    results: dict[str, dict[str, Any]] = report["results"]
    for name, key in keys.items():
        results[name]["key"] = key
    return report["inflate"], results


def _needs_proc() -> None:
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux /proc to measure peak memory")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every case, with gzip and zlib inflated as by default (ISA-L where python-isal is
    installed)."""
    _needs_proc()
    used, results = _read_in_child(tmp_path_factory.mktemp("bombs"), sorted(CASES), "default")
    assert used == gpuzarr.codecs.inflate.library()
    return results


#: the cases that inflate gzip or zlib streams: read again on the standard library's path, the
#: fallback where python-isal is not installed
INFLATE_CASES = sorted(name for name in CASES if "gzip" in name or "zlib" in name)


@pytest.fixture(scope="module")
def zlib_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    _needs_proc()
    used, results = _read_in_child(tmp_path_factory.mktemp("bombs-zlib"), INFLATE_CASES, "zlib")
    assert used == "zlib"
    return results


def _assert_refused(result: dict[str, Any], name: str) -> None:
    assert result["error"] is not None, f"{name}: the read succeeded"
    kind, key, message = result["error"]
    assert kind == "CorruptChunkError", result
    assert key == result["key"] and result["key"] in message, result
    assert "MemoryError" not in result["causes"], result
    assert result["peak"] < PEAK_LIMIT, f"{name}: peak resident memory grew by {result['peak'] >> 20} MiB"


@pytest.mark.parametrize("name", sorted(CASES))
def test_bomb_is_refused_within_bounded_memory(outcomes: dict[str, dict[str, Any]], name: str) -> None:
    _assert_refused(outcomes[name], name)


@pytest.mark.parametrize("name", INFLATE_CASES)
def test_bomb_is_refused_on_the_standard_library_inflate_path(
    zlib_outcomes: dict[str, dict[str, Any]], name: str
) -> None:
    _assert_refused(zlib_outcomes[name], name)


def test_gzip_and_zlib_bombs_were_inflated_by_isal_where_installed() -> None:
    """The default run above used ISA-L, so its bomb cases cover that path."""
    pytest.importorskip("isal")
    assert gpuzarr.codecs.inflate.library() == "isal"


# -- what the bounds must keep accepting ---------------------------------------------------------


def zstd_raw_frame(data: bytes) -> bytes:
    """A valid Zstandard frame of raw blocks that declares no decoded size (as streaming
    compressors write them)."""
    block = 128 * 1024
    pieces = [data[i : i + block] for i in range(0, len(data), block)] or [b""]
    header = struct.pack("<IBB", 0xFD2FB528, 0x00, 7 << 3)
    blocks = [
        ((1 if i == len(pieces) - 1 else 0) | (len(p) << 3)).to_bytes(3, "little") + p for i, p in enumerate(pieces)
    ]
    return header + b"".join(blocks)


def _rewrite(path: Path, encode: Any) -> None:
    """Re-encode the one chunk of the array at ``path`` with ``encode(decoded bytes)``."""
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".z", "zarr.json"))]
    assert len(files) == 1, files
    files[0].write_bytes(encode(files[0]))


@pytest.mark.parametrize("frames", [1, 2])
def test_zstd_frames_without_a_declared_size_still_decode(tmp_path: Path, frames: int) -> None:
    """Exact-size chains decode such frames into the chunk's buffer, one frame or several."""
    values = (np.arange(300_000) % 251).astype("u1")
    a = gpuzarr.create(str(tmp_path / "a"), data=values, chunks=values.shape, codecs=[BYTES, {"name": "zstd"}])
    half = len(values) // 2
    parts = [values.tobytes()] if frames == 1 else [values[:half].tobytes(), values[half:].tobytes()]
    _rewrite(tmp_path / "a", lambda _: b"".join(zstd_raw_frame(p) for p in parts))
    np.testing.assert_array_equal(gpuzarr.open_array(str(tmp_path / "a"), mode="r")[...], values)
    assert a.shape == values.shape


def test_variable_length_chunks_are_bounded_by_max_chunk_bytes(tmp_path: Path) -> None:
    """Where the metadata fixes no size, ``max_chunk_bytes`` is the bound: a vlen chunk
    (zstd without a declared size, and gzip) decodes below it and is refused above it."""
    values = np.array(["x" * 1000] * 1000, dtype=object)
    for name, codec in (("zstd", {"name": "zstd"}), ("gzip", {"name": "gzip"})):
        path = tmp_path / name
        gpuzarr.create(str(path), data=values, dtype="string", chunks=values.shape,
                       codecs=[{"name": "vlen-utf8"}, codec])
        if name == "zstd":
            _rewrite(path, lambda f: zstd_raw_frame(np.asarray(Zstd().decode(f.read_bytes())).tobytes()))
        a = gpuzarr.open_array(str(path), mode="r")
        assert a[...].tolist() == values.tolist()
        with gpuzarr.config.set(max_chunk_bytes=500_000), pytest.raises(CorruptChunkError) as caught:
            a[...]
        assert caught.value.key == "c/0" and "500000" in str(caught.value)


def test_blosc_header_with_a_block_larger_than_its_data_is_refused() -> None:
    """c-blosc sizes its per-thread scratch from the header's blocksize, which it never writes
    larger than nbytes: the host refuses such a header before c-blosc or a GPU split reads it."""
    from gpuzarr.codecs.blosc import parse_blosc_header

    parse_blosc_header(blosc_forged("blocksize", CHUNK))  # the largest honest block
    with pytest.raises(ValueError, match="blocksize 2147483647 exceeds its nbytes 1048576"):
        parse_blosc_header(blosc_forged("blocksize", 2**31 - 1))


@pytest.mark.parametrize(
    ("zarr_format", "encoded"),
    [(2, "|S1500000000"), (2, "|V1000000000"), (3, "|S4096")],
)
def test_a_filter_encoding_to_a_huge_type_is_refused_at_open(tmp_path: Path, zarr_format: int, encoded: str) -> None:
    """A filter's configured encoded type lifted the decode bound past max_chunk_bytes: an 8-byte
    v2 array inflated a 4.4 MB zlib chunk to 2 GB before refusing it; a v3 astype to |S4096
    allocated 4 GiB per chunk read."""
    path = tmp_path / "a.zarr"
    path.mkdir()
    if zarr_format == 2:
        doc = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i2", "fill_value": 0, "order": "C",
               "compressor": {"id": "zlib", "level": 1},
               "filters": [{"id": "astype", "encode_dtype": encoded, "decode_dtype": "<i2"}]}  # fmt: skip
        (path / ".zarray").write_text(json.dumps(doc))
    else:
        doc = {"zarr_format": 3, "node_type": "array", "shape": [1 << 20], "data_type": "int16",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1 << 20]}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
               "codecs": [{"name": "numcodecs.astype",
                           "configuration": {"encode_dtype": encoded, "decode_dtype": "<i2"}},
                          {"name": "bytes"}]}  # fmt: skip
        (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(MetadataError, match=r"encoded chunk .*more than config max_chunk_bytes"):
        gpuzarr.open(str(path), mode="r", device="cpu")
