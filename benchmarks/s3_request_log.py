"""moto's S3 server with a request log: one JSON line per request, written by the server.

    python benchmarks/s3_request_log.py --port PORT --log requests.jsonl

Run by :meth:`benchmarks.s3_server.S3Server.start` when it is given a ``request_log`` (the
``s3_trace`` tool). Each line is ``{"t0", "t1", "method", "path", "range", "if_match",
"status", "nbytes", "conn"}``: wall-clock start and end (``time.time()``, comparable with the
client's clock), the Range header, whether If-Match was sent, the body bytes sent and the
client's port (one per connection, so connection reuse shows). Logging on the server side counts
what every client sends the same way, whatever its HTTP stack.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator


class RequestLog:
    """WSGI middleware appending one JSON line per request to ``path``."""

    def __init__(self, app: Any, path: str) -> None:
        self.app = app
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - open for the server's life
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        record: dict[str, Any] = {
            "t0": time.time(),
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "range": environ.get("HTTP_RANGE"),
            "if_match": "HTTP_IF_MATCH" in environ,
            "conn": environ.get("REMOTE_PORT"),
        }

        def start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            record["status"] = int(status.split()[0])
            return start_response(status, headers, *rest)

        return self._counted(self.app(environ, start), record)

    def _counted(self, body: Iterable[bytes], record: dict[str, Any]) -> Iterator[bytes]:
        nbytes = 0
        try:
            for part in body:
                nbytes += len(part)
                yield part
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            record["nbytes"] = nbytes
            record["t1"] = time.time()
            with self._lock:
                self._file.write(json.dumps(record) + "\n")


def main() -> None:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, RequestLog(app, args.log), threaded=True)


if __name__ == "__main__":
    main()
