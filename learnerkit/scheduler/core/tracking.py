"""What the scheduler keeps in memory per job: its record (mirrored in etcd), its parsed manifest, and what
the monitor last saw of its learners. All of it is rebuilt from etcd after a restart."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from controller_sidecar.status import StatusRecord
from learnerkit.scheduler.admission.capacity import LearnerRequest
from learnerkit.scheduler.admission.queue import Job
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.jobs.attempts import Attempt
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import JobManifest


@dataclass
class Tracked:
    state: JobState
    manifest: JobManifest
    manifest_text: str
    source: str
    options: SubmitOptions = field(default_factory=SubmitOptions)
    """The submit's ``--image`` and model code."""
    deployed_image: str = ""
    """The learner image the last attempt was deployed with, as the gate resolved it; empty after a restart."""
    ran_digest: str = ""
    """The learner image's digest as the backend reports the last attempt ran it (Kubernetes' ``imageID``), where
    the scheduler's engine cannot say; empty until a learner has started."""
    records: dict[int, StatusRecord] = field(default_factory=dict)
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    alive: set[int] = field(default_factory=set)
    seen_alive: set[int] = field(default_factory=set)
    """Learners whose lease was seen at least once this attempt: only those can lose it."""
    missing_since: dict[int, float] = field(default_factory=dict)
    sidecar_restarts: dict[int, int] = field(default_factory=dict)
    """Learner id -> how often its sidecar, ended before the learner's final status, was started again."""
    ended_since: dict[int, float] = field(default_factory=dict)
    """Learners whose container was seen ended while their sidecar waited for the exit record: since when
    (the scheduler's monotonic clock)."""
    attempts: list[Attempt] = field(default_factory=list)
    """The job's attempts history, as in etcd (oldest first)."""
    backend_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)
    """Held while the job is deployed or torn down: the two never meet halfway."""

    @property
    def active(self) -> bool:
        return self.state.stage in (Stage.DEPLOYED, Stage.RUNNING)

    def admission_job(self) -> Job:
        r = self.manifest.resources
        request = LearnerRequest(r.cpus, r.memory_bytes, r.gpus, r.gpu_type if r.gpus else None)
        return Job(
            job_id=self.state.job_id,
            tenant=self.state.tenant,
            priority=self.manifest.extensions.priority,
            submitted_at=self.state.submitted_at,
            learners=(request,) * r.learners,
        )

    def new_attempt(self) -> None:
        self.ran_digest = ""
        self.records.clear()
        self.metrics.clear()
        self.alive.clear()
        self.seen_alive.clear()
        self.missing_since.clear()
        self.ended_since.clear()
