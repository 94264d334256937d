"""The sweep driver's part of promotion in place, on fakes of etcd's records: a trial waiting at its rung's boundary
is promoted there and then when the decision core would, recorded before it is answered; a scheduler restarted in
between answers the same; a trial not promoted at once is answered no and the book is left as it was; a trial
promoted in place whose attempt ends without training past its boundary is promoted by a new attempt."""

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
    )
    driver = SweepDriver(
        cast(Any, shared), cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None)
    )
    driver._store = cast(Any, records)
    return driver


def sweep_of(trials: dict[int, StoredTrial]) -> Any:
    spec = parse_search_file(SEARCH, Path("search.yml"))
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
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


def test_a_trial_not_promoted_at_once_is_answered_no_and_the_book_is_as_it_was() -> None:
    records = Records()
    trials = {0: paused(0, 0.5), 1: paused(1, 0.6)}
    trials[2] = StoredTrial(TrialRecord(2, TrialState.RUNNING, 0), "sweep-x-t0002", {"lr": "0.3"})
    records.boundaries["sweep-x-t0002"] = waiting(0.9)  # the worst of its rung: trial 0 is promoted, not it
    sweep = sweep_of(trials)
    before = sweep.book.records()
    asyncio.run(driver_over(records, {"sweep-x-t0002": job(2)})._boundaries(sweep))
    assert records.writes == ["answer"]
    assert records.answers == {("sweep-x-t0002", 1, 1): None}
    assert sweep.book.records() == before  # its rung ends as before: reported from its history once its job ends


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
