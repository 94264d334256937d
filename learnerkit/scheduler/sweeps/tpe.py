"""Optuna's TPE sampler suggests a new trial's parameters from the results seen so far.

Optuna is used as a library through its ask-and-tell interface: every suggestion builds an in-memory study from
the sweep's stored results (`Observation`s, in trial order) and asks it once, so a restarted scheduler suggests
what the one before would have. The sampler's seed is the sweep's seed and the trial's index: the same results
in the same order give the same parameters.

With rungs (ASHA or Hyperband with ``sampler: tpe``) a trial that has not reached the last rung is told to the
study as *pruned* with its rung results as intermediate values, as Optuna's TPE + pruner sees it: TPE ranks
complete trials first, then pruned ones by how far they got and their last value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from learnerkit.scheduler.sweeps.space import Config, Parameter, ParamType, ParamValue, SearchSpace
from learnerkit.scheduler.sweeps.spec import Goal

SEED_SPACE = 2**32
"""Optuna's samplers take a seed below 2^32 (numpy's)."""


@dataclass(frozen=True)
class Observation:
    """A started trial as TPE is told it: its parameters, (budget, objective) at each rung it finished, and
    whether it reached the last rung."""

    parameters: Mapping[str, ParamValue]
    results: tuple[tuple[int, float], ...]
    completed: bool


def distribution(parameter: Parameter) -> BaseDistribution:
    if parameter.type is ParamType.CHOICE:
        return CategoricalDistribution(parameter.values)
    if parameter.type is ParamType.INTEGER:
        return IntDistribution(int(parameter.low), int(parameter.high))
    return FloatDistribution(parameter.low, parameter.high, log=parameter.type is ParamType.LOG_UNIFORM)


def tpe_config(
    space: SearchSpace, goal: Goal, *, seed: int, index: int, startup: int, seen: Sequence[Observation]
) -> Config:
    """Trial `index`'s parameters, suggested from `seen` (trial order); random for the first `startup` results."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = TPESampler(seed=(seed * 1_000_003 + index) % SEED_SPACE, n_startup_trials=startup)
    study = optuna.create_study(direction=goal.value, sampler=sampler)
    distributions = {p.name: distribution(p) for p in space.parameters}
    for observation in seen:
        if not observation.results:
            continue
        completed = observation.completed
        study.add_trial(
            create_trial(
                params={name: observation.parameters[name] for name in distributions},
                distributions=distributions,
                value=observation.results[-1][1] if completed else None,
                intermediate_values=dict(observation.results),
                state=TrialState.COMPLETE if completed else TrialState.PRUNED,
            )
        )
    trial = study.ask(distributions)
    return {name: _plain(trial.params[name]) for name in distributions}


def _plain(value: object) -> ParamValue:
    if isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"Optuna suggested {value!r}, not a number, string or boolean")
