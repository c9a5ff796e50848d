"""Zarr v3 arrays with zarr-python 3's ``numcodecs.*`` codecs, both ways.

Every numcodecs codec zarr-python 3.1 registers (``zarr.codecs.numcodecs``): the filters, the
compressors and checksums, and ``pcodec`` as the serializer (``zfpy`` needs a NumPy 1 build of
zfpy, so it cannot run here). zarr-python writes with its codec objects and gpuzarr reads; gpuzarr
writes with the same codecs as JSON and zarr-python reads. Both store the same ``zarr.json`` chain
and the same chunk bytes, with gpuzarr deflating zlib and gzip streams with the standard library
as numcodecs does (``gpuzarr.codecs.deflate.use_zlib_ng = False``; zlib-ng's streams, other
bytes, are read back by zarr-python in tests/codecs/test_deflate.py). TensorStore has no
``numcodecs.*`` codecs, so it is not part of this.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.codecs import deflate

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")

# zarr-python warns that numcodecs codecs are not in the Zarr v3 specification.
pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning")

SHAPE = (9, 7)
CHUNKS = (4, 3)
#: Written; the other rows stay missing (fill value) in both writers.
REGION = (slice(0, 6), slice(None))


@pytest.fixture(autouse=True)
def _deflate_as_numcodecs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deflate, "use_zlib_ng", False)


def nc(codec_id: str, **config: Any) -> dict[str, Any]:
    return {"name": f"numcodecs.{codec_id}", "configuration": config}


@dataclass(frozen=True)
class Case:
    id: str
    dtype: str
    filters: list[dict[str, Any]] = field(default_factory=list)
    #: None: zarr-python's default serializer (bytes).
    serializer: dict[str, Any] | None = None
    #: "auto": zarr-python's default (zstd level 0).
    compressors: Any = "auto"
    #: "exact": both read the data back; "close": within ``tolerance`` of it (lossy filters).
    fidelity: str = "exact"
    tolerance: float = 0.0
    #: "ints" (0..4), "decimal" (one decimal place around 1000), "bool"
    values: str = "ints"
    fill_value: Any = 0
    shards: tuple[int, ...] | None = None
    needs: str | None = None

    def data(self) -> np.ndarray[Any, Any]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        shape = np.empty(SHAPE)[REGION].shape
        if self.values == "bool":
            return rng.integers(0, 2, size=shape).astype(bool)
        if self.values == "decimal":
            return np.round(rng.uniform(1000, 1100, size=shape), 1).astype(self.dtype)
        return rng.integers(0, 5, size=shape).astype(self.dtype)

    def expected(self) -> np.ndarray[Any, Any]:
        model = np.full(SHAPE, self.fill_value, dtype=self.dtype)
        model[REGION] = self.data()
        return model


CASES = [
    Case("delta", "int32", [nc("delta", dtype="<i4")]),
    Case("delta-astype", "int64", [nc("delta", dtype="<i8", astype="<i2")], fill_value=-3),
    Case("fixedscaleoffset", "float64",
         [nc("fixedscaleoffset", offset=1000, scale=10, dtype="<f8", astype="<u2")],
         values="decimal", fidelity="close", tolerance=1e-12, fill_value=1000.0),
    Case("fixedscaleoffset-dtype-filled", "float64", [nc("fixedscaleoffset", offset=0, scale=10, astype="<i4")],
         compressors=[nc("zlib", level=1)], values="decimal", fidelity="close", tolerance=1e-12),
    Case("quantize", "float32", [nc("quantize", digits=3)], values="decimal", fidelity="close", tolerance=1e-3),
    Case("bitround", "float32", [nc("bitround", keepbits=12)], values="decimal", fidelity="close",
         tolerance=1e-3),
    Case("packbits", "bool", [nc("packbits")], values="bool", fill_value=True),
    Case("astype", "float64", [nc("astype", encode_dtype="<f4")]),
    Case("two-filters-and-two-compressors", "float64",
         [nc("fixedscaleoffset", offset=0, scale=10, dtype="<f8", astype="<i4"), nc("delta", dtype="<i4")],
         compressors=[nc("shuffle"), nc("zlib", level=1)], values="decimal", fidelity="close", tolerance=1e-12),
    *(Case(f"compressor-{c}", "int16", compressors=[nc(c)]) for c in (
        "zlib", "gzip", "bz2", "lzma", "lz4", "zstd", "blosc", "shuffle",
    )),
    *(Case(f"checksum-{c}", "uint32", compressors=[nc("zlib", level=1), nc(c)]) for c in (
        "crc32", "crc32c", "adler32", "fletcher32", "jenkins_lookup3",
    )),
    Case("sharded-delta-zlib", "int32", [nc("delta", dtype="<i4")], compressors=[nc("zlib", level=1)],
         shards=(8, 6)),
    Case("serializer-pcodec", "float64", serializer=nc("pcodec", level=3), compressors=None, values="decimal",
         needs="pcodec"),
    Case("serializer-pcodec-compressed", "int64", serializer=nc("pcodec"), compressors=[nc("crc32")],
         needs="pcodec"),
]  # fmt: skip


def _skip_unless_available(case: Case) -> None:
    if case.needs is not None:
        pytest.importorskip(case.needs)


def _zarr_python_codec(codec: dict[str, Any]) -> Any:
    from zarr.registry import get_codec_class

    return get_codec_class(codec["name"]).from_dict(codec)


def _write_zarr_python(case: Case, path: Path) -> None:
    kwargs: dict[str, Any] = {"filters": [_zarr_python_codec(f) for f in case.filters] or None}
    if case.serializer is not None:
        kwargs["serializer"] = _zarr_python_codec(case.serializer)
    if case.compressors != "auto":
        kwargs["compressors"] = [_zarr_python_codec(c) for c in case.compressors or []] or None
    z = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, shards=case.shards, dtype=case.dtype,
        fill_value=case.fill_value, **kwargs,
    )  # fmt: skip
    z[REGION] = case.data()


def _write_gpuzarr(case: Case, path: Path) -> gpuzarr.Array:
    a = gpuzarr.create(
        str(path), shape=SHAPE, chunks=CHUNKS, shards=case.shards, dtype=case.dtype, fill_value=case.fill_value,
        filters=case.filters or None, serializer=case.serializer or "auto", compressors=case.compressors,
        device="cpu",
    )  # fmt: skip
    a[REGION] = case.data()
    return a


def _check_values(case: Case, actual: np.ndarray[Any, Any]) -> None:
    expected = case.expected()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if case.fidelity == "exact":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=case.tolerance)


def _chain(path: Path) -> list[dict[str, Any]]:
    # An empty configuration may be written out or left out: both mean the same.
    def plain(codec: dict[str, Any]) -> dict[str, Any]:
        config = codec.get("configuration") or {}
        if codec["name"] == "sharding_indexed":
            config = {**config, "codecs": [plain(c) for c in config["codecs"]],
                      "index_codecs": [plain(c) for c in config["index_codecs"]]}  # fmt: skip
        return {"name": codec["name"], **({"configuration": config} if config else {})}

    return [plain(c) for c in json.loads((path / "zarr.json").read_text())["codecs"]]


def _without_shuffle_size(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": c["name"]} if c["name"] == "numcodecs.shuffle" and set(c.get("configuration", {})) <= {"elementsize"}
        else c
        for c in chain
    ]


def _without_gzip_mtime(data: bytes) -> bytes:
    """A gzip member's header carries the time it was written (bytes 4-7): two writers a second
    apart differ there and nowhere else."""
    return data[:4] + bytes(4) + data[8:] if data[:2] == b"\x1f\x8b" and len(data) >= 10 else data


def _chunks(path: Path) -> dict[str, bytes]:
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")
    return {str(p.relative_to(path)): _without_gzip_mtime(p.read_bytes()) for p in files}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gpuzarr_reads_zarr_python(case: Case, tmp_path: Path) -> None:
    _skip_unless_available(case)
    path = tmp_path / "zp.zarr"
    _write_zarr_python(case, path)
    a = gpuzarr.open(str(path), mode="r", device="cpu")
    assert isinstance(a, gpuzarr.Array)
    actual = np.asarray(a[...])
    _check_values(case, actual)
    # Bit for bit what zarr-python reads, lossy filters included.
    np.testing.assert_array_equal(actual, np.asarray(zarr.open_array(str(path), mode="r")[...]))
    sel = (slice(1, 8), slice(2, 6))
    np.testing.assert_array_equal(np.asarray(a[sel]), actual[sel])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_zarr_python_reads_gpuzarr(case: Case, tmp_path: Path) -> None:
    _skip_unless_available(case)
    path = tmp_path / "gz.zarr"
    a = _write_gpuzarr(case, path)
    z = zarr.open_array(str(path), mode="r")
    actual = np.asarray(z[...])
    _check_values(case, actual)
    np.testing.assert_array_equal(actual, np.asarray(a[...]))
    # The same chain as zarr-python writes for these codecs, and the same chunks.
    reference = tmp_path / "zp.zarr"
    _write_zarr_python(case, reference)
    if zarr.__version__.startswith("3.1."):
        assert _chain(path) == _chain(reference)
    else:
        # Later zarr-python releases give numcodecs.shuffle the array's item size even after
        # filters that change the type; gpuzarr keeps 3.1's, the size of what it shuffles.
        assert _without_shuffle_size(_chain(path)) == _without_shuffle_size(_chain(reference))
        if _chain(path) != _chain(reference):
            return  # other shuffles, other bytes (each reads back, as checked above)
    if case.shards is None:  # the two writers order a shard's inner chunks differently
        assert _chunks(path) == _chunks(reference)
    else:
        assert _chunks(path).keys() == _chunks(reference).keys()


def test_zarr_python_reads_a_filter_after_a_transpose(tmp_path: Path) -> None:
    # gpuzarr hands numcodecs the transposed chunk in C order, which is what zarr-python's
    # reader expects. (zarr-python's own writer hands delta the transposed view, which numcodecs
    # flattens in memory order, so zarr-python does not read its own such arrays back.)
    data = np.arange(63, dtype="int32").reshape(SHAPE) % 6
    path = tmp_path / "t.zarr"
    a = gpuzarr.create(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="int32",
        filters=[{"name": "transpose", "configuration": {"order": [1, 0]}}, nc("delta", dtype="<i4")],
    )  # fmt: skip
    a[...] = data
    np.testing.assert_array_equal(np.asarray(zarr.open_array(str(path), mode="r")[...]), data)
    np.testing.assert_array_equal(gpuzarr.open(str(path), mode="r")[...], data)


def test_big_endian_serializer_after_a_filter(tmp_path: Path) -> None:
    # Both write the same bytes; gpuzarr hands numcodecs native elements when reading, where
    # zarr-python hands delta big-endian ones it then views as native (so it cannot read these).
    data = np.arange(63, dtype="int32").reshape(SHAPE) - 30
    zp, gz = tmp_path / "zp.zarr", tmp_path / "gz.zarr"
    big = {"name": "bytes", "configuration": {"endian": "big"}}
    z = zarr.create_array(
        str(zp), shape=SHAPE, chunks=CHUNKS, dtype="int32",
        filters=[_zarr_python_codec(nc("delta", dtype="<i4"))], serializer=_zarr_python_codec(big),
    )  # fmt: skip
    z[...] = data
    a = gpuzarr.create(str(gz), shape=SHAPE, chunks=CHUNKS, dtype="int32", filters=[nc("delta", dtype="<i4")],
                       serializer=big)  # fmt: skip
    a[...] = data
    assert _chunks(gz) == _chunks(zp)
    np.testing.assert_array_equal(gpuzarr.open(str(zp), mode="r")[...], data)
