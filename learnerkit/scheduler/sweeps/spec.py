"""What a search file says, checked: `SweepSpec` and its parts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from learnerkit.scheduler.sweeps.space import SearchSpace


class Goal(StrEnum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class BudgetUnit(StrEnum):
    STEP = "step"
    EPOCH = "epoch"


class AlgorithmName(StrEnum):
    RANDOM = "random"
    GRID = "grid"
    ASHA = "asha"
    MEDIAN_STOP = "median_stop"


@dataclass(frozen=True)
class Objective:
    metric: str
    goal: Goal

    def better(self, a: float, b: float) -> bool:
        """True when `a` is strictly better than `b`."""
        return a < b if self.goal is Goal.MINIMIZE else a > b

    def sort_key(self, value: float) -> float:
        """Ascending order of this key is best first."""
        return value if self.goal is Goal.MINIMIZE else -value


@dataclass(frozen=True)
class Budget:
    """How far a trial trains, in the objective metric's `unit` (its `step`, or epochs the learner counts)."""

    unit: BudgetUnit
    min: int
    max: int


@dataclass(frozen=True)
class Algorithm:
    name: AlgorithmName
    eta: int = 3
    """ASHA's reduction factor: a rung keeps the top 1/eta; rung k's budget is min x eta^k (the last: max)."""

    @property
    def uses_rungs(self) -> bool:
        return self.name in (AlgorithmName.ASHA, AlgorithmName.MEDIAN_STOP)


@dataclass(frozen=True)
class SweepSpec:
    manifest: Path
    """The manifest, resolved against the search file's folder."""
    space: SearchSpace
    objective: Objective
    budget: Budget
    algorithm: Algorithm
    trials: int
    concurrency: int = 1
    seed: int = 0
    keep_checkpoints: bool = False
    """Keep the checkpoints of paused trials that can no longer be promoted (default: remove them)."""
    lines: Mapping[tuple[str | int, ...], int] = field(default_factory=dict, compare=False, repr=False)
    """The search file's line of each field, for problems found later (against the manifest)."""

    @property
    def rungs(self) -> tuple[int, ...]:
        """The budget at the end of each rung; one rung (the max) for random and grid search."""
        return rung_budgets(self.budget, self.algorithm)


def rung_budgets(budget: Budget, algorithm: Algorithm) -> tuple[int, ...]:
    if not algorithm.uses_rungs:
        return (budget.max,)
    rungs: list[int] = []
    resource = budget.min
    while resource < budget.max:
        rungs.append(resource)
        resource *= algorithm.eta
    rungs.append(budget.max)
    return tuple(rungs)
