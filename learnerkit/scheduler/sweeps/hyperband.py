"""Hyperband (Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization", JMLR 2018):
brackets of successive halving, each starting its trials at another rung.

With rungs ``r_0 .. r_K`` (``budget.min x eta^k``), bracket ``s`` (from ``K`` down to 0) starts
``ceil((K + 1) / (s + 1) x eta^s)`` trials at rung ``K - s``; once every trial of the bracket has finished that
rung (or failed), the top ``max(floor(n / eta), 1)`` of the ``n`` that reported are promoted to the next rung
and the others stop. The brackets follow each other, again from ``s = K``, until the sweep's `trials` are
used (the last bracket may be cut short). Brackets run side by side when `concurrency` allows: a bracket's
decisions depend on its own trials' results only, ties broken by trial index, so a book rebuilt from the
records (`HyperbandBook.restore`) decides as the live one.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.rungbook import Origin, Plan, _Trial, ordinal


@dataclass(frozen=True)
class Bracket:
    number: int
    first: int
    """Its first trial's index."""
    count: int
    rung: int
    """The rung its trials start towards."""

    @property
    def indices(self) -> range:
        return range(self.first, self.first + self.count)


def brackets(rungs: int, eta: int, trials: int) -> list[Bracket]:
    """The brackets of a sweep of `trials` trials over `rungs` rungs, in order."""
    top = rungs - 1
    out: list[Bracket] = []
    first = 0
    while first < trials:
        for s in range(top, -1, -1):
            size = math.ceil((top + 1) / (s + 1) * eta**s)
            count = min(size, trials - first)
            if count <= 0:
                break
            out.append(Bracket(len(out), first, count, top - s))
            first += count
    return out


class HyperbandBook:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.trials = [_Trial() for _ in range(plan.trials)]
        self.brackets = brackets(len(plan.rungs), plan.eta, plan.trials)
        self._bracket_of = [b.number for b in self.brackets for _ in b.indices]
        self.ready: list[tuple[int, int, int]] = []
        """Paused trials promoted by their bracket and waiting for a slot: (bracket, rank, index), in order."""
        self._why: dict[int, str] = {}
        """Why each trial in `ready` was promoted."""
        self.started = 0
        self.running = 0

    @classmethod
    def restore(cls, plan: Plan, records: Iterable[TrialRecord]) -> HyperbandBook:
        book = cls(plan)
        for record in records:
            trial = book.trials[record.index]
            trial.state, trial.target, trial.reason = record.state, record.target, record.reason
            trial.results = list(record.results)
            book.started = max(book.started, record.index + 1)
            book.running += record.state is TrialState.RUNNING
        return book

    def review(self) -> list[Decision]:
        """Settle every bracket whose rung ended: its promotions wait in `ready`, a stop lost on the way is taken."""
        decisions: list[Decision] = []
        for bracket in self.brackets:
            decisions += self._settle(bracket)
        return decisions

    def records(self) -> list[TrialRecord]:
        return [
            TrialRecord(i, t.state, t.target, tuple(t.results), t.reason)
            for i, t in enumerate(self.trials)
            if t.state is not TrialState.PENDING
        ]

    def first_rung(self, index: int) -> int:
        return self.brackets[self._bracket_of[index]].rung

    def origin(self, index: int) -> Origin | None:
        return None

    @property
    def finished(self) -> bool:
        return all(t.state.terminal for t in self.trials)

    def explain(self, index: int) -> str:
        return self._why.get(index) or self.trials[index].reason

    def report(self, index: int, value: float | None, *, why_missing: str = "") -> list[Decision]:
        trial = self.trials[index]
        if trial.state is not TrialState.RUNNING:
            raise ValueError(f"trial {index} is {trial.state.value}, not running: no rung result expected")
        self.running -= 1
        rung, bracket = trial.target, self.brackets[self._bracket_of[index]]
        budget = self.plan.rungs[rung]
        if value is None:
            trial.state = TrialState.FAILED
            trial.reason = f"rung {rung + 1}: {why_missing or 'the objective was never reported'}"
            return [Decision(Action.FAIL, index, rung, budget, trial.reason), *self._settle(bracket)]
        trial.results.append(value)
        if rung == len(self.plan.rungs) - 1:
            trial.state, trial.reason = TrialState.COMPLETED, f"rung {rung + 1}: reached the full budget ({budget})"
            return [Decision(Action.COMPLETE, index, rung, budget, trial.reason)]
        trial.state = TrialState.PAUSED
        trial.reason = f"rung {rung + 1}: waiting for the rest of bracket {bracket.number + 1}"
        return [Decision(Action.PAUSE, index, rung, budget, trial.reason), *self._settle(bracket)]

    def lost(self, index: int, reason: str) -> list[Decision]:
        trial = self.trials[index]
        if trial.state is not TrialState.RUNNING:
            raise ValueError(f"trial {index} is {trial.state.value}, not running")
        self.running -= 1
        trial.state, trial.reason = TrialState.FAILED, reason
        bracket = self.brackets[self._bracket_of[index]]
        return [
            Decision(Action.FAIL, index, trial.target, self.plan.rungs[trial.target], reason),
            *self._settle(bracket),
        ]

    def fill(self) -> list[Decision]:
        decisions: list[Decision] = []
        while self.running < self.plan.concurrency:
            if self.ready:
                _, _, index = self.ready.pop(0)
                trial = self.trials[index]
                trial.state, trial.target = TrialState.RUNNING, trial.target + 1
                trial.reason = f"{self._why.pop(index)}, promoted"
                decisions.append(
                    Decision(Action.PROMOTE, index, trial.target, self.plan.rungs[trial.target], trial.reason)
                )
            elif self.started < self.plan.trials:
                index = self.started
                self.started += 1
                trial = self.trials[index]
                bracket = self.brackets[self._bracket_of[index]]
                trial.state, trial.target = TrialState.RUNNING, bracket.rung
                trial.reason = f"started in bracket {bracket.number + 1} at rung {bracket.rung + 1}"
                decisions.append(
                    Decision(Action.START, index, bracket.rung, self.plan.rungs[bracket.rung], trial.reason)
                )
            else:
                break
            self.running += 1
        return decisions

    def _settle(self, bracket: Bracket) -> list[Decision]:
        """Once every trial of `bracket` has finished its rung, promote its top 1/eta and stop the others.

        Read from the trials alone, so `restore` finds the same: a paused trial below the bracket's highest
        paused rung was promoted already (it waits for a slot), and a rung is judged only once none waits."""
        indices = bracket.indices
        if indices.stop > self.started:
            return []
        paused = [i for i in indices if self.trials[i].state is TrialState.PAUSED]
        running = [i for i in indices if self.trials[i].state is TrialState.RUNNING]
        if not paused:
            return []
        levels = [len(self.trials[i].results) - 1 for i in paused] + [len(self.trials[i].results) for i in running]
        level = max(levels)
        queued = {entry[2] for entry in self.ready}
        for index in paused:
            below = len(self.trials[index].results) - 1
            if below < level and index not in queued:
                self._queue(bracket, below, index)
        if running or any(i in queued or len(self.trials[i].results) - 1 < level for i in paused):
            return []  # promoted, waiting for a slot: the rung goes on
        ranked = self._ranked(bracket, level)
        keep = max(len(ranked) // self.plan.eta, 1)
        decisions: list[Decision] = []
        for position, index in enumerate(ranked):
            trial = self.trials[index]
            if trial.state is not TrialState.PAUSED:
                continue
            if position < keep:
                self._queue(bracket, level, index)
            else:
                trial.state = TrialState.STOPPED
                trial.reason = f"{self._place(bracket, level, position, len(ranked))}, only the top {keep} continue"
                decisions.append(
                    Decision(Action.STOP, index, trial.target, self.plan.rungs[trial.target], trial.reason)
                )
        return decisions

    def _ranked(self, bracket: Bracket, level: int) -> list[int]:
        """The trials of `bracket` that reported at its `level`-th rung, best first (ties by index)."""
        key = self.plan.objective.sort_key
        reached = [i for i in bracket.indices if len(self.trials[i].results) > level]
        return sorted(reached, key=lambda i: (key(self.trials[i].results[level]), i))

    def _queue(self, bracket: Bracket, level: int, index: int) -> None:
        ranked = self._ranked(bracket, level)
        position = ranked.index(index)
        keep = max(len(ranked) // self.plan.eta, 1)
        self._why[index] = f"{self._place(bracket, level, position, len(ranked))}, the top {keep} continue"
        bisect.insort(self.ready, (bracket.number, position, index))

    def _place(self, bracket: Bracket, level: int, position: int, count: int) -> str:
        rung = bracket.rung + level
        return f"rung {rung + 1}: {ordinal(position + 1)} of {count} in bracket {bracket.number + 1}"
