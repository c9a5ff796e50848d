"""A threaded HTTP server on 127.0.0.1 serving a directory, with Range requests and faults.

Real bytes over a real socket, for the HTTP store's tests and benchmarks: single ranges
(``bytes=a-b``, ``bytes=a-``, ``bytes=-n``), 416 past the end, HEAD, ETags with ``If-Match``
(412 when the file changed), a log of every request, a count of requests in flight at once, and
fault switches: the next N GETs answer with a status (500, 503), a 403 for a path prefix or
for a request without a given query, a
connection dropped half-way through the body, a delay before answering, a chunked body that runs
past its Content-Length; and the body bytes written per path (a client that stops reading
closes the connection early).

    with HttpServer(directory) as server:
        server.url            # "http://127.0.0.1:PORT"
        server.fail_next(2)   # the next two GETs answer 500
        server.requests       # [("GET", "/x.zarr/zarr.json", None), ...]
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    import os

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
#: The bytes of a body written at a time (and counted in ``HttpServer.bytes_sent``).
_PIECE = 1 << 20


@dataclass
class Faults:
    """What the server does wrong, consumed request by request."""

    #: (status, how many GETs still answer it)
    fail: tuple[int, int] = (500, 0)
    #: GETs still to be cut half-way through the body
    drop: int = 0
    #: (seconds, how many GETs still wait that long before answering)
    delay: tuple[float, int] = (0.0, 0)
    #: path prefixes answered with 403
    forbidden: list[str] = field(default_factory=list)
    #: (bytes, how many GETs still send that many more than their Content-Length, chunked)
    overrun: tuple[int, int] = (0, 0)
    #: weak ETags (W/"..."), which no If-Match matches (RFC 9110 compares strongly; nginx)
    weak_etags: bool = False
    #: the query every request must carry, as sent (a token, a signature): others get 403
    required_query: str | None = None


class HttpServer:
    """The server; a context manager that starts and stops it."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.faults = Faults()
        self.requests: list[tuple[str, str, str | None]] = []
        #: the query of each request in ``requests``, as sent ("" for none)
        self.queries: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        #: bytes of body written to the socket, per path, over every answer so far: a client
        #: that refuses a value from its headers closes the connection long before its end
        self.bytes_sent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # -- switches ----------------------------------------------------------------------------------

    def reset(self) -> None:
        """No faults, an empty log."""
        with self._lock:
            self.faults = Faults()
            self.requests.clear()
            self.queries.clear()
            self.max_in_flight = 0
            self.bytes_sent.clear()

    def fail_next(self, n: int, status: int = 500) -> None:
        with self._lock:
            self.faults.fail = (status, n)

    def drop_next(self, n: int) -> None:
        with self._lock:
            self.faults.drop = n

    def delay_next(self, n: int, seconds: float) -> None:
        with self._lock:
            self.faults.delay = (seconds, n)

    def overrun_next(self, n: int, extra: int) -> None:
        """The next ``n`` GETs say their true ``Content-Length`` but send a chunked body that
        runs ``extra`` bytes past it (a lying server: HTTP/1.1 clients follow the chunking)."""
        with self._lock:
            self.faults.overrun = (extra, n)

    def weak_etags(self) -> None:
        """Send weak ETags from now on; an If-Match other than ``*`` then always fails (412)."""
        with self._lock:
            self.faults.weak_etags = True

    def require_query(self, query: str) -> None:
        """Answer 403 to every request that does not carry exactly ``query`` (as sent)."""
        with self._lock:
            self.faults.required_query = query

    def forbid(self, prefix: str) -> None:
        with self._lock:
            self.faults.forbidden.append(prefix)

    def gets(self) -> list[tuple[str, str | None]]:
        """(path, Range header) of every GET so far."""
        with self._lock:
            return [(path, rng) for method, path, rng in self.requests if method == "GET"]

    # -- per request -------------------------------------------------------------------------------

    def _take(self, method: str, path: str, rng: str | None, query: str = "") -> tuple[int | None, bool, float]:
        """Log a request; the fault it gets: (status or None, drop the body, delay)."""
        with self._lock:
            self.requests.append((method, path, rng))
            self.queries.append(query)
            required = self.faults.required_query
            if any(path.startswith(p) for p in self.faults.forbidden) or (required is not None and query != required):
                return 403, False, 0.0
            if method != "GET":
                return None, False, 0.0
            status = None
            code, left = self.faults.fail
            if left:
                self.faults.fail = (code, left - 1)
                status = code
            drop = self.faults.drop > 0
            if drop:
                self.faults.drop -= 1
            seconds, waits = self.faults.delay
            if waits:
                self.faults.delay = (seconds, waits - 1)
            return status, drop, seconds if waits else 0.0

    def _take_overrun(self) -> int:
        """The bytes the next GET's body runs past its Content-Length (0: none)."""
        with self._lock:
            extra, left = self.faults.overrun
            if not left:
                return 0
            self.faults.overrun = (extra, left - 1)
            return extra

    def _count_sent(self, path: str, n: int) -> None:
        with self._lock:
            self.bytes_sent[path] = self.bytes_sent.get(path, 0) + n

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _span(header: str, size: int) -> tuple[int, int] | None:
    """(start, stop) of a single-range ``Range`` header, or None when it cannot be satisfied."""
    match = _RANGE.match(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.groups()
    if first == "":
        start, stop = max(size - int(last), 0), size
    else:
        start = int(first)
        stop = min(int(last) + 1, size) if last else size
    return None if start >= size or start >= stop else (start, stop)


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: clients opening more connections at once than that had
    # some dropped and retried by TCP a second later, as no real server makes them.
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    """Answers from ``owner``'s directory, with its faults."""

    owner: HttpServer
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in separate writes: with Nagle's algorithm the body waited
    # for the client's delayed ACK of the headers, 40 ms a request on Linux loopback.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the request log is server.requests

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        self.owner._enter()
        try:
            self._answer(head)
        finally:
            self.owner._leave()

    def _answer(self, head: bool) -> None:
        raw_path, _, query = self.path.partition("?")
        path = unquote(raw_path)
        rng = self.headers.get("Range")
        status, drop, delay = self.owner._take("HEAD" if head else "GET", path, rng, query)
        if delay:
            time.sleep(delay)
        if status is not None:
            self._empty(status)
            return
        target = (self.owner.directory / path.lstrip("/")).resolve()
        if self.owner.directory.resolve() not in target.parents or not target.is_file():
            self._empty(404)
            return
        data = target.read_bytes()
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        weak = self.owner.faults.weak_etags
        if weak:
            etag = "W/" + etag
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match != "*" and (weak or if_match != etag):
            self._empty(412)
            return
        span = (0, len(data)) if rng is None else _span(rng, len(data))
        if span is None:
            self._empty(416, {"Content-Range": f"bytes */{len(data)}"})
            return
        start, stop = span
        code = 200 if rng is None else 206
        self._send(path, data[start:stop], code, etag, f"bytes {start}-{stop - 1}/{len(data)}", head, drop)

    def _send(self, path: str, body: bytes, code: int, etag: str, content_range: str, head: bool, drop: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        if code == 206:
            self.send_header("Content-Range", content_range)
        overrun = 0 if head else self.owner._take_overrun()
        if overrun:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if head:
            return
        if overrun:
            self._send_chunked(path, body, overrun)
            return
        if drop:
            # Half the body, then the connection goes: the client must notice.
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        # In pieces, counted: a client that stops reading (and closes) ends the answer early.
        view = memoryview(body)
        for at in range(0, len(view), _PIECE):
            try:
                self.wfile.write(view[at : at + _PIECE])
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            self.owner._count_sent(path, len(view[at : at + _PIECE]))

    def _send_chunked(self, path: str, body: bytes, extra: int) -> None:
        """``body`` and ``extra`` zero bytes more, in chunks, counted."""
        pieces = [body] + [bytes(_PIECE)] * (extra // _PIECE) + [bytes(extra % _PIECE)]
        try:
            for piece in pieces:
                if piece:
                    self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                    self.owner._count_sent(path, len(piece))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _handler(server: HttpServer) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"owner": server})
