"""Path rules (gpuzarr.store.paths, validate_path) and store URLs with '.' or '..' components."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpuzarr.errors import InvalidKeyError
from gpuzarr.store import make_store
from gpuzarr.store.base import validate_path
from gpuzarr.store.paths import directory_problem, path_problem

if TYPE_CHECKING:
    from pathlib import Path

ESCAPING_PATHS = ["..", "../x", "a/../..", "a/..", ".", "./a", "a/./b", "a//b", "//a", "a\\..\\b", "a\0b"]


@pytest.mark.parametrize("path", ["", "/", "a", "a/b", "/a/b/", "a.b/..c/...", "a b/%2e%2e"])
def test_paths_that_stay_inside(path: str) -> None:
    assert path_problem(path) is None
    assert validate_path(path) == path.strip("/")


@pytest.mark.parametrize("path", ESCAPING_PATHS)
def test_dot_dot_and_empty_components_are_refused(path: str) -> None:
    assert path_problem(path) is not None
    with pytest.raises(InvalidKeyError, match=r"^where: invalid path"):
        validate_path(path, "where")


@pytest.mark.parametrize("path", ["/", "/data/x.zarr", "/data/x.zarr/", "rel/x", "~/x", "a\\b"])
def test_store_directories_absolute_or_relative(path: str) -> None:
    assert directory_problem(path) is None


@pytest.mark.parametrize("path", ["/data/../x", "/data/./x", "/data//x", "../x", "./x", "x/..", "/a\0"])
def test_store_directories_with_dot_components_are_refused(path: str) -> None:
    assert directory_problem(path) is not None


@pytest.mark.parametrize("tail", ["/../escape", "/./x", "//x", "/a/.."])
def test_file_url_with_dot_components_is_refused(tmp_path: Path, tail: str) -> None:
    url = "file://" + str(tmp_path / "store") + tail
    with pytest.raises(InvalidKeyError, match="invalid directory"):
        make_store(url)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_file_url_may_start_with_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store, _ = make_store("file://./data.zarr")
    store.set("k", b"v")
    assert (tmp_path / "data.zarr" / "k").read_bytes() == b"v"
    with pytest.raises(InvalidKeyError, match="invalid directory"):
        make_store("file://./../data.zarr")


def test_file_url_percent_encoded_dots_are_refused_after_decoding(tmp_path: Path) -> None:
    with pytest.raises(InvalidKeyError, match="invalid directory"):
        make_store("file://" + str(tmp_path) + "/store/%2E%2E/escape")
