"""The fairness evaluator: AIF360's group metrics of the model's predictions (or a prediction column).

Rows whose protected attribute is one of ``privileged_groups`` form the privileged group, all others the
unprivileged one; the favourable outcome is ``favourable_label``. With a ``prediction`` column the evaluator
judges those predictions; without one it runs the job's saved TorchScript model on the features and takes the
class index as the predicted label.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pandas as pd
from aif360.datasets import BinaryLabelDataset
from aif360.metrics import ClassificationMetric

from learner.evaluation.report import Report
from learner.evaluation.runner import InputError, Inputs, main
from learner.evaluation.spec import EvaluationSpec, FairnessSpec
from learner.evaluation.verdict import judge_fairness
from learner.modelfile import load_model

PRIVILEGED, UNPRIVILEGED = {"group": 1.0}, {"group": 0.0}
METRICS = (
    "disparate_impact",
    "statistical_parity_difference",
    "equal_opportunity_difference",
    "average_odds_difference",
    "false_positive_rate_difference",
)
GROUP_RATES = {
    "base_rate": "base_rate",
    "selection_rate": "selection_rate",
    "true_positive_rate": "true_positive_rate",
    "false_positive_rate": "false_positive_rate",
    "accuracy": "accuracy",
}


def evaluate(spec: EvaluationSpec, inputs: Inputs) -> Report:
    if not isinstance(spec, FairnessSpec):
        raise InputError(f"the fairness evaluator cannot run a {spec.kind} evaluation")
    started = time.monotonic()
    table = inputs.table
    group = np.isin(table.column(spec.protected_attribute), spec.privileged_groups).astype(float)
    truth = (np.asarray(table.column(spec.data.label)) == spec.favourable_label).astype(float)
    predicted = _predictions(spec, inputs).astype(float)
    frame = pd.DataFrame({"group": group, "label": truth})
    actual = BinaryLabelDataset(
        df=frame, label_names=["label"], protected_attribute_names=["group"], favorable_label=1.0, unfavorable_label=0.0
    )
    judged = actual.copy(deepcopy=True)
    judged.labels = predicted.reshape(-1, 1)
    metric = ClassificationMetric(actual, judged, unprivileged_groups=[UNPRIVILEGED], privileged_groups=[PRIVILEGED])
    values = {name: _finite(getattr(metric, name)()) for name in METRICS}
    groups = {
        label: {
            "rows": int(metric.num_instances(privileged=privileged)),
            **{key: _finite(getattr(metric, method)(privileged=privileged)) for key, method in GROUP_RATES.items()},
        }
        for label, privileged in (("privileged", True), ("unprivileged", False))
    }
    return judge_fairness(spec, values, groups, time.monotonic() - started)


def _predictions(spec: FairnessSpec, inputs: Inputs) -> Any:
    table = inputs.table
    if spec.prediction is not None:
        return np.asarray(table.column(spec.prediction)) == spec.favourable_label
    try:
        favourable = int(spec.favourable_label)
    except ValueError as e:
        raise InputError(
            f"favourable_label {spec.favourable_label!r}: a model's prediction is a class index; give a whole "
            "number or a prediction column"
        ) from e
    import torch  # only where a model is run: the prediction-column path needs no torch

    excluded = {spec.data.label, spec.protected_attribute}
    features = list(spec.data.features) or [c for c in table.header if c not in excluded]
    model, description = load_model(inputs.model)
    x = torch.tensor(table.numbers(features), dtype=torch.float32).reshape((-1, *description.input_shape))
    with torch.no_grad():
        classes = model(x).argmax(dim=1).numpy()
    return classes == favourable


def _finite(value: Any) -> float:
    number = float(value)
    return number if math.isfinite(number) else math.nan


if __name__ == "__main__":
    raise SystemExit(main(evaluate))
