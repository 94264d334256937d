"""The explainability evaluator: attributions of the job's TorchScript model's decisions on the evaluation data.

Each method (Captum's integrated gradients, a gradient method; kernel SHAP, model-agnostic) attributes the
probability of each example's predicted class to its features, against a baseline (the data's mean or zero). The
global importance of a feature is its share of the mean absolute attribution. Faithfulness (the correlation of a
feature's attribution with the probability lost when it alone is set to the baseline) and monotonicity (the
probability rises at every feature added in order of attribution), as AIX360 defines them, judge the explanations.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from captum.attr import IntegratedGradients
from matplotlib.figure import Figure

from learner.atomicfile import replacing
from learner.evaluation.report import REPORT_FOLDER, Failure, Report
from learner.evaluation.runner import InputError, Inputs, main
from learner.evaluation.spec import Bound, EvaluationSpec, KindSpec
from learner.modelfile import load_model
from learner.paths import result_dir

KIND = "explainability"
SHOWN_FEATURES = 5
"""Features listed per shown example and per method's top features in the readable summary."""
CHART_FEATURES = 20
"""Bars per method in the importance chart: the largest shares."""
BATCH_ROWS = 65536
"""Rows per model call of kernel SHAP's coalitions."""
BOUNDS = {"max_share": "feature_share", "min_faithfulness": "faithfulness", "min_monotonicity": "monotonicity"}


class Probabilities:
    """The model as the AIX360 metrics and Captum take it: softmax probabilities of a batch of flat examples."""

    def __init__(self, model: Any, input_shape: Sequence[int]) -> None:
        self.model = model
        self.input_shape = tuple(input_shape)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.model(x.reshape((-1, *self.input_shape))), dim=1)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self(torch.as_tensor(np.asarray(x, dtype=np.float32))).numpy().astype(np.float64)


def evaluate(spec: EvaluationSpec, inputs: Inputs) -> Report:
    if not isinstance(spec, KindSpec) or spec.kind != KIND:
        raise InputError(f"the explainability evaluator cannot run a {spec.kind} evaluation")
    started = time.monotonic()
    torch.manual_seed(0)
    fields = spec.fields
    table = inputs.table
    features = list(spec.data.features) or [c for c in table.header if c != spec.data.label]
    watched = list(fields.get("watch") or features)
    unknown = [name for name in watched if name not in features]
    if unknown:
        raise InputError(
            f"watch: {', '.join(map(repr, unknown))} {'is not a feature' if len(unknown) == 1 else 'are not features'} "
            f"of {table.path.name}; "
            f"features: {', '.join(features)}"
        )
    model, description = load_model(inputs.model)
    x = np.asarray(table.numbers(features), dtype=np.float32)
    size = int(np.prod(description.input_shape))
    if x.shape[1] != size:
        raise InputError(f"{table.path}: {x.shape[1]} feature columns; the model takes {size} values per example")
    labels = [row[0] for row in table.numbers([spec.data.label])]
    examples = x[: int(fields.get("examples") or 500)]
    baseline = x.mean(axis=0) if fields.get("baseline", "mean") == "mean" else np.zeros(size, dtype=np.float32)
    forward = Probabilities(model, description.input_shape)
    predicted = forward.predict_proba(examples).argmax(axis=1)
    results = {}
    for method in fields["methods"]:
        attributions = attribute(method, forward, examples, baseline, predicted, fields)
        results[method] = judge_explanations(forward, examples, attributions, baseline)
    shares = {method: importance(result["attributions"]) for method, result in results.items()}
    failures = judge(fields.get("thresholds") or [], results, shares, features, watched)
    metrics = describe(features, watched, results, shares, labels, predicted, int(fields.get("shown", 3)))
    chart = f"{spec.name}-importance.png"
    write_chart(result_dir() / REPORT_FOLDER / chart, features, shares)
    metrics["chart"] = chart
    return Report(spec.name, spec.kind, tuple(failures), metrics, round(time.monotonic() - started, 3))


def attribute(
    method: str,
    forward: Probabilities,
    examples: np.ndarray,
    baseline: np.ndarray,
    predicted: np.ndarray,
    fields: Mapping[str, Any],
) -> np.ndarray:
    """Each example's attribution of its predicted class's probability, one row per example."""
    if method == "integrated_gradients":
        steps = int(fields.get("steps") or 32)
        found = IntegratedGradients(forward).attribute(
            torch.as_tensor(examples),
            baselines=torch.as_tensor(baseline).unsqueeze(0),
            target=torch.as_tensor(predicted),
            n_steps=steps,
            internal_batch_size=max(steps, 1024),
        )
        return np.asarray(found.detach().numpy(), dtype=np.float64)
    return kernel_shap(forward, examples, baseline, predicted, int(fields.get("samples") or 200))


def kernel_shap(
    forward: Probabilities, examples: np.ndarray, baseline: np.ndarray, predicted: np.ndarray, samples: int
) -> np.ndarray:
    """Kernel SHAP (Lundberg and Lee, 2017) for every example at once: coalitions drawn from the Shapley kernel
    (each with its complement), shared by all examples, so one least-squares solve with one right-hand side per
    example gives every example's values; the constraint that they sum to f(x) - f(baseline) is kept exactly. A
    feature equal to its baseline in every example (a blank pixel) changes nothing: it gets 0 and no column."""
    varying = np.flatnonzero(np.any(examples != baseline[None, :], axis=0))
    count = len(varying)
    rng = np.random.default_rng(0)
    sizes = np.arange(1, count)
    kernel = (count - 1) / (sizes * (count - sizes))
    drawn = rng.choice(sizes, size=max(1, samples // 2), p=kernel / kernel.sum()) if count > 1 else []
    half = np.zeros((len(drawn), count), dtype=bool)
    for row, size in zip(half, drawn, strict=True):
        row[rng.choice(count, size=int(size), replace=False)] = True
    coalitions = np.concatenate([half, ~half]).astype(np.float64)
    target = np.arange(len(examples))
    full = forward.predict_proba(examples)[target, predicted]
    empty = forward.predict_proba(baseline[None, :])[0][predicted]
    total = full - empty
    values = np.zeros((len(examples), examples.shape[1]))
    if count <= 1:
        values[:, varying] = total[:, None]
        return values
    kept = np.empty((len(coalitions), len(examples)))
    per_call = max(1, BATCH_ROWS // len(examples))
    for k in range(0, len(coalitions), per_call):  # coalitions x examples rows per model call
        part = np.ones((len(coalitions[k : k + per_call]), examples.shape[1]), dtype=bool)
        part[:, varying] = coalitions[k : k + per_call] > 0
        masked = np.where(part[:, None, :], examples[None, :, :], baseline[None, None, :])
        found = forward.predict_proba(masked.reshape(-1, examples.shape[1])).reshape(len(part), len(examples), -1)
        kept[k : k + len(part)] = found[:, target, predicted]
    last = coalitions[:, -1:]
    design = coalitions[:, :-1] - last
    response = kept - empty[None, :] - last * total[None, :]
    solved = np.linalg.lstsq(design, response, rcond=None)[0].T
    values[:, varying] = np.concatenate([solved, (total - solved.sum(axis=1))[:, None]], axis=1)
    return values


def judge_explanations(
    forward: Probabilities, examples: np.ndarray, attributions: np.ndarray, baseline: np.ndarray
) -> dict[str, Any]:
    """Faithfulness (the mean over the examples where it is defined) and monotonicity (the share of examples
    where it holds), as AIX360's ``faithfulness_metric`` and ``monotonicity_metric`` define them for one example,
    computed for every example in a few batched model calls instead of one call per example and feature."""
    features = examples.shape[1]
    rows = np.arange(len(examples))
    predicted = forward.predict_proba(examples).argmax(axis=1)
    removed = np.empty((len(examples), features))
    for j in range(features):  # each feature alone set to the baseline
        masked = examples.copy()
        masked[:, j] = baseline[j]
        removed[:, j] = forward.predict_proba(masked)[rows, predicted]
    order = np.argsort(attributions, axis=1, kind="stable")  # least important first
    added = np.empty((len(examples), features))
    built = np.repeat(baseline[None, :], len(examples), axis=0)
    for k in range(features):  # features added to the baseline in order of attribution
        built[rows, order[:, k]] = examples[rows, order[:, k]]
        added[:, k] = forward.predict_proba(built)[rows, predicted]
    faithful = [-_correlation(a, r) for a, r in zip(attributions, removed, strict=True)]
    defined = [v for v in faithful if math.isfinite(v)]
    return {
        "attributions": attributions,
        "faithfulness": float(np.mean(defined)) if defined else math.nan,
        "faithfulness_undefined": len(faithful) - len(defined),
        "monotonicity": float(np.mean(np.all(np.diff(added, axis=1) >= 0, axis=1))),
    }


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's correlation; NaN where either side is constant (as ``np.corrcoef`` gives, without its warning)."""
    a, b = a - a.mean(), b - b.mean()
    scale = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum()) / scale if scale > 0 else math.nan


def importance(attributions: np.ndarray) -> np.ndarray:
    """Each feature's share of the mean absolute attribution (zeros where the model is flat)."""
    mean = np.abs(attributions).mean(axis=0)
    total = float(mean.sum())
    return mean / total if total > 0 else mean


def judge(
    thresholds: Sequence[Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Any]],
    shares: Mapping[str, np.ndarray],
    features: Sequence[str],
    watched: Sequence[str],
) -> list[Failure]:
    """Each threshold missed; a share names the watched feature that holds the most."""
    failures = []
    for threshold in thresholds:
        method = threshold["method"]
        for key, metric in BOUNDS.items():
            if key not in threshold:
                continue
            at: dict[str, Any] = {"method": method}
            if metric == "feature_share":
                feature = max(watched, key=lambda name: float(shares[method][features.index(name)]))
                value = float(shares[method][features.index(feature)])
                at["feature"] = feature
            else:
                value = float(results[method][metric])
            bound = Bound(maximum=threshold[key]) if key.startswith("max_") else Bound(minimum=threshold[key])
            if not (math.isfinite(value) and bound.holds(value)):
                failures.append(Failure(metric, value, bound.describe(), at))
    return failures


def describe(
    features: Sequence[str],
    watched: Sequence[str],
    results: Mapping[str, Mapping[str, Any]],
    shares: Mapping[str, np.ndarray],
    labels: Sequence[float],
    predicted: np.ndarray,
    shown: int,
) -> dict[str, Any]:
    """The report's metrics: per method its figures and top features (the readable summary prints the flat ones),
    and the first ``shown`` examples' largest attributions."""
    metrics: dict[str, Any] = {"examples": len(predicted), "features": len(features)}
    methods = {}
    for method, result in results.items():
        order = np.argsort(-shares[method], kind="stable")
        top = [{"feature": features[i], "share": round(float(shares[method][i]), 6)} for i in order]
        watched_top = max(watched, key=lambda name: float(shares[method][features.index(name)]))
        faithfulness = result["faithfulness"]
        methods[method] = {
            "faithfulness": None if not math.isfinite(faithfulness) else round(faithfulness, 6),
            "faithfulness_undefined": result["faithfulness_undefined"],
            "monotonicity": round(result["monotonicity"], 6),
            "feature_share": round(float(shares[method][features.index(watched_top)]), 6),
            "feature": watched_top,
            "importance": top,
        }
        metrics[f"{method} faithfulness"] = methods[method]["faithfulness"]
        metrics[f"{method} monotonicity"] = methods[method]["monotonicity"]
        metrics[f"{method} top features"] = ", ".join(f"{t['feature']} {t['share']:.3f}" for t in top[:SHOWN_FEATURES])
        metrics[f"{method} largest watched share"] = f"{watched_top} {methods[method]['feature_share']:.4f}"
    metrics["methods"] = methods
    explained = []
    for i in range(min(shown, len(predicted))):
        entry: dict[str, Any] = {"row": i + 2, "label": labels[i], "predicted": int(predicted[i])}
        for method, result in results.items():
            row = result["attributions"][i]
            order = np.argsort(-np.abs(row), kind="stable")[:SHOWN_FEATURES]
            entry[method] = [{"feature": features[j], "attribution": round(float(row[j]), 6)} for j in order]
            text = ", ".join(f"{features[j]} {float(row[j]):+.4f}" for j in order)
            metrics[f"line {i + 2} (label {labels[i]:g}, predicted {int(predicted[i])}) {method}"] = text
        explained.append(entry)
    metrics["explained"] = explained
    return metrics


def write_chart(path: Path, features: Sequence[str], shares: Mapping[str, np.ndarray]) -> None:
    """A bar chart of each method's global importance (its largest features), as PNG, written temp + rename."""
    figure = Figure(figsize=(8, 1.5 + 0.28 * CHART_FEATURES * len(shares) / 2), dpi=100)
    for k, (method, share) in enumerate(shares.items()):
        axes = figure.add_subplot(1, len(shares), k + 1)
        order = np.argsort(-share, kind="stable")[:CHART_FEATURES][::-1]
        axes.barh([features[i] for i in order], [float(share[i]) for i in order], color="#3b6ea5")
        axes.set_title(method.replace("_", " "))
        axes.set_xlabel("share of importance")
        axes.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as temporary:
        temporary.write_bytes(buffer.getvalue())


if __name__ == "__main__":
    raise SystemExit(main(evaluate, kind=KIND))
