"""An attempt's figures read back from what its sidecars stored, beside the loop, once the job is requeued.

The attempt that ended gets the steps it lost (``steps_lost``) and, where its learner did not checkpoint at its
own end (it ignored the halt, its node was lost, it failed), the training seconds lost measured from its metric
history rather than the bound (one ``checkpoint_interval``) its end was first recorded with. The next attempt gets
the SHA-256 of the checkpoint it restores (``checkpoint_digest``). Read in a worker thread from the job's results
store (:mod:`learnerkit.scheduler.outputs.lostwork`): a store that does not answer leaves the first figures.
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
from learnerkit.scheduler.outputs.lostwork import AttemptRecord, attempt_record

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

    def read_after(self, tracked: Tracked, ended: int, *, lost_measured: bool) -> None:
        """Under the shared lock, as the job is requeued after attempt ``ended``: read its figures beside the loop.
        ``lost_measured``: its end lost work its learner did not checkpoint (the recorded figure is a bound)."""
        self._count(tracked, ended)
        if not self.shared.options.attempt_figures:
            return
        manifest = tracked.manifest
        bucket, prefix = job_location(manifest, tracked.state.job_id)
        store = self.clients.of(endpoints_for(manifest, self.shared.options.platform))

        async def read() -> None:
            try:
                found = await asyncio.to_thread(attempt_record, store, S3Location(bucket, prefix), ended)
            except (LearnerkitError, OSError) as e:
                LOGGER.warning("job %s: attempt %d's figures not read: %s", tracked.state.job_id, ended, e)
                return
            async with self.shared.lock:
                await self._fill(tracked, ended, found, lost_measured=lost_measured)

        task = asyncio.create_task(read(), name=f"figures of {tracked.state.job_id} attempt {ended}")
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    def _count(self, tracked: Tracked, ended: int) -> None:
        """Attempt ``ended``'s lost seconds counted as recorded, where the scheduler queued the job again itself."""
        attempt = next((a for a in tracked.attempts if a.number == ended), None)
        if attempt is None or attempt.ended_by is None or not attempt.ended_by.requeued or attempt.work_lost_s is None:
            return
        self.shared.metrics.work_lost_seconds.labels(attempt.ended_by.value).inc(attempt.work_lost_s)

    def digest_of(self, job_id: str, attempt: int) -> str | None:
        """The checkpoint ``attempt`` restores, where read already (its record is written at its deploy)."""
        found = self._digests.get(job_id)
        return found[1] if found is not None and found[0] == attempt else None

    async def drain(self) -> None:
        """Wait for the reads in flight (the loop's shutdown, a test's step)."""
        while self._reads:
            await asyncio.gather(*self._reads, return_exceptions=True)

    async def _fill(self, tracked: Tracked, ended: int, found: AttemptRecord, *, lost_measured: bool) -> None:
        job_id = tracked.state.job_id
        if found.checkpoint is not None:
            self._digests[job_id] = (ended + 1, found.checkpoint.digest)
        for attempt in list(tracked.attempts):
            if attempt.number == ended and attempt.ended_by is not None and found.lost is not None:
                seconds = found.lost.seconds if lost_measured and found.lost.seconds is not None else None
                work_lost_s = round(seconds, 3) if seconds is not None else attempt.work_lost_s
                await self.put(tracked, replace(attempt, steps_lost=found.lost.steps, work_lost_s=work_lost_s))
            elif attempt.number == ended + 1 and found.checkpoint is not None and attempt.checkpoint_digest is None:
                await self.put(tracked, replace(attempt, checkpoint_digest=found.checkpoint.digest))
