"""Stored UTF-32 text that is no Unicode (a unit above U+10FFFF) is a CorruptChunkError naming
the chunk: NumPy would hand back a string that crashes whatever touches it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import CorruptChunkError

if TYPE_CHECKING:
    from pathlib import Path

BAD_UNIT = 0x110000


def _v3(path: Path, codecs: list[dict[str, Any]]) -> None:
    path.mkdir()
    (path / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4],
        "data_type": {"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}},
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "", "codecs": codecs,
    }))  # fmt: skip


@pytest.mark.parametrize("compressed", [False, True], ids=["bytes", "zstd"])
def test_a_unit_above_the_last_code_point_is_refused(tmp_path: Path, compressed: bool) -> None:
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if compressed:
        codecs.append({"name": "zstd", "configuration": {"level": 1}})
    _v3(tmp_path / "a.zarr", codecs)
    a = gpuzarr.open_array(str(tmp_path / "a.zarr"), mode="r+")
    a[...] = np.array(["ab", "c", "de", "f"])
    good = np.array(["ab", "c"], dtype="<U2").view(np.uint32).copy()
    good[1] = BAD_UNIT  # the second unit of "ab"
    stored = good.tobytes()
    if compressed:
        import zstandard

        stored = zstandard.ZstdCompressor().compress(stored)
    (tmp_path / "a.zarr" / "c" / "0").write_bytes(stored)
    for read in (lambda: a[...], lambda: a[0], lambda: a[0:3], lambda: a.read_batch([slice(0, 2)]),
                 lambda: a.vindex[[0, 3]]):  # fmt: skip
        with pytest.raises(CorruptChunkError, match=r"c/0: text holds a UTF-32 unit above U\+10FFFF"):
            read()
    np.testing.assert_array_equal(a[2:], ["de", "f"])  # the other chunk is fine
    assert a[1] == "c"  # and so is the element of the bad chunk that holds no bad unit


@pytest.mark.parametrize("dtype", ["<U2", ">U2"])
def test_v2_text_of_either_byte_order(tmp_path: Path, dtype: str) -> None:
    a = gpuzarr.create_array(str(tmp_path / "a.zarr"), shape=(2,), chunks=(2,), dtype=dtype, zarr_format=2,
                             compressors=None, fill_value="")  # fmt: skip
    a[...] = ["xy", "z"]
    np.testing.assert_array_equal(a[...], ["xy", "z"])
    units = np.array([0x78, BAD_UNIT, 0x7A, 0], dtype=np.dtype(np.uint32).newbyteorder(dtype[0]))
    (tmp_path / "a.zarr" / "0").write_bytes(units.tobytes())
    with pytest.raises(CorruptChunkError, match="U\\+10FFFF"):
        a[...]


def test_a_text_field_of_a_structured_type(tmp_path: Path) -> None:
    dtype = np.dtype([("n", "<i4"), ("s", "<U1")])
    a = gpuzarr.create_array(str(tmp_path / "a.zarr"), shape=(2,), chunks=(2,), dtype=dtype, zarr_format=2,
                             compressors=None)  # fmt: skip
    a[...] = np.array([(1, "a"), (BAD_UNIT, "b")], dtype=dtype)  # the bad unit's bytes in the int field
    assert a[...]["s"].tolist() == ["a", "b"]
    record = np.array([(1, "a")], dtype=dtype).view(np.uint8).copy().view(np.uint32)
    record[1] = BAD_UNIT
    (tmp_path / "a.zarr" / "0").write_bytes(record.tobytes() * 2)
    with pytest.raises(CorruptChunkError, match="U\\+10FFFF"):
        a[...]
