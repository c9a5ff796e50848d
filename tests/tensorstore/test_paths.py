"""A spec's ``path`` and its kvstore's ``path`` never lead out of the kvstore directory: '.',
'..' and empty components are refused (MetadataError naming the member), as TensorStore's file
driver refuses them, before anything is created, written or read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import MetadataError
from gpuzarr.tensorstore.open import open_spec
from gpuzarr.tensorstore.spec import TensorStoreSpec

if TYPE_CHECKING:
    from pathlib import Path

METADATA = {
    "shape": [4],
    "data_type": "uint8",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
}
ESCAPING = ["../escape", "a/../../escape", "./a", "a/./b", "a//b", "..", "a/.."]


def _spec(root: Path, **members: Any) -> dict[str, Any]:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root) + "/"}, **members}


def _outside(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name != "store")


@pytest.mark.parametrize("path", ESCAPING)
def test_spec_path_cannot_create_outside_the_kvstore(tmp_path: Path, path: str) -> None:
    root = tmp_path / "store"
    root.mkdir()
    with pytest.raises(MetadataError, match=r"^path: invalid path"):
        open_spec(_spec(root, path=path, create=True, metadata=METADATA))
    assert _outside(tmp_path) == []
    assert list(root.iterdir()) == []


def test_spec_path_cannot_open_or_read_outside_the_kvstore(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    outside = gpuzarr.create(str(tmp_path / "escape"), shape=(4,), dtype="uint8", chunks=(2,))
    outside[...] = 7
    with pytest.raises(MetadataError, match=r"^path: invalid path '\.\./escape'"):
        open_spec(_spec(root, path="../escape"))
    with pytest.raises(MetadataError, match=r"^path"):
        gpuzarr.open(_spec(root), path="../escape", mode="r")


def test_spec_path_writes_stay_inside(tmp_path: Path) -> None:
    root = tmp_path / "store"
    a = open_spec(_spec(root, path="a/b", create=True, metadata=METADATA))
    a[...] = np.arange(4, dtype="uint8")
    assert (root / "a" / "b" / "zarr.json").is_file()
    assert _outside(tmp_path) == []


@pytest.mark.parametrize("bad", ["/../escape/", "/./escape/", "//escape/", "/x/.."])
def test_kvstore_path_with_dot_components_is_refused(tmp_path: Path, bad: str) -> None:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "store") + bad}}
    with pytest.raises(MetadataError, match=r"^kvstore\.path: invalid path"):
        open_spec({**spec, "create": True, "metadata": METADATA})
    url_spec = {**spec, "kvstore": "file://" + str(tmp_path / "store") + bad}
    with pytest.raises(MetadataError, match=r"^kvstore: invalid directory"):
        open_spec({**url_spec, "create": True, "metadata": METADATA})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kvstore", [{"driver": "file", "path": "/data/x.zarr/"}, {"driver": "file", "path": "rel/x"}])
def test_kvstore_path_absolute_or_relative_is_accepted(kvstore: dict[str, str]) -> None:
    spec = TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": kvstore, "path": "/a/b/"})
    assert spec.kvstore.path == kvstore["path"].rstrip("/") + "/a/b"


@pytest.mark.parametrize("path", ["../x", "a//b", "./a"])
def test_memory_kvstore_path_is_checked_too(path: str) -> None:
    with pytest.raises(MetadataError, match=r"^kvstore\.path"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": {"driver": "memory", "path": path}})
    with pytest.raises(MetadataError, match=r"^path"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": {"driver": "memory"}, "path": path})


def test_kvstore_dict_given_as_a_store_is_checked(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match=r"^kvstore\.path"):
        gpuzarr.open({"driver": "file", "path": str(tmp_path / "s") + "/../escape"}, mode="w", shape=(2,), dtype="u1")
    assert list(tmp_path.iterdir()) == []


def test_a_file_kvstore_without_a_path_takes_the_specs_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As TensorStore: ``{"driver": "file"}`` (or an empty path) with the spec's ``path`` opens
    that directory, relative to the working one or absolute. Either path must be there."""
    monkeypatch.chdir(tmp_path)
    gpuzarr.create("root.zarr/grp/arr", shape=(3,), chunks=(3,), dtype="i4")[...] = [1, 2, 3]
    relative = gpuzarr.open({"driver": "zarr3", "kvstore": {"driver": "file"}, "path": "root.zarr/grp/arr"})
    np.testing.assert_array_equal(relative[...], [1, 2, 3])
    where = str(tmp_path / "root.zarr/grp/arr")
    absolute = {"driver": "zarr3", "kvstore": {"driver": "file", "path": ""}, "path": where}
    np.testing.assert_array_equal(gpuzarr.open(absolute)[...], [1, 2, 3])
    with pytest.raises(MetadataError, match=r"a file kvstore needs a path \(its own, or the spec's path\)"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": {"driver": "file"}})
    with pytest.raises(MetadataError, match="invalid path"):
        TensorStoreSpec.from_json({"driver": "zarr3", "kvstore": {"driver": "file"}, "path": "a/../b"})
    with pytest.raises(MetadataError, match="a file kvstore needs a path"):  # a kvstore alone still needs one
        gpuzarr.open({"driver": "file"})
