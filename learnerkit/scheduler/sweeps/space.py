"""The search space: the parameters of a sweep and how each is sampled or enumerated.

Pure: a sample draws from a `random.Random` the caller seeds, so one seed gives the same trials on every
scheduler, before and after a restart.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

ParamValue = float | int | str | bool
Config = Mapping[str, ParamValue]


class ParamType(StrEnum):
    LOG_UNIFORM = "log_uniform"
    UNIFORM = "uniform"
    INTEGER = "integer"
    CHOICE = "choice"


@dataclass(frozen=True)
class Parameter:
    """One parameter. `low`/`high` bound the three numeric types; `values` lists a choice's options.

    `points`: how many evenly spaced values a grid takes of a `uniform` or `log_uniform` parameter (None:
    the parameter cannot be gridded; the search file refuses that for `algorithm: grid`).
    """

    name: str
    type: ParamType
    low: float = 0.0
    high: float = 0.0
    values: tuple[ParamValue, ...] = ()
    points: int | None = None

    def sample(self, rng: random.Random) -> ParamValue:
        if self.type is ParamType.CHOICE:
            return self.values[rng.randrange(len(self.values))]
        if self.type is ParamType.INTEGER:
            return rng.randint(int(self.low), int(self.high))
        if self.type is ParamType.LOG_UNIFORM:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def grid_size(self) -> int:
        if self.type is ParamType.CHOICE:
            return len(self.values)
        if self.type is ParamType.INTEGER:
            return int(self.high) - int(self.low) + 1
        return self.points or 1


@dataclass(frozen=True)
class SearchSpace:
    parameters: tuple[Parameter, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def grid_size(self) -> int:
        return math.prod(p.grid_size() for p in self.parameters)
