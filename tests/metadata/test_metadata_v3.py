"""Zarr v3 array metadata (zarr.json): validation, normalisation and round trips."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuzarr.errors import MetadataError
from gpuzarr.metadata.dtypes import CORE_DATA_TYPES
from gpuzarr.metadata.v3 import ArrayMetadata, parse_json_document

BASE: dict[str, Any] = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [10000, 1000],
    "data_type": "float64",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1000, 100]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": "NaN",
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
}


def doc(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k)
        else:
            d[k] = v
    return d


_DROP = object()


def test_minimal_document() -> None:
    m = ArrayMetadata.from_json(doc())
    assert m.shape == (10000, 1000)
    assert m.ndim == 2
    assert m.dtype == np.float64
    assert m.chunk_shape == (1000, 100)
    assert np.isnan(m.fill_value)
    assert m.codecs == ({"name": "bytes", "configuration": {"endian": "little"}},)
    assert m.attributes == {}
    assert m.dimension_names is None
    assert m.zarr_format == 3
    assert m.chunk_key((1, 23)) == "c/1/23"


def test_full_document_roundtrip() -> None:
    d = doc(
        attributes={"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]},
        dimension_names=["rows", None],
        storage_transformers=[],
    )
    m = ArrayMetadata.from_json(d)
    assert m.dimension_names == ("rows", None)
    out = m.to_json()
    assert out["dimension_names"] == ["rows", None]
    assert out["attributes"] == d["attributes"]
    assert "storage_transformers" not in out
    assert ArrayMetadata.from_json(out).to_json() == out


@pytest.mark.parametrize(
    "field", ["shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"]
)
def test_required_fields(field: str) -> None:
    with pytest.raises(MetadataError, match=f"^{field}: required"):
        ArrayMetadata.from_json(doc(**{field: _DROP}))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"zarr_format": 2}, "zarr_format"),
        ({"zarr_format": "3"}, "zarr_format"),
        ({"zarr_format": 3.0}, "zarr_format"),
        ({"zarr_format": True}, "zarr_format"),
        ({"zarr_format": _DROP}, "zarr_format"),
        ({"node_type": "group"}, "node_type"),
        ({"node_type": _DROP}, "node_type"),
        ({"shape": [-1, 4]}, "shape"),
        ({"shape": [1.5, 4]}, "shape"),
        ({"shape": [True, 4]}, "shape"),
        ({"shape": "10"}, "shape"),
        ({"shape": None}, "shape"),
        ({"data_type": "bfloat17"}, "data_type"),
        ({"data_type": {"name": "foo"}}, "data_type"),
        ({"fill_value": None}, "fill_value"),
        ({"fill_value": "nan"}, "fill_value"),
        ({"fill_value": True}, "fill_value"),
        ({"codecs": []}, "codecs"),
        ({"codecs": {"name": "bytes"}}, "codecs"),
        ({"codecs": [{"configuration": {}}]}, r"codecs\[0\]\.name"),
        ({"codecs": [{"name": "bytes", "bogus": 1}]}, r"codecs\[0\]"),
        ({"codecs": [3]}, r"codecs\[0\]"),
        ({"attributes": []}, "attributes"),
        ({"attributes": "x"}, "attributes"),
        ({"dimension_names": ["a"]}, "dimension_names"),
        ({"dimension_names": ["a", "b", "c"]}, "dimension_names"),
        ({"dimension_names": ["a", 1]}, "dimension_names"),
        ({"dimension_names": "ab"}, "dimension_names"),
        ({"storage_transformers": [{"name": "foo"}]}, "storage_transformers"),
        ({"storage_transformers": {"name": "foo"}}, "storage_transformers"),
        (
            {"chunk_grid": {"name": "rectangular", "configuration": {"chunk_shape": [1, 1]}}},
            r"chunk_grid\.name",
        ),
        ({"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1000]}}},
         r"chunk_grid\.configuration\.chunk_shape: must have 2 entries, got 1"),
        ({"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 2, 3]}}},
         "chunk_grid.configuration.chunk_shape"),
        ({"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [0, 1]}}},
         "chunk_grid.configuration.chunk_shape.*positive"),
        ({"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [-2, 1]}}},
         "chunk_grid.configuration.chunk_shape.*positive"),
        ({"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1.0, 1]}}},
         r"chunk_grid\.configuration\.chunk_shape\[0\]"),
        ({"chunk_grid": {"name": "regular", "configuration": {}}}, "chunk_grid.configuration.chunk_shape"),
        ({"chunk_grid": {"name": "regular"}}, "chunk_grid.configuration.chunk_shape"),
        ({"chunk_grid": [1000, 100]}, "chunk_grid"),
        ({"chunk_key_encoding": {"name": "default", "configuration": {"separator": ":"}}}, "separator"),
        ({"chunk_key_encoding": {"name": "v3"}}, "chunk_key_encoding.name"),
    ],
)
def test_invalid_documents(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        ArrayMetadata.from_json(doc(**changes))


@pytest.mark.parametrize("value", [None, [], "zarr", 3])
def test_not_an_object(value: Any) -> None:
    with pytest.raises(MetadataError):
        ArrayMetadata.from_json(value)


@pytest.mark.parametrize(
    "value",
    [1, "x", [1, 2], None, {"must_understand": True}, {"foo": 1}, {"must_understand": "false"},
     {"must_understand": 0}],
)
def test_unknown_field_rejected(value: Any) -> None:
    with pytest.raises(MetadataError, match=r"^extensions: unknown metadata field"):
        ArrayMetadata.from_json(doc(extensions=value))


def test_unknown_field_must_understand_false_kept() -> None:
    ext = {"must_understand": False, "configuration": {"x": [1, 2]}}
    m = ArrayMetadata.from_json(doc(my_extension=ext))
    assert m.extra_fields == {"my_extension": ext}
    out = m.to_json()
    assert out["my_extension"] == ext
    assert ArrayMetadata.from_json(out).to_json() == out
    # Written back as strict JSON.
    assert json.loads(m.to_bytes())["my_extension"] == ext


def test_codec_must_understand_false_kept() -> None:
    codecs = [{"name": "bytes"}, {"name": "x.checksum", "configuration": {}, "must_understand": False}]
    m = ArrayMetadata.from_json(doc(codecs=codecs))
    assert m.codecs[1] == {"name": "x.checksum", "configuration": {}, "must_understand": False}
    assert m.to_json()["codecs"][0] == {"name": "bytes", "configuration": {}}


def test_codec_string_form_normalised() -> None:
    m = ArrayMetadata.from_json(doc(codecs=["bytes", {"name": "gzip", "configuration": {"level": 1}}]))
    assert m.codecs == (
        {"name": "bytes", "configuration": {}},
        {"name": "gzip", "configuration": {"level": 1}},
    )


def test_storage_transformers_empty_or_null_accepted() -> None:
    for value in ([], None):
        ArrayMetadata.from_json(doc(storage_transformers=value))


@pytest.mark.parametrize(
    ("cke", "coords", "key"),
    [
        ({"name": "default"}, (1, 2), "c/1/2"),
        ({"name": "default", "configuration": {"separator": "."}}, (1, 2), "c.1.2"),
        ({"name": "v2"}, (1, 2), "1.2"),
        ({"name": "v2", "configuration": {"separator": "/"}}, (1, 2), "1/2"),
    ],
)
def test_chunk_key_encoding_in_document(cke: dict[str, Any], coords: tuple[int, ...], key: str) -> None:
    m = ArrayMetadata.from_json(doc(chunk_key_encoding=cke))
    assert m.chunk_key(coords) == key
    sep = cke.get("configuration", {}).get("separator", "/" if cke["name"] == "default" else ".")
    assert m.to_json()["chunk_key_encoding"] == {"name": cke["name"], "configuration": {"separator": sep}}


@pytest.mark.parametrize(("name", "key"), [("default", "c"), ("v2", "0")])
def test_zero_dimensional(name: str, key: str) -> None:
    m = ArrayMetadata.from_json(
        doc(
            shape=[],
            chunk_grid={"name": "regular", "configuration": {"chunk_shape": []}},
            chunk_key_encoding={"name": name},
            dimension_names=[],
            fill_value=0,
        )
    )
    assert m.shape == () and m.chunk_shape == () and m.ndim == 0
    assert m.chunk_key(()) == key
    assert ArrayMetadata.from_json(m.to_json()).to_json() == m.to_json()


def test_zero_length_axis_allowed() -> None:
    m = ArrayMetadata.from_json(doc(shape=[0, 5]))
    assert m.shape == (0, 5)


def test_constructor_validates() -> None:
    m = ArrayMetadata.from_json(doc())
    with pytest.raises(MetadataError, match="shape"):
        m.evolve(shape=(-1, 3))
    with pytest.raises(MetadataError, match="dimension_names"):
        m.evolve(dimension_names=("a",))
    assert m.evolve(shape=(5, 5)).shape == (5, 5)


def test_to_bytes_is_strict_json() -> None:
    m = ArrayMetadata.from_json(doc(fill_value="-Infinity"))
    assert json.loads(m.to_bytes())["fill_value"] == "-Infinity"


def test_parse_json_document() -> None:
    assert parse_json_document(b'{"a": 1}', "x/zarr.json") == {"a": 1}
    with pytest.raises(MetadataError, match=r"x/zarr\.json: not valid JSON"):
        parse_json_document(b"{", "x/zarr.json")
    with pytest.raises(MetadataError, match=r"x/zarr\.json: not valid JSON"):
        parse_json_document(b"\xff\xfe\x00", "x/zarr.json")
    with pytest.raises(MetadataError, match=r"x/zarr\.json: expected a JSON object, got list"):
        parse_json_document(b"[1]", "x/zarr.json")


# -- property: from_json(to_json(m)) is the identity on the normalised form ----------------------


def _fill_strategy(name: str) -> st.SearchStrategy[Any]:
    npdt = np.dtype(CORE_DATA_TYPES[name])
    if npdt.kind == "b":
        return st.booleans()
    if npdt.kind in "iu":
        info = np.iinfo(npdt)
        return st.integers(int(info.min), int(info.max))
    width = npdt.itemsize if npdt.kind == "f" else npdt.itemsize // 2
    part = st.integers(0, 2 ** (8 * width) - 1).map(lambda b: "0x" + format(b, f"0{2 * width}x"))
    part = part | st.sampled_from(["NaN", "Infinity", "-Infinity", 0, 1.5, -0.0])
    return part if npdt.kind == "f" else st.tuples(part, part).map(list)


@st.composite
def array_documents(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 100), min_size=ndim, max_size=ndim))
    chunks = draw(st.lists(st.integers(1, 50), min_size=ndim, max_size=ndim))
    name = draw(st.sampled_from(sorted(CORE_DATA_TYPES)))
    d: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": draw(
            st.sampled_from(
                [
                    {"name": "default"},
                    {"name": "default", "configuration": {"separator": "."}},
                    {"name": "v2"},
                    {"name": "v2", "configuration": {"separator": "/"}},
                ]
            )
        ),
        "fill_value": draw(_fill_strategy(name)),
        "codecs": [{"name": "bytes", "configuration": {"endian": draw(st.sampled_from(["little", "big"]))}}],
    }
    if draw(st.booleans()):
        d["attributes"] = draw(
            st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5) | st.none(), max_size=3)
        )
    if draw(st.booleans()):
        d["dimension_names"] = draw(st.lists(st.none() | st.text(max_size=4), min_size=ndim, max_size=ndim))
    if draw(st.booleans()):
        d["ext"] = {"must_understand": False, "v": draw(st.integers())}
    return d


@settings(max_examples=150, deadline=None)
@given(d=array_documents())
def test_metadata_roundtrip(d: dict[str, Any]) -> None:
    m = ArrayMetadata.from_json(d)
    out = m.to_json()
    again = ArrayMetadata.from_json(json.loads(json.dumps(out, allow_nan=False)))
    assert again.to_json() == out
    assert np.asarray(again.fill_value).tobytes() == np.asarray(m.fill_value).tobytes()
    assert again.shape == m.shape and again.chunk_shape == m.chunk_shape
    assert again.data_type == m.data_type and again.chunk_key_encoding == m.chunk_key_encoding
    assert again.dimension_names == m.dimension_names
    assert again.extra_fields == m.extra_fields


# -- interop: documents and chunk keys written by zarr-python -------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "coords"),
    [
        ({"shape": (10, 7), "chunks": (3, 4), "dtype": "uint16", "fill_value": 3}, (3, 1)),
        ({"shape": (5,), "chunks": (2,), "dtype": "float32", "fill_value": float("nan"),
          "chunk_key_encoding": {"name": "default", "separator": "."}}, (2,)),
        ({"shape": (4, 4), "chunks": (2, 2), "dtype": "complex64", "fill_value": 1 + 2j,
          "chunk_key_encoding": {"name": "v2", "separator": "/"}}, (1, 1)),
        ({"shape": (4, 4), "chunks": (2, 2), "dtype": "int8", "fill_value": -1,
          "chunk_key_encoding": {"name": "v2", "separator": "."}, "dimension_names": ["y", None]}, (1, 0)),
        ({"shape": (), "chunks": (), "dtype": "bool", "fill_value": True}, ()),
        ({"shape": (), "chunks": (), "dtype": "float64", "fill_value": 0.0,
          "chunk_key_encoding": {"name": "v2", "separator": "."}}, ()),
    ],
)
def test_reads_zarr_python_metadata(kwargs: dict[str, Any], coords: tuple[int, ...]) -> None:
    zarr = pytest.importorskip("zarr")
    from zarr.storage import MemoryStore

    store = MemoryStore()
    z = zarr.create_array(store, zarr_format=3, attributes={"a": 1}, **kwargs)
    # Anything but the fill value, so that zarr-python stores the chunk.
    z[...] = np.zeros(kwargs["shape"], dtype=kwargs["dtype"]) if kwargs["fill_value"] else np.ones(
        kwargs["shape"], dtype=kwargs["dtype"]
    )
    raw = store._store_dict["zarr.json"].to_bytes()
    m = ArrayMetadata.from_json(parse_json_document(raw, "zarr.json"))
    assert m.shape == tuple(kwargs["shape"])
    assert m.chunk_shape == tuple(kwargs["chunks"])
    assert m.dtype == np.dtype(kwargs["dtype"])
    expected_fill = np.asarray(kwargs["fill_value"], dtype=kwargs["dtype"])
    assert np.asarray(m.fill_value).tobytes() == expected_fill.tobytes()
    assert m.attributes == {"a": 1}
    keys = {k for k in store._store_dict if k != "zarr.json"}
    assert m.chunk_key(coords) in keys
    assert z.metadata.encode_chunk_key(coords) == m.chunk_key(coords)
    # zarr-python can open what we write back.
    out = MemoryStore()
    out._store_dict["zarr.json"] = type(store._store_dict["zarr.json"]).from_bytes(m.to_bytes())
    back = zarr.open_array(out, mode="r")
    assert back.shape == z.shape and back.dtype == z.dtype
    assert np.asarray(back.fill_value).tobytes() == expected_fill.tobytes()


def test_an_unknown_chunk_grid_names_both_grids_read() -> None:
    expected = r"^chunk_grid\.name: unsupported chunk grid 'weird' \(expected 'regular' or 'rectilinear'\)"
    with pytest.raises(MetadataError, match=expected):
        ArrayMetadata.from_json(doc(chunk_grid={"name": "weird", "configuration": {}}))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        # A misspelt separator named keys other than the stored chunks: reads gave the fill value.
        ({"chunk_key_encoding": {"name": "default", "configuration": {"seperator": "."}}},
         r"chunk_key_encoding\.configuration: unexpected members \['seperator'\]"),
        ({"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/", "x": 1}}},
         r"chunk_key_encoding\.configuration: unexpected members \['x'\]"),
        ({"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5], "shape": [5, 5]}}},
         r"chunk_grid\.configuration: unexpected members \['shape'\]"),
        ({"chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [5, 5], "k": 0}}},
         r"chunk_grid\.configuration: unexpected members \['k'\]"),
        ({"codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                     {"name": "zstd", "configuration": {"level": -131073}}]},
         r"configuration\.level: expected an integer from -131072 to 22"),
        ({"codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [5, 5]}}]},
         r"configuration\.codecs: required .* but missing"),
    ],
)  # fmt: skip
def test_configuration_members_gpuzarr_would_ignore_are_refused(changes: dict[str, Any], field: str) -> None:
    """zarr-python and TensorStore refuse these too."""
    from gpuzarr.layout import ArrayLayout

    with pytest.raises(MetadataError, match=field):
        ArrayLayout.from_metadata(ArrayMetadata.from_json(doc(**changes)), "")  # the codecs resolved too
