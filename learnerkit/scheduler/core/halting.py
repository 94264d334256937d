"""Wakes the control loop as soon as a halting job's learners report, rather than at its next step.

A job being halted (preempted, drained off a node, or halted by its user) ends when its sidecars write their final
status. The loop would otherwise see that only at its next step (``interval_s``, 0.5 s): dead time during which
the job waiting for a preemption's room waits too. Each halting job gets a watch on its learners' status keys;
every status written sets the loop's wake event. Polling stays the truth: a watch that fails only wakes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from controller_sidecar import keys
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.store import JobStore

LOGGER = logging.getLogger(__name__)


def halting(tracked: Tracked) -> bool:
    """Whether the job runs and has been asked to halt, for whatever reason."""
    state = tracked.state
    asked = state.preempted_by is not None or state.drained_from is not None or state.halted_by_user
    return asked and tracked.active


class HaltWatch:
    def __init__(self, store: JobStore, wake: asyncio.Event) -> None:
        self.store = store
        self.wake = wake
        self._watches: dict[str, asyncio.Task[None]] = {}

    @property
    def watched(self) -> frozenset[str]:
        return frozenset(self._watches)

    def follow(self, job_ids: Iterable[str]) -> None:
        """Watch each of ``job_ids`` (the halting jobs) not watched yet; stop watching those no longer named."""
        wanted = set(job_ids)
        for job_id in sorted(self._watches.keys() - wanted):
            self._watches.pop(job_id).cancel()
        for job_id in sorted(wanted - self._watches.keys()):
            self._watches[job_id] = asyncio.create_task(self._wake_on_status(job_id))

    async def stop(self) -> None:
        watches = list(self._watches.values())
        self._watches.clear()
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)

    async def _wake_on_status(self, job_id: str) -> None:
        store = self.store
        prefix = f"{keys.job_prefix(job_id, store.root)}learners/"
        try:
            async for event in store.etcd.watch_prefix(prefix):
                if event.value is not None and event.key.endswith("/status"):
                    self.wake.set()
        except LearnerkitError as e:
            LOGGER.info("not watching job %s's learners (the loop's steps still see them end): %s", job_id, e)
