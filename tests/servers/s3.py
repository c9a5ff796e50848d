"""A real S3-compatible server on 127.0.0.1: moto's standalone server, one per test session.

Each test gets a fresh bucket (:class:`S3Bucket`), with the endpoint and credentials given
explicitly, so that nothing is read from ``~/.aws`` or reaches AWS.
"""

from __future__ import annotations

import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

REGION = "us-east-1"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"


@dataclass(frozen=True)
class S3Bucket:
    """One bucket of the test server."""

    endpoint: str
    name: str

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """gpuzarr's storage_options for this bucket (short retries, so faults fail fast)."""
        return {
            "endpoint": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
            "max_retries": 2,
            "init_backoff": 0.01,
            "max_backoff": 0.05,
            **extra,
        }

    def kvstore(self, path: str = "") -> dict[str, Any]:
        """TensorStore's s3 kvstore for ``path`` in this bucket (credentials from the environment)."""
        return {"driver": "s3", "bucket": self.name, "path": path, "endpoint": self.endpoint, "aws_region": REGION}

    def obstore_store(self, prefix: str = "") -> Any:
        """An obstore S3Store on this bucket (for zarr-python's ObjectStore)."""
        from obstore.store import S3Store

        return S3Store(
            self.name,
            prefix=prefix or None,
            endpoint=self.endpoint,
            region=REGION,
            access_key_id=ACCESS_KEY_ID,
            secret_access_key=SECRET_ACCESS_KEY,
            client_options={"allow_http": True},
        )


class S3Server:
    """moto's ThreadedMotoServer on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def new_bucket(self) -> S3Bucket:
        """A new empty bucket (moto accepts unsigned requests)."""
        name = "test-" + uuid.uuid4().hex[:16]
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request) as answer:
            answer.read()
        return S3Bucket(self.endpoint, name)

    def stop(self) -> None:
        self._server.stop()
