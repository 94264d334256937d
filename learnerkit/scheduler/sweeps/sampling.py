"""The trials' configurations: seeded samples of the space, or points of its grid, one trial at a time.

Trial `i` draws from its own generator seeded with ``"<seed>:<i>"``, so a trial's parameters depend on the
seed and its index only: the same on every scheduler, and unchanged when a sweep asks for more trials.
A grid's point `i` is computed from `i` alone (its digits in the mixed radix of the axes' sizes), so a grid
of 10^9 points costs what its trials cost, never its size.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from learnerkit.scheduler.sweeps.space import Config, Parameter, ParamType, ParamValue, SearchSpace


def sampled_config(space: SearchSpace, seed: int, index: int) -> Config:
    """Trial `index`'s parameters (0-based)."""
    rng = random.Random(f"{seed}:{index}")  # noqa: S311 (reproducible samples, not secrets)
    return {p.name: p.sample(rng) for p in space.parameters}


def grid_value(parameter: Parameter, position: int) -> ParamValue:
    """The `position`-th value (0-based) of the parameter's grid, in order."""
    if parameter.type is ParamType.CHOICE:
        return parameter.values[position]
    if parameter.type is ParamType.INTEGER:
        return int(parameter.low) + position
    count = parameter.points or 1
    if count == 1:
        return parameter.low
    if parameter.type is ParamType.LOG_UNIFORM:
        lo, hi = math.log(parameter.low), math.log(parameter.high)
        return math.exp(lo + (hi - lo) * position / (count - 1))
    return parameter.low + (parameter.high - parameter.low) * position / (count - 1)


def grid_config(space: SearchSpace, index: int) -> Config:
    """The grid's point `index` (0-based), the first parameter varying slowest."""
    positions: list[int] = []
    for parameter in reversed(space.parameters):
        index, position = divmod(index, parameter.grid_size())
        positions.append(position)
    if index:
        raise IndexError(f"the grid has {space.grid_size()} points")
    return {p.name: grid_value(p, pos) for p, pos in zip(space.parameters, reversed(positions), strict=True)}


def grid_configs(space: SearchSpace) -> Iterator[Config]:
    """Every point of the grid in order, one at a time."""
    return (grid_config(space, i) for i in range(space.grid_size()))


def trial_config(space: SearchSpace, *, seed: int, index: int, grid: bool) -> Config:
    """Trial `index`'s configuration: the grid's point `index`, or its seeded sample."""
    return grid_config(space, index) if grid else sampled_config(space, seed, index)


def trial_configs(space: SearchSpace, *, seed: int, trials: int, grid: bool) -> list[Config]:
    """The `trials` configurations of a sweep, in trial order."""
    return [trial_config(space, seed=seed, index=i, grid=grid) for i in range(trials)]
