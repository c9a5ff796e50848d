"""Real servers on 127.0.0.1 for store tests, as pytest fixtures (registered in tests/conftest.py).

* ``s3_bucket``: a fresh bucket of a session-wide S3-compatible server (moto), see :mod:`.s3`;
* ``http_server``: a threaded HTTP server with Range requests and fault switches serving the
  test's own directory (``http_server.directory``), see :mod:`.http`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .http import HttpServer
from .s3 import S3Bucket, S3Server

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    # Optional test dependencies: the server (moto) and the client gpuzarr's ObjectStore uses.
    pytest.importorskip("moto.server", reason="moto (the S3-compatible test server) is not installed")
    pytest.importorskip("obstore", reason="obstore (ObjectStore's client) is not installed")
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> S3Bucket:
    return s3_server.new_bucket()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    root = tmp_path / "served"
    root.mkdir()
    with HttpServer(root) as server:
        yield server


__all__ = ["HttpServer", "S3Bucket", "S3Server", "http_server", "s3_bucket", "s3_server"]
