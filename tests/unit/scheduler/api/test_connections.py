"""Slow and many clients: a real server (the `serve` configuration, short limits) on loopback. Clients other than
the normal one come from 127.0.0.2 and up (Linux routes all of 127.0.0.0/8 to loopback), so the per-address cap
acts as it would between hosts."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.connections import ConnectionLimits
from learnerkit.scheduler.api.server import uvicorn_config
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade
from tests.waiting import wait_until

LIMITS = ConnectionLimits(head_timeout_s=1.0, body_idle_s=1.0, body_total_s=3.0, max_per_address=4, max_total=8)
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@pytest.fixture
def port(fake: FakeFacade, tenants: Tenants) -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    number: int = sock.getsockname()[1]
    running = uvicorn.Server(uvicorn_config(create_app(fake, tenants.path), "127.0.0.1", number, "error", LIMITS))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: running.started, timeout=10, message="uvicorn to start")
    yield number
    running.should_exit = True
    thread.join(timeout=10)
    sock.close()


def connect(port: int, source: str) -> socket.socket:
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.bind((source, 0))
    conn.connect(("127.0.0.1", port))
    return conn


def read_all(conn: socket.socket) -> bytes:
    answer = b""
    try:
        while chunk := conn.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def answered(port: int, source: str = "127.0.0.1") -> bytes:
    with connect(port, source) as conn:
        conn.sendall(HEALTHZ)
        return read_all(conn)


def test_a_slow_head_is_answered_408_and_closed_after_its_timeout(port: int) -> None:
    with connect(port, "127.0.0.2") as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        sent_more = 0
        conn.settimeout(0.2)
        answer = b""
        while time.monotonic() - started < 10 and not answer:  # one byte at a time, never the whole head
            try:
                conn.sendall(b"X")
                sent_more += 1
                answer = conn.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        conn.settimeout(10)
        answer += read_all(conn)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"not complete within 1 s" in answer
    assert time.monotonic() - started < 5, "closed near its 1 s timeout, not left open"
    assert sent_more >= 2, "the client kept sending: the deadline is on the whole head, not on idle time"
    assert answered(port, "127.0.0.2").startswith(b"HTTP/1.1 200"), "the address may connect again"


def test_a_body_that_stalls_is_answered_408(port: int, tenants: Tenants) -> None:
    with connect(port, "127.0.0.3") as conn:
        conn.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: 100\r\n\r\n#" % tenants.a.encode()
        )
        answer = read_all(conn)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"sent nothing for 1 s" in answer


def test_a_keep_alive_connection_gets_a_fresh_head_deadline_per_request(port: int) -> None:
    with connect(port, "127.0.0.4") as conn:
        for _ in range(3):
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(65536).startswith(b"HTTP/1.1 200")
            time.sleep(0.6)  # the pause a deadline is measured against: 3 x 0.6 s is past one 1 s deadline


def test_connections_past_the_cap_of_an_address_are_refused_while_another_address_is_served(port: int) -> None:
    held = [connect(port, "127.0.0.5") for _ in range(LIMITS.max_per_address)]
    try:
        with connect(port, "127.0.0.5") as refused:
            answer = read_all(refused)
        assert answer.startswith(b"HTTP/1.1 429"), answer
        assert b"LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS" in answer
        assert b"retry-after: 5" in answer.lower()
        assert answered(port, "127.0.0.1").startswith(b"HTTP/1.1 200"), "another address is not affected"
    finally:
        for conn in held:
            conn.close()
    wait_until(
        lambda: answered(port, "127.0.0.5").startswith(b"HTTP/1.1 200"),
        timeout=10,
        message="the address to be served once its connections closed",
    )


def test_connections_past_the_cap_in_all_are_refused_with_503(port: int) -> None:
    held = [connect(port, f"127.0.0.{6 + n // LIMITS.max_per_address}") for n in range(LIMITS.max_total)]
    try:
        with connect(port, "127.0.0.20") as refused:
            answer = read_all(refused)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"LEARNERKIT_API_MAX_CONNECTIONS" in answer
    finally:
        for conn in held:
            conn.close()
    wait_until(
        lambda: answered(port, "127.0.0.20").startswith(b"HTTP/1.1 200"),
        timeout=10,
        message="a new connection to be served once the others closed",
    )


def test_the_rest_of_a_refused_body_is_read_for_the_head_timeout_at_most(port: int, tenants: Tenants) -> None:
    """A manifest declared over the limit is answered 413 unread; the rest of its body is then read and dropped
    (closing at once could reset the connection before the client reads the 413), for the head timeout at most."""
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\n"
        b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (tenants.a.encode(), 1 << 30)
    )
    with connect(port, "127.0.0.22") as conn:
        conn.sendall(head)
        assert conn.recv(65536).startswith(b"HTTP/1.1 413")
        started = time.monotonic()
        conn.settimeout(0.2)
        closed = False
        while not closed and time.monotonic() - started < 10:
            try:
                conn.sendall(b"#")  # the body, slowly
                closed = conn.recv(65536) == b""
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
    assert closed, "the connection was closed"
    assert time.monotonic() - started >= LIMITS.head_timeout_s * 0.9, "the rest of the body had its time"
