"""Drained nodes in the control loop: the jobs a drained node holds are halted (the usual halt path: each learner
checkpoints and stops) and requeued, their attempt ending DRAINED, to resume by themselves from that checkpoint
on another node; the drained node takes no new learners (the loop lists it no more).

The job's record names the node (``drained_from``) before its halt is asked, so a restarted scheduler finishes the
move (:func:`resume_drains`). A job halting already (its user's halt, a preemption) is left to that halt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from controller_sidecar.status import ErrorCode, StatusRecord
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions
from learnerkit.scheduler.jobs.attempts import AttemptEnd

LOGGER = logging.getLogger(__name__)


class Draining:
    def __init__(self, shared: Shared, transitions: Transitions) -> None:
        self.shared = shared
        self.transitions = transitions

    @staticmethod
    def drained(tracked: Tracked) -> bool:
        """Whether the job's halt is a drain's (a halt its user asked for meanwhile wins)."""
        return tracked.state.drained_from is not None and not tracked.state.halted_by_user

    async def move_off(self, drained: frozenset[str]) -> None:
        """Under the shared lock: each deployed or running job with a learner on a drained node has its halt asked."""
        store = self.shared.store
        for tracked in self.shared.jobs.values():
            state = tracked.state
            if state.stage not in (Stage.DEPLOYED, Stage.RUNNING) or _halting(tracked):
                continue
            node = next((name for name in state.nodes if name in drained), None)
            if node is None:
                continue
            tracked.state = await store.save(
                state.evolve(drained_from=node, reason=f"node {node} is drained: halting to move elsewhere")
            )
            await store.request_halt(state.job_id)
            LOGGER.info("job %s: node %s is drained; halting it to move elsewhere", state.job_id, node)

    async def finish(self, tracked: Tracked, records: Mapping[int, StatusRecord]) -> None:
        """Under the shared lock, once the job's learners have halted and it is torn down: back to the queue."""
        node, state, extensions = tracked.state.drained_from, tracked.state, tracked.manifest.extensions
        current = [r for r in records.values() if r.sequence >= state.first_sequence]
        lost: float | None = 0.0
        why = f"node {node} drained"
        if any(r.error_code is ErrorCode.HALT_TIMEOUT for r in current):
            # Stopped at the grace's end: at most a checkpoint interval lost; not known without periodic checkpoints.
            interval = extensions.checkpoint_interval
            lost = float(interval) if interval is not None else None
            why += f": killed after the {extensions.halt_grace}s halt grace; resumes from its last checkpoint"
        await self.transitions.requeue(tracked, why, restart=False, ended_by=AttemptEnd.DRAINED, work_lost_s=lost)


def _halting(tracked: Tracked) -> bool:
    state = tracked.state
    return state.drained_from is not None or state.preempted_by is not None or state.halted_by_user


async def resume_drains(shared: Shared) -> None:
    """After a restart: ask again the halts of the moves under way (the scheduler may have stopped between
    recording the node and asking the halt)."""
    for tracked in shared.jobs.values():
        if tracked.state.drained_from is not None and tracked.active:
            await shared.store.request_halt(tracked.state.job_id)
