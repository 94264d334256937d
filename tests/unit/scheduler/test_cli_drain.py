"""`learnerkit scheduler drain` when the scheduler's etcd does not answer: the error says where the command looked
and how to point it elsewhere, in text and in JSON."""

from __future__ import annotations

import json
import socket

from click.testing import CliRunner

from learnerkit.cli import cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_drain_without_etcd_names_the_setting_to_give() -> None:
    endpoint = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(cli, ["scheduler", "drain", "node-a", "--etcd-endpoints", endpoint, "--output", "json"])
    assert result.exit_code == 1
    answer = json.loads(result.output)
    assert endpoint in answer["message"]
    assert "--etcd-endpoints or ETCD_ENDPOINTS" in answer["message"]
