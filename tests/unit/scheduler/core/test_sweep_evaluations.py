"""A sweep with `evaluations:` evaluates its best trial's model once, when it is done: never a trial paused at a
rung (its job ends COMPLETED there), and no round's end deletes the credentials of a trial that may still run.

The job side runs the scheduler's own transitions and evaluation runner over an in-memory etcd; the driver side
runs the sweep driver with the runner beside it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.sweepdriver import ActiveSweep, SweepDriver, active_sweep
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import credentials_key
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.decisions import TrialRecord, TrialState
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.store import StoredSweep, StoredTrial, SweepSpecRecord, SweepState, SweepStatus
from tests.unit.scheduler.core.test_learner_ended import FakeBackend
from tests.unit.scheduler.evaluations.test_plan import MANIFEST
from tests.unit.scheduler.evaluations.test_runner import MemoryStore as EtcdJobStore
from tests.unit.scheduler.memorymarks import MemoryMarks

SWEEP = "sweep-5e1ec7ed"
SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: ["0.1", "0.2", "0.3"]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 1, max: 3}
algorithm: {name: asha, eta: 3}
trials: 3
"""


class JobStore(EtcdJobStore):
    """The runner's in-memory etcd, and a job's saves and trims as the transitions make them."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    async def save(self, state: JobState, *, clear_learners: bool = False, clear_halt: bool = False) -> JobState:
        return state

    async def trim(self, job_id: str, *, provenance_records: bool = False) -> None:
        pass

    async def delete_credentials(self, job_id: str, manifest_text: str, source: str) -> None:
        self.deleted.append(job_id)
        await self.memory.put(credentials_key(job_id), json.dumps({"credentials": "deleted"}))


def scheduler() -> tuple[Scheduler, JobStore]:
    store = JobStore()
    options = SchedulerOptions(Platform("127.0.0.1:2379", "sidecar"), catalog=None, resolve_image=lambda _: "i")
    built = Scheduler(store, cast(Any, FakeBackend()), options)
    built.shared.marks = MemoryMarks()
    return built, store


def running_job(job_id: str) -> Tracked:
    state = JobState(job_id, "team-a", "j", 0.0, status=JobStatus.PROCESSING, stage=Stage.RUNNING)
    return Tracked(state, parse_manifest(MANIFEST), MANIFEST, "manifest.yml")


@pytest.mark.parametrize(("job_id", "evaluated"), [(f"{SWEEP}-t0001", False), ("job-1", True)])
def test_a_trial_paused_at_its_rung_starts_no_round_where_a_job_does(job_id: str, evaluated: bool) -> None:
    """A trial's job ends COMPLETED at every pause: it starts no round and loses its credentials as an ended job
    does (the driver writes them back at a promotion); a job that is no trial starts its round as before."""
    built, store = scheduler()
    tracked = running_job(job_id)
    built.shared.jobs[job_id] = tracked
    asyncio.run(built.transitions.end(tracked, JobStatus.COMPLETED, "rung 1 reached", release=False))
    assert (job_id in built.shared.evaluations.rounds) is evaluated
    assert (store.deleted == [job_id]) is not evaluated


def sweep_of(status: SweepStatus, states: dict[int, tuple[TrialState, tuple[float, ...]]]) -> ActiveSweep:
    spec = parse_search_file(SEARCH, Path("search.yml"))
    record = SweepSpecRecord(SWEEP, "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
    trials = {
        i: StoredTrial(TrialRecord(i, state, len(results) - 1, results), f"{SWEEP}-t{i:04d}", {"lr": "0.1"})
        for i, (state, results) in states.items()
    }
    return active_sweep(record, spec, parse_manifest(MANIFEST), SubmitOptions(), SweepState(status=status), trials)


class SweepRecords:
    """The sweep store's credentials deletion, in the order it comes."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def delete_credentials(self, record: SweepSpecRecord) -> SweepSpecRecord:
        self.log.append("sweep credentials deleted")
        return SweepSpecRecord(**{**record.__dict__, "credentials_deleted": True})


def driver_for(sweep: ActiveSweep, built: Scheduler, log: list[str]) -> SweepDriver:
    """The scheduler's driver, holding `sweep`, its trials' jobs COMPLETED, its round begins logged."""
    driver = built.loop.driver
    assert driver is not None
    driver._store = cast(Any, SweepRecords(log))
    driver.sweeps[sweep.sweep_id] = sweep
    for trial in sweep.trials.values():
        state = JobState(trial.job_id, "team-a", "j", 0.0, status=JobStatus.COMPLETED, stage=Stage.DONE, attempt=2)
        built.shared.jobs[trial.job_id] = Tracked(state, parse_manifest(MANIFEST).without_credentials(), "", "m.yml")
    runner = built.shared.evaluations
    begin = runner.begin

    async def logged(job: Any, attempt: int, specs: Any) -> Any:
        log.append(f"round of {job.job_id}, attempt {attempt}")
        return await begin(job, attempt, specs)

    runner.begin = logged  # type: ignore[method-assign]
    return driver


DONE = {
    0: (TrialState.STOPPED, (0.4,)),
    1: (TrialState.COMPLETED, (0.3, 0.2)),
    2: (TrialState.FAILED, (0.1,)),
}


def test_a_done_sweep_evaluates_its_best_trial_once_with_the_sweep_s_credentials_then_drops_them() -> None:
    """Trial 1 went furthest; trial 2 failed though its value is lower. Its round runs with the credentials the
    sweep kept (the trial's job lost its own at its last pause), begun before the sweep's are deleted."""
    built, store = scheduler()
    log: list[str] = []
    sweep = sweep_of(SweepStatus.DONE, DONE)
    driver = driver_for(sweep, built, log)

    async def scenario() -> None:
        await driver._evaluate(sweep)
        await driver._ended(sweep)
        await driver._evaluate(sweep)  # again: a later step or a restart takes no second round

    asyncio.run(scenario())
    assert log == [f"round of {SWEEP}-t0001, attempt 2", "sweep credentials deleted"]
    assert list(built.shared.evaluations.rounds) == [f"{SWEEP}-t0001"]
    kept = json.loads(store.memory.data[credentials_key(f"{SWEEP}-t0001")])
    assert "password: b" in kept["manifest"]  # the round's evaluations read the store with them


@pytest.mark.parametrize("status", [SweepStatus.RUNNING, SweepStatus.HALTED, SweepStatus.CANCELLED])
def test_a_sweep_not_done_evaluates_nothing(status: SweepStatus) -> None:
    """Running (trials paused at rungs may be promoted), halted, or cancelled: no round."""
    built, _ = scheduler()
    log: list[str] = []
    sweep = sweep_of(status, {0: (TrialState.PAUSED, (0.4,)), 1: (TrialState.RUNNING, (0.3,)), 2: DONE[1]})
    asyncio.run(driver_for(sweep, built, log)._evaluate(sweep))
    assert log == [] and built.shared.evaluations.rounds == {}


def test_a_scheduler_stopped_between_the_sweep_s_end_and_the_round_begins_it_at_its_next_start() -> None:
    """The sweep was stored done, its credentials not yet deleted: the restore begins the round, then deletes."""
    built, _ = scheduler()
    log: list[str] = []
    stored = sweep_of(SweepStatus.DONE, DONE)
    driver = driver_for(stored, built, log)
    driver.sweeps.clear()

    async def parse(text: str, source: str, tenant: str, image: str | None) -> Any:
        return parse_manifest(text, source, image=image)

    driver.parse = parse
    asyncio.run(driver._restore(StoredSweep(stored.record, stored.state, stored.trials)))
    assert log == [f"round of {SWEEP}-t0001, attempt 2", "sweep credentials deleted"]


def test_job_evaluate_refuses_a_trial_of_a_sweep_still_running() -> None:
    """Its model may train on at a promotion, and the round's end would delete the credentials it runs with."""
    built, _ = scheduler()
    sweep = sweep_of(SweepStatus.RUNNING, {0: (TrialState.PAUSED, (0.4,))})
    driver_for(sweep, built, [])
    trial = built.shared.jobs[f"{SWEEP}-t0000"]
    trial.manifest, trial.manifest_text = parse_manifest(MANIFEST), MANIFEST  # in memory until a restart
    text = (
        "evaluations:\n  - {name: robust, kind: robustness, data: {file: x.csv, label: label}, attacks: [fgsm],"
        " epsilons: [0.1]}\n"
    )
    with pytest.raises(JobStateError, match=f"trial 0 of sweep {SWEEP}, which is running: a promotion"):
        asyncio.run(built.evaluate("team-a", f"{SWEEP}-t0000", text))
    assert built.shared.evaluations.rounds == {}
    sweep.state = SweepState(status=SweepStatus.DONE)  # done: `job evaluate` takes any trial's model
    asyncio.run(built.evaluate("team-a", f"{SWEEP}-t0000", text))
    assert list(built.shared.evaluations.rounds) == [f"{SWEEP}-t0000"]
