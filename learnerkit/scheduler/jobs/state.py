"""The scheduler's record of one job in etcd (``/learnerkit/jobs/<id>/status``), and its JSON wire form.

Everything the scheduler knows of a job is here or in the job's ``spec``; after a restart it rebuilds its
queue and reservations from these records alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from learnerkit.scheduler.admission.stage import Stage

ATTEMPT_SEQUENCE_BLOCK = 1_000_000
"""Each attempt's sidecars number their status records from ``attempt * ATTEMPT_SEQUENCE_BLOCK``."""


class JobStatus(StrEnum):
    QUEUED = "QUEUED"
    PENDING = "PENDING"
    DOWNLOADING = "DOWNLOADING"
    PROCESSING = "PROCESSING"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"
    """Halted by the scheduler for a job of higher priority: queued again, it resumes by itself (not terminal)."""

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.HALTED, JobStatus.CANCELLED)

    @property
    def resumable(self) -> bool:
        """`job resume` takes the job up again: its credentials stay in etcd while it is one of these."""
        return self in (JobStatus.HALTED, JobStatus.FAILED)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class JobState:
    job_id: str
    tenant: str
    name: str
    submitted_at: float
    """Epoch seconds: the queue's tie-breaker after priority."""
    status: JobStatus = JobStatus.QUEUED
    stage: Stage = Stage.QUEUED
    reason: str = ""
    updated_at: str = field(default_factory=now_iso)
    attempt: int = 1
    """Each deploy of the job (a resume, an automatic restart) is a new attempt with its own outputs."""
    restarts: int = 0
    """Automatic restarts after failures so far (bounded by the manifest's max_restarts)."""
    resume_from_attempt: int | None = None
    """The attempt whose checkpoints this attempt restores."""
    nodes: tuple[str, ...] = ()
    admitted_at: float | None = None
    timeouts: int = 0
    not_before: float = 0.0
    history_sequence: int = 0
    """How many job-level history entries were written."""
    preempted_by: str | None = None
    """While set, the job's learners are halting for this queued job: their end requeues the job as PREEMPTED.
    Written before the halt, so a restarted scheduler finishes the preemption."""
    preempted_at: float | None = None
    """Epoch seconds: when the preemption's halt was asked."""
    halted_by_user: bool = False
    """The job's user asked it to halt this attempt: it ends HALTED even when a preemption is under way."""
    drained_from: str | None = None
    """While set, the job's learners are halting because this node is drained: their end requeues the job, to
    resume elsewhere. Written before the halt, so a restarted scheduler finishes the move."""
    held: bool = False
    """A queued preemptor whose pairs are deployed held (downloading, the learner's command not started) while its
    victims checkpoint; its admission releases them. Written before the held deploy."""

    @property
    def submitted_at_iso(self) -> str:
        return datetime.fromtimestamp(self.submitted_at, UTC).isoformat().replace("+00:00", "Z")

    @property
    def first_sequence(self) -> int:
        """The first status sequence of this attempt's sidecars."""
        return self.attempt * ATTEMPT_SEQUENCE_BLOCK

    def evolve(self, **changes: Any) -> JobState:
        return replace(self, updated_at=now_iso(), **changes)

    def to_raw(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["status"], raw["stage"], raw["nodes"] = self.status.value, self.stage.value, list(self.nodes)
        return raw

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> JobState:
        values = dict(raw)
        values["status"] = JobStatus(values["status"])
        values["stage"] = Stage(values["stage"])
        values["nodes"] = tuple(values.get("nodes", ()))
        return cls(**values)
