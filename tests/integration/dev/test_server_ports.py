"""A SeaweedFS or an etcd whose chosen port another process binds first (free ports are chosen, then bound later:
seen in the parallel suite as "s3 failed to listen on grpc port ...: address already in use") starts on new ports."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from learnerkit.dev import etcd, s3
from learnerkit.dev.ports import LOOPBACK

pytestmark = pytest.mark.services


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port this test listens on, so no other process can bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_first_start_whose_port_was_taken_starts_on_new_ports(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = s3.free_ports
    chosen = original(len(s3.PORTS))
    chosen[list(s3.PORTS).index("s3.port.grpc")] = taken_port
    answers = iter([chosen])
    monkeypatch.setattr(s3, "free_ports", lambda count: next(answers, None) or original(count))
    server = s3.SeaweedServer(tmp_path / "s3")
    assert server.ports["s3.port.grpc"] == taken_port
    try:
        server.start()
        assert taken_port not in server.ports.values()
        client = server.client()
        client.create_bucket(Bucket="after-a-retry")
        client.put_object(Bucket="after-a-retry", Key="k", Body=b"v")
        assert client.get_object(Bucket="after-a-retry", Key="k")["Body"].read() == b"v"
    finally:
        server.stop()


def test_an_etcd_whose_client_port_was_taken_starts_on_new_ports(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = etcd.free_ports
    answers = iter([[taken_port, original(1)[0]]])
    monkeypatch.setattr(etcd, "free_ports", lambda count: next(answers, None) or original(count))
    server = etcd.EtcdServer(etcd.etcd_binary(), tmp_path / "etcd" / "data")
    assert server.client_port == taken_port
    try:
        server.start()
        assert taken_port not in (server.client_port, server.peer_port)
        assert etcd.etcd_healthy(server.endpoint)
        server.stop()
        ports = (server.client_port, server.peer_port)
        server.start()  # a restart keeps its ports, and the data the first start wrote
        assert (server.client_port, server.peer_port) == ports
        assert etcd.etcd_healthy(server.endpoint)
    finally:
        server.stop()
