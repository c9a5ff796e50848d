"""``--compressor``: codec JSON is checked (numcodecs for v2 JSON, gpuzarr's codec registry for
v3 JSON) before anything is written, and a valid codec is taken as given."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import gpuzarr
from gpuzarr.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ('{"id": "zstd", "level": 3, "extra": 1}', "numcodecs cannot build the codec {\"id\": \"zstd\", \"level\": 3, "
         "\"extra\": 1}: __init__() got an unexpected keyword argument 'extra'"),
        ('{"id": "no-such-codec"}', 'numcodecs cannot build the codec {"id": "no-such-codec"}: codec not available'),
        ('{"name": "zstd", "configuration": {"level": 3, "extra": 1}}',
         "codec (zstd): configuration: unexpected members ['extra']"),
        ('{"name": "no-such-codec"}', "codec: unknown codec 'no-such-codec'"),
    ],
)
def test_invalid_codec_json_is_a_usage_error(
    hierarchy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    out = tmp_path / "out.zarr"
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(hierarchy / "raw"), str(out), "--zarr-format", "2", "--compressor", spec])
    assert exit_info.value.code == 2
    assert f"gpuzarr convert: error: argument --compressor: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_valid_codec_json_is_written_as_given(hierarchy: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    spec = '{"id": "zstd", "level": 2}'
    assert main(["convert", str(hierarchy / "raw"), str(out), "--zarr-format", "2", "--compressor", spec]) == 0
    assert gpuzarr.open_array(out).metadata.compressor == {"id": "zstd", "level": 2}
