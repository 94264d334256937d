"""A job's attempts history: one record per deploy of the job, and why each ended.

Kept in etcd beside the job's status (``/learnerkit/jobs/<id>/attempts/<n>``, JSON), written when an attempt is
deployed and again when it ends. A finished job's trim keeps them: they are what ``job status`` shows of the
job's past (each attempt, why it ended, the checkpoint a resume started from, the work lost).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from learnerkit.scheduler.jobs.store import JobStore


class AttemptEnd(StrEnum):
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"
    """By its user."""
    PREEMPTED = "PREEMPTED"
    """Halted by the scheduler for a job of higher priority; the job waits to resume by itself."""
    NODE_LOST = "NODE_LOST"
    DRAINED = "DRAINED"
    CANCELLED = "CANCELLED"
    RESTARTED = "RESTARTED"
    """Failed, and started again by the scheduler (the manifest's ``max_restarts``)."""
    INTERRUPTED = "INTERRUPTED"
    """Halted by a stop nobody asked the scheduler for (a pod evicted or deleted, a container stopped: the
    sidecar's SIGTERM); the job waits to resume by itself from the checkpoint it stored."""

    @property
    def requeued(self) -> bool:
        """Whether the scheduler queued the job again by itself at this end, to resume from the attempt's checkpoint:
        what the attempt did after that checkpoint is done again (its ``work_lost_s``)."""
        return self in REQUEUED_ENDS


REQUEUED_ENDS = frozenset(
    {AttemptEnd.PREEMPTED, AttemptEnd.DRAINED, AttemptEnd.NODE_LOST, AttemptEnd.INTERRUPTED, AttemptEnd.RESTARTED}
)


@dataclass(frozen=True)
class Attempt:
    number: int
    nodes: tuple[str, ...]
    started_at: str
    """ISO-8601 UTC, when deployed."""
    ended_at: str | None = None
    ended_by: AttemptEnd | None = None
    reason: str = ""
    """e.g. ``preempted by job job-3f2a...``, ``node n2 went NotReady``."""
    resumed_from: int | None = None
    """The attempt whose checkpoint this one restored."""
    checkpoint_digest: str | None = None
    """sha256 of that checkpoint, where known."""
    work_lost_s: float | None = None
    """Training seconds lost at the end of this attempt; None where not known."""
    steps_lost: int | None = None
    preempted_by: str | None = None
    """An attempt ended PREEMPTED: the job it was halted for (the preemption log, `fabric.PreemptionView`)."""
    figures_due: bool = False
    """The job was queued again after it, and its figures (steps and seconds lost, the next attempt's checkpoint)
    are not read back yet, nor its lost seconds counted: a scheduler restarted meanwhile reads them."""

    @property
    def open(self) -> bool:
        return self.ended_by is None

    def ended(
        self,
        ended_by: AttemptEnd,
        reason: str,
        at: str,
        *,
        work_lost_s: float | None = None,
        steps_lost: int | None = None,
    ) -> Attempt:
        return replace(
            self, ended_at=at, ended_by=ended_by, reason=reason, work_lost_s=work_lost_s, steps_lost=steps_lost
        )

    def to_json(self) -> str:
        raw = asdict(self)
        raw["nodes"] = list(self.nodes)
        raw["ended_by"] = self.ended_by.value if self.ended_by else None
        return json.dumps(raw, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Attempt:
        raw: dict[str, Any] = json.loads(text)
        ended_by = raw.get("ended_by")
        return cls(
            number=int(raw["number"]),
            nodes=tuple(str(n) for n in raw.get("nodes", ())),
            started_at=str(raw["started_at"]),
            ended_at=raw.get("ended_at"),
            ended_by=AttemptEnd(ended_by) if ended_by else None,
            reason=str(raw.get("reason", "")),
            resumed_from=raw.get("resumed_from"),
            checkpoint_digest=raw.get("checkpoint_digest"),
            work_lost_s=raw.get("work_lost_s"),
            steps_lost=raw.get("steps_lost"),
            preempted_by=raw.get("preempted_by"),
            figures_due=bool(raw.get("figures_due", False)),
        )


async def save_attempt(store: JobStore, job_id: str, attempt: Attempt) -> None:
    await store.put_attempt(job_id, attempt.number, attempt.to_json())


async def load_attempts(store: JobStore, job_id: str) -> list[Attempt]:
    """The job's attempts, oldest first; [] for a job deployed before attempts were recorded."""
    found = await store.attempt_records(job_id)
    return [Attempt.from_json(found[number]) for number in sorted(found)]
