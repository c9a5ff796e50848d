"""gpuzarr.save / save_array / save_group / load, beside zarr-python's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import gpuzarr
from gpuzarr.errors import ContainsNodeError, InvalidArgumentError
from gpuzarr.save_load import GroupLoader

if TYPE_CHECKING:
    from pathlib import Path

zarr = pytest.importorskip("zarr")

DATA = np.arange(1000 * 1000, dtype="float32").reshape(1000, 1000)


def test_save_one_array_as_zarr_python_saves_it(tmp_path: Path) -> None:
    gpuzarr.save(str(tmp_path / "ours.zarr"), DATA)
    zarr.save(str(tmp_path / "theirs.zarr"), DATA)
    ours, theirs = (zarr.open_array(str(tmp_path / f"{w}.zarr"), mode="r") for w in ("ours", "theirs"))
    assert ours.metadata.to_dict() == theirs.metadata.to_dict()
    np.testing.assert_array_equal(gpuzarr.load(str(tmp_path / "theirs.zarr")), DATA)
    np.testing.assert_array_equal(zarr.load(str(tmp_path / "ours.zarr")), DATA)
    with pytest.raises(ContainsNodeError):  # as zarr-python's ContainsArrayError
        gpuzarr.save(str(tmp_path / "ours.zarr"), np.ones(3))
    with pytest.raises(zarr.errors.ContainsArrayError):
        zarr.save(str(tmp_path / "ours.zarr"), np.ones(3))
    gpuzarr.save_array(str(tmp_path / "ours.zarr"), np.ones(3), overwrite=True)
    np.testing.assert_array_equal(gpuzarr.load(str(tmp_path / "ours.zarr")), np.ones(3))
    gpuzarr.save_array(str(tmp_path / "ours.zarr"), np.zeros(2), mode="w")
    np.testing.assert_array_equal(gpuzarr.load(str(tmp_path / "ours.zarr")), np.zeros(2))
    with pytest.raises(ContainsNodeError):  # "w-" fails where a node exists, whatever overwrite says
        gpuzarr.save_array(str(tmp_path / "ours.zarr"), np.zeros(2), mode="w-", overwrite=True)


def test_save_a_group_and_load_it_lazily(tmp_path: Path) -> None:
    path = str(tmp_path / "g.zarr")
    gpuzarr.save(path, DATA, np.arange(3), extra=np.zeros(2, "i1"), zarr_format=2)
    theirs = zarr.open_group(path, mode="r")
    assert sorted(theirs.keys()) == ["arr_0", "arr_1", "extra"] and theirs.metadata.zarr_format == 2
    loaded = gpuzarr.load(path)
    assert isinstance(loaded, GroupLoader) and sorted(loaded) == ["arr_0", "arr_1", "extra"] and len(loaded) == 3
    assert loaded._loaded == {}  # nothing read yet
    np.testing.assert_array_equal(loaded["arr_1"], np.arange(3))
    assert list(loaded._loaded) == ["arr_1"]
    np.testing.assert_array_equal(loaded["extra"], np.zeros(2, "i1"))
    with pytest.raises(KeyError):
        loaded["nope"]
    gpuzarr.save_group(str(tmp_path / "g.zarr"), path="sub", x=np.ones(2))
    np.testing.assert_array_equal(gpuzarr.load(path, path="sub")["x"], np.ones(2))
    gpuzarr.save_array(str(tmp_path / "g.zarr"), np.arange(4), path="sub/y", chunks=(2,))
    assert zarr.open_array(path, path="sub/y", mode="r").chunks == (2,)


def test_save_and_load_refuse_what_does_not_add_up(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="at least one"):
        gpuzarr.save(str(tmp_path / "a.zarr"))
    with pytest.raises(InvalidArgumentError, match="named twice"):
        gpuzarr.save_group(str(tmp_path / "a.zarr"), np.ones(1), arr_0=np.ones(2))
    gpuzarr.save(str(tmp_path / "b.zarr"), np.ones(2))
    with pytest.raises(InvalidArgumentError, match="zarr_format=2"):
        gpuzarr.load(str(tmp_path / "b.zarr"), zarr_format=2)
    with pytest.raises(gpuzarr.errors.NodeNotFoundError):
        gpuzarr.load(str(tmp_path / "absent.zarr"))
