"""A sidecar that ends before its learner's final status is started again, at most three times per learner, and
never once the learner has its final status (issue 27 D5); a fake backend records what it was asked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.backends.protocol import SidecarStates
from learnerkit.scheduler.core.sidecars import MAX_SIDECAR_RESTARTS, restart_ended_sidecars
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.parser import parse_manifest

pytestmark = pytest.mark.asyncio

MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
learners: 2
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data}
    training_results: {container: results}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: a, password: b}
framework: {name: custom, version: img, command: run}
"""


class Restarts:
    """The backend's restart_sidecar: records each call; ``able`` False as on Kubernetes; ``fail`` raises."""

    def __init__(self, *, able: bool = True, fail: bool = False) -> None:
        self.asked: list[tuple[str, int]] = []
        self.able, self.fail = able, fail

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        self.asked.append((job_id, learner_id))
        if self.fail:
            raise BackendError("the engine refused")
        return self.able


def tracked() -> Tracked:
    return Tracked(JobState("job-1", "team", "j", 0.0), parse_manifest(MANIFEST), MANIFEST, "m.yml")


def record(job: Tracked, learner: int, phase: Phase) -> StatusRecord:
    return StatusRecord(phase, datetime.now(UTC), learner, job.state.first_sequence + 3)


async def test_an_ended_sidecar_without_a_final_status_is_restarted_three_times_then_left_lost() -> None:
    job, backend = tracked(), Restarts()
    job.records = {1: record(job, 1, Phase.STORING), 2: record(job, 2, Phase.COMPLETED)}
    ended = SidecarStates(exited={1: 137, 2: 0}, running=frozenset())
    for _ in range(MAX_SIDECAR_RESTARTS):
        seen = await restart_ended_sidecars(backend, job, ended)  # type: ignore[arg-type]
        assert seen == SidecarStates(exited={2: 0}, running=frozenset({1}))
    assert await restart_ended_sidecars(backend, job, ended) == ended  # type: ignore[arg-type]
    assert backend.asked == [("job-1", 1)] * MAX_SIDECAR_RESTARTS == [("job-1", 1)] * 3


async def test_restarts_the_backend_counted_before_a_scheduler_restart_count_too() -> None:
    job, backend = tracked(), Restarts()  # a fresh scheduler: nothing counted in memory
    ended = SidecarStates(exited={1: 1, 2: 1}, restarts={1: MAX_SIDECAR_RESTARTS, 2: 1})
    seen = await restart_ended_sidecars(backend, job, ended)  # type: ignore[arg-type]
    assert backend.asked == [("job-1", 2)]
    assert (seen.exited, seen.running, job.sidecar_restarts) == ({1: 1}, frozenset({2}), {2: 2})


async def test_what_the_backend_said_of_a_sidecar_left_ended_is_kept_beside_a_restart() -> None:
    job, backend = tracked(), Restarts()
    job.sidecar_restarts = {2: MAX_SIDECAR_RESTARTS}
    ended = SidecarStates(exited={1: 1, 2: 1}, log_tails={1: "one", 2: "RuntimeError: two"}, ended_by={2: "Evicted"})
    seen = await restart_ended_sidecars(backend, job, ended)  # type: ignore[arg-type]
    assert (seen.exited, seen.running) == ({2: 1}, frozenset({1}))
    assert (seen.log_tails[2], seen.ended_by) == ("RuntimeError: two", {2: "Evicted"})


@pytest.mark.parametrize("backend", [Restarts(able=False), Restarts(fail=True)], ids=["cannot", "fails"])
async def test_a_sidecar_the_backend_does_not_restart_stays_ended(backend: Restarts) -> None:
    job = tracked()
    ended = SidecarStates(exited={1: 1}, running=frozenset({2}))
    assert await restart_ended_sidecars(backend, job, ended) == ended  # type: ignore[arg-type]
    assert backend.asked == [("job-1", 1)]
