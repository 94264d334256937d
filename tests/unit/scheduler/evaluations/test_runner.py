"""The runner's decisions with the backend and etcd faked: a crash is its own outcome, a restart redoes what
was in flight once, a second round waits for the first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, SidecarStates
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.evaluations.record import EvaluationOutcome
from learnerkit.scheduler.evaluations.runner import EvaluationRunner, RoundSigned
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore, StoredJob
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.evaluations.test_plan import ENDPOINTS, MANIFEST, EvaluatedJob

T = TypeVar("T")
JOB = EvaluatedJob("job-1", parse_manifest(MANIFEST), ENDPOINTS, MANIFEST, "manifest.yml")
SPECS = JOB.manifest.evaluations[:1]


class MemoryEtcd:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    async def get(self, key: str) -> tuple[bytes, int] | None:
        return (self.data[key], 1) if key in self.data else None

    async def put(self, key: str, value: str | bytes) -> int:
        self.data[key] = value.encode() if isinstance(value, str) else value
        return 1

    async def delete_prefix(self, prefix: str) -> None:
        for key in [k for k in self.data if k.startswith(prefix)]:
            del self.data[key]


class MemoryStore(JobStore):
    def __init__(self) -> None:
        super().__init__()
        self.memory = MemoryEtcd()
        self.records: dict[str, StatusRecord] = {}

    @property
    def etcd(self) -> Any:
        return self.memory

    async def learner_records(
        self, job_id: str
    ) -> tuple[dict[int, StatusRecord], set[int], dict[int, dict[str, float]]]:
        record = self.records.get(job_id)
        return ({1: record} if record else {}), set(), {}


class PairBackend:
    deploys_held = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.exited: dict[str, int] = {}

    def deploy(self, job: JobDeployment) -> None:
        self.calls.append(("deploy", job.job_id))

    def teardown(self, job_id: str) -> None:
        self.calls.append(("teardown", job_id))

    def sidecars(self, job_id: str) -> SidecarStates:
        return SidecarStates({1: self.exited[job_id]} if job_id in self.exited else {}, frozenset())

    def nodes(self) -> list[Any]:
        return []

    def started(self, job_id: str, learners: int) -> bool:
        return True

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        return {}

    def job_ids(self, instance: str) -> set[str]:
        return set()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def runner(store: MemoryStore, backend: PairBackend, evaluator: str | None = "robustness:1") -> EvaluationRunner:
    def resolve(kind: str) -> str:
        if evaluator is None:
            raise JobStateError(f"evaluator image of {kind} may not run here: scan gate failed")
        return evaluator

    return EvaluationRunner(store, backend, S3Clients(), Platform("127.0.0.1:2379", "sidecar:1"), resolve)


def test_a_sidecar_gone_without_a_final_record_is_crashed_never_passed() -> None:
    store, backend = MemoryStore(), PairBackend()
    evaluations = runner(store, backend)

    async def scenario() -> None:
        await evaluations.step()
        backend.exited["job-1-ev1-1"] = 137
        await evaluations.step()

    credentials = "/learnerkit/credentials/job-1"
    run(evaluations.begin(JOB, 1, SPECS))
    assert b"password: b" in store.memory.data[credentials]  # kept while the round runs
    run(scenario())
    [outcome] = evaluations.rounds["job-1"].outcomes
    assert (outcome.outcome, outcome.message) == ("crashed", "its sidecar exited with 137 before reporting an end")
    assert backend.calls[-1] == ("teardown", "job-1-ev1-1")
    assert json.loads(store.memory.data[credentials])["credentials"] == "deleted"  # and deleted once it ended


def test_an_evaluator_the_gate_refuses_is_crashed_with_the_verdict_and_never_deployed() -> None:
    store, backend = MemoryStore(), PairBackend()
    evaluations = runner(store, backend, evaluator=None)
    run(evaluations.begin(JOB, 1, SPECS))
    run(evaluations.step())
    [outcome] = evaluations.rounds["job-1"].outcomes
    assert outcome.outcome == "crashed" and "not deployed: evaluator image of robustness" in outcome.message
    assert not [call for call in backend.calls if call[0] == "deploy"]


def test_after_a_restart_an_evaluation_in_flight_is_redone_once_and_one_that_ended_is_settled() -> None:
    store, backend = MemoryStore(), PairBackend()
    two = (SPECS[0], replace(SPECS[0], name="b"))
    first = runner(store, backend)
    run(first.begin(JOB, 1, two))
    run(first.step())
    assert [c for c in backend.calls if c[0] == "deploy"] == [("deploy", "job-1-ev1-1"), ("deploy", "job-1-ev1-2")]
    failed = StatusRecord(Phase.FAILED, datetime.now(UTC), 1, 1, message="evaluate.py: eval.csv line 3: not a number")
    store.records["job-1-ev1-2"] = failed  # it ended while no scheduler ran
    backend.calls.clear()
    restarted = runner(store, backend)
    run(restarted.load(JOB, 1))
    run(restarted.step())
    run(restarted.step())
    assert backend.calls[:2] == [("teardown", "job-1-ev1-1"), ("deploy", "job-1-ev1-1")]
    assert backend.calls.count(("deploy", "job-1-ev1-1")) == 1 and ("deploy", "job-1-ev1-2") not in backend.calls
    running, crashed = restarted.rounds["job-1"].outcomes
    assert running.outcome == "running"
    assert crashed.outcome == "crashed" and "ended FAILED" in crashed.message and "line 3" in crashed.message


def test_a_job_whose_credentials_were_deleted_is_not_evaluated_again() -> None:
    without = EvaluatedJob("job-1", JOB.manifest.without_credentials(), Endpoints("127.0.0.1:2379"), "m", "m.yml")
    with pytest.raises(JobStateError, match="deleted its store's credentials when it ended"):
        run(runner(MemoryStore(), PairBackend()).begin(without, 1, SPECS))


def test_a_new_round_waits_for_the_one_in_flight() -> None:
    evaluations = runner(MemoryStore(), PairBackend())
    run(evaluations.begin(JOB, 1, SPECS))
    assert evaluations.in_flight("job-1") and not evaluations.in_flight("job-2")
    with pytest.raises(JobStateError, match="round 1 are still running"):
        run(evaluations.begin(JOB, 1, SPECS))
    evaluations.forget("job-1")
    assert "job-1" not in evaluations.rounds and not evaluations.in_flight("job-1")


def test_a_completed_job_keeps_its_credentials_at_a_restart_only_while_its_evaluations_need_them() -> None:
    store = MemoryStore()
    evaluations = runner(store, PairBackend())
    spec = {"manifest": {"evaluations": [{"name": "robust"}]}}

    def stored(status: JobStatus, with_evaluations: bool = True) -> StoredJob:
        state = JobState("job-1", "team-a", "j", datetime.now(UTC), status=status)
        return StoredJob(state, spec if with_evaluations else {"manifest": {}}, MANIFEST, "manifest.yml")

    # ended before its first round was recorded: kept, and the round begins at the start
    assert run(evaluations.keeps_credentials(stored(JobStatus.COMPLETED)))
    assert not run(evaluations.keeps_credentials(stored(JobStatus.COMPLETED, with_evaluations=False)))
    assert not run(evaluations.keeps_credentials(stored(JobStatus.CANCELLED)))
    run(evaluations.load(JOB, 1))
    assert evaluations.in_flight("job-1") and run(evaluations.keeps_credentials(stored(JobStatus.COMPLETED)))
    current = evaluations.rounds["job-1"]
    for index, name in enumerate(("robust", "remote")):
        current = current.settled(index, EvaluationOutcome(name, "robustness", "passed"))
    run(evaluations._save(current))
    assert run(evaluations.keeps_credentials(stored(JobStatus.COMPLETED))), "kept until the round is signed"
    run(evaluations._signed(JOB, current.round))
    assert not run(evaluations.keeps_credentials(stored(JobStatus.COMPLETED)))


def test_reports_after_the_credentials_left_say_why_they_cannot_be_read() -> None:
    store = MemoryStore()
    evaluations = runner(store, PairBackend())
    run(evaluations.begin(JOB, 1, SPECS))
    restarted = runner(store, PairBackend())
    without = EvaluatedJob("job-1", JOB.manifest.without_credentials(), Endpoints("127.0.0.1:2379"), "m", "m.yml")
    run(restarted.load(without, 1))
    with pytest.raises(JobStateError, match="read the reports from the store with your keys"):
        run(restarted.reports("job-1"))
    assert run(restarted.reports("job-2")).round == 0


def test_the_round_ended_hook_gets_the_settled_round_once_with_the_image_deployed() -> None:
    store, backend = MemoryStore(), PairBackend()
    evaluations = runner(store, backend, evaluator="sha256:" + "e" * 64)
    ended: list[tuple[str, int, tuple[str, ...], tuple[str, ...]]] = []

    async def round_ended(job: EvaluatedJob, settled: Any, signed: RoundSigned) -> None:
        ended.append(
            (
                job.job_id,
                settled.round,
                tuple(o.outcome for o in settled.outcomes),
                tuple(o.image for o in settled.outcomes),
            )
        )

    evaluations.round_ended = round_ended

    async def scenario() -> None:
        await evaluations.step()
        recorded = json.loads(store.memory.data["/learnerkit/jobs/job-1/evaluations"])
        assert recorded["outcomes"][0]["image"] == "sha256:" + "e" * 64, "recorded before the deploy"
        assert ended == []
        backend.exited["job-1-ev1-1"] = 137
        await evaluations.step()
        await evaluations.step()

    run(evaluations.begin(JOB, 1, SPECS))
    run(scenario())
    assert ended == [("job-1", 1, ("crashed",), ("sha256:" + "e" * 64,))]


def credentials_deleted(store: MemoryStore) -> bool:
    return json.loads(store.memory.data["/learnerkit/credentials/job-1"]).get("credentials") == "deleted"


def settled_round(store: MemoryStore, backend: PairBackend, round_ended: Any) -> EvaluationRunner:
    """A runner whose round 1 has just settled (its one evaluator ended), the hook called."""
    evaluations = runner(store, backend)
    evaluations.round_ended = round_ended
    run(evaluations.begin(JOB, 1, SPECS))
    run(evaluations.step())
    backend.exited["job-1-ev1-1"] = 137
    run(evaluations.step())
    run(evaluations.step())
    return evaluations


def test_a_round_whose_statement_was_not_stored_before_a_stop_is_signed_by_the_next_scheduler_once() -> None:
    store, backend = MemoryStore(), PairBackend()
    asked: list[tuple[str, int]] = []

    async def stopped_before_storing(job: EvaluatedJob, settled: Any, signed: RoundSigned) -> None:
        asked.append(("first", settled.round))  # the scheduler stops here: the statement is never stored

    first = settled_round(store, backend, stopped_before_storing)
    assert asked == [("first", 1)]
    assert first.rounds["job-1"].awaiting_signature and not credentials_deleted(store), "kept for the statement"
    first.signing_wait_s = 0  # the write failed: `job evaluate` waits for it no longer
    with pytest.raises(JobStateError, match="round 1 is not stored yet"):
        run(first.begin(JOB, 1, SPECS))

    async def stores_it(job: EvaluatedJob, settled: Any, signed: RoundSigned) -> None:
        asked.append(("restarted", settled.round))
        await signed()

    restarted = runner(store, backend)
    restarted.round_ended = stores_it
    run(restarted.load(JOB, 1))
    assert asked == [("first", 1), ("restarted", 1)]
    recorded = json.loads(store.memory.data["/learnerkit/jobs/job-1/evaluations"])
    assert recorded["signed"] is True and credentials_deleted(store)
    again = runner(store, backend)
    again.round_ended = stores_it
    run(again.load(JOB, 1))
    assert asked == [("first", 1), ("restarted", 1)], "a signed round is not signed again"


def test_without_a_signer_the_round_closes_at_once() -> None:
    store = MemoryStore()
    evaluations = settled_round(store, PairBackend(), None)
    assert evaluations.rounds["job-1"].signed and credentials_deleted(store)


def test_a_new_round_asked_as_the_last_one_is_being_signed_waits_for_its_statement() -> None:
    store, backend = MemoryStore(), PairBackend()
    pending: list[RoundSigned] = []

    async def signing(job: EvaluatedJob, settled: Any, signed: RoundSigned) -> None:
        pending.append(signed)  # the write runs in a worker thread; it ends a moment later

    evaluations = settled_round(store, backend, signing)

    async def scenario() -> int:
        asked = asyncio.create_task(evaluations.begin(JOB, 1, SPECS))
        await asyncio.sleep(0)  # let it reach its wait
        assert not asked.done()
        await pending[0]()
        return (await asked).round

    assert run(scenario()) == 2
    assert json.loads(store.memory.data["/learnerkit/jobs/job-1/evaluations"])["signed"] is False, "round 2's"
