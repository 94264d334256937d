"""What the sweep pages show of the facade's `SweepView`: the list's rows, the rung table, each trial's timeline
segments, its learning curve (each step once) with its rung boundaries and pause/promote marks, and the data the
page's plots draw (`static/sweeps.js`). Plain data, worked out here so the templates only lay it out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from learnerkit.scheduler.facade import AttemptView, SweepView, TrialView
from learnerkit.scheduler.sweeps.best import best_trial

CURVE_POINTS = 2_000
"""At most this many points of one trial's curve go to the page (evenly strided, the last point kept)."""


@dataclass(frozen=True)
class SweepRow:
    sweep_id: str
    name: str
    algorithm: str
    status: str
    started: int
    total: int
    best: str
    """The best trial's objective at its last rung (`sweep best`), formatted; empty before any rung finished."""
    submitted_at: str


@dataclass(frozen=True)
class TrialRow:
    """One line of the rung table: the values `sweep status --output json` has for the trial."""

    index: int
    job_id: str
    parameters: str
    rung: int
    result: str
    """Its objective at the last rung it finished; empty before the first."""
    state: str
    reason: str


REQUEUED_ENDS = frozenset({"PREEMPTED", "DRAINED", "NODE_LOST", "INTERRUPTED", "RESTARTED"})
"""An attempt's ends after which the scheduler queues the job again by itself (`jobs.attempts.REQUEUED_ENDS`): the
trial waits for room, it was not paused. A gap under a second (started again at once) is no segment."""


@dataclass(frozen=True)
class Segment:
    """One stretch of a trial's life on its timeline."""

    kind: str
    """running (its first attempt), resumed (a later one, from a checkpoint), paused (between two, where the trial
    stopped at its rung or was halted), requeued (between two, where the scheduler queued it again by itself),
    stopped (a mark: its end, no length)."""
    start: str
    end: str
    """ISO-8601 UTC; empty: still going."""
    seconds: float


def number(value: float) -> str:
    return f"{value:.6g}"


def parameter_text(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_value(view: SweepView) -> str:
    best = best_trial(view)
    return number(best.results[-1]) if best is not None and best.results else ""


def sweep_row(view: SweepView, name: str) -> SweepRow:
    return SweepRow(
        view.sweep_id,
        name,
        view.algorithm,
        view.status,
        len(view.trials),
        view.trials_total,
        best_value(view),
        view.submitted_at,
    )


def trial_row(trial: TrialView) -> TrialRow:
    parameters = ", ".join(f"{k}={parameter_text(v)}" for k, v in trial.parameters.items())
    result = number(trial.results[-1]) if trial.results else ""
    return TrialRow(trial.index, trial.job_id, parameters, trial.rung, result, trial.state, trial.reason)


def unique_steps(steps: npt.ArrayLike, values: npt.ArrayLike) -> tuple[list[float], list[float]]:
    """A curve with each step once, in step order: where an attempt resumed from a checkpoint logs steps again
    that an earlier attempt logged, the later attempt's value stands (``steps`` sorted stably, earlier attempts'
    records first, as `series.history.Column` keeps them)."""
    x = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        return [], []
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    last = np.append(x[1:] != x[:-1], True)  # the last record of each step
    return x[last].tolist(), y[last].tolist()


def thin(x: list[float], y: list[float], points: int = CURVE_POINTS) -> tuple[list[float], list[float]]:
    if len(x) <= points:
        return x, y
    stride = -(-len(x) // points)
    keep = list(range(0, len(x), stride))
    if keep[-1] != len(x) - 1:
        keep.append(len(x) - 1)
    return [x[i] for i in keep], [y[i] for i in keep]


def marks(view: SweepView, trial: TrialView) -> list[dict[str, Any]]:
    """Where the trial's curve crosses its rungs (budgets in steps): each rung it finished is a boundary where it
    paused, and a promote mark where it went on to the next rung. Empty for budgets in epochs: steps do not say
    where an epoch ended."""
    if view.unit != "step":
        return []
    found: list[dict[str, Any]] = []
    first = trial.first_rung - 1
    for n, result in enumerate(trial.results):
        rung = first + n
        if rung >= len(view.rungs):
            break
        if rung == len(view.rungs) - 1:
            kind = "end"
        elif rung < trial.rung - 1:
            kind = "promoted"
        else:
            kind = "stopped" if trial.state == "stopped" else "paused"
        step = view.rungs[rung]
        found.append({"step": step, "rung": rung + 1, "result": result, "kind": kind})
    return found


def segments(attempts: Sequence[AttemptView], state: str, now: datetime | None = None) -> list[Segment]:
    """The trial's attempts as running/resumed segments, the gaps between them as paused, and a stopped mark at
    its end when the sweep stopped it (or it was cancelled or failed)."""
    moment = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    found: list[Segment] = []
    for n, attempt in enumerate(attempts):
        before = attempts[n - 1] if n else None
        if before is not None and before.ended_at and _seconds(before.ended_at, attempt.started_at) >= 1:
            gap = "requeued" if before.ended_by in REQUEUED_ENDS else "paused"
            found.append(Segment(gap, before.ended_at, attempt.started_at, 0.0))
        kind = "resumed" if attempt.resumed_from is not None or n else "running"
        found.append(Segment(kind, attempt.started_at, attempt.ended_at or "", 0.0))
    last = attempts[-1] if attempts else None
    if last is not None and last.ended_at:
        if state == "paused":
            found.append(Segment("paused", last.ended_at, "", 0.0))
        elif state in ("stopped", "failed") or last.ended_by in ("CANCELLED", "FAILED"):
            found.append(Segment("stopped", last.ended_at, last.ended_at, 0.0))
    return [Segment(s.kind, s.start, s.end, _seconds(s.start, s.end or moment)) for s in found]


def _seconds(start: str, end: str) -> float:
    try:
        span = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except ValueError:
        return 0.0
    return max(0.0, span.total_seconds())


def plot_data(view: SweepView) -> dict[str, Any]:
    """The parallel coordinates', scatter's and best-so-far's data: each axis, each trial's values on them."""
    names = [p.name for p in view.space] or sorted({k for t in view.trials for k in t.parameters})
    declared = {p.name: p for p in view.space}
    axes: list[dict[str, Any]] = []
    for name in names:
        p = declared.get(name)
        if p is None:
            axes.append({"name": name, "kind": "linear"})
        elif p.type == "choice":
            axes.append({"name": name, "kind": "choice", "values": [str(v) for v in p.values]})
        else:
            kind = "log" if p.type == "log_uniform" else "linear"
            axes.append({"name": name, "kind": kind, "low": p.low, "high": p.high})
    trials = [
        {
            "index": t.index,
            "job_id": t.job_id,
            "state": t.state,
            "rung": t.rung,
            "values": [_plotted(t.parameters.get(name)) for name in names],
            "objective": t.results[-1] if t.results else None,
            "results": list(t.results),
            "first_rung": t.first_rung,
        }
        for t in view.trials
    ]
    return {
        "sweep_id": view.sweep_id,
        "status": view.status,
        "metric": view.metric,
        "goal": view.goal,
        "unit": view.unit,
        "rungs": list(view.rungs),
        "axes": axes,
        "trials": trials,
        "best": best_value(view),
    }


def _plotted(value: object) -> float | str | None:
    if value is None:
        return None
    if isinstance(value, bool | str):
        return str(value)
    return float(value)  # type: ignore[arg-type]


def best_so_far(view: SweepView, attempts: Mapping[str, Sequence[AttemptView]]) -> list[tuple[str, float]]:
    """(when, the best objective reported by then) at each rung a trial finished, in time order: a rung's result
    comes when the attempt that trained it ended (halted at its budget, or completed)."""
    sign = 1.0 if view.goal == "minimize" else -1.0
    points: list[tuple[str, float]] = []
    for t in view.trials:
        ends = [a.ended_at for a in attempts.get(t.job_id, ()) if a.ended_at and a.ended_by in ("HALTED", "COMPLETED")]
        points += list(zip(ends, t.results, strict=False))
    found: list[tuple[str, float]] = []
    best: float | None = None
    for at, value in sorted(points):
        if best is None or sign * value < sign * best:
            best = value
        found.append((at, best))
    return found
