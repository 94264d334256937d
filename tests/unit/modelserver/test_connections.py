"""The stopping server's bookkeeping of its connections, on socket pairs: idle ones (accepted, or between
requests) have their reading side shut at the stop or as soon as they come to wait after it; a busy one is left
to finish; the drain waits for every one of them."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from connections import Connections


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made = [socket.socketpair() for _ in range(3)]
    for server_side, _ in made:
        server_side.settimeout(10)
    yield made
    for pair in made:
        for end in pair:
            end.close()


def test_a_stop_ends_idle_connections_and_leaves_a_busy_one_to_finish(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    (accepted, _), (between, _), (busy, busy_client) = pairs
    connections = Connections()
    connections.opened(accepted)
    connections.opened(between)
    connections.taken(between)
    connections.waiting(between)
    connections.opened(busy)
    connections.taken(busy)
    busy_client.sendall(b"the rest of the body")

    assert connections.stop() == 2
    assert accepted.recv(1) == b"" and between.recv(1) == b""
    assert busy.recv(64) == b"the rest of the body"  # still reading: its request is answered
    for connection in (accepted, between):
        connections.closed(connection)
    assert connections.drain(0) is False
    done = threading.Thread(target=connections.closed, args=(busy,))
    done.start()
    assert connections.drain(10) is True
    done.join()


def test_a_connection_that_comes_to_wait_after_the_stop_reads_only_what_it_was_sent(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    (late, late_client), _, _ = pairs
    connections = Connections()
    connections.stop()
    late_client.sendall(b"GET /v2/health/ready HTTP/1.1\r\n\r\n")
    connections.opened(late)
    connections.waiting(late)
    assert late.recv(64) == b"GET /v2/health/ready HTTP/1.1\r\n\r\n"
    assert late.recv(1) == b""
    assert connections.stopping
