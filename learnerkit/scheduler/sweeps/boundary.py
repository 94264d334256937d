"""A trial's learner waiting at its rung's budget for the next one (promotion in place, docs/sweeps.md): what its
sidecar put in etcd, read back, and the rung's result it carries."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Boundary:
    attempt: int
    """The job attempt whose learner waits: a record of an older attempt is not answered."""
    step: int
    budget: int
    """The budget it reached: the rung it trained towards."""
    metrics: dict[str, tuple[int, float]]
    """Each metric's last (step, value) logged by the process that waits."""

    @classmethod
    def from_json(cls, raw: bytes) -> Boundary | None:
        """The record, or None where it does not read as one (nothing is promoted in place then)."""
        try:
            found = json.loads(raw)
            attempt, step, budget = (found[k] for k in ("attempt", "step", "budget"))
            metrics = {
                str(name): (int(pair[0]), float(pair[1]))
                for name, pair in dict(found.get("metrics") or {}).items()
                if isinstance(pair, list) and len(pair) == 2
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (attempt, step, budget)):
            return None
        return cls(attempt, step, budget, metrics)

    def result(self, metric: str, after: int) -> float | None:
        """The objective at this rung (logged after ``after`` and up to the budget), as the stored history gives it."""
        found = self.metrics.get(metric)
        if found is None or not after < found[0] <= self.budget or not math.isfinite(found[1]):
            return None
        return found[1]
