"""An ended attempt's figures read back from its results store beside the loop, and the work-lost counter: a
learner that ignored the halt is counted with the seconds measured from its metric history, the bound only where
the read fails or the history has no times, and never both.

Driven with the preemption tests' harness (fake clock, in-memory job store); the results store is in memory too,
the reads are the real ones (:mod:`learnerkit.scheduler.outputs.lostwork`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.errors import TransferError
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from controller_sidecar.status import ErrorCode, Phase
from learnerkit.scheduler.jobs.attempts import AttemptEnd, load_attempts
from learnerkit.scheduler.jobs.state import JobStatus
from tests.unit.scheduler.core.test_preemption import Harness

pytestmark = pytest.mark.asyncio

INTERVAL_S = 30.0


@dataclass
class ResultsStore:
    """The job's results bucket in memory; ``refusing`` makes every listing fail as a store that does not answer."""

    objects: dict[str, bytes] = field(default_factory=dict)
    refusing: bool = False

    def list(self, location: S3Location) -> list[RemoteObject]:
        if self.refusing:
            raise TransferError(f"{location}: the store refused")
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
    """job-low, with a checkpoint every 30 s, preempted by job-urgent and killed at its halt grace's end."""
    h = Harness(attempt_figures=True)
    h.scheduler.transitions.figures.clients = results  # type: ignore[assignment]
    low = h.submit("job-low", 0, f", checkpoint_interval: {INTERVAL_S:g}")
    await h.running(low)
    h.submit("job-urgent", 10)
    await h.step()
    h.report(low, Phase.HALTED, ErrorCode.HALT_TIMEOUT)
    await h.step()
    assert low.state.status is JobStatus.PREEMPTED
    await h.scheduler.transitions.figures.drain()
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
