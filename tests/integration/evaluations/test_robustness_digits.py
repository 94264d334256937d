"""Robustness on real data needing no download: scikit-learn's handwritten digits, written to CSV by the test
inside the robustness image, a small network trained in the pytorch learner image (plainly, and adversarially),
then the robustness evaluator image run on each model as a job would run it: hardened, no network, no
credentials, the model as TorchScript only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from learner.evaluation.spec import EvaluationData, RobustnessSpec, RobustnessThreshold, spec_to_dict
from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration
TRAIN = REPO / "examples" / "digits-evaluated" / "model" / "train.py"
"""The example's training script: the test trains the models it evaluates as a user of the example would."""
EPSILONS = (0.05, 0.1, 0.2, 0.3)
SPEC = RobustnessSpec(
    name="digits",
    data=EvaluationData(file="digits-eval.csv", label="label"),
    attacks=("fgsm", "pgd"),
    epsilons=EPSILONS,
    thresholds=(RobustnessThreshold("pgd", 0.1, 0.6),),
)
WRITE_DIGITS = (REPO / "examples" / "digits-evaluated" / "write_digits.py").read_text()


def _job(root: Path, name: str) -> Path:
    job = make_job_folder(root / name)
    (job / "control" / "start").write_text("", encoding="utf-8")
    return job


def _image(name: str, build_inputs: BuildInputs) -> str:
    [spec] = load_matrix(REPO).select([name])
    image_id = build_image(REPO, spec, build_inputs, lambda line: None).image_id
    assert image_id is not None
    return image_id


def _run(image: str, job: Path, command: list[str], env: dict[str, str] | None = None) -> str:
    status, logs = output_of(LearnerRun(image, job, command, env=env or {}), timeout=600)
    assert status == 0, logs[-2000:]
    return logs


@pytest.fixture(scope="module")
def digits_models(tmp_path_factory: pytest.TempPathFactory, build_inputs: BuildInputs) -> dict[str, Path]:
    """The digits CSVs and two trained models: `plain` and its adversarially trained twin `adversarial`."""
    root = tmp_path_factory.mktemp("digits")
    robustness = _image("robustness:1.20-cpu", build_inputs)
    pytorch = _image("pytorch:2.13-cpu", build_inputs)
    data_job = _job(root, "data")
    _run(robustness, data_job, ["python", "-c", WRITE_DIGITS])
    models = {}
    for name, flags in (("plain", []), ("adversarial", ["--adversarial"])):
        job = _job(root, name)
        for csv in (data_job / "data").glob("*.csv"):
            shutil.copy(csv, job / "data" / csv.name)
        shutil.copy(TRAIN, job / "model" / "train_digits.py")
        _run(pytorch, job, ["python", "/job/model/train_digits.py", *flags])
        models[name] = job
    return models


def _evaluate(root: Path, trained: Path, build_inputs: BuildInputs) -> dict[str, Any]:
    job = _job(root, "evaluate")
    shutil.copy(trained / "data" / "digits-eval.csv", job / "data" / "digits-eval.csv")
    for name in ("model.pt", "model.json"):
        shutil.copy(trained / "results" / "model" / name, job / "model" / name)
    image = _image("robustness:1.20-cpu", build_inputs)
    logs = _run(
        image,
        job,
        ["python", "/opt/learner/evaluator/evaluate.py"],
        env={"EVALUATION_SPEC": json.dumps(spec_to_dict(SPEC))},
    )
    assert "evaluation digits (robustness)" in logs
    assert (job / "results" / "evaluations" / "digits.txt").read_text(encoding="utf-8").startswith("evaluation digits")
    return dict(json.loads((job / "results" / "evaluations" / "digits.json").read_text(encoding="utf-8")))


def test_the_curve_never_rises_and_the_plain_model_misses_the_threshold(
    digits_models: dict[str, Path], tmp_path: Path, build_inputs: BuildInputs
) -> None:
    report = _evaluate(tmp_path, digits_models["plain"], build_inputs)
    assert report["metrics"]["clean_accuracy"] > 0.9
    for attack in ("fgsm", "pgd"):
        points = report["metrics"]["curve"][attack]
        assert [p["epsilon"] for p in points] == list(EPSILONS)
        accuracies = [p["accuracy"] for p in points]
        assert accuracies == sorted(accuracies, reverse=True), (attack, accuracies)
        assert accuracies[-1] < report["metrics"]["clean_accuracy"]
    assert report["verdict"] == "failed"
    [failure] = report["failures"]
    assert failure["metric"] == "adversarial_accuracy" and failure["threshold"] == ">= 0.6"
    assert failure["at"] == {"attack": "pgd", "epsilon": 0.1} and failure["value"] < 0.6


def test_the_adversarially_trained_twin_passes(
    digits_models: dict[str, Path], tmp_path: Path, build_inputs: BuildInputs
) -> None:
    report = _evaluate(tmp_path, digits_models["adversarial"], build_inputs)
    assert report["verdict"] == "passed", report["failures"]
    assert report["metrics"]["curve"]["pgd"][1]["accuracy"] >= 0.6


def test_the_saved_model_is_torchscript_that_loads_without_unpickling(digits_models: dict[str, Path]) -> None:
    """A TorchScript file is a zip of code and tensors with no pickled Python objects of the job: its data.pkl
    holds only tensor references, which torch.jit.load reads with its own restricted unpickler."""
    import zipfile

    model = digits_models["plain"] / "results" / "model"
    assert json.loads((model / "model.json").read_text(encoding="utf-8")) == {
        "format": "torchscript",
        "input_shape": [64],
        "classes": 10,
    }
    with zipfile.ZipFile(model / "model.pt") as archive:
        names = archive.namelist()
    assert any(name.endswith("/code/__torch__.py") or "/code/" in name for name in names), names
    assert not any("train_digits" in name for name in names)
