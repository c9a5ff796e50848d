"""A loopback S3 server for the ``s3`` benchmark: moto's standalone server (``moto[server]``) in
a process of its own, on 127.0.0.1 and a free port, with one bucket.

Its own process, not a thread of the benchmark's: moto serves requests in Python, and in the
clients' process it would compete for their GIL, slowing the clients that hold the GIL longest
(zarr-python, gpuzarr) more than those that hold it least (TensorStore).

moto accepts any credentials; the clients are given :data:`ACCESS_KEY_ID` /
:data:`SECRET_ACCESS_KEY` so that each signs its requests as it would against AWS.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY_ID = "gpuzarr-bench"
SECRET_ACCESS_KEY = "gpuzarr-bench-secret"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class S3Server:
    """A running server: ``endpoint`` (``http://127.0.0.1:<port>``) and ``bucket``."""

    endpoint: str
    bucket: str
    _server: Any

    @classmethod
    def start(cls, bucket: str = "bench", request_log: Path | None = None) -> S3Server:
        """Start moto's server and create ``bucket``; ImportError names the package when moto
        (with its server extra) is missing. With ``request_log``, the server appends a JSON line
        per request to that file (:mod:`benchmarks.s3_request_log`)."""
        try:
            import moto.server  # noqa: F401 - only checks that the server extra is installed
        except ImportError as exc:
            raise ImportError("the s3 benchmark needs moto's server: pip install 'moto[server]'") from exc
        port = _free_port()
        if request_log is None:
            command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        else:
            logger = Path(__file__).with_name("s3_request_log.py")
            command = [sys.executable, str(logger), "--port", str(port), "--log", str(request_log)]
        server = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:  # the server binds the port once it has imported moto
            try:
                request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
                urllib.request.urlopen(request, timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    server.kill()
                    raise
                time.sleep(0.1)
        return cls(endpoint, bucket, server)

    @property
    def pid(self) -> int:
        """The server process's id (its CPU time is read from ``/proc``)."""
        pid: int = self._server.pid
        return pid

    def stop(self) -> None:
        self._server.terminate()
        try:
            self._server.wait(10)
        except subprocess.TimeoutExpired:
            self._server.kill()

    def storage_options(self) -> dict[str, Any]:
        """obstore's S3 configuration (gpuzarr's ``storage_options``) for this server."""
        return {
            "endpoint": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
            "allow_http": True,
        }

    def obstore_store(self, prefix: str | None = None) -> Any:
        """An ``obstore.store.S3Store`` of the bucket (or of ``prefix`` in it)."""
        from obstore.store import S3Store

        return S3Store(self.bucket, prefix=prefix, **self.storage_options())

    def tensorstore_kvstore(self, path: str) -> dict[str, Any]:
        """TensorStore's s3 kvstore of ``path`` in the bucket. Credentials come from the
        environment (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``: see :meth:`environ`)."""
        return {
            "driver": "s3",
            "bucket": self.bucket,
            "path": path.rstrip("/") + "/",
            "endpoint": self.endpoint,
            "aws_region": REGION,
        }

    @staticmethod
    def environ() -> dict[str, str]:
        """The environment variables through which TensorStore finds the credentials."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY, "AWS_REGION": REGION}


__all__ = ["S3Server"]
