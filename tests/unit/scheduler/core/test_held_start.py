"""The preemptor's head start: on a backend that deploys held (Docker), its pairs are deployed at the preemption's
decision with their sidecars told to wait for the release of that attempt; the preemptor stays QUEUED (no
reservation, no quota) until its victims' room is free, and its admission releases them. A preemptor that ends
queued (cancelled, halted) has its held pairs torn down, never released; a restarted scheduler deploys it afresh.

Driven step by step on the fake clock of the preemption tests (:mod:`.test_preemption`)."""

from __future__ import annotations

import pytest

from controller_sidecar.status import Phase
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.jobs.store import StoredJob
from tests.unit.scheduler.core.test_preemption import TENANT, GpuNodes, Harness
from tests.unit.scheduler.core.test_restart_cordoned import NoSweeps, Reloading
from tests.unit.scheduler.memorymarks import MemoryMarks

pytestmark = pytest.mark.asyncio


def held_attempt(h: Harness, job_id: str) -> object:
    """What the job's deployed sidecar is told to wait for (None: it starts once its inputs are in)."""
    return h.backend.plans[job_id].learners[0].sidecar_config.get("held")


async def decided(h: Harness) -> tuple[Tracked, Tracked]:
    """A victim running, then a preemptor of higher priority: the step that decides the preemption."""
    low = h.submit("job-low", 0)
    await h.running(low)
    urgent = h.submit("job-urgent", 10)
    await h.step()
    assert low.state.preempted_by == "job-urgent"
    return low, urgent


async def test_the_preemptor_is_deployed_held_at_the_decision_and_released_at_its_admission() -> None:
    h = Harness(held=True)
    low, urgent = await decided(h)
    assert h.backend.deployed == ["job-low", "job-urgent"], "deployed at the decision, before the victim halted"
    assert held_attempt(h, "job-urgent") == {"attempt": 1}
    assert (urgent.state.stage, urgent.state.status, urgent.state.held) == (Stage.QUEUED, JobStatus.QUEUED, True)
    admission = h.scheduler.shared.admission
    assert admission.record("job-urgent").stage is Stage.QUEUED, "no room reserved: the victim's quota only"
    assert admission.record("job-low").stage is Stage.RUNNING
    h.report(urgent, Phase.DOWNLOADING)  # the held sidecar downloads meanwhile
    await h.step()
    assert h.store.releases == [] and h.backend.deployed.count("job-urgent") == 1

    h.report(low, Phase.HALTED)
    await h.step()
    assert low.state.status is JobStatus.PREEMPTED
    assert (urgent.state.stage, urgent.state.held) == (Stage.DEPLOYED, False)
    assert h.store.releases == [("job-urgent", 1)]
    assert h.store.records["job-urgent"][1].phase is Phase.DOWNLOADING, "what the held sidecar reported is kept"
    h.report(urgent, Phase.PROCESSING)
    await h.step()
    assert (urgent.state.stage, urgent.state.status) == (Stage.RUNNING, JobStatus.PROCESSING)


async def test_a_backend_that_does_not_deploy_held_deploys_the_preemptor_at_its_admission() -> None:
    """Kubernetes: a held pod would take its node's room in the kube-scheduler's eyes."""
    h = Harness()
    low, urgent = await decided(h)
    await h.step()
    assert h.backend.deployed == ["job-low"] and not urgent.state.held
    h.report(low, Phase.HALTED)
    await h.step()
    assert h.backend.deployed == ["job-low", "job-urgent"] and held_attempt(h, "job-urgent") is None
    assert h.store.releases == []


async def test_a_cancelled_held_preemptor_is_torn_down_and_never_released() -> None:
    h = Harness(held=True)
    low, urgent = await decided(h)
    await h.scheduler.cancel(TENANT, "job-urgent")
    assert "job-urgent" in h.backend.torn_down and urgent.state.status is JobStatus.CANCELLED
    assert not urgent.state.held
    h.report(low, Phase.HALTED)  # the preemption falls through: the victim resumes in the room it left
    await h.step()
    await h.step()
    assert (low.state.stage, low.state.attempt) == (Stage.RUNNING, 2) and h.store.releases == []


async def test_a_held_preemptor_halted_by_its_user_is_torn_down_and_never_released() -> None:
    h = Harness(held=True)
    low, urgent = await decided(h)
    await h.scheduler.halt(TENANT, "job-urgent")
    assert urgent.state.status is JobStatus.HALTED
    await h.step()
    assert "job-urgent" in h.backend.torn_down, "the steps remove the held pairs of a job that ended queued"
    h.report(low, Phase.HALTED)
    await h.step()
    await h.step()
    assert h.store.releases == [] and h.backend.deployed.count("job-urgent") == 1


async def test_a_victim_that_ends_by_itself_still_releases_the_held_preemptor() -> None:
    h = Harness(held=True)
    low, urgent = await decided(h)
    h.report(low, Phase.COMPLETED)
    await h.step()
    assert low.state.status is JobStatus.COMPLETED
    assert urgent.state.stage is Stage.DEPLOYED and h.store.releases == [("job-urgent", 1)]


async def test_a_victim_halted_by_its_user_during_the_hand_over_ends_halted_and_releases_the_preemptor() -> None:
    h = Harness(held=True)
    low, urgent = await decided(h)
    await h.scheduler.halt(TENANT, "job-low")
    h.report(low, Phase.HALTED)
    await h.step()
    assert (low.state.status, low.state.stage) == (JobStatus.HALTED, Stage.DONE)
    assert urgent.state.stage is Stage.DEPLOYED and h.store.releases == [("job-urgent", 1)]


async def test_a_victim_that_ignores_the_halt_releases_the_held_preemptor_at_the_grace_end() -> None:
    h = Harness(held=True)
    low, urgent = await decided(h)
    await h.step(30.0)
    assert urgent.state.held and h.store.releases == []
    h.report(low, Phase.HALTED)  # its sidecar's record once learner-run killed it at the grace's end
    await h.step()
    assert urgent.state.stage is Stage.DEPLOYED and h.store.releases == [("job-urgent", 1)]


class FailingOnce(GpuNodes):
    """The held deploy fails (the engine removes what it made, as DockerBackend.deploy does)."""

    def __init__(self) -> None:
        super().__init__(1, held=True)
        self.fail_next = False

    def deploy(self, job: object) -> None:
        if self.fail_next:
            self.fail_next = False
            raise BackendError("the engine did not answer")
        super().deploy(job)  # type: ignore[arg-type]


async def test_a_failed_held_deploy_leaves_the_preemptor_to_deploy_afresh_at_its_admission() -> None:
    h = Harness(held=True)
    h.backend = backend = FailingOnce()
    h.scheduler.shared.backend = backend
    low = h.submit("job-low", 0)
    await h.running(low)
    h.submit("job-urgent", 10)
    backend.fail_next = True
    await h.step()
    urgent = h.scheduler.shared.jobs["job-urgent"]
    assert not urgent.state.held and backend.deployed == ["job-low"]
    h.report(low, Phase.HALTED)
    await h.step()
    assert urgent.state.stage is Stage.DEPLOYED and held_attempt(h, "job-urgent") is None
    assert h.store.releases == []


class Orphans(GpuNodes):
    """Lists the jobs deployed and not torn down, as the engine's labels would."""

    def job_ids(self, instance: str) -> set[str]:
        return set(self.deployed) - set(self.torn_down)


async def test_a_restarted_scheduler_removes_the_held_pairs_and_deploys_the_preemptor_afresh() -> None:
    """The scheduler stops while the preemptor is held: its pairs are orphans (the job is queued); the restarted
    scheduler removes them, forgets the hold and deploys the preemptor once at its admission: nothing runs twice."""
    h = Harness(held=True)
    h.backend = backend = Orphans(1, held=True)
    h.scheduler.shared.backend = backend
    low, urgent = await decided(h)
    h.report(urgent, Phase.DOWNLOADING)
    assert urgent.state.held

    store = Reloading()
    store.records = h.store.records
    store.stored = [StoredJob(t.state, {}, t.manifest_text, t.source) for t in (low, urgent)]
    options: SchedulerOptions = h.scheduler.shared.options
    again = Scheduler(store, backend, options, clock=h.clock)
    again.shared.marks = MemoryMarks()
    again.loop.driver._store = NoSweeps()  # type: ignore[union-attr]
    await again.loop.rebuild()
    assert backend.torn_down == ["job-urgent"], "the held pairs are orphans; the victim keeps running"
    restored = again.shared.jobs["job-urgent"]
    assert (restored.state.stage, restored.state.held) == (Stage.QUEUED, False)
    assert "job-urgent" not in store.records, "what the held sidecars wrote goes with them"

    h.scheduler, h.store = again, store
    h.report(again.shared.jobs["job-low"], Phase.HALTED)
    await h.step()
    assert restored.state.stage is Stage.DEPLOYED and held_attempt(h, "job-urgent") is None
    assert backend.deployed.count("job-urgent") == 2 and store.releases == []
    assert again.shared.jobs["job-low"].state.status is JobStatus.PREEMPTED
