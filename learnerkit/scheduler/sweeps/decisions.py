"""What the decision core tells the sweep driver, and what it is told: trials, their records, decisions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TrialState(StrEnum):
    PENDING = "pending"
    """Not started yet."""
    RUNNING = "running"
    """Started or promoted, training towards its rung's budget (queued for admission included)."""
    PAUSED = "paused"
    """Halted on its checkpoint at the end of a rung, waiting for promotion."""
    STOPPED = "stopped"
    """Will train no more: the rule stopped it, or it can no longer be promoted."""
    COMPLETED = "completed"
    """Reached the last rung's budget."""
    FAILED = "failed"
    """Its job failed, or it never reported the objective within its rung."""

    @property
    def terminal(self) -> bool:
        return self in (TrialState.STOPPED, TrialState.COMPLETED, TrialState.FAILED)


class Action(StrEnum):
    START = "start"
    """Run a new trial from scratch towards rung 0's budget."""
    PROMOTE = "promote"
    """Resume a paused trial from its own checkpoint towards the next rung's budget."""
    PAUSE = "pause"
    """The trial reached its rung's budget: keep its checkpoint and wait."""
    CONTINUE = "continue"
    """The trial passed its rung and keeps running without a pause (stop-only and median rules)."""
    STOP = "stop"
    """No more training for this trial."""
    COMPLETE = "complete"
    """The trial reached the last rung."""
    FAIL = "fail"
    """The trial's rung failed."""


@dataclass(frozen=True)
class Decision:
    action: Action
    trial: int
    rung: int
    """0-based: the rung the trial now trains towards (start, promote, continue) or the one it finished."""
    budget: int
    """The budget of that rung, in the sweep's unit."""
    reason: str


@dataclass(frozen=True)
class TrialRecord:
    """A trial as the sweep store keeps it: enough to rebuild the decision core after a restart."""

    index: int
    state: TrialState
    target: int
    """The rung it trains towards (running) or last trained towards; -1 while pending."""
    results: tuple[float, ...] = ()
    """The objective at the end of each rung it finished, rung 0 first."""
    reason: str = ""
