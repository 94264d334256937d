"""Run the decision core against made-up trials, with no learner: for tests, the benchmark and `explain`.

Each trial's objective at a budget comes from `curve(trial, budget)`; training costs `seconds_per_unit`
per unit of budget, and `concurrency` trials train at once. Events are taken in order of their simulated
time, ties by trial index, so a simulation is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from learnerkit.scheduler.sweeps.books import SweepBook, restore_book
from learnerkit.scheduler.sweeps.decisions import Action, Decision
from learnerkit.scheduler.sweeps.rungbook import Plan

Curve = Callable[[int, int], float | None]
"""(trial, budget) -> the objective there; None: the trial never reports it."""


@dataclass
class Simulation:
    book: SweepBook
    decisions: list[Decision] = field(default_factory=list)
    trained: dict[int, int] = field(default_factory=dict)
    """Units of budget each trial trained (a resumed trial trains only what its checkpoint lacks)."""
    units_from_scratch: int = 0
    """What the same decisions cost if every promotion restarted from scratch (Hyperband in Katib)."""
    elapsed: float = 0.0


def simulate(
    plan: Plan,
    curve: Curve,
    *,
    seconds_per_unit: float | Callable[[int], float] = 1.0,
    book: SweepBook | None = None,
) -> Simulation:
    """Run the sweep to its end; `book`: a fresh decision core of `plan` to run it with (default: the plan's)."""
    book = book or restore_book(plan)
    sim = Simulation(book)
    events: list[tuple[float, int]] = []

    def rate(trial: int) -> float:
        return seconds_per_unit(trial) if callable(seconds_per_unit) else seconds_per_unit

    def launch(now: float, decisions: list[Decision]) -> None:
        sim.decisions += decisions
        for decision in decisions:
            if decision.action in (Action.START, Action.PROMOTE, Action.CONTINUE):
                done = sim.trained.get(decision.trial, 0)
                sim.trained[decision.trial] = decision.budget
                if decision.action is Action.CONTINUE:
                    sim.units_from_scratch += decision.budget - done
                else:
                    sim.units_from_scratch += decision.budget
                heapq.heappush(events, (now + (decision.budget - done) * rate(decision.trial), decision.trial))

    launch(0.0, book.fill())
    while events:
        now, trial = heapq.heappop(events)
        sim.elapsed = now
        value = curve(trial, sim.trained[trial])
        launch(now, book.report(trial, value) + book.fill())
    return sim
