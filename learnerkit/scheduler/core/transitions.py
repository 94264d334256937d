"""A job's moves between stages that both the verbs and the loop make: end, requeue, tear down."""

from __future__ import annotations

import asyncio
import logging

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob
from learnerkit.scheduler.jobs.state import JobStatus

LOGGER = logging.getLogger(__name__)


class Transitions:
    """:meth:`end` and :meth:`requeue` are called under the shared lock; teardowns outside it."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._teardowns: set[str] = set()
        """Jobs whose teardown failed: retried by every step."""

    async def end(self, tracked: Tracked, status: JobStatus, reason: str, *, release: bool) -> None:
        shared = self.shared
        if release and tracked.state.job_id in {r.job.job_id for r in shared.admission.records()}:
            shared.admission.release(tracked.state.job_id)
        tracked.state = await shared.store.save(
            tracked.state.evolve(status=status, stage=Stage.DONE, reason=reason, nodes=(), admitted_at=None)
        )
        await shared.store.trim(tracked.state.job_id)
        if status is JobStatus.COMPLETED and tracked.manifest.evaluations:
            # Its evaluations run with the credentials; they are deleted when the round ends.
            await shared.evaluations.begin(
                evaluated_job(tracked, shared), tracked.state.attempt, tracked.manifest.evaluations
            )
        elif not status.resumable:
            # Kept in memory for the job's reads until the scheduler restarts; in etcd only where a resume needs them.
            await shared.store.delete_credentials(tracked.state.job_id, tracked.manifest_text, tracked.source)
        LOGGER.info("job %s: %s %s", tracked.state.job_id, status.value, reason)

    async def requeue(self, tracked: Tracked, reason: str, *, restart: bool) -> None:
        """A new attempt of the job, restoring the latest checkpoint of the last one."""
        shared, job_id = self.shared, tracked.state.job_id
        if job_id in {r.job.job_id for r in shared.admission.records()}:
            shared.admission.release(job_id)
        tracked.new_attempt()
        tracked.state = await shared.store.save(
            tracked.state.evolve(
                status=JobStatus.QUEUED,
                stage=Stage.QUEUED,
                attempt=tracked.state.attempt + 1,
                resume_from_attempt=tracked.state.attempt,
                restarts=tracked.state.restarts + (1 if restart else 0),
                nodes=(),
                admitted_at=None,
                timeouts=0,
                not_before=0.0,
                reason=reason,
            ),
            clear_learners=True,
            clear_halt=True,
        )
        shared.admission.submit(tracked.admission_job())

    async def teardown(self, job_id: str) -> None:
        """Remove everything of the job from the backend; after a failure, steps retry it while the job is done."""
        try:
            await asyncio.to_thread(self.shared.backend.teardown, job_id)
        except BackendError:
            self._teardowns.add(job_id)
            raise
        self._teardowns.discard(job_id)

    async def retry_teardowns(self) -> None:
        for job_id in sorted(self._teardowns):
            tracked = self.shared.jobs[job_id]
            if tracked.state.stage is not Stage.DONE:
                self._teardowns.discard(job_id)  # deployed again: its own transitions tear it down
                continue
            async with tracked.backend_lock:
                await self.teardown(job_id)


def evaluated_job(tracked: Tracked, shared: Shared) -> EvaluatedJob:
    """The job as its evaluations read it: its manifest and its results store's account."""
    manifest = tracked.manifest
    endpoints = endpoints_for(manifest, shared.options.platform)
    return EvaluatedJob(tracked.state.job_id, manifest, endpoints, tracked.manifest_text, tracked.source)
