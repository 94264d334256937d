"""A job's moves between stages that both the verbs and the loop make: end, requeue, tear down."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.attemptfigures import AttemptFigures
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.provenancing import Provenancing
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, save_attempt
from learnerkit.scheduler.jobs.state import JobStatus, now_iso
from learnerkit.scheduler.sweeps.trialids import trial_of

LOGGER = logging.getLogger(__name__)
TEARDOWNS_AT_ONCE = 8
"""Owed teardowns one step runs side by side: an engine removes pairs in parallel, within reason."""


class Transitions:
    """:meth:`end` and :meth:`requeue` are called under the shared lock; teardowns outside it."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.provenancing = Provenancing(shared)
        self.figures = AttemptFigures(shared, self._put_attempt)
        self._teardowns: set[str] = set()
        """Jobs whose teardown failed: retried by every step."""
        self._owed: set[str] = set()
        """Jobs requeued before their teardown, which runs beside the next deploys (:meth:`owe_teardown`)."""

    async def end(self, tracked: Tracked, status: JobStatus, reason: str, *, release: bool) -> None:
        shared = self.shared
        if release and tracked.state.job_id in {r.job.job_id for r in shared.admission.records()}:
            shared.admission.release(tracked.state.job_id)
        if tracked.state.held:
            self._teardowns.add(tracked.state.job_id)  # its held pairs, never released: the steps remove them
        # The attempt ends first: whoever reads the job's end sees how its attempt ended.
        await self.close_attempt(tracked, AttemptEnd(status.value), reason)
        await self.provenancing.mark_due(tracked, status)
        tracked.state = await shared.store.save(
            tracked.state.evolve(
                status=status,
                stage=Stage.DONE,
                reason=reason,
                nodes=(),
                admitted_at=None,
                preempted_by=None,
                preempted_at=None,
                drained_from=None,
                held=False,
            )
        )
        await self.provenancing.job_ended(tracked)
        await shared.store.trim(tracked.state.job_id, provenance_records=not self.provenancing.keeps_records(tracked))
        if status is JobStatus.COMPLETED and tracked.manifest.evaluations and trial_of(tracked.state.job_id) is None:
            # Its evaluations run with the credentials; they are deleted when the round ends. A sweep's trial
            # ends COMPLETED at every pause: its sweep evaluates the best trial once, when it is done.
            await shared.evaluations.begin(
                evaluated_job(tracked, shared), tracked.state.attempt, tracked.manifest.evaluations
            )
        elif not status.resumable:
            # Kept in memory for the job's reads until the scheduler restarts; in etcd only where a resume needs them.
            await shared.store.delete_credentials(tracked.state.job_id, tracked.manifest_text, tracked.source)
        LOGGER.info("job %s: %s %s", tracked.state.job_id, status.value, reason)

    async def requeue(
        self,
        tracked: Tracked,
        reason: str,
        *,
        restart: bool,
        ended_by: AttemptEnd | None = None,
        work_lost_s: float | None = None,
        status: JobStatus = JobStatus.QUEUED,
    ) -> None:
        """A new attempt of the job, restoring the latest checkpoint of the last one; ``ended_by`` closes the
        last attempt where it is still open."""
        shared, job_id = self.shared, tracked.state.job_id
        if job_id in {r.job.job_id for r in shared.admission.records()}:
            shared.admission.release(job_id)
        if ended_by is not None:
            due = shared.options.attempt_figures
            await self.close_attempt(tracked, ended_by, reason, work_lost_s=work_lost_s, figures_due=due)
        await self.figures.read_after(tracked, tracked.state.attempt)
        await shared.store.fence(job_id, tracked.state.attempt + 1)  # before learners/ is cleared: none comes back
        tracked.new_attempt()
        tracked.state = await shared.store.save(
            tracked.state.evolve(
                status=status,
                stage=Stage.QUEUED,
                attempt=tracked.state.attempt + 1,
                resume_from_attempt=tracked.state.attempt,
                restarts=tracked.state.restarts + (1 if restart else 0),
                nodes=(),
                admitted_at=None,
                timeouts=0,
                not_before=0.0,
                reason=reason,
                preempted_by=None,
                preempted_at=None,
                drained_from=None,
                halted_by_user=False,
            ),
            clear_learners=True,
            clear_halt=True,
        )
        shared.admission.requeue(tracked.admission_job())

    async def open_attempt(self, tracked: Tracked, nodes: tuple[str, ...]) -> None:
        """Record the attempt being deployed (a redeploy of the same attempt after a ready timeout replaces it)."""
        state = tracked.state
        digest = self.figures.digest_of(state.job_id, state.attempt)
        attempt = Attempt(
            state.attempt, nodes, now_iso(), resumed_from=state.resume_from_attempt, checkpoint_digest=digest
        )
        await self._put_attempt(tracked, attempt)

    def current_attempt(self, tracked: Tracked) -> Attempt | None:
        """The job's current attempt while it is open."""
        last = tracked.attempts[-1] if tracked.attempts else None
        return last if last is not None and last.open and last.number == tracked.state.attempt else None

    async def close_attempt(
        self,
        tracked: Tracked,
        ended_by: AttemptEnd,
        reason: str,
        *,
        work_lost_s: float | None = None,
        steps_lost: int | None = None,
        figures_due: bool = False,
    ) -> None:
        current = self.current_attempt(tracked)
        if current is not None:
            ended = current.ended(ended_by, reason, now_iso(), work_lost_s=work_lost_s, steps_lost=steps_lost)
            preemptor = tracked.state.preempted_by if ended_by is AttemptEnd.PREEMPTED else None
            await self._put_attempt(tracked, replace(ended, figures_due=figures_due, preempted_by=preemptor))

    async def _put_attempt(self, tracked: Tracked, attempt: Attempt) -> None:
        await save_attempt(self.shared.store, tracked.state.job_id, attempt)
        kept = [a for a in tracked.attempts if a.number != attempt.number]
        tracked.attempts = sorted([*kept, attempt], key=lambda a: a.number)

    async def teardown(self, job_id: str) -> None:
        """Remove everything of the job from the backend; after a failure, steps retry it while the job is done."""
        try:
            await asyncio.to_thread(self.shared.backend.teardown, job_id)
        except BackendError:
            self._teardowns.add(job_id)
            raise
        self._teardowns.discard(job_id)

    async def cancel_all(self, jobs: list[Tracked]) -> None:
        """CANCELLED, each in its own hold of the lock (the API answers between them); their pairs are removed by
        the next steps (:meth:`retry_teardowns`), not here: a sweep's hundreds take the engine minutes."""
        for tracked in jobs:
            async with self.shared.lock:
                stage = tracked.state.stage
                if stage is Stage.DONE:
                    continue
                await self.end(tracked, JobStatus.CANCELLED, "cancelled", release=True)
                if stage is not Stage.QUEUED:  # a queued job has nothing on the engine
                    self._teardowns.add(tracked.state.job_id)

    def owe_teardown(self, job_id: str) -> None:
        """The job's last attempt is still to be removed, though the job has moved on (requeued): the caller's
        task settles that (:meth:`settle`), and so does whatever deploys it again, first."""
        self._owed.add(job_id)

    async def settle(self, job_id: str) -> None:
        """Under the job's backend lock: the teardown it is owed, if any, before anything of it is deployed again
        (one that fails is retried by the steps)."""
        if job_id in self._owed or job_id in self._teardowns:
            self._owed.discard(job_id)
            await self.teardown(job_id)

    async def retry_teardowns(self) -> None:
        """The teardowns owed (a cancelled sweep's jobs, failed ones), up to :data:`TEARDOWNS_AT_ONCE` side by side."""
        room = asyncio.Semaphore(TEARDOWNS_AT_ONCE)

        async def one(job_id: str) -> None:
            tracked = self.shared.jobs[job_id]
            if tracked.backend_lock.locked():
                return  # its deploy settles it, or its teardown is running
            async with room, tracked.backend_lock:
                if tracked.active:
                    self._teardowns.discard(job_id)  # ending: its own transitions tear it down
                    return
                try:
                    await self.teardown(job_id)
                except BackendError as e:
                    LOGGER.warning("job %s: teardown failed; the next step retries it: %s", job_id, e)

        await asyncio.gather(*(one(job_id) for job_id in sorted(self._teardowns)))


def evaluated_job(tracked: Tracked, shared: Shared) -> EvaluatedJob:
    """The job as its evaluations read it: its manifest and its results store's account."""
    manifest = tracked.manifest
    endpoints = endpoints_for(manifest, shared.options.platform)
    return EvaluatedJob(tracked.state.job_id, manifest, endpoints, tracked.manifest_text, tracked.source)
