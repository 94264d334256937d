"""The robustness evaluator: ART's FGSM and PGD against the job's TorchScript model, at every epsilon.

Accuracy at epsilon e counts an example as robust only when no attack at any epsilon up to e changed its class:
an adversarial example found inside a smaller ball is inside every larger one, so the curve never rises.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from art.attacks.evasion import FastGradientMethod, ProjectedGradientDescent
from art.estimators.classification import PyTorchClassifier

from learner.evaluation.report import Report
from learner.evaluation.runner import InputError, Inputs, main
from learner.evaluation.spec import EvaluationSpec, RobustnessSpec
from learner.evaluation.verdict import judge_robustness
from learner.modelfile import load_model

BATCH = 256


def evaluate(spec: EvaluationSpec, inputs: Inputs) -> Report:
    if not isinstance(spec, RobustnessSpec):
        raise InputError(f"the robustness evaluator cannot run a {spec.kind} evaluation")
    started = time.monotonic()
    torch.manual_seed(0)
    table = inputs.table
    features = list(spec.data.features) or [c for c in table.header if c != spec.data.label]
    model, description = load_model(inputs.model)
    x = np.asarray(table.numbers(features), dtype=np.float32)
    size = int(np.prod(description.input_shape))
    if x.shape[1] != size:
        raise InputError(f"{table.path}: {x.shape[1]} feature columns; the model takes {size} values per example")
    x = x.reshape((-1, *description.input_shape))
    labels = table.numbers([spec.data.label])
    y = np.asarray([row[0] for row in labels], dtype=np.int64)
    if y.min() < 0 or y.max() >= description.classes:
        raise InputError(f"{table.path}: column {spec.data.label!r} holds classes outside 0..{description.classes - 1}")
    classifier = PyTorchClassifier(
        model=model,
        loss=torch.nn.CrossEntropyLoss(),
        input_shape=description.input_shape,
        nb_classes=description.classes,
        clip_values=(float(x.min()), float(x.max())),
        device_type="cpu",
    )
    correct = _predict(classifier, x) == y
    clean_accuracy = float(correct.mean())
    curve = {}
    for attack_name in spec.attacks:
        robust = correct.copy()
        points = []
        for epsilon in spec.epsilons:
            adversarial = _attack(attack_name, classifier, epsilon, spec.pgd_steps).generate(x=x, y=y)
            robust &= _predict(classifier, adversarial) == y
            points.append((epsilon, float(robust.mean())))
        curve[attack_name] = points
    return judge_robustness(spec, clean_accuracy, curve, time.monotonic() - started)


def _predict(classifier: PyTorchClassifier, x: Any) -> Any:
    return np.argmax(classifier.predict(x, batch_size=BATCH), axis=1)


def _attack(name: str, classifier: PyTorchClassifier, epsilon: float, steps: int) -> Any:
    if name == "fgsm":
        return FastGradientMethod(classifier, eps=epsilon, batch_size=BATCH)
    return ProjectedGradientDescent(
        classifier, eps=epsilon, eps_step=2.5 * epsilon / steps, max_iter=steps, batch_size=BATCH, verbose=False
    )


if __name__ == "__main__":
    raise SystemExit(main(evaluate))
