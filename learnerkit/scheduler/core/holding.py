"""A preemptor's head start: its pairs deployed *held* while its victims checkpoint.

Once the scheduler has decided a preemption, the preemptor's start (containers, the sidecar's start, its downloads
and requirements) would otherwise begin only after the victims' checkpoint is stored. On a backend that allows it
(:attr:`Backend.deploys_held`: Docker) the preemptor's pairs are deployed at once with ``held.attempt`` in their
sidecars' config: each sidecar starts, downloads and installs as usual, then waits for the job's release key to
read that attempt before it writes the learner's start file. The learner container idles in ``learner-run``:
nothing of the command runs, no GPU is opened.

The preemptor stays QUEUED meanwhile: no reservation, no quota, only what the held pair uses of the node (a
sidecar's download, an idle learner). Its admission, once the victims' room is free, releases it
(``JobStore.release``): the deploy that follows finds the pairs there and adds nothing. A held job that ends queued
(cancelled, halted) has its pairs torn down; a restarted scheduler removes them as orphans and deploys the job
afresh at its admission, so nothing runs twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions
from learnerkit.scheduler.errors import BackendError

LOGGER = logging.getLogger(__name__)

Planner = Callable[[Tracked, str], JobDeployment]
"""The job's held deployment with this learner image (raises `LearnerkitError` when it cannot be planned)."""


class Holding:
    def __init__(self, shared: Shared, transitions: Transitions, planner: Planner) -> None:
        self.shared = shared
        self.transitions = transitions
        self.planner = planner

    def wanted(self, tracked: Tracked) -> bool:
        """Whether the queued preemptor gets a held deploy now (under the shared lock)."""
        state = tracked.state
        return self.shared.backend.deploys_held and state.stage is Stage.QUEUED and not state.held

    async def hold(self, tracked: Tracked) -> None:
        """Beside the loop: deploy the preemptor's pairs held. Recorded ``held`` first, so a restart knows."""
        shared, job_id = self.shared, tracked.state.job_id
        try:
            image = await asyncio.to_thread(shared.options.resolve_image, tracked.manifest)
            plan = self.planner(tracked, image)
        except LearnerkitError as e:
            LOGGER.info("job %s: no held start (%s); it deploys at its admission", job_id, e)
            return
        async with tracked.backend_lock:
            async with shared.lock:
                if not self.wanted(tracked):
                    return  # admitted, ended or held since the decision
                tracked.state = await shared.store.save(tracked.state.evolve(held=True))
            try:
                await self.transitions.settle(job_id)  # an earlier attempt's leftovers go first
                await asyncio.to_thread(shared.backend.deploy, plan)
            except BackendError as e:
                LOGGER.warning("job %s: the held deploy failed (it deploys at its admission): %s", job_id, e)
                async with shared.lock:
                    if tracked.state.stage is Stage.QUEUED and tracked.state.held:
                        tracked.state = await shared.store.save(tracked.state.evolve(held=False), clear_learners=True)
                return
            async with shared.lock:
                ended = tracked.state.stage is Stage.DONE
            if ended:  # cancelled while the held deploy ran: remove what it made
                await self.transitions.teardown(job_id)
            else:
                LOGGER.info("job %s: deployed held while its victims checkpoint", job_id)


async def forget_held(shared: Shared) -> None:
    """After a restart, once the orphans are removed: a queued job recorded held has no pairs any more; it deploys
    afresh at its admission (what its held sidecars wrote goes with them)."""
    for tracked in shared.jobs.values():
        if tracked.state.held and tracked.state.stage is Stage.QUEUED:
            tracked.state = await shared.store.save(tracked.state.evolve(held=False), clear_learners=True)
