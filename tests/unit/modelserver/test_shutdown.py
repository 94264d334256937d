"""The model server's SIGTERM, seen by clients connected to it directly on kept-alive connections: it stops
accepting, closes the idle connection, answers the request it had read with `Connection: close`, and exits; a
request that never finishes arriving does not hold it past `--drain-seconds`."""

from __future__ import annotations

import http.client
import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.waiting import wait_until

from .versions import MODEL_FOLDER, Server, classifier, infer_body, onnx_bytes, signed_version

pytestmark = pytest.mark.timeout(300)
BODY = json.dumps(infer_body(("input", "FP32", [1, 4], [0.5, -1.0, 2.0, 0.0]))).encode()


@pytest.fixture(scope="module")
def graph() -> dict[str, bytes]:
    """The classifier as ONNX: onnxruntime starts in a fraction of torch's import time."""
    return {f"{MODEL_FOLDER}/model.onnx": onnx_bytes(classifier(), (torch.zeros(1, 4),), ["input"], ["logits"])}


@pytest.fixture
def server(tmp_path: Path, graph: dict[str, bytes]) -> Iterator[Server]:
    running = Server(*signed_version(tmp_path, graph))
    yield running
    running.stop()


def kept_alive(server: Server) -> http.client.HTTPConnection:
    """A connection that asked once and stays open, idle."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.request("GET", "/v2/health/ready")
    answer = connection.getresponse()
    assert answer.status == 200 and not answer.will_close
    answer.read()
    return connection


def request_taken(server: Server) -> socket.socket:
    """A connection whose `infer` the server has read the head of (it answered `100 Continue`), its body not sent."""
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    head = (
        f"POST /v2/models/m/infer HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\nExpect: 100-continue\r\n\r\n"
    )
    connection.sendall(head.encode())
    assert connection.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n")
    return connection


def refused(port: int) -> bool:
    """Whether a new connection to ``port`` is turned away: refused, or reset as it is made (a connection the
    kernel queued for the listening socket as the server closed it; seen once in the parallel suite)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    return False


def test_sigterm_closes_idle_connections_and_answers_the_one_in_flight_with_connection_close(server: Server) -> None:
    idle = kept_alive(server)
    busy = request_taken(server)
    server.process.send_signal(signal.SIGTERM)

    assert idle.sock is not None
    assert idle.sock.recv(1) == b"", "the idle kept-alive connection was not closed"  # waits up to 60 s
    wait_until(lambda: refused(server.port), timeout=30, message="new connections refused")
    assert server.process.poll() is None, "it exited with a request in flight"

    busy.sendall(BODY)
    answer = http.client.HTTPResponse(busy)
    answer.begin()
    assert answer.status == 200 and answer.getheader("Connection") == "close"
    assert json.loads(answer.read())["outputs"][0]["shape"] == [1, 3]
    assert busy.recv(1) == b"", "the connection stayed open after its answer"
    assert server.process.wait(timeout=60) == 0
    assert any("drained" in line and "NOT" not in line for line in server.log), server.log


def test_a_request_that_never_arrives_whole_does_not_hold_the_server_past_its_drain(
    tmp_path: Path, graph: dict[str, bytes]
) -> None:
    server = Server(*signed_version(tmp_path, graph), "--drain-seconds", "0.5")
    try:
        stuck = request_taken(server)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
        assert any("NOT drained" in line for line in server.log), server.log
        stuck.close()
    finally:
        server.stop()
