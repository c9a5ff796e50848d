"""``gpuzarr.create``'s codec arguments (zarr-python 3's ``filters``, ``serializer``,
``compressors``, the v2 spelling ``compressor``, gpuzarr's ``codecs``) -> the stored JSON.

Codecs may be JSON, numcodecs objects or zarr-python codec objects. The JSON written for each is
checked here against zarr-python's own ``create_array`` where zarr-python accepts the argument;
interop of the arrays is in tests/integration/test_codec_objects_interop.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GpuZarrError, InvalidArgumentError, MetadataError
from gpuzarr.metadata.build import build_metadata
from gpuzarr.metadata.v2 import ArrayMetadataV2
from gpuzarr.metadata.v3 import ArrayMetadata

LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD0 = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}


def v3(dtype: str = "int32", **kwargs: Any) -> list[dict[str, Any]]:
    metadata = build_metadata(shape=(10,), dtype=dtype, chunks=(5,), **kwargs)
    assert isinstance(metadata, ArrayMetadata)
    return [dict(c) for c in metadata.codecs]


def v2(dtype: str = "<i4", **kwargs: Any) -> tuple[Any, Any]:
    metadata = build_metadata(shape=(10,), dtype=dtype, chunks=(5,), zarr_format=2, **kwargs)
    assert isinstance(metadata, ArrayMetadataV2)
    doc = metadata.to_json()
    return doc["compressor"], doc["filters"]


def nc(codec_id: str, **config: Any) -> dict[str, Any]:
    return {"name": f"numcodecs.{codec_id}", "configuration": config}


# -- v3: the forms each codec may take -------------------------------------------------------------


@pytest.mark.parametrize(
    ("compressors", "expected"),
    [
        ("auto", [ZSTD0]),
        (None, []),
        ([], []),
        ((), []),
        ("gzip", [{"name": "gzip", "configuration": {}}]),
        ({"name": "gzip", "configuration": {"level": 3}}, [{"name": "gzip", "configuration": {"level": 3}}]),
        # numcodecs JSON and objects map as zarr-python's v2 -> v3 migration maps them.
        ({"id": "zstd", "level": 3}, [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}]),
        (numcodecs.Zstd(level=3), [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}]),
        (numcodecs.GZip(level=2), [{"name": "gzip", "configuration": {"level": 2}}]),
        (numcodecs.Blosc(cname="lz4", clevel=3, shuffle=numcodecs.Blosc.BITSHUFFLE),
         [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 3, "shuffle": "bitshuffle", "typesize": 4,
                                              "blocksize": 0}}]),
        (numcodecs.Zlib(level=4), [nc("zlib", level=4)]),
        ([numcodecs.LZ4(), {"name": "crc32c"}], [nc("lz4", acceleration=1), {"name": "crc32c", "configuration": {}}]),
        (numcodecs.Shuffle(elementsize=2), [nc("shuffle", elementsize=2)]),
    ],
)  # fmt: skip
def test_v3_compressors(compressors: Any, expected: list[dict[str, Any]]) -> None:
    assert v3(compressors=compressors) == [LITTLE, *expected]


def test_v3_compressor_is_the_v2_spelling_of_compressors() -> None:
    assert v3(compressor=numcodecs.Zstd(level=5)) == v3(compressors=numcodecs.Zstd(level=5))
    assert v3(compressor=None) == [LITTLE]
    assert v3(compressor=[{"name": "gzip", "configuration": {"level": 1}}, "crc32c"]) == v3(
        compressors=[{"name": "gzip", "configuration": {"level": 1}}, "crc32c"]
    )


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (None, []),
        ("auto", []),
        ([], []),
        (numcodecs.Delta(dtype="<i4"), [nc("delta", dtype="<i4", astype="<i4")]),
        ([{"id": "delta", "dtype": "<i4"}], [nc("delta", dtype="<i4")]),
        ([nc("delta", dtype="<i4"), {"name": "transpose", "configuration": {"order": [0]}}],
         [nc("delta", dtype="<i4"), {"name": "transpose", "configuration": {"order": [0]}}]),
        # zarr-python fills these from the array's data type and writes them: so does gpuzarr.
        ([nc("fixedscaleoffset", offset=0, scale=10, astype="<i2")],
         [nc("fixedscaleoffset", offset=0, scale=10, astype="<i2", dtype="int32")]),
        ([nc("astype", encode_dtype="<i2")], [nc("astype", encode_dtype="<i2", decode_dtype="int32")]),
    ],
)  # fmt: skip
def test_v3_filters(filters: Any, expected: list[dict[str, Any]]) -> None:
    assert v3(filters=filters, compressors=None) == [*expected, LITTLE]


def test_v3_serializer() -> None:
    assert v3(serializer={"name": "bytes", "configuration": {"endian": "big"}}, compressors=None) == [
        {"name": "bytes", "configuration": {"endian": "big"}}
    ]
    assert v3(serializer=nc("pcodec", level=3), compressors=None) == [nc("pcodec", level=3)]
    sharding = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [5], "codecs": [nc("shuffle"), LITTLE], "index_codecs": [LITTLE, {"name": "crc32c"}],
            "index_location": "end",
        },
    }  # fmt: skip
    (written,) = v3(serializer=sharding, compressors=None)
    # zarr-python's defaults are filled inside a sharding codec's chain too.
    assert written["configuration"]["codecs"][0] == nc("shuffle", elementsize=4)


def test_a_filter_that_widens_a_one_byte_type_gets_a_byte_order() -> None:
    assert v3("uint8", filters=[nc("astype", encode_dtype="<f4")], compressors=None)[1] == LITTLE
    assert v3("uint8", compressors=None) == [{"name": "bytes", "configuration": {}}]
    # As zarr-python: the byte order is the array's when the filter narrows the type.
    assert v3("float64", filters=[nc("fixedscaleoffset", offset=0, scale=1, astype="|u1")])[1] == LITTLE


def test_v3_codecs_takes_objects_and_completes_the_chain() -> None:
    assert v3(codecs=[numcodecs.Delta(dtype="<i4"), numcodecs.Zlib(level=1)]) == [
        nc("delta", dtype="<i4", astype="<i4"), LITTLE, nc("zlib", level=1),
    ]  # fmt: skip


# -- v3: what is refused -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"codecs": ["bytes"], "compressors": None}, r"^codecs, compressors: give the whole chain"),
        ({"codecs": ["bytes"], "filters": [], "serializer": "bytes"}, r"^codecs, filters, serializer:"),
        ({"compressor": None, "compressors": None}, r"^compressor, compressors: give one of them"),
        ({"filters": [numcodecs.Zlib()]}, r"^filters\[0\]: 'numcodecs.zlib' is a bytes->bytes codec.*compressors="),
        ({"filters": ["bytes"]}, r"^filters\[0\]: 'bytes' is an array->bytes codec.*serializer="),
        ({"compressors": [ZSTD0, nc("delta", dtype="<i4")]},
         r"^compressors\[1\]: 'numcodecs.delta' is an array->array codec .*filters="),
        ({"serializer": "zstd"}, r"^serializer: 'zstd' is a bytes->bytes codec"),
        ({"codecs": [LITTLE, nc("delta", dtype="<i4")]},
         r"^codecs\[1\]: 'numcodecs.delta' is an array->array codec \(a filter\) and cannot follow 'bytes'"),
        ({"codecs": [nc("pcodec"), LITTLE]}, r"^codecs\[1\]: 'bytes' .* cannot follow 'numcodecs.pcodec'"),
        ({"compressors": object()}, r"^compressors\[0\]: expected a codec"),
        ({"compressors": [42]}, r"^compressors\[0\]: expected a codec"),
        ({"filters": [{"name": "numcodecs.delta", "configuration": {"dtype": np.dtype("i4")}}]},
         r"^filters\[0\]: the codec's configuration is not JSON"),
    ],
)  # fmt: skip
def test_v3_bad_arguments_raise_naming_them(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        v3(**kwargs)


def test_malformed_codec_json_raises_metadata_error() -> None:
    with pytest.raises(MetadataError, match=r"compressors\[0\]"):
        v3(compressors=[{"configuration": {}}])
    with pytest.raises(MetadataError, match=r"compressors\[0\]\.id"):
        v3(compressors=[{"id": 5}])


# -- v2 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "compressor", "filters"),
    [
        ({}, {"id": "zstd", "level": 0}, None),
        ({"compressor": None}, None, None),
        ({"compressors": None}, None, None),
        ({"compressors": []}, None, None),
        # zarr-python leaves out a zstd compressor's "checksum": false (TensorStore refuses it).
        ({"compressor": numcodecs.Zstd(level=3)}, {"id": "zstd", "level": 3}, None),
        ({"compressor": numcodecs.Zstd(level=3, checksum=True)}, {"id": "zstd", "level": 3, "checksum": True}, None),
        ({"compressors": numcodecs.Zlib(level=2)}, {"id": "zlib", "level": 2}, None),
        ({"compressors": [numcodecs.Zlib(level=2)]}, {"id": "zlib", "level": 2}, None),
        ({"compressor": {"id": "bz2", "level": 1}}, {"id": "bz2", "level": 1}, None),
        ({"compressor": nc("lz4", acceleration=2)}, {"id": "lz4", "acceleration": 2}, None),
        ({"filters": numcodecs.Delta(dtype="<i4")}, {"id": "zstd", "level": 0},
         [{"id": "delta", "dtype": "<i4", "astype": "<i4"}]),
        # Given in part: written with what numcodecs fills in, as zarr-python writes them.
        ({"filters": [nc("delta", dtype="<i4")], "compressor": None}, None,
         [{"id": "delta", "dtype": "<i4", "astype": "<i4"}]),
        ({"compressor": {"id": "blosc"}}, {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
         None),
        ({"compressor": {"id": "gzip"}}, {"id": "gzip", "level": 1}, None),
        ({"compressor": {"id": "zstd"}}, {"id": "zstd", "level": 0}, None),
        ({"compressor": {"id": "lz4"}}, {"id": "lz4", "acceleration": 1}, None),
        ({"filters": "auto", "compressor": None}, None, None),
    ],
)  # fmt: skip
def test_v2_codec_arguments(kwargs: dict[str, Any], compressor: Any, filters: Any) -> None:
    assert v2(**kwargs) == (compressor, filters)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"compressors": [numcodecs.Zlib(), numcodecs.Zlib()]},
         r"^compressors: Zarr v2 arrays have one compressor, got 2"),
        ({"compressor": {"name": "zstd", "configuration": {"level": 1}}}, r"^compressor: 'zstd' is a Zarr v3 codec"),
        ({"filters": ["bytes"]}, r"^filters\[0\]: expected a codec"),
        ({"serializer": "bytes"}, r"^serializer: Zarr v2 arrays have no serializer"),
        ({"compressor": numcodecs.Zlib(), "compressors": numcodecs.Zlib()}, r"^compressor, compressors"),
    ],
)  # fmt: skip
def test_v2_bad_arguments_raise_naming_them(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        v2(**kwargs)


# -- zarr-python's codec objects, and what zarr-python itself writes for them ---------------------------


def _zarr_python_chain(**kwargs: Any) -> list[dict[str, Any]]:
    zarr = pytest.importorskip("zarr")
    store = zarr.storage.MemoryStore()
    zarr.create_array(store, shape=(10,), chunks=(5,), dtype="int32", **kwargs)
    doc = json.loads(store._store_dict["zarr.json"].to_bytes())
    return [{"name": c["name"], "configuration": c.get("configuration", {})} for c in doc["codecs"]]


def _zarr_python_arguments() -> list[dict[str, Any]]:
    zc = pytest.importorskip("zarr.codecs")
    return [
        {"compressors": zc.ZstdCodec(level=3, checksum=True)},
        {"compressors": zc.BloscCodec()},  # typesize and shuffle derived from the data type
        {"compressors": zc.BloscCodec(cname="lz4", typesize=2, shuffle="noshuffle")},
        {"compressors": [zc.GzipCodec(level=2), zc.Crc32cCodec()]},
        {"compressors": None, "serializer": zc.BytesCodec(endian="big")},
        {"filters": [zc.TransposeCodec(order=(0,))]},
        {"filters": [zc.numcodecs.Delta(dtype="<i4")], "compressors": [zc.numcodecs.Zlib(level=1)]},
        {"filters": [zc.numcodecs.FixedScaleOffset(offset=1, scale=2, astype="<i2")]},
        {"compressors": zc.numcodecs.Shuffle()},
        {"serializer": zc.ShardingCodec(chunk_shape=(5,), codecs=[zc.BytesCodec(), zc.GzipCodec()]),
         "compressors": None},
    ]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning")
@pytest.mark.parametrize("index", range(10))
def test_zarr_python_objects_are_written_as_zarr_python_writes_them(index: int) -> None:
    kwargs = _zarr_python_arguments()[index]
    assert v3(**kwargs) == _zarr_python_chain(**kwargs)


# -- through gpuzarr.create, open and Group.create_array -------------------------------------------


def test_open_and_group_create_array_take_the_keywords(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    a = gpuzarr.open(path, mode="w", shape=(6,), dtype="int16", chunks=(3,), filters=numcodecs.Delta(dtype="<i2"),
                     compressors=numcodecs.Zlib(level=1))  # fmt: skip
    a[...] = np.arange(6)
    assert [c["name"] for c in gpuzarr.open(path, mode="r").codecs] == ["numcodecs.delta", "bytes", "numcodecs.zlib"]
    g = gpuzarr.create_group(str(tmp_path / "g.zarr"))
    b = g.create_array("b", shape=(4,), dtype="float32", chunks=(2,), serializer={"name": "bytes",
                       "configuration": {"endian": "big"}}, compressors=None)  # fmt: skip
    b[...] = 1.5
    assert b.codecs == [{"name": "bytes", "configuration": {"endian": "big"}}]
    np.testing.assert_array_equal(gpuzarr.open(str(tmp_path / "g.zarr"), mode="r")["b"][...], np.full(4, 1.5))


def test_refused_arguments_leave_the_store_untouched(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    with pytest.raises(GpuZarrError):
        gpuzarr.create(str(path), shape=(4,), dtype="int32", codecs=["bytes"], compressors=None)
    with pytest.raises(ValueError, match="bitround"):  # resolved before anything is written
        gpuzarr.create(str(path), shape=(4,), dtype="int32", filters=[nc("bitround", keepbits=2)])
    assert not path.exists()


def test_create_documents_the_keywords() -> None:
    doc = gpuzarr.create.__doc__ or ""
    for keyword in ("filters, serializer, compressors", "compressor\n", "codecs\n"):
        assert keyword in doc


def test_codec_objects_need_no_zarr_import() -> None:
    code = (
        "import sys, numcodecs, gpuzarr\n"
        "a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(8,), dtype='f8', chunks=(4,),\n"
        "                   filters=[numcodecs.Quantize(digits=2, dtype='f8')], compressor=numcodecs.Zstd(level=2))\n"
        "a[...] = 1.25; assert (a[...] == 1.25).all()\n"
        "assert 'zarr' not in sys.modules, 'zarr was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent.parent)
