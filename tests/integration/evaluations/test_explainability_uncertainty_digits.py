"""The explainability and uncertainty evaluator images on the digits model: scikit-learn's digits written to CSV
inside the robustness image, the example's network trained in the pytorch learner image, then each evaluator image
run as a job would run it (hardened, no network, no credentials, the model as TorchScript only). Their logic is
tested on the host (tests/unit/evaluators); this checks the images run it whole: reports, charts, a bad watched
feature refused at once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from learner.evaluation.spec import EvaluationData, KindSpec, spec_to_dict
from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration
TRAIN = REPO / "examples" / "digits-evaluated" / "model" / "train.py"
WRITE_DIGITS = (REPO / "examples" / "digits-evaluated" / "write_digits.py").read_text()
DIGITS = EvaluationData(file="digits-eval.csv", label="label")
EXPLAINED = KindSpec(
    "explained",
    "explainability",
    DIGITS,
    {
        "methods": ["integrated_gradients", "kernel_shap"],
        "watch": ["p0", "p36"],
        "examples": 100,
        "baseline": "mean",
        "steps": 16,
        "samples": 128,
        "shown": 2,
        "thresholds": [{"method": "kernel_shap", "max_share": 0.005}],
    },
)
UNCERTAIN = KindSpec(
    "uncertain",
    "uncertainty",
    DIGITS,
    {
        "bins": 15,
        "level": 0.9,
        "calibration_share": 0.5,
        "rejection_rates": [0.1],
        "thresholds": {"expected_calibration_error": {"max": 0.1}, "coverage": {"min": 0.85}},
    },
)
COMMAND = ["python", "/opt/learner/evaluator/evaluate.py"]


def _job(root: Path, name: str) -> Path:
    job = make_job_folder(root / name)
    (job / "control" / "start").write_text("", encoding="utf-8")
    return job


def _image(name: str, build_inputs: BuildInputs) -> str:
    [spec] = load_matrix(REPO).select([name])
    image_id = build_image(REPO, spec, build_inputs, lambda line: None).image_id
    assert image_id is not None
    return image_id


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, build_inputs: BuildInputs) -> Path:
    """A job folder holding the digits CSVs and the example's trained model."""
    job = _job(tmp_path_factory.mktemp("digits"), "train")
    for image, command in (
        (_image("robustness:1.20-cpu", build_inputs), ["python", "-c", WRITE_DIGITS]),
        (_image("pytorch:2.13-cpu", build_inputs), ["python", "/job/model/train_digits.py"]),
    ):
        shutil.copy(TRAIN, job / "model" / "train_digits.py")
        status, logs = output_of(LearnerRun(image, job, command), timeout=600)
        assert status == 0, logs[-2000:]
    return job


def _evaluate(root: Path, trained: Path, image: str, spec: KindSpec) -> tuple[int, str, Path]:
    job = _job(root, spec.name)
    shutil.copy(trained / "data" / "digits-eval.csv", job / "data" / "digits-eval.csv")
    for name in ("model.pt", "model.json"):
        shutil.copy(trained / "results" / "model" / name, job / "model" / name)
    env = {"EVALUATION_SPEC": json.dumps(spec_to_dict(spec))}
    status, logs = output_of(LearnerRun(image, job, COMMAND, env=env), timeout=600)
    return status, logs, job / "results" / "evaluations"


def _report(folder: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((folder / f"{name}.json").read_text(encoding="utf-8")))


def test_the_explainability_image_explains_the_digits_model(
    trained: Path, tmp_path: Path, build_inputs: BuildInputs
) -> None:
    image = _image("explainability:0.9-cpu", build_inputs)
    status, logs, folder = _evaluate(tmp_path, trained, image, EXPLAINED)
    assert status == 0, logs[-2000:]
    report = _report(folder, "explained")
    methods = report["metrics"]["methods"]
    assert set(methods) == {"integrated_gradients", "kernel_shap"}
    for found in methods.values():
        assert len(found["importance"]) == 64 and sum(i["share"] for i in found["importance"]) == pytest.approx(
            1, abs=1e-3
        )
        assert found["faithfulness"] > 0
    [failure] = report["failures"]
    assert failure["metric"] == "feature_share" and failure["at"] == {"method": "kernel_shap", "feature": "p36"}
    assert (folder / "explained-importance.png").read_bytes()[:4] == b"\x89PNG"
    assert "kernel_shap top features: " in (folder / "explained.txt").read_text(encoding="utf-8")


def test_a_watched_feature_not_in_the_data_fails_at_once(
    trained: Path, tmp_path: Path, build_inputs: BuildInputs
) -> None:
    image = _image("explainability:0.9-cpu", build_inputs)
    spec = KindSpec("unknown", "explainability", DIGITS, {**EXPLAINED.fields, "watch": ["postcode"]})
    status, logs, folder = _evaluate(tmp_path, trained, image, spec)
    assert status != 0 and "watch: 'postcode' is not a feature of digits-eval.csv" in logs
    assert not folder.exists() or not any(folder.iterdir())


def test_the_uncertainty_image_measures_the_digits_model(
    trained: Path, tmp_path: Path, build_inputs: BuildInputs
) -> None:
    image = _image("uncertainty:1.0-cpu", build_inputs)
    status, logs, folder = _evaluate(tmp_path, trained, image, UNCERTAIN)
    assert status == 0, logs[-2000:]
    report = _report(folder, "uncertain")
    metrics = report["metrics"]
    assert report["verdict"] == "passed", report["failures"]
    assert metrics["accuracy"] > 0.9 and metrics["coverage"] >= 0.85 and metrics["average_set_size"] >= 1
    assert metrics["selective"][0]["accuracy"] >= metrics["accuracy"]
    assert (folder / "uncertain-reliability.png").read_bytes()[:4] == b"\x89PNG"
