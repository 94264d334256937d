"""A loopback HTTP proxy in front of a real server, for fault injection: 503 answers, held and corrupted
responses, corrupted request bodies, and a count of requests by method and path (to assert what was or was
not fetched again).

Headers pass through unchanged (``Host`` included), so SigV4 signatures made for the proxy's address
still verify at the server behind it.
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {
    "expect",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
}
_CHUNK = 64 * 1024


@dataclass
class _Rule:
    method: str | None
    path_contains: str
    remaining: int | None
    """How many more requests it applies to (None: all)."""

    def take(self, method: str, path: str) -> bool:
        if self.method not in (None, method) or self.path_contains not in path:
            return False
        if self.remaining is None:
            return True
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True


@dataclass
class _Hold:
    rule: _Rule
    after_bytes: int
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    cut: bool = False
    """Set before ``release`` to drop the connection instead of sending the rest (a server that died)."""


class FaultyProxy:
    """Forward to ``upstream``; answer 503, hold or corrupt what matches the rules set on it."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        """Requests by method."""
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, in arrival order."""
        self._fail_next = 0
        self._retry_after = "0"
        self._failures: list[_Rule] = []
        self._corruptions: list[_Rule] = []
        self._request_corruptions: list[_Rule] = []
        self._holds: list[_Hold] = []
        self._request_holds: list[_Hold] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="faulty-s3", daemon=True)
        self._thread.start()

    def fail_next(self, count: int, *, retry_after: float = 0) -> None:
        """Answer 503 SlowDown (with ``Retry-After``) to the next ``count`` requests, whatever they are."""
        with self.lock:
            self._fail_next = count
            self._retry_after = f"{retry_after:g}"

    def fail_matching(self, method: str | None, path_contains: str, *, times: int | None = None) -> None:
        """Answer 503 to requests with this method (None: any) whose path contains the text."""
        with self.lock:
            self._failures.append(_Rule(method, path_contains, times))

    def corrupt_matching(self, method: str | None, path_contains: str, *, times: int | None = None) -> None:
        """Flip one byte of the body of matching responses (length and headers unchanged)."""
        with self.lock:
            self._corruptions.append(_Rule(method, path_contains, times))

    def corrupt_requests_matching(self, method: str | None, path_contains: str, *, times: int | None = None) -> None:
        """Flip one byte of the body of matching requests on their way to the server (headers unchanged)."""
        with self.lock:
            self._request_corruptions.append(_Rule(method, path_contains, times))

    def hold_matching(self, method: str | None, path_contains: str, *, after_bytes: int = 0) -> _Hold:
        """Send the first ``after_bytes`` of a matching response, then wait until ``.release`` is set."""
        hold = _Hold(_Rule(method, path_contains, 1), after_bytes)
        with self.lock:
            self._holds.append(hold)
        return hold

    def hold_requests_matching(self, method: str | None, path_contains: str) -> _Hold:
        """Hold the next matching request, its body read, before it reaches the server, until ``.release`` is
        set; then forward it, or with ``.cut`` drop the connection unanswered (the server never sees it)."""
        hold = _Hold(_Rule(method, path_contains, 1), 0)
        with self.lock:
            self._request_holds.append(hold)
        return hold

    def heal(self) -> None:
        """Drop every failure rule: the outage is over."""
        with self.lock:
            self._fail_next = 0
            self._failures.clear()

    def count(self, method: str, path_contains: str = "") -> int:
        with self.lock:
            return sum(1 for m, p in self.requests if m == method and path_contains in p)

    def reset_counts(self) -> None:
        with self.lock:
            self.counts.clear()
            self.requests.clear()

    def close(self) -> None:
        with self.lock:
            for hold in (*self._holds, *self._request_holds):
                hold.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _corrupts_request(self, method: str, path: str) -> bool:
        with self.lock:
            return any([rule.take(method, path) for rule in self._request_corruptions])

    def _held_request(self, method: str, path: str) -> bool:
        """Hold a matching request until released; whether it is then to be dropped."""
        with self.lock:
            hold = next((h for h in self._request_holds if h.rule.take(method, path)), None)
        if hold is None:
            return False
        hold.reached.set()
        hold.release.wait()
        return hold.cut

    def _decide(self, method: str, path: str) -> tuple[bool, bool, _Hold | None]:
        with self.lock:
            self.counts[method] += 1
            self.requests.append((method, path))
            fail = False
            if self._fail_next > 0:
                self._fail_next -= 1
                fail = True
            fail = any([rule.take(method, path) for rule in self._failures]) or fail
            corrupt = any([rule.take(method, path) for rule in self._corruptions])
            hold = next((h for h in self._holds if h.rule.take(method, path)), None)
            return fail, corrupt, hold

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: tests count requests through the proxy's own records."""

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if body and proxy._corrupts_request(self.command, self.path):
                    body = body[:-1] + bytes([body[-1] ^ 0xFF])
                fail, corrupt, hold = proxy._decide(self.command, self.path)
                if proxy._held_request(self.command, self.path):
                    self.close_connection = True
                    return
                if fail:
                    self._slow_down()
                    return
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    try:
                        upstream.request(self.command, self.path, body=body, headers=headers)
                        response = upstream.getresponse()
                    except OSError:
                        self.close_connection = True  # the server is down: the client sees a dropped connection
                        return
                    self.send_response_only(response.status, response.reason)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP_BY_HOP:
                            self.send_header(key, value)
                    self.end_headers()
                    self._relay(response, corrupt, hold)
                finally:
                    upstream.close()

            def _relay(self, response: http.client.HTTPResponse, corrupt: bool, hold: _Hold | None) -> None:
                sent = 0
                first = True
                while True:
                    try:
                        chunk = response.read(_CHUNK)
                    except (OSError, http.client.HTTPException):
                        self.close_connection = True
                        return
                    if not chunk:
                        return
                    if corrupt and first:
                        chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                    first = False
                    if hold is not None and sent + len(chunk) > hold.after_bytes:
                        head = chunk[: max(0, hold.after_bytes - sent)]
                        self.wfile.write(head)
                        self.wfile.flush()
                        sent += len(head)
                        chunk = chunk[len(head) :]
                        hold.reached.set()
                        hold.release.wait()
                        if hold.cut:
                            self.close_connection = True
                            return
                        hold = None
                    try:
                        self.wfile.write(chunk)
                    except OSError:
                        self.close_connection = True
                        return
                    sent += len(chunk)

            def _slow_down(self) -> None:
                payload = (
                    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                    b"<Message>Please reduce your request rate.</Message></Error>"
                )
                self.send_response(503)
                self.send_header("Retry-After", proxy._retry_after)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
