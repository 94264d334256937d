"""An ended attempt's figures read back from its results store beside the loop, and the work-lost counter: a
learner that ignored the halt is counted with the seconds measured from its metric history, the bound only where
the read fails or the history has no times, and never both.

Driven with the preemption tests' harness (fake clock, in-memory job store); the results store is in memory too,
the reads are the real ones (:mod:`learnerkit.scheduler.outputs.lostwork`)."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.errors import TransferError
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from controller_sidecar.status import ErrorCode, Phase
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, load_attempts
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import StoredJob
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_preemption import MIN_RUN_S, TENANT, Harness, manifest
from tests.unit.scheduler.core.test_restart_cordoned import NoSweeps, Reloading
from tests.unit.scheduler.memorymarks import MemoryMarks

pytestmark = pytest.mark.asyncio

INTERVAL_S = 30.0


@dataclass
class ResultsStore:
    """The job's results bucket in memory; ``refusing`` makes every listing fail as a store that does not answer."""

    objects: dict[str, bytes] = field(default_factory=dict)
    refusing: bool = False
    gate: threading.Event | None = None
    """Where set, every listing waits for it: a read that has not ended yet."""

    def list(self, location: S3Location) -> list[RemoteObject]:
        if self.refusing:
            raise TransferError(f"{location}: the store refused")
        if self.gate is not None:
            assert self.gate.wait(10), "the test never let the read go on"
        return [RemoteObject(k, len(v), "e") for k, v in sorted(self.objects.items()) if k.startswith(location.prefix)]

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self.objects[key]

    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]:
        return iter([self.objects[key][first : last + 1]])

    def of(self, endpoints: Endpoints) -> ResultsStore:
        """Stands for the scheduler's kept clients: every job's store is this one."""
        return self

    def learner_stored(
        self, job_id: str, attempt: int, learner: int, checkpoint: int, steps: dict[int, float | None]
    ) -> None:
        """A learner's checkpoint of step ``checkpoint`` (its marker stored) and its metric history: step -> time."""
        at = f"{job_id}/attempt-{attempt}/learner-{learner}/"
        self.objects[f"{at}checkpoints/ckpt-{checkpoint:010d}/state"] = b"w"
        self.objects[f"{at}checkpoints/ckpt-{checkpoint:010d}/.complete"] = f"{learner}:{checkpoint}".encode()
        self.objects[f"{at}logs/metrics.jsonl"] = b"".join(
            json.dumps({"step": step, "values": {"loss": 1.0}, **({} if t is None else {"time": t})}).encode() + b"\n"
            for step, t in steps.items()
        )


async def preempted_ignoring_the_halt(results: ResultsStore) -> Harness:
    """job-low, with a checkpoint every 30 s, preempted by job-urgent and killed at its halt grace's end; its
    figures read back."""
    h = await preempted_unread(results)
    await h.scheduler.transitions.figures.drain()
    return h


async def preempted_unread(results: ResultsStore) -> Harness:
    """As :func:`preempted_ignoring_the_halt`, the read of its figures maybe still going on."""
    h = Harness(attempt_figures=True)
    h.scheduler.transitions.figures.clients = results  # type: ignore[assignment]
    low = h.submit("job-low", 0, f", checkpoint_interval: {INTERVAL_S:g}")
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED, ErrorCode.HALT_TIMEOUT)
    await h.step()
    assert low.state.status is JobStatus.PREEMPTED
    return h


async def test_the_counter_carries_the_seconds_measured_instead_of_the_bound() -> None:
    results = ResultsStore()
    results.learner_stored("job-low", 1, 1, 10, {9: 100.0, 10: 100.1, 11: 100.2, 12: 100.3, 14: 100.5})
    h = await preempted_ignoring_the_halt(results)
    first = (await load_attempts(h.store, "job-low"))[0]
    assert (first.ended_by, first.steps_lost, first.work_lost_s) == (AttemptEnd.PREEMPTED, 4, 0.4)
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == pytest.approx(0.4), "the measured figure, not the bound as well"


@pytest.mark.parametrize("case", ["store-refuses", "history-without-times"])
async def test_the_bound_is_counted_once_where_nothing_is_measured(case: str) -> None:
    results = ResultsStore(refusing=case == "store-refuses")
    results.learner_stored("job-low", 1, 1, 10, {10: None, 13: None})
    h = await preempted_ignoring_the_halt(results)
    first = (await load_attempts(h.store, "job-low"))[0]
    assert first.work_lost_s == INTERVAL_S
    assert first.steps_lost == (None if case == "store-refuses" else 3)
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == INTERVAL_S


async def test_a_halt_honoured_counts_nothing_lost_whatever_the_history_says() -> None:
    """Its learner checkpointed at its end: 0 s recorded, and 0 counted."""
    results = ResultsStore()
    results.learner_stored("job-low", 1, 1, 12, {11: 100.0, 12: 100.5})
    h = Harness(attempt_figures=True)
    h.scheduler.transitions.figures.clients = results  # type: ignore[assignment]
    low = h.submit("job-low", 0, f", checkpoint_interval: {INTERVAL_S:g}")
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED)
    await h.step()
    await h.scheduler.transitions.figures.drain()
    first = (await load_attempts(h.store, "job-low"))[0]
    assert (first.steps_lost, first.work_lost_s) == (0, 0.0)
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == 0.0


async def test_a_prompt_halt_without_a_checkpoint_counts_all_it_did() -> None:
    """Its learner stopped in time but stored no checkpoint: the next attempt starts from scratch, and its whole
    attempt is lost (not 0 s, as for a halt honoured with a checkpoint): at least the minimum run time it ran."""
    results = ResultsStore()
    results.objects["job-low/attempt-1/learner-1/logs/metrics.jsonl"] = b"".join(
        json.dumps({"step": step, "values": {"loss": 1.0}, "time": 100.0 + step}).encode() + b"\n"
        for step in range(1, 6)
    )
    h = Harness(attempt_figures=True)
    h.scheduler.transitions.figures.clients = results  # type: ignore[assignment]
    low = h.submit("job-low", 0)
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED)
    await h.step()
    await h.scheduler.transitions.figures.drain()
    first = (await load_attempts(h.store, "job-low"))[0]
    assert (first.ended_by, first.steps_lost) == (AttemptEnd.PREEMPTED, 5)
    assert first.work_lost_s is not None and first.work_lost_s >= MIN_RUN_S
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == first.work_lost_s


async def restarted(h: Harness, attempts: dict[str, dict[int, bytes]], results: ResultsStore) -> Scheduler:
    """A scheduler started on what etcd holds (``attempts``, and job-low's status as ``h`` left it), its reads
    made."""
    store = Reloading()
    store.attempts = {job: dict(records) for job, records in attempts.items()}
    low = h.scheduler.shared.jobs["job-low"]
    store.stored = [StoredJob(low.state, {}, low.manifest_text, low.source)]
    again = Scheduler(store, h.backend, h.scheduler.shared.options, clock=h.clock)
    again.shared.marks = MemoryMarks()
    again.loop.driver._store = NoSweeps()
    again.transitions.figures.clients = results  # type: ignore[assignment]
    await again.loop.rebuild()
    await again.transitions.figures.drain()
    return again


def counted(scheduler: Scheduler, end: AttemptEnd) -> float | None:
    sample = "learnerkit_scheduler_work_lost_seconds_total"
    return scheduler.shared.metrics.registry.get_sample_value(sample, {"ended_by": end.value})


async def test_figures_a_killed_scheduler_had_not_read_are_read_after_its_restart_and_counted_once() -> None:
    """Killed while its read waits on the store: etcd holds the attempt due, with its bound, counted nowhere. The
    next scheduler reads and counts it; the one after that counts nothing more."""
    gate = threading.Event()
    results = ResultsStore(gate=gate)
    results.learner_stored("job-low", 1, 1, 10, {10: 100.0, 11: 100.25})
    h = await preempted_unread(results)
    in_etcd = {job: dict(records) for job, records in h.store.attempts.items()}
    first = Attempt.from_json(in_etcd["job-low"][1])
    assert (first.figures_due, first.work_lost_s) == (True, INTERVAL_S)
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == 0.0, "not counted before its figures are settled"
    for task in list(h.scheduler.transitions.figures._reads):
        task.cancel()  # the scheduler is killed: its read never ends
    gate.set()
    await h.scheduler.transitions.figures.drain()
    results.gate = None

    second = await restarted(h, in_etcd, results)
    first = (await load_attempts(second.shared.store, "job-low"))[0]
    assert (first.figures_due, first.steps_lost, first.work_lost_s) == (False, 1, 0.25)
    assert counted(second, AttemptEnd.PREEMPTED) == 0.25

    assert isinstance(second.shared.store, Reloading)
    third = await restarted(h, second.shared.store.attempts, results)
    assert counted(third, AttemptEnd.PREEMPTED) == 0.0
    assert (await load_attempts(third.shared.store, "job-low"))[0] == first


async def test_figures_etcd_does_not_take_stay_due_and_uncounted(caplog: pytest.LogCaptureFixture) -> None:
    """Read, but not saved: neither counted nor marked settled, so the next start reads them again."""
    gate = threading.Event()
    results = ResultsStore(gate=gate)
    results.learner_stored("job-low", 1, 1, 10, {10: 100.0, 11: 100.25})
    h = await preempted_unread(results)

    async def refused(job_id: str, number: int, record: str) -> None:
        raise LearnerkitError("etcd did not answer")

    h.store.put_attempt = refused  # type: ignore[method-assign]
    gate.set()
    with caplog.at_level(logging.WARNING):
        await h.scheduler.transitions.figures.drain()
    assert "job job-low: attempt 1's figures not saved (read at a restart): etcd did not answer" in caplog.text
    first = h.scheduler.shared.jobs["job-low"].attempts[0]
    assert (first.figures_due, first.work_lost_s) == (True, INTERVAL_S)
    assert h.lost_seconds(AttemptEnd.PREEMPTED) == 0.0


async def test_a_gangs_attempt_lost_the_steps_of_its_learner_that_lost_most() -> None:
    """Each learner restores its own newest checkpoint: learner 2's is older, so it does more steps again. The next
    attempt's checkpoint is named by learner 1's."""
    results = ResultsStore()
    results.learner_stored("job-gang", 1, 1, 10, {10: 100.0, 11: 100.2})
    results.learner_stored("job-gang", 1, 2, 8, {8: 100.0, 11: 100.6})
    h = Harness(nodes=2, attempt_figures=True)
    h.scheduler.transitions.figures.clients = results  # type: ignore[assignment]
    text = manifest(0).replace("learners: 1", "learners: 2")
    state = JobState("job-gang", TENANT, "j", h.clock.wall(), status=JobStatus.HALTED, stage=Stage.DONE)
    gang = Tracked(state, parse_manifest(text), text, "m.yml")
    gang.attempts = [Attempt(1, ("n1", "n2"), "t", "t", AttemptEnd.HALTED, "halt requested")]
    h.scheduler.shared.jobs["job-gang"] = gang

    await h.scheduler.resume(TENANT, "job-gang")
    await h.scheduler.transitions.figures.drain()
    first = (await load_attempts(h.store, "job-gang"))[0]
    assert (first.steps_lost, first.figures_due) == (3, False), "learner 2's 3 steps, not learner 1's 1"
    assert first.work_lost_s is None, "its user's halt: no seconds measured"
    assert h.scheduler.transitions.figures.digest_of("job-gang", 2) == hashlib.sha256(b"1:10").hexdigest()
