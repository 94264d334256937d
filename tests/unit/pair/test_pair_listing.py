"""What the scheduler's step asks the engine about a job's pairs: one listing, and an inspect only for a container
that the listing shows ended (its exit status is not in the listing). The engine is faked at its API client."""

from __future__ import annotations

from typing import Any

import pytest

from learnerkit.pair import docker as pair_docker
from learnerkit.pair.docker import JOB_LABEL, PAIR_LABEL, ROLE_LABEL
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.backends.protocol import LearnerEnd

JOB = "job-1"


class FakeApi:
    def __init__(self, states: dict[str, str], exit_codes: dict[str, int]) -> None:
        self.states, self.exit_codes = states, exit_codes
        self.inspected: list[str] = []
        self.listings = 0

    def containers(self, *, all: bool, filters: dict[str, str]) -> list[dict[str, Any]]:
        assert all and filters == {"label": f"{JOB_LABEL}={JOB}"}
        self.listings += 1
        return [
            {"Id": role, "State": state, "Labels": {JOB_LABEL: JOB, PAIR_LABEL: f"lk-{JOB}-1", ROLE_LABEL: role}}
            for role, state in self.states.items()
        ]

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        self.inspected.append(container_id)
        state = self.states[container_id]
        return {
            "State": {
                "Status": state,
                "Running": state == "running",
                "ExitCode": self.exit_codes.get(container_id, 0),
                "StartedAt": "0001-01-01T00:00:00Z" if state == "created" else "2026-11-23T22:00:00.1Z",
            }
        }


class FakeEngine:
    def __init__(self, api: FakeApi) -> None:
        self.api = api


def engine_with(monkeypatch: pytest.MonkeyPatch, states: dict[str, str], exit_codes: dict[str, int]) -> FakeApi:
    api = FakeApi(states, exit_codes)
    monkeypatch.setattr(pair_docker, "engine", lambda: FakeEngine(api))
    return api


def test_a_running_pair_costs_one_listing_per_question_and_no_inspect(monkeypatch: pytest.MonkeyPatch) -> None:
    api = engine_with(monkeypatch, {"learner": "running", "sidecar": "running"}, {})
    backend = DockerBackend()
    assert backend.started(JOB, 1)
    assert backend.sidecars(JOB).exited == {} and backend.learners_ended(JOB) == {}
    assert (api.listings, api.inspected) == (3, [])


def test_an_ended_container_is_inspected_for_its_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    api = engine_with(monkeypatch, {"learner": "exited", "sidecar": "running"}, {"learner": 137})
    backend = DockerBackend()
    assert backend.learners_ended(JOB) == {1: LearnerEnd(137)}
    assert backend.sidecars(JOB).exited == {}
    assert api.inspected == ["learner"]


def test_a_created_container_has_not_started_and_is_not_inspected(monkeypatch: pytest.MonkeyPatch) -> None:
    api = engine_with(monkeypatch, {"learner": "running", "sidecar": "created"}, {})
    backend = DockerBackend()
    assert not backend.started(JOB, 1)
    assert backend.sidecars(JOB).exited == {}
    assert api.inspected == []


def test_an_exited_container_counts_as_started_only_if_it_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    engine_with(monkeypatch, {"learner": "exited", "sidecar": "running"}, {"learner": 0})
    assert DockerBackend().started(JOB, 1)
