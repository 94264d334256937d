"""The real Scheduler's submit behind the real API, served by uvicorn: manifests are read off the event loop, so
/healthz (and every other tenant) is answered while big manifests are parsed. Nothing reaches etcd or the
backend: every manifest here is refused while it is read."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.config.policy import DEFAULT_MAX_MANIFEST_BYTES
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.conftest import Tenants
from tests.waiting import wait_until

BIG = (
    "name: big\nevaluation_metrics:\n  x: ["
    + ",".join("1" for _ in range(DEFAULT_MAX_MANIFEST_BYTES // 2 - 64))
    + "]\n"
).encode()


class Unreachable:
    """The backend of a scheduler whose submits are all refused before anything is deployed."""

    deploys_held = False

    def nodes(self) -> list[Node]:
        raise AssertionError("not reached")

    def node_health(self) -> dict[str, NodeHealth]:
        raise AssertionError("not reached")

    def deploy(self, job: JobDeployment) -> None:
        raise AssertionError("not reached")

    def started(self, job_id: str, learners: int) -> bool:
        raise AssertionError("not reached")

    def sidecars(self, job_id: str) -> SidecarStates:
        raise AssertionError("not reached")

    def learners_running(self, job_id: str) -> set[int]:
        return set()

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        raise AssertionError("not reached")

    def teardown(self, job_id: str) -> None:
        raise AssertionError("not reached")

    def job_ids(self, instance: str) -> set[str]:
        raise AssertionError("not reached")


@pytest.fixture
def url(tenants: Tenants) -> Iterator[str]:
    options = SchedulerOptions(Platform("127.0.0.1:2379", "sidecar"), catalog=None, resolve_image=lambda _: "image")
    scheduler = Scheduler(JobStore(), Unreachable(), options)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(scheduler, tenants.path), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def submit(url: str, token: str, body: bytes) -> int:
    request = urllib.request.Request(
        f"{url}/v1/jobs",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_healthz_answers_while_big_manifests_are_parsed(url: str, tenants: Tenants) -> None:
    assert len(BIG) <= DEFAULT_MAX_MANIFEST_BYTES
    statuses: list[int] = []
    submitters = [threading.Thread(target=lambda: statuses.append(submit(url, tenants.a, BIG))) for _ in range(6)]
    for thread in submitters:
        thread.start()
    answered_during_parses = 0
    while any(thread.is_alive() for thread in submitters):
        with urllib.request.urlopen(f"{url}/healthz", timeout=60) as answer:
            assert answer.status == 200
        answered_during_parses += 1
    for thread in submitters:
        thread.join()
    assert statuses == [422] * 6, "every big manifest is refused as too complex"
    assert answered_during_parses > 0


def test_healthz_answers_while_a_parse_is_held(url: str, tenants: Tenants, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parse that never returns on its own: /healthz must still be answered, so parsing is off the event loop."""
    entered, release = threading.Event(), threading.Event()

    def held_parse(*args: Any, **kwargs: Any) -> JobManifest:
        entered.set()
        release.wait(timeout=120)
        return parse_manifest(*args, **kwargs)

    monkeypatch.setattr("learnerkit.scheduler.core.scheduler.parse_manifest", held_parse)
    statuses: list[int] = []
    submitter = threading.Thread(target=lambda: statuses.append(submit(url, tenants.a, b"name: held\n")))
    submitter.start()
    try:
        assert entered.wait(timeout=60), "the submit reached the parser"
        with urllib.request.urlopen(f"{url}/healthz", timeout=60) as answer:
            health = answer.status
        still_parsing = not release.is_set() and submitter.is_alive()
    finally:
        release.set()
        submitter.join(timeout=60)
    assert health == 200
    assert still_parsing, "/healthz was answered while the parse was held"
    assert statuses == [422], "the held manifest is still checked and refused"
