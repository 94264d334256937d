"""A new trial's parameters, as its sweep's algorithm and sampler say: a grid's point, a seeded sample, Optuna's
TPE suggestion from the results so far, or (PBT) its parent's parameters, explored where it exploits."""

from __future__ import annotations

from collections.abc import Mapping

from learnerkit.scheduler.sweeps.books import SweepBook
from learnerkit.scheduler.sweeps.decisions import TrialState
from learnerkit.scheduler.sweeps.pbt import perturbed
from learnerkit.scheduler.sweeps.sampling import grid_config, sampled_config, trial_configs
from learnerkit.scheduler.sweeps.space import Config, ParamValue
from learnerkit.scheduler.sweeps.spec import AlgorithmName, SamplerName, SweepSpec
from learnerkit.scheduler.sweeps.tpe import Observation, tpe_config


def observations(
    spec: SweepSpec, book: SweepBook, parameters: Mapping[int, Mapping[str, ParamValue]]
) -> list[Observation]:
    """The started trials with their rung results, in trial order, as TPE is told them."""
    seen = []
    for record in sorted(book.records(), key=lambda r: r.index):
        if record.index not in parameters or not record.results:
            continue
        first = book.first_rung(record.index)
        results = tuple((spec.rungs[first + k], value) for k, value in enumerate(record.results))
        completed = record.state is TrialState.COMPLETED
        seen.append(Observation(parameters[record.index], results, completed))
    return seen


def new_config(
    spec: SweepSpec, book: SweepBook, index: int, parameters: Mapping[int, Mapping[str, ParamValue]]
) -> Config:
    """Trial `index`'s parameters when it starts; `parameters`: those of the trials started before it."""
    algorithm = spec.algorithm
    if algorithm.name is AlgorithmName.GRID:
        return grid_config(spec.space, index)
    if algorithm.name is AlgorithmName.PBT:
        origin = book.origin(index)
        if origin is None:
            return sampled_config(spec.space, spec.seed, index)
        parent = parameters[origin.parent]
        if not origin.exploit:
            return dict(parent)
        return perturbed(spec.space, parent, seed=spec.seed, index=index, resample=algorithm.resample)
    if algorithm.sampler is SamplerName.TPE:
        seen = observations(spec, book, parameters)
        return tpe_config(
            spec.space, spec.objective.goal, seed=spec.seed, index=index, startup=algorithm.startup, seen=seen
        )
    return sampled_config(spec.space, spec.seed, index)


def known_configs(spec: SweepSpec) -> list[Config]:
    """The trials' parameters that the search file alone fixes, in trial order: every trial's for random and grid
    search, PBT's first generation, none where TPE samples (it chooses from the results)."""
    if spec.algorithm.sampler is SamplerName.TPE:
        return []
    trials = spec.algorithm.population if spec.algorithm.name is AlgorithmName.PBT else spec.trials
    return trial_configs(spec.space, seed=spec.seed, trials=trials, grid=spec.algorithm.name is AlgorithmName.GRID)
