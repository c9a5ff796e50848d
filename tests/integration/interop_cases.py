"""The interop matrix shared by the zarr-python and TensorStore tests.

Each case is one array: a data type, a codec chain, a fill value, a layout (shape, chunks,
optional shards) and a chunk key encoding. The cases pair every core data type with several
codec chains, fill values and layouts (pairwise rather than the full cartesian product) so that
the whole matrix runs in seconds. Every case can be written by gpuzarr, zarr-python and
TensorStore, and read back by all three.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import gpuzarr
from gpuzarr.metadata.dtypes import DataType

if TYPE_CHECKING:
    from pathlib import Path

DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip

#: Per data type, JSON fill values to cycle through.
FILLS: dict[str, list[Any]] = {
    "bool": [True, False],
    "int8": [0, -7],
    "int16": [-300, 0],
    "int32": [0, 123456],
    "int64": [-(2**40), 0],
    "uint8": [255, 0],
    "uint16": [0, 65535],
    "uint32": [7, 0],
    "uint64": [0, 2**63 + 5],
    "float16": ["NaN", "0x7e01", "-Infinity"],
    "float32": ["NaN", "0x7fc00001", "Infinity", 0.5],
    "float64": ["-Infinity", "NaN", "0x7ff8000000000001", -2.25],
    "complex64": [["NaN", 1.5], [1.0, -2.0], [0.0, "Infinity"]],
    "complex128": [[0.0, 0.0], ["Infinity", "NaN"], [-1.5, 3.0]],
}

CHUNK_KEY_ENCODINGS: list[dict[str, Any]] = [
    {"name": "default", "configuration": {"separator": "/"}},
    {"name": "default", "configuration": {"separator": "."}},
    {"name": "v2", "configuration": {"separator": "."}},
    {"name": "v2", "configuration": {"separator": "/"}},
]

BLOSC_CNAMES = ["lz4", "zstd", "zlib", "blosclz", "lz4hc"]
BLOSC_SHUFFLES = ["noshuffle", "shuffle", "bitshuffle"]


def _bytes(endian: str = "little") -> dict[str, Any]:
    return {"name": "bytes", "configuration": {"endian": endian}}


def _blosc(cname: str, shuffle: str, itemsize: int) -> dict[str, Any]:
    return {
        "name": "blosc",
        "configuration": {
            "cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": itemsize, "blocksize": 0,
        },
    }  # fmt: skip


def _zstd(level: int, checksum: bool) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}


def _transpose(ndim: int) -> dict[str, Any]:
    return {"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}}


def _sharding(chunk_shape: tuple[int, ...], codecs: list[Any], location: str = "end") -> dict[str, Any]:
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(chunk_shape),
            "codecs": codecs,
            "index_codecs": [_bytes(), {"name": "crc32c"}],
            "index_location": location,
        },
    }


@dataclass(frozen=True)
class Layout:
    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    #: The box written; the rest of the array stays fill (missing chunks). None: everything.
    region: tuple[slice, ...] | None = None


LAYOUTS = [
    Layout("edge2d", (10, 7), (4, 3)),
    Layout("chunk_larger", (5, 3), (8, 8)),
    Layout("missing3d", (6, 5, 4), (4, 2, 3), (slice(0, 4), slice(0, 2), slice(None))),
    Layout("edge1d", (17,), (5,)),
    Layout("zero_d", (), ()),
    Layout("missing2d", (9, 11), (3, 4), (slice(2, 5), slice(0, 11))),
]


@dataclass(frozen=True)
class Case:
    id: str
    dtype: str
    shape: tuple[int, ...]
    #: The chunk grid's chunk shape (the shard shape when ``shards`` is given, see below).
    chunks: tuple[int, ...]
    #: The codec chain (inner chain when ``shards`` is set).
    codecs: list[dict[str, Any]]
    fill_value: Any
    chunk_key_encoding: dict[str, Any]
    region: tuple[slice, ...] | None = None
    #: When set, the chain is wrapped in sharding_indexed (index at the end, bytes + crc32c) with
    #: inner chunks ``chunks`` and shards of this shape.
    shards: tuple[int, ...] | None = None
    dimension_names: list[str | None] | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    #: TensorStore refuses bytes->bytes codecs after sharding_indexed.
    tensorstore: bool = True

    # -- derived -------------------------------------------------------------------------------

    @property
    def np_dtype(self) -> np.dtype[Any]:
        return np.dtype(self.dtype)

    @property
    def full_codecs(self) -> list[dict[str, Any]]:
        if self.shards is None:
            return self.codecs
        return [_sharding(self.chunks, self.codecs)]

    @property
    def grid_chunks(self) -> tuple[int, ...]:
        return self.shards if self.shards is not None else self.chunks

    def chunks_and_shards(self) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """What ``Array.chunks`` and ``Array.shards`` report: inner chunk and shard shapes when
        the chain is a single sharding codec, else the chunk shape and None."""
        chain = self.full_codecs
        if len(chain) == 1 and chain[0]["name"] == "sharding_indexed":
            return tuple(chain[0]["configuration"]["chunk_shape"]), self.grid_chunks
        return self.grid_chunks, None

    def metadata_json(self) -> dict[str, Any]:
        """The zarr.json a writer of this case produces (what TensorStore is given)."""
        doc: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(self.grid_chunks)}},
            "chunk_key_encoding": self.chunk_key_encoding,
            "fill_value": self.fill_value,
            "codecs": self.full_codecs,
            "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = self.dimension_names
        return doc

    def fill_scalar(self) -> np.generic:
        """The fill value as a NumPy scalar (hex patterns keep their bits)."""
        return DataType.from_numpy(self.dtype).fill_value_from_json(self.fill_value)

    def data(self) -> np.ndarray[Any, Any]:
        """Deterministic values for the written region (special floats included)."""
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        shape = self.region_shape()
        dt = self.np_dtype
        if dt.kind == "b":
            values = rng.integers(0, 2, size=shape).astype(bool)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            values = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        elif dt.kind == "f":
            values = rng.normal(scale=100, size=shape).astype(dt)
        else:
            values = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dt)
        flat = values.reshape(-1)
        if dt.kind in "fc" and flat.size >= 3:
            flat[0], flat[1], flat[2] = np.nan, np.inf, -np.inf
        return values

    def region_shape(self) -> tuple[int, ...]:
        if self.region is None:
            return self.shape
        return tuple(len(range(*s.indices(n))) for s, n in zip(self.region, self.shape, strict=True))

    def region_or_all(self) -> Any:
        return self.region if self.region is not None else ...

    def expected(self) -> np.ndarray[Any, Any]:
        out = np.full(self.shape, self.fill_scalar(), dtype=self.np_dtype)
        out[self.region_or_all()] = self.data()
        return out

    def selections(self, negative_steps: bool = True) -> list[tuple[str, Any]]:
        """(kind, selection) pairs to compare against NumPy: "basic", "oindex" or "vindex".
        zarr-python refuses negative steps: ``negative_steps=False`` leaves them out."""
        if not self.shape:
            return [("basic", ()), ("basic", ...)]
        n0 = self.shape[0]
        sels: list[tuple[str, Any]] = [
            ("basic", tuple(slice(1, None, 2) for _ in self.shape)),
            *([("basic", (slice(None, None, -3),))] if negative_steps else []),
            ("basic", (n0 - 1,)),
            ("oindex", ([0, n0 - 1, n0 // 2], *[slice(None)] * (len(self.shape) - 1))),
            ("vindex", tuple(np.array([0, n - 1, n // 2]) for n in self.shape)),
        ]
        return sels


def _cases() -> list[Case]:
    chains: list[tuple[str, Any]] = [
        ("bytes", lambda nd, isz: [_bytes()]),
        ("bytes_big", lambda nd, isz: [_bytes("big")]),
        ("transpose", lambda nd, isz: [_transpose(nd), _bytes()] if nd > 1 else [_bytes("big")]),
        ("gzip", lambda nd, isz: [_bytes(), {"name": "gzip", "configuration": {"level": 5}}]),
        ("zstd", lambda nd, isz: [_bytes(), _zstd(1, checksum=False)]),
        ("zstd_checksum", lambda nd, isz: [_bytes("big"), _zstd(3, checksum=True)]),
        ("crc32c", lambda nd, isz: [_bytes(), {"name": "crc32c"}]),
        (
            "transpose_gzip_crc32c",
            lambda nd, isz: [*([_transpose(nd)] if nd > 1 else []), _bytes("big"),
                             {"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}],
        ),
    ]  # fmt: skip
    for i, cname in enumerate(BLOSC_CNAMES):
        for j, shuffle in enumerate(BLOSC_SHUFFLES):
            endian = "big" if (i + j) % 4 == 3 else "little"
            chains.append(
                (
                    f"blosc_{cname}_{shuffle}",
                    lambda nd, isz, c=cname, s=shuffle, e=endian: [_bytes(e), _blosc(c, s, isz)],
                )
            )
    cases = []
    n = max(len(chains), 2 * len(DTYPES))
    for i in range(n):
        chain_name, make_chain = chains[i % len(chains)]
        dtype = DTYPES[i % len(DTYPES)]
        layout = LAYOUTS[i % len(LAYOUTS)]
        fills = FILLS[dtype]
        fill = fills[(i // len(DTYPES)) % len(fills)]
        cke = CHUNK_KEY_ENCODINGS[i % len(CHUNK_KEY_ENCODINGS)]
        nd = len(layout.shape)
        names = [f"d{k}" for k in range(nd)] if i % 3 == 0 else ([None] * nd if i % 3 == 1 and nd else None)
        cases.append(
            Case(
                id=f"{i:02d}-{dtype}-{chain_name}-{layout.name}",
                dtype=dtype,
                shape=layout.shape,
                chunks=layout.chunks,
                codecs=make_chain(nd, np.dtype(dtype).itemsize),
                fill_value=fill,
                chunk_key_encoding=cke,
                region=layout.region,
                dimension_names=names,
                attributes={"case": i, "nested": {"list": [1, 2.5, None, "x"]}} if i % 2 else {},
            )
        )
    cases.extend(_sharded_cases())
    return cases


def _sharded_cases() -> list[Case]:
    zstd = _zstd(1, checksum=False)
    gzip = {"name": "gzip", "configuration": {"level": 1}}
    cases = [
        # Index at the end, inner compression, missing inner chunks and a partial edge shard.
        Case("shard-end-float32-zstd", "float32", (10, 9), (4, 3), [_bytes(), zstd], "NaN",
             CHUNK_KEY_ENCODINGS[0], region=(slice(0, 4), slice(0, 9)), shards=(8, 6),
             dimension_names=["y", "x"], attributes={"sharded": True}),
        Case("shard-end-int16-blosc", "int16", (16, 12), (4, 4), [_bytes("big"), _blosc("lz4", "shuffle", 2)],
             -1, CHUNK_KEY_ENCODINGS[2], shards=(8, 12)),
        Case("shard-end-bool-crc32c", "bool", (7, 5), (2, 2), [_bytes(), {"name": "crc32c"}],
             True, CHUNK_KEY_ENCODINGS[1], region=(slice(3, 7), slice(0, 3)), shards=(4, 4)),
        # Index at the start, inner transpose + blosc.
        Case("shard-start-uint32-transpose", "uint32", (9, 10), (6, 10),
             [_sharding((3, 5), [_transpose(2), _bytes(), _blosc("zstd", "bitshuffle", 4)], "start")],
             0, CHUNK_KEY_ENCODINGS[3], region=(slice(0, 3), slice(0, 10)), dimension_names=["a", None]),
        Case("shard-start-complex128", "complex128", (5, 6), (4, 4),
             [_sharding((2, 2), [_bytes("big"), gzip], "start")], [1.0, "NaN"], CHUNK_KEY_ENCODINGS[0]),
        # Nested sharding: shards of shards of compressed chunks.
        Case("shard-nested-float64", "float64", (12, 10), (8, 8),
             [_sharding((4, 4), [_sharding((2, 2), [_bytes(), gzip])])],
             "-Infinity", CHUNK_KEY_ENCODINGS[0], region=(slice(0, 6), slice(2, 10))),
        Case("shard-nested-uint8-start", "uint8", (8, 8), (8, 8),
             [_sharding((4, 8), [_sharding((2, 4), [_bytes(), zstd], "start")], "start")],
             3, CHUNK_KEY_ENCODINGS[2], region=(slice(0, 2), slice(0, 8))),
        # bytes->bytes codecs around the whole shard (zarr-python only; TensorStore refuses them).
        Case("shard-outer-crc32c-int64", "int64", (10, 7), (6, 6),
             [_transpose(2), _sharding((3, 2), [_bytes("big"), gzip], "start"), {"name": "crc32c"}],
             5, CHUNK_KEY_ENCODINGS[1], region=(slice(0, 6), slice(0, 7)), tensorstore=False),
    ]  # fmt: skip
    return cases


CASES = _cases()
TENSORSTORE_CASES = [c for c in CASES if c.tensorstore]


# -- writers ---------------------------------------------------------------------------------------


def _zarr_python_fill(case: Case) -> Any:
    fill = case.fill_scalar()
    return fill.item() if case.np_dtype.kind != "f" else fill


def write_zarr_python(case: Case, path: Path) -> None:
    import zarr

    chain = case.full_codecs if case.shards is None else case.codecs
    filters = [c for c in chain if c["name"] == "transpose"]
    serializer = next(c for c in chain if c["name"] in ("bytes", "sharding_indexed"))
    compressors = chain[chain.index(serializer) + 1 :]
    z = zarr.create_array(
        store=str(path),
        shape=case.shape,
        dtype=case.dtype,
        chunks=case.chunks,
        shards=case.shards,
        filters=filters,
        serializer=serializer,
        compressors=compressors,
        fill_value=_zarr_python_fill(case),
        chunk_key_encoding=case.chunk_key_encoding,
        dimension_names=case.dimension_names,
        attributes=case.attributes,
        zarr_format=3,
    )
    z[case.region_or_all()] = case.data()


def write_tensorstore(case: Case, path: Path) -> None:
    import tensorstore as ts

    t = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(path) + "/"},
            "metadata": {
                k: v for k, v in case.metadata_json().items() if k not in ("zarr_format", "node_type")
            },
        },
        create=True,
    ).result()
    t[case.region_or_all()].write(case.data()).result()


def write_gpuzarr(case: Case, path: Path) -> gpuzarr.Array:
    a = gpuzarr.create(
        str(path),
        shape=case.shape,
        dtype=case.dtype,
        chunks=case.chunks,
        shards=case.shards,
        codecs=case.codecs,
        fill_value=case.fill_value,
        chunk_key_encoding=case.chunk_key_encoding,
        dimension_names=case.dimension_names,
        attributes=case.attributes,
    )
    a[case.region_or_all()] = case.data()
    return a


# -- comparisons -----------------------------------------------------------------------------------


def assert_same(actual: Any, expected: np.ndarray[Any, Any], bits: bool = False) -> None:
    """Equal values, dtype and shape; NaN equals NaN. ``bits=True`` compares bit patterns, so
    that NaN payloads of hex fill values must survive too."""
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if bits:
        assert actual.tobytes() == np.ascontiguousarray(expected).tobytes()
    if expected.dtype.kind in "fc":
        np.testing.assert_array_equal(actual, expected)  # NaN == NaN here
    else:
        assert np.array_equal(actual, expected)


def assert_fill(actual: Any, expected: np.generic, nan_bits: bool = True) -> None:
    """The fill value has the exact bit pattern (a hex NaN payload survives), or with
    ``nan_bits=False`` is any NaN where a NaN is expected (zarr-python keeps no NaN payloads)."""
    a = np.asarray(actual, dtype=np.asarray(expected).dtype)
    e = np.asarray(expected)
    if not nan_bits and e.dtype.kind in "fc":
        assert np.array_equal(a, e, equal_nan=True), (a, e)
        return
    assert a.tobytes() == e.tobytes(), (a, e)


def select(array: Any, kind: str, sel: Any) -> Any:
    if kind == "basic":
        return array[sel]
    if kind == "oindex":
        return array.oindex[sel]
    return array.vindex[sel]


def numpy_select(expected: np.ndarray[Any, Any], kind: str, sel: Any) -> np.ndarray[Any, Any]:
    if kind == "basic" or kind == "vindex":
        return np.asarray(expected[sel])
    return expected[
        np.ix_(
            *[np.arange(n)[s] if isinstance(s, slice) else np.asarray(s) for s, n in zip(sel, expected.shape)]
        )
    ]


def stored_keys(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def stored_metadata(root: Path) -> dict[str, Any]:
    return json.loads((root / "zarr.json").read_text())


def codec_names(chain: list[dict[str, Any]]) -> list[Any]:
    """The codec names of a chain, nested for sharding (configurations are normalised
    differently by each writer, so only the structure is compared)."""
    out: list[Any] = []
    for codec in chain:
        out.append(codec["name"])
        if codec["name"] == "sharding_indexed":
            config = codec["configuration"]
            out.append(
                (
                    codec_names(config["codecs"]),
                    codec_names(config["index_codecs"]),
                    config.get("index_location", "end"),
                )
            )
    return out


def json_fill_equal(a: Any, b: Any) -> bool:
    """Fill values in JSON form are equal (numbers compared numerically)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_fill_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b) or a == b
    return bool(a == b)
