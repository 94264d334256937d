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
    TPE = "tpe"
    HYPERBAND = "hyperband"
    PBT = "pbt"


class SamplerName(StrEnum):
    """Where a new trial's parameters come from: a seeded sample, or Optuna's TPE given the results so far."""

    RANDOM = "random"
    TPE = "tpe"


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
    """ASHA's and Hyperband's reduction factor: a rung keeps the top 1/eta; rung k's budget is min x eta^k (the
    last: max)."""
    sampler: SamplerName = SamplerName.RANDOM
    """How new trials are sampled (`tpe` is the algorithm `tpe`, or `asha`/`hyperband` with `sampler: tpe`)."""
    startup: int = 10
    """TPE: how many trials are sampled at random before the model is used (Optuna's ``n_startup_trials``)."""
    population: int = 4
    """PBT: the trials of one generation."""
    truncation: float = 0.25
    """PBT: the fraction of a generation, worst first, that copies one of the same fraction, best first."""
    resample: float = 0.25
    """PBT: the probability that a copied parameter is sampled anew rather than perturbed (x0.8 or x1.2)."""

    @property
    def uses_rungs(self) -> bool:
        return self.name in (
            AlgorithmName.ASHA,
            AlgorithmName.MEDIAN_STOP,
            AlgorithmName.HYPERBAND,
            AlgorithmName.PBT,
        )


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
    """Geometric for ASHA, the median rule and Hyperband (min x eta^k); PBT's are its intervals (min, 2 x min, ...),
    one per generation."""
    if not algorithm.uses_rungs:
        return (budget.max,)
    if algorithm.name is AlgorithmName.PBT:
        return (*range(budget.min, budget.max, budget.min), budget.max)
    rungs: list[int] = []
    resource = budget.min
    while resource < budget.max:
        rungs.append(resource)
        resource *= algorithm.eta
    rungs.append(budget.max)
    return tuple(rungs)
