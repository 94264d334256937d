"""The evaluations' cost on this machine: scikit-learn's digits, a small PyTorch network, then FGSM and PGD at 4
epsilons each, the explainability evaluation of 500 examples (integrated gradients and kernel SHAP) and the
uncertainty evaluation (docs/evaluations.md). Trains the model in the pytorch learner image and evaluates it in
the evaluator images, all hardened as in a job; prints the wall time of each and its ratio to the training (the
baseline measured in the same run). The issue's budgets on 2 cores: robustness and explainability within 120 s,
uncertainty within 30 s. ``--host``: the training and the explainability and uncertainty evaluators run as
processes of this host's venv instead (their libraries are in the dev extra), for a figure before the images exist.

python bench/evaluations.py [--epsilons 0.05 0.1 0.2 0.3] [--host]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from learner.evaluation.spec import EvaluationData, KindSpec, RobustnessSpec, spec_to_dict
from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "digits-evaluated" / "model" / "train.py"
BUDGET_S = {"robustness": 120.0, "explainability": 120.0, "uncertainty": 30.0}
DIGITS = EvaluationData(file="digits-eval.csv", label="label")
KINDS = {
    "explainability": KindSpec(
        "bench-explainability",
        "explainability",
        DIGITS,
        {
            "methods": ["integrated_gradients", "kernel_shap"],
            "examples": 500,
            "baseline": "mean",
            "steps": 32,
            "samples": 200,
            "shown": 3,
            "watch": None,
            "thresholds": [],
        },
    ),
    "uncertainty": KindSpec(
        "bench-uncertainty",
        "uncertainty",
        DIGITS,
        {"bins": 15, "level": 0.9, "calibration_share": 0.5, "rejection_rates": [0.1, 0.2], "thresholds": {}},
    ),
}
WRITE_DIGITS = (REPO / "examples" / "digits-evaluated" / "write_digits.py").read_text()


def _image(name: str) -> str:
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    [spec] = load_matrix(REPO).select([name])
    image_id = build_image(REPO, spec, inputs, lambda line: None).image_id
    if image_id is None:
        raise SystemExit(f"{name} is not built")
    return image_id


def _job(root: Path, name: str) -> Path:
    job = make_job_folder(root / name)
    (job / "control" / "start").write_text("", encoding="utf-8")
    return job


def _timed(image: str, job: Path, command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    status, logs = output_of(LearnerRun(image, job, command, env=env or {}), timeout=900)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} exited {status}:\n{logs[-2000:]}")
    return time.monotonic() - started


def _host(job: Path, command: list[str], env: dict[str, str] | None = None) -> float:
    """Wall time of ``command`` run by this venv's Python with the job folder's variables (``--host``)."""
    folders = {"DATA_DIR": job / "data", "MODEL_DIR": job / "model", "RESULT_DIR": job / "results"}
    variables = {**os.environ, **{k: str(v) for k, v in folders.items()}, **(env or {})}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-W", "ignore", *command], env=variables, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return time.monotonic() - started


def _host_job(root: Path, name: str) -> Path:
    job = root / name
    for folder in ("data", "model", "results"):
        (job / folder).mkdir(parents=True)
    return job


def _print(name: str, what: str, seconds: float, inside: float, training: float) -> None:
    budget = BUDGET_S[name]
    print(
        f"{name} ({what}): {seconds:7.1f} s  (in the evaluator: {inside:.1f} s); / training: "
        f"{seconds / training:.2f}; budget {budget:.0f} s: {'within' if seconds <= budget else 'OVER'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3])
    parser.add_argument("--host", action="store_true", help="train and run explainability and uncertainty here")
    args = parser.parse_args()
    if args.host:
        _main_host()
        return
    robustness, pytorch = _image("robustness:1.20-cpu"), _image("pytorch:2.13-cpu")
    evaluators = {"explainability": _image("explainability:0.9-cpu"), "uncertainty": _image("uncertainty:1.0-cpu")}
    with tempfile.TemporaryDirectory(prefix="bench-evaluations-") as scratch:
        root = Path(scratch)
        job = _job(root, "train")
        _timed(robustness, job, ["python", "-c", WRITE_DIGITS])
        shutil.copy(TRAIN, job / "model" / "train.py")
        training = _timed(pytorch, job, ["python", "/job/model/train.py"])
        evaluation_job = _job(root, "evaluate")
        shutil.copy(job / "data" / "digits-eval.csv", evaluation_job / "data" / "digits-eval.csv")
        for name in ("model.pt", "model.json"):
            shutil.copy(job / "results" / "model" / name, evaluation_job / "model" / name)
        spec = RobustnessSpec(name="bench", data=DIGITS, attacks=("fgsm", "pgd"), epsilons=tuple(args.epsilons))
        command = ["python", "/opt/learner/evaluator/evaluate.py"]
        evaluation = _timed(robustness, evaluation_job, command, {"EVALUATION_SPEC": json.dumps(spec_to_dict(spec))})
        reports = evaluation_job / "results" / "evaluations"
        report = json.loads((reports / "bench.json").read_text(encoding="utf-8"))
        timed = {}
        for kind, image in evaluators.items():
            env = {"EVALUATION_SPEC": json.dumps(spec_to_dict(KINDS[kind]))}
            seconds = _timed(image, evaluation_job, command, env)
            inside = json.loads((reports / f"{KINDS[kind].name}.json").read_text(encoding="utf-8"))["seconds"]
            timed[kind] = (seconds, inside)
    attacks = len(spec.attacks) * len(spec.epsilons)
    print(f"training (pytorch image, 30 epochs, 1300 digits):   {training:7.1f} s")
    print(
        f"evaluation ({attacks} attack runs on 497 digits):        {evaluation:7.1f} s"
        f"  (in the evaluator: {report['seconds']:.1f} s)"
    )
    print(
        f"evaluation / training: {evaluation / training:.2f}; budget {BUDGET_S['robustness']:.0f} s: "
        f"{'within' if evaluation <= BUDGET_S['robustness'] else 'OVER'}"
    )
    _print("explainability", "2 methods, 497 digits (of 500 asked)", *timed["explainability"], training)
    _print("uncertainty", "497 digits", *timed["uncertainty"], training)


def _main_host() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-evaluations-") as scratch:
        job = _host_job(Path(scratch), "train")
        _host(job, ["-c", WRITE_DIGITS.replace("/job/data", str(job / "data"))])
        training = _host(job, [str(TRAIN)])
        shutil.copytree(job / "results" / "model", job / "model", dirs_exist_ok=True)
        print(f"training (host venv, 30 epochs, 1300 digits): {training:7.1f} s")
        for kind, spec in KINDS.items():
            evaluator = str(REPO / "frameworks" / kind / "evaluator" / "evaluate.py")
            seconds = _host(job, [evaluator], {"EVALUATION_SPEC": json.dumps(spec_to_dict(spec))})
            report = json.loads((job / "results" / "evaluations" / f"{spec.name}.json").read_text(encoding="utf-8"))
            _print(kind, "host venv, 497 digits", seconds, report["seconds"], training)


if __name__ == "__main__":
    main()
