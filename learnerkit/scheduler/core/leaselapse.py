"""Learners lost to a lapsed lease: their sidecar gave up a write it held back while its lease may have lapsed
(etcd unanswered, ``LEASE_LAPSED_EXIT``). That is the platform's trouble, not the job's, so the job goes back to
the queue to resume from its last checkpoint, its attempt ending ``INTERRUPTED`` without spending its
``max_restarts``; after :data:`MAX_LEASE_LAPSE_REQUEUES` such requeues it fails, so that a platform that keeps
lapsing cannot requeue it for ever. Pure: the loop acts on what these say."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller_sidecar.exits import LEASE_LAPSED_EXIT
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.backends.protocol import SidecarStates
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd

MAX_LEASE_LAPSE_REQUEUES = 3
"""Requeues for a lapsed lease in a job's life; the next lapse fails the job."""
LAPSED_REASON = "its sidecar's lease lapsed (etcd did not answer it in time)"
"""How an attempt requeued for a lapsed lease starts its reason: what :func:`lapse_requeues` counts."""


def lapsed_leases(sidecars: SidecarStates, lost: Mapping[int, str]) -> set[int]:
    """Of the learners ``lost``, those whose sidecar exited giving up on its lapsed lease."""
    return {n for n in lost if sidecars.exited.get(n) == LEASE_LAPSED_EXIT}


def lost_only_to_lapses(
    records: Mapping[int, StatusRecord], first_sequence: int, lost: Mapping[int, str], lapsed: set[int]
) -> bool:
    """Whether the job fails only because of lapsed leases: some learner was lost to one, every lost learner was,
    and no learner failed by itself this attempt (its own failure is the job's, whatever else happened)."""
    failed = any(r.sequence >= first_sequence and r.phase is Phase.FAILED for r in records.values())
    return bool(lost) and lost.keys() <= lapsed and not failed


def lapse_requeues(attempts: Iterable[Attempt]) -> int:
    """How many times the job was requeued for a lapsed lease (its attempts history survives restarts)."""
    return sum(1 for a in attempts if a.ended_by is AttemptEnd.INTERRUPTED and a.reason.startswith(LAPSED_REASON))


def lapse_requeue_reason(lost_why: str) -> str:
    """The requeued attempt's reason: what it was lost to, and what happens now."""
    return f"{LAPSED_REASON}: {lost_why}; resumes from its last checkpoint"


def lapses_spent(lost_why: str) -> str:
    """The job's reason once the lapse requeues are spent."""
    return (
        f"{lost_why}; {LAPSED_REASON} again after {MAX_LEASE_LAPSE_REQUEUES} requeues for that cause: failed (the"
        " platform's etcd keeps missing the sidecars' lease refreshes)"
    )
