"""The scheduler's loop goes on while the engine is slow: a deploy in flight does not hold back the monitoring of
the other jobs, and a finished job's teardown does not hold the scheduler's lock (the API waits on it).

Driven with an in-memory job store and a backend whose deploy or teardown blocks until the test lets it go."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.sweepdriver import active_sweep
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.decisions import TrialRecord, TrialState
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.store import StoredTrial, SweepSpecRecord, SweepState
from tests.fakeclock import FakeClock
from tests.unit.scheduler.memorymarks import MemoryMarks

pytestmark = pytest.mark.asyncio

TENANT = "team-a"
MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data}
    training_results: {container: results}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: a, password: b}
framework: {name: custom, version: img, command: run}
"""
HANG_GUARD_S = 30.0
"""Only keeps a regression from hanging the run; nothing is timed."""


class MemoryStore(JobStore):
    """Each job's learner records as a test sets them; saves are kept in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, dict[int, StatusRecord]] = {}
        self.fences: dict[str, int] = {}

    async def fence(self, job_id: str, attempt: int) -> None:
        self.fences[job_id] = attempt

    async def save(self, state: JobState, *, clear_learners: bool = False, clear_halt: bool = False) -> JobState:
        return state

    async def trim(self, job_id: str, *, provenance_records: bool = False) -> None:
        pass

    async def delete_credentials(self, job_id: str, manifest_text: str, source: str) -> None:
        pass

    async def request_halt(self, job_id: str) -> None:
        pass

    async def put_attempt(self, job_id: str, number: int, record: str) -> None:
        pass

    async def learner_records(
        self, job_id: str
    ) -> tuple[dict[int, StatusRecord], set[int], dict[int, dict[str, float]]]:
        records = self.records.get(job_id, {})
        return dict(records), set(records), {}

    def report(self, job_id: str, phase: Phase) -> None:
        previous = self.records.get(job_id, {}).get(1)
        sequence = previous.sequence + 1 if previous else 1_000_000
        self.records.setdefault(job_id, {})[1] = StatusRecord(phase, datetime.now(UTC), 1, sequence)


class BlockingBackend:
    """``deploy`` and ``teardown`` block (in the scheduler's worker thread) until released."""

    deploys_held = False

    def __init__(self) -> None:
        self.deploying, self.release_deploy = threading.Event(), threading.Event()
        self.tearing_down, self.release_teardown = threading.Event(), threading.Event()
        self.deployed: list[str] = []
        self.torn_down: list[str] = []

    def nodes(self) -> list[Node]:
        return [Node("local", 8.0, 16 << 30, 0, None)]

    def node_health(self) -> dict[str, NodeHealth]:
        return {"local": NodeHealth()}

    def deploy(self, job: JobDeployment) -> None:
        self.deploying.set()
        self.release_deploy.wait(HANG_GUARD_S)
        self.deployed.append(job.job_id)

    def started(self, job_id: str, learners: int) -> bool:
        return True

    def sidecars(self, job_id: str) -> SidecarStates:
        return SidecarStates(running=frozenset({1}))

    def learners_running(self, job_id: str) -> set[int]:
        return set()

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        return {}

    def teardown(self, job_id: str) -> None:
        self.tearing_down.set()
        self.release_teardown.wait(HANG_GUARD_S)
        self.torn_down.append(job_id)

    def job_ids(self, instance: str) -> set[str]:
        return set()


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = MemoryStore()
        self.backend = BlockingBackend()
        options = SchedulerOptions(Platform("127.0.0.1:2379", "sidecar"), catalog=None, resolve_image=lambda _: "i")
        self.scheduler = Scheduler(self.store, self.backend, options, clock=self.clock)
        self.scheduler.shared.marks = MemoryMarks()
        self.scheduler.shared.admission = AdmissionState(self.backend.nodes(), AdmissionPolicy())

    def job(self, job_id: str, stage: Stage) -> Tracked:
        """A job queued for admission, or running (admitted and deployed) with its learner PROCESSING."""
        state = JobState(job_id, TENANT, "j", self.clock.wall())
        tracked = Tracked(state, parse_manifest(MANIFEST), MANIFEST, "m.yml")
        self.scheduler.shared.jobs[job_id] = tracked
        self.scheduler.shared.admission.submit(tracked.admission_job())
        if stage is not Stage.QUEUED:
            self.scheduler.shared.admission.schedule(self.clock.wall())
            self.scheduler.shared.admission.mark_running(job_id)
            tracked.state = state.evolve(
                status=JobStatus.PROCESSING, stage=Stage.RUNNING, nodes=("local",), admitted_at=self.clock.wall()
            )
            for phase in (Phase.PENDING, Phase.DOWNLOADING, Phase.PROCESSING):
                self.store.report(job_id, phase)
        return tracked


async def test_a_deploy_in_flight_does_not_hold_back_the_other_jobs() -> None:
    h = Harness()
    running = h.job("job-running", Stage.RUNNING)
    queued = h.job("job-queued", Stage.QUEUED)
    await asyncio.wait_for(h.scheduler.loop.step(), HANG_GUARD_S)  # admits job-queued; its deploy starts and blocks
    assert await asyncio.to_thread(h.backend.deploying.wait, HANG_GUARD_S)
    h.backend.release_teardown.set()
    h.store.report("job-running", Phase.STORING)
    h.store.report("job-running", Phase.COMPLETED)

    await asyncio.wait_for(h.scheduler.loop.step(), HANG_GUARD_S)  # the deploy still blocks

    assert (running.state.status, running.state.stage) == (JobStatus.COMPLETED, Stage.DONE)
    assert h.backend.torn_down == ["job-running"] and h.backend.deployed == []
    assert (queued.state.status, queued.state.stage) == (JobStatus.PENDING, Stage.DEPLOYED)
    h.backend.release_deploy.set()
    await asyncio.wait_for(h.scheduler.loop.deploys_done(), HANG_GUARD_S)
    assert h.backend.deployed == ["job-queued"] and queued.state.reason == ""


async def test_a_stopping_loop_waits_for_the_deploys_in_flight() -> None:
    h = Harness()
    queued = h.job("job-queued", Stage.QUEUED)
    stop = asyncio.Event()
    loop = asyncio.create_task(h.scheduler.loop.run(stop))
    assert await asyncio.to_thread(h.backend.deploying.wait, HANG_GUARD_S)
    stop.set()
    await asyncio.sleep(0)
    assert not loop.done()  # the deploy still runs
    h.backend.release_deploy.set()
    await asyncio.wait_for(loop, HANG_GUARD_S)
    assert h.backend.deployed == ["job-queued"] and queued.state.reason == ""


async def test_a_teardown_does_not_hold_the_schedulers_lock() -> None:
    """While the engine removes a finished job, the API (which takes the lock) answers: here a halt."""
    h = Harness()
    finished = h.job("job-finished", Stage.RUNNING)
    other = h.job("job-other", Stage.QUEUED)
    h.store.report("job-finished", Phase.STORING)
    h.store.report("job-finished", Phase.COMPLETED)
    step = asyncio.create_task(h.scheduler.loop.step())
    assert await asyncio.to_thread(h.backend.tearing_down.wait, HANG_GUARD_S)

    view = await asyncio.wait_for(h.scheduler.halt(TENANT, "job-other"), HANG_GUARD_S)

    assert view.status == "HALTED" and other.state.stage is Stage.DONE
    assert finished.state.stage is Stage.RUNNING  # ended only once the teardown is done
    h.backend.release_teardown.set()
    await asyncio.wait_for(step, HANG_GUARD_S)
    assert (finished.state.status, finished.state.stage) == (JobStatus.COMPLETED, Stage.DONE)


SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: uniform, min: 0.1, max: 0.2}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, max: 3}
algorithm: {name: random}
trials: 8
concurrency: 8
"""


class SweepRecords:
    """The sweep store, as `sweep cancel` writes to it."""

    async def record(self, sweep_id: str, state: SweepState, *changes: object) -> SweepState:
        return state

    async def delete_credentials(self, record: SweepSpecRecord) -> SweepSpecRecord:
        return replace(record, credentials_deleted=True)


async def test_sweep_cancel_returns_at_once_and_the_loop_ends_the_trials_then_removes_their_pairs() -> None:
    """`sweep cancel` records the cancel and returns; the loop's step ends every trial job CANCELLED (no queued one
    is admitted into the capacity the running ones free), and the next removes the pairs while the engine is slow
    (its teardown blocks) and the API answers."""
    h = Harness()
    full = [Node("local", 3.0, 16 << 30, 0, None)]  # the 3 running trials fill it
    h.backend.nodes = lambda: full  # type: ignore[method-assign]
    h.scheduler.shared.admission = AdmissionState(full, AdmissionPolicy())
    running = [h.job(f"sweep-x-t{i:04d}", Stage.RUNNING) for i in range(3)]
    queued = [h.job(f"sweep-x-t{i:04d}", Stage.QUEUED) for i in range(3, 8)]
    record = SweepSpecRecord("sweep-x", TENANT, 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
    trials = {i: StoredTrial(TrialRecord(i, TrialState.RUNNING, 0), f"sweep-x-t{i:04d}", {"lr": 0.1}) for i in range(8)}
    spec, manifest = parse_search_file(SEARCH, Path("search.yml")), parse_manifest(MANIFEST)
    driver = h.scheduler.loop.driver
    assert driver is not None
    driver._store = cast(Any, SweepRecords())
    driver.sweeps["sweep-x"] = active_sweep(record, spec, manifest, SubmitOptions(), SweepState(decisions=8), trials)

    view = await asyncio.wait_for(h.scheduler.cancel_sweep(TENANT, "sweep-x"), HANG_GUARD_S)

    assert view.status == "cancelled"
    assert {t.state.status for t in running} == {JobStatus.PROCESSING} and h.backend.torn_down == []
    await asyncio.wait_for(h.scheduler.loop.step(), HANG_GUARD_S)
    assert {t.state.status for t in running + queued} == {JobStatus.CANCELLED}
    assert not h.backend.deploying.is_set()
    step = asyncio.create_task(h.scheduler.loop.step())
    assert await asyncio.to_thread(h.backend.tearing_down.wait, HANG_GUARD_S)
    # The API answers while the engine removes the pairs: a halt takes the lock and answers at once.
    with pytest.raises(JobStateError):
        await asyncio.wait_for(h.scheduler.halt(TENANT, "sweep-x-t0000"), HANG_GUARD_S)
    h.backend.release_teardown.set()
    await asyncio.wait_for(step, HANG_GUARD_S)
    assert sorted(h.backend.torn_down) == [t.state.job_id for t in running] and h.backend.deployed == []
