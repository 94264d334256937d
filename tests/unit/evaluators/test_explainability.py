"""The explainability evaluator (frameworks/explainability) on the host: a model leaning on a planted proxy feature
fails the share threshold naming it, its twin trained without the proxy passes; faithfulness and monotonicity as
AIX360 computes them; an unknown watched feature fails the round at once naming it, nothing stored."""

from __future__ import annotations

from typing import Any

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("torch")
pytest.importorskip("captum")

from tests.unit.evaluators.conftest import Job, evaluator, train  # noqa: E402

HEADER = ("a", "b", "c", "zip", "label")
SPEC: dict[str, Any] = {
    "kind": "explainability",
    "name": "proxy",
    "data": {"file": "eval.csv", "label": "label"},
    "methods": ["integrated_gradients", "kernel_shap"],
    "watch": ["zip"],
    "examples": 120,
    "samples": 120,
    "shown": 2,
    "thresholds": [
        {"method": "integrated_gradients", "max_share": 0.3, "min_faithfulness": 0.3},
        {"method": "kernel_shap", "max_share": 0.3},
    ],
}


def world(seed: int, proxy: bool, rows: int = 2000) -> tuple[Any, Any]:
    """Label from a and b with noise; ``zip`` a near copy of the label (a proxy) or noise."""
    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(size=(3, rows))
    y = (a + 0.5 * b + rng.normal(scale=0.5, size=rows) > 0).astype(np.int64)
    zip_code = (2.0 * y - 1 + rng.normal(scale=0.1, size=rows)) if proxy else rng.normal(size=rows)
    return np.stack([a, b, c, zip_code], axis=1).astype(np.float32), y


def evaluate(job: Job, proxy: bool) -> dict[str, Any]:
    job.save(train(*world(1, proxy)), 4, 2)
    x, y = world(2, proxy=True)
    job.write_csv("eval.csv", HEADER, np.column_stack([x, y]))
    assert job.run("explainability", SPEC) == 0
    return job.report("proxy")


def test_a_model_leaning_on_a_proxy_fails_naming_it(job: Job) -> None:
    report = evaluate(job, proxy=True)
    assert report["verdict"] == "failed"
    shares = [f for f in report["failures"] if f["metric"] == "feature_share"]
    assert {f["at"]["method"] for f in shares} == {"integrated_gradients", "kernel_shap"}
    assert all(f["at"]["feature"] == "zip" and f["value"] > 0.5 and f["threshold"] == "<= 0.3" for f in shares)
    top = report["metrics"]["methods"]["integrated_gradients"]["importance"][0]
    assert top["feature"] == "zip"
    text = (job.results / "proxy.txt").read_text(encoding="utf-8")
    assert "missed: feature_share = " in text and "feature zip" in text
    assert "integrated_gradients top features: zip " in text


def test_its_twin_trained_without_the_proxy_passes(job: Job) -> None:
    report = evaluate(job, proxy=False)
    assert report["verdict"] == "passed", report["failures"]
    methods = report["metrics"]["methods"]
    for method in ("integrated_gradients", "kernel_shap"):
        assert methods[method]["feature_share"] < 0.2
        assert [t["feature"] for t in methods[method]["importance"][:2]] == ["a", "b"]
    assert methods["integrated_gradients"]["faithfulness"] > 0.3
    assert 0 <= methods["kernel_shap"]["monotonicity"] <= 1
    explained = report["metrics"]["explained"]
    assert [e["row"] for e in explained] == [2, 3] and len(explained[0]["kernel_shap"]) == 4
    chart = job.results / report["metrics"]["chart"]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_watched_feature_not_in_the_data_fails_at_once_naming_it(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    job.save(train(*world(1, proxy=False), steps=5), 4, 2)
    x, y = world(2, proxy=True, rows=20)
    job.write_csv("eval.csv", HEADER, np.column_stack([x, y]))
    assert job.run("explainability", {**SPEC, "watch": ["zip", "postcode"]}) == 2
    error = capsys.readouterr().err
    assert "watch: 'postcode' is not a feature of eval.csv; features: a, b, c, zip" in error
    assert not job.results.exists()


def test_faithfulness_and_monotonicity_are_aix360s() -> None:
    metrics = pytest.importorskip("aix360.metrics")
    torch = pytest.importorskip("torch")
    module = evaluator("explainability")
    x, y = world(1, proxy=False)
    forward = module.Probabilities(torch.jit.trace(train(x, y, steps=100), torch.zeros(1, 4)), [4])
    examples, baseline = x[:60], x.mean(axis=0)
    predicted = forward.predict_proba(examples).argmax(axis=1)
    for method in ("integrated_gradients", "kernel_shap"):
        found = module.attribute(method, forward, examples, baseline, predicted, {"samples": 64})
        ours = module.judge_explanations(forward, examples, found, baseline)
        faithful = [metrics.faithfulness_metric(forward, e, a, baseline) for e, a in zip(examples, found, strict=True)]
        monotonic = [metrics.monotonicity_metric(forward, e, a, baseline) for e, a in zip(examples, found, strict=True)]
        assert ours["faithfulness"] == pytest.approx(float(np.nanmean(faithful)), abs=1e-6)
        assert ours["monotonicity"] == pytest.approx(float(np.mean(monotonic)))


def test_kernel_shap_values_add_up_to_the_prediction_less_the_baselines() -> None:
    torch = pytest.importorskip("torch")
    module = evaluator("explainability")
    x, y = world(1, proxy=True)
    forward = module.Probabilities(torch.jit.trace(train(x, y, steps=100), torch.zeros(1, 4)), [4])
    examples, baseline = x[:50], x.mean(axis=0)
    predicted = forward.predict_proba(examples).argmax(axis=1)
    values = module.kernel_shap(forward, examples, baseline, predicted, 64)
    gap = (
        forward.predict_proba(examples)[np.arange(50), predicted] - forward.predict_proba(baseline[None])[0][predicted]
    )
    assert values.sum(axis=1) == pytest.approx(gap, abs=1e-6)
