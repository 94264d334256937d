"""`model serve` and `model stop` pick where the model is served: this host's Docker engine, or the cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from learnerkit.scheduler import cli_model
from learnerkit.scheduler.serving import deployment


class Cluster:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.stopped: list[tuple[str, str]] = []

    def stop(self, tenant: str, name: str) -> list[str]:
        self.stopped.append((tenant, name))
        return ["sha256:" + "11" * 32]


def test_stop_on_the_cluster_stops_there_and_not_on_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    clusters: list[Cluster] = []

    def cluster_servers(namespace: str) -> Cluster:
        clusters.append(Cluster(namespace))
        return clusters[-1]

    def docker_stop(*_: Any) -> list[str]:
        raise AssertionError("the Docker backend was asked")

    monkeypatch.setattr(deployment, "cluster_servers", cluster_servers)
    monkeypatch.setattr(deployment, "stop", docker_stop)
    monkeypatch.setenv("LEARNERKIT_SCHEDULER_BACKEND", "kubernetes")
    monkeypatch.setenv("LEARNERKIT_HOME", "/nonexistent-home")
    args = ["stop", "digits", "--tenant", "acme", "--namespace", "serving", "--output", "json"]
    result = CliRunner().invoke(cli_model.model_group, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "name": "digits",
        "stopped": ["sha256:" + "11" * 32],
        "references": ["digits"],
    }
    assert [(c.namespace, c.stopped) for c in clusters] == [("serving", [("acme", "digits")])]


def test_serve_on_the_cluster_refuses_a_port() -> None:
    args = ["serve", "digits@production", "--backend", "kubernetes", "--port", "8080", "--tenant", "acme"]
    result = CliRunner().invoke(cli_model.model_group, args)
    assert result.exit_code != 0
    assert "--port is the Docker backend's" in result.output
