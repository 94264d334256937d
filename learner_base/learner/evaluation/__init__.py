"""Evaluation steps run after training (docs/evaluations.md): what an evaluator is asked, how its report reads.

Stdlib only, like the rest of ``learner``: the manifest parser builds these specs, the evaluator images read them
back from JSON, and both judge and write reports with the same code. The attacks and the fairness metrics
themselves live in the evaluator images (``frameworks/robustness``, ``frameworks/fairness``).
"""

from learner.evaluation.report import Failure, Report, read_report, summary_text, write_report
from learner.evaluation.spec import (
    ATTACKS,
    FAIRNESS_METRICS,
    Bound,
    EvaluationData,
    EvaluationSpec,
    FairnessSpec,
    KindSpec,
    RobustnessSpec,
    RobustnessThreshold,
    SpecError,
    spec_from_dict,
)

__all__ = [
    "ATTACKS",
    "FAIRNESS_METRICS",
    "Bound",
    "EvaluationData",
    "EvaluationSpec",
    "Failure",
    "FairnessSpec",
    "KindSpec",
    "Report",
    "RobustnessSpec",
    "RobustnessThreshold",
    "SpecError",
    "read_report",
    "spec_from_dict",
    "summary_text",
    "write_report",
]
