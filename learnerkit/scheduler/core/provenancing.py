"""A job's provenance, written beside the loop when the job ends COMPLETED, HALTED or FAILED
(`learnerkit.scheduler.provenance.writer`): the documents are gathered, signed and stored in a worker thread, so the
loop and the API never wait on the object store."""

from __future__ import annotations

import asyncio
import logging

from controller_sidecar.errors import SidecarError
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.provenance.writer import FinishedJob

LOGGER = logging.getLogger(__name__)
PROVENANCE_OF = frozenset({JobStatus.COMPLETED, JobStatus.HALTED, JobStatus.FAILED})


class Provenancing:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.instance = shared.options.instance or ""
        """Set by the loop's rebuild, as it claims its instance id."""
        self.clients = S3Clients()
        self._writes: set[asyncio.Task[None]] = set()

    async def job_ended(self, tracked: Tracked) -> None:
        """Called under the shared lock as the job ends, its last attempt closed."""
        writer = self.shared.options.provenance
        if writer is None or tracked.state.status not in PROVENANCE_OF:
            return
        state, manifest, image, resolve = tracked.state, tracked.manifest, tracked.deployed_image, None
        attempts = tuple(tracked.attempts)
        if not image:  # ended before a deploy of this scheduler process: the gate resolves it again
            resolve = self.shared.options.resolve_image
        store = self.clients.of(endpoints_for(manifest, self.shared.options.platform))

        def gather_and_write() -> None:
            job = FinishedJob(state, manifest, resolve(manifest) if resolve else image, attempts, self.instance)
            writer.write(store, job)

        async def write() -> None:
            try:
                await asyncio.to_thread(gather_and_write)
            except (LearnerkitError, SidecarError, OSError):
                LOGGER.exception("job %s: its provenance was not written", state.job_id)

        task = asyncio.create_task(write(), name=f"provenance of {state.job_id}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def drain(self) -> None:
        """Wait for the writes in flight (the loop's shutdown)."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
