"""The uncertainty evaluator: how far the job's TorchScript model's probabilities can be trusted.

Calibration over every row: the expected calibration error (equal-width confidence bins, each gap between its mean
confidence and its accuracy weighted by its share of the rows), the Brier score and a reliability diagram (PNG).
Split conformal prediction: a seeded shuffle puts ``calibration_share`` of the rows aside to calibrate the sets
(the score is one minus the label's probability; the threshold its finite-sample quantile at ``level``); the other
rows measure the sets' coverage and average size. Selective accuracy: the accuracy on the rows kept after
rejecting the given share of the least confident. The temperature that would calibrate the model best (fitted on
the calibration rows) is reported beside them.
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
from matplotlib.figure import Figure

from learner.atomicfile import replacing
from learner.evaluation.report import REPORT_FOLDER, Failure, Report
from learner.evaluation.runner import InputError, Inputs, main
from learner.evaluation.spec import Bound, EvaluationSpec, KindSpec
from learner.modelfile import load_model
from learner.paths import result_dir

KIND = "uncertainty"
SEED = 0
BATCH = 4096


def evaluate(spec: EvaluationSpec, inputs: Inputs) -> Report:
    if not isinstance(spec, KindSpec) or spec.kind != KIND:
        raise InputError(f"the uncertainty evaluator cannot run a {spec.kind} evaluation")
    started = time.monotonic()
    fields = spec.fields
    table = inputs.table
    features = list(spec.data.features) or [c for c in table.header if c != spec.data.label]
    model, description = load_model(inputs.model)
    x = np.asarray(table.numbers(features), dtype=np.float32)
    size = int(np.prod(description.input_shape))
    if x.shape[1] != size:
        raise InputError(f"{table.path}: {x.shape[1]} feature columns; the model takes {size} values per example")
    labels = np.asarray([row[0] for row in table.numbers([spec.data.label])])
    y = labels.astype(np.int64)
    if not np.array_equal(y, labels) or y.min() < 0 or y.max() >= description.classes:
        raise InputError(f"{table.path}: column {spec.data.label!r} holds classes outside 0..{description.classes - 1}")
    if len(y) < 4:
        raise InputError(f"{table.path}: {len(y)} rows; conformal sets need at least 4 (2 to calibrate, 2 to measure)")
    logits = model_logits(model, x.reshape((-1, *description.input_shape)))
    metrics = measure(logits, y, fields)
    chart = f"{spec.name}-reliability.png"
    write_diagram(result_dir() / REPORT_FOLDER / chart, metrics["reliability"])
    metrics["chart"] = chart
    for point in metrics["selective"]:  # flat, for the readable summary
        metrics[f"selective_accuracy at rejection {point['rejection_rate']:g}"] = point["accuracy"]
    failures = judge(fields.get("thresholds") or {}, metrics, float(fields.get("level", 0.9)))
    return Report(spec.name, spec.kind, tuple(failures), metrics, round(time.monotonic() - started, 3))


def model_logits(model: Any, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        parts = [model(torch.as_tensor(x[i : i + BATCH])).numpy() for i in range(0, len(x), BATCH)]
    return np.concatenate(parts).astype(np.float64)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))


def measure(logits: np.ndarray, y: np.ndarray, fields: Mapping[str, Any]) -> dict[str, Any]:
    probabilities = softmax(logits)
    level = float(fields.get("level", 0.9))
    order = np.random.default_rng(SEED).permutation(len(y))
    cut = min(max(2, round(len(y) * float(fields.get("calibration_share", 0.5)))), len(y) - 2)
    calibrating, held_out = order[:cut], order[cut:]
    coverage, set_size, quantile = conformal(
        probabilities[calibrating], y[calibrating], probabilities[held_out], y[held_out], level
    )
    rates = list(fields.get("rejection_rates") or [])
    ece, bins = calibration_error(probabilities, y, int(fields.get("bins", 15)))
    return {
        "rows": len(y),
        "accuracy": float((probabilities.argmax(axis=1) == y).mean()),
        "expected_calibration_error": ece,
        "brier_score": brier_score(probabilities, y),
        "negative_log_likelihood": float(-np.log(np.maximum(probabilities[np.arange(len(y)), y], 1e-12)).mean()),
        "temperature": fit_temperature(logits[calibrating], y[calibrating]),
        "level": level,
        "coverage": coverage,
        "average_set_size": set_size,
        "conformal_threshold": quantile,
        "calibration_rows": len(calibrating),
        "held_out_rows": len(held_out),
        "selective": [{"rejection_rate": r, "accuracy": selective_accuracy(probabilities, y, r)} for r in rates],
        "reliability": bins,
    }


def calibration_error(probabilities: np.ndarray, y: np.ndarray, bins: int) -> tuple[float, list[dict[str, Any]]]:
    """The expected calibration error over ``bins`` equal-width bins of the top-class confidence, and the bins."""
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    ece = 0.0
    table = []
    for b in range(bins):
        inside = which == b
        count = int(inside.sum())
        mean_confidence = float(confidence[inside].mean()) if count else None
        accuracy = float(correct[inside].mean()) if count else None
        if mean_confidence is not None and accuracy is not None:
            ece += count / len(y) * abs(mean_confidence - accuracy)
        table.append(
            {
                "low": float(edges[b]),
                "high": float(edges[b + 1]),
                "rows": count,
                "confidence": mean_confidence,
                "accuracy": accuracy,
            }
        )
    return float(ece), table


def brier_score(probabilities: np.ndarray, y: np.ndarray) -> float:
    """The mean over rows of the squared distance between the probabilities and the one-hot label (0 to 2)."""
    onehot = np.zeros_like(probabilities)
    onehot[np.arange(len(y)), y] = 1.0
    return float(((probabilities - onehot) ** 2).sum(axis=1).mean())


def conformal(
    calibration: np.ndarray, calibration_y: np.ndarray, held_out: np.ndarray, held_out_y: np.ndarray, level: float
) -> tuple[float, float, float]:
    """Split conformal sets (score: one minus a class's probability; the predicted class always in, so no set is
    empty): the held-out coverage, the average set size and the score threshold (the calibration scores'
    ceil((n + 1) level)-th smallest; 1 where that rank exceeds n)."""
    scores = 1.0 - calibration[np.arange(len(calibration_y)), calibration_y]
    n = len(scores)
    rank = math.ceil((n + 1) * level)
    threshold = 1.0 if rank > n else float(np.sort(scores)[rank - 1])
    sets = (1.0 - held_out) <= threshold
    sets[np.arange(len(held_out)), held_out.argmax(axis=1)] = True  # never empty: a superset keeps the coverage
    coverage = float(sets[np.arange(len(held_out_y)), held_out_y].mean())
    return coverage, float(sets.sum(axis=1).mean()), threshold


def selective_accuracy(probabilities: np.ndarray, y: np.ndarray, rejection_rate: float) -> float:
    """The accuracy on the rows kept after rejecting ``rejection_rate`` of them, the least confident first."""
    keep = max(1, len(y) - math.floor(rejection_rate * len(y)))
    kept = np.argsort(-probabilities.max(axis=1), kind="stable")[:keep]
    return float((probabilities[kept].argmax(axis=1) == y[kept]).mean())


def fit_temperature(logits: np.ndarray, y: np.ndarray) -> float:
    """The temperature T minimising the negative log-likelihood of softmax(logits / T), found by golden-section
    search on log T in [-4, 4] (the likelihood is convex in 1 / T)."""

    def loss(log_t: float) -> float:
        p = softmax(logits / math.exp(log_t))
        return float(-np.log(np.maximum(p[np.arange(len(y)), y], 1e-12)).mean())

    low, high = -4.0, 4.0
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if loss(a) < loss(b):
            high = b
        else:
            low = a
    return round(math.exp((low + high) / 2), 4)


def judge(thresholds: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, Any], level: float) -> list[Failure]:
    """Each threshold missed; coverage and set size name the level, selective accuracy every rate it missed at."""
    failures = []
    for metric, raw in thresholds.items():
        bound = Bound(raw.get("min"), raw.get("max"))
        if metric == "selective_accuracy":
            measured = [(p["accuracy"], {"rejection_rate": p["rejection_rate"]}) for p in metrics["selective"]]
        else:
            measured = [
                (float(metrics[metric]), {"level": level} if metric in ("coverage", "average_set_size") else {})
            ]
        failures += [
            Failure(metric, value, bound.describe(), at)
            for value, at in measured
            if not (math.isfinite(value) and bound.holds(value))
        ]
    return failures


def write_diagram(path: Path, bins: Sequence[Mapping[str, Any]]) -> None:
    """The reliability diagram: each bin's accuracy against its confidence, the diagonal perfect calibration."""
    figure = Figure(figsize=(5, 5), dpi=100)
    axes = figure.add_subplot(1, 1, 1)
    filled = [b for b in bins if b["rows"]]
    width = bins[0]["high"] - bins[0]["low"]
    axes.bar(
        [b["low"] for b in filled],
        [b["accuracy"] for b in filled],
        width=width,
        align="edge",
        color="#3b6ea5",
        edgecolor="white",
        label="accuracy",
    )
    axes.plot(
        [b["confidence"] for b in filled],
        [b["confidence"] for b in filled],
        "o",
        color="#c0392b",
        markersize=3,
        label="mean confidence",
    )
    axes.plot([0, 1], [0, 1], "--", color="gray", linewidth=1)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("confidence")
    axes.set_ylabel("accuracy")
    axes.set_title("reliability")
    axes.legend(loc="upper left")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as temporary:
        temporary.write_bytes(buffer.getvalue())


if __name__ == "__main__":
    raise SystemExit(main(evaluate, kind=KIND))
