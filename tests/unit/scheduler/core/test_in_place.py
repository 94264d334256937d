"""The sweep driver's part of promotion in place, on fakes of etcd's records: a trial waiting at its rung's boundary
is promoted there and then when the decision core would, recorded before it is answered; a scheduler restarted in
between answers the same; a trial not promoted at once is answered no, its rung result counted there and then (once);
a trial promoted in place whose attempt ends without training past its boundary is promoted by a new attempt."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.sweepdriver import SweepDriver, active_sweep
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.store import StoredTrial, SweepSpecRecord, SweepState
from tests.unit.scheduler.core.test_sweepdriver import SEARCH as SWEEP_SEARCH

REPO = Path(__file__).resolve().parents[4]
MANIFEST = (REPO / "tests/unit/scheduler/manifests/ffdl-tf-mount-cos.yml").read_text()
SEARCH = SWEEP_SEARCH + "concurrency: 3\nkeep_checkpoints: true\n"


class Records:
    """The sweep's and the jobs' records as etcd would keep them, with the order of the writes."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.trials: dict[int, StoredTrial] = {}
        self.answers: dict[tuple[str, int, int], int | None] = {}
        self.boundaries: dict[str, bytes] = {}

    async def record(
        self, sweep_id: str, state: SweepState, decisions: list[Decision], trials: list[StoredTrial]
    ) -> SweepState:
        self.writes.append("decisions")
        self.trials.update({t.record.index: t for t in trials})
        return SweepState(state.status, state.decisions + len(decisions), state.reason)

    async def decisions(self, sweep_id: str) -> list[Decision]:
        return []

    async def answer_boundary(self, job_id: str, attempt: int, step: int, budget: int | None, reason: str) -> None:
        self.writes.append("answer")
        self.answers.setdefault((job_id, attempt, step), budget)


def driver_over(records: Records, jobs: dict[str, Tracked]) -> SweepDriver:
    shared = SimpleNamespace(
        jobs=jobs,
        store=records,
        options=SimpleNamespace(platform=Platform("http://127.0.0.1:2379", "s")),
        evaluations=SimpleNamespace(rounds={}),
        clock=SimpleNamespace(monotonic=lambda: 0.0),  # the trials' budgets were checked a moment ago
    )
    driver = SweepDriver(
        cast(Any, shared), cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None)
    )
    driver._store = cast(Any, records)
    return driver


def sweep_of(trials: dict[int, StoredTrial], search: str = SEARCH) -> Any:
    spec = parse_search_file(search, Path("search.yml"))
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, search, "search.yml", MANIFEST, "manifest.yml")
    return active_sweep(record, spec, parse_manifest(MANIFEST), SubmitOptions(), SweepState(decisions=5), trials)


def job(index: int, stage: Stage = Stage.RUNNING, status: JobStatus = JobStatus.PROCESSING) -> Tracked:
    state = JobState(f"sweep-x-t{index:04d}", "team-a", "job", 0.0, attempt=1, stage=stage, status=status)
    return Tracked(state, parse_manifest(MANIFEST), MANIFEST, "manifest.yml")


def paused(index: int, result: float) -> StoredTrial:
    return StoredTrial(TrialRecord(index, TrialState.PAUSED, 0, (result,)), f"sweep-x-t{index:04d}", {"lr": "0.1"})


def waiting(value: float) -> bytes:
    return json.dumps({"attempt": 1, "step": 1, "budget": 1, "metrics": {"val_loss": [1, value]}}).encode()


def test_the_best_of_its_rung_is_promoted_in_place_recorded_first_and_answered_again_after_a_restart() -> None:
    records = Records()
    trials = {0: paused(0, 0.5), 1: paused(1, 0.6)}
    trials[2] = StoredTrial(TrialRecord(2, TrialState.RUNNING, 0), "sweep-x-t0002", {"lr": "0.3"})
    jobs = {"sweep-x-t0002": job(2)}
    records.boundaries["sweep-x-t0002"] = waiting(0.1)
    sweep = sweep_of(trials)
    asyncio.run(driver_over(records, jobs)._boundaries(sweep))
    assert records.writes == ["decisions", "answer"]  # the promotion is stored before the learner hears of it
    assert records.answers == {("sweep-x-t0002", 1, 1): 3}
    promoted = records.trials[2]
    assert (promoted.record.state, promoted.record.target, promoted.rung_attempt, promoted.in_place_attempt) == (
        TrialState.RUNNING,
        1,
        1,
        1,
    )
    # A scheduler restarted before its answer was written: the stored promotion is answered, not decided again.
    records.writes.clear()
    records.answers.clear()
    restored = sweep_of({**trials, 2: promoted})
    asyncio.run(driver_over(records, jobs)._boundaries(restored))
    assert (records.writes, records.answers) == (["answer"], {("sweep-x-t0002", 1, 1): 3})


def running(index: int) -> StoredTrial:
    return StoredTrial(TrialRecord(index, TrialState.RUNNING, 0), f"sweep-x-t{index:04d}", {"lr": "0.3"})


def test_a_trial_answered_no_counts_at_once_so_a_later_one_of_its_rung_is_promoted_in_place() -> None:
    """Three trials reach rung 1 together: the first two are answered no, their results entering the rung's record
    there and then (paused, stored before the answer); the third is the best of three and trains on in place."""
    records = Records()
    trials = {i: running(i) for i in range(3)}
    jobs = {f"sweep-x-t{i:04d}": job(i) for i in range(3)}
    for i, value in enumerate((0.5, 0.6, 0.1)):
        records.boundaries[f"sweep-x-t{i:04d}"] = waiting(value)
    sweep = sweep_of(trials)
    asyncio.run(driver_over(records, jobs)._boundaries(sweep))
    assert records.writes == ["decisions", "answer"] * 3  # each decision stored before its learner hears of it
    assert records.answers == {("sweep-x-t0000", 1, 1): None, ("sweep-x-t0001", 1, 1): None, ("sweep-x-t0002", 1, 1): 3}
    states = {i: (t.record.state, t.record.results) for i, t in records.trials.items()}
    assert states == {
        0: (TrialState.STOPPED, (0.5,)),  # the top 1 of 3 continue: they can no longer be promoted
        1: (TrialState.STOPPED, (0.6,)),
        2: (TrialState.RUNNING, (0.1,)),
    }
    assert records.trials[2].in_place_attempt == 1


def test_a_paused_trial_answered_no_is_not_counted_again_when_its_job_ends() -> None:
    records = Records()
    trials = {i: running(i) for i in range(3)}
    jobs = {f"sweep-x-t{i:04d}": job(i) for i in range(3)}
    records.boundaries["sweep-x-t0000"] = waiting(0.5)
    sweep = sweep_of(trials)
    driver = driver_over(records, jobs)
    driver.reader = cast(Any, _History())
    asyncio.run(driver._boundaries(sweep))
    assert records.answers == {("sweep-x-t0000", 1, 1): None}
    assert (sweep.trials[0].record.state, sweep.trials[0].record.results) == (TrialState.PAUSED, (0.5,))
    before, written = sweep.book.records(), len(records.writes)
    jobs["sweep-x-t0000"] = job(0, Stage.DONE, JobStatus.COMPLETED)  # it checkpointed and ended its rung
    asyncio.run(driver._step(sweep))
    assert sweep.book.records() == before
    assert len(records.writes) == written  # no second report of its rung, nothing decided


class _History:
    async def metrics_after(
        self, endpoints: object, manifest: object, state: object, attempt: int, offset: int
    ) -> tuple[bytes, int] | None:
        data = b'{"step": 1, "values": {"val_loss": 0.1}}\n'
        return data[offset:], offset


def test_a_promotion_in_place_the_learner_did_not_take_is_made_by_a_new_attempt() -> None:
    records = Records()
    trials = {0: paused(0, 0.5), 1: paused(1, 0.6)}
    trials[2] = StoredTrial(
        TrialRecord(2, TrialState.RUNNING, 1, (0.1,)), "sweep-x-t0002", {"lr": "0.3"}, 1, in_place_attempt=1
    )
    jobs = {"sweep-x-t0002": job(2, Stage.DONE, JobStatus.COMPLETED)}  # it gave up waiting and checkpointed at 1
    sweep = sweep_of(trials)
    driver = driver_over(records, jobs)
    driver.reader = cast(Any, _History())
    asyncio.run(driver._step(sweep))
    resumed = records.trials[2]
    assert (resumed.record.state, resumed.record.target, resumed.rung_attempt, resumed.in_place_attempt) == (
        TrialState.RUNNING,
        1,
        2,
        None,
    )
    assert all(d.action is not Action.FAIL for d in sweep.pending)


class _Objects:
    """A trial's stored objects, as the object store lists them; what was deleted."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def of(self, endpoints: object) -> _Objects:
        return self

    def list(self, location: Any) -> list[SimpleNamespace]:
        key = f"{location.prefix}attempt-1/learner-1/checkpoints/1/state.pt"
        return [SimpleNamespace(key=key, size=10)] if key not in self.deleted else []

    def delete(self, bucket: str, key: str) -> None:
        self.deleted.append(key)


def test_a_trial_stopped_while_its_job_checkpoints_has_its_checkpoints_removed_once_its_job_ended() -> None:
    records = Records()
    trials = {i: running(i) for i in range(3)}
    jobs = {f"sweep-x-t{i:04d}": job(i) for i in range(3)}
    for i, value in enumerate((0.5, 0.6, 0.1)):
        records.boundaries[f"sweep-x-t{i:04d}"] = waiting(value)
    sweep = sweep_of(trials, search=SWEEP_SEARCH + "concurrency: 3\n")
    objects = _Objects()
    driver = driver_over(records, jobs)
    driver.clients, driver.reader = cast(Any, objects), cast(Any, _History())
    asyncio.run(driver._boundaries(sweep))
    assert [records.trials[i].record.state for i in (0, 1)] == [TrialState.STOPPED, TrialState.STOPPED]
    assert objects.deleted == []  # their learners write their checkpoints now
    assert [records.trials[i].remove_at_end for i in (0, 1)] == [True, True]
    assert StoredTrial.from_raw(records.trials[1].to_raw()) == records.trials[1]  # kept for a restart
    jobs["sweep-x-t0000"] = job(0, Stage.DONE, JobStatus.COMPLETED)
    asyncio.run(driver._step(sweep))
    removed = [(records.trials[i].remove_at_end, records.trials[i].freed_bytes) for i in (0, 1)]
    assert removed == [(False, 10), (True, 0)]  # trial 1's job still runs
    assert len(objects.deleted) == 1 and "sweep-x-t0000" in objects.deleted[0]
