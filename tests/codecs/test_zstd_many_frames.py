"""Runs of small zstd frames (a shard's small inner chunks) decode in one call of zstandard's
``multi_decompress_to_buffer`` (``decode_small_frames``): the same bytes as one frame at a time,
and only frames a one-shot decode takes as they are (``is_lone_frame``): any other run is left to
the frame-by-frame decode, which raises what is wrong."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zstandard

from gpuzarr.codecs.pipeline import CodecPipeline
from gpuzarr.codecs.zstd import (
    MANY_FRAMES_NBYTES,
    decode_lone_frame,
    decode_small_frames,
    decode_zstd,
    is_lone_frame,
)

NBYTES = 4096


def content(seed: int, nbytes: int = NBYTES) -> bytes:
    return np.random.default_rng(seed).integers(0, 40, nbytes, dtype=np.uint8).tobytes()


def frame(data: bytes, *, checksum: bool = False, size: bool = True, level: int = 3) -> bytes:
    compressor = zstandard.ZstdCompressor(level=level, write_content_size=size, write_checksum=checksum)
    return bytes(compressor.compress(data))


def skippable(payload: bytes) -> bytes:
    return (0x184D2A50).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


def with_dictionary_id(good: bytes) -> bytes:
    """The frame with a one-byte dictionary ID in its header (the descriptor's low bits)."""
    descriptor = good[4]
    position = 5 if descriptor & 0x20 else 6
    return good[:4] + bytes([descriptor | 0x01]) + good[5:position] + b"\x07" + good[position:]


def reserved_block_type(good: bytes) -> bytes:
    """The frame with its first block header's type bits (1-2) set to 3, which is reserved."""
    at = zstandard.frame_header_size(good)
    return good[:at] + bytes([good[at] | 0x06]) + good[at + 1 :]


def good_content(case: str) -> bytes:
    """The content of a good frame of each kind these tests take (compressed with a checksum
    for "with a checksum")."""
    return {
        "plain": lambda: content(1),
        "with a checksum": lambda: content(2),
        "raw blocks (incompressible)": lambda: np.random.default_rng(3).bytes(NBYTES),
        "an RLE block": lambda: bytes(NBYTES),
        "several blocks": lambda: content(4, 3 * 128 * 1024),
        "empty": lambda: b"",
    }[case]()


#: the good frames that decode to NBYTES
SMALL_GOOD = ["plain", "with a checksum", "raw blocks (incompressible)", "an RLE block"]


@pytest.mark.parametrize("case", [*SMALL_GOOD, "several blocks", "empty"])
def test_a_lone_frame_is_taken(case: str) -> None:
    data = good_content(case)
    good = frame(data, checksum=case == "with a checksum")
    assert is_lone_frame(memoryview(good), len(data))


#: the ways a chunk is no lone frame of NBYTES decoded, which :func:`not_a_lone_frame` makes
NOT_LONE = [
    "bytes after the frame",
    "a second frame",
    "a skippable frame after it",
    "cut short",
    "another declared size",
    "no declared size",
    "a dictionary ID",
    "not a frame",
    "a reserved block type",
]


def not_a_lone_frame(damage: str, good: bytes, data: bytes) -> bytes:
    """``good``, a frame of ``data`` (NBYTES), made into no lone frame of NBYTES by ``damage``."""
    return {
        "bytes after the frame": lambda: good + b"\x00\x01",
        "a second frame": lambda: good + frame(content(6)),
        "a skippable frame after it": lambda: good + skippable(b"meta"),
        "cut short": lambda: good[:-3],
        "another declared size": lambda: frame(content(5, NBYTES + 2)),
        "no declared size": lambda: frame(data, size=False),
        "a dictionary ID": lambda: with_dictionary_id(good),
        "not a frame": lambda: b"\x00" * 32,
        "a reserved block type": lambda: reserved_block_type(good),
    }[damage]()


@pytest.mark.parametrize("damage", NOT_LONE)
def test_anything_but_a_lone_frame_is_left_to_the_one_by_one_decode(damage: str) -> None:
    data = content(5)
    good = frame(data)
    other = not_a_lone_frame(damage, good, data)
    assert not is_lone_frame(memoryview(other), NBYTES)
    frames = [good, other, good]
    assert decode_small_frames(frames, NBYTES) is None


@pytest.mark.parametrize("case", SMALL_GOOD)
def test_one_of_many_decodes_alone_to_its_bytes(case: str) -> None:
    """``decode_lone_frame``: a frame of a run read on one thread, decoded on its own."""
    data = good_content(case)
    good = frame(data, checksum=case == "with a checksum")
    decoded = decode_lone_frame(memoryview(good)[0:], NBYTES)
    assert decoded is not None and bytes(memoryview(decoded)) == data


@pytest.mark.parametrize("damage", [*NOT_LONE, "a declared size of 2**40", "a wrong checksum"])
def test_one_of_many_that_is_no_lone_frame_of_the_size_is_left_to_the_usual_decode(damage: str) -> None:
    """None for anything a one-shot decode of the chunk would not take as it is: the usual
    decode then raises what is wrong. A declared size other than the chunk's is refused before
    zstandard allocates it."""
    data = content(14)
    good = frame(data, checksum=True)
    if damage == "a declared size of 2**40":
        other = bytes(_declaring(bytearray(frame(content(14, 300))), 2**40))
    elif damage == "a wrong checksum":
        other = good[:-1] + bytes([good[-1] ^ 0xFF])
    else:
        other = not_a_lone_frame(damage, good, data)
    assert decode_lone_frame(other, NBYTES) is None
    assert decode_lone_frame(good, NBYTES) is not None


def _declaring(good: bytearray, size: int) -> bytearray:
    """``good``, a single-segment frame (no window byte), declaring ``size`` in an 8-byte field
    (a bomb: zstandard alone would try to allocate it)."""
    descriptor = good[4]
    assert descriptor & 0x20  # single segment: the content size follows the descriptor
    width = {0: 1, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    forged = good[:4] + bytearray([descriptor | 0xC0]) + bytearray(size.to_bytes(8, "little")) + good[5 + width :]
    assert zstandard.frame_content_size(bytes(forged)) == size
    return forged


def test_one_of_many_is_only_for_small_frames() -> None:
    data = content(16, MANY_FRAMES_NBYTES + 8)
    assert decode_lone_frame(frame(data), len(data)) is None
    assert decode_lone_frame(frame(b""), 0) is None


def test_a_run_decodes_to_what_each_frame_does() -> None:
    datas = [content(seed) for seed in range(20)]
    frames = [frame(d, checksum=seed % 2 == 1) for seed, d in enumerate(datas)]
    decoded = decode_small_frames([memoryview(f)[0:] for f in frames], NBYTES)
    assert decoded is not None
    assert [bytes(memoryview(d)) for d in decoded] == datas
    for f, d in zip(frames, datas, strict=True):
        out = np.empty(NBYTES, np.uint8)
        decode_zstd(None, f, out, None)
        assert out.tobytes() == d


def test_frames_viewing_one_buffer_decode_in_place() -> None:
    """The frames of a run are views of one read of the shard, at any offset."""
    datas = [content(seed, 1000) for seed in range(8)]
    frames = [frame(d) for d in datas]
    shard = memoryview(b"x" * 3 + b"".join(frames) + b"tail")
    views, at = [], 3
    for f in frames:
        views.append(shard[at : at + len(f)])
        at += len(f)
    decoded = decode_small_frames(views, 1000)
    assert decoded is not None and [bytes(memoryview(d)) for d in decoded] == datas


@pytest.mark.parametrize("damage", ["a wrong checksum", "a corrupt block"])
def test_a_run_with_a_frame_that_fails_is_left_to_the_one_by_one_decode(damage: str) -> None:
    good = frame(content(7), checksum=True)
    if damage == "a wrong checksum":
        bad = good[:-1] + bytes([good[-1] ^ 0xFF])
    else:
        middle = len(good) // 2
        bad = good[:middle] + bytes([good[middle] ^ 0xFF, good[middle + 1] ^ 0x55]) + good[middle + 2 :]
    assert is_lone_frame(memoryview(bad), NBYTES)
    assert decode_small_frames([good, bad, good], NBYTES) is None
    with pytest.raises(ValueError, match="zstd"):
        decode_zstd(None, bad, np.empty(NBYTES, np.uint8), None)


def test_only_small_frames_and_runs_of_several_go_together() -> None:
    small = frame(content(8))
    assert decode_small_frames([small], NBYTES) is None
    # Frames of nothing never reach the batch call, which corrupts its heap given size 0.
    assert decode_small_frames([frame(b""), frame(b"")], 0) is None
    large = content(9, MANY_FRAMES_NBYTES + 2)
    assert decode_small_frames([frame(large), frame(large)], len(large)) is None


def test_the_pipeline_hands_back_chunks_of_its_type_and_shape() -> None:
    from gpuzarr.codecs.base import ChunkSpec

    spec = ChunkSpec(shape=(8, 16), dtype=np.dtype("<u2"), fill_value=0)
    pipeline = CodecPipeline.from_codecs(
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}], spec
    )
    chunks = [np.arange(128, dtype="<u2").reshape(8, 16) * k for k in range(3)]
    decoded = pipeline.decode_many([pipeline.encode(c) for c in chunks])
    assert decoded is not None
    for got, want in zip(decoded, chunks, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    # Chains of more than a compressor after ``bytes`` are decoded one by one.
    shuffled = CodecPipeline.from_codecs(
        [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd"},
        ],
        spec,
    )
    assert shuffled.decode_many([shuffled.encode(c) for c in chunks]) is None


def test_without_zstandard_nothing_is_decoded_together(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuzarr.codecs import zstd as zstd_module

    monkeypatch.setattr(zstd_module, "_stream_decompressor", lambda: None)
    frames: list[Any] = [frame(content(1)), frame(content(2))]
    assert decode_small_frames(frames, NBYTES) is None


@pytest.mark.parametrize("configuration", [{}, {"level": 7, "checksum": True}, {"level": -3}])
def test_a_run_encodes_to_the_frames_each_chunk_encodes_to(configuration: dict[str, Any]) -> None:
    from gpuzarr.codecs.base import ChunkSpec

    spec = ChunkSpec(shape=(16, 16), dtype=np.dtype("<u2"), fill_value=0)
    pipeline = CodecPipeline.from_codecs(
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": configuration}],
        spec,
    )
    rng = np.random.default_rng(3)
    chunks = [(np.cumsum(rng.integers(-3, 4, 256)) % 4096).astype("<u2").reshape(16, 16) for _ in range(9)]
    chunks.append(np.zeros((16, 16), "<u2"))
    encoded = pipeline.encode_many(chunks)
    assert encoded is not None
    assert [bytes(memoryview(e)) for e in encoded] == [bytes(memoryview(pipeline.encode(c))) for c in chunks]


CFFI_SCRIPT = """
import sys
import numpy as np
import zstandard
import gpuzarr

assert zstandard.backend == "cffi", zstandard.backend
root = sys.argv[1]
data = (np.arange(256 * 256, dtype="u2").reshape(256, 256) * 7) % 1000
zstd = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}]
for name, chunks, shards in (("c", (128, 128), None), ("s8", (8, 8), (256, 256)), ("s128", (128, 128), (256, 256))):
    a = gpuzarr.create(f"{root}/{name}", shape=data.shape, dtype="u2", chunks=chunks, shards=shards, codecs=zstd)
    a[...] = data
    b = gpuzarr.open_array(f"{root}/{name}", mode="r")
    assert np.array_equal(b[...], data), name
    assert np.array_equal(b[0:5, 0:5], data[0:5, 0:5]), name
print("ok")
"""


def test_zstandards_cffi_backend_codes_a_chunk_at_a_time(tmp_path: Any) -> None:
    """zstandard's cffi backend (PyPy's) has no calls for many frames (NotImplementedError):
    chunks are then decoded and encoded one by one, and its decompression objects' views of
    what follows a frame are not taken for NumPy arrays (a bare ValueError on valid data)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHON_ZSTANDARD_IMPORT_POLICY": "cffi"}
    probe = subprocess.run([sys.executable, "-c", "import zstandard"], env=env, capture_output=True)
    if probe.returncode != 0:
        pytest.skip("zstandard's cffi backend is not installed")
    proc = subprocess.run(
        [sys.executable, "-c", CFFI_SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
