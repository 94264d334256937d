"""Seeded sampling: the same trials for the same seed, inside their bounds, independent of the trial count."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from learnerkit.scheduler.sweeps.sampling import grid_configs, trial_configs
from learnerkit.scheduler.sweeps.space import Parameter, ParamType, SearchSpace

SPACE = SearchSpace(
    (
        Parameter("lr", ParamType.LOG_UNIFORM, low=1e-4, high=0.1, points=3),
        Parameter("width", ParamType.CHOICE, values=(16, 32, 64)),
        Parameter("dropout", ParamType.UNIFORM, low=0.0, high=0.5, points=2),
        Parameter("layers", ParamType.INTEGER, low=1, high=4),
    )
)


@given(seed=st.integers(min_value=0, max_value=2**63 - 1), trials=st.integers(min_value=1, max_value=40))
def test_samples_are_reproducible_and_in_bounds(seed: int, trials: int) -> None:
    configs = trial_configs(SPACE, seed=seed, trials=trials, grid=False)
    assert configs == trial_configs(SPACE, seed=seed, trials=trials, grid=False)
    assert configs[: trials // 2] == trial_configs(SPACE, seed=seed, trials=trials // 2, grid=False)
    for config in configs:
        assert 1e-4 <= float(config["lr"]) <= 0.1
        assert config["width"] in (16, 32, 64)
        assert 0.0 <= float(config["dropout"]) <= 0.5
        assert config["layers"] in (1, 2, 3, 4)


def test_another_seed_gives_other_trials() -> None:
    assert trial_configs(SPACE, seed=1, trials=5, grid=False) != trial_configs(SPACE, seed=2, trials=5, grid=False)


def test_the_grid_is_every_point_once_ends_included() -> None:
    grid = list(grid_configs(SPACE))
    assert len(grid) == SPACE.grid_size() == 3 * 3 * 2 * 4
    assert len({tuple(sorted(c.items())) for c in grid}) == len(grid)
    lrs = sorted({float(c["lr"]) for c in grid})
    assert math.isclose(lrs[0], 1e-4) and math.isclose(lrs[1], 1e-4**0.5 * 0.1**0.5) and math.isclose(lrs[2], 0.1)
    assert sorted({c["dropout"] for c in grid}) == [0.0, 0.5]
