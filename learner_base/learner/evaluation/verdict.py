"""Judge measured values against an evaluation's thresholds: each miss becomes a `Failure`, never an exception."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from learner.evaluation.report import Failure, Report
from learner.evaluation.spec import FairnessSpec, RobustnessSpec

ADVERSARIAL_ACCURACY = "adversarial_accuracy"


def judge_robustness(
    spec: RobustnessSpec, clean_accuracy: float, curve: Mapping[str, Sequence[tuple[float, float]]], seconds: float
) -> Report:
    """``curve``: attack -> [(epsilon, accuracy)] for every attack and epsilon of ``spec``."""
    failures = []
    for threshold in spec.thresholds:
        points = dict(curve.get(threshold.attack, ()))
        value = points.get(threshold.epsilon, math.nan)
        if not value >= threshold.min_accuracy:
            failures.append(
                Failure(
                    ADVERSARIAL_ACCURACY,
                    value,
                    f">= {threshold.min_accuracy:g}",
                    {"attack": threshold.attack, "epsilon": threshold.epsilon},
                )
            )
    metrics: dict[str, Any] = {
        "clean_accuracy": clean_accuracy,
        "curve": {
            attack: [{"epsilon": eps, "accuracy": acc} for eps, acc in points] for attack, points in curve.items()
        },
    }
    return Report(spec.name, spec.kind, tuple(failures), metrics, round(seconds, 3))


def judge_fairness(
    spec: FairnessSpec, metrics: Mapping[str, float], groups: Mapping[str, Mapping[str, Any]], seconds: float
) -> Report:
    """``metrics``: every group metric by name (NaN where undefined); ``groups``: per-group counts and rates."""
    failures = [
        Failure(metric, metrics.get(metric, math.nan), bound.describe())
        for metric, bound in (spec.thresholds or {}).items()
        if not bound.holds(metrics.get(metric, math.nan))
    ]
    shown = {key: (None if isinstance(v, float) and not math.isfinite(v) else v) for key, v in metrics.items()}
    return Report(spec.name, spec.kind, tuple(failures), {**shown, "groups": dict(groups)}, round(seconds, 3))
