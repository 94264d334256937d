"""An attempt's figures read back from what its sidecars stored, beside the loop, once the job is requeued.

The attempt that ended gets the steps it lost (``steps_lost``) and, where its learner did not checkpoint at its
own end (it ignored the halt, its node was lost, it failed), the training seconds lost measured from its metric
history rather than the bound (one ``checkpoint_interval``) its end was first recorded with. The next attempt gets
the SHA-256 of the checkpoint it restores (``checkpoint_digest``). Read in a worker thread from the job's results
store (:mod:`learnerkit.scheduler.outputs.lostwork`): a store that does not answer leaves the first figures.

An attempt the scheduler requeued by itself has its lost seconds counted (``work_lost_seconds``, by how it ended)
once they are settled: the measured figure, or the one its end recorded where the read fails or the history has
no times; never both. Its record says ``figures_due`` from the requeue until they are settled, and loses it before
the count: a scheduler killed meanwhile reads them again after its restart (:meth:`AttemptFigures.resume`), and no
attempt is counted twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from controller_sidecar.settings import S3Location
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.attempts import Attempt
from learnerkit.scheduler.jobs.layout import job_location
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.outputs.lostwork import AttemptRecord, LostWork, attempt_record

LOGGER = logging.getLogger(__name__)
PutAttempt = Callable[[Tracked, Attempt], Awaitable[None]]


class AttemptFigures:
    def __init__(self, shared: Shared, put: PutAttempt) -> None:
        self.shared = shared
        self.put = put
        self.clients = S3Clients()
        self._digests: dict[str, tuple[int, str]] = {}
        """Per job, the attempt to deploy next and the checkpoint it restores (one per job, as the jobs are kept)."""
        self._reads: set[asyncio.Task[None]] = set()

    async def read_after(self, tracked: Tracked, ended: int) -> None:
        """Under the shared lock, as the job is requeued after attempt ``ended`` (closed with ``figures_due`` where
        the requeue ended it): read its figures beside the loop; without reads, its lost seconds are counted as its
        end recorded them."""
        attempt = _numbered(tracked, ended)
        if not self.shared.options.attempt_figures:
            if attempt is not None:
                self._count(attempt)
            return
        if attempt is not None and not attempt.figures_due:  # it ended before: a job resumed, a trial promoted
            await self.put(tracked, replace(attempt, figures_due=True))
        self._read(tracked, ended)

    def resume(self) -> None:
        """After a restart: read the figures still due (the scheduler stopped before it had them read)."""
        if not self.shared.options.attempt_figures:
            return
        for tracked in self.shared.jobs.values():
            for attempt in tracked.attempts:
                if attempt.figures_due:
                    self._read(tracked, attempt.number)

    def digest_of(self, job_id: str, attempt: int) -> str | None:
        """The checkpoint ``attempt`` restores, where read already (its record is written at its deploy)."""
        found = self._digests.get(job_id)
        return found[1] if found is not None and found[0] == attempt else None

    async def drain(self) -> None:
        """Wait for the reads in flight (the loop's shutdown, a test's step)."""
        while self._reads:
            await asyncio.gather(*self._reads, return_exceptions=True)

    def _read(self, tracked: Tracked, ended: int) -> None:
        job_id, manifest = tracked.state.job_id, tracked.manifest

        async def read() -> None:
            found = None
            try:
                found = await asyncio.to_thread(self._stored, manifest, job_id, ended)
            except (LearnerkitError, OSError) as e:
                LOGGER.warning("job %s: attempt %d's figures not read: %s", job_id, ended, e)
            async with self.shared.lock:
                try:
                    await self._fill(tracked, ended, found)
                except LearnerkitError as e:
                    LOGGER.warning("job %s: attempt %d's figures not saved (read at a restart): %s", job_id, ended, e)

        task = asyncio.create_task(read(), name=f"figures of {job_id} attempt {ended}")
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    def _stored(self, manifest: JobManifest, job_id: str, attempt: int) -> AttemptRecord:
        """In a worker thread: what the attempt's learners stored in the job's results store."""
        bucket, prefix = job_location(manifest, job_id)
        store = self.clients.of(endpoints_for(manifest, self.shared.options.platform))
        return attempt_record(store, S3Location(bucket, prefix), attempt, manifest.resources.learners)

    async def _fill(self, tracked: Tracked, ended: int, found: AttemptRecord | None) -> None:
        """What was read (None: the read failed) into the ended attempt's record and the next one's."""
        checkpoint = found.checkpoint if found is not None else None
        if checkpoint is not None:
            self._digests[tracked.state.job_id] = (ended + 1, checkpoint.digest)
        for attempt in list(tracked.attempts):
            if attempt.number == ended and attempt.figures_due:
                await self._settle(tracked, attempt, found.lost if found is not None else None)
            elif attempt.number == ended + 1 and checkpoint is not None and attempt.checkpoint_digest is None:
                await self.put(tracked, replace(attempt, checkpoint_digest=checkpoint.digest))

    async def _settle(self, tracked: Tracked, attempt: Attempt, lost: LostWork | None) -> None:
        """The ended attempt's steps lost and, where its end recorded a bound (or nothing), its seconds measured;
        saved no longer due, then its lost seconds counted (a scheduler killed in between counts them nowhere)."""
        settled = replace(attempt, figures_due=False)
        if lost is not None:
            seconds = attempt.work_lost_s
            # 0.0 recorded: its learners checkpointed at its end. Otherwise the figure is a bound, or unknown.
            requeued = attempt.ended_by is not None and attempt.ended_by.requeued
            if requeued and seconds != 0.0 and lost.seconds is not None:
                seconds = round(lost.seconds, 3)
            settled = replace(settled, steps_lost=lost.steps, work_lost_s=seconds)
        await self.put(tracked, settled)
        self._count(settled)

    def _count(self, attempt: Attempt) -> None:
        """The attempt's lost seconds counted, where the scheduler queued the job again itself."""
        ended_by, seconds = attempt.ended_by, attempt.work_lost_s
        if ended_by is not None and ended_by.requeued and seconds is not None:
            self.shared.metrics.work_lost_seconds.labels(ended_by.value).inc(seconds)


def _numbered(tracked: Tracked, number: int) -> Attempt | None:
    return next((a for a in tracked.attempts if a.number == number), None)
