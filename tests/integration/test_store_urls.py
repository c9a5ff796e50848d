"""Store URLs: what zarr-python and TensorStore wrote opens through every URL form they accept.

Plain strings follow zarr-python (fsspec): ``file://relative.zarr`` is below the current
directory. TensorStore specs follow TensorStore: ``file:///abs/dir/`` (``localhost`` allowed),
joined with the spec's ``path``. Remote schemes are refused by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import GpuZarrError, InvalidArgumentError, MetadataError

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

DATA = np.arange(24, dtype="int32").reshape(4, 6)


def _zarr_python_array(path: Path, zarr_format: int = 3) -> None:
    a = zarr.create_array(str(path), shape=DATA.shape, chunks=(2, 3), dtype=DATA.dtype, zarr_format=zarr_format)
    a[...] = DATA


def _tensorstore_array(directory: Path) -> None:
    t = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(directory) + "/"},
            "metadata": {
                "shape": list(DATA.shape),
                "data_type": "int32",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            },
        },
        create=True,
    ).result()
    t[...] = DATA


def _read(node: Any) -> np.ndarray[Any, Any]:
    assert isinstance(node, gpuzarr.Array)
    return np.asarray(node[...])


# -- plain strings, as zarr-python reads them -------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize(
    "url", ["file://relative.zarr", "file://relative.zarr/", "file://./relative.zarr", "local://relative.zarr"]
)
def test_relative_file_url_is_below_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, zarr_format: int
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _zarr_python_array(work / "relative.zarr", zarr_format)
    # A decoy in the parent: the URL must not climb out of, nor ignore, the current directory.
    gpuzarr.create_group(str(tmp_path), attributes={"decoy": True})
    node = gpuzarr.open(url, mode="r")
    np.testing.assert_array_equal(_read(node), DATA)
    assert node.store == gpuzarr.LocalStore(work / "relative.zarr")


def test_relative_file_url_written_by_gpuzarr_is_where_zarr_python_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    a = gpuzarr.create("file://made.zarr", shape=DATA.shape, dtype="int32", chunks=(2, 3))
    a[...] = DATA
    assert not (tmp_path / "zarr.json").exists()
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "made.zarr"), mode="r")[...], DATA)


def test_absolute_file_url_and_percent_escapes(tmp_path: Path) -> None:
    _zarr_python_array(tmp_path / "my data.zarr")
    np.testing.assert_array_equal(_read(gpuzarr.open(f"file://{tmp_path}/my%20data.zarr", mode="r")), DATA)
    np.testing.assert_array_equal(_read(gpuzarr.open((tmp_path / "my data.zarr").as_uri(), mode="r")), DATA)


@pytest.mark.parametrize(
    "url",
    [
        "nosuchscheme://host/x.zarr",
        "nosuchscheme://bucket/x.zarr",
    ],
)
def test_unsupported_urls_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    for call in (
        lambda: gpuzarr.open(url, mode="r"),
        lambda: gpuzarr.open_group(url, mode="a"),
        lambda: gpuzarr.create(url, shape=(2,), dtype="int8"),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert url in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing was created as a local path


def test_empty_file_url_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="file://"):
        gpuzarr.open("file://", mode="r")


# -- TensorStore specs, as TensorStore reads them ---------------------------------------------------


def _spec_forms(root: Path) -> list[dict[str, Any]]:
    """Every kvstore + path combination TensorStore opens for ``root/sub/a.zarr``."""
    array = root / "sub" / "a.zarr"
    return [
        {"kvstore": f"file://{array}/"},
        {"kvstore": f"file://{array}"},
        {"kvstore": f"file://localhost{array}/"},
        {"kvstore": f"file://{root}/sub/", "path": "a.zarr"},
        {"kvstore": f"file://{root}", "path": "sub/a.zarr/"},
        {"kvstore": {"driver": "file", "path": f"{root}/sub/"}, "path": "a.zarr"},
        {"kvstore": {"driver": "file", "path": str(array)}},
    ]


@pytest.mark.parametrize("form", range(7))
def test_spec_kvstore_forms_open_what_tensorstore_opens(tmp_path: Path, form: int) -> None:
    _tensorstore_array(tmp_path / "sub" / "a.zarr")
    spec = {"driver": "zarr3", **_spec_forms(tmp_path)[form]}
    # The form is one TensorStore itself opens, to the same data.
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), DATA)
    a = gpuzarr.open(spec)
    np.testing.assert_array_equal(_read(a), DATA)
    assert a.store == gpuzarr.LocalStore(tmp_path / "sub" / "a.zarr")


def test_spec_file_url_creates_where_tensorstore_reads(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/made.zarr/"
    a = gpuzarr.open({"driver": "zarr3", "kvstore": url}, shape=list(DATA.shape), dtype="int32", create=True)
    a[...] = DATA
    t = ts.open({"driver": "zarr3", "kvstore": url}, open=True).result()
    np.testing.assert_array_equal(t.read().result(), DATA)


def test_spec_relative_kvstore_path_is_below_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _tensorstore_array(tmp_path / "rel.zarr")
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": "rel.zarr/"}}
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), DATA)
    np.testing.assert_array_equal(_read(gpuzarr.open(spec)), DATA)


@pytest.mark.parametrize(
    ("kvstore", "match"),
    [
        ("file://rel.zarr/", "host 'rel.zarr'"),  # TensorStore: "file: URIs do not support authority"
        ("file://", "names no directory"),
        ("file:///x.zarr/?v=1", "query"),
        ("file:///x.zarr/#f", "fragment"),
        ("nosuchscheme://bucket/x.zarr/", "'nosuchscheme'"),
        ("s3://bucket/x.zarr/?versionId=1", "query"),
        ("s3:///x.zarr/", "names no bucket"),
    ],
)
def test_spec_urls_tensorstore_refuses_are_refused(kvstore: str, match: str) -> None:
    with pytest.raises(MetadataError, match=match) as info:
        gpuzarr.open({"driver": "zarr3", "kvstore": kvstore})
    # The URL is named; an object store's query, which may be a credential, as "?…".
    shown = kvstore.partition("?")[0] + "?…" if kvstore.startswith("s3://") and "?" in kvstore else kvstore
    assert shown in str(info.value) and isinstance(info.value, GpuZarrError)
