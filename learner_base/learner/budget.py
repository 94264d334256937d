"""A sweep trial's budget (how far this run trains before it stops by itself: its rung) and parameters.

The scheduler sets ``LEARNER_BUDGET`` (a whole number) and ``LEARNER_BUDGET_UNIT`` (``step`` or ``epoch``)
for a sweep's trials. A script that stops, checkpoints and exits 0 once it has trained that far ends its
rung without a halt; one that never reads its budget is halted there by ``log_metrics`` (``learner.halt``).
A promoted trial starts again from its own checkpoint with the next rung's budget.
Outside a sweep neither variable is set and :func:`budget` returns None. The trial's parameters come as
variables of their own names and, all together, as the JSON object ``LEARNER_PARAMETERS``
(:func:`parameters`). docs/sweeps.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

BUDGET_ENV = "LEARNER_BUDGET"
UNIT_ENV = "LEARNER_BUDGET_UNIT"
PARAMETERS_ENV = "LEARNER_PARAMETERS"
UNITS = ("step", "epoch")


@dataclass(frozen=True)
class Budget:
    limit: int
    """Train until this many steps (or epochs) are done, counted from the start of the trial, not of this run."""
    unit: str
    """``step``: the step the script passes to ``log_metrics``; ``epoch``: epochs it counts itself."""

    def reached(self, done: int) -> bool:
        """True once ``done`` steps (or epochs) are trained: checkpoint and exit 0."""
        return done >= self.limit


def budget() -> Budget | None:
    """This run's budget, or None outside a sweep. Raises ``ValueError`` naming the variable when it is bad."""
    raw = os.environ.get(BUDGET_ENV, "")
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{BUDGET_ENV} must be a whole number of at least 1, got {raw!r}")
    unit = os.environ.get(UNIT_ENV, "") or "step"
    if unit not in UNITS:
        raise ValueError(f"{UNIT_ENV} must be one of {', '.join(UNITS)}, got {unit!r}")
    return Budget(int(raw), unit)


def parameters() -> dict[str, float | int | str | bool]:
    """This trial's parameters by name; {} outside a sweep. Raises ``ValueError`` when the variable is bad."""
    raw = os.environ.get(PARAMETERS_ENV, "")
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{PARAMETERS_ENV} must be a JSON object: {e}") from e
    if not isinstance(found, dict):
        raise ValueError(f"{PARAMETERS_ENV} must be a JSON object, got {type(found).__name__}")  # noqa: TRY004 - one exception type for every bad value
    return found
