"""The whole run leaves nothing on the Docker engine: every container, volume and network a test made is gone
when the run ends (issue 27: `make test` once left a created smoke container behind). Objects that were there
before the run are not counted; another run on the same engine at the same time would be.

With pytest-xdist the check runs once, in the controlling process, around all its workers: a worker's own
before/after would count the objects another worker's test holds at that moment."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from learnerkit.common.engine import EngineError, engine

BEFORE = pytest.StashKey[set[str] | None]()


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


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _is_worker(session.config):
        session.config.stash[BEFORE] = engine_objects()


LEFT = pytest.StashKey[list[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Runs before the terminal's summary is written, which then shows what was left (and the run fails)."""
    if _is_worker(session.config):
        return
    before = session.config.stash.get(BEFORE, None)
    after = engine_objects()
    if before is None or after is None:
        return
    left = sorted(after - before)
    if left:
        session.config.stash[LEFT] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    left = config.stash.get(LEFT, [])
    if left:
        terminalreporter.write_sep("=", "the test run left these on the Docker engine", red=True)
        for thing in left:
            terminalreporter.write_line(thing)
