"""Arrays created from codec objects (numcodecs and zarr-python ones) and zarr-python 3's
keywords (``filters``, ``serializer``, ``compressors``, ``compressor``), both ways.

Each case creates one array with gpuzarr and the same array with zarr-python's
``create_array`` (zarr-python takes its own codec objects for v3, numcodecs ones for v2; gpuzarr
takes both). Both must store the same codecs and read each other's data; TensorStore reads
gpuzarr's array too where it has the codecs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numcodecs
import numpy as np
import pytest

import gpuzarr

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

zarr = pytest.importorskip("zarr")
zc = pytest.importorskip("zarr.codecs")

pytestmark = [
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning"),
    # zarr-python warns that bytes->bytes codecs around sharding_indexed disable partial reads.
    pytest.mark.filterwarnings("ignore:Combining a `sharding_indexed` codec disables partial reads:UserWarning"),
]

SHAPE = (8, 6)
CHUNKS = (4, 3)


@dataclass(frozen=True)
class Case:
    id: str
    dtype: str
    #: gpuzarr.create's codec keywords (built when the test runs: objects are not shared).
    gpuzarr: Callable[[], dict[str, Any]]
    #: zarr.create_array's codec keywords for the same array.
    zarr_python: Callable[[], dict[str, Any]]
    zarr_format: int = 3
    tensorstore: bool = True

    def data(self) -> np.ndarray[Any, Any]:
        return (np.arange(48).reshape(SHAPE) % 7 - 2).astype(self.dtype)


CASES = [
    Case("v3-numcodecs-zstd-as-compressor", "int32",
         lambda: {"compressor": numcodecs.Zstd(level=3)},
         lambda: {"compressors": zc.ZstdCodec(level=3)}),
    Case("v3-blosc-object-defaults", "int16",
         lambda: {"compressors": zc.BloscCodec()},
         lambda: {"compressors": zc.BloscCodec()}),
    Case("v3-numcodecs-blosc", "float32",
         lambda: {"compressors": [numcodecs.Blosc(cname="lz4", clevel=4, shuffle=numcodecs.Blosc.SHUFFLE)]},
         lambda: {"compressors": [zc.BloscCodec(cname="lz4", clevel=4, shuffle="shuffle", typesize=4)]}),
    Case("v3-gzip-crc32c-list", "uint16",
         lambda: {"compressors": [zc.GzipCodec(level=2), zc.Crc32cCodec()]},
         lambda: {"compressors": [zc.GzipCodec(level=2), zc.Crc32cCodec()]}),
    Case("v3-no-compression", "int64",
         lambda: {"compressors": None, "serializer": zc.BytesCodec(endian="big")},
         lambda: {"compressors": None, "serializer": zc.BytesCodec(endian="big")}),
    Case("v3-transpose-filter", "int32",
         lambda: {"filters": zc.TransposeCodec(order=(1, 0))},
         lambda: {"filters": [zc.TransposeCodec(order=(1, 0))]}),
    Case("v3-sharding-serializer", "int32",
         lambda: {"serializer": zc.ShardingCodec(chunk_shape=(2, 3), codecs=[zc.BytesCodec(), zc.ZstdCodec()]),
                  "compressors": None},
         lambda: {"serializer": zc.ShardingCodec(chunk_shape=(2, 3), codecs=[zc.BytesCodec(), zc.ZstdCodec()]),
                  "compressors": None}),
    Case("v3-numcodecs-filter-objects", "int32",
         lambda: {"filters": [numcodecs.Delta(dtype="<i4")], "compressors": numcodecs.Zlib(level=1)},
         lambda: {"filters": [zc.numcodecs.Delta(dtype="<i4", astype="<i4")],
                  "compressors": [zc.numcodecs.Zlib(level=1)]},
         tensorstore=False),
    Case("v3-zarr-python-numcodecs-objects", "float64",
         lambda: {"filters": [zc.numcodecs.Quantize(digits=2)], "compressors": zc.numcodecs.LZ4()},
         lambda: {"filters": [zc.numcodecs.Quantize(digits=2)], "compressors": [zc.numcodecs.LZ4()]},
         tensorstore=False),
    Case("v2-numcodecs-objects", "<i4",
         lambda: {"compressor": numcodecs.Zstd(level=3), "filters": [numcodecs.Delta(dtype="<i4")]},
         lambda: {"compressors": numcodecs.Zstd(level=3), "filters": [numcodecs.Delta(dtype="<i4")]},
         zarr_format=2, tensorstore=False),
    Case("v2-compressors-list-of-one", "<f8",
         lambda: {"compressors": [numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE)]},
         lambda: {"compressors": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE)},
         zarr_format=2),
    Case("v2-zarr-python-numcodecs-objects", "<u2",
         lambda: {"compressor": zc.numcodecs.Zlib(level=2),
                  "filters": [zc.numcodecs.Delta(dtype="<u2", astype="<u2")]},
         lambda: {"compressors": numcodecs.Zlib(level=2), "filters": [numcodecs.Delta(dtype="<u2")]},
         zarr_format=2, tensorstore=False),
]  # fmt: skip


def _codecs_json(path: Path, zarr_format: int) -> Any:
    if zarr_format == 2:
        doc = json.loads((path / ".zarray").read_text())
        return doc["compressor"], doc["filters"]

    def plain(codec: dict[str, Any]) -> dict[str, Any]:
        config = codec.get("configuration") or {}
        for key in ("codecs", "index_codecs"):
            if codec["name"] == "sharding_indexed":
                config = {**config, key: [plain(c) for c in config[key]]}
        return {"name": codec["name"], "configuration": config}

    return [plain(c) for c in json.loads((path / "zarr.json").read_text())["codecs"]]


def _write_gpuzarr(case: Case, path: Path) -> None:
    a = gpuzarr.create(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype=case.dtype, zarr_format=case.zarr_format, device="cpu",
        **case.gpuzarr(),
    )  # fmt: skip
    a[...] = case.data()


def _write_zarr_python(case: Case, path: Path) -> None:
    z = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype=case.dtype, zarr_format=case.zarr_format,
        **case.zarr_python(),
    )  # fmt: skip
    z[...] = case.data()


def _expected(case: Case) -> np.ndarray[Any, Any]:
    data = case.data()
    if case.id == "v3-zarr-python-numcodecs-objects":  # quantize keeps 2 decimal digits: these are exact
        assert np.all(data == np.round(data, 2))
    return data


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_zarr_python_reads_gpuzarr(case: Case, tmp_path: Path) -> None:
    path, reference = tmp_path / "gz.zarr", tmp_path / "zp.zarr"
    _write_gpuzarr(case, path)
    _write_zarr_python(case, reference)
    assert _codecs_json(path, case.zarr_format) == _codecs_json(reference, case.zarr_format)
    np.testing.assert_array_equal(np.asarray(zarr.open_array(str(path), mode="r")[...]), _expected(case))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gpuzarr_reads_zarr_python(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "zp.zarr"
    _write_zarr_python(case, path)
    a = gpuzarr.open(str(path), mode="r", device="cpu")
    assert isinstance(a, gpuzarr.Array)
    np.testing.assert_array_equal(a[...], _expected(case))
    np.testing.assert_array_equal(a[1:7, 2:5], _expected(case)[1:7, 2:5])


@pytest.mark.parametrize("case", [c for c in CASES if c.tensorstore], ids=lambda c: c.id)
def test_tensorstore_reads_gpuzarr(case: Case, tmp_path: Path) -> None:
    ts = pytest.importorskip("tensorstore")
    path = tmp_path / "gz.zarr"
    _write_gpuzarr(case, path)
    driver = "zarr3" if case.zarr_format == 3 else "zarr"
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path) + "/"}}, open=True).result()
    np.testing.assert_array_equal(np.asarray(t.read().result()), _expected(case))
