"""open_without_links: openat2 with RESOLVE_NO_SYMLINKS, or None where it cannot be used."""

from __future__ import annotations

import errno
import os
import sys
from typing import TYPE_CHECKING

import pytest

from gpuzarr.store import no_links_open
from gpuzarr.store.no_links_open import open_without_links

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

FLAGS = os.O_RDONLY | os.O_CLOEXEC


@pytest.fixture(autouse=True)
def fresh_probe() -> Iterator[None]:
    no_links_open.reset_for_tests(unavailable=False)
    yield
    no_links_open.reset_for_tests(unavailable=False)


@pytest.fixture
def opens() -> None:
    """Skip where this kernel cannot openat2 (the store then checks through /proc alone)."""
    fd = open_without_links("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if fd is None:
        pytest.skip("openat2 is not usable here")
    os.close(fd)


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, 100, 0)
    finally:
        os.close(fd)


def test_opens_a_path_without_links(tmp_path: Path, opens: None) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"data")
    fd = open_without_links(str(tmp_path / "d" / "f"), FLAGS)
    assert fd is not None
    assert os.get_inheritable(fd) is False  # O_CLOEXEC as given
    assert _read(fd) == b"data"


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_link_anywhere_on_the_path_is_eloop(tmp_path: Path, opens: None, where: str) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"data")
    if where == "file":
        (tmp_path / "link").symlink_to(tmp_path / "d" / "f")
        path = tmp_path / "link"
    else:
        (tmp_path / "dlink").symlink_to(tmp_path / "d")
        path = tmp_path / "dlink" / "f"
    with pytest.raises(OSError) as info:
        open_without_links(str(path), FLAGS)
    assert info.value.errno == errno.ELOOP
    assert info.value.filename == str(path)


def test_missing_files_raise_as_os_open_does(tmp_path: Path, opens: None) -> None:
    with pytest.raises(FileNotFoundError):
        open_without_links(str(tmp_path / "missing"), FLAGS)
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        open_without_links(str(tmp_path / "f" / "below"), FLAGS)


def test_none_where_unavailable(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    no_links_open.reset_for_tests(unavailable=True)
    assert open_without_links(str(tmp_path / "f"), FLAGS) is None


@pytest.mark.skipif(sys.platform != "linux", reason="openat2 is a Linux system call")
def test_probe_answers_once_and_is_used_on_linux_x86_64_and_arm64(tmp_path: Path) -> None:
    import platform

    (tmp_path / "f").write_bytes(b"x")
    fd = open_without_links(str(tmp_path / "f"), FLAGS)
    if platform.machine() not in ("x86_64", "aarch64"):
        assert fd is None
        return
    release = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    if release < (5, 6):
        assert fd is None
        return
    if fd is None:  # a seccomp filter that refuses openat2 (some container runtimes)
        pytest.skip("openat2 refused here")
    assert _read(fd) == b"x"


def test_a_local_store_checks_through_proc_only_where_a_link_is_on_the_way(
    tmp_path: Path, opens: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuzarr.store import LocalStore

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "k").write_bytes(b"plain")
    (tmp_path / "b").symlink_to(tmp_path / "a")  # a link that stays inside the root
    store = LocalStore(tmp_path)
    checked: list[str] = []
    check = LocalStore._check_opened

    def recording(self: LocalStore, fd: int, key: str, path: str) -> None:
        checked.append(key)
        check(self, fd, key, path)

    monkeypatch.setattr(LocalStore, "_check_opened", recording)
    assert store.get("a/k") == b"plain"
    assert checked == []
    assert store.get("b/k") == b"plain"
    assert checked == ["b/k"]
