"""The ``gpuzarr`` entry points, help, version, exit statuses and error lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import gpuzarr
from gpuzarr.cli.main import COMMANDS, build_parser, main
from gpuzarr.errors import NodeNotFoundError

from .conftest import child_env, run_module

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.servers import S3Bucket

NAMES = ("info", "tree", "copy", "convert", "verify", "bench", "demo", "debug-info")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"gpuzarr {gpuzarr.__version__}\n"


def test_bare_command_prints_help_and_exits_2() -> None:
    # A script that forgot the command made a usage error, as argparse treats others: status 2.
    done = run_module()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: gpuzarr")
    for name in NAMES:
        assert f"    {name} " in done.stderr


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for name in NAMES:
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args([name, "--help"])
        assert exit_info.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: gpuzarr {name}")
    assert len(COMMANDS) == 7  # copy registers two names


def test_a_gpuzarr_error_is_one_line_and_status_1(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    status, out, err = cli("info", tmp_path / "missing.zarr")
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("gpuzarr info: error: no Zarr array or group at '/'")


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(tmp_path: Path, where: str) -> None:
    missing = str(tmp_path / "missing.zarr")
    args = ["--debug", "info", missing] if where == "before" else ["info", missing, "--debug"]
    with pytest.raises(NodeNotFoundError, match="no Zarr array or group"):
        main(args)


def test_a_malformed_option_is_a_usage_error(hierarchy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["copy", str(hierarchy), str(hierarchy.parent / "out.zarr"), "--chunks", "8,x"])
    assert exit_info.value.code == 2
    assert "argument --chunks: expected positive integers separated by commas, got '8,x'" in capsys.readouterr().err
    assert not (hierarchy.parent / "out.zarr").exists()


def test_storage_options_must_be_a_json_object(hierarchy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["info", str(hierarchy), "--storage-options", "[1, 2]"])
    assert exit_info.value.code == 2
    assert "expected a JSON object, got list" in capsys.readouterr().err


def test_storage_options_from_a_file(hierarchy: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    """Read from the file; a local path takes none, and says so (they were ignored)."""
    options = hierarchy.parent / "options.json"
    options.write_text('{"region": "eu-west-1"}')
    status, _, err = cli("info", hierarchy, "--storage-options", f"@{options}")
    assert status == 1 and "storage_options: a local path takes none" in err and "['region']" in err


def test_copy_gives_shared_storage_options_to_the_end_that_takes_them(
    hierarchy: Path, s3_bucket: S3Bucket, cli: Callable[..., tuple[int, str, str]]
) -> None:
    """``--storage-options`` configure SRC and DST; a local end takes none, so they go to the
    object store at the other end, whichever it is."""
    options = json.dumps(s3_bucket.storage_options())
    url = f"{s3_bucket.url}/shared.zarr"
    assert cli("copy", hierarchy, url, "--storage-options", options)[0] == 0
    back = hierarchy.parent / "back.zarr"
    assert cli("copy", url, back, "--storage-options", options)[0] == 0
    assert cli("verify", back)[0] == 0
    status, _, err = cli("copy", hierarchy, back.parent / "other.zarr", "--dst-storage-options", options)
    assert status == 1 and "storage_options: a local path takes none" in err


def test_importing_gpuzarr_loads_neither_the_cli_nor_tqdm(hierarchy: Path) -> None:
    code = (
        "import sys, gpuzarr\n"
        "assert 'gpuzarr.cli' not in sys.modules and 'tqdm' not in sys.modules\n"
        "from gpuzarr.cli.main import main\n"
        f"assert main(['info', {str(hierarchy)!r}]) == 0\n"
        "assert 'tqdm' not in sys.modules, 'info draws no progress bar'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=False)
    assert done.returncode == 0, done.stderr


def test_a_closed_stdout_ends_quietly(hierarchy: Path) -> None:
    # ``gpuzarr tree x | head -1``: the reader has gone away; no BrokenPipeError traceback.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpuzarr", "tree", str(hierarchy)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, env=child_env(), timeout=120, check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert done.stderr == ""
