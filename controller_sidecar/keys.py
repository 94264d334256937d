"""The etcd key layout (docs/architecture.md), in one place: ``/learnerkit/jobs/<job_id>/...``."""

from __future__ import annotations

import re

ROOT = "/learnerkit/jobs"
JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def job_prefix(job_id: str, root: str = ROOT) -> str:
    """The prefix every key of one job lives under, with a trailing slash."""
    if not JOB_ID_PATTERN.match(job_id):
        raise ValueError(f"job id {job_id!r} must match {JOB_ID_PATTERN.pattern}")
    return f"{root.rstrip('/')}/{job_id}/"


def spec_key(job_id: str, root: str = ROOT) -> str:
    return job_prefix(job_id, root) + "spec"


def job_status_key(job_id: str, root: str = ROOT) -> str:
    """The job's aggregate status, written by the scheduler."""
    return job_prefix(job_id, root) + "status"


def halt_key(job_id: str, root: str = ROOT) -> str:
    """Any value here asks every learner of the job to halt."""
    return job_prefix(job_id, root) + "halt"


def release_key(job_id: str, root: str = ROOT) -> str:
    """The attempt number here lets that attempt's held learners start (a preemptor's pairs, deployed while its
    victims checkpoint, wait for it after their downloads)."""
    return job_prefix(job_id, root) + "release"


def fence_key(job_id: str, root: str = ROOT) -> str:
    """The number of the one attempt whose sidecars may write the job's shared keys (``learners/``, ``history/``);
    written by the scheduler as a job is queued again or moved off a lost node, so an older attempt's writes are
    refused by etcd (docs/security.md, "Fencing"). Absent: any attempt may (a job not moved yet)."""
    return job_prefix(job_id, root) + "fence"


def learner_prefix(job_id: str, learner_id: int, root: str = ROOT) -> str:
    return f"{job_prefix(job_id, root)}learners/{learner_id}/"


def learner_status_key(job_id: str, learner_id: int, root: str = ROOT) -> str:
    return learner_prefix(job_id, learner_id, root) + "status"


def learner_alive_key(job_id: str, learner_id: int, root: str = ROOT) -> str:
    """Held on the sidecar's lease: it disappears when the sidecar dies."""
    return learner_prefix(job_id, learner_id, root) + "alive"


def learner_metrics_key(job_id: str, learner_id: int, root: str = ROOT) -> str:
    return learner_prefix(job_id, learner_id, root) + "metrics"


def learner_boundary_key(job_id: str, learner_id: int, root: str = ROOT) -> str:
    """A learner waiting at its rung's budget for the next one (promotion in place, docs/sweeps.md): its attempt,
    step, budget and each metric's last value; written by its sidecar, read by the sweep driver."""
    return learner_prefix(job_id, learner_id, root) + "boundary"


def next_budget_prefix(job_id: str, root: str = ROOT) -> str:
    return job_prefix(job_id, root) + "next-budget/"


def next_budget_key(job_id: str, attempt: int, step: int, root: str = ROOT) -> str:
    """The scheduler's answer to a boundary of ``attempt`` at ``step``: ``{"budget": 90}`` (promoted in place) or
    ``{"budget": null, "reason": ...}``; written once, read by the job's sidecars."""
    return f"{next_budget_prefix(job_id, root)}{attempt}-{step}"


def history_prefix(job_id: str, root: str = ROOT) -> str:
    return job_prefix(job_id, root) + "history/"


def history_key(job_id: str, sequence: str, root: str = ROOT) -> str:
    """One transition of the job's history. ``sequence`` sorts in time order as a string."""
    return history_prefix(job_id, root) + sequence


def provenance_prefix(job_id: str, root: str = ROOT) -> str:
    """The sidecars' provenance records of every attempt and the scheduler's due mark (docs/provenance.md): kept
    apart from ``learners/``, which a requeue and a job's end clear."""
    return job_prefix(job_id, root) + "provenance/"


def provenance_record_prefix(job_id: str, attempt: int, learner_id: int, root: str = ROOT) -> str:
    """One learner's record of one attempt, in parts (``part-<i>``) and a ``head`` written last."""
    return f"{provenance_prefix(job_id, root)}records/attempt-{attempt}/learner-{learner_id}/"


def provenance_due_prefix(root: str = ROOT) -> str:
    """Beside the jobs' prefix (``/learnerkit/jobs.provenance-due/``): a restart reads every due mark at once."""
    return f"{root.rstrip('/')}.provenance-due/"


def provenance_due_key(job_id: str, root: str = ROOT) -> str:
    """Set by the scheduler as a job ends, deleted once its provenance is stored: a restart writes what is due."""
    job_prefix(job_id, root)  # the id's check
    return provenance_due_prefix(root) + job_id
