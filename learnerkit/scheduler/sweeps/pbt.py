"""Population-based training (Jaderberg et al., "Population Based Training of Neural Networks", 2017), in
synchronous generations, as Katib runs it: each trial trains one interval and ends on its checkpoint.

Trial ``i`` is member ``i mod population`` of generation ``i // population`` and trains towards rung
``generation`` (rung ``g``'s budget is ``(g + 1) x budget.min``, the last ``budget.max``). Generation ``g + 1``
starts once every trial of generation ``g`` has ended. A member ranked in the worst `truncation` of its
generation *exploits*: its next trial starts from the checkpoint of one of the best `truncation` (drawn with
the sweep's seed and the trial's index) with that trial's parameters *explored* (`perturbed`); every other
member's next trial goes on from its own checkpoint with its parameters unchanged. The lineage is each
trial's `Origin`. Everything follows from the records and the seed, so a rebuilt book decides the same.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping

from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.rungbook import Origin, Plan, _Trial, ordinal
from learnerkit.scheduler.sweeps.space import Config, ParamType, ParamValue, SearchSpace

FACTORS = (0.8, 1.2)
"""A perturbed number is multiplied by one of these (the PBT paper's explore step)."""


def perturbed(
    space: SearchSpace, parameters: Mapping[str, ParamValue], *, seed: int, index: int, resample: float
) -> Config:
    """`parameters` explored for trial `index`: each is drawn anew with probability `resample`, else a number is
    scaled by 0.8 or 1.2 (kept within its bounds) and a choice moves to a neighbouring value."""
    rng = random.Random(f"{seed}:pbt:{index}")  # noqa: S311 (reproducible, not secret)
    out: dict[str, ParamValue] = {}
    for p in space.parameters:
        value = parameters[p.name]
        if rng.random() < resample:
            out[p.name] = p.sample(rng)
        elif p.type is ParamType.CHOICE:
            position = p.values.index(value) + rng.choice((-1, 1))
            out[p.name] = p.values[min(max(position, 0), len(p.values) - 1)]
        else:
            factor = rng.choice(FACTORS)
            scaled = float(value) * factor
            if p.type is ParamType.INTEGER and round(scaled) == value:  # a small integer moves by one
                scaled = float(value) + (1 if factor > 1 else -1)
            scaled = min(max(scaled, p.low), p.high)
            out[p.name] = round(scaled) if p.type is ParamType.INTEGER else scaled
    return out


class PbtBook:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.trials = [_Trial() for _ in range(plan.trials)]
        self.origins: dict[int, Origin] = {}
        self.started = 0
        self.running = 0

    @classmethod
    def restore(cls, plan: Plan, records: Iterable[TrialRecord]) -> PbtBook:
        book = cls(plan)
        for record in records:
            trial = book.trials[record.index]
            trial.state, trial.target, trial.reason = record.state, record.target, record.reason
            trial.results = list(record.results)
            book.started = max(book.started, record.index + 1)
            book.running += record.state is TrialState.RUNNING
        for index in range(plan.population, book.started):
            origin = book._choose(index)
            if origin is not None:
                book.origins[index] = origin
        return book

    def review(self) -> list[Decision]:
        return []

    def records(self) -> list[TrialRecord]:
        return [
            TrialRecord(i, t.state, t.target, tuple(t.results), t.reason)
            for i, t in enumerate(self.trials)
            if t.state is not TrialState.PENDING
        ]

    def generation(self, index: int) -> int:
        return index // self.plan.population

    def first_rung(self, index: int) -> int:
        return self.generation(index)

    def origin(self, index: int) -> Origin | None:
        return self.origins.get(index)

    @property
    def finished(self) -> bool:
        return all(t.state.terminal for t in self.trials)

    def explain(self, index: int) -> str:
        return self.trials[index].reason

    def report(self, index: int, value: float | None, *, why_missing: str = "") -> list[Decision]:
        trial = self._running(index)
        rung, budget = trial.target, self.plan.rungs[trial.target]
        if value is None:
            trial.state = TrialState.FAILED
            trial.reason = f"generation {rung + 1}: {why_missing or 'the objective was never reported'}"
            return [Decision(Action.FAIL, index, rung, budget, trial.reason)]
        trial.results.append(value)
        trial.state = TrialState.COMPLETED
        last = rung == len(self.plan.rungs) - 1
        trial.reason = f"generation {rung + 1}: " + ("reached the full budget" if last else "its interval ended")
        return [Decision(Action.COMPLETE, index, rung, budget, trial.reason)]

    def lost(self, index: int, reason: str) -> list[Decision]:
        trial = self._running(index)
        trial.state, trial.reason = TrialState.FAILED, reason
        return [Decision(Action.FAIL, index, trial.target, self.plan.rungs[trial.target], reason)]

    def fill(self) -> list[Decision]:
        decisions: list[Decision] = []
        while self.running < self.plan.concurrency and self.started < self.plan.trials:
            index = self.started
            generation = self.generation(index)
            if generation and not self._ended(generation - 1):
                break
            origin = self._choose(index) if generation else None
            trial = self.trials[index]
            trial.state, trial.target = TrialState.RUNNING, generation
            trial.reason = self._describe(index, origin)
            if origin is not None:
                self.origins[index] = origin
            self.started += 1
            self.running += 1
            decisions.append(Decision(Action.START, index, generation, self.plan.rungs[generation], trial.reason))
        return decisions

    def _running(self, index: int) -> _Trial:
        trial = self.trials[index]
        if trial.state is not TrialState.RUNNING:
            raise ValueError(f"trial {index} is {trial.state.value}, not running")
        self.running -= 1
        return trial

    def _ended(self, generation: int) -> bool:
        start = generation * self.plan.population
        return all(self.trials[i].state.terminal for i in range(start, start + self.plan.population))

    def _ranked(self, generation: int) -> list[int]:
        """The trials of `generation` that reported, best first (ties by index)."""
        start = generation * self.plan.population
        members = [i for i in range(start, start + self.plan.population) if self.trials[i].results]
        return sorted(members, key=lambda i: (self.plan.objective.sort_key(self.trials[i].results[-1]), i))

    def _choose(self, index: int) -> Origin | None:
        """Trial `index`'s parent in the generation before: its own member, or (worst `truncation`, or its
        member failed) one of the best `truncation`; None when none of that generation reported."""
        ranked = self._ranked(self.generation(index) - 1)
        if not ranked:
            return None
        cut = max(math.floor(len(ranked) * self.plan.truncation), 1)
        own = index - self.plan.population
        if own in ranked and (len(ranked) < 2 or ranked.index(own) < len(ranked) - cut):
            return Origin(own, exploit=False)
        rng = random.Random(f"{self.plan.seed}:parent:{index}")  # noqa: S311 (reproducible, not secret)
        return Origin(ranked[rng.randrange(cut)], exploit=True)

    def _describe(self, index: int, origin: Origin | None) -> str:
        generation = self.generation(index)
        if origin is None:
            return f"generation {generation + 1}: started from scratch"
        ranked = self._ranked(generation - 1)
        place = f"{ordinal(ranked.index(origin.parent) + 1)} of {len(ranked)}"
        if not origin.exploit:
            return f"generation {generation + 1}: goes on from trial {origin.parent} ({place})"
        own = index - self.plan.population
        was = f"trial {own} ({ordinal(ranked.index(own) + 1)})" if own in ranked else f"trial {own} (failed)"
        return f"generation {generation + 1}: {was} copies trial {origin.parent} ({place}), perturbed"
