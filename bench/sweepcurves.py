"""The synthetic learner's loss curve, as text the learner containers run and as the function the simulation
calls: one formula for both halves of bench/sweeps.py.

A configuration's floor, plus a decay whose speed depends on the learning rate: curves cross, so a fast
learner can look best early and end worse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import cast

LOSS_FORMULA = """\
def synthetic_loss(config, step):
    lr = float(config["lr"])
    distance = abs(math.log10(lr) + 2.0)  # best near lr = 0.01
    floor = 0.05 + 0.08 * distance**2 + 0.02 * abs(int(config["layers"]) - 3) + 0.1 * float(config["dropout"]) ** 2
    floor += {16: 0.04, 32: 0.0, 64: 0.01}[int(config["width"])]
    speed = 20.0 * lr**0.5
    return floor + 1.5 * math.exp(-speed * step / 30.0)
"""

_namespace: dict[str, object] = {"math": math}
exec(LOSS_FORMULA, _namespace)  # this module's own constant: the text the learner containers run
synthetic_loss = cast(Callable[[Mapping[str, object], int], float], _namespace["synthetic_loss"])
