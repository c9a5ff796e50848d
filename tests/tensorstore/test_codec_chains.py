"""Codec chains merged as TensorStore merges them, checked against TensorStore's own answers:
``schema.codec`` (its non-strict merge) and ``metadata.codecs`` (strict) on open, and the two
together on create (gpuzarr.tensorstore.codec_chains: codecs_match and merged_codecs)."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import pytest

import gpuzarr
from gpuzarr.errors import MetadataError

if TYPE_CHECKING:
    from pathlib import Path

ts = pytest.importorskip("tensorstore")


def _t(order: list[int]) -> dict[str, Any]:
    return {"name": "transpose", "configuration": {"order": order}}


def _shard(codecs: list[Any] | None = None, chunk_shape: tuple[int, ...] = (2, 2), **more: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"chunk_shape": list(chunk_shape), **more}
    if codecs is not None:
        config["codecs"] = codecs
    return {"name": "sharding_indexed", "configuration": config}


BYTES, ZSTD = {"name": "bytes"}, {"name": "zstd"}
#: what metadata.codecs give on create (and the chains stored, once completed)
GIVEN = {
    "bytes": [BYTES],
    "bytes+zstd": [BYTES, ZSTD],
    "bytes+zstd9": [BYTES, {"name": "zstd", "configuration": {"level": 9}}],
    "T10+bytes": [_t([1, 0]), BYTES],
    "shard()": [_shard()],
    "shard(bytes)": [_shard([BYTES])],
    "shard(bytes,zstd)": [_shard([BYTES, ZSTD])],
    "T10+shard()": [_t([1, 0]), _shard()],
    "shard(shard())": [_shard([_shard(chunk_shape=(1, 1))])],
    "shard() index": [_shard(index_codecs=[BYTES])],
}
#: what schema.codec asks for
ASKED = {
    "zstd": [ZSTD],
    "zstd5": [{"name": "zstd", "configuration": {"level": 5}}],
    "bytes,zstd5": [BYTES, {"name": "zstd", "configuration": {"level": 5}}],
    "T10": [_t([1, 0])],
    "T10,bytes": [_t([1, 0]), BYTES],
    "T10,zstd": [_t([1, 0]), ZSTD],
    "bytes": [BYTES],
    "bytes big": [{"name": "bytes", "configuration": {"endian": "big"}}],
    "crc32c": [{"name": "crc32c"}],
    "shard()": [_shard()],
    "shard(zstd)": [_shard([BYTES, ZSTD])],
    "shard 4x4": [_shard(chunk_shape=(4, 4))],
    "shard index crc": [{"name": "sharding_indexed", "configuration": {"index_codecs": [BYTES, {"name": "crc32c"}]}}],
    "shard index at start": [{"name": "sharding_indexed", "configuration": {"index_location": "start"}}],
    "gzip": [{"name": "gzip"}],
    "strings": ["zstd"],
}


def _spec(path: Path, codecs: list[Any] | None = None, asked: list[Any] | None = None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{path}/"}, **more}
    if codecs is not None:
        grid = {"name": "regular", "configuration": {"chunk_shape": [4, 4]}}
        spec["metadata"] = {"shape": [8, 8], "data_type": "uint16", "chunk_grid": grid, "codecs": copy.deepcopy(codecs)}
    if asked is not None:
        spec["schema"] = {"codec": {"driver": "zarr3", "codecs": copy.deepcopy(asked)}}
    return spec


def _written(open_it: Any, path: Path) -> Any:
    """The codecs of the zarr.json written, or None where the create was refused."""
    try:
        open_it()
    except (ValueError, MetadataError):
        return None
    return json.loads((path / "zarr.json").read_text())["codecs"]


def _normalized(chain: list[Any]) -> list[Any]:
    """Codec JSON with the defaults either library may leave out written in."""
    out = []
    for codec in chain:
        config = dict(codec.get("configuration") or {})
        if codec["name"] == "sharding_indexed":
            config["codecs"] = _normalized(config["codecs"])
            config["index_codecs"] = _normalized(config["index_codecs"])
            config.setdefault("index_location", "end")
        out.append({"name": codec["name"], "configuration": config} if config else {"name": codec["name"]})
    return out


@pytest.mark.parametrize("given", list(GIVEN))
def test_create_merges_metadata_and_schema_codecs_as_tensorstore(tmp_path: Path, given: str) -> None:
    """Each pair writes what TensorStore writes, or is refused where TensorStore refuses it:
    a schema chain goes into shards without inner codecs, shard within shard; a trailing
    transpose or a member the metadata leaves out is added (an ``endian``, a zstd level); what
    the metadata then no longer meets is refused (a transpose or shards it does not have)."""
    for name, asked in ASKED.items():
        ours, theirs = tmp_path / f"{name}-ours", tmp_path / f"{name}-theirs"
        mine = _written(lambda: gpuzarr.open(_spec(ours, GIVEN[given], asked, create=True)), ours)  # noqa: B023
        ref = _written(lambda: ts.open(_spec(theirs, GIVEN[given], asked, create=True)).result(), theirs)  # noqa: B023
        assert (mine is None) == (ref is None), (given, name, mine, ref)
        if mine is not None:
            assert _normalized(mine) == _normalized(ref), (given, name)


@pytest.mark.parametrize("stored", ["bytes+zstd", "T10+bytes", "shard(bytes,zstd)", "T10+shard()", "shard(shard())"])
def test_open_checks_schema_and_metadata_codecs_as_tensorstore(tmp_path: Path, stored: str) -> None:
    """``schema.codec`` merges loosely (``["zstd"]`` of sharded zstd inner chunks), ``metadata.codecs``
    strictly; each constraint opens where TensorStore opens it, and only there."""
    path = tmp_path / "a"
    ts.open(_spec(path, GIVEN[stored], create=True)).result()
    for where in ("schema", "metadata"):
        for name, constraint in ASKED.items():
            if where == "schema":
                spec = _spec(path, asked=constraint)
            else:
                spec = _spec(path, metadata={"codecs": copy.deepcopy(constraint)})
            try:
                ts.open(spec).result()
            except ValueError:
                theirs = False
            else:
                theirs = True
            try:
                gpuzarr.open(spec, mode="r")
            except MetadataError as exc:
                assert f"{where}." in str(exc)
                ours = False
            else:
                ours = True
            assert ours == theirs, (where, stored, name, theirs)
