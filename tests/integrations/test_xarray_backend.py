"""The xarray engine ``"gpuzarr"`` against xarray's own ``"zarr"`` engine, on datasets written by
xarray's ``to_zarr`` (v2 and v3, consolidated or not, groups, CF encodings, strings and every
numeric width), and on groups written by gpuzarr; lazy reads counted at the store; options,
errors, pickling through a dask.distributed cluster, and ``device="gpu"`` on the emulated device."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("pandas")  # xarray needs it; the datasets are built with it

import gpuzarr  # noqa: E402
from gpuzarr.errors import DeviceError, GroupNotFoundError, InvalidArgumentError, MetadataError  # noqa: E402
from gpuzarr.integrations.xarray_array import GpuZarrBackendArray  # noqa: E402
from gpuzarr.integrations.xarray_backend import GpuZarrBackendEntrypoint  # noqa: E402
from gpuzarr.integrations.xarray_device import apply_mask  # noqa: E402

from .xarray_cases import cf_dataset, open_zarr_engine, quietly, write  # noqa: E402
from .xarray_engine import declared_entry_point  # noqa: E402

if TYPE_CHECKING:
    from ..backends.emulated_gpu import EmulatedGpu

pytestmark = pytest.mark.usefixtures("xarray_engine")

ROOT = Path(__file__).resolve().parents[2]


def _write_cases(tmp_path_factory: pytest.TempPathFactory, zarr_format: int, consolidated: bool) -> tuple[Path, int]:
    """cf_dataset() at the root and in the group "sub/deeper" of one store."""
    path = tmp_path_factory.mktemp("xr") / "data.zarr"
    write(cf_dataset(), path, zarr_format, consolidated)
    write(cf_dataset().isel(x=slice(0, 7)), path, zarr_format, consolidated, group="sub/deeper")
    return path, zarr_format


def _case_id(case: tuple[int, bool]) -> str:
    return f"v{case[0]}-{'consolidated' if case[1] else 'plain'}"


@pytest.fixture(scope="module", params=[(2, True), (2, False), (3, True), (3, False)], ids=_case_id)
def written_all(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """Every format, consolidated or not: for the comparisons where both matter."""
    return _write_cases(tmp_path_factory, *request.param)


@pytest.fixture(scope="module", params=[(2, True), (3, False)], ids=_case_id)
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """One store per format (v2 consolidated, v3 not), for tests where consolidation does not matter."""
    return _write_cases(tmp_path_factory, *request.param)


# -- comparing with engine="zarr" -------------------------------------------------------------------

#: encoding entries that hold codec objects in engine="zarr" and Zarr JSON here
CODEC_KEYS = ("compressors", "filters", "serializer")


def _codec_json(codec: Any) -> Any:
    if codec is None or isinstance(codec, dict):
        return codec
    return codec.get_config() if hasattr(codec, "get_config") else codec.to_dict()


def _codecs_json(codecs: Any) -> Any:
    """A codec or a tuple of them (numcodecs or zarr-python objects, or JSON) as JSON."""
    return [_codec_json(c) for c in codecs] if isinstance(codecs, tuple) else _codec_json(codecs)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:
        return bool(np.array_equal(a, b))


def assert_same_as_zarr_engine(path: Any, **options: Any) -> Any:
    """Open ``path`` with both engines; the loaded Datasets are identical and every variable's
    encoding has the same keys and values (codecs compared as JSON)."""
    ours = xr.open_dataset(path, engine="gpuzarr", **options)
    theirs = open_zarr_engine(path, **options)
    # (the order of variables and dimensions is the store's listing order in engine="zarr")
    assert dict(ours.sizes) == dict(theirs.sizes)
    assert set(ours.coords) == set(theirs.coords) and set(ours.data_vars) == set(theirs.data_vars)
    assert ours.attrs == theirs.attrs
    xr.testing.assert_identical(ours.compute(), theirs.compute())
    for name, variable in theirs.variables.items():
        mine = ours.variables[name].encoding
        assert set(mine) == set(variable.encoding), name
        for key, value in variable.encoding.items():
            if key in CODEC_KEYS:
                assert _codecs_json(mine[key]) == _codecs_json(value), (name, key)
            elif key != "preferred_chunks" or variable.encoding.get("shards") is None:
                assert _equal(mine[key], value), (name, key, mine[key], value)
    return ours


@pytest.mark.parametrize("group", [None, "sub/deeper", "/sub/deeper/"])
def test_datasets_written_by_xarray_equal_the_zarr_engines(written_all: tuple[Path, int], group: str | None) -> None:
    path, _ = written_all
    ours = assert_same_as_zarr_engine(path, group=group)
    assert ours.sizes["x"] == (10 if group is None else 7)
    assert ours["packed"].encoding["scale_factor"] == 0.01 and ours["packed"].encoding["_FillValue"] == -9999
    assert (
        np.isnan(ours["packed"].values[1, 2]) and ours["when"].dtype.kind == "M" and ours["duration"].dtype.kind == "m"
    )
    assert str(ours["name"].values[0]) == "\u03b1-é" and ours["code"].values[1] == b"bc"


def test_datatrees_equal_the_zarr_engines(tmp_path: Path, zarr_format: int) -> None:
    tree = xr.DataTree.from_dict(
        {
            "/": cf_dataset(),
            "/child": xr.Dataset({"w": ("x", np.arange(10.0))}),
            "/child/grandchild": xr.Dataset({"z": ("level", np.arange(3, dtype="u2"))}, coords={"level": [1, 5, 9]}),
        }
    )
    path = tmp_path / "tree.zarr"
    quietly(tree.to_zarr, path, zarr_format=zarr_format, consolidated=True)
    for group in (None, "child"):
        ours = xr.open_datatree(path, engine="gpuzarr", group=group)
        theirs = quietly(xr.open_datatree, path, engine="zarr", group=group)
        assert sorted(ours.groups) == sorted(theirs.groups)
        xr.testing.assert_identical(ours.load(), theirs.load())
    assert sorted(xr.open_datatree(path, engine="gpuzarr").groups) == ["/", "/child", "/child/grandchild"]


@pytest.mark.parametrize("consolidated", [True, False])
def test_a_datatree_reads_each_metadata_document_once(tmp_path: Path, zarr_format: int, consolidated: bool) -> None:
    groups = {"/": xr.Dataset({"v": ("x", np.arange(3.0))})}
    groups |= {f"/g{i}": xr.Dataset({"w": ("x", np.arange(3.0))}) for i in range(4)}
    path = tmp_path / "tree.zarr"
    quietly(xr.DataTree.from_dict(groups).to_zarr, path, zarr_format=zarr_format, consolidated=consolidated)
    store = CountingStore(path)
    tree = xr.open_datatree(store, engine="gpuzarr", consolidated=consolidated)
    assert sorted(tree.groups) == ["/", "/g0", "/g1", "/g2", "/g3"]
    names = (".zmetadata", ".zgroup", ".zattrs", ".zarray", "zarr.json")
    documents = Counter(k for k in store.keys if k.rsplit("/", 1)[-1] in names)
    root_document = "zarr.json" if zarr_format == 3 else (".zmetadata" if consolidated else ".zgroup")
    assert documents[root_document] == 1  # the root is opened once, not once per group
    if consolidated:  # the groups below are in the root's consolidated metadata
        assert {k for k in documents if "/" in k} == set() and max(documents.values()) == 1, documents


@pytest.mark.parametrize(
    "options",
    [
        {"decode_times": False},
        {"mask_and_scale": False},
        {"decode_cf": False},
        {"concat_characters": False, "decode_coords": False},
        {"drop_variables": ["packed", "label"]},
        {"chunks": {}},
        {"chunks": {"x": 10}},
    ],
    ids=lambda o: ",".join(o),
)
def test_xarray_options_equal_the_zarr_engines(written: tuple[Path, int], options: dict[str, Any]) -> None:
    ours = assert_same_as_zarr_engine(written[0], **options)
    if "chunks" in options:
        assert ours["temperature"].chunks == open_zarr_engine(written[0], **options)["temperature"].chunks


def test_chunks_follow_the_stored_chunks(written: tuple[Path, int]) -> None:
    ds = xr.open_dataset(written[0], engine="gpuzarr", chunks={})
    assert ds["temperature"].encoding["chunks"] == (2, 5)
    assert ds["temperature"].encoding["preferred_chunks"] == {"time": 2, "x": 5}
    assert ds["temperature"].chunks == ((2, 2, 2), (5, 5))


def test_sharded_arrays_prefer_whole_shards(tmp_path: Path) -> None:
    ds = cf_dataset()[["temperature"]]
    path = write(ds, tmp_path / "s.zarr", 3, True, encoding={"temperature": {"chunks": (1, 5), "shards": (3, 10)}})
    ours = assert_same_as_zarr_engine(path)
    encoding = ours["temperature"].encoding
    assert (encoding["chunks"], encoding["shards"]) == ((1, 5), (3, 10))
    # engine="zarr" prefers the inner chunks; whole shards are what gpuzarr reads best
    assert encoding["preferred_chunks"] == {"time": 3, "x": 10}
    assert open_zarr_engine(path)["temperature"].encoding["preferred_chunks"] == {"time": 1, "x": 5}
    chunked = xr.open_dataset(path, engine="gpuzarr", chunks={})
    assert chunked["temperature"].chunks == ((3, 3), (10,))
    xr.testing.assert_identical(chunked.compute(), open_zarr_engine(path).load())


def test_consolidated_metadata_is_used_as_the_zarr_engine_uses_it(tmp_path: Path, zarr_format: int) -> None:
    path = write(cf_dataset()[["i4"]], tmp_path / "c.zarr", zarr_format, True)
    write(cf_dataset()[["u4"]], path, zarr_format, False)  # not consolidated
    for consolidated in (None, False):
        ours = xr.open_dataset(path, engine="gpuzarr", consolidated=consolidated)
        assert set(ours.data_vars) == set(open_zarr_engine(path, consolidated=consolidated).data_vars)
    # v2's .zmetadata is stale now and hides u4 unless ignored; v3's write emptied the member
    stale = xr.open_dataset(path, engine="gpuzarr")
    assert set(stale.data_vars) == ({"i4"} if zarr_format == 2 else {"i4", "u4"})
    assert set(xr.open_dataset(path, engine="gpuzarr", consolidated=False).data_vars) == {"i4", "u4"}


def test_consolidated_true_requires_consolidated_metadata(tmp_path: Path, zarr_format: int) -> None:
    path = write(cf_dataset()[["i4"]], tmp_path / "p.zarr", zarr_format, False)
    with pytest.raises(MetadataError, match="use_consolidated=True, but the group '/' has no consolidated metadata"):
        xr.open_dataset(path, engine="gpuzarr", consolidated=True)
    assert set(xr.open_dataset(path, engine="gpuzarr").data_vars) == {"i4"}


def test_a_round_trip_through_to_zarr_keeps_data_and_codecs(written: tuple[Path, int], tmp_path: Path) -> None:
    # The encoding (codecs as Zarr JSON) is what to_zarr writes the copy with.
    path, zarr_format = written
    # Without "name": xarray writes a StringDType variable as '<U' with the vlen-utf8 filter it
    # was read with, which zarr-python refuses for v2, after engine="zarr" just the same.
    ours = xr.open_dataset(path, engine="gpuzarr", drop_variables=["name"])
    copy = write(ours, tmp_path / "copy.zarr", zarr_format, False)
    expected = open_zarr_engine(path, drop_variables=["name"]).load()
    xr.testing.assert_identical(open_zarr_engine(copy).load(), expected)
    assert open_zarr_engine(copy)["temperature"].encoding["chunks"] == (2, 5)
    assert assert_same_as_zarr_engine(copy)["i2"].encoding["compressors"] == ours["i2"].encoding["compressors"]


# -- groups written by gpuzarr open in xarray's engine ------------------------------------------------


def _gpuzarr_group(path: Path, zarr_format: int) -> Path:
    root = gpuzarr.open_group(path, mode="w", zarr_format=zarr_format)
    root.attrs["title"] = "written by gpuzarr"
    dims: dict[str, Any] = (
        {"dimension_names": ["y", "x"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["y", "x"]}}
    )
    values = np.arange(48, dtype="i2").reshape(6, 8)
    image = root.create_array("image", shape=(6, 8), dtype="i2", chunks=(4, 4), fill_value=0, **dims)
    image[...] = values
    image.attrs.update({"units": "counts", **image.attrs})
    for name, size, data in (("y", 6, np.arange(6.0)), ("x", 8, np.arange(8) * 10)):
        one: dict[str, Any] = (
            {"dimension_names": [name]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": [name]}}
        )
        coordinate = root.create_array(name, shape=(size,), dtype=data.dtype, chunks=(size,), **one)
        coordinate[...] = data
    gpuzarr.consolidate_metadata(path)
    return path


def test_groups_written_by_gpuzarr_open_in_the_zarr_engine(tmp_path: Path, zarr_format: int) -> None:
    path = _gpuzarr_group(tmp_path / "g.zarr", zarr_format)
    theirs = open_zarr_engine(path, consolidated=True)
    ours = assert_same_as_zarr_engine(path, consolidated=True)
    assert ours.attrs == {"title": "written by gpuzarr"} and ours["image"].attrs["units"] == "counts"
    np.testing.assert_array_equal(theirs["image"].values[1:, :2], np.arange(48).reshape(6, 8)[1:, :2])
    assert list(ours["x"].values) == [0, 10, 20, 30, 40, 50, 60, 70]
    # v2 masks the Zarr fill value 0 (as netCDF's _FillValue), v3 keeps it in the encoding
    if zarr_format == 2:
        assert ours["image"].dtype == np.float32 and np.isnan(ours["image"].values[0, 0])
    else:
        assert ours["image"].dtype == np.int16 and ours["image"].encoding["fill_value"] == 0


def test_use_zarr_fill_value_as_mask_masks_a_v3_fill_value(tmp_path: Path) -> None:
    path = _gpuzarr_group(tmp_path / "g.zarr", 3)
    masked = xr.open_dataset(path, engine="gpuzarr", use_zarr_fill_value_as_mask=True)["image"]
    assert masked.dtype == np.float32 and np.isnan(masked.values[0, 0]) and masked.values[0, 1] == 1
    assert masked.encoding["_FillValue"] == 0 and "fill_value" not in masked.encoding
    kept = xr.open_dataset(tmp_path / "g.zarr", engine="gpuzarr", use_zarr_fill_value_as_mask=False)["image"]
    assert kept.dtype == np.int16 and kept.values[0, 0] == 0


# -- laziness: only the chunks a selection needs are read ---------------------------------------------


class CountingStore(gpuzarr.LocalStore):
    """A read-only local store that records the key of every read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, read_only=True)
        self.keys: list[str] = []
        #: the name of the thread of each read, in the order of ``keys``
        self.threads: list[str] = []
        self._noting = threading.Lock()

    def _note(self, key: str) -> None:
        with self._noting:  # the key and its thread side by side, whichever threads read
            self.keys.append(key)
            self.threads.append(threading.current_thread().name)

    def get(self, key, byte_range=None):  # type: ignore[no-untyped-def]
        self._note(key)
        return super().get(key, byte_range)

    def get_ranges(self, key, ranges):  # type: ignore[no-untyped-def]
        self._note(key)
        return super().get_ranges(key, ranges)

    def get_into(self, key, buffer_for, start=0, length=None):  # type: ignore[no-untyped-def]
        self._note(key)
        return super().get_into(key, buffer_for, start, length)

    def chunks_read(self, name: str) -> set[str]:
        return {
            k
            for k in self.keys
            if k.startswith(name + "/") and not k.rsplit("/", 1)[-1].startswith((".z", "zarr.json"))
        }


@pytest.fixture
def counted(tmp_path: Path, zarr_format: int) -> tuple[Any, CountingStore, Any]:
    """A (12, 20) variable in (4, 5) chunks, opened lazily through a CountingStore."""
    values = np.arange(240, dtype="f8").reshape(12, 20)
    source = xr.Dataset({"v": (("t", "x"), values)}, coords={"t": np.arange(12), "x": np.arange(20)})
    path = write(source, tmp_path / "lazy.zarr", zarr_format, True, encoding={"v": {"chunks": (4, 5)}})
    store = CountingStore(path)
    ds = xr.open_dataset(store, engine="gpuzarr")
    store.keys.clear()
    store.threads.clear()
    return ds, store, values


def _key(zarr_format: int, i: int, j: int) -> str:
    return f"v/c/{i}/{j}" if zarr_format == 3 else f"v/{i}.{j}"


def test_opening_reads_no_chunk_of_a_data_variable(tmp_path: Path, zarr_format: int) -> None:
    source = xr.Dataset({"v": (("t",), np.arange(8.0))})
    path = write(source, tmp_path / "open.zarr", zarr_format, True, encoding={"v": {"chunks": (2,)}})
    store = CountingStore(path)
    ds = xr.open_dataset(store, engine="gpuzarr")
    assert store.chunks_read("v") == set()
    assert ds["v"].isel(t=5).values == 5.0
    assert store.chunks_read("v") == {("v/c/2" if zarr_format == 3 else "v/2")}


def test_a_basic_selection_reads_only_its_chunks(counted: tuple[Any, CountingStore, Any], zarr_format: int) -> None:
    ds, store, values = counted
    got = ds["v"].isel(t=slice(5, 7), x=slice(2, 9)).values
    np.testing.assert_array_equal(got, values[5:7, 2:9])
    assert store.chunks_read("v") == {_key(zarr_format, 1, 0), _key(zarr_format, 1, 1)}


def test_sel_by_label_reads_only_its_chunk(counted: tuple[Any, CountingStore, Any], zarr_format: int) -> None:
    ds, store, values = counted
    assert ds["v"].sel(t=9, x=17).values == values[9, 17]
    assert store.chunks_read("v") == {_key(zarr_format, 2, 3)}


def test_an_outer_selection_reads_only_its_chunks(counted: tuple[Any, CountingStore, Any], zarr_format: int) -> None:
    ds, store, values = counted
    got = ds["v"].isel(t=[11, 0, 0], x=[1, 19]).values
    np.testing.assert_array_equal(got, values[np.ix_([11, 0, 0], [1, 19])])
    expected = {_key(zarr_format, i, j) for i in (0, 2) for j in (0, 3)}
    assert store.chunks_read("v") == expected


def test_a_vectorised_selection_reads_only_its_points_chunks(
    counted: tuple[Any, CountingStore, Any], zarr_format: int
) -> None:
    ds, store, values = counted
    t = xr.DataArray([0, 11, 6], dims="p")
    x = xr.DataArray([0, 19, 7], dims="p")
    np.testing.assert_array_equal(ds["v"].isel(t=t, x=x).values, values[[0, 11, 6], [0, 19, 7]])
    assert store.chunks_read("v") == {_key(zarr_format, 0, 0), _key(zarr_format, 2, 3), _key(zarr_format, 1, 1)}


def test_load_async_reads_only_the_selected_chunks(counted: tuple[Any, CountingStore, Any], zarr_format: int) -> None:
    import asyncio

    ds, store, values = counted
    selected = ds["v"].isel(t=slice(0, 3), x=[19])
    loaded = asyncio.run(selected.load_async())
    np.testing.assert_array_equal(loaded.values, values[0:3, [19]])
    assert store.chunks_read("v") == {_key(zarr_format, 0, 3)}


def test_load_async_of_slices_reads_through_gpuzarrs_futures(
    counted: tuple[Any, CountingStore, Any], zarr_format: int
) -> None:
    """Slices go to Array.read_async: gpuzarr's request threads (and its decode pool), not
    asyncio's default executor, read their chunks."""
    import asyncio

    ds, store, values = counted
    with gpuzarr.config.set(concurrency=1):  # the request thread reads every chunk itself
        loaded = asyncio.run(ds["v"].isel(t=slice(2, 9), x=slice(3, 17)).load_async())
    np.testing.assert_array_equal(loaded.values, values[2:9, 3:17])
    threads = {name for key, name in zip(store.keys, store.threads, strict=True) if key in store.chunks_read("v")}
    assert threads and all(name.startswith("gpuzarr-request") for name in threads), threads


@pytest.mark.parametrize("kind", ["outer", "points"])
def test_load_async_of_index_arrays_reads_through_gpuzarrs_futures(
    counted: tuple[Any, CountingStore, Any], zarr_format: int, kind: str
) -> None:
    """Index arrays go to Array.get_orthogonal_selection_async and
    get_coordinate_selection_async: gpuzarr's request threads read their chunks, as slices'."""
    import asyncio

    ds, store, values = counted
    if kind == "outer":
        selected = ds["v"].isel(t=[11, 0, 0], x=slice(1, 20, 6))
        expected = values[np.ix_([11, 0, 0], range(1, 20, 6))]
    else:
        selected = ds["v"].isel(t=xr.DataArray([0, 11, 6], dims="p"), x=xr.DataArray([0, 19, 7], dims="p"))
        expected = values[[0, 11, 6], [0, 19, 7]]
    with gpuzarr.config.set(concurrency=1):
        loaded = asyncio.run(selected.load_async())
    np.testing.assert_array_equal(loaded.values, expected)
    threads = {name for key, name in zip(store.keys, store.threads, strict=True) if key in store.chunks_read("v")}
    assert threads and all(name.startswith("gpuzarr-request") for name in threads), threads


def test_a_vectorised_key_with_slices_reads_as_numpy_does(tmp_path: Path) -> None:
    # xarray's VectorizedIndexer may hold slices beside the arrays: their axes follow the
    # broadcast axes of the arrays, as NumPy's vindex (xarray's own in-memory adapter) has it.
    from xarray.core import indexing

    values = np.arange(5 * 6 * 7).reshape(5, 6, 7)
    array = GpuZarrBackendArray(gpuzarr.array(values, store=gpuzarr.MemoryStore(), chunks=(2, 3, 4)))
    key = indexing.VectorizedIndexer((np.array([[0], [4]]), slice(1, 6, 2), np.array([[6, 0, 3]])))
    expected = indexing.NumpyIndexingAdapter(values).vindex[key]
    np.testing.assert_array_equal(array[key], expected)
    assert array[key].shape == (2, 3, 3)


# -- options and errors --------------------------------------------------------------------------------


def test_the_engine_is_registered_by_its_entry_point() -> None:
    assert declared_entry_point() == "gpuzarr.integrations.xarray_backend:GpuZarrBackendEntrypoint"
    assert isinstance(xr.backends.list_engines()["gpuzarr"], GpuZarrBackendEntrypoint)


def test_listing_engines_loads_no_gpu_library_and_no_more_of_gpuzarr(xarray_engine: Path | None) -> None:
    # xarray imports every backend's entry point when it lists its engines.
    code = (
        "import sys, xarray\n"
        "engines = xarray.backends.list_engines()\n"
        "assert 'gpuzarr' in engines, sorted(engines)\n"
        "loaded = [m for m in ('cupy', 'kvikio', 'nvidia', 'dask', 'zarr', 'gpuzarr.integrations.xarray_store',"
        " 'gpuzarr.integrations.xarray_device') if m in sys.modules]\n"
        "assert loaded == [], loaded\n"
    )
    paths = [str(ROOT)] + ([str(xarray_engine)] if xarray_engine is not None else [])
    env = {"PYTHONPATH": ":".join(paths), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)


def test_guess_can_open_claims_gpuzarr_stores_only(tmp_path: Path) -> None:
    engine = GpuZarrBackendEntrypoint()
    assert not engine.guess_can_open("data.zarr") and not engine.guess_can_open(tmp_path / "x.zarr")
    assert not engine.guess_can_open("s3://bucket/data.zarr")
    path = write(cf_dataset()[["i2"]], tmp_path / "d.zarr", 3, True)
    assert engine.guess_can_open(gpuzarr.LocalStore(path))
    # with no engine named, xarray picks this one for a Store, and keeps "zarr" for *.zarr paths
    assert set(xr.open_dataset(gpuzarr.LocalStore(path)).data_vars) == {"i2"}
    assert xr.backends.plugins.guess_engine(str(path)) == "zarr"


def test_drop_variables_skips_arrays_xarray_cannot_name(tmp_path: Path, zarr_format: int) -> None:
    path = write(cf_dataset()[["i2"]], tmp_path / "d.zarr", zarr_format, False)
    gpuzarr.open_group(path, mode="r+").create_array("raw", shape=(3,), dtype="u1", chunks=(3,))
    where = "raw/zarr.json: 'dimension_names'" if zarr_format == 3 else "raw/.zattrs: '_ARRAY_DIMENSIONS'"
    with pytest.raises(MetadataError, match=f"{where} must name|{where} must list"):
        xr.open_dataset(path, engine="gpuzarr", consolidated=False)
    ds = xr.open_dataset(path, engine="gpuzarr", consolidated=False, drop_variables="raw")
    assert set(ds.variables) == {"i2", "x", "label"}


def test_bad_options_raise_naming_the_option(written: tuple[Path, int]) -> None:
    path, zarr_format = written
    with pytest.raises(InvalidArgumentError, match="mode: the gpuzarr engine only reads, expected 'r', got 'r\\+'"):
        xr.open_dataset(path, engine="gpuzarr", mode="r+")
    with pytest.raises(GroupNotFoundError, match="group 'nowhere': not found"):
        xr.open_dataset(path, engine="gpuzarr", group="nowhere")
    with pytest.raises(GroupNotFoundError, match="group 'sub/deeper/i2': is an array"):
        xr.open_dataset(path, engine="gpuzarr", group="sub/deeper/i2")
    other = 5 - zarr_format
    with pytest.raises(GroupNotFoundError, match=f"zarr_format={other}: the group '/' .* is Zarr v{zarr_format}"):
        xr.open_dataset(path, engine="gpuzarr", zarr_format=other)
    assert xr.open_dataset(path, engine="gpuzarr", zarr_format=zarr_format).sizes["x"] == 10
    with pytest.raises(InvalidArgumentError, match="opens a path, URL or gpuzarr Store, got bytes"):
        xr.open_dataset(b"\x89HDF", engine="gpuzarr")


def test_storage_options_reach_the_object_store(tmp_path: Path, s3_bucket: Any) -> None:
    path = write(cf_dataset()[["i2", "temperature"]], tmp_path / "d.zarr", 3, True)
    local = gpuzarr.LocalStore(path)
    remote, _ = gpuzarr.store.make_store(f"{s3_bucket.url}/d.zarr", storage_options=s3_bucket.storage_options())
    for key in local.list_prefix(""):
        remote.set(key, local.get(key))
    url = f"{s3_bucket.url}/d.zarr"
    ds = xr.open_dataset(url, engine="gpuzarr", storage_options=s3_bucket.storage_options())
    xr.testing.assert_identical(ds.load(), open_zarr_engine(path).load())
    with pytest.raises(gpuzarr.errors.GpuZarrError):
        xr.open_dataset(url, engine="gpuzarr", storage_options=s3_bucket.storage_options(endpoint="http://127.0.0.1:9"))


# -- pickling and dask.distributed ---------------------------------------------------------------------


def test_a_lazy_dataset_pickles(written: tuple[Path, int]) -> None:
    ds = xr.open_dataset(written[0], engine="gpuzarr")
    copy = pickle.loads(pickle.dumps(ds))
    xr.testing.assert_identical(copy.load(), ds.load())


def test_a_dask_distributed_cluster_reads_the_variables(tmp_path: Path) -> None:
    # Worker processes unpickle the backend arrays (gpuzarr Arrays) and read their chunks.
    distributed = pytest.importorskip("distributed")
    path = write(cf_dataset(), tmp_path / "d.zarr", 2, True)
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        distributed.Client(cluster),
    ):
        ds = xr.open_dataset(path, engine="gpuzarr", chunks={})
        total = ds["temperature"].sum().compute()
        packed = ds["packed"].mean().compute()
    reference = open_zarr_engine(path).load()
    assert float(total) == pytest.approx(float(reference["temperature"].sum()), rel=1e-6)
    assert float(packed) == pytest.approx(float(reference["packed"].mean()))


# -- device ---------------------------------------------------------------------------------------------


def test_device_gpu_without_a_gpu_raises_device_error(
    written: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuzarr.backends import select

    monkeypatch.setattr(select, "gpu_unavailable_reason", lambda: "CuPy is not installed")
    with pytest.raises(DeviceError, match="device='gpu': the GPU read path cannot run here: CuPy is not installed"):
        xr.open_dataset(written[0], engine="gpuzarr", device="gpu")


def test_device_auto_and_cpu_give_numpy_variables(written: tuple[Path, int]) -> None:
    # GPUZARR_DEVICE=cpu (tests/conftest.py) makes "auto" the CPU on any machine.
    for device in ("cpu", "auto"):
        ds = xr.open_dataset(written[0], engine="gpuzarr", device=device)
        assert all(isinstance(v.values, np.ndarray) for v in ds.variables.values())


def _device_of(variable: Any) -> str:
    """Where the backend array under ``variable`` reads, or "memory" when it was loaded (an index)."""
    node = variable._data
    while not isinstance(node, GpuZarrBackendArray):
        node = getattr(node, "array", None)
        if node is None:
            return "memory"
    return node.device


def test_device_gpu_reads_data_on_the_device_and_indexes_on_the_host(
    emulated_gpu: EmulatedGpu, written: tuple[Path, int]
) -> None:
    path, _ = written
    ds = xr.open_dataset(path, engine="gpuzarr", device="gpu")
    devices = {name: _device_of(v) for name, v in ds.variables.items()}
    on_host = {name for name, d in devices.items() if d != "cuda:0"}
    # dimension coordinates (loaded into pandas indexes), strings, bytes, datetimes and
    # timedeltas stay on the host
    assert {n for n, d in devices.items() if d == "memory"} == {"time", "x", "y"}
    assert on_host == {"time", "x", "y", "label", "name", "code", "when", "duration"}
    assert devices["packed"] == devices["masked"] == devices["flag"] == "cuda:0"
    emulated_gpu.devices.clear()
    xr.testing.assert_identical(ds.load(), open_zarr_engine(path).load())
    assert emulated_gpu.names().count("assemble_chunks") >= len(devices) - len(on_host)


def test_masking_on_the_device_uses_the_arrays_own_methods(
    emulated_gpu: EmulatedGpu, written: tuple[Path, int]
) -> None:
    # xarray's CF masking converts with np.array, which CuPy refuses: moved variables mask with
    # apply_mask instead.
    ds = xr.open_dataset(written[0], engine="gpuzarr", device="gpu")
    node = ds["masked"].variable._data
    funcs = []
    while not isinstance(node, GpuZarrBackendArray):
        if hasattr(node, "func"):
            funcs.append(node.func.func)
        node = node.array
    assert apply_mask in funcs
    np.testing.assert_array_equal(ds["masked"].values, open_zarr_engine(written[0])["masked"].values)


@pytest.mark.parametrize(
    ("values", "fills", "decoded", "dtype"),
    [
        (np.array([1, -9999, 3], "i2"), {-9999}, np.nan, np.float32),
        (np.array([[1.0, -1.0], [np.nan, 2.0]]), {-1.0}, np.nan, np.float64),
        (np.array([0, 5, 7], "u1"), {5, 7}, np.nan, np.float32),
        (np.array(4, "i8"), {4}, np.iinfo(np.int64).min, np.int64),
        (np.array([1, 2], "i4"), set(), np.nan, None),
    ],
)
def test_apply_mask_gives_xarrays_masking(values: Any, fills: set[Any], decoded: Any, dtype: Any) -> None:
    from xarray.coding.variables import _apply_mask

    got = apply_mask(values, fills, decoded, dtype)
    want = _apply_mask(values, fills, decoded, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert got is not values


def test_a_decoding_step_unknown_to_work_on_cupy_keeps_the_variable_on_the_host(
    emulated_gpu: EmulatedGpu, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # _Unsigned reinterprets with np.asarray (CuPy refuses): that variable reads into NumPy.
    raw = np.array([1, -1, 5], dtype="i1")
    ds = xr.Dataset({"counts": ("x", raw, {"_Unsigned": "true"}), "plain": ("x", raw)})
    path = write(ds, tmp_path / "u.zarr", 3, True)
    with caplog.at_level("WARNING", logger="gpuzarr"):
        opened = xr.open_dataset(path, engine="gpuzarr", device="gpu")
    assert (_device_of(opened["counts"].variable), _device_of(opened["plain"].variable)) == ("cpu", "cuda:0")
    assert "variable 'counts' stays in host memory: its decoding step" in caplog.text
    np.testing.assert_array_equal(opened["counts"].values, [1, 255, 5])
    xr.testing.assert_identical(opened.load(), open_zarr_engine(path).load())


@pytest.mark.parametrize("fill_value", [0, None], ids=["masked", "unmasked"])
def test_a_big_endian_v2_array_keeps_its_byte_order_through_to_zarr(tmp_path: Path, fill_value: Any) -> None:
    """A masked big-endian integer array decodes to floats; xarray records the original type,
    which was native from gpuzarr (the values come native), and writing the Dataset back made
    the array little-endian. Both engines' encodings now agree, masked or not."""
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "be.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    array = group.create_array("v", shape=(3,), dtype=">i4", chunks=(2,), fill_value=fill_value)
    array[...] = [1, 2, 3]
    array.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    ours = assert_same_as_zarr_engine(path, consolidated=False)
    ours.to_zarr(tmp_path / "copy.zarr", zarr_format=2, mode="w", consolidated=False)
    expected = ">i4" if fill_value is not None else "<i4"  # xarray's own rule, engine="zarr" alike
    assert zarr.open_array(str(tmp_path / "copy.zarr" / "v")).dtype == np.dtype(expected)
