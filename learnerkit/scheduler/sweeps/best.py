"""A sweep's best trial: what `sweep best` shows, and the trial whose model a sweep's evaluations judge."""

from __future__ import annotations

from collections.abc import Iterable

from learnerkit.scheduler.facade import SweepView, TrialView


def best_index(trials: Iterable[tuple[int, tuple[float, ...]]], goal: str) -> int | None:
    """Of (index, results at the end of each rung) of the trials that did not fail, the one that went furthest
    (most rungs finished), best at its last rung; ties by index. None where no trial finished a rung."""
    finished = [(index, results) for index, results in trials if results]
    if not finished:
        return None
    sign = 1.0 if goal == "minimize" else -1.0
    return min(finished, key=lambda t: (-len(t[1]), sign * t[1][-1], t[0]))[0]


def best_trial(view: SweepView) -> TrialView | None:
    """The best trial of the view (`best_index`)."""
    index = best_index(((t.index, t.results) for t in view.trials if t.state != "failed"), view.goal)
    return next((t for t in view.trials if t.index == index), None)
