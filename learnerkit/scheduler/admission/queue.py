"""Queued jobs and their order: higher priority first, then earlier submission, then job id."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from dataclasses import dataclass, field

from learnerkit.scheduler.admission.capacity import LearnerRequest, PoolKey
from learnerkit.scheduler.errors import InvalidRequestError

QueueKey = tuple[int, float, str]


@dataclass(frozen=True)
class Job:
    """A job as the scheduler sees it: who, how urgent, and what each learner needs."""

    job_id: str
    tenant: str
    priority: int
    """Higher runs first."""
    submitted_at: float
    learners: tuple[LearnerRequest, ...]
    gpus: int = field(init=False, repr=False, compare=False)
    """All GPUs of all learners: what the job counts against its tenant's quota."""
    millicpus: int = field(init=False, repr=False, compare=False)
    """All CPUs of all learners, in millicores."""
    memory_bytes: int = field(init=False, repr=False, compare=False)
    pools: frozenset[PoolKey] = field(init=False, repr=False, compare=False)
    """The pools the learners need (None for CPU-only learners)."""

    def __post_init__(self) -> None:
        if not self.learners:
            raise InvalidRequestError(f"job {self.job_id!r} has no learners")
        object.__setattr__(self, "gpus", sum(learner.gpus for learner in self.learners))
        object.__setattr__(self, "millicpus", sum(learner.millicpus for learner in self.learners))
        object.__setattr__(self, "memory_bytes", sum(learner.memory_bytes for learner in self.learners))
        object.__setattr__(self, "pools", frozenset(learner.pool for learner in self.learners))

    @property
    def queue_key(self) -> QueueKey:
        return (-self.priority, self.submitted_at, self.job_id)

    def gpus_in(self, pool: PoolKey) -> int:
        return sum(learner.gpus for learner in self.learners if learner.pool == pool)


class JobQueue:
    """Waiting jobs, kept in queue order as they are added (no sort per scheduling pass)."""

    def __init__(self) -> None:
        self._keys: list[QueueKey] = []
        self._jobs: dict[str, Job] = {}

    def add(self, job: Job) -> None:
        if job.job_id in self._jobs:
            raise InvalidRequestError(f"job {job.job_id!r} is queued already")
        self._jobs[job.job_id] = job
        insort(self._keys, job.queue_key)

    def remove(self, job_id: str) -> Job:
        job = self._jobs.pop(job_id)
        del self._keys[bisect_left(self._keys, job.queue_key)]
        return job

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[Job]:
        """The jobs in queue order; a snapshot, so the caller may remove jobs while iterating."""
        jobs = self._jobs
        return iter([jobs[key[2]] for key in self._keys])
