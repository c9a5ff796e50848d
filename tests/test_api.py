"""The public entry points: create/open and their modes, attributes, dimension names, read-only
handling, devices, and what ``import gpuzarr`` loads."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import (
    ContainsNodeError,
    DeviceError,
    InvalidArgumentError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
    UnwritableValueError,
)

if TYPE_CHECKING:
    from tests.servers import HttpServer


def _new(store: gpuzarr.Store | str, **kwargs: object) -> gpuzarr.Array:
    kwargs.setdefault("shape", (6, 5))
    kwargs.setdefault("dtype", "int32")
    kwargs.setdefault("chunks", (4, 2))
    return gpuzarr.create(store, **kwargs)  # type: ignore[arg-type]


# -- create / overwrite ----------------------------------------------------------------------------


def test_create_on_existing_node_raises(store: gpuzarr.Store) -> None:
    a = _new(store)
    a[...] = 1
    with pytest.raises(ContainsNodeError):
        _new(store)
    with pytest.raises(FileExistsError):  # also the builtin
        _new(store, shape=(3,), chunks=(3,))
    np.testing.assert_array_equal(gpuzarr.open(store)[...], np.ones((6, 5)))


def test_create_on_existing_group_raises(store: gpuzarr.Store) -> None:
    gpuzarr.create_group(store)
    with pytest.raises(ContainsNodeError):
        _new(store)


def test_overwrite_discards_old_data(store: gpuzarr.Store) -> None:
    a = _new(store)
    a[...] = 7
    b = _new(store, overwrite=True, fill_value=-1)
    np.testing.assert_array_equal(b[...], np.full((6, 5), -1))
    assert [k for k in store.list_prefix("") if k != "zarr.json"] == []
    c = _new(store, overwrite=True, shape=(10,), chunks=(3,), dtype="float32")
    assert c.shape == (10,) and c.dtype == np.float32
    np.testing.assert_array_equal(gpuzarr.open(store)[...], np.zeros(10, "float32"))


def test_bad_codecs_leave_the_store_untouched(store: gpuzarr.Store) -> None:
    with pytest.raises(gpuzarr.errors.MetadataError):
        _new(store, codecs=[{"name": "bytes"}, {"name": "no-such-codec"}])
    assert list(store.list_prefix("")) == []


# -- attributes and dimension names ------------------------------------------------------------------


def test_attrs_behave_like_a_dict_and_persist(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    a = _new(path, attributes={"units": "m"})
    attrs = a.attrs
    assert dict(attrs) == {"units": "m"} and len(attrs) == 1 and "units" in attrs
    attrs["scale"] = [1, 2.5]
    attrs.update({"nested": {"k": None}}, flag=True)
    del attrs["units"]
    assert attrs.get("units") is None
    with pytest.raises(KeyError):
        attrs["units"]
    assert sorted(attrs) == ["flag", "nested", "scale"]
    reopened = gpuzarr.open(path)
    assert dict(reopened.attrs) == {"scale": [1, 2.5], "nested": {"k": None}, "flag": True}
    assert json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())["attributes"] == dict(reopened.attrs)
    reopened.attrs.put({"only": 1})
    assert dict(gpuzarr.open(path).attrs) == {"only": 1}
    with pytest.raises(ValueError):
        reopened.attrs["bad"] = object()
    with pytest.raises(ValueError):
        reopened.attrs["nan"] = float("nan")
    assert dict(gpuzarr.open(path).attrs) == {"only": 1}


def test_attributes_must_be_json(store: gpuzarr.Store) -> None:
    with pytest.raises(gpuzarr.errors.MetadataError):
        _new(store, attributes={"x": object()})


def test_group_attrs_persist(store: gpuzarr.Store) -> None:
    g = gpuzarr.create_group(store, attributes={"a": 1})
    g.attrs["b"] = 2
    assert dict(gpuzarr.open_group(store).attrs) == {"a": 1, "b": 2}


def test_dimension_names_stored(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    a = _new(str(path), dimension_names=["y", None])
    assert a.dimension_names == ("y", None)
    assert json.loads((path / "zarr.json").read_text())["dimension_names"] == ["y", None]
    assert gpuzarr.open(str(path)).dimension_names == ("y", None)
    b = _new(str(tmp_path / "b.zarr"))
    assert b.dimension_names is None
    assert "dimension_names" not in json.loads((tmp_path / "b.zarr" / "zarr.json").read_text())
    with pytest.raises(ValueError):
        _new(str(tmp_path / "c.zarr"), dimension_names=["only-one"])


# -- modes -----------------------------------------------------------------------------------------


def test_mode_r_refuses_every_write(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _new(path)[...] = 3
    a = gpuzarr.open(path, mode="r")
    assert a.read_only
    with pytest.raises(ReadOnlyError):
        a[0, 0] = 1
    with pytest.raises(ReadOnlyError):
        a.oindex[[0], :] = 1
    with pytest.raises(ReadOnlyError):
        a.vindex[[0], [0]] = 1
    with pytest.raises(PermissionError):
        a.attrs["x"] = 1
    with pytest.raises(ReadOnlyError):
        a.resize((2, 2))
    with pytest.raises(ReadOnlyError):
        gpuzarr.open(path, mode="r").attrs.update(x=1)
    np.testing.assert_array_equal(a[...], np.full((6, 5), 3))
    assert a.shape == (6, 5) and dict(a.attrs) == {}
    # Mode "r+" on a read-only store is refused when it is opened, as zarr-python refuses it
    # (it opened read-only, and the first write failed); mode "a" opens it to read.
    with pytest.raises(ReadOnlyError, match="read-only, but mode 'r\\+' asks to write"):
        gpuzarr.open(gpuzarr.LocalStore(path, read_only=True), mode="r+")
    with pytest.raises(ReadOnlyError, match="mode 'r\\+'"):
        gpuzarr.open_group(gpuzarr.LocalStore(str(tmp_path), read_only=True), mode="r+")
    on_read_only_store = gpuzarr.open(gpuzarr.LocalStore(path, read_only=True), mode="a")
    with pytest.raises(ReadOnlyError):
        on_read_only_store[0, 0] = 1


def test_mode_r_on_a_read_only_view_leaves_the_callers_store_writable() -> None:
    store = gpuzarr.MemoryStore()
    _new(store)
    gpuzarr.open(store, mode="r")
    assert not store.read_only
    _new(store, overwrite=True)


def test_mode_r_and_r_plus_need_an_existing_node(tmp_path: Path) -> None:
    for mode in ("r", "r+"):
        with pytest.raises(NodeNotFoundError):
            gpuzarr.open(str(tmp_path / f"missing-{mode}.zarr"), mode=mode)
        with pytest.raises(FileNotFoundError):
            gpuzarr.open(str(tmp_path / f"missing-{mode}.zarr"), mode=mode, shape=(2,), dtype="i1")


def test_mode_r_plus_reads_and_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _new(path)
    a = gpuzarr.open(path, mode="r+")
    a[1, 1] = 5
    a.attrs["k"] = "v"
    b = gpuzarr.open(path, mode="r")
    assert b[1, 1] == 5 and b.attrs["k"] == "v"


def test_mode_a_opens_or_creates(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    a = gpuzarr.open(path, mode="a", shape=(4,), dtype="uint8", chunks=(2,))
    a[...] = [1, 2, 3, 4]
    again = gpuzarr.open(path, mode="a", shape=(9,), dtype="uint8", chunks=(3,))
    assert again.shape == (4,)  # existing data is kept, not replaced
    np.testing.assert_array_equal(again[...], [1, 2, 3, 4])
    with pytest.raises(NodeNotFoundError):
        gpuzarr.open(str(tmp_path / "nothing.zarr"), mode="a")  # no shape: nothing to create


@pytest.mark.parametrize(("zarr_format", "then"), [(3, set()), (2, {".zarray", ".zattrs"})])
def test_open_reads_metadata_without_asking_whether_it_exists(
    http_server: HttpServer, zarr_format: int, then: set[str]
) -> None:
    """Opening with the default mode ("a") and no shape cannot create anything: the metadata
    is read at once, with no HEAD before it (one round trip each on an object store); a v2
    array's .zarray and .zattrs are asked for together, after zarr.json."""
    _new(str(http_server.directory / "a.zarr"), zarr_format=zarr_format)[...] = 3
    http_server.reset()
    http_server.delay_next(3, 0.2)  # each answer takes a while: requests sent together overlap
    a = gpuzarr.open(f"{http_server.url}/a.zarr")
    assert a.shape == (6, 5)
    requests = http_server.requests
    assert requests[0] == ("GET", "/a.zarr/zarr.json", None)
    assert sorted(requests[1:]) == [("GET", f"/a.zarr/{key}", None) for key in sorted(then)]
    assert http_server.max_in_flight == (2 if then else 1)


def test_mode_w_replaces(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _new(path)[...] = 9
    a = gpuzarr.open(path, mode="w", shape=(3,), dtype="float64", chunks=(2,))
    assert a.shape == (3,)
    np.testing.assert_array_equal(gpuzarr.open(path)[...], np.zeros(3))
    files = [p.name for p in (tmp_path / "a.zarr").rglob("*") if p.is_file()]
    assert files == ["zarr.json"]


def test_mode_w_minus_fails_if_it_exists(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    gpuzarr.open(path, mode="w-", shape=(3,), dtype="int8", chunks=(3,))[...] = 1
    with pytest.raises(ContainsNodeError):
        gpuzarr.open(path, mode="w-", shape=(3,), dtype="int8", chunks=(3,))
    np.testing.assert_array_equal(gpuzarr.open(path, mode="r")[...], [1, 1, 1])


def test_overwrite_may_repeat_the_mode_but_not_contradict_it(tmp_path: Path) -> None:
    from gpuzarr.errors import InvalidArgumentError

    path = str(tmp_path / "a.zarr")
    _new(path)[...] = 9
    a = gpuzarr.open(path, mode="w", shape=(3,), dtype="float64", chunks=(2,), overwrite=True)
    np.testing.assert_array_equal(a[...], np.zeros(3))
    assert gpuzarr.open_array(path, mode="w", shape=(2,), dtype="i1", overwrite=True).shape == (2,)
    assert isinstance(gpuzarr.open(str(tmp_path / "g.zarr"), mode="w", overwrite=True), gpuzarr.Group)
    assert gpuzarr.open(path, mode="a", overwrite=False).shape == (2,)
    for mode, overwrite in (("w", False), ("w-", True), ("a", True), ("r+", True)):
        with pytest.raises(InvalidArgumentError, match=re.escape(f"overwrite={overwrite} contradicts mode '{mode}'")):
            gpuzarr.open(path, mode=mode, shape=(5,), dtype="i1", overwrite=overwrite)  # type: ignore[arg-type]
    assert gpuzarr.open(path, mode="r").shape == (2,)  # untouched


def test_what_open_passes_on_to_create_are_options_create_takes_and_open_does_not_set() -> None:
    import inspect

    from gpuzarr.api import CREATE_OPTIONS

    taken = set(inspect.signature(gpuzarr.create).parameters)
    assert taken >= CREATE_OPTIONS, CREATE_OPTIONS - taken
    # open() passes these itself: given again through **create_kwargs they would collide.
    assert not CREATE_OPTIONS & {"store", "path", "overwrite", "device", "storage_options"}


def test_unknown_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        gpuzarr.open(str(tmp_path / "a.zarr"), mode="x")  # type: ignore[arg-type]


def test_open_group_modes(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")
    with pytest.raises(NodeNotFoundError):
        gpuzarr.open_group(path, mode="r")
    g = gpuzarr.open_group(path, mode="a")
    g.create_array("x", shape=(2,), dtype="i2", chunks=(2,))
    assert list(gpuzarr.open_group(path, mode="r")) == ["x"]
    with pytest.raises(ContainsNodeError):
        gpuzarr.open_group(path, mode="w-")
    assert list(gpuzarr.open_group(path, mode="w")) == []


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_open_group_takes_the_attributes_of_a_group_it_creates(tmp_path: Path, zarr_format: int) -> None:
    path = str(tmp_path / "g.zarr")
    created = gpuzarr.open_group(path, mode="w", attributes={"a": 1}, zarr_format=zarr_format)
    assert dict(created.attrs) == {"a": 1}
    assert dict(gpuzarr.open_group(path, mode="a", attributes={"b": 2}).attrs) == {"a": 1}  # kept its own
    assert dict(gpuzarr.open_group(str(tmp_path / "new.zarr"), mode="a", attributes={"c": 3}).attrs) == {"c": 3}


# -- devices and imports ---------------------------------------------------------------------------


def test_device_gpu_raises_and_auto_works(store: gpuzarr.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuzarr.backends import select as device_module

    monkeypatch.setattr(device_module, "gpu_unavailable_reason", lambda: "no GPU in this test")
    monkeypatch.delenv("GPUZARR_DEVICE", raising=False)
    with pytest.raises(DeviceError):
        _new(store, device="gpu")
    assert list(store.list_prefix("")) == []
    a = _new(store, device="auto")
    a[...] = 2
    assert isinstance(a[...], np.ndarray)
    for device in ("gpu", "cuda", "cuda:0"):
        with pytest.raises(DeviceError):
            gpuzarr.open(store, device=device)
    with pytest.raises(DeviceError):
        gpuzarr.open(store, device="tpu")
    assert gpuzarr.open(store, device="cpu").device == "cpu"
    assert isinstance(gpuzarr.open(store, device="auto")[...], np.ndarray)


def test_import_loads_no_gpu_library() -> None:
    code = (
        "import sys, gpuzarr\n"
        "a = gpuzarr.create(gpuzarr.MemoryStore(), shape=(4,), dtype='f4', chunks=(2,))\n"
        "a[...] = 1; a[...]\n"
        "bad = [m for m in ('cupy', 'kvikio', 'nvidia.nvcomp', 'nvidia') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_import_starts_no_threads() -> None:
    code = "import threading, gpuzarr\nassert threading.active_count() == 1, threading.enumerate()\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_mode_w_without_shape_creates_a_group_like_zarr_python(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    _new(path)[...] = 1
    g = gpuzarr.open(path, mode="w")
    assert isinstance(g, gpuzarr.Group) and list(g) == []
    with pytest.raises(ContainsNodeError):
        gpuzarr.open(path, mode="w-")
    assert isinstance(gpuzarr.open(str(tmp_path / "new.zarr"), mode="w-"), gpuzarr.Group)
    _new(path, overwrite=True)
    with pytest.raises(TypeError):
        gpuzarr.open_array(path, mode="w")
    assert isinstance(gpuzarr.open(path), gpuzarr.Array)  # not replaced by the failed call


def test_open_with_field_reads_one_field_of_a_structured_array(tmp_path) -> None:
    dt = np.dtype([("a", "<i4"), ("b", "<f8", (3,))])
    x = np.zeros(5, dt)
    x["a"] = np.arange(5)
    x["b"] = np.arange(15).reshape(5, 3)
    a = gpuzarr.create(str(tmp_path / "s.zarr"), zarr_format=2, shape=(5,), chunks=(2,), dtype=dt)
    a[...] = x
    assert gpuzarr.open(str(tmp_path / "s.zarr"))[...].tobytes() == x.tobytes()
    b = gpuzarr.open(str(tmp_path / "s.zarr"), field="b")
    assert b.shape == (5, 3) and b.dtype == np.float64
    np.testing.assert_array_equal(b[1:3, 1:], x["b"][1:3, 1:])
    with pytest.raises(gpuzarr.errors.MetadataError, match="field"):
        gpuzarr.open(str(tmp_path / "s.zarr"), field="c")


def test_open_rejects_unknown_keywords(tmp_path) -> None:
    gpuzarr.create(str(tmp_path / "a.zarr"), shape=(4,), dtype="i2")
    with pytest.raises(TypeError, match="feild"):
        gpuzarr.open(str(tmp_path / "a.zarr"), feild="x")
    # Creation arguments with mode "a" apply only when nothing exists: the array is opened as is.
    assert gpuzarr.open(str(tmp_path / "a.zarr"), mode="a", shape=(9,), dtype="i4").shape == (4,)


def test_bad_arguments_are_gpuzarr_errors_and_value_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gpuzarr.errors import GpuZarrError, InvalidArgumentError

    a = gpuzarr.create(tmp_path / "a.zarr", shape=(4, 4), dtype="u1", chunks=(2, 2))
    calls = [
        lambda: a.read_batch([]),
        lambda: a.read_batch([(slice(0, 2), slice(0, 2)), (slice(0, 1), slice(0, 2))]),
        lambda: a.resize((4,)),
        lambda: a.resize((4, -1)),
        lambda: a.__setitem__((slice(0, 2), slice(0, 2)), np.zeros((3, 3), "u1")),
        lambda: a.read(out=np.zeros((4, 3), "u1")),
        lambda: gpuzarr.open(tmp_path / "a.zarr", mode="rw"),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert isinstance(info.value, GpuZarrError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_codec_chain_errors_name_the_metadata_document(zarr_format: int) -> None:
    store = gpuzarr.MemoryStore()
    gpuzarr.create(store=store, shape=(4,), dtype="u1", path="a", zarr_format=zarr_format)
    key = "a/zarr.json" if zarr_format == 3 else "a/.zarray"
    doc = json.loads(bytes(store.get(key)))  # type: ignore[arg-type]
    if zarr_format == 3:
        doc["codecs"].append({"name": "gzip", "configuration": {"level": "high"}})
    else:
        doc["compressor"] = {"id": "blosc", "clevel": "high"}
    store.set(key, json.dumps(doc).encode())
    # A v2 codec is named by its .zarray field, not by its place in the equivalent v3 chain.
    where = "codecs\\[\\d\\]" if zarr_format == 3 else "compressor"
    with pytest.raises(MetadataError, match=f"^{key}: {where} .*: configuration.c?level: expected an integer"):
        gpuzarr.open_array(store, path="a", mode="r")


# -- node paths --------------------------------------------------------------------------------------

ESCAPING_NODE_PATHS = ["../escape", "a/../../escape", "./a", "a/./b", "a//b", ".."]


@pytest.mark.parametrize("path", ESCAPING_NODE_PATHS)
def test_node_paths_with_dot_components_are_refused_by_name(tmp_path: Path, path: str) -> None:
    from gpuzarr.errors import InvalidKeyError

    root = tmp_path / "data.zarr"
    calls = [
        lambda: gpuzarr.open(str(root), path=path, mode="w", shape=(2,), dtype="u1"),
        lambda: gpuzarr.open(str(root), path=path, mode="r"),
        lambda: gpuzarr.create(str(root), path=path, shape=(2,), dtype="u1"),
        lambda: gpuzarr.open_group(str(root), path=path, mode="a"),
        lambda: gpuzarr.create_group(str(root), path=path),
        lambda: gpuzarr.open_array(str(root), path=path, mode="r"),
    ]
    for call in calls:
        with pytest.raises(InvalidKeyError, match=r"^path: invalid path"):
            call()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_group_members_cannot_name_a_parent(tmp_path: Path) -> None:
    g = gpuzarr.open_group(str(tmp_path / "data.zarr"), mode="w")
    for name in ("..", "a/../..", "a//b", "."):
        with pytest.raises(ValueError, match="node name"):
            g.create_array(name, shape=(2,), dtype="u1")
        with pytest.raises(ValueError, match="node name"):
            g[name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.zarr"]


def test_convert_and_print_debug_info_load_on_first_use() -> None:
    # Their modules (the copy engine, importlib.metadata) cost import time few programs need.
    import subprocess
    import sys

    probe = (
        "import sys, gpuzarr; before = {'gpuzarr.copying', 'gpuzarr.debug_info'} & set(sys.modules); "
        "gpuzarr.convert, gpuzarr.print_debug_info; from gpuzarr import *; "
        "print(sorted(before), callable(convert), callable(print_debug_info))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "[] True True", done.stderr


def test_release_gpu_buffers_loads_no_gpu_library() -> None:
    # Callable on a machine without CuPy: it only empties gpuzarr's own pools.
    import subprocess
    import sys

    probe = (
        "import sys, gpuzarr; gpuzarr.release_gpu_buffers(); "
        "print(sorted({'cupy', 'kvikio', 'nvidia.nvcomp'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("value", ["abc", np.nan, np.inf, 2**40, None, 1 + 2j])
def test_a_value_that_does_not_convert_raises_a_gpuzarr_error_naming_the_array(tmp_path: Path, value: Any) -> None:
    g = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    a = g.create_array("ints", shape=(4,), chunks=(2,), dtype="int32")
    with pytest.raises(UnwritableValueError, match=r"array 'ints': cannot write .* as int32") as raised:
        a[:] = value
    assert isinstance(raised.value, (TypeError, ValueError))  # what NumPy raises, either
    with pytest.raises(UnwritableValueError, match="cannot write"):
        a.oindex[[0, 2]] = value
    assert list(g.store.list_prefix("ints/c")) == []  # nothing written


def test_a_lone_surrogate_is_not_written_into_a_string_array(tmp_path: Path) -> None:
    s = gpuzarr.create_array(str(tmp_path / "s.zarr"), shape=(2,), chunks=(2,), dtype="string")
    with pytest.raises(UnwritableValueError, match="cannot write"):
        s[:] = "\ud800"


@pytest.mark.parametrize(
    "where",
    ["path", "pathlike", "memory", "zip", "store", "file-kvstore", "zip-kvstore", "memory-kvstore"],
)
def test_storage_options_for_a_store_that_takes_none_are_refused(tmp_path: Path, where: str) -> None:
    """They configure object stores, HTTP and fsspec; anywhere else they were ignored silently
    (zarr-python refuses them too); kvstore dicts and TensorStore specs ignored them until now."""
    file_kvstore = {"driver": "file", "path": str(tmp_path / "a.zarr") + "/"}
    target: Any = {
        "path": str(tmp_path / "a.zarr"),
        "pathlike": tmp_path / "a.zarr",
        "memory": "memory://options",
        "zip": str(tmp_path / "a.zip"),
        "store": gpuzarr.store.MemoryStore(),
        "file-kvstore": file_kvstore,
        "zip-kvstore": {"driver": "zip", "base": {"driver": "file", "path": str(tmp_path / "a.zip")}},
        "memory-kvstore": {"driver": "memory"},
    }[where]
    with pytest.raises(InvalidArgumentError, match=r"storage_options: .* takes none .*\['region'\]"):
        gpuzarr.create(target, shape=(2,), dtype="i1", storage_options={"region": "x"})
    gpuzarr.create(target, shape=(2,), dtype="i1", storage_options={})  # empty: nothing to ignore


def test_storage_options_for_a_spec_whose_kvstore_takes_none_are_refused(tmp_path: Path) -> None:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a.zarr") + "/"}, "create": True}
    with pytest.raises(InvalidArgumentError, match=r"storage_options: a 'file' kvstore takes none .*\['region'\]"):
        gpuzarr.open(spec, shape=[2], dtype="int8", storage_options={"region": "x"})
    assert not (tmp_path / "a.zarr").exists()
    gpuzarr.open(spec, shape=[2], dtype="int8", storage_options={})


@pytest.mark.parametrize("size", [5.7, 5.0, "5", True, None])
def test_resize_takes_integers_only(size: Any) -> None:
    """A float was cut down (5.7 to 5) and the elements beyond erased; zarr-python refuses it."""
    array = gpuzarr.create(None, data=np.arange(8), chunks=(4,), device="cpu")
    with pytest.raises(InvalidArgumentError, match="resize: shape entries must be integers"):
        array.resize(size)
    np.testing.assert_array_equal(array[...], np.arange(8))
    array.resize(np.int64(5))
    assert array.shape == (5,)


@pytest.mark.parametrize("shape", [np.array([5, 4]), range(5, 3, -1), [np.int64(5), np.int32(4)]])
def test_resize_takes_a_sequence_of_sizes(shape: Any) -> None:
    # resize(np.array(a.shape) * 2) is a common idiom; zarr-python takes it.
    array = gpuzarr.create(None, data=np.arange(12).reshape(3, 4), chunks=(2, 2), device="cpu")
    array.resize(shape)
    assert array.shape == (5, 4)
    np.testing.assert_array_equal(array[:3], np.arange(12).reshape(3, 4))


def test_resize_takes_a_0_d_array_as_a_size() -> None:
    array = gpuzarr.create(None, data=np.arange(6), chunks=(4,), device="cpu")
    array.resize(np.array(4))  # iterated as a sequence: a bare TypeError
    np.testing.assert_array_equal(array[...], np.arange(4))


def test_a_resize_refused_for_assume_metadata_erases_nothing(tmp_path: Path) -> None:
    """The refusal came from the metadata write, after the chunks outside the new shape were
    erased and the straddling one cleared: the stored array kept its shape and lost its data."""
    path = tmp_path / "a.zarr"
    gpuzarr.create_array(str(path), data=np.arange(1, 11, dtype="i4"), chunks=(4,), compressors=None)
    metadata = {"shape": [10], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
                "data_type": "int32"}  # fmt: skip
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "assume_metadata": True,
            "metadata": metadata}  # fmt: skip
    assumed = gpuzarr.open(spec)
    for change in (lambda: assumed.resize((3,)), lambda: assumed.append(np.zeros(2, "i4"))):
        with pytest.raises(MetadataError, match="assume_metadata"):
            change()
        np.testing.assert_array_equal(gpuzarr.open_array(str(path), mode="r")[...], np.arange(1, 11))


@pytest.mark.parametrize("shards", [None, (4, 8)])
def test_a_shrink_with_write_empty_chunks_stores_no_chunk_of_fill(tmp_path: Path, shards: Any) -> None:
    """Clearing the chunks across the new edge went through the array's writes, which with
    write_empty_chunks stored every absent chunk (shard) along the edge, full of fill."""
    path = tmp_path / "a.zarr"
    array = gpuzarr.create_array(str(path), shape=(10, 16), chunks=(4, 4), shards=shards, dtype="i4", fill_value=0,
                                 config={"write_empty_chunks": True})  # fmt: skip
    array[0, 0] = 1
    array[5, 9] = 2
    array.resize((6, 16))
    stored = sorted(str(p.relative_to(path / "c")) for p in (path / "c").rglob("*") if p.is_file())
    assert stored == (["0/0", "1/2"] if shards is None else ["0/0", "1/1"])
    expected = np.zeros((6, 16), "i4")
    expected[0, 0], expected[5, 9] = 1, 2
    np.testing.assert_array_equal(gpuzarr.open_array(str(path), mode="r")[...], expected)


@pytest.mark.parametrize(
    "write",
    [
        lambda a: a.__setitem__((slice(0, 2), slice(0, 3)), np.ones((1, 2, 3))),
        lambda a: a.oindex.__setitem__(([0, 1], [0, 1, 2]), np.ones((1, 1, 2, 3))),
        lambda a: a.vindex.__setitem__(([0, 1], [0, 1]), np.ones((1, 2))),
    ],
    ids=["basic", "oindex", "vindex"],
)
def test_a_value_with_leading_axes_of_length_one_writes_as_numpy_does(write: Any) -> None:
    # NumPy's assignment drops them, and so does zarr-python's.
    array = gpuzarr.create(None, shape=(4, 6), chunks=(2, 4), dtype="i4", device="cpu")
    write(array)
    assert int(array[...].sum()) in (6, 2) and array[0, 0] == 1
    with pytest.raises(gpuzarr.errors.InvalidArgumentError, match="could not broadcast"):
        array[0:2, 0:3] = np.ones((2, 2, 3))


@pytest.mark.parametrize("opener", ["open", "open_array"])
@pytest.mark.parametrize("mode", ["r+", "a"])
@pytest.mark.parametrize("option", [{"config": {"write_empty_chunks": True}}, {"write_empty_chunks": True}])
def test_config_given_to_open_applies_to_the_existing_array(
    tmp_path: Path, opener: str, mode: str, option: dict[str, Any]
) -> None:
    """It was ignored: chunks of fill were still erased (zarr.open applies it)."""
    path = tmp_path / "a.zarr"
    gpuzarr.create_array(str(path), shape=(4,), chunks=(2,), dtype="i4", fill_value=0)
    array = getattr(gpuzarr, opener)(str(path), mode=mode, **option)
    assert array.config.write_empty_chunks is True and array.config.order == "C"  # as zarr-python's ArrayConfig
    assert array.config.to_dict() == {"order": "C", "write_empty_chunks": True}
    array[...] = 0
    assert sorted(p.name for p in (path / "c").iterdir()) == ["0", "1"]


def test_with_config_gives_a_handle_with_the_keys_given_and_the_others_kept(tmp_path: Path) -> None:
    import zarr

    array = gpuzarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), chunks=(2,), dtype="i4", fill_value=0,
                                 config={"write_empty_chunks": True})  # fmt: skip
    assert array.with_config({"order": "C"}).config.write_empty_chunks is True
    assert array.with_config(array.config).config == array.config
    erasing = array.with_config(zarr.core.array_spec.ArrayConfig(order="C", write_empty_chunks=False))
    assert erasing.config.write_empty_chunks is False and array.config.write_empty_chunks is True
    erasing[...] = 0
    assert not (tmp_path / "a.zarr" / "c").exists() or not any((tmp_path / "a.zarr" / "c").iterdir())
    with pytest.raises(InvalidArgumentError, match="unknown key"):
        array.with_config({"write_empty": True})
    with pytest.raises(InvalidArgumentError, match="order 'F'"):
        array.with_config({"order": "F"})


@pytest.mark.parametrize("layout", [{"zarr_format": 2}, {"shards": (4, 4, 6)}, {}], ids=["v2", "sharded", "v3"])
def test_mixes_of_index_arrays_masks_and_slices_read_and_write_as_numpy_does(layout: dict[str, Any]) -> None:
    data = np.arange(5 * 8 * 6, dtype="i4").reshape(5, 8, 6)
    array = gpuzarr.create(None, data=data, chunks=(2, 2, 3), device="cpu", **layout)
    expected = data.copy()
    for sel in [([0, 4], slice(None), [5, 0]), (data[..., 0] % 3 == 0,), (slice(1, 4), [[7], [0]], [2, 2, 1])]:
        np.testing.assert_array_equal(array[sel], expected[sel])
        value = np.arange(expected[sel].size, dtype="i4").reshape(expected[sel].shape) + 1000
        expected[sel] = value
        array[sel] = value
        np.testing.assert_array_equal(array[...], expected)


def test_an_array_appended_to_itself_doubles(tmp_path: Path) -> None:
    # It was read after it grew, in its new shape ("could not broadcast"); zarr-python fails too.
    array = gpuzarr.create(str(tmp_path / "a.zarr"), data=np.arange(4), chunks=(3,))
    assert array.append(array) == (8,)
    np.testing.assert_array_equal(array[...], np.concatenate([np.arange(4), np.arange(4)]))


def test_append_of_a_value_that_cannot_be_written_leaves_the_array_as_it_was() -> None:
    """The array grew before the value was converted: a failed append left it longer by rows
    of fill value (zarr-python's does too)."""
    array = gpuzarr.create(None, data=np.ones((3, 2), "u1"), chunks=(2, 2), device="cpu")
    with pytest.raises(UnwritableValueError):
        array.append([["x", "y"]])
    assert array.shape == (3, 2)
    assert array.append([[7, 8]]) == (4, 2)
    np.testing.assert_array_equal(array[...], [[1, 1], [1, 1], [1, 1], [7, 8]])


@pytest.mark.parametrize("form", ["{zip}/sub/f", "zip://{zip}/sub/f", "{zip}/sub//f/"])
def test_a_path_inside_a_zip_archive_opens_the_node_there(tmp_path: Path, form: str) -> None:
    """``data.zip/raw/labels`` names a node inside an existing archive, as a path inside a
    folder does (the command line had no way to name one)."""
    archive = tmp_path / "o.zip"
    group = gpuzarr.open_group(str(archive), mode="w")
    group.create_group("sub").create_array("f", shape=(4,), dtype="i2")[...] = np.arange(4)
    group.store.close()
    node = gpuzarr.open(form.format(zip=archive), mode="r")
    assert isinstance(node, gpuzarr.Array) and node.path == "sub/f"
    np.testing.assert_array_equal(node[...], np.arange(4))
    node.store.close()


def test_a_new_node_inside_an_existing_zip_archive_is_written_there(tmp_path: Path) -> None:
    archive = tmp_path / "o.zip"
    gpuzarr.open_group(str(archive), mode="w").store.close()
    array = gpuzarr.create(str(archive / "new"), data=np.arange(3), chunks=(2,))
    array.store.close()
    reopened = gpuzarr.open_group(str(archive), mode="r")
    np.testing.assert_array_equal(reopened["new"][...], np.arange(3))
    reopened.store.close()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_attributes_with_nan_a_document_held_are_kept_by_resizes_and_attribute_changes(
    tmp_path: Path, zarr_format: int
) -> None:
    """zarr-python writes NaN and infinite numbers into attributes (no JSON); gpuzarr refused
    to write such a document back, so the array could not be resized, appended to or have
    other attributes changed. Those the document held are kept; gpuzarr writes none of its own."""
    path = tmp_path / "a.zarr"
    gpuzarr.create(str(path), data=np.arange(1, 5, dtype="f4"), chunks=(2,), zarr_format=zarr_format)
    document = path / (".zattrs" if zarr_format == 2 else "zarr.json")
    if zarr_format == 2:
        document.write_text('{"valid_max": Infinity, "m": [NaN]}')
    else:
        doc = json.loads(document.read_text())
        doc["attributes"] = {"valid_max": float("inf"), "m": [float("nan")]}
        document.write_text(json.dumps(doc))  # Infinity and NaN, as zarr-python writes them
    array = gpuzarr.open_array(str(path), mode="r+", device="cpu")
    array.resize((3,))
    array.append([5.0])
    array.attrs["units"] = "K"
    for bad in ({"new": float("nan")}, {"valid_max": float("-inf")}, {"m": [float("inf")]}):
        with pytest.raises(MetadataError, match=r"attributes\['\w+'\].*: NaN and infinite numbers are not JSON"):
            array.attrs.update(bad)
    again = gpuzarr.open_array(str(path), mode="r", device="cpu")
    np.testing.assert_array_equal(again[...], [1, 2, 3, 5])
    attrs = dict(again.attrs)
    assert math.isnan(attrs.pop("m")[0]) and attrs == {"valid_max": float("inf"), "units": "K"}
    assert "Infinity" in document.read_text()


def test_a_group_keeps_the_nan_attributes_its_document_held(tmp_path: Path) -> None:
    group = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    document = tmp_path / "g.zarr" / "zarr.json"
    doc = json.loads(document.read_text())
    doc["attributes"] = {"lo": float("-inf")}
    document.write_text(json.dumps(doc))
    group = gpuzarr.open_group(str(tmp_path / "g.zarr"), mode="r+")
    group.attrs["title"] = "t"
    with pytest.raises(MetadataError, match="not JSON"):
        group.attrs["hi"] = float("inf")
    assert dict(gpuzarr.open_group(str(tmp_path / "g.zarr")).attrs) == {"lo": float("-inf"), "title": "t"}


@pytest.mark.parametrize("opener", ["open", "open_group", "open_array"])
def test_mode_w_minus_refuses_a_place_that_holds_other_files(tmp_path: Path, opener: str) -> None:
    """zarr-python raises FileExistsError ("already contains data"); gpuzarr wrote a node beside
    the files that were there."""
    place = tmp_path / "p"
    place.mkdir()
    (place / "notes.txt").write_text("not Zarr")
    kwargs: dict[str, Any] = {"shape": (2,), "dtype": "i1"} if opener == "open_array" else {}
    with pytest.raises(FileExistsError, match=r"already holds data .*'notes\.txt'"):
        getattr(gpuzarr, opener)(str(place), mode="w-", **kwargs)
    assert sorted(p.name for p in place.iterdir()) == ["notes.txt"]
    fresh = tmp_path / "fresh"
    assert getattr(gpuzarr, opener)(str(fresh), mode="w-", **kwargs) is not None


@pytest.mark.parametrize("names", [[1, "x"], [None, b"x"], 7])
def test_dimension_names_other_than_strings_are_refused_at_creation(tmp_path: Path, names: Any) -> None:
    """``[1, "x"]`` was written, and the array could not be opened again (zarr-python refuses
    it too); bytes failed in the JSON encoder with a TypeError."""
    path = str(tmp_path / "a.zarr")
    with pytest.raises(MetadataError, match="dimension_names: expected"):
        gpuzarr.create_array(path, shape=(2, 3), dtype="i1", dimension_names=names)
    assert not (tmp_path / "a.zarr" / "zarr.json").exists()


# -- zarr-python's forms of the creation arguments -----------------------------------------------


def _zarr_metadata(path: Path) -> dict[str, Any]:
    zarr = pytest.importorskip("zarr")
    document = zarr.open_array(str(path), mode="r").metadata.to_dict()
    return json.loads(json.dumps(document, default=list))


@pytest.mark.filterwarnings("ignore:Automatic shard shape inference is experimental")
@pytest.mark.parametrize("shards", ["auto", {"shape": (50, 60), "index_location": "start"}])
def test_shards_auto_and_the_dict_form_are_zarr_pythons(tmp_path: Path, shards: Any) -> None:
    # Both raised a bare ValueError ("invalid literal for int()").
    zarr = pytest.importorskip("zarr")
    chunks = "auto" if shards == "auto" else (10, 12)
    zarr.create_array(str(tmp_path / "z"), shape=(100, 120), dtype="i4", chunks=chunks, shards=shards)
    ours = gpuzarr.create_array(tmp_path / "g", shape=(100, 120), dtype="i4", chunks=chunks, shards=shards)
    theirs = _zarr_metadata(tmp_path / "z")
    assert _zarr_metadata(tmp_path / "g")["chunk_grid"] == theirs["chunk_grid"]
    assert _zarr_metadata(tmp_path / "g")["codecs"] == theirs["codecs"]
    ours[...] = np.arange(12000, dtype="i4").reshape(100, 120)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "g"), mode="r")[...], ours[...])
    # Without index_location: at the end (zarr-python 3.1.6 raises there, a ValueError of its own).
    plain = gpuzarr.create_array(tmp_path / "e", shape=(10,), dtype="i4", chunks=(5,), shards={"shape": (10,)})
    assert plain.metadata.codecs[0]["configuration"]["index_location"] == "end"
    with pytest.raises(MetadataError, match=r"^shards\.index_location"):
        bad = {"shape": (10,), "index_location": "middle"}
        gpuzarr.create_array(tmp_path / "bad", shape=(10,), dtype="i4", chunks=(5,), shards=bad)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_chunk_key_encodings_and_order_none_in_every_creation_call(tmp_path: Path, zarr_format: int) -> None:
    # Group.create_array and gpuzarr.create took fewer of zarr-python's forms than
    # gpuzarr.create_array (MetadataError), and refused order=None, zarr-python's default.
    pytest.importorskip("zarr")
    from zarr.core.chunk_key_encodings import V2ChunkKeyEncoding

    forms = [{"name": "v2", "separator": "/"}, ("v2", "/"), V2ChunkKeyEncoding(separator="/")]
    root = gpuzarr.open_group(tmp_path / "h.zarr", mode="w", zarr_format=zarr_format)
    for k, form in enumerate(forms):
        made = [
            root.create_array(f"g{k}", shape=(4, 4), chunks=(2, 2), dtype="i2", chunk_key_encoding=form, order=None),
            gpuzarr.create(
                tmp_path / "h.zarr", path=f"c{k}", shape=(4, 4), chunks=(2, 2), dtype="i2",
                chunk_key_encoding=form, order=None, zarr_format=zarr_format,
            ),
            gpuzarr.zeros(
                (4, 4), store=tmp_path / "h.zarr", path=f"z{k}", chunks=(2, 2), dtype="i2",
                chunk_key_encoding=form, zarr_format=zarr_format,
            ),
        ]
        for array in made:
            array[...] = 3
            document = _zarr_metadata(tmp_path / "h.zarr" / array.path)
            if zarr_format == 2:
                assert document["dimension_separator"] == "/"
            else:
                assert document["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "/"}}
            assert (tmp_path / "h.zarr" / array.path / "1" / "1").exists()
    if zarr_format == 3:  # as gpuzarr.create_array: the memory order of reads is C
        with pytest.raises(InvalidArgumentError, match=r"^order 'F'"):
            root.create_array("f", shape=(4,), dtype="i2", order="F")


def test_write_empty_chunks_and_zarr_version_keywords(tmp_path: Path) -> None:
    # zarr.create, zeros/ones/full/empty and open_array take write_empty_chunks (a TypeError
    # here before); open and open_array take the deprecated zarr_version.
    for name, make in (
        ("create", lambda p, **k: gpuzarr.create(p, shape=(4,), chunks=(2,), dtype="i1", fill_value=0, **k)),
        ("zeros", lambda p, **k: gpuzarr.zeros((4,), store=p, chunks=(2,), dtype="i1", **k)),
        ("open_array", lambda p, **k: gpuzarr.open_array(p, mode="w", shape=(4,), chunks=(2,), dtype="i1", **k)),
    ):
        array = make(tmp_path / f"{name}.zarr", write_empty_chunks=True)
        array[...] = 0
        assert sorted(p.name for p in (tmp_path / f"{name}.zarr" / "c").iterdir()) == ["0", "1"]
    with pytest.raises(InvalidArgumentError, match=r"write_empty_chunks=False and config"):
        gpuzarr.create(tmp_path / "x.zarr", shape=(4,), dtype="i1", write_empty_chunks=False,
                       config={"write_empty_chunks": True})  # fmt: skip
    with pytest.warns(DeprecationWarning, match="zarr_version is deprecated"):
        old = gpuzarr.open_array(tmp_path / "v2.zarr", mode="w", shape=(4,), dtype="i1", zarr_version=2)
    assert old.zarr_format == 2


def test_from_array_fill_value_none_is_the_sources(tmp_path: Path) -> None:
    for zarr_format in (2, 3):
        source = gpuzarr.create(tmp_path / f"s{zarr_format}.zarr", shape=(4,), dtype="i4", fill_value=7,
                                zarr_format=zarr_format)  # fmt: skip
        copy = gpuzarr.from_array(tmp_path / f"c{zarr_format}.zarr", data=source, fill_value=None)
        assert copy.fill_value == 7


def test_save_array_takes_what_zarr_python_hands_to_create(tmp_path: Path) -> None:
    numcodecs = pytest.importorskip("numcodecs")
    data = np.arange(10, dtype="i4")
    gpuzarr.save_array(tmp_path / "a.zarr", data, zarr_format=2, compressor=numcodecs.Zlib(level=2),
                       dimension_separator="/", chunk_shape=(5,))  # fmt: skip
    document = _zarr_metadata(tmp_path / "a.zarr")
    assert document["compressor"] == {"id": "zlib", "level": 2} and document["dimension_separator"] == "/"
    assert document["chunks"] == [5]
    np.testing.assert_array_equal(gpuzarr.load(tmp_path / "a.zarr"), data)


def test_a_tensor_pytorch_cannot_turn_into_values_is_an_unwritable_value() -> None:
    torch = pytest.importorskip("torch")
    from gpuzarr.errors import UnwritableValueError

    array = gpuzarr.zeros(shape=(4,), chunks=(2,), dtype="f4", store=gpuzarr.MemoryStore())
    with pytest.raises(UnwritableValueError):
        array[...] = torch.empty(4, device="meta")  # has no data: NotImplementedError in PyTorch
    np.testing.assert_array_equal(array[...], 0)


@pytest.mark.parametrize("key", [1, 1.5, True, None])
def test_attribute_keys_that_are_not_strings_are_refused(key: Any) -> None:
    """JSON writes such keys as strings: {1: ..., "1": ...} became one key twice in zarr.json."""
    group = gpuzarr.open_group(gpuzarr.MemoryStore(), mode="w")
    with pytest.raises(gpuzarr.errors.MetadataError, match="keys must be strings"):
        group.attrs[key] = "x"
    with pytest.raises(gpuzarr.errors.MetadataError, match="keys must be strings"):
        group.attrs["nested"] = {"ok": [{key: 1}]}
    assert dict(group.attrs) == {}
