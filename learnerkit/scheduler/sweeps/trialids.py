"""A trial's job id, ``<sweep id>-t<index>`` (``sweep-3f9a2c1e-t0007``), and the sweep and trial read back from it."""

from __future__ import annotations

from dataclasses import dataclass

SWEEP_ID_PREFIX = "sweep-"


@dataclass(frozen=True)
class TrialOf:
    """The sweep a trial job belongs to, and its trial index."""

    sweep_id: str
    trial: int


def trial_job_id(sweep_id: str, index: int) -> str:
    return f"{sweep_id}-t{index:04d}"


def trial_of(job_id: str) -> TrialOf | None:
    """The sweep and trial of a trial job's id; None for any other job (``job-...``)."""
    sweep_id, _, index = job_id.rpartition("-t")
    if not sweep_id.startswith(SWEEP_ID_PREFIX) or not index.isdigit():
        return None
    return TrialOf(sweep_id, int(index))
