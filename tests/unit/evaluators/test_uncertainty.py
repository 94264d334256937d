"""The uncertainty evaluator (frameworks/uncertainty) on the host: an over-confident model (its logits scaled up)
fails the calibration threshold and the same model after temperature scaling passes; conformal coverage on the
held-out rows within 0.03 of its level; selective accuracy named at the rate it missed."""

from __future__ import annotations

from typing import Any

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from tests.unit.evaluators.conftest import Job, evaluator, train  # noqa: E402

COVERAGE_TOLERANCE = 0.03
"""About three standard deviations of split conformal coverage with 2000 rows to calibrate and 2000 to measure."""
SPEC: dict[str, Any] = {
    "kind": "uncertainty",
    "name": "calibrated",
    "data": {"file": "eval.csv", "label": "label"},
    "bins": 15,
    "level": 0.9,
    "calibration_share": 0.5,
    "rejection_rates": [0.1, 0.3],
    "thresholds": {"expected_calibration_error": {"max": 0.05}, "coverage": {"min": 0.87}},
}


class Scaled(torch.nn.Module):  # type: ignore[misc]
    """The network's logits times ``factor``: above 1 over-confident, 1 / T temperature scaling."""

    def __init__(self, net: Any, factor: float) -> None:
        super().__init__()
        self.net, self.factor = net, factor

    def forward(self, x: Any) -> Any:
        return self.net(x) * self.factor


def blobs(seed: int, rows: int) -> tuple[Any, Any]:
    """Three overlapping Gaussian classes in two dimensions: no model is sure of every row."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=rows)
    centres = np.array([[0.0, 0.0], [1.5, 0.0], [0.75, 1.3]])
    return (centres[y] + rng.normal(size=(rows, 2))).astype(np.float32), y


@pytest.fixture(scope="module")
def net() -> Any:
    return train(*blobs(1, 2000), steps=200)


def run(job: Job, model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    job.save(model, 2, 3)
    x, y = blobs(2, 4000)
    job.write_csv("eval.csv", ("x1", "x2", "label"), np.column_stack([x, y]))
    assert job.run("uncertainty", spec) == 0
    return job.report(spec["name"])


def test_an_over_confident_model_fails_calibration_and_passes_after_temperature_scaling(job: Job, net: Any) -> None:
    confident = Scaled(net, 4.0)
    report = run(job, confident, SPEC)
    assert report["verdict"] == "failed"
    assert [f["metric"] for f in report["failures"]] == ["expected_calibration_error"]
    assert report["failures"][0]["value"] > 0.05 and report["failures"][0]["threshold"] == "<= 0.05"
    x, y = blobs(3, 2000)  # a validation set of the job's: the evaluation data is not used to fit T
    with torch.no_grad():
        logits = confident(torch.as_tensor(x)).numpy().astype(np.float64)
    temperature = evaluator("uncertainty").fit_temperature(logits, y)
    assert 3.0 < temperature < 6.0
    report = run(job, Scaled(confident, 1.0 / temperature), SPEC)
    assert report["verdict"] == "passed", report["failures"]
    assert report["metrics"]["expected_calibration_error"] < 0.05
    assert 0.9 < report["metrics"]["temperature"] < 1.1
    assert (job.results / report["metrics"]["chart"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95])
def test_conformal_coverage_is_its_level_on_held_out_rows(job: Job, net: Any, level: float) -> None:
    metrics = run(job, net, {**SPEC, "level": level, "thresholds": {}})["metrics"]
    assert (metrics["calibration_rows"], metrics["held_out_rows"]) == (2000, 2000)
    assert abs(metrics["coverage"] - level) <= COVERAGE_TOLERANCE
    assert 1.0 <= metrics["average_set_size"] <= 3.0


def test_selective_accuracy_rises_with_rejection_and_a_miss_names_its_rate(job: Job, net: Any) -> None:
    spec = {**SPEC, "thresholds": {"selective_accuracy": {"min": 0.99}, "brier_score": {"max": 0.1}}}
    report = run(job, net, spec)
    metrics = report["metrics"]
    low, high = (p["accuracy"] for p in metrics["selective"])
    assert metrics["accuracy"] < low < high
    missed = {(f["metric"], f["at"].get("rejection_rate")) for f in report["failures"]}
    assert ("brier_score", None) in missed
    assert missed == {("brier_score", None), ("selective_accuracy", 0.1), ("selective_accuracy", 0.3)}
    text = (job.results / "calibrated.txt").read_text(encoding="utf-8")
    assert f"selective_accuracy at rejection 0.3: {high:.4f}" in text
