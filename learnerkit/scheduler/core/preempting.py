"""Preemption in the control loop: a queued job that waits for room held by lower-priority jobs has them halted
(the usual halt path: each learner checkpoints and stops), and each victim goes back to the queue as PREEMPTED, in
its old place, to resume from that checkpoint by itself when room comes back.

The victim's record names its preemptor (``preempted_by``) before its halt is asked, so a restarted scheduler
finishes the preemption (:func:`resume_preemptions`). One preemption is under way at a time: a second waits until
the first victims have left, so the room they free is counted once. The victim keeps its reservation (and its
tenant's quota) until its learners have ended; only then can the preemptor be admitted: the quota is charged to
exactly one of them at any time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from controller_sidecar.status import ErrorCode, StatusRecord
from learnerkit.scheduler.admission.reasons import Reason, WaitingForGpus, WaitingForRoom
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions
from learnerkit.scheduler.jobs.attempts import AttemptEnd
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.preemption.victims import Holder, choose_victims

LOGGER = logging.getLogger(__name__)


class Preempting:
    def __init__(self, shared: Shared, transitions: Transitions) -> None:
        self.shared = shared
        self.transitions = transitions

    @staticmethod
    def preempted(tracked: Tracked) -> bool:
        """Whether the job's halt is a preemption's (a halt its user asked for meanwhile wins)."""
        return tracked.state.preempted_by is not None and not tracked.state.halted_by_user

    def waiting_reason(self, tracked: Tracked, waiting: str) -> str:
        """Why a queued job waits; a preemptor's names the jobs halting for it (and its held start, if any)."""
        job_id = tracked.state.job_id
        victims = sorted(
            t.state.job_id for t in self.shared.jobs.values() if t.state.preempted_by == job_id and t.active
        )
        if not victims:
            return waiting
        said = f"{waiting}; preempting {', '.join(victims)}: halting to free the room"
        return f"{said}; started held meanwhile" if tracked.state.held else said

    def under_way(self) -> bool:
        return any(t.state.preempted_by is not None and t.active for t in self.shared.jobs.values())

    async def consider(self, waiting: Mapping[str, Reason], now: float) -> str | None:
        """After an admission pass, under the shared lock: the first job (in queue order) that waits for room and
        may preempt has the fewest victims it needs halted; that preemptor's id, None when none."""
        shared, rules = self.shared, self.shared.options.preemption
        if self.under_way():
            return None
        holders = self._holders(now)
        cluster = shared.admission.cluster
        nodes = [node for node in cluster.nodes.values() if node.name not in cluster.closed]
        for job_id, reason in waiting.items():
            tracked = shared.jobs[job_id]
            if not isinstance(reason, WaitingForGpus | WaitingForRoom) or not rules.allows(tracked.state.tenant):
                continue
            choice = choose_victims(
                nodes,
                holders,
                tracked.admission_job(),
                min_run_s=rules.min_run_s,
                max_preemptions=rules.max_preemptions,
            )
            if choice is None:
                continue
            for victim in choice.victims:
                await self._halt(shared.jobs[victim], job_id, now)
            shared.metrics.preemptions.inc(len(choice.victims))
            victims = ", ".join(choice.victims)
            LOGGER.info("job %s preempts %s (at most %.0f s of work lost)", job_id, victims, choice.work_lost_s)
            return job_id
        return None

    async def finish(self, tracked: Tracked, records: Mapping[int, StatusRecord]) -> None:
        """Under the shared lock, once the victim's learners have halted and it is torn down: back to the queue."""
        preemptor, state = tracked.state.preempted_by, tracked.state
        current = [r for r in records.values() if r.sequence >= state.first_sequence]
        ignored = any(r.error_code is ErrorCode.HALT_TIMEOUT for r in current)
        if ignored:
            # Stopped at the grace's end: it resumes from its last periodic checkpoint, and what it did since is lost.
            grace = tracked.manifest.extensions.halt_grace
            lost = _lost_at_most(tracked)
            why = (
                f"preempted by job {preemptor}: killed after the {grace}s halt grace; resumes from its last checkpoint"
            )
        else:
            # Stopped in time: recorded at its bound, as above, until measured from what it stored (its figures, read
            # once requeued): 0 where it checkpointed at its halt; without a checkpoint, the bound stands.
            lost, why = _lost_at_most(tracked), f"preempted by job {preemptor}"
        await self.transitions.requeue(
            tracked, why, restart=False, ended_by=AttemptEnd.PREEMPTED, work_lost_s=lost, status=JobStatus.PREEMPTED
        )

    def _holders(self, now: float) -> list[Holder]:
        jobs = self.shared.jobs
        holders = []
        for record in self.shared.admission.records():
            if record.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                continue
            tracked = jobs[record.job.job_id]
            running = record.stage is Stage.RUNNING and record.admitted_at is not None
            running_for = now - record.admitted_at if running and record.admitted_at is not None else None
            holders.append(
                Holder(
                    record.job,
                    record.nodes,
                    preemptible=tracked.manifest.extensions.preemptible
                    and tracked.state.preempted_by is None
                    and tracked.state.drained_from is None
                    and not tracked.state.halted_by_user,
                    running_for_s=running_for,
                    since_checkpoint_s=_since_checkpoint(tracked, running_for),
                    preemptions=sum(a.ended_by is AttemptEnd.PREEMPTED for a in tracked.attempts),
                )
            )
        return holders

    async def _halt(self, victim: Tracked, preemptor: str, now: float) -> None:
        store = self.shared.store
        victim.state = await store.save(
            victim.state.evolve(preempted_by=preemptor, preempted_at=now, reason=f"preempted by job {preemptor}")
        )
        await store.request_halt(victim.state.job_id)


def _since_checkpoint(tracked: Tracked, running_for_s: float | None) -> float | None:
    """The seconds since the job's last periodic checkpoint, as its ``checkpoint_interval`` paces them from its
    attempt's start; None without periodic checkpoints (a halt then loses the whole attempt unless the learner
    checkpoints at its halt)."""
    interval = tracked.manifest.extensions.checkpoint_interval
    if interval is None or running_for_s is None:
        return None
    return running_for_s % interval


def _lost_at_most(tracked: Tracked) -> float | None:
    """What a learner stopped at the grace's end can have lost: one checkpoint interval, or without periodic
    checkpoints everything since its attempt was admitted."""
    extensions, state = tracked.manifest.extensions, tracked.state
    if extensions.checkpoint_interval is not None:
        return float(extensions.checkpoint_interval)
    if state.preempted_at is None or state.admitted_at is None:
        return None
    return max(0.0, state.preempted_at + extensions.halt_grace - state.admitted_at)


async def resume_preemptions(shared: Shared) -> None:
    """After a restart: ask again the halts of preemptions under way (the scheduler may have stopped between
    recording a victim and asking its halt)."""
    for tracked in shared.jobs.values():
        if tracked.state.preempted_by is not None and tracked.active:
            await shared.store.request_halt(tracked.state.job_id)
