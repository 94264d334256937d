"""Each served reference (NAME@ALIAS or NAME@VERSION) is an endpoint of its own: Docker names that never collide
and fit a table, and `model stop` of one endpoint leaving the name's others serving, against a fake engine (the
real containers: tests/integration/catalog/test_model_serving.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.backends import modelservers
from learnerkit.scheduler.backends.modelservers import Endpoint, ServingError, front_labels, server_labels
from tests.unit.scheduler.serving.fakeengine import FakeEngine

V1, V2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    engine = FakeEngine()
    monkeypatch.setattr(modelservers, "engine", lambda: engine)
    yield engine


def serving(engine: FakeEngine, endpoint: Endpoint, digest: str, port: int) -> list[str]:
    """What `roll_over` leaves on the engine: a front on the endpoint's port, a server, the endpoint's network;
    their names."""
    front = engine.add(endpoint.front_container, front_labels(endpoint), port)
    server = engine.add(endpoint.server_container(digest), server_labels(endpoint, digest), port + 1000)
    network = engine.networks.create(endpoint.network_name, "bridge", front_labels(endpoint))
    return [front.name, server.name, network.name]


def test_docker_names_are_distinct_per_endpoint_readable_and_fit_a_table() -> None:
    endpoints = [
        Endpoint("team", "digits", "production"),
        Endpoint("team", "digits", "candidate"),
        Endpoint("team", "digits", V1),
        Endpoint("team", "digits", V2),
        Endpoint("team-a", "digits", "x"),  # the same words joined by "-" another way:
        Endpoint("team", "a-digits", "x"),
        Endpoint("team", "digits", "x-y"),
        Endpoint("team", "digits-x", "y"),
        Endpoint("other", "digits", "production"),  # another tenant's
        Endpoint("team", "a" * 100, "b" * 63),
    ]
    for kind in ("front_container", "network_name"):
        names = [getattr(e, kind) for e in endpoints]
        assert len(set(names)) == len(names), names
        assert max(len(n) for n in names) <= 44, names
    servers = [e.server_container(V1) for e in endpoints]
    assert len(set(servers)) == len(servers) and max(len(n) for n in servers) <= 64, servers
    assert "digits-candidate" in Endpoint("team", "digits", "candidate").front_container
    assert Endpoint("team", "digits", V1).reference == f"digits@{V1}"


def test_stopping_one_alias_leaves_the_others_of_the_name_serving(fake: FakeEngine) -> None:
    production, candidate = Endpoint("team", "digits", "production"), Endpoint("team", "digits", "candidate")
    serving(fake, production, V1, 41001)
    candidates = serving(fake, candidate, V2, 41002)
    serving(fake, Endpoint("team", "digits-x", "candidate"), V2, 41003)  # another model: untouched throughout
    assert [(s.reference, s.version, s.url) for s in modelservers.served_endpoints("team", "digits")] == [
        ("digits@candidate", V2, "http://127.0.0.1:41002"),
        ("digits@production", V1, "http://127.0.0.1:41001"),
    ]

    stopped = modelservers.stop("team", "digits", "candidate")
    assert [(s.reference, s.version) for s in stopped] == [("digits@candidate", V2)]
    assert sorted(fake.removed) == sorted(candidates)
    assert modelservers.served(production).url == "http://127.0.0.1:41001"
    with pytest.raises(ServingError, match=r"digits@candidate is not served for tenant team \(served: digits@prod"):
        modelservers.served(candidate)

    with pytest.raises(ServingError, match=r"digits@candidate is not served for tenant team \(served: digits@prod"):
        modelservers.stop("team", "digits", "candidate")
    assert [s.reference for s in modelservers.stop("team", "digits")] == ["digits@production"]
    assert [s.reference for s in modelservers.served_endpoints("team")] == ["digits-x@candidate"]
    with pytest.raises(ServingError, match="model digits is not served for tenant team"):
        modelservers.stop("team", "digits")


def test_model_stop_names_the_alias_it_stopped_and_the_one_not_served(
    fake: FakeEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path))
    serving(fake, Endpoint("team", "digits", "production"), V1, 41001)
    serving(fake, Endpoint("team", "digits", "candidate"), V2, 41002)
    run = CliRunner().invoke
    assert "NAME@ALIAS" in run(cli, ["model", "stop", "--help"]).output

    result = run(cli, ["model", "stop", "digits@candidate", "--tenant", "team", "--output", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"name": "digits", "stopped": [V2], "references": ["digits@candidate"]}

    result = run(cli, ["model", "stop", "digits@candidate", "--tenant", "team", "--output", "json"])
    assert result.exit_code == 1, result.output
    assert "digits@candidate is not served for tenant team (served: digits@production" in result.output
    assert [s.reference for s in modelservers.served_endpoints("team")] == ["digits@production"]


def test_model_served_lists_each_endpoint_whole_at_80_columns(fake: FakeEngine) -> None:
    serving(fake, Endpoint("team", "digits", "production"), V1, 41001)
    serving(fake, Endpoint("team", "digits", V2), V2, 41002)
    serving(fake, Endpoint("other", "digits", "production"), V1, 41003)  # another tenant's: not listed
    run = CliRunner().invoke
    result = run(cli, ["model", "served", "digits", "--tenant", "team", "--output", "json"])
    assert result.exit_code == 0, result.output
    assert [(r["reference"], r["alias"], r["version"], r["url"]) for r in json.loads(result.output)] == [
        ("digits@production", "production", V1, "http://127.0.0.1:41001"),
        (f"digits@{V2}", None, V2, "http://127.0.0.1:41002"),
    ]
    text = run(cli, ["model", "served", "--tenant", "team"], env={"COLUMNS": "80"}).output.splitlines()
    assert "digits@production http://127.0.0.1:41001" in text and f"  {V1}" in text, text
    assert all(len(line) <= 80 for line in text if not line.startswith("digits@sha256:")), text
