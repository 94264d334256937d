"""The model front: a served model's stable address, in front of whichever of its servers is current.

    python modelfront.py --control /control --name digits [--port 8080]

It runs in a container of the model server image (the standard library only: this file is mounted read-only), on
the served model's Docker network, published on the model's fixed port. ``/control/upstream`` (a folder mounted
read-only, written atomically by `model serve` on the host: nobody else can switch it) names the current server,
``{"url": "http://CONTAINER:8080", "version": "sha256:..."}``. When it names a new one, the front asks it
`/v2/health/ready` and switches only once it answers 200; from then on every new request goes to it, while the
requests already sent to the old one finish there (their count per server is at ``/learnerkit/front``, which
`model serve` waits on before it stops the old server). On SIGTERM it stops accepting connections and lets the
requests it is forwarding finish. Nothing else of the request changes: the Open Inference Protocol passes through.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STATUS_PATH = "/learnerkit/front"
CONTROL_FILE = "upstream"
WATCH_SECONDS = 0.05
"""How often the control file is looked at (a stat)."""
PROBE_TIMEOUT = 2.0
UPSTREAM_TIMEOUT = 120.0
DRAIN_SECONDS = 25.0
"""On SIGTERM (`model stop`): how long the requests being forwarded may take to finish."""
MAX_BODY = 64 << 20
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "upgrade", "host"}
)
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
"""A kept-alive connection the server closed meanwhile: the request was not taken, so it is sent again once."""


class Upstreams:
    """The current server, the one the control file names while it is not ready yet, and the requests in flight
    to each; choosing a server and counting the request are one step, so a count of 0 means none will come."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.current: dict[str, str] | None = None
        self.pending: dict[str, str] | None = None
        self.in_flight: dict[str, int] = {}
        self.changed = threading.Condition()
        self._seen: tuple[int, int, int] | None = None

    def acquire(self) -> dict[str, str] | None:
        with self.changed:
            if self.current is not None:
                url = self.current["url"]
                self.in_flight[url] = self.in_flight.get(url, 0) + 1
            return self.current

    def release(self, url: str) -> None:
        with self.changed:
            self.in_flight[url] -= 1
            if not self.in_flight[url]:
                del self.in_flight[url]
            self.changed.notify_all()

    def status(self) -> dict[str, Any]:
        with self.changed:
            return {
                "upstream": self.current,
                "pending": self.pending,
                "in_flight": dict(self.in_flight),
            }

    def drain(self, seconds: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: not self.in_flight, timeout=seconds)

    def look(self) -> None:
        """Read the control file when it changed; switch to the server it names once that answers ready."""
        path = self.control / CONTROL_FILE
        try:
            info = path.stat()
            seen = (info.st_ino, info.st_mtime_ns, info.st_size)
            if seen != self._seen:
                named = json.loads(path.read_text(encoding="utf-8"))
                self._seen = seen
                wanted = {"url": str(named["url"]), "version": str(named["version"])}
                with self.changed:  # naming the current server again (a roll-over undone) ends any pending switch
                    self.pending = None if self.current is not None and wanted["url"] == self.current["url"] else wanted
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"modelfront: {path}: {e}", file=sys.stderr, flush=True)
            return
        if self.pending is not None and ready(self.pending["url"]):  # the one writer of pending: this thread
            with self.changed:
                previous, self.current, self.pending = self.current, self.pending, None
            print(
                f"modelfront: now {self.current['url']} ({self.current['version']}); "
                f"was {previous['url'] if previous else 'none'}",
                file=sys.stderr,
                flush=True,
            )

    def watch(self, stopping: threading.Event) -> None:
        while not stopping.wait(WATCH_SECONDS):
            self.look()


def ready(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=PROBE_TIMEOUT)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == HTTPStatus.OK
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    upstreams: Upstreams
    name: str
    stopping = threading.Event()
    """Set on SIGTERM: every answer from then on closes its connection, so kept-alive clients leave."""
    _connections = threading.local()

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == STATUS_PATH:
            self._send(HTTPStatus.OK, {"Content-Type": "application/json"}, json.dumps(self._status()).encode())
        else:
            self._forward(b"")

    def do_POST(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
            return
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()):  # int() takes "-5", " 5", "٣" and "1_0"
            self.close_connection = True
            self._error(HTTPStatus.BAD_REQUEST, f"Content-Length {declared!r} is not a count of bytes")
            return
        length = int(declared)
        if length > MAX_BODY:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is over {MAX_BODY} bytes")
            return
        self._forward(self.rfile.read(length))

    def _status(self) -> dict[str, Any]:
        return {"name": self.name, **self.upstreams.status()}

    def _forward(self, body: bytes) -> None:
        upstream = self.upstreams.acquire()
        if upstream is None:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, f"{self.name}: no server is ready yet")
            return
        try:  # counted until the answer is written: a stopping front waits for it
            try:
                status, headers, data = self._exchange(upstream["url"], body)
            except (OSError, http.client.HTTPException) as e:
                self._error(HTTPStatus.BAD_GATEWAY, f"{self.name}: its server {upstream['url']} did not answer: {e}")
                return
            self._send(status, headers, data)
        finally:
            self.upstreams.release(upstream["url"])

    def _exchange(self, url: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        for attempt in (1, 2):
            connection = self._connection(url, fresh=attempt == 2)
            try:
                connection.request(
                    self.command, self.path, body=body if self.command == "POST" else None, headers=headers
                )
                response = connection.getresponse()
                data = response.read()
            except STALE:
                connection.close()
                if attempt == 2:
                    raise
                continue
            except (OSError, http.client.HTTPException):
                connection.close()
                raise
            if response.will_close:
                connection.close()
            kept = {k: v for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP | {"content-length"}}
            return response.status, kept, data
        raise AssertionError("unreachable")

    def _connection(self, url: str, fresh: bool) -> http.client.HTTPConnection:
        """This thread's kept-alive connection to ``url`` (one client connection, one thread, one per server)."""
        pool: dict[str, http.client.HTTPConnection] = getattr(self._connections, "pool", None) or {}
        self._connections.pool = pool
        if fresh or url not in pool:
            if url in pool:
                pool[url].close()
            parts = urllib.parse.urlsplit(url)
            pool[url] = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=UPSTREAM_TIMEOUT)
        return pool[url]

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(status, {"Content-Type": "application/json"}, json.dumps({"error": message}).encode())

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        if self.stopping.is_set():
            self.close_connection = True
            self.send_header("Connection", "close")
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Refusals only (a line per request would cost more than the request)."""
        if str(code).startswith(("4", "5")):
            super().log_request(code, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 (inside its container; published on 127.0.0.1)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    upstreams = Upstreams(args.control)
    Handler.upstreams, Handler.name = upstreams, args.name
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    stopping = Handler.stopping
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    upstreams.look()
    threading.Thread(target=upstreams.watch, args=(stopping,), daemon=True).start()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"modelfront: {args.name} on port {args.port}", file=sys.stderr, flush=True)
    stopping.wait()
    server.shutdown()
    server.server_close()
    started = time.monotonic()
    drained = upstreams.drain(DRAIN_SECONDS)
    print(
        f"modelfront: stopped; {'drained' if drained else 'NOT drained'} in {time.monotonic() - started:.2f} s",
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
