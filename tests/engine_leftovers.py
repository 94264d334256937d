"""The whole run leaves nothing on the Docker engine: every container, volume and network a test made is gone
when the session ends (issue 27: `make test` once left a created smoke container behind). Objects that were there
before the run are not counted; another run on the same engine at the same time would be."""

from __future__ import annotations

from collections.abc import Iterator

import docker.errors
import pytest
import requests

from learnerkit.common.engine import EngineError, engine


def engine_objects() -> set[str] | None:
    """Every container, volume and network of the engine, named by kind and id; None without an engine."""
    try:
        client = engine()
        containers = {f"container {c.name} ({c.attrs['Config']['Image']})" for c in client.containers.list(all=True)}
        volumes = {f"volume {v.name}" for v in client.volumes.list()}
        networks = {f"network {n.name}" for n in client.networks.list()}
    except (EngineError, docker.errors.DockerException, requests.RequestException):
        return None
    return containers | volumes | networks


@pytest.fixture(scope="session", autouse=True)
def nothing_left_on_the_engine() -> Iterator[None]:
    before = engine_objects()
    yield
    after = engine_objects()
    if before is None or after is None:
        return
    left = sorted(after - before)
    assert not left, "the test run left these on the Docker engine: " + "; ".join(left)
