"""The samplers on synthetic objectives, through the code the sweep driver runs (`suggest.new_config` and each
algorithm's decision core), no containers:

- TPE against random search on the same budget: the synthetic learner's loss at its full budget, whose optimum
  is known (lr 0.01, 3 layers, width 32, no dropout: 0.05), over 10 seeds; the median and the worst of each
  one's best, and the seeds where TPE's best is at least as good;
- PBT on a schedule-dependent objective (the best learning rate falls from 0.1 to 0.001 during training)
  against the best fixed-parameter trial: random search with the same number of full trainings (PBT's
  population), and the best fixed learning rate of a fine grid (an oracle no search has).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

from sweepcurves import synthetic_loss

from learnerkit.scheduler.sweeps.books import plan_of, restore_book
from learnerkit.scheduler.sweeps.decisions import Action
from learnerkit.scheduler.sweeps.space import Parameter, ParamType, ParamValue, SearchSpace
from learnerkit.scheduler.sweeps.spec import (
    Algorithm,
    AlgorithmName,
    Budget,
    BudgetUnit,
    Goal,
    Objective,
    SamplerName,
    SweepSpec,
)
from learnerkit.scheduler.sweeps.suggest import new_config

SPACE = SearchSpace(
    (
        Parameter("lr", ParamType.LOG_UNIFORM, low=1e-4, high=0.1),
        Parameter("width", ParamType.CHOICE, values=(16, 32, 64)),
        Parameter("dropout", ParamType.UNIFORM, low=0.0, high=0.5),
        Parameter("layers", ParamType.INTEGER, low=1, high=4),
    )
)
LOSS = Objective("val_loss", Goal.MINIMIZE)
FULL = 270
OPTIMUM = synthetic_loss({"lr": 0.01, "width": 32, "dropout": 0.0, "layers": 3}, FULL)

Parameters = Mapping[str, ParamValue]


def run(spec: SweepSpec, value: Callable[[int, Parameters, int | None], float]) -> list[float]:
    """Run `spec` to its end, one event at a time in trial order; `value(index, parameters, parent)` is a trial's
    objective at its rung. The objective of every trial that reported, in trial order."""
    book = restore_book(plan_of(spec))
    parameters: dict[int, Parameters] = {}
    results: dict[int, float] = {}
    queue = list(book.fill())
    while queue:
        decision = queue.pop(0)
        if decision.action is not Action.START:
            continue
        parameters[decision.trial] = new_config(spec, book, decision.trial, parameters)
        origin = book.origin(decision.trial)
        results[decision.trial] = value(decision.trial, parameters[decision.trial], origin and origin.parent)
        queue += book.report(decision.trial, results[decision.trial]) + book.fill()
    return [results[i] for i in sorted(results)]


def search(name: AlgorithmName, trials: int, seed: int) -> SweepSpec:
    algorithm = Algorithm(name, sampler=SamplerName.TPE if name is AlgorithmName.TPE else SamplerName.RANDOM)
    budget = Budget(BudgetUnit.STEP, FULL, FULL)
    return SweepSpec(Path("manifest.yml"), SPACE, LOSS, budget, algorithm, trials, concurrency=1, seed=seed)


def tpe_against_random(trials: int, seeds: int) -> None:
    best: dict[AlgorithmName, list[float]] = {AlgorithmName.TPE: [], AlgorithmName.RANDOM: []}
    for seed in range(seeds):
        for name in best:
            values = run(search(name, trials, seed), lambda _i, config, _p: synthetic_loss(config, FULL))
            best[name].append(min(values))
    tpe, rnd = best[AlgorithmName.TPE], best[AlgorithmName.RANDOM]
    print(f"TPE against random search: {trials} trials each, full budget, seeds 0-{seeds - 1}; optimum {OPTIMUM:.4f}")
    for label, values in (("TPE", tpe), ("random", rnd)):
        print(f"  {label:7s} best val_loss: median {statistics.median(values):.4f}, worst {max(values):.4f}")
    median_ratio = statistics.median(tpe) / statistics.median(rnd)
    worst_ratio = max(tpe) / max(rnd)
    wins = sum(1 for a, b in zip(tpe, rnd, strict=True) if a <= b)
    print(f"  TPE's median best / random's: {median_ratio:.3f}  (target <= 1)")
    print(f"  TPE's worst best / random's:  {worst_ratio:.3f}  (target <= 1)")
    print(f"  seeds where TPE's best is at least as good: {wins} of {seeds}")


STEPS = 300
INTERVAL = 20
PBT_SPACE = SearchSpace((Parameter("lr", ParamType.LOG_UNIFORM, low=1e-4, high=1.0),))


def gain(lr: float, step: int) -> float:
    """Progress of one step: largest where log10(lr) is the schedule's best then (from -1 down to -3)."""
    best = -1.0 - 2.0 * step / STEPS
    return 0.01 * math.exp(-((math.log10(lr) - best) ** 2) / 0.5)


def scheduled_loss(progress: float) -> float:
    """From 1 untrained down to exp(-3) with the best learning rate at every step."""
    return math.exp(-progress)


def progress_of(lr: float, start: int, end: int, before: float = 0.0) -> float:
    return before + sum(gain(lr, step) for step in range(start, end))


def trained(population: int) -> Callable[[int, Parameters, int | None], float]:
    """A PBT trial's loss: its interval trained with its lr on top of its parent's progress."""
    progress: dict[int, float] = {}

    def value(index: int, config: Parameters, parent: int | None) -> float:
        start = index // population * INTERVAL
        before = progress[parent] if parent is not None else 0.0
        progress[index] = progress_of(float(config["lr"]), start, start + INTERVAL, before)
        return scheduled_loss(progress[index])

    return value


def pbt_against_fixed(population: int, seeds: int) -> None:
    generations = STEPS // INTERVAL
    print(
        f"PBT against fixed parameters: the best lr falls from 0.1 to 0.001 over {STEPS} steps; population "
        f"{population}, {generations} intervals of {INTERVAL}"
    )
    oracle = min(scheduled_loss(progress_of(10 ** (-4 + 4 * k / 400), 0, STEPS)) for k in range(401))
    ratios: list[float] = []
    bests: list[float] = []
    for seed in range(seeds):
        budget = Budget(BudgetUnit.STEP, INTERVAL, STEPS)
        algorithm = Algorithm(AlgorithmName.PBT, population=population)
        spec = SweepSpec(
            Path("manifest.yml"), PBT_SPACE, LOSS, budget, algorithm, population * generations, population, seed
        )
        pbt_best = min(run(spec, trained(population))[-population:])
        fixed = run(
            SweepSpec(Path("manifest.yml"), PBT_SPACE, LOSS, Budget(BudgetUnit.STEP, STEPS, STEPS),
                      Algorithm(AlgorithmName.RANDOM), population, population, seed),
            lambda _i, config, _p: scheduled_loss(progress_of(float(config["lr"]), 0, STEPS)),
        )  # fmt: skip
        ratios.append(pbt_best / min(fixed))
        bests.append(pbt_best)
        print(f"  seed {seed}: PBT's best loss {pbt_best:.4f}, the best of {population} fixed trials {min(fixed):.4f}")
    print(f"  PBT's best / best fixed trial's: median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}"
          "  (target < 1)")  # fmt: skip
    print(
        f"  PBT's worst best / the best fixed lr of a 401-point grid (an oracle, {oracle:.4f}): "
        f"{max(bests) / oracle:.3f}  (below 1: no fixed lr does as well)"
    )
