"""Histories' columns built as a job's attempt ends, before anyone looks: the first view of a million-point history
nobody has read would otherwise parse it (tens of seconds), where loading its columns takes milliseconds.

Fed by the scheduler's own job events (`learnerkit.scheduler.events`): a job that turns COMPLETED, FAILED, HALTED,
CANCELLED or PREEMPTED has each learner's history read through the series cache, which keeps its columns in memory
and on disk (`cache`, `stored`). One job at a time, in a task beside the loop (the parsing in a worker thread, as a
view's); the jobs waiting are bounded and a failure is only logged: the first view then reads the history itself.
A running job's history is left to its views (read on from where the last one left it): reading it again every few
seconds would fetch its whole stored file each time."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.events.changes import Event
from learnerkit.scheduler.series.cache import SeriesCache

LOGGER = logging.getLogger(__name__)
ENDED = frozenset({"COMPLETED", "FAILED", "HALTED", "CANCELLED", "PREEMPTED"})
"""A job status that ends an attempt: its learners' histories are stored whole."""
MAX_WAITING = 1_000
"""Jobs waiting for their columns; past it the oldest are left to their first view."""


class SeriesPrebuild:
    def __init__(self, cache: SeriesCache) -> None:
        self.cache = cache
        self._waiting: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._task: asyncio.Task[None] | None = None

    def job_event(self, event: Event) -> None:
        """An `EventHub` listener (on the loop): a job whose attempt ended is queued for its columns."""
        if event.change.kind == "job" and event.change.data.get("status") in ENDED:
            self.ask(event.tenant, event.change.job_id)

    def ask(self, tenant: str, job_id: str) -> None:
        key = (tenant, job_id)
        self._waiting.pop(key, None)
        self._waiting[key] = None
        while len(self._waiting) > MAX_WAITING:
            (_, dropped), _ = self._waiting.popitem(last=False)
            LOGGER.info("left job %s's metric series to its first view: %d jobs wait for theirs", dropped, MAX_WAITING)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._build(), name="series prebuild")

    async def drain(self) -> None:
        """Wait until no job waits (a test's step, the bench's)."""
        while self._task is not None and not self._task.done():
            await self._task

    def close(self) -> None:
        """Stop building (the server is stopping); what was not built is read by its first view."""
        self._waiting.clear()
        if self._task is not None:
            self._task.cancel()

    async def _build(self) -> None:
        while self._waiting:
            (tenant, job_id), _ = self._waiting.popitem(last=False)
            try:
                job = await self.cache.facade.get(tenant, job_id)
                for learner in job.learners:
                    await self.cache.history(tenant, job_id, learner.learner_id)
            except (LearnerkitError, OSError):  # the facade's and the store's errors, the disk's
                LOGGER.warning("could not build job %s's metric series; its first view reads it", job_id, exc_info=True)
