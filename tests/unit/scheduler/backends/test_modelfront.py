"""The model front's switching and counting, against two small HTTP servers in this process standing in for model
servers (the real ones are tests/integration/catalog/test_model_serving.py): no switch before the new server answers
ready, a request in flight finishes at the old one while new requests go to the new, a kept-alive connection the
server closed meanwhile sent again, SIGTERM's drain."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from learnerkit.scheduler.backends import modelfront
from learnerkit.scheduler.backends.modelfront import CONTROL_FILE, STATUS_PATH, Handler, Upstreams
from tests.waiting import wait_until


class Upstream:
    """A stand-in model server: answers its name; `/slow` waits for ``release``; ready only when ``ready``."""

    def __init__(self, name: str) -> None:
        self.ready = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()
        outer = self

        class Answer(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path == "/v2/health/ready" and not outer.ready.is_set():
                    self._send(HTTPStatus.SERVICE_UNAVAILABLE, b"{}")
                elif self.path == "/close":
                    self.close_connection = True
                    self._send(HTTPStatus.OK, name.encode())
                else:
                    if self.path == "/slow":
                        outer.entered.set()
                        outer.release.wait(30)
                    self._send(HTTPStatus.OK, name.encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self._send(HTTPStatus.OK, name.encode() + b":" + body)

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class Front:
    def __init__(self, control: Path) -> None:
        self.upstreams = Upstreams(control)
        handler = type("TestHandler", (Handler,), {"upstreams": self.upstreams, "name": "digits"})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.stopping = threading.Event()
        threading.Thread(target=self.upstreams.watch, args=(self.stopping,), daemon=True).start()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def status(self) -> dict[str, Any]:
        return dict(requests.get(f"{self.url}{STATUS_PATH}", timeout=10).json())

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def name(control: Path, upstream: Upstream, version: str) -> None:
    temporary = control / "upstream.tmp"
    temporary.write_text(json.dumps({"url": upstream.url, "version": version}), encoding="utf-8")
    temporary.replace(control / CONTROL_FILE)


def current(front: Front, upstream: Upstream, control: Path) -> None:
    """``upstream`` ready, named in the control file and the front's current server."""
    upstream.ready.set()
    name(control, upstream, "sha256:old")
    wait_until(lambda: front.status()["upstream"] is not None, timeout=10, message="a current server")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Front, Upstream, Upstream, Path]]:
    old, new = Upstream("old"), Upstream("new")
    front = Front(tmp_path)
    yield front, old, new, tmp_path
    front.close()
    old.close()
    new.close()


def test_it_switches_only_once_the_new_server_is_ready_and_the_old_one_finishes_what_it_holds(
    pair: tuple[Front, Upstream, Upstream, Path],
) -> None:
    front, old, new, control = pair
    assert requests.get(f"{front.url}/v2/models/digits", timeout=10).status_code == 503
    old.ready.set()
    name(control, old, "sha256:old")
    wait_until(lambda: (front.status()["upstream"] or {}).get("url") == old.url, timeout=10, message="old current")
    assert requests.post(f"{front.url}/v2/models/digits/infer", data=b"x", timeout=10).text == "old:x"

    held: list[str] = []
    slow = threading.Thread(target=lambda: held.append(requests.get(f"{front.url}/slow", timeout=30).text))
    slow.start()
    assert old.entered.wait(10)
    name(control, new, "sha256:new")
    wait_until(lambda: front.status()["pending"] is not None, timeout=10, message="the new server pending")
    assert front.status()["upstream"]["url"] == old.url  # not ready yet: nothing goes to it
    assert requests.get(f"{front.url}/v2/models/digits", timeout=10).text == "old"

    new.ready.set()
    wait_until(lambda: front.status()["upstream"]["url"] == new.url, timeout=10, message="the switch")
    assert requests.get(f"{front.url}/v2/models/digits", timeout=10).text == "new"
    assert front.status()["in_flight"] == {old.url: 1}  # the slow request, still at the old server
    old.release.set()
    slow.join(10)
    assert held == ["old"]
    assert front.status()["in_flight"] == {}


def test_a_kept_alive_connection_the_server_closed_is_opened_again(
    pair: tuple[Front, Upstream, Upstream, Path],
) -> None:
    front, old, _, control = pair
    current(front, old, control)
    with requests.Session() as session:  # one client connection: one front thread, one connection to the server
        for path in ("/close", "/v2/models/digits", "/close", "/v2/models/digits"):
            assert session.get(f"{front.url}{path}", timeout=10).status_code == 200


def test_a_stopping_front_waits_for_the_requests_in_flight_and_closes_kept_connections(
    pair: tuple[Front, Upstream, Upstream, Path],
) -> None:
    front, old, _, control = pair
    current(front, old, control)
    held: list[str] = []
    slow = threading.Thread(target=lambda: held.append(requests.get(f"{front.url}/slow", timeout=30).text))
    slow.start()
    assert old.entered.wait(10)
    assert not front.upstreams.drain(0.05)  # the slow request holds it
    Handler.stopping.set()
    try:
        with requests.Session() as session:
            answer = session.get(f"{front.url}/v2/models/digits", timeout=10)
            assert answer.headers["Connection"] == "close"
        old.release.set()
        assert front.upstreams.drain(10)
        slow.join(10)
        assert held == ["old"]
    finally:
        Handler.stopping.clear()


def test_naming_the_current_server_again_ends_a_pending_switch(pair: tuple[Front, Upstream, Upstream, Path]) -> None:
    front, old, new, control = pair
    current(front, old, control)
    name(control, new, "sha256:new")
    wait_until(lambda: front.status()["pending"] is not None, timeout=10, message="the new server pending")
    name(control, old, "sha256:old")  # the roll-over undone: the new server never got ready
    wait_until(lambda: front.status()["pending"] is None, timeout=10, message="the pending switch ended")
    assert front.status()["upstream"]["url"] == old.url


def test_a_control_file_that_is_not_json_is_reported_and_changes_nothing(
    pair: tuple[Front, Upstream, Upstream, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    front, old, _, control = pair
    current(front, old, control)
    (control / CONTROL_FILE).write_text("{not json", encoding="utf-8")
    wait_until(lambda: "upstream: Expecting" in capsys.readouterr().err, timeout=10, message="the report")
    assert front.status()["upstream"]["url"] == old.url
    assert modelfront.ready(old.url) and not modelfront.ready("http://127.0.0.1:1")


@pytest.mark.parametrize("length", ["abc", "-5", "+5", "1_0"])
def test_a_content_length_that_is_no_count_of_bytes_is_answered_400(
    pair: tuple[Front, Upstream, Upstream, Path], length: str
) -> None:
    front, old, _, control = pair
    current(front, old, control)
    host, port = front.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
        answer = sock.makefile("rb").read()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert json.loads(body) == {"error": f"Content-Length {length.strip()!r} is not a count of bytes"}
