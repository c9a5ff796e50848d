"""Zstandard chunks of several frames, or of frames that declare no decoded size (TensorStore
writes none), decoded into a chunk-sized buffer: exactly the chunk's bytes or ValueError, with
the installed numcodecs and with the behaviour of numcodecs before 0.16.2, which returned the
buffer with only its first frame's bytes written."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zstandard

from gpuzarr.codecs import zstd as zstd_module
from gpuzarr.codecs.zstd import ZstdCodec, decode_zstd, numcodecs_checks_zstd_sizes

DATA = (np.arange(3000) * 7 % 251).astype(np.uint8).tobytes()


def frame(data: bytes, sized: bool = True) -> bytes:
    return bytes(zstandard.ZstdCompressor(level=3, write_content_size=sized).compress(data))


class FirstFrameOnly:
    """What numcodecs 0.16.1 did with a sized frame followed by one without a size: the first
    frame's bytes written into ``out``, ``out`` returned, no error."""

    def decode(self, data: Any, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        first = zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data))
        out[: len(first)] = np.frombuffer(first, np.uint8)
        return out


WHOLE = {
    "one frame without a size": frame(DATA, sized=False),
    "two sized frames": frame(DATA[:1000]) + frame(DATA[1000:]),
    "a frame without a size, then an empty one": frame(DATA, sized=False) + frame(b"", sized=False),
}
WRONG = {
    "a sized frame, then an empty one without a size": frame(DATA[:1000]) + frame(b"", sized=False),
    "frames of more bytes than the chunk": frame(DATA, sized=False) + frame(b"x" * 10, sized=False),
    "a cut frame without a size": frame(DATA, sized=False)[:-9],
}


@pytest.fixture(params=["installed numcodecs", "numcodecs before 0.16.2"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    if request.param == "installed numcodecs":
        if not numcodecs_checks_zstd_sizes():
            pytest.skip("the installed numcodecs is older than 0.16.2")
        return ZstdCodec(level=3)._impl
    monkeypatch.setattr(zstd_module, "numcodecs_checks_zstd_sizes", lambda: False)
    return FirstFrameOnly()


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_frames_that_make_the_chunk_decode_into_it(impl: Any, name: str) -> None:
    out = np.full(len(DATA), 0xA5, np.uint8)
    decode_zstd(impl, WHOLE[name], out, None)
    assert out.tobytes() == DATA


@pytest.mark.parametrize("name", sorted(WRONG))
def test_frames_that_do_not_make_the_chunk_are_refused(impl: Any, name: str) -> None:
    out = np.full(len(DATA), 0xA5, np.uint8)
    with pytest.raises(ValueError, match="zstd"):
        decode_zstd(impl, WRONG[name], out, None)


def test_the_numcodecs_version_is_read_from_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    import numcodecs

    for version, checks in [("0.16.1", False), ("0.16.2", True), ("0.17.0.dev3+g1", True), ("0.13.1", False)]:
        monkeypatch.setattr(numcodecs, "__version__", version)
        zstd_module.numcodecs_checks_zstd_sizes.cache_clear()
        assert zstd_module.numcodecs_checks_zstd_sizes() is checks
    zstd_module.numcodecs_checks_zstd_sizes.cache_clear()
