"""gzip and zlib inflate (gpuzarr/codecs/inflate.py) on both paths: ISA-L and the standard
library's zlib, which is the fallback where python-isal is not installed.

Every test that takes ``library`` runs once per path; the ISA-L run is skipped where python-isal
is missing. Decompression bombs on both paths are in test_bombs.py.
"""

from __future__ import annotations

import gzip as pygzip
import struct
import zlib
from typing import TYPE_CHECKING, Any

import numcodecs
import numcodecs.zarr3
import numpy as np
import pytest
import zarr

import gpuzarr
from gpuzarr.codecs import inflate
from gpuzarr.codecs.inflate import decode_gzip, decode_zlib
from gpuzarr.errors import CorruptChunkError

from .helpers import RAMP_U2

if TYPE_CHECKING:
    from pathlib import Path

RAW = RAMP_U2.tobytes()


@pytest.fixture(params=["isal", "zlib"])
def library(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Inflate with ISA-L or, as where python-isal is not installed, the standard library."""
    if request.param == "isal":
        pytest.importorskip("isal")
    monkeypatch.setattr(inflate, "use_isal", request.param == "isal")
    assert inflate.library() == request.param
    return str(request.param)


def gzip_member(data: bytes, level: int = 5) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def flip(data: bytes, index: int) -> bytes:
    b = bytearray(data)
    b[index] ^= 0x01
    return bytes(b)


# -- which library ---------------------------------------------------------------------------------


def test_isal_is_the_default_where_installed() -> None:
    pytest.importorskip("isal")
    assert inflate.use_isal is True
    assert inflate.library() == "isal"


def test_the_standard_library_is_used_when_isal_cannot_be_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without python-isal: its import fails, zlib inflates."""
    import builtins

    real_import = builtins.__import__

    def no_isal(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "isal" or name.startswith("isal."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    inflate._isal_zlib.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_isal)
    try:
        assert inflate._isal_zlib() is None
        assert inflate.library() == "zlib"
        assert decode_gzip(gzip_member(RAW), len(RAW)) == RAW
        assert decode_zlib(zlib.compress(RAW), len(RAW)) == RAW
    finally:
        inflate._isal_zlib.cache_clear()


# -- streams the writers produce -------------------------------------------------------------------


@pytest.mark.parametrize("level", [0, 1, 5, 9])
def test_decodes_what_zlib_python_gzip_and_numcodecs_write(library: str, level: int) -> None:
    n = len(RAW)
    assert decode_gzip(gzip_member(RAW, level), n) == RAW
    assert decode_gzip(pygzip.compress(RAW, level, mtime=0), n) == RAW
    assert bytes(decode_gzip(numcodecs.GZip(level).encode(RAW), n)) == RAW
    assert decode_zlib(zlib.compress(RAW, level), n) == RAW
    assert decode_zlib(numcodecs.Zlib(level).encode(RAW), n) == RAW


def test_every_gzip_header_field_is_read(library: str) -> None:
    """FEXTRA, FNAME, FCOMMENT and FHCRC (with its header CRC checked) before the data."""
    c = zlib.compressobj(5, zlib.DEFLATED, -15)
    body = c.compress(RAW) + c.flush()
    flags = 0x04 | 0x08 | 0x10 | 0x02
    header = bytes([0x1F, 0x8B, 8, flags]) + bytes(4) + bytes([0, 0xFF])
    header += struct.pack("<H", 6) + b"AB\x02\x00xy" + b"chunk.bin\x00" + b"a comment\x00"
    header += struct.pack("<H", zlib.crc32(header) & 0xFFFF)
    stream = header + body + struct.pack("<II", zlib.crc32(RAW), len(RAW))
    assert decode_gzip(stream, len(RAW)) == RAW
    with pytest.raises(ValueError, match="gzip: corrupt stream"):
        decode_gzip(flip(stream, len(header) - 1), len(RAW))


def test_zlib_streams_with_a_smaller_window_decode(library: str) -> None:
    for wbits in (9, 12):
        c = zlib.compressobj(5, zlib.DEFLATED, wbits)
        assert decode_zlib(c.compress(RAW) + c.flush(), len(RAW)) == RAW


def test_concatenated_gzip_members_decode_in_full_as_numcodecs_reads_them(library: str) -> None:
    parts = [RAW[:1000], RAW[1000:50000], b"", RAW[50000:]]
    stream = b"".join(gzip_member(p) for p in parts)
    assert decode_gzip(stream, len(RAW)) == RAW
    assert bytes(numcodecs.GZip().decode(stream)) == RAW


def test_bytes_after_a_zlib_stream_are_ignored_as_numcodecs_ignores_them(library: str) -> None:
    stream = zlib.compress(RAW) + b"trailing"
    assert decode_zlib(stream, len(RAW)) == RAW
    assert bytes(numcodecs.Zlib().decode(stream)) == RAW


def test_buffers_other_than_bytes_are_accepted(library: str) -> None:
    stream = gzip_member(RAW)
    assert decode_gzip(np.frombuffer(stream, np.uint8), len(RAW)) == RAW
    assert decode_gzip(memoryview(stream), len(RAW)) == RAW
    assert decode_zlib(bytearray(zlib.compress(RAW)), len(RAW)) == RAW


# -- corrupt streams -------------------------------------------------------------------------------


GZIP_CORRUPTIONS = {
    "CRC-32 trailer": (lambda s: flip(s, -6), "gzip: corrupt stream"),
    "size trailer": (lambda s: flip(s, -2), "gzip: corrupt stream"),
    "deflate data": (lambda s: s[:40] + bytes(200) + s[240:], "gzip: corrupt stream"),
    "magic bytes": (lambda s: flip(s, 0), "gzip: corrupt stream"),
    "truncated": (lambda s: s[:-3], r"gzip: stream ends before its end-of-stream marker \(truncated\)"),
    # zlib refuses the bytes' header; ISA-L reads them as the start of a member cut short
    "trailing garbage": (lambda s: s + b"garbage!", r"gzip: (corrupt stream|the 8 bytes after member 1 are no)"),
    # RFC 1952: reserved FLG bits must be zero. zlib refuses them and ISA-L does not look.
    "reserved flag bit": (lambda s: s[:3] + bytes([s[3] | 0x40]) + s[4:], r"gzip: reserved flag bits set \(0x40\)"),
}


@pytest.mark.parametrize("case", sorted(GZIP_CORRUPTIONS))
def test_corrupt_gzip_is_refused(library: str, case: str) -> None:
    corrupt, message = GZIP_CORRUPTIONS[case]
    with pytest.raises(ValueError, match=message):
        decode_gzip(corrupt(gzip_member(RAW)), len(RAW))


def test_a_second_member_with_a_reserved_flag_bit_is_refused(library: str) -> None:
    member = gzip_member(RAW[:100])
    second = member[:3] + bytes([member[3] | 0x80]) + member[4:]
    with pytest.raises(ValueError, match=r"gzip: reserved flag bits set \(0x80\)"):
        decode_gzip(member + second, 200)


ZLIB_CORRUPTIONS = {
    "Adler-32 trailer": (lambda s: flip(s, -1), "zlib: corrupt stream"),
    "header check bits": (lambda s: flip(s, 1), "zlib: corrupt stream"),
    "deflate data": (lambda s: s[:40] + bytes(200) + s[240:], "zlib: corrupt stream"),
    "truncated": (lambda s: s[:-2], r"zlib: stream ends before its end-of-stream marker \(truncated\)"),
}


@pytest.mark.parametrize("case", sorted(ZLIB_CORRUPTIONS))
def test_corrupt_zlib_is_refused(library: str, case: str) -> None:
    corrupt, message = ZLIB_CORRUPTIONS[case]
    with pytest.raises(ValueError, match=message):
        decode_zlib(corrupt(zlib.compress(RAW, 5)), len(RAW))


# -- the bound ---------------------------------------------------------------------------------


def test_a_stream_that_fills_the_bound_exactly_decodes(library: str) -> None:
    assert decode_gzip(gzip_member(RAW), len(RAW)) == RAW
    assert decode_zlib(zlib.compress(RAW), len(RAW)) == RAW


def test_a_stream_one_byte_over_the_bound_is_refused(library: str) -> None:
    n = len(RAW) - 1
    with pytest.raises(ValueError, match=f"gzip: stream decodes to more than the {n} bytes expected"):
        decode_gzip(gzip_member(RAW), n)
    with pytest.raises(ValueError, match=f"zlib: stream decodes to more than the {n} bytes expected"):
        decode_zlib(zlib.compress(RAW), n)


def test_members_that_together_exceed_the_bound_are_refused(library: str) -> None:
    """Each member fits; the bound holds for their sum."""
    stream = gzip_member(RAW) + gzip_member(RAW)
    with pytest.raises(ValueError, match=f"more than the {len(RAW) + 10} bytes expected"):
        decode_gzip(stream, len(RAW) + 10)


# -- arrays: every placement of gzip and zlib, written by zarr-python -------------------------------


DATA = (np.arange(40 * 30 * 20).reshape(40, 30, 20) % 1013).astype("<u2")


def _zarr_python_arrays(root: Path) -> dict[str, str]:
    """name -> path of arrays zarr-python writes with gzip or zlib in each placement."""
    made = {
        "v3-gzip": {"zarr_format": 3, "compressors": [zarr.codecs.GzipCodec(level=5)]},
        "v3-numcodecs.zlib": {"zarr_format": 3, "compressors": [numcodecs.zarr3.Zlib(level=1)]},
        "v3-sharded-gzip": {"zarr_format": 3, "shards": (20, 30, 20), "compressors": [zarr.codecs.GzipCodec(level=6)]},
        "v2-gzip": {"zarr_format": 2, "compressors": numcodecs.GZip(level=5)},
        "v2-zlib": {"zarr_format": 2, "compressors": numcodecs.Zlib(level=1)},
    }
    paths = {}
    for name, kwargs in made.items():
        path = str(root / name)
        z = zarr.create_array(path, shape=DATA.shape, chunks=(10, 15, 20), dtype=DATA.dtype, fill_value=0, **kwargs)
        z[...] = DATA
        paths[name] = path
    return paths


@pytest.fixture(scope="module")
def zarr_python_arrays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import warnings

    with warnings.catch_warnings():
        # zarr-python warns that numcodecs.zarr3 codecs are not part of the Zarr v3 spec.
        warnings.simplefilter("ignore")
        return _zarr_python_arrays(tmp_path_factory.mktemp("gzip-zlib"))


@pytest.mark.parametrize("name", ["v3-gzip", "v3-numcodecs.zlib", "v3-sharded-gzip", "v2-gzip", "v2-zlib"])
def test_zarr_python_arrays_read_back(library: str, zarr_python_arrays: dict[str, str], name: str) -> None:
    a = gpuzarr.open_array(zarr_python_arrays[name], mode="r", device="cpu")
    np.testing.assert_array_equal(a[...], DATA)
    np.testing.assert_array_equal(a[3:37, 5:25, 2:19], DATA[3:37, 5:25, 2:19])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_gpuzarr_writes_what_zarr_python_reads(library: str, tmp_path: Path, zarr_format: int) -> None:
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    kwargs: dict[str, Any] = (
        {"compressor": {"id": "zlib", "level": 3}} if zarr_format == 2 else {"codecs": [little, {"name": "gzip"}]}
    )
    path = str(tmp_path / "a")
    a = gpuzarr.create(path, shape=DATA.shape, dtype=DATA.dtype, chunks=(10, 15, 20), zarr_format=zarr_format,
                       fill_value=0, device="cpu", **kwargs)
    a[...] = DATA
    np.testing.assert_array_equal(np.asarray(zarr.open_array(path, mode="r")[...]), DATA)
    np.testing.assert_array_equal(gpuzarr.open_array(path, mode="r", device="cpu")[...], DATA)


@pytest.mark.parametrize(
    ("name", "key", "corrupt", "message"),
    [
        ("v3-gzip", "c/1/0/0", lambda s: flip(s, -6), "gzip: corrupt stream"),
        ("v2-zlib", "2.1.0", lambda s: flip(s, -1), "zlib: corrupt stream"),
        ("v2-gzip", "0.0.0", lambda s: s[: len(s) // 2], "gzip: stream ends before its end-of-stream marker"),
    ],
)
def test_a_corrupt_chunk_names_its_key(
    library: str, zarr_python_arrays: dict[str, str], tmp_path: Path, name: str, key: str, corrupt: Any, message: str
) -> None:
    import shutil
    from pathlib import Path

    path = tmp_path / name
    shutil.copytree(zarr_python_arrays[name], path)
    chunk = Path(path, key)
    chunk.write_bytes(corrupt(chunk.read_bytes()))
    a = gpuzarr.open_array(str(path), mode="r", device="cpu")
    with pytest.raises(CorruptChunkError, match=message) as caught:
        a[...]
    assert caught.value.key == key


# -- large outputs, a piece at a time ------------------------------------------------------------


def _decode_both(decode: Any, data: bytes, size: int) -> tuple[Any, Any]:
    """What ``decode`` gives as bytes (bounded by ``size``) and into an output of ``size``, or
    the error each raised."""
    results = []
    for out in (None, np.full(size, 0xAB, dtype=np.uint8)):
        try:
            got = decode(data, size, out)
            results.append(bytes(memoryview(got).cast("B")))
        except ValueError as exc:
            results.append(type(exc))
    return results[0], results[1]


@pytest.mark.parametrize("case", ["one", "members", "truncated", "trailing", "bomb", "short", "zlib", "zlib-trailing"])
def test_a_large_output_is_inflated_into_it_as_into_bytes(
    library: str, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Outputs from ``INTO_MIN_NBYTES`` on are inflated a piece at a time into the chunk's
    buffer (bytes copied there after took twice the chunk's size): the same bytes, and the
    same errors, as one call into bytes. Small pieces here, to cross many of them."""
    from gpuzarr.codecs import bounded

    monkeypatch.setattr(inflate, "INTO_MIN_NBYTES", 0)
    raw = RAW * 3
    half = len(raw) // 2
    decode = decode_zlib if case.startswith("zlib") else decode_gzip
    data, size = {
        "one": (gzip_member(raw), len(raw)),
        "members": (gzip_member(raw[:half]) + gzip_member(raw[half:]), len(raw)),
        "truncated": (gzip_member(raw)[:-20], len(raw)),
        "trailing": (gzip_member(raw) + b"junk", len(raw)),
        "bomb": (gzip_member(bytes(len(raw) * 4)), len(raw)),
        "short": (gzip_member(raw[:half]), len(raw)),
        "zlib": (zlib.compress(raw, 6), len(raw)),
        "zlib-trailing": (zlib.compress(raw, 6) + b"more", len(raw)),
    }[case]
    for piece, given in ((1000, 1 << 20), (4093, 333), (1 << 22, 7)):  # output and input pieces
        monkeypatch.setattr(bounded, "INFLATE_PIECE_NBYTES", piece)
        monkeypatch.setattr(bounded, "INFLATE_INPUT_NBYTES", given)
        as_bytes, into = _decode_both(decode, data, size)
        assert into == as_bytes, (piece, given)
        if case in ("one", "members", "zlib", "zlib-trailing"):
            assert into == raw
        if case == "short":
            assert into == raw[:half]  # the pipeline refuses its size: see the next test


def test_a_large_gzip_chunk_reads_whole_and_in_part(tmp_path: Path) -> None:
    """A chunk above INTO_MIN_NBYTES through the array API: whole and in part, and one of the
    wrong size named as corrupt."""
    values = (np.arange(9 * 1024 * 1024, dtype="<u2") % 65521).reshape(3072, 3072)
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]
    path = str(tmp_path / "g.zarr")
    array = gpuzarr.create(path, shape=values.shape, dtype="<u2", chunks=values.shape, codecs=codecs)
    array[...] = values
    assert array.layout.chunk_pipeline.spec.nbytes >= inflate.INTO_MIN_NBYTES
    np.testing.assert_array_equal(array[...], values)
    np.testing.assert_array_equal(array[100:200, 3000:], values[100:200, 3000:])
    key = tmp_path / "g.zarr" / "c" / "0" / "0"
    key.write_bytes(gzip_member(values[:1536].tobytes()))  # half the chunk's bytes
    with pytest.raises(CorruptChunkError, match="expected"):
        gpuzarr.open(str(tmp_path / "g.zarr"), mode="r")[...]
