"""A learner lost to a lapsed lease (its sidecar gave a held-back write up and exited ``LEASE_LAPSED_EXIT``) is the
platform's trouble: the job is torn down and requeued to resume from its last checkpoint, its attempt ending
INTERRUPTED without spending ``max_restarts``, a bounded number of times; any other loss still fails it. Driven
with the preemption tests' harness (fake clock, one node of 8 GPUs, one learner)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller_sidecar.exits import FAILED_EXIT, LEASE_LAPSED_EXIT
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.protocol import SidecarStates
from learnerkit.scheduler.core.leaselapse import (
    LAPSED_REASON,
    MAX_LEASE_LAPSE_REQUEUES,
    lapse_requeues,
    lapsed_leases,
    lost_only_to_lapses,
)
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, load_attempts
from learnerkit.scheduler.jobs.state import JobStatus
from tests.unit.scheduler.core.test_preemption import GpuNodes, Harness

LOG_END = "gave up while the sidecar's lease may have lapsed (etcd unanswered): put s3://results/x: waiting"


class DeadSidecars(GpuNodes):
    """A backend whose job's sidecar exits as a test says; restarted in place only where ``restartable`` (Docker,
    not Kubernetes' ``restartPolicy: Never``)."""

    def __init__(self, *, restartable: bool = False) -> None:
        super().__init__(1)
        self.exited: dict[str, int] = {}
        self.restartable = restartable
        self.restarted: list[str] = []

    def sidecars(self, job_id: str) -> SidecarStates:
        code = self.exited.get(job_id)
        if code is None:
            return SidecarStates(running=frozenset({1}))
        return SidecarStates(exited={1: code}, log_tails={1: f"a line\n{LOG_END}\n"})

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        if not self.restartable:
            return False
        self.restarted.append(job_id)
        del self.exited[job_id]
        return True

    def teardown(self, job_id: str) -> None:
        super().teardown(job_id)
        self.exited.pop(job_id, None)


def harness(*, restartable: bool = False) -> tuple[Harness, DeadSidecars]:
    h = Harness()
    backend = DeadSidecars(restartable=restartable)
    h.backend = h.scheduler.shared.backend = backend
    return h, backend


async def lapse(h: Harness, backend: DeadSidecars, job: Tracked, code: int = LEASE_LAPSED_EXIT) -> None:
    """The job's learner processes, stores, and its sidecar exits ``code`` before its final status."""
    h.report(job, Phase.STORING)
    await h.step()
    backend.events.clear()
    backend.exited[job.state.job_id] = code
    await h.step()


@pytest.mark.asyncio
async def test_a_sidecar_that_gave_up_on_its_lapsed_lease_has_its_job_requeued_to_resume_from_its_checkpoint() -> None:
    """Before this, the job FAILED: "learner 1 lost: its sidecar exited with status 1 before reporting a final status;
    its log ends: ... the sidecar's lease may have expired (etcd unanswered)" (the real-cluster tier, under load)."""
    h, backend = harness()
    job = h.submit("job-a", 0, ", auto_resume: true, max_restarts: 1")
    await h.running(job)
    await lapse(h, backend, job)
    assert backend.events == ["teardown job-a", "deploy job-a"], "torn down first, then queued and deployed again"
    assert (job.state.stage, job.state.attempt, job.state.resume_from_attempt) == (Stage.DEPLOYED, 2, 1)
    assert job.state.restarts == 0, "the user's max_restarts is not spent on the platform's trouble"
    assert h.store.fences["job-a"] == 2
    first = (await load_attempts(h.store, "job-a"))[0]
    assert first.ended_by is AttemptEnd.INTERRUPTED
    assert first.reason.startswith(f"{LAPSED_REASON}: learner 1 lost: its sidecar gave up on its lapsed lease (exit")
    assert LOG_END in first.reason and first.reason.endswith("; resumes from its last checkpoint"), first.reason


@pytest.mark.asyncio
async def test_a_job_whose_sidecars_keep_lapsing_fails_after_the_bound_saying_why() -> None:
    h, backend = harness()
    job = h.submit("job-a", 0)
    await h.running(job)
    for requeues in range(1, MAX_LEASE_LAPSE_REQUEUES + 1):
        await lapse(h, backend, job)
        assert (job.state.stage, job.state.attempt) == (Stage.DEPLOYED, requeues + 1), job.state
        h.report(job, Phase.PROCESSING)
        await h.step()
    await lapse(h, backend, job)
    assert (job.state.status, job.state.stage) == (JobStatus.FAILED, Stage.DONE)
    assert job.state.reason.startswith("learner 1 lost: its sidecar gave up on its lapsed lease"), job.state.reason
    assert f"again after {MAX_LEASE_LAPSE_REQUEUES} requeues for that cause: failed" in job.state.reason
    ends = [a.ended_by for a in await load_attempts(h.store, "job-a")]
    assert ends == [AttemptEnd.INTERRUPTED] * MAX_LEASE_LAPSE_REQUEUES + [AttemptEnd.FAILED]


@pytest.mark.asyncio
async def test_a_sidecar_that_exited_for_another_cause_still_fails_its_job() -> None:
    h, backend = harness()
    job = h.submit("job-a", 0)
    await h.running(job)
    await lapse(h, backend, job, FAILED_EXIT)
    assert (job.state.status, job.state.attempt) == (JobStatus.FAILED, 1)
    assert job.state.reason.startswith("learner 1 lost: its sidecar exited with status 1 before"), job.state.reason


@pytest.mark.asyncio
async def test_a_job_whose_user_asked_its_halt_is_not_requeued_by_a_lapse() -> None:
    """The halt is the user's: the job ends as a lost learner ends it (FAILED, which `job resume` takes up)."""
    h, backend = harness()
    job = h.submit("job-a", 0)
    await h.running(job)
    await h.store.request_halt("job-a")  # `sidecar halt`, or `job halt` through the scheduler
    await lapse(h, backend, job)
    assert (job.state.status, job.state.stage, job.state.attempt) == (JobStatus.FAILED, Stage.DONE, 1)
    assert "requeues for that cause" not in job.state.reason


@pytest.mark.asyncio
async def test_where_the_backend_restarts_a_sidecar_it_is_restarted_first_and_the_job_kept() -> None:
    """Docker: the sidecar started again on the pair's /job goes on storing once its lease is held again."""
    h, backend = harness(restartable=True)
    job = h.submit("job-a", 0)
    await h.running(job)
    await lapse(h, backend, job)
    assert backend.restarted == ["job-a"]
    assert (job.state.stage, job.state.attempt, job.state.status) == (Stage.RUNNING, 1, JobStatus.STORING)


def record(n: int, phase: Phase, sequence: int = 2_000_000) -> StatusRecord:
    return StatusRecord(phase, datetime.now(UTC), n, sequence)


def test_a_job_is_lost_only_to_lapses_when_every_loss_is_one_and_no_learner_failed_by_itself() -> None:
    lost = {1: "its sidecar gave up on its lapsed lease", 2: "its sidecar gave up on its lapsed lease"}
    sidecars = SidecarStates(exited={1: LEASE_LAPSED_EXIT, 2: LEASE_LAPSED_EXIT, 3: FAILED_EXIT})
    lapsed = lapsed_leases(sidecars, lost)
    assert lapsed == {1, 2}
    storing = {n: record(n, Phase.STORING) for n in (1, 2, 3)}
    assert lost_only_to_lapses(storing, 2_000_000, lost, lapsed)
    assert not lost_only_to_lapses(storing, 2_000_000, {**lost, 3: "exited with status 1"}, lapsed)
    assert not lost_only_to_lapses({**storing, 3: record(3, Phase.FAILED)}, 2_000_000, lost, lapsed)
    earlier = {**storing, 3: record(3, Phase.FAILED, sequence=1_000_005)}  # the last attempt's failure counts not
    assert lost_only_to_lapses(earlier, 2_000_000, lost, lapsed)
    assert not lost_only_to_lapses(storing, 2_000_000, {}, set())


def test_the_lapse_requeues_are_counted_from_the_attempts_history() -> None:
    """Kept in etcd: a restarted scheduler counts on from there."""

    def ended(end: AttemptEnd, reason: str) -> Attempt:
        return Attempt(1, ("n1",), "2026-11-29T00:00:00Z").ended(end, reason, "2026-11-29T00:01:00Z")

    attempts = [
        ended(AttemptEnd.INTERRUPTED, f"{LAPSED_REASON}: learner 1 lost: ...; resumes from its last checkpoint"),
        ended(AttemptEnd.INTERRUPTED, "stopped from outside the scheduler (Evicted); resumes from its last checkpoint"),
        ended(AttemptEnd.NODE_LOST, "node n1 was deleted; resumes from its last checkpoint"),
        ended(AttemptEnd.INTERRUPTED, f"{LAPSED_REASON}: learner 2 lost: ...; resumes from its last checkpoint"),
    ]
    assert lapse_requeues(attempts) == 2
