"""The scheduler ends a job whose learner container ended without learner-run's exit record (an image whose
entrypoint is not learner-run): on Kubernetes the sidecar cannot see that, so the job would stay PROCESSING.

Driven on a fake clock, with an in-memory job store and a fake backend; a normal ending is never raced."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller_sidecar.status import ErrorCode, Phase, StatusRecord
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.core.liveness import LEARNER_ENDED_MARGIN_S
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import StoreUnavailableError
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.fakeclock import FakeClock
from tests.unit.scheduler.memorymarks import MemoryMarks

pytestmark = pytest.mark.asyncio

HALT_GRACE = 10
GRACE = HALT_GRACE + LEARNER_ENDED_MARGIN_S
JOB = "job-1"
MANIFEST = f"""\
name: j
cpus: 1
memory: 1Gb
learners: 2
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "http://127.0.0.1:8333", user_name: a, password: b}}
framework: {{name: custom, version: img, command: run}}
learnerkit: {{halt_grace: {HALT_GRACE}}}
"""
NO_RECORD = (
    "learner 2 lost: the learner container ended (exit code 0) without learner-run's exit record: "
    "is learner-run the image's entrypoint?"
)


class MemoryStore(JobStore):
    """The learners' records and leases as a test sets them; saved job states are kept in order."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[int, StatusRecord] = {}
        self.alive: set[int] = {1, 2}
        self.saved: list[JobState] = []
        self.down = False
        self.fences: dict[str, int] = {}

    async def fence(self, job_id: str, attempt: int) -> None:
        self.fences[job_id] = attempt

    async def save(self, state: JobState, *, clear_learners: bool = False, clear_halt: bool = False) -> JobState:
        self.saved.append(state)
        return state

    async def trim(self, job_id: str, *, provenance_records: bool = False) -> None:
        pass

    async def delete_credentials(self, job_id: str, manifest_text: str, source: str) -> None:
        pass

    async def learner_records(
        self, job_id: str
    ) -> tuple[dict[int, StatusRecord], set[int], dict[int, dict[str, float]]]:
        if self.down:
            raise StoreUnavailableError("the job store (etcd) does not answer")
        return dict(self.records), set(self.alive), {}

    def report(self, learner: int, phase: Phase, error_code: ErrorCode = ErrorCode.NONE, message: str = "") -> None:
        previous = self.records.get(learner)
        sequence = previous.sequence + 1 if previous else 1_000_000
        self.records[learner] = StatusRecord(phase, datetime.now(UTC), learner, sequence, error_code, message)


class FakeBackend:
    deploys_held = False

    def __init__(self) -> None:
        self.ended: dict[int, int] = {}
        self.oom_killed: set[int] = set()
        self.exited: dict[int, int] = {}
        self.running: set[int] = {1, 2}
        self.asked_ended = 0
        self.torn_down: list[str] = []

    def nodes(self) -> list[Node]:
        return []

    def node_health(self) -> dict[str, NodeHealth]:
        return {"local": NodeHealth()}

    def deploy(self, job: JobDeployment) -> None:
        raise AssertionError("not deployed here")

    def started(self, job_id: str, learners: int) -> bool:
        return True

    def sidecars(self, job_id: str) -> SidecarStates:
        return SidecarStates(dict(self.exited), frozenset(self.running) - self.exited.keys())

    def learners_running(self, job_id: str) -> set[int]:
        return set()

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        self.asked_ended += 1
        return {n: LearnerEnd(code, oom_killed=n in self.oom_killed) for n, code in self.ended.items()}

    def teardown(self, job_id: str) -> None:
        self.torn_down.append(job_id)

    def job_ids(self, instance: str) -> set[str]:
        return set()


class Harness:
    def __init__(self, store: MemoryStore | None = None, backend: FakeBackend | None = None) -> None:
        self.clock = FakeClock()
        self.store = store or MemoryStore()
        self.backend = backend or FakeBackend()
        options = SchedulerOptions(Platform("127.0.0.1:2379", "sidecar"), catalog=None, resolve_image=lambda _: "i")
        self.scheduler = Scheduler(self.store, self.backend, options, clock=self.clock)
        self.scheduler.shared.marks = MemoryMarks()
        state = JobState(
            JOB,
            "team-a",
            "j",
            self.clock.wall(),
            status=JobStatus.PROCESSING,
            stage=Stage.RUNNING,
            nodes=("local",),
            admitted_at=self.clock.wall(),
        )
        self.tracked = Tracked(state, parse_manifest(MANIFEST), MANIFEST, "m.yml")
        self.scheduler.shared.jobs[JOB] = self.tracked

    async def step_at(self, seconds: float) -> JobState:
        """Advance the clock to ``seconds`` after the start, then run one (guarded) step."""
        self.clock.now = 1_000.0 + seconds
        await self.scheduler.loop.guarded_step()
        return self.tracked.state

    def restarted(self) -> Harness:
        """A new scheduler (a restart) over the same store and backend, its clock where this one's is."""
        again = Harness(self.store, self.backend)
        again.clock.now = self.clock.now
        return again


@pytest.fixture
def harness() -> Harness:
    h = Harness()
    for n in (1, 2):
        h.store.report(n, Phase.PENDING)
        h.store.report(n, Phase.DOWNLOADING)
        h.store.report(n, Phase.PROCESSING)
    return h


async def test_a_learner_that_ended_without_its_exit_record_fails_the_job_after_the_grace(harness: Harness) -> None:
    await harness.step_at(0)
    harness.backend.ended = {2: 0}  # a learner image without learner-run: its command ended, nothing else
    await harness.step_at(1)
    assert (await harness.step_at(1 + GRACE - 0.5)).status is JobStatus.PROCESSING
    state = await harness.step_at(1 + GRACE + 0.5)
    assert (state.status, state.stage, state.reason) == (JobStatus.FAILED, Stage.DONE, NO_RECORD)
    assert harness.backend.torn_down == [JOB]


async def test_the_exit_code_is_named(harness: Harness) -> None:
    harness.backend.ended = {2: 127}  # e.g. the entrypoint's command was not found
    await harness.step_at(0)
    state = await harness.step_at(GRACE + 1)
    assert "learner container ended (exit code 127) without learner-run's exit record" in state.reason


async def test_a_normal_ending_that_stores_long_is_not_raced(harness: Harness) -> None:
    """learner-run wrote its record and exited; the sidecar, alive, stores the results for a long time."""
    harness.backend.ended = {2: 0}
    await harness.step_at(0)  # seen ended while the record still said PROCESSING (STORING not yet in etcd)
    harness.store.report(2, Phase.STORING)
    for t in (1, GRACE, 10 * GRACE):
        assert (await harness.step_at(t)).status is JobStatus.PROCESSING  # learner 1 still processes
    harness.store.report(1, Phase.STORING)
    assert (await harness.step_at(11 * GRACE)).status is JobStatus.STORING
    harness.store.report(2, Phase.COMPLETED)
    harness.backend.ended = {1: 0, 2: 0}
    harness.store.report(1, Phase.COMPLETED)
    state = await harness.step_at(12 * GRACE)
    assert (state.status, state.reason) == (JobStatus.COMPLETED, "")


async def test_the_sidecars_own_final_status_within_the_grace_wins(harness: Harness) -> None:
    """On Docker the sidecar sees the learner's cgroup empty and reports first, with its own message."""
    harness.backend.ended = {2: 0}
    await harness.step_at(0)
    harness.store.report(2, Phase.STORING)
    harness.store.report(2, Phase.FAILED, ErrorCode.LEARNER_LOST, "the learner ended without learner-run's record")
    state = await harness.step_at(4)
    assert (state.status, state.reason) == (
        JobStatus.FAILED,
        "learner 2 failed: the learner ended without learner-run's record",
    )


async def test_before_processing_the_learner_is_not_watched(harness: Harness) -> None:
    """A sidecar still downloading has not started the command, nor looked for the record (learner-run may
    have written one, e.g. its own start timeout): nothing is decided, and the backend is not even asked."""
    for n in (1, 2):
        harness.store.records.pop(n)
        harness.store.report(n, Phase.DOWNLOADING)
    harness.backend.ended = {2: 124}
    for t in (0, GRACE + 1, 5 * GRACE):
        assert (await harness.step_at(t)).status is JobStatus.DOWNLOADING
    assert harness.backend.asked_ended == 0
    harness.store.report(2, Phase.PROCESSING)  # the download ended: from now on the sidecar waits for the record
    harness.store.report(1, Phase.PROCESSING)
    await harness.step_at(5 * GRACE + 1)
    assert (await harness.step_at(6 * GRACE)).status is JobStatus.PROCESSING
    assert (await harness.step_at(6 * GRACE + 2)).reason.replace("code 124", "code 0") == NO_RECORD


async def test_a_sidecar_without_its_lease_is_left_to_the_lease_rule(harness: Harness) -> None:
    """A sidecar that cannot reach etcd could not report STORING either: this rule does not judge it."""
    harness.backend.ended = {2: 0}
    await harness.step_at(0)
    harness.store.alive = {1}
    state = await harness.step_at(GRACE + 1)
    assert state.status is JobStatus.PROCESSING
    assert 2 not in harness.tracked.ended_since
    harness.store.alive = {1, 2}  # back: the grace starts again
    await harness.step_at(GRACE + 2)
    assert (await harness.step_at(2 * GRACE + 1)).status is JobStatus.PROCESSING
    assert (await harness.step_at(2 * GRACE + 3)).reason == NO_RECORD


async def test_a_failed_step_restarts_the_grace(harness: Harness) -> None:
    """While etcd did not answer, the sidecar could not deliver its STORING: that time does not count."""
    harness.backend.ended = {2: 0}
    await harness.step_at(0)
    harness.store.down = True
    await harness.step_at(GRACE / 2)
    await harness.step_at(2 * GRACE)
    harness.store.down = False
    assert (await harness.step_at(2 * GRACE + 1)).status is JobStatus.PROCESSING
    assert (await harness.step_at(3 * GRACE)).status is JobStatus.PROCESSING
    assert (await harness.step_at(3 * GRACE + 2)).reason == NO_RECORD


async def test_a_restarted_scheduler_measures_the_grace_again_and_still_ends_the_job(harness: Harness) -> None:
    harness.backend.ended = {2: 0}
    await harness.step_at(0)
    await harness.step_at(GRACE - 1)
    restarted = harness.restarted()
    assert (await restarted.step_at(GRACE + 1)).status is JobStatus.PROCESSING, "not sooner than a full grace"
    assert (await restarted.step_at(2 * GRACE)).status is JobStatus.PROCESSING
    state = await restarted.step_at(2 * GRACE + 2)
    assert (state.status, state.reason) == (JobStatus.FAILED, NO_RECORD)


async def test_auto_resume_restarts_the_job_as_for_any_failure() -> None:
    text = MANIFEST.replace(
        f"{{halt_grace: {HALT_GRACE}}}", f"{{halt_grace: {HALT_GRACE}, auto_resume: true, max_restarts: 1}}"
    )
    harness = Harness()
    harness.tracked.manifest = parse_manifest(text)
    for n in (1, 2):
        harness.store.report(n, Phase.PROCESSING)
    harness.backend.ended = {2: 0}
    await harness.step_at(0)
    state = await harness.step_at(GRACE + 1)
    assert (state.status, state.attempt, state.restarts) == (JobStatus.QUEUED, 2, 1)
    assert state.reason.startswith("waiting for "), "queued again, waiting for room (this backend has no node)"
    assert harness.tracked.ended_since == {}


@pytest.mark.parametrize(
    ("code", "oom", "why"),
    [
        (
            137,
            True,
            "was killed for using more memory than its limit (out of memory, exit code 137): "
            "raise `memory` in the manifest",
        ),
        (137, False, "was killed (exit code 137, SIGKILL) before learner-run could write its exit record"),
        (1, False, "ended (exit code 1) without learner-run's exit record: is learner-run the image's entrypoint?"),
    ],
    ids=["oom-killed", "sigkilled", "no-learner-run"],
)
async def test_the_reason_says_how_the_learner_container_ended(
    harness: Harness, code: int, oom: bool, why: str
) -> None:
    harness.backend.ended = {2: code}
    harness.backend.oom_killed = {2} if oom else set()
    await harness.step_at(0)
    state = await harness.step_at(GRACE + 1)
    assert state.reason == f"learner 2 lost: the learner container {why}"
