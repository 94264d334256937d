"""Lost nodes in the control loop: a node deleted, or not Ready past ``node_lost_grace_s``, has its jobs torn
down and requeued, their attempt ending NODE_LOST with the reason, to resume by themselves from their last
checkpoint on another node. A cordoned node loses nothing (it only takes no new learner).

Nothing can be halted on a lost node: what its learners did since their last checkpoint is lost (at most one
``checkpoint_interval``, where the job has one). The teardown comes before the requeue, so no job runs twice.

A lost node may only be cut off (a partition), its learner still running. So the job is **fenced** first: the
job's fence names the next attempt, which refuses the old attempt's etcd writes and halts its learners where their
sidecars still reach etcd; and the job moves only once none of its learners holds its lease any more (revoked by
a fenced sidecar, or expired: a sidecar stops writing before its lease can expire, by its own clock), or once every
lost node it ran on is deleted from the cluster (docs/security.md, "Fencing").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from controller_sidecar.errors import TransientError
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.protocol import DeletesLostPods, NodeHealth
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions
from learnerkit.scheduler.errors import StoreUnavailableError
from learnerkit.scheduler.jobs.attempts import AttemptEnd
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.nodes.listing import NodeState

LOGGER = logging.getLogger(__name__)


def lost_nodes(health: Mapping[str, NodeHealth], nodes: set[str], now: float, grace_s: float) -> dict[str, str]:
    """Of ``nodes``, those lost, with why."""
    lost: dict[str, str] = {}
    for name in sorted(nodes):
        found = health.get(name)
        if found is None:
            lost[name] = f"node {name} was deleted"
        elif found.not_ready_since is not None and now - found.not_ready_since >= grace_s:
            lost[name] = f"node {name} went NotReady (over the {grace_s:g}s grace)"
    return lost


def fence_holds(on: Iterable[str], health: Mapping[str, NodeHealth], leases: set[int]) -> bool:
    """Whether a job fenced off the lost nodes ``on`` must still wait: some learner of the old attempt holds its
    lease (``leases``), and some of those nodes still exists (one deleted from the cluster runs nothing)."""
    return bool(leases) and any(name in health for name in on)


async def old_attempt_writes(store: JobStore, job_id: str, on: Iterable[str], health: Mapping[str, NodeHealth]) -> bool:
    """Whether the job's attempt on the lost nodes ``on`` may still write, as etcd says now (:func:`fence_holds`)."""
    _, leases, _ = await store.learner_records(job_id)
    return fence_holds(on, health, leases)


def node_states(health: Mapping[str, NodeHealth], names: Iterable[str], now: float, grace_s: float) -> dict[str, str]:
    """Each of ``names``' state as ``scheduler nodes`` shows it (the drain marks are read there, live)."""
    wanted = set(names) | health.keys()
    lost = lost_nodes(health, wanted, now, grace_s)
    states: dict[str, str] = {}
    for name in sorted(wanted):
        found = health.get(name)
        if name in lost or found is None:
            states[name] = NodeState.LOST.value
        elif found.not_ready_since is not None:
            states[name] = NodeState.NOT_READY.value
        else:
            states[name] = (NodeState.CORDONED if found.cordoned else NodeState.READY).value
    return states


class NodeLoss:
    def __init__(self, shared: Shared, transitions: Transitions) -> None:
        self.shared = shared
        self.transitions = transitions
        self._fenced: dict[str, int] = {}
        """Jobs fenced off a lost node, with the attempt their fence names (logged once, written once)."""

    async def resume_elsewhere(self, health: Mapping[str, NodeHealth], now: float) -> None:
        """Each deployed or running job with a learner on a lost node: torn down, then requeued."""
        shared = self.shared
        held = {t.state.job_id: t for t in shared.jobs.values() if t.state.stage in (Stage.DEPLOYED, Stage.RUNNING)}
        used = {name for t in held.values() for name in t.state.nodes}
        lost = lost_nodes(health, used, now, shared.options.node_lost_grace_s)
        for gone in self._fenced.keys() - held.keys():  # ended while fenced (cancelled)
            del self._fenced[gone]
        for tracked in held.values():
            on = [name for name in tracked.state.nodes if name in lost]
            if on and not tracked.backend_lock.locked() and await self._fenced_off(tracked, on, health):
                await self._move(tracked, lost[on[0]], frozenset(on))

    async def _fenced_off(self, tracked: Tracked, on: list[str], health: Mapping[str, NodeHealth]) -> bool:
        """Fence the job to its next attempt (once); whether its old attempt can no longer write."""
        shared, job_id, attempt = self.shared, tracked.state.job_id, tracked.state.attempt + 1
        try:
            if self._fenced.get(job_id) != attempt:
                await shared.store.fence(job_id, attempt)
                self._fenced[job_id] = attempt
                LOGGER.warning("job %s: node %s lost; fenced to attempt %d", job_id, ", ".join(on), attempt)
            if await old_attempt_writes(shared.store, job_id, on, health):
                LOGGER.info("job %s: waiting for its learners' leases to end", job_id)
                return False
        except (StoreUnavailableError, TransientError) as e:
            LOGGER.warning("job %s: not moved off %s yet: %s", job_id, ", ".join(on), e)
            return False
        self._fenced.pop(job_id, None)
        return True

    async def _move(self, tracked: Tracked, why: str, nodes: frozenset[str]) -> None:
        shared = self.shared
        async with tracked.backend_lock:
            if isinstance(shared.backend, DeletesLostPods):
                # No kubelet confirms a deletion there: the next attempt's pods of the same names would wait for it.
                await asyncio.to_thread(shared.backend.delete_lost_pods, tracked.state.job_id, nodes)
            await self.transitions.teardown(tracked.state.job_id)
            async with shared.lock:
                if tracked.state.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                    return  # ended meanwhile
                interval = tracked.manifest.extensions.checkpoint_interval
                lost = float(interval) if interval is not None else None
                reason = f"{why}; resumes from its last checkpoint"
                await self.transitions.requeue(
                    tracked, reason, restart=False, ended_by=AttemptEnd.NODE_LOST, work_lost_s=lost
                )
        LOGGER.warning("job %s: %s", tracked.state.job_id, reason)
