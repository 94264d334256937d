"""Where a job is in the scheduler's own cycle (its status is what users see).

Admission keeps the stages up to ``RUNNING`` (and ``REJECTED``); the job's record in etcd keeps its stage by
value (``JobState.stage``), so the values stay as they are.
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    QUEUED = "QUEUED"
    """Waiting for admission (possibly backing off)."""
    DEPLOYED = "DEPLOYED"
    """Admitted: resources reserved and the learners deployed; not all running yet."""
    RUNNING = "RUNNING"
    """Every learner's containers run: the ready timeout no longer applies."""
    REJECTED = "REJECTED"
    """Unschedulable as it is: admission keeps it, with its reason, until released (the scheduler ends it)."""
    DONE = "DONE"
    """Terminal and torn down: nothing of it runs, nothing is reserved."""
