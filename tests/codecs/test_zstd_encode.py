"""The zstd encoder: a per-thread reused ``zstandard`` compressor, with numcodecs where
zstandard is missing. Its frames declare the chunk's size, carry a checksum exactly when asked,
follow the level, and decode to the chunk with numcodecs and zstandard alike."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zstandard
from numcodecs import Zstd

from gpuzarr.codecs import zstd as zstd_module
from gpuzarr.codecs.zstd import ZstdCodec, frame_content_size

CHUNK = (np.arange(64 * 64 * 16, dtype=np.uint16) * 31 % 977).reshape(16, 64, 64)


def _frame_header(frame: bytes) -> zstandard.FrameParameters:
    return zstandard.get_frame_parameters(frame)


@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("level", [-5, 0, 1, 3, 19])
def test_a_frame_declares_its_size_and_a_checksum_when_asked(level: int, checksum: bool) -> None:
    encoded = bytes(ZstdCodec(level=level, checksum=checksum).encode(CHUNK))
    header = _frame_header(encoded)
    assert header.content_size == CHUNK.nbytes
    assert frame_content_size(encoded) == CHUNK.nbytes
    assert header.has_checksum is checksum
    assert Zstd().decode(encoded) == CHUNK.tobytes()
    assert zstandard.ZstdDecompressor().decompress(encoded) == CHUNK.tobytes()


def test_the_level_is_the_one_configured() -> None:
    # A higher level finds more: the frames differ, and level 19 is no larger than level 1.
    fast = bytes(ZstdCodec(level=1).encode(CHUNK))
    small = bytes(ZstdCodec(level=19).encode(CHUNK))
    assert fast != small and len(small) <= len(fast)
    assert small == bytes(zstandard.ZstdCompressor(level=19).compress(CHUNK.tobytes()))


def test_without_zstandard_numcodecs_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zstd_module, "_compressor", lambda level, checksum: None)
    encoded = bytes(ZstdCodec(level=3, checksum=True).encode(CHUNK))
    assert encoded == bytes(Zstd(level=3, checksum=True).encode(CHUNK))
    assert Zstd().decode(encoded) == CHUNK.tobytes()


def test_each_thread_and_setting_has_its_own_compressor() -> None:
    mine = zstd_module._compressor(3, False)
    assert mine is zstd_module._compressor(3, False)
    assert mine is not zstd_module._compressor(3, True)
    assert mine is not zstd_module._compressor(5, False)
    theirs: list[object] = []
    t = threading.Thread(target=lambda: theirs.append(zstd_module._compressor(3, False)))
    t.start()
    t.join()
    assert theirs[0] is not mine

