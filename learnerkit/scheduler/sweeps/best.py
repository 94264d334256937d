"""A sweep's best trial, from its view: what `sweep best` shows."""

from __future__ import annotations

from learnerkit.scheduler.facade import SweepView, TrialView


def best_trial(view: SweepView) -> TrialView | None:
    """The trial that went furthest (most rungs finished), best at its last rung; ties by index."""
    finished = [t for t in view.trials if t.results and t.state != "failed"]
    if not finished:
        return None
    sign = 1.0 if view.goal == "minimize" else -1.0
    return min(finished, key=lambda t: (-len(t.results), sign * t.results[-1], t.index))
