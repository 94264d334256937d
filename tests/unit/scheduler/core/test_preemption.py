"""Preemption in the control loop: the victims halt through the usual path, go back to the queue as PREEMPTED and
resume by themselves; a user's halt wins; a learner that ignores the halt loses at most a checkpoint interval.

Driven step by step on a fake clock, with an in-memory job store (its attempts history included) and a backend
with two GPU nodes; the learners' statuses are what each test reports for them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from controller_sidecar.status import ErrorCode, Phase, StatusRecord
from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState
from learnerkit.scheduler.admission.capacity import GIB, Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.preempting import resume_preemptions
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, load_attempts
from learnerkit.scheduler.jobs.state import ATTEMPT_SEQUENCE_BLOCK, JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.preemption.rules import PreemptionRules
from tests.fakeclock import FakeClock
from tests.unit.scheduler.memorymarks import MemoryMarks

pytestmark = pytest.mark.asyncio

TENANT = "team-a"
MIN_RUN_S = 60.0


def manifest(priority: int, extra: str = "") -> str:
    return f"""\
name: j
cpus: 1
memory: 1Gb
gpus: 8
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "http://127.0.0.1:8333", user_name: a, password: b}}
framework: {{name: custom, version: img, command: run}}
learnerkit: {{priority: {priority}{extra}}}
"""


class MemoryStore(JobStore):
    """Saved states, halts asked, attempts and each job's learner records, in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, dict[int, StatusRecord]] = {}
        self.halts: list[str] = []
        self.halt_keys: set[str] = set()
        """Jobs whose halt key is set (asked by the scheduler, or by hand: ``sidecar halt``)."""
        self.releases: list[tuple[str, int]] = []
        """Held jobs' attempts released, in order."""
        self.attempts: dict[str, dict[int, bytes]] = {}
        self.open_at_end: list[str] = []
        """Jobs whose end was saved while their attempt's record still read as running."""
        self.fences: dict[str, int] = {}
        """The attempt each job's fence names."""
        self.leases_gone: set[str] = set()
        """Jobs whose learners hold no lease though they have records (a lost node's, expired)."""

    async def save(self, state: JobState, *, clear_learners: bool = False, clear_halt: bool = False) -> JobState:
        stored = self.attempts.get(state.job_id, {}).get(state.attempt)
        if state.stage is Stage.DONE and stored is not None and Attempt.from_json(stored).open:
            self.open_at_end.append(state.job_id)
        if clear_learners:
            self.records.pop(state.job_id, None)
        if clear_halt:
            self.halt_keys.discard(state.job_id)
        return state

    async def trim(self, job_id: str, *, provenance_records: bool = False) -> None:
        pass

    async def delete_credentials(self, job_id: str, manifest_text: str, source: str) -> None:
        pass

    async def request_halt(self, job_id: str) -> None:
        self.halts.append(job_id)
        self.halt_keys.add(job_id)

    async def halt_requested(self, job_id: str) -> bool:
        return job_id in self.halt_keys

    async def release(self, job_id: str, attempt: int) -> None:
        self.releases.append((job_id, attempt))

    async def fence(self, job_id: str, attempt: int) -> None:
        self.fences[job_id] = attempt

    async def put_attempt(self, job_id: str, number: int, record: str) -> None:
        self.attempts.setdefault(job_id, {})[number] = record.encode()

    async def attempt_records(self, job_id: str) -> dict[int, bytes]:
        return dict(self.attempts.get(job_id, {}))

    async def learner_records(
        self, job_id: str
    ) -> tuple[dict[int, StatusRecord], set[int], dict[int, dict[str, float]]]:
        records = self.records.get(job_id, {})
        return dict(records), set() if job_id in self.leases_gone else set(records), {}


class GpuNodes:
    """Nodes of 8 GPUs; every deployed learner runs at once."""

    def __init__(self, count: int, *, held: bool = False) -> None:
        self.deploys_held = held
        """Whether the scheduler deploys a preemptor held while its victims checkpoint (Docker's way)."""
        self.plans: dict[str, JobDeployment] = {}
        """Each job's last deployment as deployed."""
        self.names = ["n1", "n2"][:count]
        """What the backend lists now: a test adds or cordons nodes here."""
        self.health = {name: NodeHealth() for name in ("n1", "n2")}
        """Every node the cluster has: a test makes one not ready or deletes it here."""
        self.deployed: list[str] = []
        self.torn_down: list[str] = []
        self.events: list[str] = []
        """Deploys and teardowns in the order they ran."""
        self.failing_teardowns = 0
        """How many teardowns fail next, as an engine that does not answer."""
        self.teardowns_wait_for_a_deploy: set[str] = set()
        """Jobs whose teardown ends only once another job was deployed (or after 10 s): an engine slow to remove."""
        self.a_deploy = threading.Event()
        self.ended_by: dict[str, dict[int, str]] = {}
        """What the backend says ended a job's learners (an eviction's reason), per job."""

    def nodes(self) -> list[Node]:
        return [Node(name, 16.0, 64 * GIB, 8, "nvidia-a100") for name in self.names]

    def node_health(self) -> dict[str, NodeHealth]:
        return self.health

    def deploy(self, job: JobDeployment) -> None:
        self.deployed.append(job.job_id)
        self.plans[job.job_id] = job
        self.events.append(f"deploy {job.job_id}")
        self.a_deploy.set()

    def started(self, job_id: str, learners: int) -> bool:
        return True

    def sidecars(self, job_id: str) -> SidecarStates:
        return SidecarStates(running=frozenset({1}), ended_by=dict(self.ended_by.get(job_id, {})))

    def learners_running(self, job_id: str) -> set[int]:
        return set()

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        return {}

    def teardown(self, job_id: str) -> None:
        if self.failing_teardowns:
            self.failing_teardowns -= 1
            raise BackendError(f"tearing down job {job_id}: the engine did not answer")
        if job_id in self.teardowns_wait_for_a_deploy:
            self.a_deploy.wait(10)
        self.torn_down.append(job_id)
        self.events.append(f"teardown {job_id}")

    def job_ids(self, instance: str) -> set[str]:
        return set()


class Harness:
    def __init__(
        self, rules: PreemptionRules | None = None, nodes: int = 1, *, held: bool = False, attempt_figures: bool = False
    ) -> None:
        self.clock = FakeClock()
        self.store = MemoryStore()
        self.backend = GpuNodes(nodes, held=held)
        options = SchedulerOptions(
            Platform("127.0.0.1:2379", "sidecar"),
            catalog=None,
            resolve_image=lambda _: "i",
            preemption=rules or PreemptionRules(min_run_s=MIN_RUN_S),
            attempt_figures=attempt_figures,
        )
        self.scheduler = Scheduler(self.store, self.backend, options, clock=self.clock)
        self.scheduler.shared.marks = MemoryMarks()
        self.scheduler.shared.admission = AdmissionState(self.backend.nodes(), AdmissionPolicy())
        self.submitted = 0

    def submit(self, job_id: str, priority: int, extra: str = "", tenant: str = TENANT) -> Tracked:
        self.submitted += 1
        text = manifest(priority, extra)
        state = JobState(job_id, tenant, "j", self.clock.wall() + self.submitted)
        tracked = Tracked(state, parse_manifest(text), text, "m.yml")
        self.scheduler.shared.jobs[job_id] = tracked
        assert self.scheduler.shared.admission.submit(tracked.admission_job()) is None
        return tracked

    def report(self, tracked: Tracked, phase: Phase, error_code: ErrorCode = ErrorCode.NONE) -> None:
        records = self.store.records.setdefault(tracked.state.job_id, {})
        previous = records.get(1)
        first = tracked.state.attempt * ATTEMPT_SEQUENCE_BLOCK
        sequence = previous.sequence + 1 if previous and previous.sequence >= first else first
        message = "halted (halt requested, exit code 0)" if phase is Phase.HALTED else ""
        records[1] = StatusRecord(phase, datetime.now(UTC), 1, sequence, error_code, message)

    def lost_seconds(self, end: AttemptEnd) -> float | None:
        """What the scheduler's counter of work lost holds for attempts that ended so."""
        registry = self.scheduler.shared.metrics.registry
        return registry.get_sample_value("learnerkit_scheduler_work_lost_seconds_total", {"ended_by": end.value})

    async def step(self, after_s: float = 1.0) -> None:
        self.clock.now += after_s
        await self.scheduler.loop.step()
        await self.scheduler.loop.deploys_done()

    async def running(self, *jobs: Tracked) -> None:
        """Admit and deploy ``jobs``, have their learners process, then let them pass the minimum run time."""
        await self.step()
        for tracked in jobs:
            assert tracked.state.stage is Stage.DEPLOYED, tracked.state
            self.report(tracked, Phase.PROCESSING)
        await self.step()
        await self.step(MIN_RUN_S)
        for tracked in jobs:
            assert (tracked.state.stage, tracked.state.status) == (Stage.RUNNING, JobStatus.PROCESSING)


async def test_a_preempted_job_halts_queues_in_its_old_place_and_resumes_by_itself() -> None:
    h = Harness(nodes=2)
    low, other = h.submit("job-low", 0), h.submit("job-other", 5)
    await h.running(low, other)
    urgent = h.submit("job-urgent", 10)

    await h.step()
    assert h.store.halts == ["job-low"]  # the lower of the two: the fewest, lowest-priority victims
    assert low.state.preempted_by == "job-urgent" and urgent.state.stage is Stage.QUEUED
    assert h.scheduler.shared.metrics.preemptions._value.get() == 1
    await h.step()
    assert urgent.state.stage is Stage.QUEUED  # the victim still holds its room: quota and node counted once
    assert h.store.halts == ["job-low"]  # one preemption at a time, asked once

    h.report(low, Phase.HALTED)
    await h.step()
    assert (low.state.status, low.state.stage) == (JobStatus.PREEMPTED, Stage.QUEUED)
    assert (low.state.attempt, low.state.resume_from_attempt) == (2, 1)
    assert urgent.state.stage is Stage.DEPLOYED and "job-urgent" in h.backend.deployed
    first = (await load_attempts(h.store, "job-low"))[0]
    # Its figures unread here: recorded at its bound, everything since its admission (two steps and the minimum
    # run time before the decision) and its halt grace, as it has no periodic checkpoint.
    assert (first.ended_by, first.reason, first.work_lost_s) == (
        AttemptEnd.PREEMPTED,
        "preempted by job job-urgent",
        MIN_RUN_S + 2 + 30,
    )
    assert low.state.submitted_at < other.state.submitted_at  # its old place in the queue

    h.report(urgent, Phase.COMPLETED)
    await h.step()
    assert low.state.stage is Stage.DEPLOYED and h.backend.deployed.count("job-low") == 2
    second = (await load_attempts(h.store, "job-low"))[1]
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, None)


@pytest.mark.parametrize("held", [False, True])
async def test_the_preemptors_reason_names_the_jobs_halting_for_it(held: bool) -> None:
    h = Harness(held=held)
    low = h.submit("job-low", 0)
    await h.running(low)
    urgent = h.submit("job-urgent", 10)
    await h.step()
    waiting, _, victims = urgent.state.reason.partition("; preempting ")
    assert waiting.startswith("waiting for 8 GPUs"), urgent.state.reason
    assert victims == "job-low: halting to free the room"
    await h.step()
    expected = "job-low: halting to free the room" + ("; started held meanwhile" if held else "")
    assert urgent.state.reason.partition("; preempting ")[2] == expected
    h.report(low, Phase.HALTED)
    await h.step()
    assert urgent.state.stage is Stage.DEPLOYED and "preempting" not in urgent.state.reason


@pytest.mark.parametrize("evicted", [False, True])
async def test_a_halt_nobody_asked_for_requeues_the_job_to_resume_from_its_checkpoint(evicted: bool) -> None:
    """A pod evicted or deleted, a container stopped: the sidecar's SIGTERM halts the learner, which checkpoints."""
    h = Harness()
    job = h.submit("job-a", 0)
    await h.running(job)
    if evicted:
        h.backend.ended_by["job-a"] = {1: "Evicted: The node was low on resource: memory."}
    h.report(job, Phase.HALTED)
    await h.step()  # requeued, and admitted again in the same step
    assert (job.state.stage, job.state.attempt, job.state.resume_from_attempt) == (Stage.DEPLOYED, 2, 1), job.state
    assert h.backend.deployed.count("job-a") == 2
    first = (await load_attempts(h.store, "job-a"))[0]
    said = "Evicted: The node was low on resource: memory." if evicted else "learner 1 halted"
    assert first.ended_by is AttemptEnd.INTERRUPTED
    assert first.reason.startswith(f"stopped from outside the scheduler ({said}"), first.reason
    assert first.reason.endswith("; resumes from its last checkpoint"), first.reason


async def test_a_halt_asked_by_hand_through_its_halt_key_ends_the_job_halted() -> None:
    """`sidecar halt JOB` and `dev down` set the halt key without the scheduler: the job's end is theirs."""
    h = Harness()
    job = h.submit("job-a", 0)
    await h.running(job)
    h.store.halt_keys.add("job-a")
    h.report(job, Phase.HALTED)
    await h.step()
    assert (job.state.status, job.state.stage) == (JobStatus.HALTED, Stage.DONE), job.state
    assert (await load_attempts(h.store, "job-a"))[0].ended_by is AttemptEnd.HALTED


async def test_the_preemptor_is_deployed_in_the_step_that_sees_the_victim_halted_its_teardown_beside() -> None:
    """The victim's teardown no longer comes before the preemptor's admission; a teardown that fails is owed, and
    retried before the victim is deployed again (a redeploy settles it first), so no attempt meets the last one's."""
    h = Harness()
    low = h.submit("job-low", 0)
    await h.running(low)
    urgent = h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED)
    h.backend.failing_teardowns = 1
    h.backend.events.clear()
    await h.step()
    assert (low.state.status, urgent.state.stage) == (JobStatus.PREEMPTED, Stage.DEPLOYED)
    assert h.backend.events == ["deploy job-urgent"], "the failed teardown is owed"

    h.report(urgent, Phase.COMPLETED)
    await h.step()
    assert low.state.stage is Stage.DEPLOYED
    assert h.backend.events == ["deploy job-urgent", "teardown job-urgent", "teardown job-low", "deploy job-low"]
    await h.step()
    assert h.backend.events.count("teardown job-low") == 1, "settled once, not again by the retries"


async def test_the_preemptors_deploy_does_not_wait_for_the_victims_teardown() -> None:
    """The victim's engine is slow to remove it: the preemptor is deployed meanwhile, in the same step (an engine
    that waits for a deploy to end a teardown would hold a teardown made before the admission for 10 s)."""
    h = Harness()
    low = h.submit("job-low", 0)
    await h.running(low)
    urgent = h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED)
    h.backend.teardowns_wait_for_a_deploy.add("job-low")
    h.backend.a_deploy.clear()
    h.backend.events.clear()
    await h.step()
    assert urgent.state.stage is Stage.DEPLOYED
    assert h.backend.events == ["deploy job-urgent", "teardown job-low"]


async def test_a_jobs_end_is_recorded_after_its_attempts_end() -> None:
    """A reader that sees the job COMPLETED sees its attempt COMPLETED too (it once read as still running)."""
    h = Harness()
    job = h.submit("job-1", 0)
    await h.running(job)
    h.report(job, Phase.COMPLETED)
    await h.step()
    assert job.state.status is JobStatus.COMPLETED and h.store.open_at_end == []
    assert [a.ended_by for a in job.attempts] == [AttemptEnd.COMPLETED]


async def test_a_users_halt_during_a_preemption_wins() -> None:
    h = Harness()
    low = h.submit("job-low", 0)
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    assert low.state.preempted_by == "job-urgent"

    await h.scheduler.halt(TENANT, "job-low")
    h.report(low, Phase.HALTED)
    await h.step()
    assert (low.state.status, low.state.stage) == (JobStatus.HALTED, Stage.DONE)
    attempt = (await load_attempts(h.store, "job-low"))[0]
    assert attempt.ended_by is AttemptEnd.HALTED
    await h.step()
    assert h.backend.deployed.count("job-low") == 1


async def test_a_learner_that_ignores_the_halt_loses_at_most_a_checkpoint_interval() -> None:
    h = Harness()
    low = h.submit("job-low", 0, ", checkpoint_interval: 30")
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED, ErrorCode.HALT_TIMEOUT)
    await h.step()
    assert low.state.status is JobStatus.PREEMPTED
    attempt = (await load_attempts(h.store, "job-low"))[0]
    assert attempt.work_lost_s == 30.0 and "killed after the 30s halt grace" in attempt.reason
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == 30.0


@pytest.mark.parametrize(
    ("victim", "urgent", "rules"),
    [
        pytest.param(", preemptible: false", "", None, id="victim-opted-out"),
        pytest.param("", "", PreemptionRules(min_run_s=MIN_RUN_S * 10), id="within-minimum-run-time"),
        pytest.param("", "", PreemptionRules(min_run_s=MIN_RUN_S, default_may_preempt=False), id="tenant-may-not"),
    ],
)
async def test_who_may_not_be_preempted_is_not(victim: str, urgent: str, rules: PreemptionRules | None) -> None:
    h = Harness(rules)
    low = h.submit("job-low", 0, victim)
    await h.running(low)
    h.submit("job-urgent", 10, urgent)
    await h.step()
    await h.step()
    assert h.store.halts == [] and low.state.preempted_by is None


async def test_three_priorities_and_two_tenants_end() -> None:
    """Each job runs to its end, preempted at most by jobs of higher priority; no job is preempted twice by the same
    job, and the loop reaches a state where every job is COMPLETED."""
    h = Harness(nodes=2)
    jobs = [
        h.submit("job-a0", 0, tenant="team-a"),
        h.submit("job-b0", 0, tenant="team-b"),
    ]
    await h.running(*jobs)
    jobs += [h.submit("job-a5", 5, tenant="team-a"), h.submit("job-b10", 10, tenant="team-b")]
    ran: dict[str, int] = {}
    for _ in range(60):
        await h.step(MIN_RUN_S)
        for tracked in jobs:
            state, job_id = tracked.state, tracked.state.job_id
            if state.stage is Stage.DEPLOYED:
                h.report(tracked, Phase.PROCESSING)
            elif state.stage is Stage.RUNNING and state.preempted_by is not None:
                h.report(tracked, Phase.HALTED)
            elif state.stage is Stage.RUNNING:
                ran[job_id] = ran.get(job_id, 0) + 1
                if ran[job_id] >= 3:  # each attempt runs three steps; a preempted one starts its count again
                    h.report(tracked, Phase.COMPLETED)
            else:
                ran.pop(job_id, None)
        if all(t.state.status is JobStatus.COMPLETED for t in jobs):
            break
    assert [t.state.status for t in jobs] == [JobStatus.COMPLETED] * 4
    assert h.scheduler.shared.metrics.preemptions._value.get() == 2  # job-b10 and job-a5 each took a node


async def test_a_restarted_scheduler_asks_the_halts_of_a_preemption_under_way_again() -> None:
    """The decision is recorded before the halt is asked: a scheduler stopped between the two asks it after its
    restart, for the victims still running only."""
    h = Harness()
    low = h.submit("job-low", 0)
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    h.store.halts.clear()  # as if the scheduler stopped before asking
    await resume_preemptions(h.scheduler.shared)
    assert h.store.halts == ["job-low"]
    h.report(low, Phase.HALTED)
    await h.step()
    h.store.halts.clear()
    await resume_preemptions(h.scheduler.shared)
    assert h.store.halts == [] and low.state.status is JobStatus.PREEMPTED


async def test_a_job_preempted_as_often_as_the_bound_allows_runs_on_past_urgent_jobs() -> None:
    """Aging: with at most 2 preemptions a job, the third urgent job waits for job-low to end instead."""
    h = Harness(PreemptionRules(min_run_s=MIN_RUN_S, max_preemptions=2))
    low = h.submit("job-low", 0)
    await h.running(low)
    for n in range(2):
        urgent = h.submit(f"job-urgent-{n}", 10)
        await h.step()
        assert h.store.halts == ["job-low"] * (n + 1)
        h.report(low, Phase.HALTED)
        await h.step()
        assert urgent.state.stage is Stage.DEPLOYED
        h.report(urgent, Phase.COMPLETED)
        await h.running(low)
    last = h.submit("job-urgent-2", 10)
    await h.step(MIN_RUN_S)
    await h.step()
    assert h.store.halts == ["job-low", "job-low"] and low.state.preempted_by is None
    assert (last.state.stage, low.state.stage) == (Stage.QUEUED, Stage.RUNNING)
    attempts = await load_attempts(h.store, "job-low")
    assert [a.ended_by for a in attempts] == [AttemptEnd.PREEMPTED, AttemptEnd.PREEMPTED, None]
