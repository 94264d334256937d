"""The trials' configurations: seeded samples of the space, or its grid.

Trial `i` draws from its own generator seeded with ``"<seed>:<i>"``, so a trial's parameters depend on the
seed and its index only: the same on every scheduler, and unchanged when a sweep asks for more trials.
"""

from __future__ import annotations

import itertools
import random

from learnerkit.scheduler.sweeps.space import Config, SearchSpace


def sampled_config(space: SearchSpace, seed: int, index: int) -> Config:
    """Trial `index`'s parameters (0-based)."""
    rng = random.Random(f"{seed}:{index}")  # noqa: S311 (reproducible samples, not secrets)
    return {p.name: p.sample(rng) for p in space.parameters}


def grid_configs(space: SearchSpace) -> list[Config]:
    """Every point of the grid, the first parameter varying slowest."""
    axes = [p.grid() for p in space.parameters]
    return [dict(zip(space.names, point, strict=True)) for point in itertools.product(*axes)]


def trial_configs(space: SearchSpace, *, seed: int, trials: int, grid: bool) -> list[Config]:
    """The `trials` configurations of a sweep, in trial order."""
    if grid:
        return grid_configs(space)[:trials]
    return [sampled_config(space, seed, i) for i in range(trials)]
