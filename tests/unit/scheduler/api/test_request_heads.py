"""D1: request heads are bounded before any work: a real server (the `serve` configuration) on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Awaitable, Callable, Iterator

import pytest
import uvicorn
from fastapi import Request, Response

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.headers import MAX_HEAD_BYTES, MAX_HEADERS
from learnerkit.scheduler.api.server import uvicorn_config
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade
from tests.waiting import wait_until


@pytest.fixture
def server(fake: FakeFacade, tenants: Tenants) -> Iterator[tuple[int, list[str]]]:
    """The port, and the paths of the requests that reached the application."""
    seen: list[str] = []
    app = create_app(fake, tenants.path)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        seen.append(request.url.path)
        return await call_next(request)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    running = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, "warning"))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: running.started, timeout=10, message="uvicorn to start")
    yield port, seen
    running.should_exit = True
    thread.join(timeout=10)
    sock.close()


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` whole, then read the answer until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def test_a_plain_request_is_answered(server: tuple[int, list[str]]) -> None:
    port, seen = server
    assert exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert seen == ["/healthz"]


def test_a_head_over_the_limit_is_refused_with_431_before_the_application(server: tuple[int, list[str]]) -> None:
    port, seen = server
    start = b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: "
    request = start + b"a" * (MAX_HEAD_BYTES + 1 - len(start))  # one byte over, the head still unfinished
    answer = exchange(port, request)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert f"over {MAX_HEAD_BYTES} bytes".encode() in answer
    assert seen == []


def test_too_many_headers_are_refused_with_431_before_the_application(server: tuple[int, list[str]]) -> None:
    port, seen = server
    headers = b"".join(b"X-H%d: 1\r\n" % n for n in range(MAX_HEADERS + 1))
    answer = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert f"more than {MAX_HEADERS} headers".encode() in answer
    assert seen == []


def test_a_body_sent_with_its_head_is_not_counted_as_head(server: tuple[int, list[str]], tenants: Tenants) -> None:
    port, seen = server
    body = b"#" + b"x" * (2 * MAX_HEAD_BYTES)  # a YAML comment: read whole, then refused as no manifest
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/yaml\r\n"
        b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
    )
    answer = exchange(port, head % (tenants.a.encode(), len(body)) + body)
    assert answer.startswith(b"HTTP/1.1 422"), answer[:300]
    assert seen == ["/v1/jobs"]
